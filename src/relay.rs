//! Handing a listener's notifications to a closure's task outside actix
//! ([`Informer::subscribe_fn`](crate::Informer::subscribe_fn)): a [`Relay`]
//! actor stands in for the subscriber's actor, and its handler call returns
//! once the closure's future finished. (Streams need no actor: the listener
//! pushes into their feed, `kinformer_actors::listener::feed`.)
//!
//! The listener sends the next handler call only when the previous one
//! returned (`Target::Each`), so at most one [`Handoff`] waits in the
//! channel at any time: flow control stays the listener's answers and
//! credits, and `Coalesce` keeps merging everything not yet taken.

use actix::prelude::*;
use futures::channel::oneshot;
use tokio::sync::mpsc;

/// One notification and the answer of the handler call that carried it:
/// send `()` once the consumer took (or handled) it. Dropping the sender
/// instead tells the listener its subscriber is gone.
pub(crate) struct Handoff<M> {
    pub(crate) message: M,
    pub(crate) done: oneshot::Sender<()>,
}

/// The consumer's end: at most one [`Handoff`] at a time; `None` once the
/// listener stopped (the relay is gone).
pub(crate) type Handoffs<M> = mpsc::UnboundedReceiver<Handoff<M>>;

/// The actor a listener delivers to on behalf of a consumer outside actix.
pub(crate) struct Relay<M> {
    to_consumer: mpsc::UnboundedSender<Handoff<M>>,
}

impl<M: Message<Result = ()> + Send + 'static> Relay<M> {
    /// A relay and the consumer's end of its channel (not started).
    pub(crate) fn new() -> (Self, Handoffs<M>) {
        let (to_consumer, handoffs) = mpsc::unbounded_channel();
        (Relay { to_consumer }, handoffs)
    }
}

impl<M: Message<Result = ()> + Send + 'static> Actor for Relay<M> {
    type Context = Context<Self>;
}

impl<M: Message<Result = ()> + Send + 'static> Handler<M> for Relay<M> {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, message: M, ctx: &mut Context<Self>) -> Self::Result {
        let (done, taken) = oneshot::channel();
        if self.to_consumer.send(Handoff { message, done }).is_err() {
            return gone(ctx);
        }
        Box::pin(async move { taken.await.is_ok() }.into_actor(self).then(
            |taken, _, ctx| -> ResponseActFuture<Self, ()> {
                if taken {
                    Box::pin(fut::ready(()))
                } else {
                    gone(ctx)
                }
            },
        ))
    }
}

/// The consumer is gone (the stream dropped, the closure panicked): stop,
/// and never answer the call in progress. Stopping drops that answer, so the
/// listener sees its subscriber gone at once, as when a subscriber's own
/// actor stops, rather than at its next delivery.
fn gone<M>(ctx: &mut Context<Relay<M>>) -> ResponseActFuture<Relay<M>, ()>
where
    M: Message<Result = ()> + Send + 'static,
{
    ctx.stop();
    Box::pin(fut::wrap_future(futures::future::pending()))
}
