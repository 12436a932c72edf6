//! The subscriber as its listener calls it: the next handler call of a
//! [`Delivery`] sent to the subscriber's actor, and the calls in flight.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{self, Poll, ready};

use actix::dev::RecipientRequest;
use actix::prelude::*;

use futures::future::Either;

use super::delivery::{Delivery, Sent};
use super::feed::{FeedSender, Taken};
use super::options::{INLINE_TURN, InlineHandler, Target};
use super::window::CallShape;
use crate::event::{Event, EventBatch};

/// The subscriber's actor, taking events one per call or in batches, or a
/// feed read outside actix, the same two ways.
pub(super) enum Sink<K: Send + Sync + 'static> {
    Events(Recipient<Event<K>>),
    Batches(Recipient<EventBatch<K>>),
    EventFeed(FeedSender<Event<K>>),
    BatchFeed(FeedSender<EventBatch<K>>),
    /// A function the listener calls in place ([`Target::Inline`]).
    Inline(InlineHandler<K>),
}

/// An inline handler panicked: the payload's message when it has one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("its inline function panicked: {0}")]
pub(super) struct HandlerPanicked(pub(super) String);

/// A handler call in flight: its answer, and what it carried.
pub(super) struct Call<K: Send + Sync + 'static> {
    request: Pin<Box<Request<K>>>,
    sent: Sent,
}

/// The answer of one handler call: a single notification or a batch, from
/// an actor or a feed.
type Request<K> =
    Either<Either<RecipientRequest<Event<K>>, RecipientRequest<EventBatch<K>>>, Taken>;

impl<K: Send + Sync + 'static> Sink<K> {
    /// The sink of `target`, and the shape of its calls.
    pub(super) fn new(target: Target<K>) -> (Self, CallShape) {
        match target {
            Target::Each(recipient) => (Sink::Events(recipient), CallShape::Events { depth: 1 }),
            Target::Pipelined { recipient, depth } => {
                (Sink::Events(recipient), CallShape::Events { depth })
            }
            Target::Batches { recipient, max } => (
                Sink::Batches(recipient),
                CallShape::Batches { max, calls: 1 },
            ),
            Target::Feed { feed, depth } => (Sink::EventFeed(feed), CallShape::Events { depth }),
            Target::FeedBatches { feed, max } => {
                (Sink::BatchFeed(feed), CallShape::Batches { max, calls: 2 })
            }
            // A "call" is a run of events through the function, returned
            // before the next: the window only bounds one run.
            Target::Inline(handler) => (
                Sink::Inline(handler),
                CallShape::Batches {
                    max: INLINE_TURN,
                    calls: 1,
                },
            ),
        }
    }

    /// True for a function called in place, which [`Sink::call`] never sends to.
    pub(super) fn is_inline(&self) -> bool {
        matches!(self, Sink::Inline(_))
    }

    /// Whether a failed call means the subscriber unsubscribed (a stream
    /// dropped while a call was in flight), not that it was lost.
    pub(super) fn unsubscribed(&self) -> bool {
        match self {
            Sink::EventFeed(feed) => feed.unsubscribed(),
            Sink::BatchFeed(feed) => feed.unsubscribed(),
            _ => false,
        }
    }

    /// Inline only: calls the function with each event of the next call (at
    /// most `limit` events), in order, and returns what the call carried (`None` when nothing is due,
    /// or for any other sink). A run of a shared chunk at the front is read
    /// in place, as one call; other events are taken one by one. A panic is caught and reported: the
    /// events of that call are lost with the subscription.
    pub(super) fn call_inline<R>(
        &mut self,
        delivery: &mut Delivery<K, R>,
        limit: usize,
    ) -> Option<Result<Sent, HandlerPanicked>> {
        let Sink::Inline(handler) = self else {
            return None;
        };
        let run = std::panic::AssertUnwindSafe(|| match delivery.next_call_front_run(limit) {
            Some((batch, sent)) => {
                batch.iter().for_each(&mut *handler);
                Some(sent)
            }
            None => delivery.next_call_up_to(limit, |event| handler(&event)),
        });
        match std::panic::catch_unwind(run) {
            Ok(sent) => sent.map(Ok),
            Err(panic) => Some(Err(HandlerPanicked(
                crate::panic::panic_message(&*panic).to_owned(),
            ))),
        }
    }

    /// Sends the next handler call of `delivery`, if it has one. A group of
    /// events goes all but the last unanswered (`do_send`, or pushed into
    /// the feed; a closed mailbox or a gone consumer fails the answered
    /// call), the last answered: that answer acknowledges the group.
    pub(super) fn call<R>(&self, delivery: &mut Delivery<K, R>) -> Option<Call<K>> {
        let (request, sent) = match self {
            Sink::Events(recipient) => {
                let (last, sent) = next_group(delivery, |e| recipient.do_send(e))?;
                (Either::Left(Either::Left(send_now(recipient, last))), sent)
            }
            Sink::Batches(recipient) => {
                let (batch, sent) = next_batch(delivery)?;
                (
                    Either::Left(Either::Right(send_now(recipient, batch))),
                    sent,
                )
            }
            Sink::EventFeed(feed) => {
                let (last, sent) = next_group(delivery, |e| feed.push(e))?;
                (Either::Right(feed.call(last)), sent)
            }
            Sink::BatchFeed(feed) => {
                let (batch, sent) = next_batch(delivery)?;
                (Either::Right(feed.call(batch)), sent)
            }
            Sink::Inline(_) => return None,
        };
        Some(Call {
            request: Box::pin(request),
            sent,
        })
    }
}

/// The next call's group of events: all but the last handed to
/// `unanswered`, the last returned to be sent answered.
fn next_group<K: Send + Sync + 'static, R>(
    delivery: &mut Delivery<K, R>,
    mut unanswered: impl FnMut(Event<K>),
) -> Option<(Event<K>, Sent)> {
    let mut last = None;
    let sent = delivery.next_call(|event| {
        if let Some(earlier) = last.replace(event) {
            unanswered(earlier);
        }
    })?;
    Some((last?, sent))
}

/// The next call's batch: a run of the chunk the Indexer shares when that
/// is what goes out next (no copy per subscriber), else its own events.
fn next_batch<K: Send + Sync + 'static, R>(
    delivery: &mut Delivery<K, R>,
) -> Option<(EventBatch<K>, Sent)> {
    if let Some(shared) = delivery.next_call_shared() {
        return Some(shared);
    }
    let mut batch = Vec::with_capacity(delivery.next_call_len());
    let sent = delivery.next_call(|event| batch.push(event))?;
    Some((EventBatch::from(batch), sent))
}

/// Handler calls sent and not yet returned, oldest first: the subscriber
/// answers in order, so one future awaits them all (the context polls every
/// spawned future at each wake-up: one per call cost O(pipeline) per event).
pub(super) struct Calls<K: Send + Sync + 'static> {
    queue: VecDeque<Call<K>>,
    /// A future awaits the calls. It ends when none is left; the next call
    /// starts one, which the context polls in the same pass (waking the
    /// ended one instead costs an extra poll per event).
    awaited: bool,
}

impl<K: Send + Sync + 'static> Calls<K> {
    pub(super) fn new() -> Self {
        Calls {
            queue: VecDeque::new(),
            awaited: false,
        }
    }

    pub(super) fn push(&mut self, call: Call<K>) {
        self.queue.push_back(call);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// True when calls are in flight and no future awaits them: start one.
    pub(super) fn start_awaiting(&mut self) -> bool {
        let start = !self.awaited && !self.queue.is_empty();
        self.awaited |= start;
        start
    }

    /// The outcome of the oldest call once it returned; `None` when none is
    /// in flight (the awaiting future ends).
    #[inline]
    pub(super) fn poll_returned(
        &mut self,
        task: &mut task::Context<'_>,
    ) -> Poll<Option<(Result<(), MailboxError>, Sent)>> {
        let Some(call) = self.queue.front_mut() else {
            self.awaited = false;
            return Poll::Ready(None);
        };
        let result = ready!(call.request.as_mut().poll(task));
        let sent = call.sent;
        self.queue.pop_front();
        Poll::Ready(Some((result, sent)))
    }
}

/// `send` through a fresh sender, so the message is in the subscriber's
/// mailbox when this returns. actix parks a sender whose `send` found the
/// mailbox over capacity (others send to the subscriber too); that sender's
/// next `send` is held back until polled again, with no wake-up registered,
/// and messages sent meanwhile overtake it. A fresh sender is never parked.
/// Costs a clone (three small allocations) per answered call.
fn send_now<M>(recipient: &Recipient<M>, message: M) -> RecipientRequest<M>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    recipient.clone().send(message)
}

/// Awaits the handler calls in flight of an actor `A` (the listener),
/// oldest first, until none is left, handing each one that returned to
/// `returned`; it stops early once the actor is no longer running.
pub(super) struct Replies<A: Actor, K: Send + Sync + 'static> {
    calls: fn(&mut A) -> &mut Calls<K>,
    returned: fn(&mut A, Result<(), MailboxError>, Sent, &mut A::Context),
}

impl<A: Actor, K: Send + Sync + 'static> Replies<A, K> {
    pub(super) fn new(
        calls: fn(&mut A) -> &mut Calls<K>,
        returned: fn(&mut A, Result<(), MailboxError>, Sent, &mut A::Context),
    ) -> Self {
        Replies { calls, returned }
    }
}

impl<A, K> ActorFuture<A> for Replies<A, K>
where
    A: Actor<Context = Context<A>>,
    K: Send + Sync + 'static,
{
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut Context<A>,
        task: &mut task::Context<'_>,
    ) -> Poll<()> {
        loop {
            let Some((result, sent)) = ready!((self.calls)(act).poll_returned(task)) else {
                return Poll::Ready(());
            };
            (self.returned)(act, result, sent, ctx);
            if ctx.state() != ActorState::Running {
                return Poll::Ready(());
            }
        }
    }
}
