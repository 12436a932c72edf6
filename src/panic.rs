//! Calling user code that may panic (closure subscribers, reconcilers).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::CatchUnwind;

/// A caught panic's payload.
pub(crate) type Panic = Box<dyn Any + Send>;

/// Calls `call` and hands back its future with panics caught, so a panic
/// while making the future and one while polling it both become `Err`.
pub(crate) fn call_caught<Fut: Future>(
    call: impl FnOnce() -> Fut,
) -> Result<CatchUnwind<AssertUnwindSafe<Fut>>, Panic> {
    std::panic::catch_unwind(AssertUnwindSafe(call))
        .map(|future| AssertUnwindSafe(future).catch_unwind())
}

pub(crate) use kinformer_actors::panic::panic_message;
