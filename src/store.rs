//! The read-only view of an informer's cache.

use kinformer_actors::indexer::{CacheReader, Snapshot};

/// Reads the informer's cache from any thread without blocking the engine.
///
/// Each call to [`Store::snapshot`] returns an immutable view of the cache as
/// the Indexer last published it; use one snapshot for several related reads.
pub struct Store<K> {
    reader: CacheReader<K>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            reader: self.reader.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("objects", &self.snapshot().len())
            .finish_non_exhaustive()
    }
}

impl<K> Store<K> {
    pub(crate) fn new(reader: CacheReader<K>) -> Self {
        Store { reader }
    }

    /// The cache as last published: `get`, `list`, `by_index`, `index_keys`, ...
    pub fn snapshot(&self) -> Snapshot<K> {
        self.reader.snapshot()
    }
}
