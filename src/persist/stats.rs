//! The persistence counters, shared by the restore and the writer, and
//! what a program or a test reads of them ([`PersistStatus`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The persistence counters, shared by the restore and the writer.
#[derive(Debug, Default)]
pub(crate) struct PersistStats {
    pub commits: AtomicU64,
    pub objects_written: AtomicU64,
    pub objects_removed: AtomicU64,
    pub bytes_written: AtomicU64,
    pub json_bytes_written: AtomicU64,
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

    pub(crate) fn set_file(&self, file: PathBuf) {
        self.texts().file = file;
    }

    pub(crate) fn set_discarded(&self, why: String) {
        self.texts().discarded = Some(why);
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
            json_bytes_written: r(&self.json_bytes_written),
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
    /// Bytes stored for the objects written (their JSON, compressed).
    pub bytes_written: u64,
    /// The objects' JSON those bytes hold (before compression).
    pub json_bytes_written: u64,
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
