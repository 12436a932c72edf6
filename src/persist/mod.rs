//! Warm restart (`InformerBuilder::persist`): the informer keeps an on-disk
//! snapshot of its cache and of the resourceVersion it is the state at, and
//! a new process starts from it instead of listing.
//!
//! - `snapshot_file`: the redb file, its checks and its transactions.
//! - `identity`: what a snapshot belongs to ([`SnapshotIdentity`]).
//! - `writer`: the thread that commits the Indexer's consistent states.
//! - `error`: why a snapshot is discarded, or persistence stops ([`SnapshotError`]).
//!
//! At start, the file is read on a blocking thread when the Reflector's
//! first run begins. A valid snapshot is handed to the DeltaFIFO as the
//! initial population (adds with `Cause::Restored`) and the Reflector
//! watches from its resourceVersion; a missing, corrupt, foreign or outdated
//! one is discarded (logged, counted) and the informer lists. Either way
//! the writer then starts on the file (a fresh one after a discard). A
//! panic of the database while it reads a damaged file is caught and
//! counts as corrupt.

mod error;
mod identity;
mod snapshot_file;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kinformer_actors::Object;
use kinformer_actors::indexer::SnapshotFeed;
use kinformer_actors::reflector::{RestoreFn, Restored};
use tokio::sync::watch;

pub use error::SnapshotError;
pub use identity::{SNAPSHOT_SCHEMA, SnapshotIdentity};
use snapshot_file::{Decode, Encode};

/// What `InformerBuilder::persist` configured.
pub(crate) struct PersistConfig<K> {
    pub dir: PathBuf,
    pub cluster: String,
    pub schema: String,
    pub encode: Encode<K>,
    pub decode: Decode<K>,
}

/// The persistence counters, shared by the restore and the writer.
#[derive(Debug, Default)]
pub(crate) struct PersistStats {
    pub commits: AtomicU64,
    pub objects_written: AtomicU64,
    pub objects_removed: AtomicU64,
    pub bytes_written: AtomicU64,
    pub write_micros: AtomicU64,
    pub discarded: AtomicU64,
    text: Mutex<Texts>,
}

#[derive(Debug, Default, Clone)]
struct Texts {
    file: PathBuf,
    resource_version: String,
    error: Option<String>,
    discarded: Option<String>,
}

impl PersistStats {
    fn texts(&self) -> std::sync::MutexGuard<'_, Texts> {
        self.text.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_resource_version(&self, rv: &str) {
        rv.clone_into(&mut self.texts().resource_version);
    }

    pub(crate) fn set_error(&self, error: String) {
        self.texts().error = Some(error);
    }

    /// What a program or a test reads.
    pub(crate) fn status(&self, writing: bool) -> PersistStatus {
        let t = self.texts().clone();
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PersistStatus {
            file_bytes: std::fs::metadata(&t.file).map(|m| m.len()).unwrap_or(0),
            file: t.file,
            resource_version: t.resource_version,
            commits: r(&self.commits),
            objects_written: r(&self.objects_written),
            objects_removed: r(&self.objects_removed),
            bytes_written: r(&self.bytes_written),
            write_micros: r(&self.write_micros),
            discarded: r(&self.discarded),
            discarded_because: t.discarded,
            error: t.error,
            writing,
        }
    }
}

/// The state of an informer's persistence ([`Informer::persistence`](crate::Informer::persistence)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersistStatus {
    /// The snapshot file.
    pub file: PathBuf,
    /// Its size on disk, in bytes.
    pub file_bytes: u64,
    /// The resourceVersion of the last commit (`""` before the first).
    pub resource_version: String,
    /// Transactions committed.
    pub commits: u64,
    /// Objects written (added or changed) in them.
    pub objects_written: u64,
    /// Objects removed in them.
    pub objects_removed: u64,
    /// Bytes of objects written (JSON).
    pub bytes_written: u64,
    /// Time spent writing, in microseconds (encoding and committing).
    pub write_micros: u64,
    /// Snapshots discarded at start (0 or 1).
    pub discarded: u64,
    /// Why it was discarded.
    pub discarded_because: Option<String>,
    /// Why persistence stopped, if it did (the informer goes on in memory).
    pub error: Option<String>,
    /// True while the writer runs.
    pub writing: bool,
}

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
    stats.texts().file = path.clone();
    let handle = Persistence {
        feed: feed.clone(),
        stats: stats.clone(),
        done,
    };
    let restore: RestoreFn<K> = Box::new(move || {
        Box::pin(async move {
            let read = move || open(path, identity, config, feed, stats, done_tx);
            tokio::task::spawn_blocking(read).await.ok().flatten()
        })
    });
    (restore, handle)
}

/// Reads the snapshot (discarding a bad one), then starts the writer on the
/// file. Blocking.
fn open<K: Object>(
    path: PathBuf,
    identity: SnapshotIdentity,
    config: PersistConfig<K>,
    feed: Arc<SnapshotFeed<K>>,
    stats: Arc<PersistStats>,
    done: watch::Sender<bool>,
) -> Option<Restored<K>> {
    let (restored, db) = match snapshot_file::load(&path, &identity, config.decode) {
        Ok(Some(l)) => {
            let restored = Restored {
                objects: l.objects,
                resource_version: l.resource_version,
            };
            (Some(restored), Ok(l.db))
        }
        Ok(None) => (None, snapshot_file::create(&path, &identity)),
        // Never committed (the last process stopped before its first
        // consistent state): no snapshot yet, nothing damaged or discarded.
        Err(SnapshotError::Empty) => {
            tracing::info!(file = %path.display(), "the snapshot was never committed; listing");
            (None, snapshot_file::create(&path, &identity))
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), reason = e.reason(), error = %e, "snapshot discarded; listing");
            stats.discarded.fetch_add(1, Ordering::Relaxed);
            stats.texts().discarded = Some(e.to_string());
            (None, snapshot_file::create(&path, &identity))
        }
    };
    if feed.is_closed() {
        return restored;
    }
    match db {
        Ok(db) => {
            let encode = config.encode;
            let spawned = std::thread::Builder::new()
                .name("kinformer-snapshot".into())
                .spawn(move || writer::run(db, feed.clone(), stats, encode, done));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the snapshot writer; the informer goes on in memory");
            }
        }
        Err(e) => {
            tracing::error!(file = %path.display(), error = %e, "persistence off: the informer goes on in memory");
            stats.set_error(e.to_string());
            feed.close();
        }
    }
    restored
}
