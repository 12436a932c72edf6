//! The Indexer: the cache with secondary indexes, and the distribution of
//! notifications to listeners.
//!
//! - [`cache`]: the cache and its indexes ([`Cache`]), its published
//!   [`Snapshot`]s and the [`CacheReader`] any thread reads them through.
//! - [`actor`]: the actor that owns the cache ([`Indexer`]).
//! - [`messages`]: what the actor takes ([`Process`], [`FifoSynced`],
//!   [`Subscribe`], [`Unsubscribe`], [`ListenerStopped`], [`ResyncDue`]).

pub mod actor;
pub mod cache;
pub mod messages;

pub use actor::{Indexer, IndexerStats};
pub use cache::{
    Cache, CacheError, CacheReader, CacheView, IndexError, IndexFn, LazyEntries, LazyKeys,
    Snapshot, Upserted,
};
pub use messages::{FifoSynced, ListenerStopped, Process, ResyncDue, Subscribe, Unsubscribe};
