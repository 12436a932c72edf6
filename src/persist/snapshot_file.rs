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
    let mut stored = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for entry in table.iter()? {
        let (key, value) = entry?;
        stored.push((key.value().to_owned(), value.value().to_vec()));
    }
    drop((meta, table, txn));
    let read = started.elapsed();
    let objects = decode_all(stored, decode)?;
    tracing::debug!(objects = count, ?read, decoded = ?started.elapsed() - read, "snapshot read");
    Ok(Some(Loaded {
        objects,
        resource_version,
        db,
    }))
}

/// Decodes the stored objects on every core: decoding is most of a
/// restore's time (100k ConfigMaps: 1.76 s on one core, 1.37 s on both of
/// the 2-core machine, BENCHMARKS.md "Warm restart").
fn decode_all<K: Send + Sync>(
    stored: Vec<(String, Vec<u8>)>,
    decode: Decode<K>,
) -> Result<Vec<Arc<K>>, SnapshotError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let per_thread = stored.len().div_ceil(threads).max(1);
    let decode_chunk = |chunk: &[(String, Vec<u8>)]| -> Result<Vec<Arc<K>>, SnapshotError> {
        let mut decoder = ObjectDecoder::default();
        chunk
            .iter()
            .map(|(key, bytes)| {
                decode(&mut decoder, bytes)
                    .map(Arc::new)
                    .map_err(|e| SnapshotError::Corrupt(format!("{key}: {e}")))
            })
            .collect()
    };
    let decoded: Vec<Result<Vec<Arc<K>>, SnapshotError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = stored
            .chunks(per_thread)
            .map(|chunk| scope.spawn(move || decode_chunk(chunk)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(SnapshotError::Corrupt("decoding an object panicked".into()))
                })
            })
            .collect()
    });
    let mut objects = Vec::with_capacity(stored.len());
    for chunk in decoded {
        objects.extend(chunk?);
    }
    Ok(objects)
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
