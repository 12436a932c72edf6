//! The messages the Indexer actor takes: batches and the sync signal from the
//! DeltaFIFO, subscriptions from the informer handle, due resyncs from the
//! resync timer, and stopped listeners.

use std::sync::Arc;

use actix::prelude::*;

use crate::delta::Popped;
use crate::event::Cause;
use crate::listener::{DeliveryCredit, Listener, ListenerStats};
use crate::subscriber::SubscriberId;

/// A batch of popped deltas. Answered once the listeners accepted its events.
pub struct Process<K> {
    /// The popped keys with their deltas.
    pub batch: Vec<Popped<K>>,
    /// Set when this batch empties the DeltaFIFO: once it is applied, the
    /// cache is the server's state at this resourceVersion (every change
    /// the DeltaFIFO accepted up to it is applied, none after). A snapshot
    /// writer commits only such states ([`SnapshotFeed`](super::SnapshotFeed)).
    pub consistent_at: Option<String>,
    /// The batch belongs to an initial population restored from a snapshot:
    /// its adds are `Cause::Restored`, not `Cause::Initial`.
    pub restored: bool,
}

impl<K> Process<K> {
    /// A batch with no resourceVersion of its own, not restored.
    pub fn new(batch: Vec<Popped<K>>) -> Self {
        Process {
            batch,
            consistent_at: None,
            restored: false,
        }
    }

    /// The cause of the adds of the initial population in this batch.
    pub fn initial_cause(&self) -> Cause {
        if self.restored {
            Cause::Restored
        } else {
            Cause::Initial
        }
    }
}

impl<K: 'static> Message for Process<K> {
    type Result = ();
}

/// The DeltaFIFO has synced (DF-15): the initial list has been popped and
/// processed, so listeners may sync once their initial adds are handled.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FifoSynced;

/// Add a listener; it first receives the current cache as `Initial` adds.
pub struct Subscribe<K: Send + Sync + 'static> {
    /// The subscription's id.
    pub id: SubscriberId,
    /// Its listener actor.
    pub listener: Addr<Listener<K>>,
    /// Its credit ([`Listener::credit`]).
    pub credit: Arc<DeliveryCredit>,
    /// Its counters: whether it was unsubscribed.
    pub stats: Arc<ListenerStats>,
}

impl<K: Send + Sync + 'static> Subscribe<K> {
    /// Starts `listener` (on the current arbiter) and subscribes it as `id`.
    pub fn start(id: SubscriberId, listener: Listener<K>) -> Self {
        let credit = listener.credit();
        let stats = Arc::clone(&listener.stats);
        Subscribe {
            id,
            stats,
            listener: listener.start(),
            credit,
        }
    }
}

impl<K: Send + Sync + 'static> Message for Subscribe<K> {
    type Result = ();
}

/// Remove a listener (idempotent, SI-12).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Unsubscribe(pub SubscriberId);

/// A listener stopped: it was unsubscribed, or a call to its subscriber found
/// the actor gone (at once when a call was in flight, else at its next
/// event). Forget it now rather than at the next delivery to it; counted as
/// lost unless unsubscribed first.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ListenerStopped(pub SubscriberId);

/// These subscribers are due for a resync (SI-10). Answered with the ids the
/// Indexer no longer knows (their subscribers are gone), so the timer drops them.
#[derive(Message)]
#[rtype(result = "Vec<SubscriberId>")]
pub struct ResyncDue(pub Vec<SubscriberId>);

/// A compact cache's compactor has results ready while the Indexer may be
/// idle: publishing installs them, so the decoded objects they replace are
/// freed (sent by the compactor's thread, at most once per batch of results).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Compacted;
