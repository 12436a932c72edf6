//! How decoded objects become the shared objects the pipeline holds:
//! transformed once, and, during a relist, replaced by the cached `Arc` of an
//! unchanged object, so that a relist holds only what changed, not a second
//! copy of the store.

use std::sync::Arc;

use kube::Resource;

use crate::indexer::{CacheReader, Snapshot};
use crate::key::ObjectKey;

/// A function applied to every object once, at decode time, before it is shared.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// How decoded objects become shared ones.
pub struct Sharing<K: Resource> {
    pub(super) transform: Option<Transform<K>>,
    /// Read during lists: an object listed at the resourceVersion it has in
    /// the cache is not kept twice (the cached `Arc` is reused).
    pub(super) cache: Option<CacheReader<K>>,
}

impl<K: Resource> Sharing<K> {
    pub(super) fn share(&self, obj: K) -> Arc<K> {
        Arc::new(match &self.transform {
            Some(t) => t(obj),
            None => obj,
        })
    }

    /// The cache as a list starts, when it holds anything to reuse.
    pub(super) fn reusable(&self) -> Option<Snapshot<K>> {
        self.cache
            .as_ref()
            .map(CacheReader::snapshot)
            .filter(|s| !s.is_empty())
    }

    /// Shares a listed object, reusing the cached `Arc` when the cache holds
    /// the same key at the same (non-empty) resourceVersion.
    pub(super) fn share_listed(&self, obj: K, cached: Option<&Snapshot<K>>) -> Arc<K> {
        if let Some(snapshot) = cached
            && let Ok(key) = ObjectKey::of(&obj)
            && let Some(old) = unchanged(snapshot, &key, &obj)
        {
            return old;
        }
        self.share(obj)
    }
}

/// The cached object under `key`, when it has `obj`'s (non-empty) resourceVersion.
fn unchanged<K: Resource>(cache: &Snapshot<K>, key: &ObjectKey, obj: &K) -> Option<Arc<K>> {
    let rv = obj
        .meta()
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())?;
    cache
        .get(key)
        .filter(|old| old.meta().resource_version.as_deref() == Some(rv))
}
