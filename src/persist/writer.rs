//! The snapshot writer: a thread of its own that takes the Indexer's
//! consistent states ([`SnapshotFeed`]) and commits each in one redb
//! transaction. It never holds the informer back: while it writes, the
//! states offered meanwhile merge into one (the newest cache copy, the
//! union of the changed keys), so a slow disk costs freshness, not memory
//! beyond one entry per key, and never back-pressure on the watch.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kinformer_actors::indexer::SnapshotFeed;
use kinformer_actors::{Object, ObjectKey};
use redb::Database;
use tokio::sync::watch;

use super::compression::ValueWriter;
use super::snapshot_file::{Commit, Encode, write};
use super::stats::PersistStats;

/// The shortest time between two commits: changes within it go in one
/// transaction (each commit syncs the file).
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(100);

/// The file the writer starts on.
pub struct WriterFile {
    /// The open database.
    pub db: Database,
    /// How its values are compressed (its dictionary, if it has one).
    pub values: ValueWriter,
    /// It holds no object yet (a new file, or one made after a discard):
    /// the first commit writes every object of its state, not only those
    /// changed since the last point (a restore cut short leaves objects in
    /// the cache that no point counts as changed).
    pub fresh: bool,
}

/// Runs the writer until the feed closes or a write fails; `done` turns
/// true when it ends (the file is closed then).
pub fn run<K: Object>(
    file: WriterFile,
    feed: Arc<SnapshotFeed<K>>,
    stats: Arc<PersistStats>,
    encode: Encode<K>,
    done: watch::Sender<bool>,
) {
    let WriterFile {
        db,
        mut values,
        mut fresh,
    } = file;
    loop {
        let point = match feed.take(Duration::from_secs(1)) {
            Err(_) => break,
            Ok(None) => continue,
            Ok(Some(point)) => point,
        };
        let started = Instant::now();
        let every: Vec<ObjectKey>;
        let mut keys: Vec<&ObjectKey> = if fresh {
            every = point.snapshot.keys();
            every.iter().collect()
        } else {
            point.changed.iter().collect()
        };
        // In key order: neighbouring B-tree pages are written together.
        keys.sort_unstable();
        let states: Vec<(&str, Option<Arc<K>>)> = keys
            .iter()
            .map(|k| (k.as_str(), point.snapshot.get(*k)))
            .collect();
        let commit = Commit {
            changes: states.iter().map(|(k, o)| (*k, o.as_deref())).collect(),
            resource_version: &point.resource_version,
            count: point.snapshot.len() as u64,
        };
        match write(&db, commit, encode, &mut values) {
            Ok(written) => {
                fresh = false;
                stats.commits.fetch_add(1, Ordering::Relaxed);
                stats
                    .objects_written
                    .fetch_add(written.objects, Ordering::Relaxed);
                stats
                    .objects_removed
                    .fetch_add(written.removed, Ordering::Relaxed);
                stats
                    .bytes_written
                    .fetch_add(written.bytes, Ordering::Relaxed);
                stats
                    .json_bytes_written
                    .fetch_add(written.json_bytes, Ordering::Relaxed);
                let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                stats.write_micros.fetch_add(took, Ordering::Relaxed);
                stats.set_resource_version(&point.resource_version);
            }
            Err(e) => {
                tracing::error!(error = %e, "snapshot write failed; persistence stops, the informer goes on in memory");
                stats.set_error(e.to_string());
                feed.close();
                break;
            }
        }
        drop(states);
        drop(point);
        std::thread::sleep(COMMIT_INTERVAL.saturating_sub(started.elapsed()));
    }
    drop(db);
    done.send_replace(true);
}
