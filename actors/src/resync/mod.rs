//! The resync timer: which subscriber is due for a resync, and when.

pub mod schedule;

pub use schedule::*;
