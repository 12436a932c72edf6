//! The read-only view of an informer's cache.

use kinformer_actors::indexer::{CacheReader, Snapshot};
use tokio::sync::watch;

/// Reads the informer's cache from any thread without blocking the engine.
///
/// Each call to [`Store::snapshot`] returns an immutable view of the cache as
/// the Indexer last published it; use one snapshot for several related reads.
///
/// ```no_run
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// # fn read(informer: kinformer::Informer<ConfigMap>) -> Result<(), kinformer::CacheError> {
/// let store = informer.store();
/// let snapshot = store.snapshot(); // one consistent view for the reads below
/// if let Some(cm) = snapshot.get("default/web") {
///     println!("{:?}", cm.data);
/// }
/// let in_default = snapshot.by_index("namespace", "default")?; // an index added at build time
/// println!("{} of {} objects in default", in_default.len(), snapshot.len());
/// # Ok(())
/// # }
/// ```
pub struct Store<K> {
    reader: CacheReader<K>,
    synced: watch::Receiver<bool>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            reader: self.reader.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("objects", &self.snapshot().len())
            .field("synced", &self.has_synced())
            .finish_non_exhaustive()
    }
}

impl<K> Store<K> {
    pub(crate) fn new(reader: CacheReader<K>, synced: watch::Receiver<bool>) -> Self {
        Store { reader, synced }
    }

    /// True once the informer's initial list is in the cache (its
    /// `has_synced`): a snapshot taken before is partial. Latched.
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// The cache as last published: `get`, `list`, `by_index`, `index_keys`, ...
    pub fn snapshot(&self) -> Snapshot<K> {
        self.reader.snapshot()
    }
}
