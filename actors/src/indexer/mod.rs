//! The Indexer: the cache with secondary indexes, and the distribution of
//! notifications to listeners.
//!
//! - [`cache`]: the cache and its indexes ([`Cache`]), its published
//!   [`Snapshot`]s and the [`CacheReader`] any thread reads them through.
//! - [`compact`]: how a compact cache encodes its objects ([`CompactOptions`]);
//!   `compaction`: the thread that compresses them behind the writer.
//! - [`actor`]: the actor that owns the cache ([`Indexer`]), a shell over
//!   pure parts: `apply` (deltas to cache writes and events with their
//!   cause), `distribution` (a batch's hand-out, a chunk at a time) and
//!   `sweeps` (the resync sweeps' schedule, over `key_list`); `outlets`
//!   holds the listeners' addresses and credits.
//! - [`messages`]: what the actor takes ([`Process`], [`FifoSynced`],
//!   [`Subscribe`], [`Unsubscribe`], [`ListenerStopped`], [`ResyncDue`],
//!   [`Compacted`]).
//! - [`stats`]: its live counters ([`IndexerStats`]).
//! - [`feed`]: consistent cache states for a snapshot writer ([`SnapshotFeed`]).

pub mod actor;
mod apply;
pub mod cache;
pub mod compact;
mod compaction;
mod distribution;
pub mod feed;
mod key_list;
pub mod messages;
mod outlets;
pub mod stats;
mod sweeps;

pub use actor::Indexer;
pub use cache::{
    Cache, CacheError, CacheReader, CacheView, CompactStats, IndexError, IndexFn, LazyEntries,
    LazyKeys, Snapshot, Upserted,
};
pub use compact::{Codec, CompactError, CompactOptions};
pub use feed::{ConsistentPoint, FeedClosed, SnapshotFeed};
pub use messages::{
    Compacted, FifoSynced, ListenerStopped, Process, ResyncDue, Subscribe, Unsubscribe,
};
pub use stats::IndexerStats;
