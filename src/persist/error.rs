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
}

impl SnapshotError {
    /// The label value of the reason (`corrupt`, `foreign`, `outdated`, `empty`, `write`).
    pub fn reason(&self) -> &'static str {
        match self {
            SnapshotError::Corrupt(_) => "corrupt",
            SnapshotError::Foreign(_) => "foreign",
            SnapshotError::Outdated(_) => "outdated",
            SnapshotError::Empty => "empty",
            SnapshotError::Write(_) => "write",
        }
    }
}

impl From<redb::DatabaseError> for SnapshotError {
    fn from(e: redb::DatabaseError) -> Self {
        SnapshotError::Corrupt(e.to_string())
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
