//! The DeltaFIFO: the queue of changes between the Reflector and the Indexer.
//!
//! # Two orderings
//!
//! Chosen with [`FifoOptions::ordering`] (or `InformerBuilder::fifo_ordering`),
//! behind one interface, [`FifoQueue`]:
//!
//! - [`FifoOrdering::Merged`], the default: client-go's classic DeltaFIFO
//!   ([`DeltaQueue`], spec 1.3). A key's pending deltas stay together at the
//!   place of its oldest pending change and are popped as one item. A
//!   consumer that falls behind reaches an object's latest state as soon as
//!   it reaches the object, and a busy object costs one pop per catch-up
//!   rather than one per change (batches count keys). Across objects the
//!   order is that of each one's oldest pending change, not of arrival; a
//!   relist's deletes follow its items; a delete of an object neither queued
//!   nor known is dropped.
//! - [`FifoOrdering::Arrival`]: client-go's RealFIFO ([`RealFifo`], spec 1.4),
//!   its default since 1.33. Every change is its own entry, in arrival order
//!   across objects: subscribers see every intermediate state in the order
//!   the server produced it, and a relist's deletes come before its items.
//!   Pick it for parity with client-go 1.33+, or when a subscriber relates
//!   changes of different objects by their order. A consumer that falls
//!   behind works through the backlog change by change before it sees the
//!   latest state.
//!
//! Neither drops a change of an object (merged keeps every delta of a key;
//! only two consecutive deletes merge, DF-4), and per object the order is
//! the server's in both. Both keep what kinformer adds over client-go:
//!
//! - the **in-flight overlay** (`in_flight.rs`): the Indexer applies popped
//!   items after the pop, so until it reports them `done` the queue's view
//!   of the known objects is *cache ∪ in flight*;
//! - **HasSynced latched after processing** (`population.rs`): once the last
//!   initial item is `done`, not when it is popped;
//! - **atomic relists**: a key error changes nothing;
//! - **bounded memory**: `high_watermark` counts queued deltas, so a stalled
//!   consumer holds the Reflector back in either ordering (arrival order
//!   keeps every change, one entry each);
//! - **batches that never hold one key twice** nor cross the end of the
//!   initial list, so per-key order holds and a batch is wholly initial or not.
//!
//! # Modules
//!
//! - [`queue`] and [`real_fifo`]: the two pure state machines;
//!   [`fifo_queue`]: the interface the actor uses.
//! - `in_flight.rs`, `population.rs` (private): what both share.
//! - `origin.rs` (private): whether the initial population is a snapshot
//!   restored from disk (the actor's, beside the queue).
//! - [`actor`]: the actor that owns the queue ([`DeltaFifo`]); [`options`]:
//!   its configuration; [`messages`]: what it takes ([`Enqueue`], [`ListPage`],
//!   [`Replace`], [`Progress`]).

pub mod actor;
pub mod fifo_queue;
mod hold;
mod in_flight;
pub mod messages;
pub mod options;
mod origin;
mod population;
pub mod queue;
pub mod real_fifo;
#[cfg(test)]
mod scenario;

pub use actor::{DeltaFifo, FifoStats};
pub use fifo_queue::FifoQueue;
pub use messages::{Enqueue, FifoClosed, ListPage, Progress, Replace, WatchDelta};
pub use options::{FifoOptions, FifoOrdering};
pub use queue::{DeltaQueue, DeltaQueueOptions};
pub use real_fifo::RealFifo;
