//! The run's thread watchdog. The async step limit of [`simulate`] cannot
//! fire when the run's thread itself is blocked (a synchronous deadlock, a
//! busy loop in a handler): the timer never gets polled. This thread can: a
//! phase that lasts past its limit is reported with the seed and the phase
//! on stderr, and the default action ends the process, so a stuck run fails
//! CI instead of hanging it.
//!
//! [`simulate`]: crate::simulate

use std::io::Write as _;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the watchdog does with its report when a phase is stuck.
pub type OnStuck = Box<dyn Fn(&str) + Send>;

/// Watches one run from another thread until dropped.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled on drop, so the thread ends at once.
    ended: Condvar,
}

struct State {
    /// What the run is doing ("step 12 (Fault(Stall(..)))").
    phase: String,
    /// When `phase` began: the limit counts from here.
    since: Instant,
    /// Set on drop: the thread returns.
    done: bool,
}

impl Watchdog {
    /// Starts watching: `label` (the seed and its reproduction) heads the
    /// report; a phase lasting past `limit` calls `on_stuck` once.
    pub fn start(label: String, limit: Duration, on_stuck: OnStuck) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                phase: "starting".into(),
                since: Instant::now(),
                done: false,
            }),
            ended: Condvar::new(),
        });
        let watched = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("kinformer-sim-watchdog".into())
            .spawn(move || watch(&watched, &label, limit, &on_stuck))
            .ok();
        Watchdog { shared, thread }
    }

    /// Starts watching with the default action: the report on stderr
    /// (bypassing the test harness's capture, which would lose it) and the
    /// process aborted.
    pub fn aborting(label: String, limit: Duration) -> Self {
        Self::start(
            label,
            limit,
            Box::new(|report| {
                let _ = writeln!(std::io::stderr(), "{report}");
                std::process::abort();
            }),
        )
    }

    /// The run entered `phase`: its limit starts now.
    pub fn phase(&self, phase: impl Into<String>) {
        let mut state = self.shared.lock();
        state.phase = phase.into();
        state.since = Instant::now();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.lock().done = true;
        self.shared.ended.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn watch(shared: &Shared, label: &str, limit: Duration, on_stuck: &OnStuck) {
    let mut state = shared.lock();
    loop {
        if state.done {
            return;
        }
        let spent = state.since.elapsed();
        if spent >= limit {
            let report = format!(
                "kinformer-sim watchdog: {label}: {} has not finished after {spent:?} \
                 (limit {limit:?}); the run's thread is blocked",
                state.phase
            );
            drop(state);
            on_stuck(&report);
            return;
        }
        state = shared
            .ended
            .wait_timeout(state, limit - spent)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn recording(limit: Duration) -> (Watchdog, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let dog = Watchdog::start(
            "seed 7 (reproduce: X)".into(),
            limit,
            Box::new(move |r| {
                let _ = tx.lock().unwrap().send(r.to_owned());
            }),
        );
        (dog, rx)
    }

    #[test]
    fn a_blocked_phase_is_reported_with_the_seed_and_the_phase() {
        let (dog, rx) = recording(Duration::from_millis(50));
        dog.phase("step 3 (Pause(1s))");
        // The run's thread blocked: the report comes anyway.
        let report = rx.recv_timeout(Duration::from_secs(10)).expect("a report");
        assert!(report.contains("seed 7"), "{report}");
        assert!(report.contains("step 3 (Pause(1s))"), "{report}");
        drop(dog);
    }

    #[test]
    fn phases_within_their_limit_are_not_reported() {
        let (dog, rx) = recording(Duration::from_secs(2));
        for i in 0..5 {
            dog.phase(format!("step {i}"));
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(dog);
        assert!(rx.try_recv().is_err(), "reported a run that made progress");
    }

    #[test]
    fn drop_ends_the_thread_at_once() {
        let (dog, _rx) = recording(Duration::from_secs(3600));
        let t0 = Instant::now();
        drop(dog);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
