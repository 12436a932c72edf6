//! A subscription as a `futures::Stream`, for tokio code without actors.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use kinformer_actors::listener::FeedReceiver;
use kinformer_actors::{Event, Object};

use crate::subscription::Subscription;

/// A subscription read as a [`Stream`] of [`Event`]s
/// ([`Informer::stream`](crate::Informer::stream)), or of
/// [`EventBatch`](crate::EventBatch)es
/// ([`Informer::stream_batches`](crate::Informer::stream_batches)).
///
/// The guarantees of an actor subscriber hold: per-key order, the cache as
/// `Initial` adds first, then [`Subscription::has_synced`], resyncs at this
/// subscription's period, and its overflow policy. An item is *handled*
/// once the consumer polls the stream again after it (as an actor's handler
/// call counts once it returned), so [`Subscription::has_synced`] means the
/// consumer is done with every initial add. Up to a window of items wait in
/// the stream's channel ([`SubscribeOptions::pipeline`](crate::SubscribeOptions::pipeline)
/// events for [`Informer::stream`](crate::Informer::stream), one batch for
/// [`Informer::stream_batches`](crate::Informer::stream_batches)): with
/// `Block`, a consumer that stops polling holds the informer back beyond it
/// (nothing is lost); with `Coalesce`, what is not in the window yet is
/// merged to the latest state per key.
///
/// Dropping the stream unsubscribes. It is `Send`: consume it in a spawned
/// task, or in an actor's context (`ctx.add_stream`, or
/// [`Workers::start_reading`](crate::Workers::start_reading) on threads of
/// their own). It ends (`None`) only when the subscription ended another way: an
/// informer stop does not end it (what was queued still arrives), so select
/// on your own shutdown signal. [`EventStream::subscription`] has its sync
/// state and counters; clone that handle to watch them from elsewhere.
pub struct EventStream<K: Object, T = Event<K>> {
    subscription: Subscription<K>,
    feed: FeedReceiver<T>,
}

impl<K: Object, T> EventStream<K, T> {
    pub(crate) fn new(subscription: Subscription<K>, feed: FeedReceiver<T>) -> Self {
        EventStream { subscription, feed }
    }

    /// The subscription behind this stream: its sync state, counters and resync period.
    pub fn subscription(&self) -> &Subscription<K> {
        &self.subscription
    }

    /// The subscription, to change its resync period.
    pub fn subscription_mut(&mut self) -> &mut Subscription<K> {
        &mut self.subscription
    }

    /// Unsubscribes and waits until the listener stopped; what was not
    /// taken yet is dropped (SI-12). Dropping the stream does the same
    /// without waiting.
    pub async fn unsubscribe(self) {
        let subscription = self.subscription.clone();
        drop(self);
        subscription.unsubscribe().await;
    }
}

// No field is structurally pinned: the stream is `Unpin` whatever `K` is.
impl<K: Object, T> Unpin for EventStream<K, T> {}

impl<K: Object, T> Stream for EventStream<K, T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        // Taken: the listener's call that carried it is answered.
        self.feed.poll_recv(cx)
    }
}

impl<K: Object, T> Drop for EventStream<K, T> {
    fn drop(&mut self) {
        // Before the feed is dropped (below, with the fields): the Indexer
        // forgets this subscriber as unsubscribed, and the listener does not
        // take a call in flight failing for a lost subscriber.
        self.feed.unsubscribing();
        self.subscription.unsubscribe_now();
    }
}

impl<K: Object, T> std::fmt::Debug for EventStream<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("subscription", &self.subscription)
            .finish_non_exhaustive()
    }
}
