//! The messages the DeltaFIFO actor takes, all from the Reflector, and their
//! answers.

use std::sync::Arc;

use actix::prelude::*;

/// One watch event, as the Reflector hands it over.
pub enum WatchDelta<K> {
    /// `ADDED`.
    Added(Arc<K>),
    /// `MODIFIED`.
    Modified(Arc<K>),
    /// `DELETED`, with the server's final state.
    Deleted(Arc<K>),
}

/// The DeltaFIFO has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the delta fifo is closed")]
pub struct FifoClosed;

/// Watch events, in order. Answered when the queue has room.
pub struct Enqueue<K>(pub Vec<WatchDelta<K>>);

impl<K: 'static> Message for Enqueue<K> {
    type Result = Result<(), FifoClosed>;
}

/// One page of a list whose end is a [`Replace`] with `continues`, queued
/// at once so the Indexer takes the list while it is read (DF-9 step 1).
/// Answered when the queue has room: a long list is read no faster than it
/// is cached, and never held whole.
pub struct ListPage<K> {
    /// The page's objects.
    pub objects: Vec<Arc<K>>,
    /// The first page of a list: pages of an earlier list that never ended
    /// are void.
    pub first: bool,
    /// A page of a snapshot restored from disk, not of a list: as the
    /// initial population, its adds are `Cause::Restored`.
    pub restored: bool,
}

impl<K: 'static> Message for ListPage<K> {
    type Result = Result<(), FifoClosed>;
}

/// The complete state from a list (DF-9). Answered when the queue has room.
pub struct Replace<K> {
    /// Every object of the list, or those after its [`ListPage`]s.
    pub objects: Vec<Arc<K>>,
    /// [`ListPage`]s of this list came before: they are part of it.
    pub continues: bool,
    /// The list's resourceVersion.
    pub resource_version: String,
    /// The objects are a snapshot restored from disk, not a list: as the
    /// initial population, their adds are `Cause::Restored`.
    pub restored: bool,
}

impl<K: 'static> Message for Replace<K> {
    type Result = Result<(), FifoClosed>;
}

/// The watch reached this resourceVersion with no change since the last
/// [`Enqueue`] (a bookmark): once the queue is drained, the cache is the
/// server's state at it (see [`Process::consistent_at`](crate::indexer::Process)).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Progress(pub String);
