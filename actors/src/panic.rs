//! Reading what a caught panic carried, for the logs of user code that
//! panicked (handlers, closures, reconcilers).

use std::any::Any;

/// A panic's message when it is a string (as `panic!` makes it).
pub fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}
