//! One listener per subscriber: its pending notifications and its sync state.

pub mod queue;
pub mod sync;

pub use queue::*;
pub use sync::*;
