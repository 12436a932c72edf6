//! The Indexer's cache: a keyed store of shared objects plus named secondary
//! indexes, readable from other threads without blocking the writer.
//!
//! Rules (spec 1.2): **IDX-2** [`Cache::upsert`] adds or updates; **IDX-3**
//! [`Cache::remove`] of a missing key is a no-op; **IDX-4** `get`, `list`,
//! `keys`, in no set order; **IDX-5** [`Cache::replace`] is atomic, a later
//! duplicate key wins, every index is rebuilt; **IDX-6** an index maps value
//! to keys, empty value sets are removed; **IDX-7**–**IDX-9**
//! [`CacheView::index`], [`CacheView::by_index`], [`CacheView::index_keys`],
//! [`CacheView::list_index_values`]; **IDX-10** [`Cache::add_index`] indexes
//! stored objects at once, a name conflict is an error; **IDX-13** objects
//! are shared `Arc`s, to be treated as immutable.
//!
//! Deviations: a failing index function is an [`IndexError`] value, not a
//! panic (the object is stored, under no value of that index); no key
//! function, transformer or resourceVersion here (IDX-1, IDX-2, IDX-11); no
//! transactions (IDX-12): the one writer [`publish`](Cache::publish)es once
//! per batch, so readers never see half a batch; `index`, `by_index` and
//! `list_index_values` are sorted.
//!
//! Reads live on [`CacheView`], which [`Cache`] (the writer's state) and
//! [`Snapshot`] (a published one) deref to. A publish stores an O(1) copy of
//! the persistent maps (`imbl`) in an [`ArcSwap`] that a [`CacheReader`] loads
//! from any thread: ~1000× cheaper than cloning a std map per publish at 100k
//! objects, paid on reads (BENCHMARKS.md, "Informer core").
//!
//! A compact cache ([`Cache::compact`]) stores each object compressed
//! ([`super::compact`]) with its resourceVersion and index values computed
//! once at insert, and decodes it on every read: `get`, `list`, index
//! queries, `iter` and lazy entries return fresh `Arc`s equal in content to
//! what was stored (IDX-13's sharing holds only in the decoded cache). An
//! object that does not encode is kept decoded, so nothing is lost.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;

use arc_swap::ArcSwap;
use kube::Resource;

use super::compact::{Codec, CompactEntry, CompactError, CompactOptions, Compactor};
use crate::delta::KnownObjects;
use crate::key::ObjectKey;

/// An index function (IDX-6): the set of values an object is indexed under,
/// or an error message. It must be pure.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Result<Vec<String>, String> + Send + Sync>;

/// An index function failed for one object. The object is stored anyway and
/// is indexed under no value of that index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("index {index:?} failed for {key}: {message}")]
pub struct IndexError {
    /// The name of the failing index.
    pub index: String,
    /// The key of the object it failed for.
    pub key: ObjectKey,
    /// The index function's message.
    pub message: String,
}

/// Why an index operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// No index has this name (IDX-7, IDX-8).
    #[error("index with name {0} does not exist")]
    UnknownIndex(String),
    /// These index names already exist (IDX-10).
    #[error("indexer conflict: {0:?}")]
    IndexConflict(Vec<String>),
    /// The index function failed on the object asked about (IDX-7).
    #[error(transparent)]
    IndexFunc(#[from] IndexError),
}

/// What [`Cache::upsert`] replaced, and the index functions that failed.
#[derive(Debug)]
pub struct Upserted<K> {
    /// The object previously stored under the key, if any.
    pub previous: Option<Arc<K>>,
    /// One entry per index whose function failed on the new object.
    pub index_errors: Vec<IndexError>,
}

type KeySet = imbl::OrdSet<ObjectKey>;

/// One named index: its function and `value → keys`.
struct Index<K> {
    func: IndexFn<K>,
    values: imbl::HashMap<String, KeySet>,
    /// Where a compact entry keeps its values of this index; slots are
    /// given in registration order and never reused.
    slot: usize,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Index {
            func: self.func.clone(),
            values: self.values.clone(),
            slot: self.slot,
        }
    }
}

impl<K> Index<K> {
    /// The values of `obj`, deduplicated; a failure is reported, not raised.
    fn values_of(&self, name: &str, key: &ObjectKey, obj: &K) -> Result<Vec<String>, IndexError> {
        // A panicking index function is a user bug, not a reason to kill the
        // Indexer: it is reported like a failing one.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.func)(obj)))
            .unwrap_or_else(|_| Err("index function panicked".to_owned()))
            .map(|mut v| {
                v.sort_unstable();
                v.dedup();
                v
            })
            .map_err(|message| IndexError {
                index: name.to_owned(),
                key: key.clone(),
                message,
            })
    }

    fn insert_key(&mut self, value: String, key: &ObjectKey) {
        self.values.entry(value).or_default().insert(key.clone());
    }

    /// Removes `key` from `value`, dropping the value once its set is empty
    /// (IDX-6, k8s#84959).
    fn remove_key(&mut self, value: &str, key: &ObjectKey) {
        if let Some(set) = self.values.get_mut(value) {
            set.remove(key);
            if set.is_empty() {
                self.values.remove(value);
            }
        }
    }
}

/// One stored object: shared as decoded, or compact (compact caches only,
/// but for an object that did not encode).
enum Stored<K> {
    Decoded(Arc<K>),
    Compact(Arc<CompactEntry>),
}

impl<K> Clone for Stored<K> {
    fn clone(&self) -> Self {
        match self {
            Stored::Decoded(o) => Stored::Decoded(o.clone()),
            Stored::Compact(e) => Stored::Compact(e.clone()),
        }
    }
}

impl<K> Stored<K> {
    /// Heap bytes a compact entry holds (0 for a decoded one).
    fn compact_size(&self) -> usize {
        match self {
            Stored::Decoded(_) => 0,
            Stored::Compact(e) => e.size(),
        }
    }
}

/// The objects by key. foldhash rather than SipHash: every upsert and read
/// hashes a key (still randomly seeded per map).
type Items<K> = imbl::GenericHashMap<
    ObjectKey,
    Stored<K>,
    foldhash::fast::RandomState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// The objects of one cache state, produced lazily
/// ([`CacheView::entries_lazily`]): it drains a copy of the persistent map,
/// copying each tree node when it first reaches it (and decoding each
/// object of a compact cache when it reaches it).
pub struct LazyEntries<K> {
    drain: imbl::hashmap::ConsumingIter<(ObjectKey, Stored<K>), imbl::shared_ptr::DefaultSharedPtr>,
    codec: Option<Arc<Codec<K>>>,
}

impl<K> Iterator for LazyEntries<K> {
    type Item = (ObjectKey, Arc<K>);

    fn next(&mut self) -> Option<(ObjectKey, Arc<K>)> {
        loop {
            let (key, stored) = self.drain.next()?;
            if let Some(obj) = load(self.codec.as_deref(), &key, &stored) {
                return Some((key, obj));
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.drain.size_hint()
    }
}

/// The keys of one cache state, produced lazily ([`CacheView::keys_lazily`]).
pub struct LazyKeys<K>(LazyEntries<K>);

impl<K> Iterator for LazyKeys<K> {
    type Item = ObjectKey;

    fn next(&mut self) -> Option<ObjectKey> {
        self.0.next().map(|(key, _)| key)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

/// A stored object as an `Arc`: shared, or decoded from its compact form
/// (`None` if that fails: counted and logged by the codec).
fn load<K>(codec: Option<&Codec<K>>, key: &ObjectKey, stored: &Stored<K>) -> Option<Arc<K>> {
    match (stored, codec) {
        (Stored::Decoded(o), _) => Some(o.clone()),
        (Stored::Compact(e), Some(codec)) => codec.load(key, e),
        (Stored::Compact(_), None) => None,
    }
}

/// What a compact cache holds, for stats (see [`CacheView::compact_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactStats {
    /// Heap bytes of the compact entries (compressed objects, their
    /// resourceVersions and index values), without the maps around them.
    pub bytes: usize,
    /// Objects kept decoded because they did not encode.
    pub decoded: usize,
    /// Reads that found an entry that does not decode (expected: 0).
    pub decode_errors: u64,
    /// Whether the dictionary is learned.
    pub dictionary: bool,
}

/// Every read operation, shared by [`Cache`] (the writer's current state) and
/// [`Snapshot`] (an immutable published state) through `Deref`.
pub struct CacheView<K> {
    items: Items<K>,
    indices: BTreeMap<String, Index<K>>,
    /// Set in a compact cache: decodes its entries.
    codec: Option<Arc<Codec<K>>>,
    /// A compact cache's stats but `decode_errors` (kept by the codec).
    compact: CompactStats,
}

impl<K> Clone for CacheView<K> {
    /// O(number of indexes): the maps are persistent and share structure.
    fn clone(&self) -> Self {
        CacheView {
            items: self.items.clone(),
            indices: self.indices.clone(),
            codec: self.codec.clone(),
            compact: self.compact,
        }
    }
}

impl<K> fmt::Debug for CacheView<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheView")
            .field("len", &self.items.len())
            .field("indices", &self.indices.keys().collect::<Vec<_>>())
            .field("compact", &self.codec.is_some())
            .finish()
    }
}

impl<K> CacheView<K> {
    fn empty(codec: Option<Arc<Codec<K>>>) -> Self {
        CacheView {
            items: Items::default(),
            indices: BTreeMap::new(),
            codec,
            compact: CompactStats::default(),
        }
    }

    /// A stored object as an `Arc` (decoded if compact).
    fn load(&self, key: &ObjectKey, stored: &Stored<K>) -> Option<Arc<K>> {
        load(self.codec.as_deref(), key, stored)
    }

    /// Whether objects are stored compact ([`Cache::compact`]).
    pub fn is_compact(&self) -> bool {
        self.codec.is_some()
    }

    /// A compact cache's sizes and counters; `None` for a decoded cache.
    pub fn compact_stats(&self) -> Option<CompactStats> {
        let codec = self.codec.as_ref()?;
        Some(CompactStats {
            decode_errors: codec
                .decode_errors
                .load(std::sync::atomic::Ordering::Relaxed),
            ..self.compact
        })
    }

    /// Like [`get`](Self::get), with a compact entry's decoding error (never
    /// expected: the cache encoded it itself) as an error rather than absence.
    pub fn try_get<Q>(&self, key: &Q) -> Result<Option<Arc<K>>, CompactError>
    where
        ObjectKey: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match (self.items.get(key), &self.codec) {
            (None, _) => Ok(None),
            (Some(Stored::Decoded(o)), _) => Ok(Some(o.clone())),
            (Some(Stored::Compact(e)), Some(codec)) => codec.try_load(e).map(|o| Some(Arc::new(o))),
            (Some(Stored::Compact(_)), None) => Err(CompactError::Decode("no codec".into())),
        }
    }

    /// The object stored under `key` (IDX-4): an [`ObjectKey`] or a
    /// `&str` `"namespace/name"` (`"name"` when cluster-scoped). A compact
    /// cache decodes it (see [`try_get`](Self::try_get)).
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<K>>
    where
        ObjectKey: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (key, stored) = self.items.get_key_value(key)?;
        self.load(key, stored)
    }

    /// Whether `key` is stored (an [`ObjectKey`] or a string, as [`get`](Self::get)).
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        ObjectKey: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.items.contains_key(key)
    }

    /// Every stored key and object, in unspecified order, without collecting
    /// them first (see [`list`](Self::list)).
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectKey, Arc<K>)> {
        self.items
            .iter()
            .filter_map(|(k, stored)| Some((k, self.load(k, stored)?)))
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every stored object, in unspecified order (IDX-4).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.iter().map(|(_, o)| o).collect()
    }

    /// Every stored key, in unspecified order (IDX-4).
    pub fn keys(&self) -> Vec<ObjectKey> {
        let mut keys = Vec::with_capacity(self.items.len());
        keys.extend(self.items.keys().cloned());
        keys
    }

    /// Every key of this state, produced as the iterator advances, so a
    /// caller can spread the work: a resync sweep or a replay must not hold
    /// the Indexer's thread for the whole list (7–14 ms at 100k keys,
    /// BENCHMARKS.md, "Resync sweeps: what was tried"). Taking it is O(1); it keeps this state's map
    /// alive until it is dropped or exhausted.
    pub fn keys_lazily(&self) -> LazyKeys<K> {
        LazyKeys(self.entries_lazily())
    }

    /// Every object of this state with its key, as [`Self::keys_lazily`]
    /// lists keys: O(1) to take, read as the iterator advances.
    pub fn entries_lazily(&self) -> LazyEntries<K> {
        LazyEntries {
            drain: self.items.clone().into_iter(),
            codec: self.codec.clone(),
        }
    }

    /// The names of the registered indexes, sorted.
    pub fn index_names(&self) -> Vec<String> {
        self.indices.keys().cloned().collect()
    }

    /// The objects sharing at least one value of `index` with `obj` (IDX-7),
    /// sorted by key, each once.
    pub fn index(&self, index: &str, obj: &K) -> Result<Vec<Arc<K>>, CacheError>
    where
        K: Resource,
    {
        let idx = self.index_named(index)?;
        let key = ObjectKey::of(obj).unwrap_or_else(|_| ObjectKey::from(""));
        let values = idx.values_of(index, &key, obj)?;
        let keys: KeySet = values
            .iter()
            .filter_map(|v| idx.values.get(v))
            .flat_map(|set| set.iter().cloned())
            .collect();
        Ok(self.objects(keys.iter()))
    }

    /// The objects indexed under `value` in `index` (IDX-8), sorted by key.
    /// An unknown value gives an empty list.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, CacheError> {
        let idx = self.index_named(index)?;
        Ok(idx
            .values
            .get(value)
            .map(|set| self.objects(set.iter()))
            .unwrap_or_default())
    }

    /// The keys indexed under `value` in `index`, sorted (IDX-8).
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<ObjectKey>, CacheError> {
        let idx = self.index_named(index)?;
        Ok(idx
            .values
            .get(value)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// Every value of `index` that has at least one key, sorted (IDX-9). An
    /// unknown index gives an empty list, not an error.
    pub fn list_index_values(&self, index: &str) -> Vec<String> {
        let mut values: Vec<String> = self
            .indices
            .get(index)
            .map(|idx| idx.values.keys().cloned().collect())
            .unwrap_or_default();
        values.sort_unstable();
        values
    }

    fn index_named(&self, index: &str) -> Result<&Index<K>, CacheError> {
        self.indices
            .get(index)
            .ok_or_else(|| CacheError::UnknownIndex(index.to_owned()))
    }

    fn objects<'a>(&self, keys: impl Iterator<Item = &'a ObjectKey>) -> Vec<Arc<K>> {
        keys.filter_map(|k| self.load(k, self.items.get(k)?))
            .collect()
    }
}

impl<K> KnownObjects<K> for CacheView<K> {
    fn known_keys(&self) -> Vec<ObjectKey> {
        self.keys()
    }

    fn known_object(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.get(key)
    }

    fn knows(&self, key: &ObjectKey) -> bool {
        self.contains(key)
    }
}

/// The Indexer's store (spec 1.2), owned by its single writer, the Indexer
/// actor. Reads go through `Deref` to [`CacheView`] and see the current,
/// possibly unpublished, state.
pub struct Cache<K> {
    current: CacheView<K>,
    published: Arc<ArcSwap<CacheView<K>>>,
    /// Set in a compact cache: compresses what is stored.
    compactor: Option<Compactor>,
    /// Keys stored compressed before the dictionary was learned, to compress
    /// again with it, a slice per publish ([`Self::recompress_early`]).
    early: Vec<ObjectKey>,
}

impl<K> fmt::Debug for Cache<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("current", &self.current)
            .finish()
    }
}

impl<K> Deref for Cache<K> {
    type Target = CacheView<K>;

    fn deref(&self) -> &CacheView<K> {
        &self.current
    }
}

impl<K> KnownObjects<K> for Cache<K> {
    fn known_keys(&self) -> Vec<ObjectKey> {
        self.current.known_keys()
    }

    fn known_object(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.current.known_object(key)
    }

    fn knows(&self, key: &ObjectKey) -> bool {
        self.current.knows(key)
    }
}

impl<K: Resource + Send + Sync + 'static> Default for Cache<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// How many entries compressed before the dictionary each publish compresses
/// again (at most about 5 ms of the Indexer's thread).
const RECOMPRESS_PER_PUBLISH: usize = 512;

/// An object's values in every index, by index slot, and the failures.
struct IndexValues {
    by_slot: Vec<Vec<String>>,
    errors: Vec<IndexError>,
}

impl<K: Resource + Send + Sync + 'static> Cache<K> {
    /// An empty cache without indexes; the empty state is published.
    pub fn new() -> Self {
        Self::starting(None, None)
    }

    /// An empty compact cache: objects are stored encoded by `codec`
    /// (compressed JSON, [`super::compact`]) and decoded on every read.
    pub fn compact(codec: Codec<K>) -> Result<Self, CompactError> {
        let compactor = Compactor::new(codec.options)?;
        Ok(Self::starting(Some(Arc::new(codec)), Some(compactor)))
    }

    /// A compact cache of JSON objects with these options (see [`Codec::json`]).
    pub fn compact_json(options: CompactOptions) -> Result<Self, CompactError>
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Self::compact(Codec::json(options))
    }

    fn starting(codec: Option<Arc<Codec<K>>>, compactor: Option<Compactor>) -> Self {
        let current = CacheView::empty(codec);
        let published = Arc::new(ArcSwap::from_pointee(current.clone()));
        Cache {
            current,
            published,
            compactor,
            early: Vec::new(),
        }
    }

    /// Registers index `name` and indexes every stored object at once (IDX-10).
    /// Fails on a name conflict; otherwise returns the objects whose index
    /// function failed (they are stored, under no value of this index). A
    /// compact cache decodes every object once for it.
    pub fn add_index(&mut self, name: &str, f: IndexFn<K>) -> Result<Vec<IndexError>, CacheError> {
        if self.current.indices.contains_key(name) {
            return Err(CacheError::IndexConflict(vec![name.to_owned()]));
        }
        let mut index = Index {
            func: f,
            values: imbl::HashMap::new(),
            slot: self.current.indices.len(),
        };
        let mut errors = Vec::new();
        // Only compact entries change (they gain this index's values): a
        // decoded cache's map is read, never copied.
        let mut extended = Vec::new();
        for (key, stored) in self.current.items.iter() {
            let Some(obj) = self.current.load(key, stored) else {
                continue;
            };
            let values = index.values_of(name, key, &obj).unwrap_or_else(|e| {
                errors.push(e);
                Vec::new()
            });
            if let Stored::Compact(entry) = stored {
                let mut by_slot = entry.index_values.to_vec();
                by_slot.resize(index.slot, Box::default());
                by_slot.push(values.clone().into_boxed_slice());
                let entry = CompactEntry {
                    data: entry.data.clone(),
                    resource_version: entry.resource_version.clone(),
                    index_values: by_slot.into_boxed_slice(),
                };
                extended.push((key.clone(), Stored::Compact(Arc::new(entry))));
            }
            values.into_iter().for_each(|v| index.insert_key(v, key));
        }
        for (key, stored) in extended {
            self.current.items.insert(key, stored);
        }
        self.current.indices.insert(name.to_owned(), index);
        self.recount();
        Ok(errors)
    }

    /// `obj`'s values in every index (IDX-6), a failure counting as none.
    fn index_values(&self, key: &ObjectKey, obj: &K) -> IndexValues {
        let mut out = IndexValues {
            by_slot: vec![Vec::new(); self.current.indices.len()],
            errors: Vec::new(),
        };
        for (name, index) in &self.current.indices {
            match index.values_of(name, key, obj) {
                Ok(v) => out.by_slot[index.slot] = v,
                Err(e) => out.errors.push(e),
            }
        }
        out
    }

    /// What is stored for `obj`: its compact entry in a compact cache, or
    /// the shared object (also when it does not encode: kept, logged).
    fn stored(&mut self, key: &ObjectKey, obj: &Arc<K>, values: &IndexValues) -> Stored<K> {
        let (Some(compactor), Some(codec)) = (self.compactor.as_mut(), &self.current.codec) else {
            return Stored::Decoded(obj.clone());
        };
        let encoded = (codec.encode)(obj)
            .map_err(CompactError::Encode)
            .and_then(|json| compactor.compress(&json));
        if compactor.may_learn() {
            self.early.push(key.clone());
        }
        match encoded {
            Ok(data) => Stored::Compact(Arc::new(CompactEntry {
                data,
                resource_version: obj.meta().resource_version.as_deref().map(Box::from),
                index_values: values
                    .by_slot
                    .iter()
                    .map(|v| v.clone().into_boxed_slice())
                    .collect(),
            })),
            Err(e) => {
                tracing::warn!(%key, error = %e, "object kept decoded in the compact cache");
                Stored::Decoded(obj.clone())
            }
        }
    }

    /// Counts `stored` in (`added`) or out of a compact cache's sizes.
    fn count(&mut self, stored: &Stored<K>, added: bool) {
        if self.current.codec.is_none() {
            return;
        }
        let (bytes, decoded) = (stored.compact_size(), matches!(stored, Stored::Decoded(_)));
        let c = &mut self.current.compact;
        if added {
            c.bytes += bytes;
            c.decoded += usize::from(decoded);
        } else {
            c.bytes -= bytes;
            c.decoded -= usize::from(decoded);
        }
    }

    /// Recounts a compact cache's sizes from its entries.
    fn recount(&mut self) {
        if self.current.codec.is_none() {
            return;
        }
        let mut c = CompactStats::default();
        for stored in self.current.items.values() {
            c.bytes += stored.compact_size();
            c.decoded += usize::from(matches!(stored, Stored::Decoded(_)));
        }
        self.current.compact = c;
    }

    /// The values `stored` was indexed under in `index`: kept in a compact
    /// entry, computed again for a shared object (its failure was reported
    /// when it was stored).
    fn old_values(
        index: &Index<K>,
        name: &str,
        key: &ObjectKey,
        stored: &Stored<K>,
    ) -> Vec<String> {
        match stored {
            Stored::Decoded(o) => index.values_of(name, key, o).unwrap_or_default(),
            Stored::Compact(e) => e
                .index_values
                .get(index.slot)
                .map(|v| v.to_vec())
                .unwrap_or_default(),
        }
    }

    /// Stores `obj` under `key` and updates every index (IDX-2, IDX-6). In
    /// a compact cache, `previous` is decoded from its entry, but for an
    /// object at the stored (non-empty) resourceVersion: the entry is kept
    /// as it is, neither encoded nor indexed again, and `previous` is `obj`
    /// itself (as a relist's unchanged objects share the cached `Arc` in
    /// the decoded cache).
    pub fn upsert(&mut self, key: ObjectKey, obj: Arc<K>) -> Upserted<K> {
        if let Some(Stored::Compact(entry)) = self.current.items.get(&key)
            && let Some(rv) = entry.resource_version.as_deref()
            && !rv.is_empty()
            && obj.meta().resource_version.as_deref() == Some(rv)
        {
            return Upserted {
                previous: Some(obj),
                index_errors: Vec::new(),
            };
        }
        let values = self.index_values(&key, &obj);
        let stored = self.stored(&key, &obj, &values);
        self.count(&stored, true);
        let previous = self.current.items.insert(key.clone(), stored);
        for (name, index) in self.current.indices.iter_mut() {
            let old = previous
                .as_ref()
                .map(|p| Self::old_values(index, name, &key, p))
                .unwrap_or_default();
            let new = &values.by_slot[index.slot];
            // IDX-6 shortcut: one equal value before and after.
            if old.len() == 1 && new.len() == 1 && old[0] == new[0] {
                continue;
            }
            for v in &old {
                if !new.contains(v) {
                    index.remove_key(v, &key);
                }
            }
            for v in new {
                if !old.contains(v) {
                    index.insert_key(v.clone(), &key);
                }
            }
        }
        let previous = previous.and_then(|p| {
            self.count(&p, false);
            self.current.load(&key, &p)
        });
        Upserted {
            previous,
            index_errors: values.errors,
        }
    }

    /// Removes `key` and its index entries (IDX-3); a missing key is a no-op.
    /// In a compact cache the removed object is decoded: see [`discard`](Self::discard).
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.take(key)?;
        self.current.load(key, &old)
    }

    /// Removes `key` like [`remove`](Self::remove), without returning (or
    /// decoding) the object; whether it was there.
    pub fn discard(&mut self, key: &ObjectKey) -> bool {
        self.take(key).is_some()
    }

    fn take(&mut self, key: &ObjectKey) -> Option<Stored<K>> {
        let old = self.current.items.remove(key)?;
        for (name, index) in self.current.indices.iter_mut() {
            for v in Self::old_values(index, name, key, &old) {
                index.remove_key(&v, key);
            }
        }
        self.count(&old, false);
        Some(old)
    }

    /// Replaces the whole content atomically (IDX-5): a later duplicate key
    /// wins and every index is rebuilt. Returns the index failures.
    pub fn replace(&mut self, items: Vec<(ObjectKey, Arc<K>)>) -> Vec<IndexError> {
        // Later duplicates win, as in a map built in order.
        let mut last: std::collections::HashMap<ObjectKey, usize, foldhash::fast::RandomState> =
            std::collections::HashMap::default();
        for (i, (key, _)) in items.iter().enumerate() {
            last.insert(key.clone(), i);
        }
        let mut indexed: Vec<imbl::HashMap<String, KeySet>> =
            vec![imbl::HashMap::new(); self.current.indices.len()];
        let mut stored_items = Items::default();
        let mut errors = Vec::new();
        for (i, (key, obj)) in items.into_iter().enumerate() {
            if last.get(&key) != Some(&i) {
                continue;
            }
            let values = self.index_values(&key, &obj);
            for (slot, vs) in values.by_slot.iter().enumerate() {
                for v in vs {
                    indexed[slot]
                        .entry(v.clone())
                        .or_default()
                        .insert(key.clone());
                }
            }
            let stored = self.stored(&key, &obj, &values);
            errors.extend(values.errors);
            stored_items.insert(key, stored);
        }
        for index in self.current.indices.values_mut() {
            index.values = std::mem::take(&mut indexed[index.slot]);
        }
        self.current.items = stored_items;
        self.recount();
        errors
    }

    /// Makes the current state what [`CacheReader::snapshot`] returns.
    /// O(number of indexes).
    pub fn publish(&mut self) {
        self.recompress_early(RECOMPRESS_PER_PUBLISH);
        if let Some(c) = &self.compactor {
            self.current.compact.dictionary = c.has_dictionary();
        }
        self.published.store(Arc::new(self.current.clone()));
    }

    /// Once the dictionary is learned, compresses again with it up to `max`
    /// of the entries stored before it (about 10 µs each; a Pod shrinks from
    /// about 1.9 KB to 0.25 KB). Learning given up: forgets them.
    fn recompress_early(&mut self, max: usize) {
        let Some(compactor) = self.compactor.as_mut() else {
            return;
        };
        if self.early.is_empty() || compactor.may_learn() {
            return;
        }
        if !compactor.has_dictionary() {
            self.early = Vec::new();
            return;
        }
        let from = self.early.len().saturating_sub(max);
        for key in self.early.drain(from..) {
            let Some(Stored::Compact(entry)) = self.current.items.get(&key) else {
                continue;
            };
            if entry.data.has_dictionary() {
                continue;
            }
            let Ok(data) = entry
                .data
                .decompress()
                .and_then(|json| compactor.compress(&json))
            else {
                continue;
            };
            let again = Arc::new(CompactEntry {
                data,
                resource_version: entry.resource_version.clone(),
                index_values: entry.index_values.clone(),
            });
            self.current.compact.bytes = self.current.compact.bytes + again.size() - entry.size();
            self.current.items.insert(key, Stored::Compact(again));
        }
        if self.early.is_empty() {
            self.early = Vec::new();
        }
    }

    /// A handle for other threads that reads the last published state.
    pub fn reader(&self) -> CacheReader<K> {
        CacheReader {
            published: self.published.clone(),
        }
    }

    /// An immutable copy of the current state, published or not.
    pub fn snapshot(&self) -> Snapshot<K> {
        Snapshot {
            view: Arc::new(self.current.clone()),
        }
    }
}

/// An immutable view of the cache at one instant; cheap to clone and to
/// send to other threads. Reads go through `Deref` to [`CacheView`].
pub struct Snapshot<K> {
    view: Arc<CacheView<K>>,
}

impl<K> Clone for Snapshot<K> {
    fn clone(&self) -> Self {
        Snapshot {
            view: self.view.clone(),
        }
    }
}

impl<K> fmt::Debug for Snapshot<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Snapshot").field(&*self.view).finish()
    }
}

impl<K> Deref for Snapshot<K> {
    type Target = CacheView<K>;

    fn deref(&self) -> &CacheView<K> {
        &self.view
    }
}

impl<K> KnownObjects<K> for Snapshot<K> {
    fn known_keys(&self) -> Vec<ObjectKey> {
        self.view.known_keys()
    }

    fn known_object(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.view.known_object(key)
    }

    fn knows(&self, key: &ObjectKey) -> bool {
        self.view.knows(key)
    }
}

/// A `Clone + Send + Sync` handle that reads the last published state of a
/// [`Cache`] without blocking its writer.
pub struct CacheReader<K> {
    published: Arc<ArcSwap<CacheView<K>>>,
}

impl<K> Clone for CacheReader<K> {
    fn clone(&self) -> Self {
        CacheReader {
            published: self.published.clone(),
        }
    }
}

impl<K> fmt::Debug for CacheReader<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheReader").finish_non_exhaustive()
    }
}

impl<K> CacheReader<K> {
    /// The last published state (lock-free).
    pub fn snapshot(&self) -> Snapshot<K> {
        Snapshot {
            view: self.published.load_full(),
        }
    }
}

#[cfg(test)]
mod tests {
    const COMPACT: bool = false;

    fn new_cache() -> super::Cache<k8s_openapi::api::core::v1::ConfigMap> {
        super::Cache::new()
    }

    include!("cache_tests.rs");
}

/// The same tests against a compact cache whose dictionary is learned early.
#[cfg(test)]
mod compact_tests {
    const COMPACT: bool = true;

    fn new_cache() -> super::Cache<k8s_openapi::api::core::v1::ConfigMap> {
        super::Cache::compact_json(super::CompactOptions::new().dictionary(8, 1024)).unwrap()
    }

    include!("cache_tests.rs");

    fn name_of(o: &ConfigMap) -> &str {
        o.metadata.name.as_deref().unwrap_or_default()
    }

    /// A JSON codec that refuses to encode objects named `unencodable` and
    /// to decode objects named `undecodable`.
    fn picky_codec() -> Codec<ConfigMap> {
        Codec::new(
            CompactOptions::new().without_dictionary(),
            |o| match name_of(o) {
                "unencodable" => Err("refused".into()),
                _ => serde_json::to_vec(o).map_err(|e| e.to_string()),
            },
            |b| {
                let o: ConfigMap = serde_json::from_slice(b).map_err(|e| e.to_string())?;
                match name_of(&o) {
                    "undecodable" => Err("refused".into()),
                    _ => Ok(o),
                }
            },
        )
    }

    #[test]
    fn compact_entries_are_smaller_and_counted() {
        let mut c = new_cache();
        let big = "x".repeat(4000);
        // The dictionary is learned from the first 8, on another thread.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut n = 0;
        while !c.compact_stats().unwrap().dictionary {
            assert!(std::time::Instant::now() < deadline, "no dictionary");
            put(&mut c, &format!("k{n}"), &big);
            n += 1;
            c.publish();
            std::thread::yield_now();
        }
        let stats = c.reader().snapshot().compact_stats().unwrap();
        assert_eq!(stats.decoded, 0);
        // Those stored before it were compressed again with it at publish.
        assert!(n > 8);
        for i in 0..n {
            match c.current.items.get(&key(&format!("k{i}"))) {
                Some(Stored::Compact(e)) => assert!(e.data.has_dictionary(), "k{i}"),
                _ => panic!("k{i} is not compact"),
            }
        }
        assert!(c.early.is_empty());
        assert!(
            stats.bytes < n * 1000,
            "{n} objects of 4 KB in {} bytes",
            stats.bytes
        );
        for i in 0..n {
            c.discard(&key(&format!("k{i}")));
        }
        assert_eq!(c.compact_stats().unwrap().bytes, 0, "removals uncount");
        assert!(Cache::<ConfigMap>::new().compact_stats().is_none());
    }

    #[test]
    fn an_unchanged_resource_version_keeps_the_entry_and_answers_the_object() {
        let mut c = new_cache();
        c.add_index("by_val", by_val()).unwrap();
        let at = |v: &str, rv: &str| {
            let mut o = (*cm("a", v)).clone();
            o.metadata.resource_version = Some(rv.into());
            Arc::new(o)
        };
        c.upsert(key("a"), at("one", "7"));
        let again = at("one", "7");
        let up = c.upsert(key("a"), again.clone());
        assert!(Arc::ptr_eq(&up.previous.unwrap(), &again), "no decode");
        // A new resourceVersion is a change: encoded and indexed again.
        let up = c.upsert(key("a"), at("two", "8"));
        assert_eq!(val(&up.previous.unwrap()), "one");
        assert_eq!(keys_of(&c, "by_val", "two"), ["a"]);
        assert!(keys_of(&c, "by_val", "one").is_empty());
        // An empty resourceVersion never counts as unchanged.
        c.upsert(key("b"), at("x", ""));
        let up = c.upsert(key("b"), at("y", ""));
        assert_eq!(val(&up.previous.unwrap()), "x");
        assert_eq!(val(&c.get("b").unwrap()), "y");
    }

    #[test]
    fn an_object_that_does_not_encode_is_kept_decoded() {
        let mut c = Cache::compact(picky_codec()).unwrap();
        c.add_index("by_val", by_val()).unwrap();
        put(&mut c, "unencodable", "v");
        put(&mut c, "fine", "v");
        assert_eq!(c.compact_stats().unwrap().decoded, 1);
        assert_eq!(
            names(&c.by_index("by_val", "v").unwrap()),
            ["fine", "unencodable"]
        );
        assert_eq!(val(&c.remove(&key("unencodable")).unwrap()), "v");
        assert_eq!(c.compact_stats().unwrap().decoded, 0);
    }

    #[test]
    fn an_entry_that_does_not_decode_is_an_error_not_a_panic() {
        let mut c = Cache::compact(picky_codec()).unwrap();
        c.add_index("by_val", by_val()).unwrap();
        put(&mut c, "undecodable", "v");
        put(&mut c, "fine", "v");
        assert!(c.get("undecodable").is_none(), "read as absent");
        assert!(matches!(
            c.try_get("undecodable"),
            Err(CompactError::Decode(_))
        ));
        assert_eq!(names(&c.by_index("by_val", "v").unwrap()), ["fine"]);
        assert_eq!(c.list().len(), 1);
        assert_eq!(c.entries_lazily().count(), 1);
        assert!(c.compact_stats().unwrap().decode_errors >= 4);
        // Its index entries still go with it: they were kept at insert.
        assert!(c.discard(&key("undecodable")));
        assert_eq!(keys_of(&c, "by_val", "v"), ["fine"]);
    }
}
