//! Why a snapshot was not used, or why persistence stopped.

/// A snapshot that cannot be used (it is discarded and the informer lists),
/// or a failure that stops persistence (the informer goes on in memory).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The file is not a readable database: truncated, overwritten, or not
    /// one at all.
    #[error("the snapshot file is corrupt: {0}")]
    Corrupt(String),
    /// The snapshot belongs to another informer (another cluster, resource,
    /// namespace or selector).
    #[error("the snapshot belongs to another informer: {0}")]
    Foreign(String),
    /// The snapshot was written by an incompatible version (another schema
    /// version, object type or decoding option).
    #[error("the snapshot is outdated: {0}")]
    Outdated(String),
    /// The snapshot was never committed at a resourceVersion (the process
    /// stopped before the first consistent state was written).
    #[error("the snapshot is empty")]
    Empty,
    /// The directory or the file cannot be written (permissions, disk full).
    #[error("cannot write the snapshot: {0}")]
    Write(String),
    /// The file cannot be opened now: another informer or process has it
    /// open, or the system refused (permissions, too many open files). It
    /// is left as it is, and this informer does not persist.
    #[error("the snapshot file is unavailable: {0}")]
    Unavailable(String),
}

impl SnapshotError {
    /// The label value of the reason (`corrupt`, `foreign`, `outdated`,
    /// `empty`, `write`, `unavailable`).
    pub fn reason(&self) -> &'static str {
        match self {
            SnapshotError::Corrupt(_) => "corrupt",
            SnapshotError::Foreign(_) => "foreign",
            SnapshotError::Outdated(_) => "outdated",
            SnapshotError::Empty => "empty",
            SnapshotError::Write(_) => "write",
            SnapshotError::Unavailable(_) => "unavailable",
        }
    }
}

/// Whether an I/O error says nothing about the file's content: it is
/// locked or the system refused to open it, so it must not be discarded.
fn is_unavailable(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    // EMFILE and ENFILE: too many open files (in the process, the system).
    matches!(e.kind(), PermissionDenied | WouldBlock | OutOfMemory)
        || matches!(e.raw_os_error(), Some(23 | 24))
}

impl From<redb::DatabaseError> for SnapshotError {
    fn from(e: redb::DatabaseError) -> Self {
        match e {
            redb::DatabaseError::DatabaseAlreadyOpen => SnapshotError::Unavailable(e.to_string()),
            redb::DatabaseError::Storage(redb::StorageError::Io(io)) if is_unavailable(&io) => {
                SnapshotError::Unavailable(io.to_string())
            }
            e => SnapshotError::Corrupt(e.to_string()),
        }
    }
}

impl From<redb::TransactionError> for SnapshotError {
    fn from(e: redb::TransactionError) -> Self {
        SnapshotError::Corrupt(e.to_string())
    }
}

impl From<redb::TableError> for SnapshotError {
    fn from(e: redb::TableError) -> Self {
        SnapshotError::Corrupt(e.to_string())
    }
}

impl From<redb::StorageError> for SnapshotError {
    fn from(e: redb::StorageError) -> Self {
        SnapshotError::Corrupt(e.to_string())
    }
}

/// Why [`cluster_identity`](super::cluster_identity) found no identity.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterIdentityError {
    /// Reading the `kube-system` namespace failed (refused, forbidden, absent).
    #[error("reading the kube-system namespace: {0}")]
    Request(#[from] kube::Error),
    /// The namespace has no uid.
    #[error("the kube-system namespace has no uid")]
    NoUid,
}
