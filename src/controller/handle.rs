//! A running controller: its sync state, metrics, and graceful stop (CTL-5).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kinformer_actors::workqueue::{Close, GetMetrics};
use kinformer_actors::{Object, ObjectKey};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::error::ControllerError;
use super::metrics::{ControllerMetrics, ReconcileMetrics};
use super::worker::{Phase, Workers};
use crate::leader::LeaderEvent;
use crate::subscription::Subscription;

/// The elector a controller runs under (CTL-10), for its handle to expose.
pub(crate) struct Leadership {
    pub(crate) leading: watch::Receiver<bool>,
    pub(crate) events: broadcast::Sender<LeaderEvent>,
}

/// One feeder's subscription, whatever its object type.
pub(crate) trait Source: Send {
    /// Turns `true` once the informer synced and the feeder queued its initial keys.
    fn synced(&self) -> watch::Receiver<bool>;
    /// Ends the subscription (the handler call in progress returns first).
    fn unsubscribe(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()>>>;
}

impl<S: Object> Source for Subscription<S> {
    fn synced(&self) -> watch::Receiver<bool> {
        self.synced_channel()
    }

    fn unsubscribe(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()>>> {
        Box::pin((*self).unsubscribe())
    }
}

/// What a stop left undone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StopReport {
    /// Keys that were queued, waiting for a delay or a backoff, or asked for
    /// a requeue while the stop was under way: not reconciled since. Sorted.
    pub left: Vec<ObjectKey>,
    /// Keys whose reconcile was still running at the deadline, cancelled. Sorted.
    pub cancelled: Vec<ObjectKey>,
}

/// A running controller. Dropping it stops the controller without waiting
/// (reconciles in progress finish, nothing new starts); [`stop`](Self::stop)
/// waits and reports.
pub struct ControllerHandle<K: Object> {
    pub(super) workers: Arc<Workers<K>>,
    pub(super) phase: watch::Sender<Phase>,
    pub(super) sources: Vec<Box<dyn Source>>,
    pub(super) tasks: Vec<JoinHandle<()>>,
    /// Tells the feeders to stop at their next batch.
    pub(super) feeders_closed: Arc<AtomicBool>,
    pub(super) mapper_panics: Arc<AtomicU64>,
    pub(super) leadership: Option<Leadership>,
    pub(super) stopped: bool,
}

impl<K: Object> std::fmt::Debug for ControllerHandle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("name", &self.workers.name)
            .field("phase", &*self.phase.borrow())
            .field("informers", &self.sources.len())
            .finish_non_exhaustive()
    }
}

impl<K: Object> ControllerHandle<K> {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.workers.name
    }

    /// True once every informer synced and reconciles may run (CTL-1).
    pub fn has_synced(&self) -> bool {
        *self.phase.borrow() == Phase::Running
    }

    /// Waits until [`has_synced`](Self::has_synced), at most `timeout`.
    pub async fn wait_for_sync(&self, timeout: Duration) -> Result<(), ControllerError> {
        let mut phase = self.phase.subscribe();
        match tokio::time::timeout(timeout, phase.wait_for(|p| *p != Phase::Syncing)).await {
            Ok(Ok(p)) if *p == Phase::Running => Ok(()),
            Ok(_) => Err(ControllerError::Stopped),
            Err(_) => Err(ControllerError::SyncTimeout {
                waited: timeout,
                unsynced: self
                    .sources
                    .iter()
                    .filter(|s| !*s.synced().borrow())
                    .count(),
            }),
        }
    }

    /// Whether this replica leads, for a controller run under an elector
    /// ([`Controller::leader_elected`](super::Controller::leader_elected));
    /// `None` otherwise.
    pub fn is_leader(&self) -> Option<bool> {
        self.leadership.as_ref().map(|l| *l.leading.borrow())
    }

    /// The elector's events from now on (became leader, stepped down, new
    /// leader observed; LE-10), for a controller run under one; `None`
    /// otherwise. A receiver 64 events behind gets `Lagged`.
    pub fn leader_events(&self) -> Option<broadcast::Receiver<LeaderEvent>> {
        self.leadership.as_ref().map(|l| l.events.subscribe())
    }

    /// The reconcile counters now.
    pub fn reconcile_metrics(&self) -> ReconcileMetrics {
        self.workers.stats.snapshot(
            self.mapper_panics.load(Ordering::Relaxed),
            self.workers.last_known.standby_counts(),
        )
    }

    /// The reconcile counters and the queue's metrics now.
    pub async fn metrics(&self) -> Result<ControllerMetrics, ControllerError> {
        let queue = self
            .workers
            .queue()
            .send(GetMetrics)
            .await
            .map_err(|_| ControllerError::Stopped)?;
        Ok(ControllerMetrics {
            reconcile: self.reconcile_metrics(),
            queue,
        })
    }

    /// Graceful stop (CTL-5): the queue hands out no key any more, the
    /// feeders unsubscribe, reconciles in progress run until `deadline` and
    /// are cancelled past it. Answers what was left and what was cancelled.
    pub async fn stop(mut self, deadline: Duration) -> StopReport {
        self.stopped = true;
        self.phase.send_replace(Phase::Stopping);
        // The feeders add nothing from now on; the queue is closed before
        // they unsubscribe, so no reconcile starts while they do.
        self.feeders_closed.store(true, Ordering::SeqCst);
        self.workers.closing.store(true, Ordering::SeqCst);
        let left = self
            .workers
            .queue()
            .send(Close::new())
            .await
            .unwrap_or_default();
        for source in std::mem::take(&mut self.sources) {
            source.unsubscribe().await;
        }
        let tasks = std::mem::take(&mut self.tasks);
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let mut joined = futures::future::join_all(tasks);
        let mut cancelled = Vec::new();
        if tokio::time::timeout(deadline, &mut joined).await.is_err() {
            for task in aborts {
                task.abort();
            }
            // Each aborted reconcile names itself as its future is dropped;
            // one that blocks its thread is never dropped: still in progress.
            let _ = tokio::time::timeout(ABORTED_WITHIN, joined).await;
            cancelled = self.workers.take_cancelled();
            cancelled.extend(self.workers.in_progress());
        }
        let mut left: Vec<ObjectKey> = left.queued.into_iter().chain(left.waiting).collect();
        left.extend(self.workers.left_after_close());
        left.sort();
        left.dedup();
        cancelled.sort();
        tracing::info!(
            controller = %self.workers.name,
            left = left.len(),
            cancelled = cancelled.len(),
            "controller stopped"
        );
        StopReport { left, cancelled }
    }
}

/// How long a stop waits for the reconciles it aborted to be dropped.
const ABORTED_WITHIN: Duration = Duration::from_millis(200);

impl<K: Object> Drop for ControllerHandle<K> {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.phase.send_replace(Phase::Stopping);
        self.feeders_closed.store(true, Ordering::SeqCst);
        self.workers.closing.store(true, Ordering::SeqCst);
        self.workers.queue.do_send(Close::new());
    }
}
