//! A closure subscriber ([`Informer::subscribe_fn`](crate::Informer::subscribe_fn)):
//! the task that calls it, one event at a time.

use std::future::Future;

use kinformer_actors::listener::FeedReceiver;
use kinformer_actors::{Event, Object, SubscriberId};

use crate::panic::{call_caught, panic_message};

/// Calls `f` with each event of `feed` and awaits its future before the
/// next: an event counts as handled once that future finished (the next is
/// asked for only then), as an async actor handler's call returns. A panic
/// (in `f` or its future) ends this task and drops the feed with the event
/// not taken, so the listener finds its subscriber gone and removes itself,
/// as when a subscriber's actor panics.
pub(crate) async fn call_each<K, F, Fut>(
    mut feed: FeedReceiver<Event<K>>,
    mut f: F,
    id: SubscriberId,
) where
    K: Object,
    F: FnMut(Event<K>) -> Fut,
    Fut: Future<Output = ()>,
{
    while let Some(event) = std::future::poll_fn(|cx| feed.poll_recv(cx)).await {
        let handled = match call_caught(|| f(event)) {
            Ok(future) => future.await,
            Err(panic) => Err(panic),
        };
        match handled {
            Ok(()) => {}
            Err(panic) => {
                tracing::error!(
                    subscriber = %id,
                    panic = panic_message(panic.as_ref()),
                    "the subscriber's closure panicked; its subscription ends"
                );
                return;
            }
        }
    }
}
