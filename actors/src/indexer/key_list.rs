//! The keys a resync sweep goes through: the cache's keys at the moment the
//! sweep started, listed a slice at a time as its chunks reach them, so
//! starting a sweep of a large cache never holds the Indexer's thread
//! (listing 100k keys at once took several ms, BENCHMARKS.md workload 5).

use std::sync::{Arc, Mutex, MutexGuard};

use super::cache::{CacheView, LazyKeys};
use super::distribution::CHUNK;
use crate::key::ObjectKey;

/// Keys listed per slice, and freed per slice once a list is done with.
pub(super) const KEY_SLICE: usize = CHUNK;

/// A shared, lazily listed key list: sweeps started together hold one.
pub(super) struct KeyList<K>(Arc<Mutex<KeyListState<K>>>);

struct KeyListState<K> {
    /// The keys listed so far, in the order of the cache state.
    keys: Vec<ObjectKey>,
    /// What is not listed yet; `None` once every key is (the cache state
    /// it held is then released).
    rest: Option<LazyKeys<K>>,
}

impl<K> Clone for KeyList<K> {
    fn clone(&self) -> Self {
        KeyList(self.0.clone())
    }
}

impl<K> KeyList<K> {
    /// The keys of `cache` as it is now; later writes do not change them.
    pub(super) fn of(cache: &CacheView<K>) -> Self {
        KeyList(Arc::new(Mutex::new(KeyListState {
            keys: Vec::with_capacity(cache.len()),
            rest: Some(cache.keys_lazily()),
        })))
    }

    /// The listed keys, if this was the last handle on the list, to be
    /// freed a slice at a time (freeing 100k keys at once takes ~1 ms).
    pub(super) fn release(self) -> Option<Vec<ObjectKey>> {
        Arc::try_unwrap(self.0)
            .ok()
            .map(|state| state.into_inner().unwrap_or_else(|p| p.into_inner()).keys)
    }

    /// Whether both are handles on the same list.
    pub(super) fn same(&self, other: &KeyList<K>) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn state(&self) -> MutexGuard<'_, KeyListState<K>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lists one more slice; false when every key was listed already.
    pub(super) fn advance(&self) -> bool {
        let mut state = self.state();
        if state.rest.is_none() {
            return false;
        }
        let upto = state.keys.len() + KEY_SLICE;
        state.fill(upto);
        true
    }

    /// `f` of the keys `[pos, pos + n)` (fewer at the end), the position
    /// after them, and whether that is the end of the list.
    pub(super) fn chunk<R>(
        &self,
        pos: usize,
        n: usize,
        f: impl FnOnce(&[ObjectKey]) -> R,
    ) -> (R, usize, bool) {
        let mut state = self.state();
        // One more than asked for: whether anything follows is then known.
        state.fill(pos + n + 1);
        let end = (pos + n).min(state.keys.len());
        let out = f(&state.keys[pos.min(end)..end]);
        (out, end, end >= state.keys.len() && state.rest.is_none())
    }
}

impl<K> KeyListState<K> {
    fn fill(&mut self, upto: usize) {
        while self.keys.len() < upto {
            let Some(rest) = self.rest.as_mut() else {
                return;
            };
            let before = self.keys.len();
            self.keys.extend(rest.by_ref().take(KEY_SLICE));
            if self.keys.len() - before < KEY_SLICE {
                self.rest = None;
            }
        }
    }
}

/// Frees one slice of the last of `lists`, and the list once it is empty.
pub(super) fn free_a_slice(lists: &mut Vec<Vec<ObjectKey>>) {
    if let Some(keys) = lists.last_mut() {
        keys.truncate(keys.len().saturating_sub(KEY_SLICE));
        if keys.is_empty() {
            lists.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::cache::Cache;
    use std::collections::BTreeSet;

    fn cm(name: &str) -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
        crate::testing::configmap(name, "1")
    }

    /// A key list hands out every key of the cache state it was taken
    /// from, once, chunk by chunk, says when it is at its end, and is not
    /// changed by later writes to the cache.
    #[test]
    fn a_key_list_lists_its_cache_state_chunk_by_chunk() {
        let mut cache = Cache::new();
        let n = 3 * KEY_SLICE + 7;
        for i in 0..n {
            let obj = cm(&format!("o{i:05}"));
            cache.upsert(ObjectKey::of(obj.as_ref()).unwrap(), obj);
        }
        let list = KeyList::of(&cache);
        // Written after the list was taken: not in it.
        let late = cm("late");
        cache.upsert(ObjectKey::of(late.as_ref()).unwrap(), late);
        assert!(list.state().keys.is_empty(), "nothing is listed up front");
        assert!(list.advance());
        assert_eq!(list.state().keys.len(), KEY_SLICE, "one slice ahead");
        let shared = list.clone();
        assert!(shared.same(&list) && !KeyList::of(&cache).same(&list));
        let mut seen = BTreeSet::new();
        let mut pos = 0;
        loop {
            let (keys, end, done) = shared.chunk(pos, CHUNK, |c| c.to_vec());
            assert!(keys.len() <= CHUNK);
            assert_eq!(end, pos + keys.len());
            for k in keys {
                assert!(seen.insert(k.to_string()), "{k} listed twice");
            }
            pos = end;
            if done {
                break;
            }
        }
        assert_eq!(seen.len(), n);
        assert!(!seen.contains("ns/late"));
        assert!(list.state().rest.is_none(), "the cache state is released");
        assert!(!list.advance(), "nothing left to list");
        let (rest, end, done) = list.chunk(pos, CHUNK, |c| c.len());
        assert_eq!((rest, end, done), (0, n, true));
        // Only the last handle gets the keys, to free them a slice at a time.
        assert!(shared.release().is_none());
        let mut released = vec![list.release().unwrap()];
        assert_eq!(released[0].len(), n);
        free_a_slice(&mut released);
        assert_eq!(released[0].len(), n - KEY_SLICE);
        for _ in 0..3 {
            free_a_slice(&mut released);
        }
        assert!(released.is_empty(), "freed, a slice per call");
    }
}
