//! The Indexer: the cache with secondary indexes, and the distribution of
//! notifications to listeners.

pub mod actor;
pub mod cache;

pub use actor::*;
pub use cache::*;
