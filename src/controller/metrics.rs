//! Reconcile metrics per controller, read as a snapshot (the library
//! registers no metrics: a program exports them, see the field docs for the
//! names controller-runtime uses).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kinformer_actors::workqueue::{Histogram, QueueMetrics};

/// Upper bounds (seconds) of the reconcile-time histogram: controller-runtime's.
pub const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// One controller's reconciles so far.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReconcileMetrics {
    /// The controller's name (the `controller` label).
    pub name: String,
    /// `controller_runtime_reconcile_total`: reconciles finished, whatever their result.
    pub reconciles: u64,
    /// `..._reconcile_total{result="success"}`: answered [`Action::Done`](super::Action::Done).
    pub successes: u64,
    /// `..._reconcile_total{result="requeue_after"}`: answered [`Action::RequeueAfter`](super::Action::RequeueAfter).
    pub requeues_after: u64,
    /// `controller_runtime_reconcile_errors_total`: answered an error,
    /// panicked or timed out (each requeued with backoff).
    pub errors: u64,
    /// `controller_runtime_reconcile_panics_total`: of which panics.
    pub panics: u64,
    /// Of which reconciles past the controller's timeout (cancelled).
    pub timeouts: u64,
    /// Reconciles cancelled because their key left this replica's scope
    /// (leadership lost, shard moved; CTL-11): not counted in `reconciles`.
    pub cancelled_out_of_scope: u64,
    /// `controller_runtime_reconcile_time_seconds`.
    pub duration: Histogram,
    /// `controller_runtime_active_workers`: reconciles in progress now.
    pub active: usize,
    /// `controller_runtime_max_concurrent_reconciles`: the workers.
    pub workers: usize,
    /// `watches` mapper calls that panicked (their objects mapped to no key).
    pub mapper_panics: u64,
    /// Deletes of keys outside this replica's scope remembered now, to be
    /// handed over if their keys come here (CTL-11).
    pub remembered_deletes: usize,
    /// Such deletes forgotten before their age because there were more
    /// than the maximum: each may go unreconciled after a hand-over.
    pub forgotten_deletes: u64,
}

/// A controller's reconcile and queue metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerMetrics {
    /// Its reconciles.
    pub reconcile: ReconcileMetrics,
    /// Its workqueue's (client-go's `workqueue_*` names).
    pub queue: QueueMetrics,
}

/// How one reconcile ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    Done,
    RequeueAfter,
    Error,
    Panic,
    Timeout,
    /// Cancelled: the key left the scope (CTL-11).
    OutOfScope,
}

/// The counters, updated by the workers once per reconcile.
pub(crate) struct ReconcileStats(Mutex<ReconcileMetrics>);

impl ReconcileStats {
    pub(crate) fn new(name: &str, workers: usize) -> Self {
        ReconcileStats(Mutex::new(ReconcileMetrics {
            name: name.to_owned(),
            reconciles: 0,
            successes: 0,
            requeues_after: 0,
            errors: 0,
            panics: 0,
            timeouts: 0,
            cancelled_out_of_scope: 0,
            duration: Histogram::new(RECONCILE_BUCKETS),
            active: 0,
            workers,
            mapper_panics: 0,
            remembered_deletes: 0,
            forgotten_deletes: 0,
        }))
    }

    fn with<T>(&self, f: impl FnOnce(&mut ReconcileMetrics) -> T) -> T {
        // Every update is a few additions: a panic cannot leave them torn.
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn started(&self) {
        self.with(|m| m.active += 1);
    }

    /// A reconcile cancelled by a stop past its deadline.
    pub(crate) fn aborted(&self) {
        self.with(|m| m.active -= 1);
    }

    pub(crate) fn ended(&self, how: Ended, took: Duration) {
        self.with(|m| {
            m.active -= 1;
            if how == Ended::OutOfScope {
                m.cancelled_out_of_scope += 1;
                return;
            }
            m.reconciles += 1;
            m.duration.observe(took);
            match how {
                Ended::OutOfScope => {}
                Ended::Done => m.successes += 1,
                Ended::RequeueAfter => m.requeues_after += 1,
                Ended::Error => m.errors += 1,
                Ended::Panic => {
                    m.errors += 1;
                    m.panics += 1;
                }
                Ended::Timeout => {
                    m.errors += 1;
                    m.timeouts += 1;
                }
            }
        });
    }

    /// The counters now, with `mapper_panics` from the feeders and the
    /// remembered deletes' `(remembered, forgotten)`.
    pub(crate) fn snapshot(&self, mapper_panics: u64, deletes: (usize, u64)) -> ReconcileMetrics {
        self.with(|m| ReconcileMetrics {
            mapper_panics,
            remembered_deletes: deletes.0,
            forgotten_deletes: deletes.1,
            ..m.clone()
        })
    }
}
