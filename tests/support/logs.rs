//! Captures the `tracing` output of the current thread (an actix test's
//! System runs on it) as text lines, to check what was logged.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The captured lines.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// The buffer the current thread's events go to, while a capture is on.
type Buffer = Arc<Mutex<Vec<u8>>>;

thread_local! {
    static SINK: std::cell::RefCell<Option<Buffer>> = const { std::cell::RefCell::new(None) };
}

/// Writes to the current thread's buffer, or nowhere.
struct ThreadSink;

impl Write for ThreadSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        SINK.with_borrow(|sink| {
            if let Some(sink) = sink {
                sink.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Ends the current thread's capture when dropped.
pub struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        SINK.with_borrow_mut(|sink| *sink = None);
    }
}

/// Captures this thread's events at WARN and above (every target) until the
/// guard is dropped.
///
/// One subscriber serves the whole test process, set once and never
/// replaced, and writes each thread's events to that thread's capture: a
/// subscriber set per thread (`set_default`) while other tests of the same
/// binary start and drop theirs concurrently made `tracing` lose a
/// callsite's events now and then (a test found no line at all).
pub fn capture(level: tracing::Level) -> (Captured, CaptureGuard) {
    assert_eq!(
        level,
        tracing::Level::WARN,
        "the process-wide capture is at WARN"
    );
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(|| ThreadSink)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in a test binary that captures logs");
    });
    let captured = Captured::default();
    SINK.with_borrow_mut(|sink| *sink = Some(captured.0.clone()));
    (captured, CaptureGuard(()))
}
