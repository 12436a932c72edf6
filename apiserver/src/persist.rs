//! Persistence of the store to a data directory: objects and the resourceVersion counter
//! survive a process restart (the watch history does not, as a real apiserver's watch cache
//! does not survive its restart).
//!
//! Format, chosen for crash safety with no dependency beyond a checksum: a **snapshot**
//! (`snapshot`, written to `snapshot.tmp`, fsynced and renamed over the old one, so it is
//! always whole) plus an **append log** (`log`) of every write after it. Both are
//! sequences of records `[u32 LE length][u32 LE CRC-32][payload]`, the payload a JSON
//! header line and the object's JSON. On open, a record cut short at the end of the log
//! (the process died mid-write) is dropped with a warning; anything else that does not
//! read back (a bad checksum before the end, a snapshot that does not parse, records out
//! of resourceVersion order, types the server does not serve) is a [`PersistError`], never
//! a panic. An embedded database (redb, sled) would do more than this needs: the server
//! keeps everything in memory and only needs its writes replayed in order.
//!
//! A background thread writes the log, fsyncing after each batch it drains, and writes a
//! new snapshot (truncating the log) when the log outgrows it. Writes reach the disk
//! shortly after they are answered, not before: a process killed with SIGKILL can lose its
//! last few milliseconds of writes (a clean stop loses nothing). `DIR/lock` is held while a
//! server uses the directory.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::history::{Event, EventKind};
use crate::journal::{Journal, Message};
use crate::object::{ObjKey, ObjectRecord};
use crate::store::Store;
use crate::tls::CertificateAuthority;

/// Largest record accepted on reading (an object is at most a few MiB).
const MAX_RECORD: usize = 64 << 20;
/// The log is folded into a new snapshot once it is larger than this and than the snapshot.
const COMPACT_AFTER: u64 = 64 << 20;
const FORMAT: &str = "kinformer-apiserver-data";
const VERSION: u32 = 1;

/// Why the data directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file could not be read or written.
    #[error("data dir: {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file does not hold what this server writes.
    #[error("data dir: {path} is corrupt at byte {offset}: {detail}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// The directory holds objects of a type this server does not serve.
    #[error(
        "data dir {dir}: holds {resource} objects (group {group:?}), a type this server does not serve"
    )]
    UnknownResource {
        /// The directory.
        dir: PathBuf,
        /// The API group.
        group: String,
        /// The resource (plural).
        resource: String,
    },
    /// Another server uses the directory.
    #[error("data dir {0} is in use by another server")]
    Locked(PathBuf),
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The JSON line that starts every record.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    /// Set on a snapshot's first record only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<u32>,
    rv: u64,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    group: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

fn encode(header: &Header, object: &[u8], out: &mut Vec<u8>) {
    let mut payload = serde_json::to_vec(header).unwrap_or_default();
    payload.push(b'\n');
    payload.extend_from_slice(object);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// One record read back.
struct Decoded {
    header: Header,
    object: Bytes,
}

enum Read1 {
    Record(Decoded, usize),
    /// Fewer bytes than the record needs: a write the process did not finish.
    Torn,
    End,
}

fn decode(
    buf: &[u8],
    at: usize,
    path: &Path,
    last_may_be_torn: bool,
) -> Result<Read1, PersistError> {
    let rest = &buf[at..];
    if rest.is_empty() {
        return Ok(Read1::End);
    }
    let corrupt = |detail: String| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset: at as u64,
        detail,
    };
    if rest.len() < 8 {
        return Ok(Read1::Torn);
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if len > MAX_RECORD {
        return Err(corrupt(format!("record length {len} exceeds {MAX_RECORD}")));
    }
    let Some(payload) = rest.get(8..8 + len) else {
        return Ok(Read1::Torn);
    };
    if crc32fast::hash(payload) != crc {
        if last_may_be_torn && rest.len() == 8 + len {
            return Ok(Read1::Torn);
        }
        return Err(corrupt("checksum mismatch".into()));
    }
    let split = payload
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("no header line".into()))?;
    let header: Header = serde_json::from_slice(&payload[..split])
        .map_err(|e| corrupt(format!("bad header: {e}")))?;
    let object = Bytes::copy_from_slice(&payload[split + 1..]);
    if !header.deleted && !object.is_empty() {
        serde_json::from_slice::<serde::de::IgnoredAny>(&object)
            .map_err(|e| corrupt(format!("object is not JSON: {e}")))?;
    }
    Ok(Read1::Record(Decoded { header, object }, at + 8 + len))
}

fn read_file(path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    match File::open(path) {
        Ok(mut f) => {
            let mut buf = Vec::new();
            f.read_to_end(&mut buf).map_err(io_err(path))?;
            Ok(Some(buf))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

type StateMap = BTreeMap<(String, String, ObjKey), (u64, Bytes)>;

/// What a data directory held.
struct Loaded {
    rv: u64,
    objects: StateMap,
    log_len: u64,
    snapshot_len: u64,
}

fn load(dir: &Path) -> Result<Loaded, PersistError> {
    let mut objects = StateMap::new();
    let mut rv = 0;
    let snap_path = dir.join("snapshot");
    let mut snapshot_len = 0;
    if let Some(buf) = read_file(&snap_path)? {
        snapshot_len = buf.len() as u64;
        let mut at = 0;
        let mut first = true;
        loop {
            match decode(&buf, at, &snap_path, false)? {
                Read1::End => break,
                Read1::Torn => {
                    return Err(PersistError::Corrupt {
                        path: snap_path,
                        offset: at as u64,
                        detail: "truncated record".into(),
                    });
                }
                Read1::Record(r, next) => {
                    if first {
                        if r.header.format.as_deref() != Some(FORMAT)
                            || r.header.version != Some(VERSION)
                        {
                            return Err(PersistError::Corrupt {
                                path: snap_path,
                                offset: 0,
                                detail: format!("not a {FORMAT} version {VERSION} snapshot"),
                            });
                        }
                        rv = r.header.rv;
                        first = false;
                    } else {
                        let h = r.header;
                        let key = ObjKey::new(&h.namespace, &h.name);
                        objects.insert((h.group, h.resource, key), (h.rv, r.object));
                    }
                    at = next;
                }
            }
        }
        if first {
            return Err(PersistError::Corrupt {
                path: snap_path,
                offset: 0,
                detail: "empty snapshot".into(),
            });
        }
    }
    let log_path = dir.join("log");
    let mut log_len = 0;
    if let Some(buf) = read_file(&log_path)? {
        let mut at = 0;
        loop {
            match decode(&buf, at, &log_path, true)? {
                Read1::End => break,
                Read1::Torn => {
                    tracing::warn!(
                        path = %log_path.display(),
                        offset = at,
                        dropped = buf.len() - at,
                        "dropping an unfinished record at the end of the log (the server stopped mid-write)"
                    );
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&log_path)
                        .map_err(io_err(&log_path))?;
                    f.set_len(at as u64).map_err(io_err(&log_path))?;
                    f.sync_all().map_err(io_err(&log_path))?;
                    break;
                }
                Read1::Record(r, next) => {
                    let h = r.header;
                    // Records the snapshot already holds (a crash between writing the
                    // snapshot and truncating the log) are skipped.
                    if h.rv > rv {
                        let key = (h.group, h.resource, ObjKey::new(&h.namespace, &h.name));
                        if h.deleted {
                            objects.remove(&key);
                        } else {
                            objects.insert(key, (h.rv, r.object));
                        }
                        rv = h.rv;
                    } else if snapshot_len == 0 {
                        return Err(PersistError::Corrupt {
                            path: log_path,
                            offset: at as u64,
                            detail: format!("resourceVersion {} after {rv}", h.rv),
                        });
                    }
                    at = next;
                }
            }
        }
        log_len = at as u64;
    }
    Ok(Loaded {
        rv,
        objects,
        log_len,
        snapshot_len,
    })
}

/// An open data directory: loaded, locked, and ready to persist a store's writes.
#[derive(Debug)]
pub struct DataDir {
    dir: PathBuf,
    lock: File,
}

impl DataDir {
    /// Open (creating it if needed) and lock `dir`.
    pub fn open(dir: &Path) -> Result<DataDir, PersistError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        // A lock just released can still be held for a moment by a child process forked
        // before its holder closed it (the descriptor lives until the child's exec): retry
        // for up to a second before calling the directory in use.
        let mut tries = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(PersistError::Locked(dir.to_path_buf()));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
            }
        }
        Ok(DataDir {
            dir: dir.to_path_buf(),
            lock,
        })
    }

    /// The CA kept in the directory (`ca.crt`, `ca.key`), created on first use, so
    /// kubeconfigs written before a process restart stay valid.
    pub fn certificate_authority(&self) -> Result<CertificateAuthority, PersistError> {
        let crt = self.dir.join("ca.crt");
        let key = self.dir.join("ca.key");
        match (read_file(&crt)?, read_file(&key)?) {
            (Some(c), Some(k)) => {
                let text = |b: Vec<u8>, path: &Path| {
                    String::from_utf8(b).map_err(|e| PersistError::Corrupt {
                        path: path.to_path_buf(),
                        offset: e.utf8_error().valid_up_to() as u64,
                        detail: "not UTF-8 PEM".into(),
                    })
                };
                let (c, k) = (text(c, &crt)?, text(k, &key)?);
                CertificateAuthority::from_pem(&c, &k).map_err(|e| PersistError::Corrupt {
                    path: crt,
                    offset: 0,
                    detail: e.to_string(),
                })
            }
            _ => {
                let ca = CertificateAuthority::generate().map_err(|e| PersistError::Io {
                    path: crt.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                write_atomically(&self.dir, "ca.key", ca.key_pem().as_bytes(), 0o600)?;
                write_atomically(&self.dir, "ca.crt", ca.cert_pem().as_bytes(), 0o644)?;
                Ok(ca)
            }
        }
    }

    /// Load what the directory holds into `store` (which must be empty), then persist its
    /// writes from now on.
    pub fn attach(self, store: &Store) -> Result<(), PersistError> {
        let loaded = load(&self.dir)?;
        let mut mirror = BTreeMap::new();
        // CRDs first: their objects' types exist only once the CRDs are in the store.
        let is_crd = |(group, resource): (&str, &str)| {
            group == "apiextensions.k8s.io" && resource == "customresourcedefinitions"
        };
        let mut count = 0;
        for crds in [true, false] {
            let mut restored = Vec::new();
            for ((group, resource, key), (rv, json)) in &loaded.objects {
                if is_crd((group, resource)) != crds {
                    continue;
                }
                let res =
                    store
                        .resolve(group, resource)
                        .map_err(|_| PersistError::UnknownResource {
                            dir: self.dir.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                        })?;
                let value: serde_json::Value =
                    serde_json::from_slice(json).map_err(|e| PersistError::Corrupt {
                        path: self.dir.clone(),
                        offset: 0,
                        detail: format!("{resource} {key:?}: {e}"),
                    })?;
                let record = ObjectRecord::from_value(key.clone(), &value).map_err(|e| {
                    PersistError::Corrupt {
                        path: self.dir.clone(),
                        offset: 0,
                        detail: format!("{resource} {key:?}: {e}"),
                    }
                })?;
                if record.rv != *rv || record.rv > loaded.rv {
                    return Err(PersistError::Corrupt {
                        path: self.dir.clone(),
                        offset: 0,
                        detail: format!(
                            "{resource} {key:?}: resourceVersion {} recorded as {rv} (counter {})",
                            record.rv, loaded.rv
                        ),
                    });
                }
                let record = Arc::new(record);
                mirror.insert(
                    (group.clone(), resource.clone(), key.clone()),
                    record.clone(),
                );
                restored.push((res, record));
            }
            count += restored.len();
            store.restore(loaded.rv.max(1), restored);
            if crds {
                store.sync_crd_types();
            }
        }
        tracing::info!(dir = %self.dir.display(), objects = count, rv = loaded.rv, "loaded the data dir");
        let log_path = self.dir.join("log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io_err(&log_path))?;
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            dir: self.dir,
            lock: Some(self.lock),
            log: BufWriter::new(log),
            log_len: loaded.log_len,
            snapshot_len: loaded.snapshot_len,
            rv: loaded.rv,
            mirror,
        };
        std::thread::Builder::new()
            .name("kinformer-apiserver-data".into())
            .spawn(move || writer.run(rx))
            .map_err(io_err(Path::new("writer thread")))?;
        store.set_journal(Journal::new(tx));
        // Once everything is back, and written to the log like any write: a
        // namespace terminating when the server stopped goes on terminating.
        store.sync_namespaces();
        Ok(())
    }
}

/// Write `name` in `dir` through a temporary file, fsync and rename: whole or not at all.
fn write_atomically(dir: &Path, name: &str, data: &[u8], mode: u32) -> Result<(), PersistError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    f.write_all(data).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

type Mirror = BTreeMap<(String, String, ObjKey), Arc<ObjectRecord>>;

struct Writer {
    dir: PathBuf,
    /// Held (locked) until the writer closes.
    lock: Option<File>,
    log: BufWriter<File>,
    log_len: u64,
    snapshot_len: u64,
    rv: u64,
    /// The stored state, for snapshots (records shared with the store).
    mirror: Mirror,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Message>) {
        let mut acks = Vec::new();
        let mut closing = false;
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            // Drain what is queued, then make it durable in one fsync.
            while let Some(message) = next.take() {
                match message {
                    Message::Event {
                        group,
                        resource,
                        event,
                    } => self.write(group, resource, &event),
                    Message::Sync(ack) => acks.push(ack),
                    Message::Close(ack) => {
                        acks.push(ack);
                        closing = true;
                    }
                }
                if !closing {
                    next = rx.try_recv().ok();
                }
            }
            if let Err(e) = self.durable() {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot persist writes");
            }
            if closing {
                // Release the directory before answering: the closer may reopen it at once.
                self.lock = None;
            }
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
            if closing {
                break;
            }
        }
    }

    fn write(&mut self, group: String, resource: String, event: &Event) {
        let rec = &event.object;
        let deleted = event.kind == EventKind::Deleted;
        let header = Header {
            format: None,
            version: None,
            rv: event.rv,
            deleted,
            group,
            resource,
            namespace: rec.key.namespace.to_string(),
            name: rec.key.name.to_string(),
        };
        let mut buf = Vec::with_capacity(rec.json.len() + 128);
        encode(&header, if deleted { b"" } else { &rec.json }, &mut buf);
        if let Err(e) = self.log.write_all(&buf) {
            tracing::error!(dir = %self.dir.display(), error = %e, "cannot append to the log");
        }
        self.log_len += buf.len() as u64;
        self.rv = event.rv;
        let key = (header.group, header.resource, rec.key.clone());
        if deleted {
            self.mirror.remove(&key);
        } else {
            self.mirror.insert(key, rec.clone());
        }
    }

    fn durable(&mut self) -> Result<(), PersistError> {
        let log_path = self.dir.join("log");
        self.log.flush().map_err(io_err(&log_path))?;
        self.log.get_ref().sync_data().map_err(io_err(&log_path))?;
        if self.log_len > COMPACT_AFTER.max(self.snapshot_len) {
            self.snapshot()?;
        }
        Ok(())
    }

    /// Fold the log into a new snapshot, then empty the log.
    fn snapshot(&mut self) -> Result<(), PersistError> {
        let mut buf = Vec::new();
        encode(
            &Header {
                format: Some(FORMAT.into()),
                version: Some(VERSION),
                rv: self.rv,
                deleted: false,
                group: String::new(),
                resource: String::new(),
                namespace: String::new(),
                name: String::new(),
            },
            b"",
            &mut buf,
        );
        for ((group, resource, key), rec) in &self.mirror {
            let header = Header {
                format: None,
                version: None,
                rv: rec.rv,
                deleted: false,
                group: group.clone(),
                resource: resource.clone(),
                namespace: key.namespace.to_string(),
                name: key.name.to_string(),
            };
            encode(&header, &rec.json, &mut buf);
        }
        write_atomically(&self.dir, "snapshot", &buf, 0o644)?;
        self.snapshot_len = buf.len() as u64;
        let log_path = self.dir.join("log");
        let log = self.log.get_ref();
        log.set_len(0).map_err(io_err(&log_path))?;
        log.sync_all().map_err(io_err(&log_path))?;
        self.log_len = 0;
        tracing::debug!(
            objects = self.mirror.len(),
            rv = self.rv,
            "wrote a snapshot"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::resource::ResourceType;
    use crate::store::DeletePreconditions;
    use serde_json::json;

    fn store() -> (Store, usize) {
        let s = Store::new(Registry::new(ResourceType::defaults()), 100, 16);
        let res = s.resolve("", "configmaps").unwrap();
        (s, res)
    }

    fn cm(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}})
    }

    fn reopen(dir: &Path) -> Result<Store, PersistError> {
        let (s, _) = store();
        DataDir::open(dir)?.attach(&s)?;
        Ok(s)
    }

    #[test]
    fn writes_survive_a_reopen_with_their_resource_versions() {
        let dir = tempfile::tempdir().unwrap();
        let (s, res) = store();
        DataDir::open(dir.path()).unwrap().attach(&s).unwrap();
        assert!(matches!(
            DataDir::open(dir.path()),
            Err(PersistError::Locked(_))
        ));
        s.create(res, Some("ns"), cm("a"), false).unwrap();
        s.create(res, Some("ns"), cm("b"), false).unwrap();
        s.update(res, Some("ns"), Some("a"), cm("a2"), false).ok();
        s.delete(
            res,
            &ObjKey::new("ns", "b"),
            &DeletePreconditions::default(),
            false,
        )
        .unwrap();
        let rv = s.current_rv();
        let a = s.get(res, &ObjKey::new("ns", "a")).unwrap();
        s.close_journal();
        let again = reopen(dir.path()).unwrap();
        assert_eq!(again.current_rv(), rv);
        assert_eq!(again.object_count(res), 1);
        assert_eq!(
            again.get(res, &ObjKey::new("ns", "a")).unwrap().json,
            a.json
        );
        // The counter goes on.
        let c = again.create(res, Some("ns"), cm("c"), false).unwrap();
        assert_eq!(c.rv, rv + 1);
    }

    #[test]
    fn a_torn_record_at_the_end_of_the_log_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (s, res) = store();
        DataDir::open(dir.path()).unwrap().attach(&s).unwrap();
        s.create(res, Some("ns"), cm("a"), false).unwrap();
        s.create(res, Some("ns"), cm("b"), false).unwrap();
        s.close_journal();
        assert_eq!(load(dir.path()).unwrap().objects.len(), 2);
        let s = reopen(dir.path()).unwrap();
        s.create(res, Some("ns"), cm("c"), false).unwrap();
        s.close_journal();
        // A record cut in the middle, as after a crash mid-write.
        let log = dir.path().join("log");
        let mut bytes = std::fs::read(&log).unwrap();
        let full = bytes.len();
        let mut extra = Vec::new();
        encode(
            &Header {
                format: None,
                version: None,
                rv: 99,
                deleted: false,
                group: String::new(),
                resource: "configmaps".into(),
                namespace: "ns".into(),
                name: "torn".into(),
            },
            b"{}",
            &mut extra,
        );
        bytes.extend_from_slice(&extra[..extra.len() - 3]);
        std::fs::write(&log, &bytes).unwrap();
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.object_count(res), 3);
        assert_eq!(std::fs::metadata(&log).unwrap().len(), full as u64);
    }

    #[test]
    fn corruption_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let (s, res) = store();
        DataDir::open(dir.path()).unwrap().attach(&s).unwrap();
        for name in ["a", "b", "c"] {
            s.create(res, Some("ns"), cm(name), false).unwrap();
        }
        s.close_journal();
        let log = dir.path().join("log");
        let good = std::fs::read(&log).unwrap();
        // A flipped byte in the first record (not the last): a checksum error.
        let mut bad = good.clone();
        bad[20] ^= 0xff;
        std::fs::write(&log, &bad).unwrap();
        let err = reopen(dir.path()).unwrap_err();
        assert!(
            matches!(&err, PersistError::Corrupt { detail, offset: 0, .. } if detail.contains("checksum")),
            "{err}"
        );
        // An absurd length.
        let mut bad = good.clone();
        bad[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&log, &bad).unwrap();
        assert!(matches!(
            reopen(dir.path()),
            Err(PersistError::Corrupt { .. })
        ));
        // A snapshot of garbage.
        std::fs::write(&log, &good).unwrap();
        std::fs::write(dir.path().join("snapshot"), b"definitely not a snapshot").unwrap();
        let err = reopen(dir.path()).unwrap_err();
        assert!(err.to_string().contains("snapshot"), "{err}");
        // Objects of a type this server does not serve.
        std::fs::remove_file(dir.path().join("snapshot")).unwrap();
        let narrow = Store::new(
            Registry::new(
                ResourceType::defaults()
                    .into_iter()
                    .filter(|t| t.plural != "configmaps")
                    .collect(),
            ),
            10,
            10,
        );
        let err = DataDir::open(dir.path())
            .unwrap()
            .attach(&narrow)
            .unwrap_err();
        assert!(matches!(err, PersistError::UnknownResource { .. }), "{err}");
    }

    #[test]
    fn the_log_is_folded_into_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (s, res) = store();
        DataDir::open(dir.path()).unwrap().attach(&s).unwrap();
        for name in ["a", "b"] {
            s.create(res, Some("ns"), cm(name), false).unwrap();
        }
        s.close_journal();
        // Write a snapshot through a writer, as the threshold would.
        let loaded = load(dir.path()).unwrap();
        let s2 = reopen(dir.path()).unwrap();
        let mut mirror = Mirror::new();
        for (g, r, k) in loaded.objects.keys() {
            let rec = s2.get(res, k).unwrap();
            mirror.insert((g.clone(), r.clone(), k.clone()), rec);
        }
        s2.close_journal();
        let lock = DataDir::open(dir.path()).unwrap().lock;
        let log = OpenOptions::new()
            .append(true)
            .open(dir.path().join("log"))
            .unwrap();
        let mut w = Writer {
            dir: dir.path().to_path_buf(),
            lock: Some(lock),
            log: BufWriter::new(log),
            log_len: loaded.log_len,
            snapshot_len: 0,
            rv: loaded.rv,
            mirror,
        };
        w.snapshot().unwrap();
        drop(w);
        assert_eq!(std::fs::metadata(dir.path().join("log")).unwrap().len(), 0);
        let s3 = reopen(dir.path()).unwrap();
        assert_eq!(s3.object_count(res), 2);
        assert_eq!(s3.current_rv(), loaded.rv);
    }
}
