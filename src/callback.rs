//! A closure subscriber ([`Informer::subscribe_fn`](crate::Informer::subscribe_fn)):
//! the task that calls it, one event at a time.

use std::future::Future;

use kinformer_actors::{Event, Object, SubscriberId};

use crate::panic::{call_caught, panic_message};
use crate::relay::{Handoff, Handoffs};

/// Calls `f` with each event and awaits its future before the next: the
/// handler call returns once that future finished, as an async actor
/// handler's does. A panic (in `f` or its future) ends this task without
/// answering, so the listener finds its subscriber gone and removes itself,
/// as when a subscriber's actor panics.
pub(crate) async fn call_each<K, F, Fut>(
    mut handoffs: Handoffs<Event<K>>,
    mut f: F,
    id: SubscriberId,
) where
    K: Object,
    F: FnMut(Event<K>) -> Fut,
    Fut: Future<Output = ()>,
{
    while let Some(Handoff { message, done }) = handoffs.recv().await {
        let handled = match call_caught(|| f(message)) {
            Ok(future) => future.await,
            Err(panic) => Err(panic),
        };
        match handled {
            Ok(()) => {
                let _ = done.send(());
            }
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
