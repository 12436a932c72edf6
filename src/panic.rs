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

/// A panic's message when it is a string (as `panic!` makes it).
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}
