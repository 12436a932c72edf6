//! The messages of the [`WorkQueue`](super::WorkQueue) actor, in one place.
//!
//! Producers (a controller's event feeders) send [`Add`]; workers send
//! [`Next`] (answered when a key is ready: no polling) and, for every key
//! they were handed, one [`Finish`]. Every message is answered at once
//! except [`Next`] and [`ShutDownWithDrain`].

use std::marker::PhantomData;
use std::time::Duration;

use actix::{Message, WeakRecipient};

use super::metrics::QueueMetrics;
use super::priority::Priority;
use super::queue::Ticket;
use super::rate_limiting::{Leftovers, Outcome};

/// Add keys now, each at its priority (WQ-2, PQ-3..PQ-5). Ignored after a shutdown.
#[derive(Debug)]
pub struct Add<K>(pub Vec<(K, Priority)>);

impl<K: 'static> Message for Add<K> {
    type Result = ();
}

/// Add a key after a delay (DQ-1; a zero delay adds now).
#[derive(Debug)]
pub struct AddAfter<K> {
    /// The key.
    pub key: K,
    /// How long from now.
    pub delay: Duration,
    /// Its priority when it becomes ready.
    pub priority: Priority,
}

impl<K: 'static> Message for AddAfter<K> {
    type Result = ();
}

/// Record a failure of a key and add it after the limiter's backoff (RL-8,
/// PQ-5). Answers the delay, or `None` when shutting down.
#[derive(Debug)]
pub struct AddRateLimited<K> {
    /// The key.
    pub key: K,
    /// Its priority when it becomes ready.
    pub priority: Priority,
}

impl<K: 'static> Message for AddRateLimited<K> {
    type Result = Option<Duration>;
}

/// A worker asks for the next key (WQ-3). Answered when one is ready, with
/// a [`Lease`] on it: the key is processing until its [`Finish`]; `None`
/// once the queue is shut down and nothing is left to hand out. Cancel-safe:
/// a request dropped before its answer loses nothing (the key goes to
/// another worker), nor does one dropped after its answer was sent but
/// before it was read (a `send` that lost a race in a `select!`, or under a
/// `timeout`): the unread lease puts its key back (PQ-9).
pub struct Next<K>(PhantomData<fn() -> K>);

impl<K> Next<K> {
    /// A request for the next key.
    pub fn new() -> Self {
        Next(PhantomData)
    }
}

impl<K> Default for Next<K> {
    fn default() -> Self {
        Next::new()
    }
}

impl<K> std::fmt::Debug for Next<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Next")
    }
}

impl<K: Send + 'static> Message for Next<K> {
    type Result = Option<Lease<K>>;
}

/// A key handed out by [`Next`], not yet taken by its worker. Take it with
/// [`into_ticket`](Self::into_ticket) as soon as the answer is read; a lease
/// dropped untaken (its request was dropped after the answer was sent) puts
/// its key back in the queue, first of its lane (PQ-9), where it would
/// otherwise stay processing with nobody to finish it.
pub struct Lease<K: Send + 'static> {
    /// `Some` until `into_ticket` takes it or the drop puts it back.
    ticket: Option<Ticket<K>>,
    queue: WeakRecipient<Release<K>>,
}

impl<K: Send + 'static> Lease<K> {
    pub(super) fn new(ticket: Ticket<K>, queue: WeakRecipient<Release<K>>) -> Self {
        Lease {
            ticket: Some(ticket),
            queue,
        }
    }

    /// The key's ticket: the worker's now, until its [`Finish`].
    pub fn into_ticket(mut self) -> Ticket<K> {
        self.ticket
            .take()
            .expect("a lease holds its ticket until it is taken")
    }
}

impl<K: Send + 'static> Drop for Lease<K> {
    fn drop(&mut self) {
        if let (Some(ticket), Some(queue)) = (self.ticket.take(), self.queue.upgrade()) {
            queue.do_send(Release(ticket.key));
        }
    }
}

impl<K: Send + std::fmt::Debug + 'static> std::fmt::Debug for Lease<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.ticket).finish()
    }
}

impl<K: Send + PartialEq + 'static> PartialEq for Lease<K> {
    fn eq(&self, other: &Self) -> bool {
        self.ticket == other.ticket
    }
}

/// Sent by a [`Lease`] dropped before its worker took it: puts its key
/// back (PQ-9). Not for workers: a key they took ends with [`Finish`].
#[derive(Debug)]
pub struct Release<K>(pub(super) K);

impl<K: Send + 'static> Message for Release<K> {
    type Result = ();
}

/// A worker finished a key it was handed: requeue it as `outcome` says, then
/// `done` (WQ-4). Answers false if the key was not processing.
#[derive(Debug)]
pub struct Finish<K> {
    /// The key handed out.
    pub key: K,
    /// How the work ended.
    pub outcome: Outcome,
}

impl<K: 'static> Message for Finish<K> {
    type Result = bool;
}

/// Forget a key's failures (RL-8); it stays queued if it is.
#[derive(Debug)]
pub struct Forget<K>(pub K);

impl<K: 'static> Message for Forget<K> {
    type Result = ();
}

/// A key's failures so far (RL-8).
#[derive(Debug)]
pub struct NumRequeues<K>(pub K);

impl<K: 'static> Message for NumRequeues<K> {
    type Result = u32;
}

/// The queue's metrics now (WQ-7).
#[derive(Debug, Default)]
pub struct GetMetrics;

impl Message for GetMetrics {
    type Result = QueueMetrics;
}

/// WQ-6 `ShutDown`: adds are ignored, ready keys are still handed out,
/// waiting keys are dropped (answered), a drain in progress is released.
pub struct ShutDown<K>(PhantomData<fn() -> K>);

impl<K> ShutDown<K> {
    /// A shutdown request.
    pub fn new() -> Self {
        ShutDown(PhantomData)
    }
}

impl<K> Default for ShutDown<K> {
    fn default() -> Self {
        ShutDown::new()
    }
}

impl<K: 'static> Message for ShutDown<K> {
    type Result = Vec<K>;
}

/// WQ-6 `ShutDownWithDrain`, bounded by `timeout`: answered once nothing is
/// processing and nothing is ready (PQ-7), when the timeout passes, or when a
/// [`ShutDown`] releases it.
#[derive(Debug)]
pub struct ShutDownWithDrain<K> {
    /// The longest the drain may take.
    pub timeout: Duration,
    _key: PhantomData<fn() -> K>,
}

impl<K> ShutDownWithDrain<K> {
    /// A drain that gives up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        ShutDownWithDrain {
            timeout,
            _key: PhantomData,
        }
    }
}

impl<K: 'static> Message for ShutDownWithDrain<K> {
    type Result = DrainReport<K>;
}

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReport<K> {
    /// Nothing was processing and nothing ready.
    pub drained: bool,
    /// Waiting keys dropped by the shutdown (DQ-2).
    pub dropped: Vec<K>,
    /// Keys still processing when it ended.
    pub processing: Vec<K>,
    /// Keys still ready when it ended.
    pub ready: usize,
}

/// PQ-8: shut down and hand nothing more out; answers what was left (ready,
/// pending and waiting keys). Processing keys may still finish; their
/// requeues are ignored. Workers waiting for a key get `None`.
pub struct Close<K>(PhantomData<fn() -> K>);

impl<K> Close<K> {
    /// A close request.
    pub fn new() -> Self {
        Close(PhantomData)
    }
}

impl<K> Default for Close<K> {
    fn default() -> Self {
        Close::new()
    }
}

impl<K: 'static> Message for Close<K> {
    type Result = Leftovers<K>;
}
