//! The DeltaFIFO: per-key deltas between the Reflector and the Indexer.

pub mod actor;
pub mod queue;

pub use actor::*;
pub use queue::*;
