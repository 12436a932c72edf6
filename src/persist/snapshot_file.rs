//! One informer's snapshot on disk: a redb database with two tables, the
//! objects by key (their JSON, compressed: see
//! [`compression`](super::compression)) and the meta data (identity,
//! schema, the resourceVersion, the object count and the compression
//! dictionary), written in one transaction per consistent state, so the
//! file is always consistent at its resourceVersion.
//!
//! Why redb: pure Rust (no C toolchain, unlike SQLite's rusqlite), one file,
//! ACID transactions with copy-on-write B-trees (a crash leaves the last
//! committed state), and a small dependency tree. fjall (an LSM tree) suits
//! write-heavy workloads with many keys better, but needs a directory of
//! segment files and a journal per keyspace, and its transactions are an
//! extra layer; a snapshot is rewritten only where it changed, read whole at
//! start, so a B-tree fits.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kinformer_actors::heap_reserve::HeapReserve;
use kinformer_actors::reflector::decode::ObjectDecoder;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::compression::{DICTIONARY_SAMPLES, SAMPLE_BYTES, ValueReader, ValueWriter, sample};
use super::error::SnapshotError;
use super::identity::{SNAPSHOT_SCHEMA, SnapshotIdentity};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const IDENTITY: &str = "identity";
const SCHEMA: &str = "schema";
const RESOURCE_VERSION: &str = "resource_version";
const COUNT: &str = "count";
/// The dictionary values are compressed with ([`compression`](super::compression)), once learned.
const DICTIONARY: &str = "dictionary";

/// Decodes one stored object (with a decoder each decoding thread keeps).
pub type Decode<K> = fn(&mut ObjectDecoder, &[u8]) -> Result<K, serde_json::Error>;
/// Encodes one object for storage.
pub type Encode<K> = fn(&K) -> Result<Vec<u8>, serde_json::Error>;

/// A snapshot file checked against its identity, not read yet.
pub struct Opened {
    /// The open database (for the reading, then for the writer).
    pub db: Database,
    /// The resourceVersion its objects are the state at.
    pub resource_version: String,
    /// How many objects it holds.
    pub count: u64,
    /// The dictionary its values are compressed with, if it has one.
    pub dictionary: Option<Vec<u8>>,
}

/// The snapshot file of `identity` in `dir`.
pub fn path_in(dir: &Path, identity: &SnapshotIdentity) -> PathBuf {
    dir.join(identity.file_name())
}

/// Opens and checks the snapshot at `path` (`Ok(None)`: there is none).
/// Any problem is an error; the caller discards the file. redb asserts on
/// some damaged files (a truncated one panics in `Database::open`): the
/// panic is caught here and is `Corrupt` too.
pub fn open(path: &Path, identity: &SnapshotIdentity) -> Result<Option<Opened>, SnapshotError> {
    caught(|| open_checked(path, identity))
}

/// `read`, with a panic of the database (a damaged file) as `Corrupt`.
fn caught<T>(read: impl FnOnce() -> Result<T, SnapshotError>) -> Result<T, SnapshotError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(SnapshotError::Corrupt(
            "the database panicked reading it".into(),
        ))
    })
}

fn open_checked(path: &Path, identity: &SnapshotIdentity) -> Result<Option<Opened>, SnapshotError> {
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
    let bytes = |key: &str| -> Result<Option<Vec<u8>>, SnapshotError> {
        Ok(meta.get(key)?.map(|v| v.value().to_vec()))
    };
    let text = |key: &str| -> Result<String, SnapshotError> {
        String::from_utf8(bytes(key)?.unwrap_or_default())
            .map_err(|_| SnapshotError::Corrupt(format!("{key} is not UTF-8")))
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
    let count = bytes(COUNT)?
        .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| SnapshotError::Corrupt("no object count".into()))?;
    let dictionary = bytes(DICTIONARY)?;
    let stored = txn.open_table(OBJECTS)?.len()?;
    if stored != count {
        return Err(SnapshotError::Corrupt(format!(
            "{stored} objects stored, {count} committed"
        )));
    }
    drop((meta, txn));
    Ok(Some(Opened {
        db,
        resource_version,
        count,
        dictionary,
    }))
}

/// Stored objects handed to a decoding thread at a time, and handed on as
/// one page.
pub const PAGE: usize = 512;

/// Chunks handed out but not yet handed on, per decoding thread: the bytes
/// read and the objects decoded but not handed on stay bounded (a restore
/// never holds the whole file's bytes and its objects at once).
const CHUNKS_IN_FLIGHT: usize = 3;

/// A chunk of stored objects read from the file, in one buffer each for
/// keys and values (two allocations per chunk, not two per object).
#[derive(Default)]
struct Chunk {
    keys: String,
    values: Vec<u8>,
    /// Where each object's key and value end.
    ends: Vec<(usize, usize)>,
}

impl Chunk {
    fn push(&mut self, key: &str, value: &[u8]) {
        self.keys.push_str(key);
        self.values.extend_from_slice(value);
        self.ends.push((self.keys.len(), self.values.len()));
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn entries(&self) -> impl Iterator<Item = (&str, &[u8])> {
        let mut from = (0, 0);
        self.ends.iter().map(move |&(k, v)| {
            let entry = (&self.keys[from.0..k], &self.values[from.1..v]);
            from = (k, v);
            entry
        })
    }
}

/// Reads every stored object, decoding them on every core while the file
/// is read, and hands them to `page` in key order, [`PAGE`] at a time, as
/// they are decoded: decoding is most of a restore's time, and the
/// informer caches what it gets meanwhile. `page` answers `false` when no
/// more is wanted (reading stops). Returns how many objects were read; an
/// object that does not decode, or a count other than the committed one,
/// is `Corrupt` (pages before it were handed on).
pub fn read_pages<K: Send + Sync>(
    opened: &Opened,
    decode: Decode<K>,
    page: impl FnMut(Vec<Arc<K>>) -> bool,
) -> Result<u64, SnapshotError> {
    caught(|| read_pages_checked(opened, decode, page))
}

fn read_pages_checked<K: Send + Sync>(
    opened: &Opened,
    decode: Decode<K>,
    mut page: impl FnMut(Vec<Arc<K>>) -> bool,
) -> Result<u64, SnapshotError> {
    type Decoded<K> = (usize, Result<Vec<Arc<K>>, SnapshotError>);
    let txn = opened.db.begin_read()?;
    let table = txn.open_table(OBJECTS)?;
    let dictionary = opened.dictionary.as_deref();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| {
        let (decoded_tx, decoded) = std::sync::mpsc::channel::<Decoded<K>>();
        // One queue for every decoding thread: the next chunk goes to
        // whichever is free (chunks dealt round-robin waited for the slowest
        // thread: 0.61 against 0.45 s of CPU in a 10k-Pod restore). Each
        // thread holds the receiver, so it is gone once they all are.
        let (chunks, chunks_rx) =
            std::sync::mpsc::sync_channel::<(usize, Chunk)>(CHUNKS_IN_FLIGHT * threads);
        let chunks_rx = Arc::new(std::sync::Mutex::new(chunks_rx));
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let chunks_rx = chunks_rx.clone();
            let decoded_tx = decoded_tx.clone();
            let mut values = ValueReader::new(dictionary)?;
            workers.push(scope.spawn(move || {
                let mut decoder = ObjectDecoder::default();
                let mut reserve = HeapReserve::default();
                let mut json_bytes = 0;
                loop {
                    // The lock only while taking a chunk (the guard is a
                    // temporary of this statement).
                    let next = chunks_rx
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok((i, chunk)) = next else { return };
                    // A panic decodes nothing of its chunk but ends no
                    // thread: every chunk handed out gets its answer (the
                    // reader waits for the oldest one out).
                    let objects = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        reserve.reserve_for(std::mem::take(&mut json_bytes));
                        chunk
                            .entries()
                            .map(|(key, stored)| {
                                let json = values.json(stored)?;
                                json_bytes += json.len();
                                decode(&mut decoder, json)
                                    .map(Arc::new)
                                    .map_err(|e| SnapshotError::Corrupt(format!("{key}: {e}")))
                            })
                            .collect()
                    }))
                    .unwrap_or_else(|panic| {
                        Err(SnapshotError::Corrupt(format!(
                            "decoding an object panicked: {}",
                            kinformer_actors::panic::panic_message(panic.as_ref())
                        )))
                    });
                    if decoded_tx.send((i, objects)).is_err() {
                        return;
                    }
                }
            }));
        }
        drop((decoded_tx, chunks_rx));
        // Decoded chunks come back in any order; they are handed on in
        // the file's. At most the chunks handed out are held here.
        let mut ahead: BTreeMap<usize, Result<Vec<Arc<K>>, SnapshotError>> = BTreeMap::new();
        let mut next = 0;
        let mut read = 0u64;
        let mut wanted = true;
        let mut hand_on =
            |got: Decoded<K>, next: &mut usize, wanted: &mut bool| -> Result<(), SnapshotError> {
                // Once the reader wants no more, what comes after is not
                // looked at: a damaged chunk it never asked for is no error.
                if !*wanted {
                    return Ok(());
                }
                ahead.insert(got.0, got.1);
                while *wanted {
                    let Some(objects) = ahead.remove(next) else {
                        break;
                    };
                    *next += 1;
                    *wanted = page(objects?);
                }
                Ok(())
            };
        let reading = (|| -> Result<usize, SnapshotError> {
            let mut chunk = Chunk::default();
            let mut handed = 0;
            for entry in table.iter()? {
                let (key, value) = entry?;
                chunk.push(key.value(), value.value());
                read += 1;
                if chunk.len() == PAGE {
                    // A free thread may run ahead of a slow one by at most
                    // the window: the oldest chunk out is waited for first.
                    while handed - next >= CHUNKS_IN_FLIGHT * threads && wanted {
                        match decoded.recv() {
                            Ok(got) => hand_on(got, &mut next, &mut wanted)?,
                            Err(_) => break,
                        }
                    }
                    if !wanted {
                        return Ok(handed);
                    }
                    // Every decoding thread gone: the join below says why.
                    let _ = chunks.send((handed, std::mem::take(&mut chunk)));
                    handed += 1;
                    while let Ok(got) = decoded.try_recv() {
                        hand_on(got, &mut next, &mut wanted)?;
                    }
                    if !wanted {
                        return Ok(handed);
                    }
                }
            }
            if chunk.len() > 0 {
                let _ = chunks.send((handed, chunk));
                handed += 1;
            }
            Ok(handed)
        })();
        drop(chunks);
        let handed = reading?;
        while next < handed && wanted {
            match decoded.recv() {
                Ok(got) => hand_on(got, &mut next, &mut wanted)?,
                Err(_) => break,
            }
        }
        for worker in workers {
            if worker.join().is_err() {
                return Err(SnapshotError::Corrupt("decoding an object panicked".into()));
            }
        }
        if wanted && (next < handed || read != opened.count) {
            return Err(SnapshotError::Corrupt(format!(
                "{read} objects read, {} committed",
                opened.count
            )));
        }
        Ok(read)
    })
}

/// A fresh, empty snapshot for `identity` at `path` (any content there is
/// replaced), not yet at any resourceVersion. A file another informer or
/// process has open is `Unavailable` and left alone; a file that is not a
/// database is replaced.
pub fn create(path: &Path, identity: &SnapshotIdentity) -> Result<Database, SnapshotError> {
    let write =
        |e: &dyn std::fmt::Display| SnapshotError::Write(format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| write(&e))?;
    }
    // Opened in place, never unlinked while someone may hold it: a process
    // writing to an unlinked file would lose every commit without an error.
    let db = match caught(|| Database::create(path).map_err(SnapshotError::from)) {
        Ok(db) => db,
        Err(SnapshotError::Unavailable(e)) => return Err(SnapshotError::Unavailable(e)),
        Err(_) => {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(write(&e)),
            }
            Database::create(path).map_err(|e| write(&e))?
        }
    };
    let txn = begin_write(&db).map_err(|e| write(&e))?;
    {
        for table in [OBJECTS, META] {
            txn.delete_table(table).map_err(|e| write(&e))?;
        }
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

/// A write transaction whose commit leaves the file quick to open after a
/// crash. Without it, opening a file its process did not close (killed,
/// OOM, a node lost) makes redb check every page first, in time that grows
/// with the file: 160–190 ms for a 270 MB file on the 2-core bench machine
/// (a throwaway program), before the restore reads anything. Quick repair
/// stores the allocator's state in each commit (and commits in two
/// phases), so such an open took under a millisecond; each commit took
/// about 0.25 ms more, and the writer commits at most every
/// [`COMMIT_INTERVAL`](super::writer::COMMIT_INTERVAL).
fn begin_write(db: &Database) -> Result<redb::WriteTransaction, redb::TransactionError> {
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(true);
    Ok(txn)
}

/// What one transaction wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Objects written (added or changed).
    pub objects: u64,
    /// Objects removed.
    pub removed: u64,
    /// Bytes stored for the objects written (compressed).
    pub bytes: u64,
    /// The JSON of the objects written.
    pub json_bytes: u64,
}

/// The keys of every object the file holds.
pub fn stored_keys(db: &Database) -> Result<Vec<String>, SnapshotError> {
    let read = |e: &dyn std::fmt::Display| SnapshotError::Write(e.to_string());
    let txn = db.begin_read().map_err(|e| read(&e))?;
    let objects = txn.open_table(OBJECTS).map_err(|e| read(&e))?;
    let mut keys = Vec::new();
    for entry in objects.iter().map_err(|e| read(&e))? {
        let (key, _) = entry.map_err(|e| read(&e))?;
        keys.push(key.value().to_owned());
    }
    Ok(keys)
}

/// One consistent state to commit: the state of each changed key (`None`:
/// gone), the resourceVersion and the object count at it.
pub struct Commit<'a, I> {
    /// The changed keys with their state, read as they are written (a
    /// compact cache decodes each object on reading: a commit of every key
    /// must not hold them all at once); a state that could not be read
    /// fails the commit.
    pub changes: I,
    /// The resourceVersion the snapshot is at once committed.
    pub resource_version: &'a str,
    /// How many objects the snapshot holds once committed.
    pub count: u64,
}

/// Writes `commit` in one transaction: the objects and the resourceVersion
/// together, or nothing. The first commit of at least
/// [`DICTIONARY_SAMPLES`] objects (or of [`SAMPLE_BYTES`] of JSON, for
/// large objects) into a file without a dictionary learns one from its
/// first objects, stored in the same transaction. At most that many
/// objects, or about that many bytes, are held at once.
pub fn write<K, S, I>(
    db: &Database,
    commit: Commit<'_, I>,
    encode: Encode<K>,
    values: &mut ValueWriter,
) -> Result<Written, SnapshotError>
where
    S: AsRef<str>,
    I: Iterator<Item = (S, Result<Option<Arc<K>>, SnapshotError>)>,
{
    let write = |e: &dyn std::fmt::Display| SnapshotError::Write(e.to_string());
    let mut changes = commit.changes;
    // The changes up to the first `DICTIONARY_SAMPLES` objects (fewer once
    // their samples hold `SAMPLE_BYTES`), learned from, then written. A
    // sample is the object's JSON (written from it) or, for a large object,
    // its head and tail (the object is encoded again to be written): the
    // samples, all that is held, stay within `SAMPLE_BYTES` and number at
    // least `SAMPLE_BYTES` / the dictionary's size.
    let mut head = Vec::new();
    let mut samples: Vec<Vec<u8>> = Vec::new();
    let mut sample_bytes = 0;
    let mut learned = None;
    if values.wants_dictionary(DICTIONARY_SAMPLES) {
        let enough =
            |count: usize, bytes: usize| count == DICTIONARY_SAMPLES || bytes >= SAMPLE_BYTES;
        for (key, state) in changes.by_ref() {
            let state = state?;
            let mut whole = None;
            if let Some(object) = &state {
                let json = encode(object).map_err(|e| write(&e))?;
                let part = match sample(&json) {
                    Cow::Borrowed(_) => {
                        whole = Some(samples.len());
                        json
                    }
                    Cow::Owned(part) => part,
                };
                sample_bytes += part.len();
                samples.push(part);
            }
            head.push((key, state, whole));
            if enough(samples.len(), sample_bytes) {
                break;
            }
        }
        if enough(samples.len(), sample_bytes) {
            let refs: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
            learned = values.learn(&refs);
        }
    }
    let txn = begin_write(db).map_err(|e| write(&e))?;
    let mut written = Written::default();
    {
        let mut objects = txn.open_table(OBJECTS).map_err(|e| write(&e))?;
        let rest = changes.map(|(key, state)| (key, state, None));
        let head = head
            .into_iter()
            .map(|(key, state, whole)| (key, Ok(state), whole));
        // An object that cannot be read fails the whole transaction: its
        // key must not go stale (nor be removed) under a newer RV.
        for (key, state, whole) in head.chain(rest) {
            let key = key.as_ref();
            let state = state?;
            match state {
                Some(object) => {
                    let json = match whole {
                        Some(i) => std::mem::take(&mut samples[i]),
                        None => encode(&object).map_err(|e| write(&e))?,
                    };
                    let stored = values.encode(&json)?;
                    objects
                        .insert(key, stored.as_slice())
                        .map_err(|e| write(&e))?;
                    written.objects += 1;
                    written.bytes += stored.len() as u64;
                    written.json_bytes += json.len() as u64;
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
        if let Some(dictionary) = &learned {
            meta.insert(DICTIONARY, dictionary.as_slice())
                .map_err(|e| write(&e))?;
        }
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

    /// A fresh directory, removed when dropped (also when the test fails).
    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("kinformer-snapshot-{name}-"))
            .tempdir()
            .unwrap()
    }

    /// Commits as a writer on this file would (with its dictionary, if it
    /// has one).
    fn commit(db: &Database, changes: Vec<(&str, Option<&String>)>, rv: &str, count: u64) {
        let changes = changes
            .into_iter()
            .map(|(k, o)| (k, Ok(o.map(|o| Arc::new(o.clone())))));
        let dictionary = {
            let txn = db.begin_read().unwrap();
            let meta = txn.open_table(META).unwrap();
            meta.get(DICTIONARY).unwrap().map(|v| v.value().to_vec())
        };
        let mut values = ValueWriter::new(dictionary.as_deref()).unwrap();
        let c = Commit {
            changes,
            resource_version: rv,
            count,
        };
        write(db, c, encode, &mut values).unwrap();
    }

    struct Loaded {
        objects: Vec<Arc<String>>,
        resource_version: String,
        pages: Vec<usize>,
    }

    impl Loaded {
        /// The objects read back, in order.
        fn values(&self) -> Vec<&str> {
            self.objects.iter().map(|o| o.as_str()).collect()
        }
    }

    /// Opens and reads the whole snapshot.
    fn load(
        path: &Path,
        id: &SnapshotIdentity,
        decode: Decode<String>,
    ) -> Result<Option<Loaded>, SnapshotError> {
        let Some(opened) = open(path, id)? else {
            return Ok(None);
        };
        let (mut objects, mut pages) = (Vec::new(), Vec::new());
        read_pages(&opened, decode, |page| {
            pages.push(page.len());
            objects.extend(page);
            true
        })?;
        Ok(Some(Loaded {
            objects,
            resource_version: opened.resource_version,
            pages,
        }))
    }

    fn values(n: usize) -> (Vec<String>, Vec<String>) {
        let keys = (0..n).map(|i| format!("ns/o-{i:05}")).collect();
        let values = (0..n)
            .map(|i| format!("value {i} of a snapshot with many values alike"))
            .collect();
        (keys, values)
    }

    fn all<'a>(keys: &'a [String], values: &'a [String]) -> Vec<(&'a str, Option<&'a String>)> {
        keys.iter()
            .map(String::as_str)
            .zip(values.iter().map(Some))
            .collect()
    }

    fn stored_size(path: &Path) -> (usize, bool) {
        let db = Database::open(path).unwrap();
        let txn = db.begin_read().unwrap();
        let objects = txn.open_table(OBJECTS).unwrap();
        let bytes = objects
            .iter()
            .unwrap()
            .map(|e| e.unwrap().1.value().len())
            .sum();
        let meta = txn.open_table(META).unwrap();
        (bytes, meta.get(DICTIONARY).unwrap().is_some())
    }

    /// A commit of many objects learns the file's dictionary and stores
    /// them compressed with it (smaller than compressed alone); a small
    /// first commit stores its objects without one, and they still read
    /// back once a later large commit learned it.
    #[test]
    fn a_large_commit_learns_the_dictionary_and_older_values_still_read() {
        let d = dir("dictionary");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        let n = DICTIONARY_SAMPLES * 2;
        let (keys, vals) = values(n);
        commit(&db, all(&keys[..10], &vals[..10]), "5", 10);
        drop(db);
        let (alone, learned) = stored_size(&path);
        assert!(!learned, "10 objects learn no dictionary");
        let db = Database::open(&path).unwrap();
        commit(&db, all(&keys[10..], &vals[10..]), "6", n as u64);
        drop(db);
        let (bytes, learned) = stored_size(&path);
        assert!(learned);
        let per_object_with = (bytes - alone) / (n - 10);
        assert!(
            per_object_with < alone / 10,
            "{per_object_with} B per object with the dictionary, {} alone",
            alone / 10
        );
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        let got: Vec<&str> = loaded.objects.iter().map(|o| o.as_str()).collect();
        assert_eq!(got, vals.iter().map(String::as_str).collect::<Vec<_>>());
    }

    /// Large objects: the dictionary is learned once their JSON reaches the
    /// sample budget, from fewer than `DICTIONARY_SAMPLES` of them, so a
    /// commit of 1 MB objects does not hold 256 of them to learn from.
    #[test]
    fn large_objects_learn_the_dictionary_from_a_bounded_sample() {
        let d = dir("large");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        // Half-megabyte objects (Helm release Secrets): their whole JSON
        // would reach the budget after six, too few to learn from.
        let n = 110;
        let keys: Vec<String> = (0..n).map(|i| format!("ns/secret-{i:03}")).collect();
        let vals: Vec<String> = (0..n)
            .map(|i| format!("release-{i}:{}", "payload ".repeat(64 * 1024)))
            .collect();
        assert!(vals[0].len() > 500_000 && n < DICTIONARY_SAMPLES);
        commit(&db, all(&keys, &vals), "9", n as u64);
        drop(db);
        let (_, learned) = stored_size(&path);
        assert!(learned, "learned from the first {SAMPLE_BYTES} bytes");
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        assert_eq!(loaded.objects.len(), n);
    }

    /// A file its process never closed (copied while open, as a crash
    /// leaves it) opens without redb's full repair, and reads back whole.
    #[test]
    fn a_file_left_open_by_a_crash_opens_without_a_full_repair() {
        let d = dir("crashed");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        let n = 3 * PAGE;
        let (keys, vals) = values(n);
        commit(&db, all(&keys[..PAGE], &vals[..PAGE]), "3", PAGE as u64);
        commit(&db, all(&keys[PAGE..], &vals[PAGE..]), "4", n as u64);
        let crashed = d.path().join("crashed.redb");
        std::fs::copy(&path, &crashed).unwrap();
        drop(db);
        let repaired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = repaired.clone();
        let db = Database::builder()
            .set_repair_callback(move |_| flag.store(true, std::sync::atomic::Ordering::SeqCst))
            .open(&crashed)
            .unwrap();
        drop(db);
        assert!(
            !repaired.load(std::sync::atomic::Ordering::SeqCst),
            "a full repair ran"
        );
        let loaded = load(&crashed, &id, decode).unwrap().unwrap();
        assert_eq!(loaded.resource_version, "4");
        let got: Vec<&str> = loaded.objects.iter().map(|o| o.as_str()).collect();
        assert_eq!(got, vals.iter().map(String::as_str).collect::<Vec<_>>());
    }

    /// An object found damaged partway through the file: the pages before
    /// it were handed on, in order, and the read ends `Corrupt`.
    #[test]
    fn a_value_damaged_partway_ends_the_read_after_the_pages_before_it() {
        let d = dir("partway");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        let n = 5 * PAGE + 7;
        let (keys, vals) = values(n);
        commit(&db, all(&keys, &vals), "7", n as u64);
        let txn = db.begin_write().unwrap();
        let damaged = 3 * PAGE + 10;
        txn.open_table(OBJECTS)
            .unwrap()
            .insert(keys[damaged].as_str(), [2u8, 1, 2, 3].as_slice())
            .unwrap();
        txn.commit().unwrap();
        drop(db);
        let opened = open(&path, &id).unwrap().unwrap();
        let mut handed = Vec::new();
        let read = read_pages(&opened, decode, |page| {
            handed.extend(page);
            true
        });
        assert!(matches!(read, Err(SnapshotError::Corrupt(_))), "{read:?}");
        assert_eq!(handed.len(), 3 * PAGE, "the pages before the damaged one");
        assert_eq!(*handed[3 * PAGE - 1], vals[3 * PAGE - 1]);
        // A reader that wants no more stops at once: no error.
        let mut pages = 0;
        let read = read_pages(&opened, decode, |_| {
            pages += 1;
            false
        });
        assert!(read.is_ok() && pages == 1, "{read:?}, {pages} pages");
        drop(opened);
    }

    /// Many chunks over every decoding thread: every object comes back once,
    /// in key order; one that does not decode, anywhere, makes it corrupt.
    #[test]
    fn a_large_snapshot_reads_back_whole_and_in_order() {
        let d = dir("large");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        let n = 5 * PAGE + 7;
        let (keys, values) = values(n);
        commit(&db, all(&keys, &values), "7", n as u64);
        drop(db);
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        assert_eq!(loaded.pages, [PAGE, PAGE, PAGE, PAGE, PAGE, 7]);
        let got: Vec<&str> = loaded.objects.iter().map(|o| o.as_str()).collect();
        let want: Vec<&str> = values.iter().map(String::as_str).collect();
        assert_eq!(got, want);
        drop(loaded);
        // The last object does not decode as a String: the whole load fails.
        let refuse_last = |_: &mut ObjectDecoder, b: &[u8]| {
            let s: String = serde_json::from_slice(b)?;
            if s.starts_with(&format!("value {} ", 5 * PAGE + 6)) {
                serde_json::from_slice::<String>(b"{")
            } else {
                Ok(s)
            }
        };
        assert!(matches!(
            load(&path, &id, refuse_last),
            Err(SnapshotError::Corrupt(_))
        ));
    }

    /// A decode that panics partway through a snapshot larger than the
    /// decoding window is `Corrupt` after the pages before it, without
    /// waiting for a chunk no thread will decode.
    #[test]
    fn a_panicking_decode_is_corrupt_after_the_pages_before_it() {
        let d = dir("decode-panic");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        // More chunks than the window holds on this machine.
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let n = (CHUNKS_IN_FLIGHT * threads + 4) * PAGE + 3;
        let (keys, values) = values(n);
        commit(&db, all(&keys, &values), "7", n as u64);
        drop(db);
        let panics = |_: &mut ObjectDecoder, b: &[u8]| {
            let s: String = serde_json::from_slice(b)?;
            assert!(
                !s.starts_with(&format!("value {} ", 3 * PAGE + 10)),
                "a decoder bug"
            );
            Ok(s)
        };
        let opened = open(&path, &id).unwrap().unwrap();
        let mut handed = Vec::new();
        let read = read_pages(&opened, panics, |page| {
            handed.extend(page);
            true
        });
        assert!(
            matches!(&read, Err(SnapshotError::Corrupt(why)) if why.contains("a decoder bug")),
            "{read:?}"
        );
        assert_eq!(handed.len(), 3 * PAGE, "the pages before the panic");
        drop(opened);
    }

    /// What was committed reads back whole, at its resourceVersion; a file
    /// never committed at one is `Empty`; another identity is `Foreign`.
    #[test]
    fn a_committed_snapshot_reads_back_and_only_for_its_identity() {
        let d = dir("roundtrip");
        let id = identity("");
        let path = path_in(d.path(), &id);
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
        assert_eq!(loaded.values(), ["b"]);
        drop(loaded);
        let other = identity("app=x");
        assert!(matches!(
            load(&path, &other, decode),
            Err(SnapshotError::Foreign(_))
        ));
    }

    /// A snapshot of another schema version is `Outdated`, not read.
    #[test]
    fn another_schema_version_is_outdated() {
        let d = dir("outdated");
        let id = identity("");
        let path = path_in(d.path(), &id);
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
    }

    /// A truncated file, garbage, or stored objects that do not decode are
    /// `Corrupt`: never a panic.
    #[test]
    fn truncated_or_garbled_files_are_corrupt() {
        let d = dir("corrupt");
        let id = identity("");
        let path = path_in(d.path(), &id);
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
    }

    /// A file another database handle has open is `Unavailable`, to open
    /// and to create, and is left as it was (never unlinked).
    #[test]
    fn a_file_in_use_is_unavailable_and_left_alone() {
        use std::os::unix::fs::MetadataExt;
        let d = dir("in-use");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        commit(&db, vec![("a", Some(&"x".to_string()))], "5", 1);
        let inode = std::fs::metadata(&path).unwrap().ino();
        assert!(matches!(
            open(&path, &id),
            Err(SnapshotError::Unavailable(_))
        ));
        assert!(matches!(
            create(&path, &id),
            Err(SnapshotError::Unavailable(_))
        ));
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        drop(db);
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        assert_eq!(loaded.resource_version, "5");
    }

    /// `create` on a snapshot that is not in use empties it in place.
    #[test]
    fn create_empties_an_existing_snapshot() {
        let d = dir("recreate");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        commit(&db, vec![("a", Some(&"x".to_string()))], "5", 1);
        drop(db);
        let db = create(&path, &id).unwrap();
        drop(db);
        assert!(matches!(open(&path, &id), Err(SnapshotError::Empty)));
    }

    /// A commit reads its objects as it writes them: a compact cache
    /// decodes each on reading, so no more than the dictionary's samples
    /// are held at once, however many keys the commit writes.
    /// A state that cannot be read (a compact cache's entry that does not
    /// decode) fails the whole commit: neither the keys before it nor the
    /// resourceVersion are written, so no key goes stale under a newer RV.
    #[test]
    fn an_unreadable_state_fails_the_whole_commit() {
        let d = dir("unreadable");
        let id = identity("");
        let path = path_in(d.path(), &id);
        let db = create(&path, &id).unwrap();
        let (keys, values) = values(3);
        commit(&db, all(&keys, &values), "5", 3);
        let mut writer = ValueWriter::new(None).unwrap();
        let changes = vec![
            (keys[0].as_str(), Ok(Some(Arc::new("new".to_owned())))),
            (
                keys[1].as_str(),
                Err(SnapshotError::Write("does not decode".into())),
            ),
            (keys[2].as_str(), Ok(None)),
        ];
        let c = Commit {
            changes: changes.into_iter(),
            resource_version: "6",
            count: 2,
        };
        let e = write(&db, c, encode, &mut writer).unwrap_err();
        assert!(e.to_string().contains("does not decode"), "{e}");
        drop(db);
        let loaded = load(&path, &id, decode).unwrap().unwrap();
        assert_eq!(loaded.resource_version, "5");
        assert_eq!(
            loaded.values(),
            values.iter().map(String::as_str).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_commit_holds_few_objects_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        static LIVE: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        struct Counted(String);
        impl Drop for Counted {
            fn drop(&mut self) {
                LIVE.fetch_sub(1, Relaxed);
            }
        }
        fn counted(i: usize) -> Arc<Counted> {
            let live = LIVE.fetch_add(1, Relaxed) + 1;
            MOST.fetch_max(live, Relaxed);
            Arc::new(Counted(format!(
                "object {i} with some content to learn from"
            )))
        }
        fn encode(c: &Counted) -> Result<Vec<u8>, serde_json::Error> {
            serde_json::to_vec(&c.0)
        }
        let d = dir("bounded");
        let id = identity("");
        let db = create(&path_in(d.path(), &id), &id).unwrap();
        let keys: Vec<String> = (0..2000).map(|i| format!("k{i:05}")).collect();
        let mut values = ValueWriter::new(None).unwrap();
        let c = Commit {
            changes: keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.as_str(), Ok(Some(counted(i))))),
            resource_version: "9",
            count: 2000,
        };
        let written = write(&db, c, encode, &mut values).unwrap();
        assert_eq!(written.objects, 2000);
        assert!(
            MOST.load(Relaxed) <= DICTIONARY_SAMPLES + 1,
            "{} objects held at once",
            MOST.load(Relaxed)
        );
    }
}
