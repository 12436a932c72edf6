//! Every panic in the process, counted: the ones a simulation causes on
//! purpose ([`EXPECTED_PANIC`]) are silent, any other is kept (thread,
//! place, message) and reported as a divergence. A panic inside an actor is
//! otherwise invisible: tokio catches it and the actor just stops.

use std::sync::Mutex;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::subscriber::EXPECTED_PANIC;

static INSTALL: Once = Once::new();
static EXPECTED: AtomicU64 = AtomicU64::new(0);
static UNEXPECTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Installs the counting hook (once per process; the previous hook still
/// prints the unexpected panics).
pub fn install() {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if message.contains(EXPECTED_PANIC) {
                EXPECTED.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let thread = std::thread::current();
            let place = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            if let Ok(mut v) = UNEXPECTED.lock() {
                v.push(format!(
                    "thread {:?} at {place}: {message}",
                    thread.name().unwrap_or("?")
                ));
            }
            previous(info);
        }));
    });
}

/// Where the counts stood at some moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    expected: u64,
    unexpected: usize,
}

/// The counts now.
pub fn mark() -> Mark {
    Mark {
        expected: EXPECTED.load(Ordering::Relaxed),
        unexpected: UNEXPECTED.lock().map(|v| v.len()).unwrap_or(0),
    }
}

/// The unexpected panics since `mark` (in any thread of the process).
pub fn unexpected_since(mark: Mark) -> Vec<String> {
    UNEXPECTED
        .lock()
        .map(|v| v.get(mark.unexpected..).unwrap_or_default().to_vec())
        .unwrap_or_default()
}

/// How many expected panics since `mark`.
pub fn expected_since(mark: Mark) -> u64 {
    EXPECTED.load(Ordering::Relaxed) - mark.expected
}
