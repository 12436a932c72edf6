//! The Indexer's live counters, readable from any thread.

use std::sync::atomic::{AtomicU64, AtomicUsize};

/// Live counters of the Indexer.
#[derive(Debug, Default)]
pub struct IndexerStats {
    /// Objects in the cache.
    pub objects: AtomicUsize,
    /// Adds applied.
    pub added: AtomicU64,
    /// Updates applied (resyncs excluded).
    pub updated: AtomicU64,
    /// Deletes applied.
    pub deleted: AtomicU64,
    /// Tombstone deletes (final state unknown).
    pub tombstones: AtomicU64,
    /// Index functions that failed.
    pub index_errors: AtomicU64,
    /// Live listeners.
    pub listeners: AtomicUsize,
    /// Listeners removed because their subscriber was gone.
    pub listeners_lost: AtomicU64,
}
