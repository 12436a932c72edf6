//! The Indexer: the cache with secondary indexes, and the distribution of
//! notifications to listeners.

pub mod cache;

pub use cache::*;
