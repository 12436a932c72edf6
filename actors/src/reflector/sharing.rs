//! How decoded objects become the shared objects the pipeline holds:
//! transformed once, and, during a relist, replaced by the cached `Arc` of an
//! unchanged object, so that a relist holds only what changed, not a second
//! copy of the store. A transform that panics on an object skips that object
//! the informer and its other objects go on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kube::Resource;

use super::stats::ReflectorStats;
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
    /// Where skipped objects are counted and reported.
    pub(super) stats: Arc<ReflectorStats>,
}

/// An object the transform panicked on: skipped, its key kept.
#[derive(Debug)]
pub(super) struct Skipped(Option<ObjectKey>);

impl<K: Resource> Sharing<K> {
    /// The shared form of `obj`, or [`Skipped`] when the transform panicked
    /// on it (R-29: counted in `transform_panics`, logged and recorded as the
    /// last failure with the object's key).
    pub(super) fn share(&self, obj: K) -> Result<Arc<K>, Skipped> {
        let Some(transform) = &self.transform else {
            return Ok(Arc::new(obj));
        };
        // The key is taken before the object moves into the transform: a
        // panic consumes it. One small string per object, only with a transform.
        let key = ObjectKey::of(&obj).ok();
        match catch_unwind(AssertUnwindSafe(|| transform(obj))) {
            Ok(obj) => Ok(Arc::new(obj)),
            Err(_) => {
                let shown = key.as_ref().map(ToString::to_string).unwrap_or_default();
                self.stats.transform_panics.fetch_add(1, Ordering::Relaxed);
                tracing::error!(key = %shown, "the transform panicked on an object: skipped until its next change or relist");
                self.stats.last_failure.record(
                    "transform",
                    &format_args!("the transform panicked on {shown}: the object is skipped"),
                );
                Err(Skipped(key))
            }
        }
    }

    /// The cached state of a skipped object, which a watch event then deletes
    /// a skipped object leaves the informer's view); `None` when
    /// nothing is cached under its key.
    pub(super) fn forget(&self, skipped: Skipped) -> Option<Arc<K>> {
        let key = skipped.0?;
        self.cache.as_ref()?.snapshot().get(&key)
    }

    /// The cache as a list starts, when it holds anything to reuse.
    pub(super) fn reusable(&self) -> Option<Snapshot<K>> {
        // A compact cache shares nothing, and a lookup would decode.
        self.cache
            .as_ref()
            .map(CacheReader::snapshot)
            .filter(|s| !s.is_empty() && !s.is_compact())
    }

    /// Shares a listed object, reusing the cached `Arc` when the cache holds
    /// the same key at the same (non-empty) resourceVersion; `None` when the
    /// transform panicked on it (left out of the list, R-29).
    pub(super) fn share_listed(&self, obj: K, cached: Option<&Snapshot<K>>) -> Option<Arc<K>> {
        if let Some(snapshot) = cached
            && let Ok(key) = ObjectKey::of(&obj)
            && let Some(old) = unchanged(snapshot, &key, &obj)
        {
            return Some(old);
        }
        self.share(obj).ok()
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
