//! The DeltaFIFO: per-key deltas between the Reflector and the Indexer.
//!
//! - [`queue`]: the pure state machine ([`DeltaQueue`], spec 1.3).
//! - [`actor`]: the actor that owns it ([`DeltaFifo`]).
//! - [`messages`]: what the actor takes ([`Enqueue`], [`Replace`]).

pub mod actor;
mod in_flight;
pub mod messages;
mod population;
pub mod queue;

pub use actor::{DeltaFifo, FifoOptions, FifoStats};
pub use messages::{Enqueue, FifoClosed, Replace, WatchDelta};
pub use queue::{DeltaQueue, DeltaQueueOptions};
