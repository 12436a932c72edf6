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
use super::error::SnapshotError;
use super::snapshot_file::{Commit, Encode, stored_keys, write};
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
    /// The first commit writes the whole state, not only the keys changed
    /// since the last point: the file is new (or made after a discard), or
    /// a restore was cut short (the cache lacks objects the file holds, and
    /// holds listed ones no point counts as changed). That commit also
    /// removes what the file holds beyond the state.
    pub fresh: bool,
}

/// Runs the writer until the feed closes or a write fails; `done` turns
/// true when it ends (the file is closed then). A failure, or a panic of
/// the writer, is reported in `stats` and abandons the feed (the Indexer
/// stops offering points, and the one not taken is released).
pub fn run<K: Object>(
    file: WriterFile,
    feed: Arc<SnapshotFeed<K>>,
    stats: Arc<PersistStats>,
    encode: Encode<K>,
    done: watch::Sender<bool>,
) {
    let wrote = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        write_points(file, &feed, &stats, encode)
    }));
    let failure = match wrote {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "the snapshot writer panicked: {}",
            kinformer_actors::panic::panic_message(panic.as_ref())
        )),
    };
    if let Some(failure) = failure {
        tracing::error!(error = %failure, "snapshot write failed; persistence stops, the informer goes on in memory");
        stats.set_error(failure);
        feed.abandon();
    }
    done.send_replace(true);
}

/// Commits the points `feed` offers until it closes; the file is closed
/// when this returns.
fn write_points<K: Object>(
    file: WriterFile,
    feed: &SnapshotFeed<K>,
    stats: &PersistStats,
    encode: Encode<K>,
) -> Result<(), SnapshotError> {
    let WriterFile {
        db,
        mut values,
        mut fresh,
    } = file;
    loop {
        let point = match feed.take(Duration::from_secs(1)) {
            Err(_) => return Ok(()),
            Ok(None) => continue,
            Ok(Some(point)) => point,
        };
        let started = Instant::now();
        let mut keys: Vec<ObjectKey> = if fresh || point.whole {
            let mut keys = point.snapshot.keys();
            let kept: std::collections::HashSet<&str> =
                keys.iter().map(ObjectKey::as_str).collect();
            let stale: Vec<ObjectKey> = stored_keys(&db)?
                .into_iter()
                .filter(|k| !kept.contains(k.as_str()))
                .map(|k| ObjectKey::from(k.as_str()))
                .collect();
            keys.extend(stale);
            keys
        } else {
            point.changed.iter().cloned().collect()
        };
        // In key order: neighbouring B-tree pages are written together.
        keys.sort_unstable();
        let commit = Commit {
            changes: keys.iter().map(|k| {
                let state = point.snapshot.try_get(k).map_err(|e| {
                    SnapshotError::Write(format!("the cached {k} cannot be read: {e}"))
                });
                (k.as_str(), state)
            }),
            resource_version: &point.resource_version,
            count: point.snapshot.len() as u64,
        };
        let written = write(&db, commit, encode, &mut values)?;
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
        drop(point);
        std::thread::sleep(COMMIT_INTERVAL.saturating_sub(started.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kinformer_actors::indexer::Cache;

    use super::*;
    use crate::persist::identity::SnapshotIdentity;
    use crate::persist::snapshot_file;

    fn identity() -> SnapshotIdentity {
        SnapshotIdentity {
            cluster: "test".into(),
            resource: "/api/v1/configmaps".into(),
            label_selector: String::new(),
            field_selector: String::new(),
            object_schema: "ConfigMap".into(),
        }
    }

    fn configmap(name: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some("5".into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn encode(c: &ConfigMap) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(c)
    }

    fn panics(_: &ConfigMap) -> Result<Vec<u8>, serde_json::Error> {
        panic!("an encoder that panics")
    }

    /// Runs the writer on `db` (its first commit `fresh`) over one point
    /// holding `names` at resourceVersion 5, until the feed closes.
    fn write_once(
        db: redb::Database,
        fresh: bool,
        names: &[&str],
        encode: Encode<ConfigMap>,
    ) -> (Arc<SnapshotFeed<ConfigMap>>, Arc<PersistStats>) {
        let file = WriterFile {
            db,
            values: ValueWriter::new(None).unwrap(),
            fresh,
        };
        let mut cache = Cache::<ConfigMap>::new();
        for name in names {
            let object = configmap(name);
            cache.upsert(ObjectKey::of(object.as_ref()).unwrap(), object);
        }
        cache.publish();
        let feed = SnapshotFeed::new();
        feed.offer(cache.snapshot(), "5".into(), &mut HashSet::new(), false);
        let stats = Arc::new(PersistStats::default());
        let (done_tx, done) = watch::channel(false);
        // Closed with the point offered: the writer commits it, then ends.
        feed.close();
        run(file, feed.clone(), stats.clone(), encode, done_tx);
        assert!(*done.borrow());
        (feed, stats)
    }

    /// A panic while writing stops persistence with a reported error, as a
    /// failed write does: the feed is abandoned and `done` turns true.
    #[test]
    fn a_panicking_writer_is_reported_and_abandons_the_feed() {
        let dir = tempfile::Builder::new()
            .prefix("kinformer-writer-panic-")
            .tempdir()
            .unwrap();
        let id = identity();
        let db = snapshot_file::create(&snapshot_file::path_in(dir.path(), &id), &id).unwrap();
        let (feed, stats) = write_once(db, true, &["a"], panics);
        assert!(feed.is_closed());
        let error = stats.status(false).error.unwrap_or_default();
        assert!(error.contains("panicked"), "{error}");
    }

    /// A fresh first commit over a file that holds more (a restore cut
    /// short) leaves exactly the state: the file's other objects removed,
    /// its count right, so the next start can use it.
    #[test]
    fn a_fresh_commit_removes_what_the_state_lacks() {
        let dir = tempfile::Builder::new()
            .prefix("kinformer-writer-fresh-")
            .tempdir()
            .unwrap();
        let id = identity();
        let path = snapshot_file::path_in(dir.path(), &id);
        let db = snapshot_file::create(&path, &id).unwrap();
        let (_, stats) = write_once(db, true, &["a", "b", "stale"], encode);
        assert!(stats.status(false).error.is_none());
        let db = snapshot_file::open(&path, &id).unwrap().unwrap().db;
        let (_, stats) = write_once(db, true, &["a", "b", "c"], encode);
        assert!(stats.status(false).error.is_none());
        assert_eq!(stats.objects_removed.load(Ordering::Relaxed), 1);
        let opened = snapshot_file::open(&path, &id).unwrap().unwrap();
        assert_eq!(opened.count, 3);
        let mut keys = snapshot_file::stored_keys(&opened.db).unwrap();
        keys.sort();
        assert_eq!(keys, ["ns/a", "ns/b", "ns/c"]);
        drop(opened);
    }
}
