//! What a reconcile is given and what it answers.

use std::sync::Arc;
use std::time::Duration;

use kinformer_actors::ObjectKey;
use kinformer_actors::workqueue::Priority;

/// One reconcile of one key: the object's state now, from the primary
/// informer's cache.
#[derive(Debug)]
#[non_exhaustive]
pub struct Request<K> {
    /// The key to reconcile (`namespace/name`, or `name`).
    pub key: ObjectKey,
    /// The cached object now; `None` once it is deleted (or it never existed:
    /// a secondary object may name an owner that is gone).
    pub object: Option<Arc<K>>,
    /// When `object` is `None`: the last state the controller saw of it (the
    /// final state of its delete, or a tombstone's last known state), kept
    /// until a reconcile of the deleted key succeeds (CTL-9).
    pub last_known: Option<Arc<K>>,
    /// The key's consecutive failed reconciles so far (0 after a success).
    pub retries: u32,
    /// The priority it was queued at (PQ-1): `Low` for the initial list and
    /// resyncs, `Normal` for real changes.
    pub priority: Priority,
}

impl<K> Request<K> {
    /// True when the object is not in the cache (deleted, or never seen).
    pub fn is_deleted(&self) -> bool {
        self.object.is_none()
    }
}

/// What a successful reconcile asks for next. Either way the key's failures
/// are forgotten (CTL-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the next change.
    Done,
    /// Reconcile again after this delay (or sooner, at the next change).
    RequeueAfter(Duration),
}

impl Action {
    /// [`Action::Done`].
    pub fn done() -> Self {
        Action::Done
    }

    /// [`Action::RequeueAfter`].
    pub fn requeue_after(delay: Duration) -> Self {
        Action::RequeueAfter(delay)
    }
}
