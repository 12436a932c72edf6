//! The resync timer: which subscriber is due for a resync, and when.

pub mod actor;
pub mod schedule;

pub use actor::*;
pub use schedule::*;
