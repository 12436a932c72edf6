//! What a subscription asks of its listener: where it delivers and how its
//! queue overflows.

use actix::prelude::*;

use super::feed::FeedSender;
use super::queue::OverflowPolicy;
use crate::event::{Event, EventBatch};

/// Options of one subscription that the listener enforces.
#[derive(Debug, Clone, Copy)]
pub struct ListenerOptions {
    /// Block (bounded, back-pressure) or Coalesce (merge per key).
    pub policy: OverflowPolicy,
    /// Bound of a Block queue; allocation hint for Coalesce.
    pub capacity: usize,
}

/// A handler function the listener calls itself, in place (see [`Target::Inline`]).
pub type InlineHandler<K> = Box<dyn FnMut(&Event<K>) + Send>;

/// Most events an inline handler is called with in one turn of its
/// listener: a replay of a large cache is handled a turn at a time, so the
/// thread's other actors run in between.
pub const INLINE_TURN: usize = 1024;

/// A turn of an inline handler that takes this long held every actor of
/// its thread back: it is counted ([`ListenerStats::slow_inline_turns`](super::ListenerStats::slow_inline_turns))
/// and logged, at most once per [`SLOW_INLINE_WARN_EVERY`] per listener.
pub const SLOW_INLINE_TURN: std::time::Duration = std::time::Duration::from_millis(100);

/// At most one warning about slow inline turns per listener this often.
pub const SLOW_INLINE_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a listener delivers: one notification per handler call, or batches.
pub enum Target<K: Send + Sync + 'static> {
    /// One [`Event`] per handler call (client-go's one notification at a
    /// time); the next is sent when the previous call returned, so this suits
    /// any handler, async ones included.
    Each(Recipient<Event<K>>),
    /// One [`Event`] per handler call, with up to `depth` of them in the
    /// subscriber's mailbox at once. The mailbox still hands them over one at
    /// a time and in order, but without a round trip per event. Only for
    /// handlers that finish their work inside `handle`: an async handler
    /// (`ResponseFuture`, `ResponseActFuture`) would start the next
    /// notification before the previous one finished.
    Pipelined {
        /// The subscriber.
        recipient: Recipient<Event<K>>,
        /// Most notifications sent and not yet handled (at least 1).
        depth: usize,
    },
    /// [`EventBatch`]es of up to `max` events per handler call.
    Batches {
        /// The subscriber.
        recipient: Recipient<EventBatch<K>>,
        /// Most events in one batch (at least 1).
        max: usize,
    },
    /// One [`Event`] per call into a feed read outside actix, up to `depth`
    /// of them pushed and not yet taken; a call is handled once taken.
    Feed {
        /// The feed's listener end.
        feed: FeedSender<Event<K>>,
        /// Most events pushed and not yet taken (at least 1).
        depth: usize,
    },
    /// [`EventBatch`]es of up to `max` events per call into a feed read
    /// outside actix; a batch is handled once taken.
    FeedBatches {
        /// The feed's listener end.
        feed: FeedSender<EventBatch<K>>,
        /// Most events in one batch (at least 1).
        max: usize,
    },
    /// One [`Event`] per call of a function the listener calls itself, on
    /// the listener's thread, with no message, channel or answer per event:
    /// a call is handled once it returned. For handlers that only record or
    /// hand work on (a workqueue, a channel), as client-go's handler
    /// functions do on their listener's goroutine. Whatever the function
    /// does delays every actor on that thread: keep it short. A panic in it
    /// ends the subscription, as a panicking subscriber actor does.
    Inline(InlineHandler<K>),
}

impl<K: Send + Sync + 'static> From<Recipient<Event<K>>> for Target<K> {
    fn from(recipient: Recipient<Event<K>>) -> Self {
        Target::Each(recipient)
    }
}
