//! The messages a listener takes, from the Indexer (deliveries, the replay,
//! resync chunks, the sync signal) and from its subscription (stop), and
//! their answers.

use std::sync::Arc;

use actix::prelude::*;

use crate::event::Event;
use crate::key::ObjectKey;

/// The listener is gone (its subscriber stopped, or it was unsubscribed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("listener is gone")]
pub struct ListenerGone;

/// Notifications for the subscriber, in order. Answered once all are queued
/// (a full `Block` queue parks the rest until there is room). The Indexer
/// sends most unanswered, within the listener's [`DeliveryCredit`](super::DeliveryCredit).
/// The events are shared by every listener of the batch: a listener queues
/// them without copying and clones each as its subscriber takes it.
pub struct Deliver<K>(pub Arc<[Event<K>]>);

impl<K: 'static> Message for Deliver<K> {
    type Result = Result<(), ListenerGone>;
}

/// The cache as it was when the subscriber joined (SI-5): the `Initial`
/// adds it gets before any notification sent after this. Handed over whole
/// (a persistent map's state: O(1) to take) and read as the subscriber takes
/// it, so a late subscriber never holds the informer or the other
/// subscribers while it takes its replay; what comes after queues behind it,
/// within the subscriber's own bound.
pub struct Replay<K> {
    /// How many objects `objects` yields.
    pub len: usize,
    /// The objects, with their keys.
    pub objects: Box<dyn Iterator<Item = (ObjectKey, Arc<K>)> + Send>,
}

impl<K: 'static> Message for Replay<K> {
    type Result = ();
}

/// Resync notifications of a sweep (SI-11). They go to the listener's
/// [`ResyncLane`](super::ResyncLane), out of the way of real changes. The answer paces the
/// sweep: it comes once the lane is down to [`RESYNC_LANE_LOW`], so a sweep
/// advances at the pace its subscriber takes it (answering at once let a
/// 100k-object sweep monopolise the thread: BENCHMARKS.md, workload 5).
/// A subscriber that takes no resyncs for [`RESYNC_HOLD_MAX`] (busy with
/// real changes, or stalled) answers anyway: its own sweep slows down, it
/// never stops; its lane holds one resync per object at most.
pub struct DeliverResync<K>(pub Vec<Event<K>>);

impl<K: 'static> Message for DeliverResync<K> {
    type Result = Result<(), ListenerGone>;
}

/// A [`DeliverResync`] is answered once the resync lane holds at most this many...
pub const RESYNC_LANE_LOW: usize = 256;

/// ...or after this long.
pub const RESYNC_HOLD_MAX: std::time::Duration = std::time::Duration::from_millis(50);

/// The informer's initial list is in the cache (the Indexer got
/// [`FifoSynced`](crate::indexer::FifoSynced)): the listener syncs once its
/// own initial adds are handled (HS-2).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CacheSynced;

/// Stop after the handler call in progress (SI-12, SI-13); pending
/// notifications are dropped. Answered when the subscriber is idle.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopListener;
