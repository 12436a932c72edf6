//! One informer's snapshot on disk: a redb database with two tables, the
//! objects by key (their JSON) and the meta data (identity, schema, the
//! resourceVersion and the object count), written in one transaction per
//! consistent state, so the file is always consistent at its
//! resourceVersion.
//!
//! Why redb: pure Rust (no C toolchain, unlike SQLite's rusqlite), one file,
//! ACID transactions with copy-on-write B-trees (a crash leaves the last
//! committed state), and a small dependency tree. fjall (an LSM tree) suits
//! write-heavy workloads with many keys better, but needs a directory of
//! segment files and a journal per keyspace, and its transactions are an
//! extra layer; a snapshot is rewritten only where it changed, read whole at
//! start, so a B-tree fits.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kinformer_actors::reflector::decode::ObjectDecoder;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::error::SnapshotError;
use super::identity::{SNAPSHOT_SCHEMA, SnapshotIdentity};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const IDENTITY: &str = "identity";
const SCHEMA: &str = "schema";
const RESOURCE_VERSION: &str = "resource_version";
const COUNT: &str = "count";

/// Decodes one stored object (with a decoder each decoding thread keeps).
pub type Decode<K> = fn(&mut ObjectDecoder, &[u8]) -> Result<K, serde_json::Error>;
/// Encodes one object for storage.
pub type Encode<K> = fn(&K) -> Result<Vec<u8>, serde_json::Error>;

/// A snapshot read from its file.
pub struct Loaded<K> {
    /// Every object.
    pub objects: Vec<Arc<K>>,
    /// The resourceVersion they are the state at.
    pub resource_version: String,
    /// The open database, for the writer.
    pub db: Database,
}

/// The snapshot file of `identity` in `dir`.
pub fn path_in(dir: &Path, identity: &SnapshotIdentity) -> PathBuf {
    dir.join(identity.file_name())
}

/// Reads and checks the snapshot at `path`: `Ok(None)` when there is none.
/// Any problem is an error; the caller discards the file. redb asserts on
/// some damaged files (a truncated one panics in `Database::open`): the
/// panic is caught here and is `Corrupt` too.
pub fn load<K: Send + Sync>(
    path: &Path,
    identity: &SnapshotIdentity,
    decode: Decode<K>,
) -> Result<Option<Loaded<K>>, SnapshotError> {
    let read = std::panic::catch_unwind(|| read_checked(path, identity, decode));
    read.unwrap_or_else(|_| {
        Err(SnapshotError::Corrupt(
            "the database panicked reading it".into(),
        ))
    })
}

fn read_checked<K: Send + Sync>(
    path: &Path,
    identity: &SnapshotIdentity,
    decode: Decode<K>,
) -> Result<Option<Loaded<K>>, SnapshotError> {
    if !path.exists() {
        return Ok(None);
    }
    let db = Database::open(path)?;
    let txn = db.begin_read()?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Err(SnapshotError::Foreign("no meta table".into()));
        }
        Err(e) => return Err(e.into()),
    };
    let text = |key: &str| -> Result<String, SnapshotError> {
        let value = meta.get(key)?;
        let bytes = value
            .as_ref()
            .map(|v| v.value().to_vec())
            .unwrap_or_default();
        String::from_utf8(bytes).map_err(|_| SnapshotError::Corrupt(format!("{key} is not UTF-8")))
    };
    let schema = text(SCHEMA)?;
    if schema != SNAPSHOT_SCHEMA.to_string() {
        return Err(SnapshotError::Outdated(format!(
            "schema {schema:?}, expected {SNAPSHOT_SCHEMA}"
        )));
    }
    let stored = text(IDENTITY)?;
    if stored != identity.canonical() {
        return Err(SnapshotError::Foreign(stored));
    }
    let resource_version = text(RESOURCE_VERSION)?;
    if resource_version.is_empty() {
        return Err(SnapshotError::Empty);
    }
    let count = meta
        .get(COUNT)?
        .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| SnapshotError::Corrupt("no object count".into()))?;
    let table = txn.open_table(OBJECTS)?;
    if table.len()? != count {
        return Err(SnapshotError::Corrupt(format!(
            "{} objects stored, {count} committed",
            table.len()?
        )));
    }
    let started = std::time::Instant::now();
    let objects = read_and_decode(&table, decode)?;
    drop((meta, table, txn));
    tracing::debug!(objects = count, took = ?started.elapsed(), "snapshot read and decoded");
    Ok(Some(Loaded {
        objects,
        resource_version,
        db,
    }))
}

/// Stored objects handed to a decoding thread at a time.
const CHUNK: usize = 512;

/// Chunks queued per decoding thread: the raw bytes in flight stay bounded
/// (a restore never holds the whole file's bytes and the decoded objects at
/// once).
const QUEUED_CHUNKS: usize = 2;

/// Reads the stored objects and decodes them on every core as they are
/// read: decoding is most of a restore's time (100k ConfigMaps, BENCHMARKS.md
/// "Warm restart"), and reading the file overlaps it. The objects come back
/// in key order.
fn read_and_decode<K: Send + Sync>(
    table: &redb::ReadOnlyTable<&str, &[u8]>,
    decode: Decode<K>,
) -> Result<Vec<Arc<K>>, SnapshotError> {
    type Chunk = Vec<(String, Vec<u8>)>;
    type Decoded<K> = Vec<(usize, Result<Vec<Arc<K>>, SnapshotError>)>;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Chunk)>(QUEUED_CHUNKS);
            senders.push(tx);
            workers.push(scope.spawn(move || {
                let mut decoder = ObjectDecoder::default();
                let mut out: Decoded<K> = Vec::new();
                for (i, chunk) in rx {
                    let objects = chunk
                        .iter()
                        .map(|(key, bytes)| {
                            decode(&mut decoder, bytes)
                                .map(Arc::new)
                                .map_err(|e| SnapshotError::Corrupt(format!("{key}: {e}")))
                        })
                        .collect();
                    out.push((i, objects));
                }
                out
            }));
        }
        let read = (|| -> Result<(), SnapshotError> {
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut n = 0;
            let hand = |n: &mut usize, chunk: Chunk| {
                // A decoding thread that is gone panicked: its join says so.
                let _ = senders[*n % threads].send((*n, chunk));
                *n += 1;
            };
            for entry in table.iter()? {
                let (key, value) = entry?;
                chunk.push((key.value().to_owned(), value.value().to_vec()));
                if chunk.len() == CHUNK {
                    hand(
                        &mut n,
                        std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)),
                    );
                }
            }
            if !chunk.is_empty() {
                hand(&mut n, chunk);
            }
            Ok(())
        })();
        drop(senders);
        let mut decoded: Decoded<K> = Vec::new();
        for worker in workers {
            match worker.join() {
                Ok(out) => decoded.extend(out),
                Err(_) => return Err(SnapshotError::Corrupt("decoding an object panicked".into())),
            }
        }
        read?;
        decoded.sort_unstable_by_key(|(i, _)| *i);
        let mut objects = Vec::with_capacity(decoded.len() * CHUNK);
        for (_, chunk) in decoded {
            objects.extend(chunk?);
        }
        Ok(objects)
    })
}

/// A fresh, empty snapshot for `identity` at `path` (any file there is
/// replaced), not yet at any resourceVersion.
pub fn create(path: &Path, identity: &SnapshotIdentity) -> Result<Database, SnapshotError> {
    let write =
        |e: &dyn std::fmt::Display| SnapshotError::Write(format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| write(&e))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write(&e)),
    }
    let db = Database::create(path).map_err(|e| write(&e))?;
    let txn = db.begin_write().map_err(|e| write(&e))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| write(&e))?;
        let schema = SNAPSHOT_SCHEMA.to_string();
        let canonical = identity.canonical();
        let entries: [(&str, &[u8]); 4] = [
            (SCHEMA, schema.as_bytes()),
            (IDENTITY, canonical.as_bytes()),
            (RESOURCE_VERSION, b""),
            (COUNT, &0u64.to_le_bytes()),
        ];
        for (key, value) in entries {
            meta.insert(key, value).map_err(|e| write(&e))?;
        }
        txn.open_table(OBJECTS).map_err(|e| write(&e))?;
    }
    txn.commit().map_err(|e| write(&e))?;
    Ok(db)
}

/// What one transaction wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Objects written (added or changed).
    pub objects: u64,
    /// Objects removed.
    pub removed: u64,
    /// Bytes of the objects written.
    pub bytes: u64,
}

/// One consistent state to commit: the state of each changed key (`None`:
/// gone), the resourceVersion and the object count at it.
pub struct Commit<'a, K> {
    /// The changed keys with their state.
    pub changes: Vec<(&'a str, Option<&'a K>)>,
    /// The resourceVersion the snapshot is at once committed.
    pub resource_version: &'a str,
    /// How many objects the snapshot holds once committed.
    pub count: u64,
}

/// Writes `commit` in one transaction: the objects and the resourceVersion
/// together, or nothing.
pub fn write<K>(
    db: &Database,
    commit: Commit<'_, K>,
    encode: Encode<K>,
) -> Result<Written, SnapshotError> {
    let write = |e: &dyn std::fmt::Display| SnapshotError::Write(e.to_string());
    let txn = db.begin_write().map_err(|e| write(&e))?;
    let mut written = Written::default();
    {
        let mut objects = txn.open_table(OBJECTS).map_err(|e| write(&e))?;
        for (key, state) in commit.changes {
            match state {
                Some(object) => {
                    let bytes = encode(object).map_err(|e| write(&e))?;
                    objects
                        .insert(key, bytes.as_slice())
                        .map_err(|e| write(&e))?;
                    written.objects += 1;
                    written.bytes += bytes.len() as u64;
                }
                None => {
                    if objects.remove(key).map_err(|e| write(&e))?.is_some() {
                        written.removed += 1;
                    }
                }
            }
        }
        let mut meta = txn.open_table(META).map_err(|e| write(&e))?;
        meta.insert(RESOURCE_VERSION, commit.resource_version.as_bytes())
            .map_err(|e| write(&e))?;
        meta.insert(COUNT, commit.count.to_le_bytes().as_slice())
            .map_err(|e| write(&e))?;
    }
    txn.commit().map_err(|e| write(&e))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(selector: &str) -> SnapshotIdentity {
        SnapshotIdentity {
            cluster: "test".into(),
            resource: "/api/v1/configmaps".into(),
            label_selector: selector.into(),
            field_selector: String::new(),
            object_schema: "String".into(),
        }
    }

    fn decode(_: &mut ObjectDecoder, b: &[u8]) -> Result<String, serde_json::Error> {
        serde_json::from_slice(b)
    }

    fn encode(s: &String) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(s)
    }

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("kinformer-snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn commit(db: &Database, changes: Vec<(&str, Option<&String>)>, rv: &str, count: u64) {
        let c = Commit {
            changes,
            resource_version: rv,
            count,
        };
        write(db, c, encode).unwrap();
    }

    /// Many chunks over every decoding thread: every object comes back once,
    /// in key order; one that does not decode, anywhere, makes it corrupt.
    #[test]
    fn a_large_snapshot_reads_back_whole_and_in_order() {
        let d = dir("large");
        let id = identity("");
        let path = path_in(&d, &id);
        let db = create(&path, &id).unwrap();
        let n = 5 * CHUNK + 7;
        let keys: Vec<String> = (0..n).map(|i| format!("ns/o-{i:05}")).collect();
        let values: Vec<String> = (0..n).map(|i| format!("value {i}")).collect();
        commit(
            &db,
            keys.iter()
                .map(String::as_str)
                .zip(values.iter().map(Some))
                .collect(),
            "7",
            n as u64,
        );
        drop(db);
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        let got: Vec<&str> = loaded.objects.iter().map(|o| o.as_str()).collect();
        let want: Vec<&str> = values.iter().map(String::as_str).collect();
        assert_eq!(got, want);
        drop(loaded);
        // The last object does not decode as a String: the whole load fails.
        let refuse_last = |_: &mut ObjectDecoder, b: &[u8]| {
            let s: String = serde_json::from_slice(b)?;
            if s == format!("value {}", 5 * CHUNK + 6) {
                serde_json::from_slice::<String>(b"{")
            } else {
                Ok(s)
            }
        };
        assert!(matches!(
            load(&path, &id, refuse_last),
            Err(SnapshotError::Corrupt(_))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// What was committed reads back whole, at its resourceVersion; a file
    /// never committed at one is `Empty`; another identity is `Foreign`.
    #[test]
    fn a_committed_snapshot_reads_back_and_only_for_its_identity() {
        let d = dir("roundtrip");
        let id = identity("");
        let path = path_in(&d, &id);
        assert!(load(&path, &id, decode).unwrap().is_none());
        let db = create(&path, &id).unwrap();
        drop(db);
        assert!(matches!(
            load(&path, &id, decode),
            Err(SnapshotError::Empty)
        ));
        let db = create(&path, &id).unwrap();
        let (a, b) = ("a".to_string(), "b".to_string());
        commit(&db, vec![("ns/a", Some(&a)), ("ns/b", Some(&b))], "10", 2);
        commit(&db, vec![("ns/a", None)], "12", 1);
        drop(db);
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        assert_eq!(loaded.resource_version, "12");
        assert_eq!(
            loaded
                .objects
                .iter()
                .map(|o| o.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        drop(loaded);
        let other = identity("app=x");
        assert!(matches!(
            load(&path, &other, decode),
            Err(SnapshotError::Foreign(_))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A snapshot of another schema version is `Outdated`, not read.
    #[test]
    fn another_schema_version_is_outdated() {
        let d = dir("outdated");
        let id = identity("");
        let path = path_in(&d, &id);
        let db = create(&path, &id).unwrap();
        let a = "a".to_string();
        commit(&db, vec![("ns/a", Some(&a))], "10", 1);
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(SCHEMA, b"0".as_slice())
            .unwrap();
        txn.commit().unwrap();
        drop(db);
        assert!(matches!(
            load(&path, &id, decode),
            Err(SnapshotError::Outdated(_))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A truncated file, garbage, or stored objects that do not decode are
    /// `Corrupt`: never a panic.
    #[test]
    fn truncated_or_garbled_files_are_corrupt() {
        let d = dir("corrupt");
        let id = identity("");
        let path = path_in(&d, &id);
        let db = create(&path, &id).unwrap();
        let x = "x".repeat(10_000);
        let keys: Vec<String> = (0..50).map(|i| format!("ns/{i}")).collect();
        commit(
            &db,
            keys.iter().map(|k| (k.as_str(), Some(&x))).collect(),
            "5",
            50,
        );
        drop(db);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
        assert!(
            matches!(load(&path, &id, decode), Err(SnapshotError::Corrupt(_))),
            "truncated"
        );
        std::fs::write(&path, b"not a database at all").unwrap();
        assert!(
            matches!(load(&path, &id, decode), Err(SnapshotError::Corrupt(_))),
            "garbage"
        );
        let db = create(&path, &id).unwrap();
        let wrong = |_: &mut ObjectDecoder, _: &[u8]| serde_json::from_slice::<String>(b"{");
        commit(&db, vec![("ns/a", Some(&x))], "5", 1);
        drop(db);
        assert!(
            matches!(load(&path, &id, wrong), Err(SnapshotError::Corrupt(_))),
            "undecodable"
        );
        let db = create(&path, &id).unwrap();
        commit(&db, vec![("ns/a", Some(&x))], "5", 2);
        drop(db);
        assert!(
            matches!(load(&path, &id, decode), Err(SnapshotError::Corrupt(_))),
            "count"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
