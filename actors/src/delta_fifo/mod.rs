//! The DeltaFIFO: per-key deltas between the Reflector and the Indexer.

pub mod queue;

pub use queue::*;
