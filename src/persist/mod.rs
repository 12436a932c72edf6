//! Warm restart (`InformerBuilder::persist`): the informer keeps an on-disk
//! snapshot of its cache and of the resourceVersion it is the state at, and
//! a new process starts from it instead of listing.
//!
//! - `snapshot_file`: the redb file, its checks and its transactions.
//! - `compression`: how each object is stored (zstd with a learned dictionary).
//! - `identity`: what a snapshot belongs to ([`SnapshotIdentity`]).
//! - `restore`: reading the snapshot at start, then starting the writer.
//! - `writer`: the thread that commits the Indexer's consistent states.
//! - `stats`: the counters both share ([`PersistStatus`]).
//! - `error`: why a snapshot is discarded, or persistence stops ([`SnapshotError`]).
//!
//! At start, when the Reflector's first run begins, the file is checked
//! and read on a blocking thread, decoded on every core a page at a time;
//! each page goes to the DeltaFIFO as it is decoded, as part of the initial
//! population (adds with `Cause::Restored`), and the Reflector then watches
//! from the snapshot's resourceVersion. A missing, corrupt, foreign or
//! outdated snapshot is discarded (logged, counted) and the informer lists.
//! So is one found damaged partway (an object that does not decode): the
//! pages restored before stay, like those of a list cut short, and the list
//! completes them. Either way the writer then starts on the file (a fresh
//! one after a discard, written whole at its first commit). A panic of the
//! database while it reads a damaged file is caught and counts as corrupt.

mod compression;
mod error;
mod identity;
mod restore;
mod snapshot_file;
mod stats;
mod writer;

use std::sync::Arc;

use kinformer_actors::Object;
use kinformer_actors::indexer::SnapshotFeed;
use kinformer_actors::reflector::{RestoreFn, Restored};
use tokio::sync::watch;

pub use error::{ClusterIdentityError, SnapshotError};
pub use identity::{SNAPSHOT_SCHEMA, SnapshotIdentity, cluster_identity};
pub(crate) use restore::PersistConfig;
use restore::Restore;
use stats::PersistStats;
pub use stats::PersistStatus;

/// The informer's side of its persistence.
pub(crate) struct Persistence<K> {
    pub feed: Arc<SnapshotFeed<K>>,
    pub stats: Arc<PersistStats>,
    /// Turns true once the writer ended (or never started); the sender is
    /// dropped unused when it never starts.
    pub done: watch::Receiver<bool>,
}

impl<K> Persistence<K> {
    /// Closes the feed and waits until the writer committed what was
    /// offered and closed its file.
    pub async fn finish(&self) {
        self.feed.close();
        let mut done = self.done.clone();
        let _ = done.wait_for(|d| *d).await;
    }

    pub fn status(&self) -> PersistStatus {
        self.stats
            .status(!*self.done.borrow() && self.done.has_changed().is_ok())
    }
}

impl<K> Drop for Persistence<K> {
    fn drop(&mut self) {
        self.feed.close();
    }
}

/// Abandons a feed when dropped, unless [`disarm`](Self::disarm)ed.
struct AbandonUnlessRun<K>(Option<Arc<SnapshotFeed<K>>>);

impl<K> AbandonUnlessRun<K> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl<K> Drop for AbandonUnlessRun<K> {
    fn drop(&mut self) {
        if let Some(feed) = self.0.take() {
            feed.abandon();
        }
    }
}

/// Decoded pages of a restore waiting for the Reflector, at most.
const PAGES_IN_FLIGHT: usize = 4;

/// Sets up persistence for `identity`: the restore the Reflector runs first
/// (which then starts the writer), and the informer's handle on it.
pub(crate) fn prepare<K: Object>(
    config: PersistConfig<K>,
    identity: SnapshotIdentity,
) -> (RestoreFn<K>, Persistence<K>) {
    let feed = SnapshotFeed::new();
    let stats = Arc::new(PersistStats::default());
    let (done_tx, done) = watch::channel(false);
    let path = snapshot_file::path_in(&config.dir, &identity);
    stats.set_file(path.clone());
    let handle = Persistence {
        feed: feed.clone(),
        stats: stats.clone(),
        done,
    };
    // Abandons the feed if the restore never runs (the informer stopped
    // first, or the runtime dropped the blocking task unstarted): no writer
    // would ever take the points the Indexer offers.
    let unrun = AbandonUnlessRun(Some(feed.clone()));
    let restore: RestoreFn<K> = Box::new(move || {
        Box::pin(async move {
            let (head_tx, head) = tokio::sync::oneshot::channel();
            let (pages_tx, pages) = tokio::sync::mpsc::channel(PAGES_IN_FLIGHT);
            let restore = Restore {
                path,
                identity,
                config,
                feed,
                stats,
                head: head_tx,
                pages: pages_tx,
            };
            tokio::task::spawn_blocking(move || {
                unrun.disarm();
                restore.run(done_tx)
            });
            // A panic of the blocking task drops `head`: no snapshot.
            let resource_version = head.await.ok().flatten()?;
            Some(Restored {
                resource_version,
                pages,
            })
        })
    });
    (restore, handle)
}
