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
//!
//! Compaction is write-behind (`super::compaction`): an object is stored
//! decoded ("fresh", with its index values) and compressed on the
//! compactor's thread once it is no longer among the `recent` objects
//! written ([`CompactOptions::recent`]); the result replaces the entry only
//! if the entry is still that write. Reads of a fresh entry return the
//! stored `Arc`. Decoded objects held: at most `recent` plus
//! [`MAX_IN_FLIGHT`] plus the writes since the last check.

use std::borrow::Borrow;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use kube::Resource;

use super::compact::{Codec, CompactEntry, CompactError, CompactOptions, CompressedOld};
use super::compaction::{Compaction, DictionaryState, Done, Job};
use crate::delta::KnownObjects;
use crate::key::ObjectKey;
use crate::old::OldObject;

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
    /// The object previously stored under the key, if any: in a compact
    /// cache, a compressed one is decoded only when read.
    pub previous: Option<OldObject<K>>,
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

/// One stored object: shared as decoded (a decoded cache; in a compact
/// cache, an object that did not encode), fresh or compact (compact caches).
enum Stored<K> {
    Decoded(Arc<K>),
    Fresh(Arc<Fresh<K>>),
    Compact(Arc<CompactEntry>),
}

/// A compact cache's object not compressed yet: write number `seq` of its
/// key, with its values in every index by slot (kept for its compact entry).
struct Fresh<K> {
    obj: Arc<K>,
    seq: u64,
    index_values: Box<[Box<[String]>]>,
}

impl<K> Clone for Stored<K> {
    fn clone(&self) -> Self {
        match self {
            Stored::Decoded(o) => Stored::Decoded(o.clone()),
            Stored::Fresh(f) => Stored::Fresh(f.clone()),
            Stored::Compact(e) => Stored::Compact(e.clone()),
        }
    }
}

impl<K> Stored<K> {
    /// Heap bytes a compact entry holds (0 for a decoded one).
    fn compact_size(&self) -> usize {
        match self {
            Stored::Decoded(_) | Stored::Fresh(_) => 0,
            Stored::Compact(e) => e.size(),
        }
    }

    /// The stored resourceVersion if non-empty and known without decoding,
    /// and the entry not known to be undecodable (which a new object at
    /// that version must replace).
    fn resource_version(&self) -> Option<&str>
    where
        K: Resource,
    {
        match self {
            Stored::Decoded(_) => None,
            Stored::Fresh(f) => f.obj.meta().resource_version.as_deref(),
            Stored::Compact(e) if e.undecodable.load(Ordering::Relaxed) => None,
            Stored::Compact(e) => e.resource_version.as_deref(),
        }
        .filter(|rv| !rv.is_empty())
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
/// Like [`CacheView::keys`], every key, an undecodable entry's included;
/// nothing is decoded.
pub struct LazyKeys<K>(LazyEntries<K>);

impl<K> Iterator for LazyKeys<K> {
    type Item = ObjectKey;

    fn next(&mut self) -> Option<ObjectKey> {
        self.0.drain.next().map(|(key, _)| key)
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
        (Stored::Fresh(f), _) => Some(f.obj.clone()),
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
    /// Objects held decoded until they are compressed: the recent ones
    /// ([`CompactOptions::recent`]) and those being compressed.
    pub fresh: usize,
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

    /// `stored` as an update's old state: a compressed one stays compressed
    /// until a subscriber reads it (`None` only for a compact entry without
    /// a codec, which is never stored).
    fn old(&self, key: &ObjectKey, stored: Stored<K>) -> Option<OldObject<K>>
    where
        K: Send + Sync + 'static,
    {
        match (stored, &self.codec) {
            (Stored::Decoded(o), _) => Some(o.into()),
            (Stored::Fresh(f), _) => Some(f.obj.clone().into()),
            (Stored::Compact(e), Some(codec)) => {
                Some(CompressedOld::old_object(key.clone(), e, codec.clone()))
            }
            (Stored::Compact(_), None) => None,
        }
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
            (Some(Stored::Fresh(f)), _) => Ok(Some(f.obj.clone())),
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
    /// Set in a compact cache: what is still to compress.
    behind: Option<Behind<K>>,
}

/// A compact cache's write-behind state.
struct Behind<K> {
    compaction: Compaction<K>,
    /// Keys written fresh, oldest first, with their write number. An item
    /// is live iff its key is stored fresh with that number; items below
    /// `dispatched_below` were taken (their jobs sent, or dead).
    fresh: VecDeque<(ObjectKey, u64)>,
    /// The next write number.
    next_seq: u64,
    /// Every write number below it left `fresh`.
    dispatched_below: u64,
    /// Live items in `fresh`: fresh entries no job was sent for. At most
    /// `recent` after a publish (a job batch more between publishes): the
    /// most recently written objects, each counted once however often it
    /// was written.
    waiting: usize,
    recent: usize,
    /// Keys compressed before the dictionary was learned, to compress again
    /// with it, a slice per publish.
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

/// How many entries compressed before the dictionary each publish hands
/// out to be compressed again.
const RECOMPRESS_PER_PUBLISH: usize = 512;

/// Most objects being compressed at once: past it, a write waits for
/// results (the compactor's answers are the back-pressure).
pub const MAX_IN_FLIGHT: usize = 1024;

/// Jobs handed to the compactor's thread at once between publishes.
const JOB_BATCH: usize = 128;

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
        let compaction = Compaction::new(codec.encode, codec.options)?;
        let behind = Behind {
            compaction,
            fresh: VecDeque::new(),
            next_seq: 0,
            dispatched_below: 0,
            waiting: 0,
            recent: codec.options.recent,
            early: Vec::new(),
        };
        Ok(Self::starting(Some(Arc::new(codec)), Some(behind)))
    }

    /// A compact cache of JSON objects with these options (see [`Codec::json`]).
    pub fn compact_json(options: CompactOptions) -> Result<Self, CompactError>
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Self::compact(Codec::json(options))
    }

    fn starting(codec: Option<Arc<Codec<K>>>, behind: Option<Behind<K>>) -> Self {
        let current = CacheView::empty(codec);
        let published = Arc::new(ArcSwap::from_pointee(current.clone()));
        Cache {
            current,
            published,
            behind,
        }
    }

    /// In a compact cache whose compactor has a thread of its own: runs
    /// `wake` (on that thread) when results are ready while the writer is
    /// idle. The writer should then [`publish`](Self::publish), which
    /// installs them (otherwise they wait for the next write or publish).
    pub fn on_compacted(&self, wake: impl Fn() + Send + 'static) {
        if let Some(b) = &self.behind {
            b.compaction.on_results(wake);
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
        // Only compact and fresh entries change (they gain this index's
        // values): a decoded cache's map is read, never copied.
        let mut extended = Vec::new();
        for (key, stored) in self.current.items.iter() {
            let Some(obj) = self.current.load(key, stored) else {
                continue;
            };
            let values = index.values_of(name, key, &obj).unwrap_or_else(|e| {
                errors.push(e);
                Vec::new()
            });
            let with_slot = |kept: &[Box<[String]>]| {
                let mut by_slot = kept.to_vec();
                by_slot.resize(index.slot, Box::default());
                by_slot.push(values.clone().into_boxed_slice());
                by_slot.into_boxed_slice()
            };
            match stored {
                Stored::Decoded(_) => {}
                Stored::Fresh(f) => {
                    let fresh = Fresh {
                        obj: f.obj.clone(),
                        seq: f.seq,
                        index_values: with_slot(&f.index_values),
                    };
                    extended.push((key.clone(), Stored::Fresh(Arc::new(fresh))));
                }
                Stored::Compact(entry) => {
                    let entry = CompactEntry {
                        data: entry.data.clone(),
                        resource_version: entry.resource_version.clone(),
                        index_values: with_slot(&entry.index_values),
                        undecodable: AtomicBool::new(entry.undecodable.load(Ordering::Relaxed)),
                    };
                    extended.push((key.clone(), Stored::Compact(Arc::new(entry))));
                }
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

    /// What is stored for `obj`: fresh in a compact cache (queued to be
    /// compressed), else the shared object.
    fn stored(&mut self, key: &ObjectKey, obj: &Arc<K>, values: &IndexValues) -> Stored<K> {
        let Some(b) = self.behind.as_mut() else {
            return Stored::Decoded(obj.clone());
        };
        let seq = b.next_seq;
        b.next_seq += 1;
        b.waiting += 1;
        b.fresh.push_back((key.clone(), seq));
        Stored::Fresh(Arc::new(Fresh {
            obj: obj.clone(),
            seq,
            index_values: values
                .by_slot
                .iter()
                .map(|v| v.clone().into_boxed_slice())
                .collect(),
        }))
    }

    /// Counts `stored` in (`added`) or out of a compact cache's sizes (and,
    /// a fresh entry whose job was not sent going out, out of `waiting`).
    fn count(&mut self, stored: &Stored<K>, added: bool) {
        if self.current.codec.is_none() {
            return;
        }
        if let (false, Stored::Fresh(f), Some(b)) = (added, stored, self.behind.as_mut())
            && f.seq >= b.dispatched_below
        {
            b.waiting -= 1;
        }
        let bytes = stored.compact_size();
        let decoded = usize::from(matches!(stored, Stored::Decoded(_)));
        let fresh = usize::from(matches!(stored, Stored::Fresh(_)));
        let c = &mut self.current.compact;
        if added {
            c.bytes += bytes;
            c.decoded += decoded;
            c.fresh += fresh;
        } else {
            c.bytes -= bytes;
            c.decoded -= decoded;
            c.fresh -= fresh;
        }
    }

    /// Recounts a compact cache's sizes from its entries.
    fn recount(&mut self) {
        if self.current.codec.is_none() {
            return;
        }
        let mut c = CompactStats {
            dictionary: self.current.compact.dictionary,
            ..CompactStats::default()
        };
        for stored in self.current.items.values() {
            c.bytes += stored.compact_size();
            c.decoded += usize::from(matches!(stored, Stored::Decoded(_)));
            c.fresh += usize::from(matches!(stored, Stored::Fresh(_)));
        }
        self.current.compact = c;
    }

    /// The values `stored` was indexed under in `index`: kept in a compact
    /// or fresh entry, computed again for a shared object (its failure was
    /// reported when it was stored).
    fn old_values(
        index: &Index<K>,
        name: &str,
        key: &ObjectKey,
        stored: &Stored<K>,
    ) -> Vec<String> {
        let kept = match stored {
            Stored::Decoded(o) => return index.values_of(name, key, o).unwrap_or_default(),
            Stored::Fresh(f) => &f.index_values,
            Stored::Compact(e) => &e.index_values,
        };
        kept.get(index.slot).map(|v| v.to_vec()).unwrap_or_default()
    }

    /// Stores `obj` under `key` and updates every index (IDX-2, IDX-6). In
    /// a compact cache, `previous` is the stored `Arc` of a fresh entry and
    /// decoded from a compact one, but for an object at the stored
    /// (non-empty) resourceVersion: the entry is kept as it is, neither
    /// encoded nor indexed again, and `previous` is `obj` itself (as a
    /// relist's unchanged objects share the cached `Arc` in the decoded
    /// cache).
    pub fn upsert(&mut self, key: ObjectKey, obj: Arc<K>) -> Upserted<K> {
        if let Some(stored) = self.current.items.get(&key)
            && let Some(rv) = stored.resource_version()
            && obj.meta().resource_version.as_deref() == Some(rv)
        {
            return Upserted {
                previous: Some(obj.into()),
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
            self.current.old(&key, p)
        });
        self.compact_behind(false);
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
        if let Some(b) = self.behind.as_mut() {
            // Every earlier write is replaced: none is live any more.
            b.fresh.clear();
            b.early.clear();
            b.dispatched_below = b.next_seq;
            b.waiting = 0;
        }
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
        self.compact_behind(false);
        errors
    }

    /// Makes the current state what [`CacheReader::snapshot`] returns.
    /// O(number of indexes), plus installing a compact cache's results.
    pub fn publish(&mut self) {
        self.compact_behind(true);
        self.published.store(Arc::new(self.current.clone()));
    }

    /// A compact cache's write-behind step: installs the results ready,
    /// hands out the fresh entries beyond the recent ones (between
    /// publishes only by whole job batches, unless jobs run in place),
    /// waits while too many are in flight, and at a publish hands out
    /// entries to compress again with a newly learned dictionary.
    fn compact_behind(&mut self, publishing: bool) {
        let Some(b) = self.behind.as_mut() else {
            return;
        };
        b.compaction.poll();
        let done = b.compaction.take(false);
        self.install(done);
        let Some(b) = self.behind.as_mut() else {
            return;
        };
        let mut over = b.waiting.saturating_sub(b.recent);
        let min = if publishing || b.compaction.is_inline() {
            1
        } else {
            JOB_BATCH
        };
        // Jobs handed out (or waited for) here: their results may be ready
        // before this returns (always, in place). Most writes hand out none.
        let mut handed = over >= min;
        if handed {
            let mut jobs = Vec::with_capacity(over.min(JOB_BATCH));
            while over > 0
                && let Some((key, seq)) = b.fresh.pop_front()
            {
                b.dispatched_below = seq + 1;
                let Some(Stored::Fresh(f)) = self.current.items.get(&key) else {
                    continue;
                };
                if f.seq != seq {
                    continue; // written again since: a later item is live
                }
                (b.waiting, over) = (b.waiting - 1, over - 1);
                let obj = f.obj.clone();
                jobs.push(Job::Encode { key, seq, obj });
                if jobs.len() == JOB_BATCH {
                    b.compaction.submit(std::mem::take(&mut jobs));
                }
            }
            b.compaction.submit(jobs);
        }
        // Dead items (keys written again or removed) are dropped once they
        // outnumber the live ones: `fresh` stays O(live items).
        if b.fresh.len() > 2 * b.waiting + JOB_BATCH {
            let items = &self.current.items;
            b.fresh.retain(
                |(key, seq)| matches!(items.get(key), Some(Stored::Fresh(f)) if f.seq == *seq),
            );
        }
        if publishing {
            handed |= self.recompress_early();
        }
        while self
            .behind
            .as_ref()
            .is_some_and(|b| b.compaction.in_flight() > MAX_IN_FLIGHT)
        {
            handed = true;
            let done = self.behind.as_mut().map(|b| b.compaction.take(true));
            self.install(done.unwrap_or_default());
        }
        // Also re-arms the wake-up after a waiting take.
        if handed {
            let installed = self.behind.as_mut().map(|b| b.compaction.take(false));
            self.install(installed.unwrap_or_default());
        }
        if let Some(b) = &self.behind {
            self.current.compact.dictionary = b.compaction.dictionary() == DictionaryState::Learned;
        }
    }

    /// Installs the compactor's results whose entries are still the ones
    /// they were made from; an object that did not encode is kept decoded.
    fn install(&mut self, done: Vec<Done>) {
        let Some(b) = self.behind.as_mut() else {
            return;
        };
        // Compressed without a dictionary that exists or may come: again later.
        let may_redo = b.compaction.dictionary() != DictionaryState::Off;
        for d in done {
            match d {
                Done::Encoded { key, seq, data } => {
                    let Some(Stored::Fresh(f)) = self.current.items.get(&key) else {
                        continue;
                    };
                    if f.seq != seq {
                        continue;
                    }
                    let (c, f) = (&mut self.current.compact, f.clone());
                    c.fresh -= 1;
                    let stored = match data {
                        Ok(data) => {
                            if may_redo && !data.has_dictionary() {
                                b.early.push(key.clone());
                            }
                            let entry = CompactEntry {
                                data,
                                resource_version: f
                                    .obj
                                    .meta()
                                    .resource_version
                                    .as_deref()
                                    .map(Box::from),
                                index_values: f.index_values.clone(),
                                undecodable: AtomicBool::new(false),
                            };
                            c.bytes += entry.size();
                            Stored::Compact(Arc::new(entry))
                        }
                        Err(e) => {
                            tracing::warn!(%key, error = %e, "object kept decoded in the compact cache");
                            c.decoded += 1;
                            Stored::Decoded(f.obj.clone())
                        }
                    };
                    self.current.items.insert(key, stored);
                }
                Done::Recompressed { key, old, new } => {
                    let Some(Stored::Compact(entry)) = self.current.items.get(&key) else {
                        continue;
                    };
                    if !entry.data.same_as(&old) {
                        continue;
                    }
                    let again = Arc::new(CompactEntry {
                        data: new,
                        resource_version: entry.resource_version.clone(),
                        index_values: entry.index_values.clone(),
                        undecodable: AtomicBool::new(entry.undecodable.load(Ordering::Relaxed)),
                    });
                    let c = &mut self.current.compact;
                    c.bytes = c.bytes + again.size() - entry.size();
                    self.current.items.insert(key, Stored::Compact(again));
                }
            }
        }
    }

    /// Once the dictionary is learned, hands out up to
    /// [`RECOMPRESS_PER_PUBLISH`] of the entries compressed before it to be
    /// compressed again (a Pod shrinks from about 1.9 KB to 0.25 KB).
    /// Learning given up: forgets them. Whether it handed any out.
    fn recompress_early(&mut self) -> bool {
        let Some(b) = self.behind.as_mut() else {
            return false;
        };
        match b.compaction.dictionary() {
            _ if b.early.is_empty() => return false,
            DictionaryState::Learning => return false,
            DictionaryState::Off => {
                b.early = Vec::new();
                return false;
            }
            DictionaryState::Learned => {}
        }
        let from = b.early.len().saturating_sub(RECOMPRESS_PER_PUBLISH);
        let jobs = b
            .early
            .drain(from..)
            .filter_map(|key| match self.current.items.get(&key) {
                Some(Stored::Compact(e)) if !e.data.has_dictionary() => Some(Job::Recompress {
                    data: e.data.clone(),
                    key,
                }),
                _ => None,
            })
            .collect::<Vec<_>>();
        let handed = !jobs.is_empty();
        b.compaction.submit(jobs);
        if b.early.is_empty() {
            b.early = Vec::new();
        }
        handed
    }

    /// Waits until nothing beyond the recent objects is left to compress
    /// and every result is installed (tests).
    #[cfg(test)]
    fn settle(&mut self) {
        loop {
            self.compact_behind(true);
            let Some(b) = self.behind.as_mut() else {
                return;
            };
            if b.compaction.in_flight() == 0 && b.waiting <= b.recent {
                return;
            }
            let done = b.compaction.take(true);
            self.install(done);
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

/// The same tests against a compact cache whose dictionary is learned
/// early, compressing each object at once on the writer's thread (so the
/// tests below see compact entries deterministically).
#[cfg(test)]
mod compact_tests {
    const COMPACT: bool = true;

    fn new_cache() -> super::Cache<k8s_openapi::api::core::v1::ConfigMap> {
        let options = super::CompactOptions::new()
            .dictionary(8, 1024)
            .recent(0)
            .background(false);
        super::Cache::compact_json(options).unwrap()
    }

    include!("cache_tests.rs");

    fn name_of(o: &ConfigMap) -> &str {
        o.metadata.name.as_deref().unwrap_or_default()
    }

    /// A JSON codec that refuses to encode objects named `unencodable` and
    /// to decode objects named `undecodable`.
    fn picky_codec() -> Codec<ConfigMap> {
        Codec::new(
            CompactOptions::new()
                .without_dictionary()
                .recent(0)
                .background(false),
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

    /// Stores objects `k0`, `k1`, ... of `big` until the dictionary (learned
    /// on another thread) is, calling `step` after each; returns how many.
    pub(super) fn fill_until_dictionary(
        c: &mut Cache<ConfigMap>,
        big: &str,
        step: impl Fn(&mut Cache<ConfigMap>),
    ) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut n = 0;
        while !c.compact_stats().unwrap().dictionary {
            assert!(std::time::Instant::now() < deadline, "no dictionary");
            put(c, &format!("k{n}"), big);
            n += 1;
            step(c);
            std::thread::yield_now();
        }
        n
    }

    #[test]
    fn compact_entries_are_smaller_and_counted() {
        let mut c = new_cache();
        let big = "x".repeat(4000);
        // The dictionary is learned from the first 8, on another thread.
        let n = fill_until_dictionary(&mut c, &big, Cache::publish);
        // Those stored before it are compressed again, a slice per publish.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !c.behind.as_ref().unwrap().early.is_empty() {
            assert!(std::time::Instant::now() < deadline, "not compressed again");
            c.publish();
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
        assert!(c.behind.as_ref().unwrap().early.is_empty());
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
        assert!(up.previous.unwrap().is(&again), "no decode");
        // A new resourceVersion is a change: encoded and indexed again.
        let up = c.upsert(key("a"), at("two", "8"));
        assert_eq!(val(&up.previous.unwrap().get().unwrap()), "one");
        assert_eq!(keys_of(&c, "by_val", "two"), ["a"]);
        assert!(keys_of(&c, "by_val", "one").is_empty());
        // An empty resourceVersion never counts as unchanged.
        c.upsert(key("b"), at("x", ""));
        let up = c.upsert(key("b"), at("y", ""));
        assert_eq!(val(&up.previous.unwrap().get().unwrap()), "x");
        assert_eq!(val(&c.get("b").unwrap()), "y");
    }

    /// An entry found undecodable is replaced by the next object at its
    /// resourceVersion (a relist would otherwise keep it for good).
    #[test]
    fn an_undecodable_entry_is_replaced_at_its_resource_version() {
        let codec = Codec::new(
            CompactOptions::new()
                .without_dictionary()
                .recent(0)
                .background(false),
            |o: &ConfigMap| serde_json::to_vec(o).map_err(|e| e.to_string()),
            |b| {
                let o: ConfigMap = serde_json::from_slice(b).map_err(|e| e.to_string())?;
                match val(&o).as_str() {
                    "poison" => Err("refused".into()),
                    _ => Ok(o),
                }
            },
        );
        let mut c = Cache::compact(codec).unwrap();
        let at = |v: &str| {
            let mut o = (*cm("a", v)).clone();
            o.metadata.resource_version = Some("7".into());
            Arc::new(o)
        };
        c.upsert(key("a"), at("poison"));
        assert!(c.get("a").is_none(), "undecodable");
        c.upsert(key("a"), at("good"));
        assert_eq!(val(&c.get("a").unwrap()), "good");
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
        // A key all the same (so a delete or a relist still removes it),
        // listed without decoding anything.
        assert_eq!((c.len(), c.keys().len()), (2, 2));
        assert!(c.contains("undecodable"));
        let errors = c.compact_stats().unwrap().decode_errors;
        assert_eq!(c.keys_lazily().count(), 2);
        assert_eq!(
            c.compact_stats().unwrap().decode_errors,
            errors,
            "no decode"
        );
        // Its index entries still go with it: they were kept at insert.
        assert!(c.discard(&key("undecodable")));
        assert_eq!(keys_of(&c, "by_val", "v"), ["fine"]);
    }

    /// An update of a compressed entry hands its old state over compressed:
    /// nothing is decoded until it is read, once, for every clone.
    #[test]
    fn an_updates_old_state_is_decoded_only_when_read() {
        let mut c = new_cache();
        let mut first = (*cm("a", "one")).clone();
        first.metadata.resource_version = Some("7".into());
        c.upsert(key("a"), Arc::new(first));
        let errors = c.compact_stats().unwrap().decode_errors;
        let old = c.upsert(key("a"), cm("a", "two")).previous.unwrap();
        assert!(!old.is_decoded() && old.decoded().is_none());
        assert_eq!(old.resource_version(), Some("7"), "read without decoding");
        let copy = old.clone();
        let decoded = old.get().unwrap();
        assert_eq!(val(&decoded), "one");
        assert!(copy.is(&decoded), "decoded once, shared by clones");
        assert_eq!(c.compact_stats().unwrap().decode_errors, errors);
    }

    /// An old state that does not decode is an `Updated` whose `get` is a
    /// typed error (counted), never a panic.
    #[test]
    fn an_old_state_that_does_not_decode_is_a_typed_error() {
        let mut c = Cache::compact(picky_codec()).unwrap();
        put(&mut c, "undecodable", "v");
        let mut next = (*cm("undecodable", "w")).clone();
        next.metadata.resource_version = Some("9".into());
        let old = c
            .upsert(key("undecodable"), Arc::new(next))
            .previous
            .expect("an update, not an add");
        let e = old.get().unwrap_err();
        assert!(e.key.contains("undecodable"), "{e}");
        assert!(e.reason.contains("refused"), "{e}");
        assert!(c.compact_stats().unwrap().decode_errors >= 1);
    }
}

/// The same tests against the default write-behind compact cache: entries
/// are fresh or compact depending on the compactor thread's timing, which
/// no result may depend on.
#[cfg(test)]
mod behind_tests {
    const COMPACT: bool = true;

    fn new_cache() -> super::Cache<k8s_openapi::api::core::v1::ConfigMap> {
        let options = super::CompactOptions::new().dictionary(8, 1024).recent(1);
        super::Cache::compact_json(options).unwrap()
    }

    include!("cache_tests.rs");

    fn behind(recent: usize) -> Cache<ConfigMap> {
        Cache::compact_json(CompactOptions::new().recent(recent)).unwrap()
    }

    /// Dispatches the oldest fresh entry as the cache would, and waits for
    /// its result without installing it.
    fn run_oldest_job(c: &mut Cache<ConfigMap>) -> Vec<Done> {
        let b = c.behind.as_mut().unwrap();
        let (key, seq) = b.fresh.pop_front().unwrap();
        b.dispatched_below = seq + 1;
        b.waiting -= 1;
        let Some(Stored::Fresh(f)) = c.current.items.get(&key) else {
            panic!("{key} is not fresh");
        };
        let obj = f.obj.clone();
        let b = c.behind.as_mut().unwrap();
        b.compaction.submit(vec![Job::Encode { key, seq, obj }]);
        b.compaction.take(true)
    }

    fn is_fresh(c: &Cache<ConfigMap>, name: &str) -> bool {
        matches!(c.current.items.get(&key(name)), Some(Stored::Fresh(_)))
    }

    #[test]
    fn only_objects_beyond_the_recent_ones_are_compressed() {
        let mut c = behind(4);
        c.add_index("by_val", by_val()).unwrap();
        let objs: Vec<_> = (0..20)
            .map(|i| cm(&format!("k{i}"), &format!("v{}", i % 3)))
            .collect();
        for (i, o) in objs.iter().enumerate() {
            c.upsert(key(&format!("k{i}")), o.clone());
        }
        c.settle();
        let stats = c.compact_stats().unwrap();
        assert_eq!((stats.fresh, stats.decoded), (4, 0));
        assert!(stats.bytes > 0);
        for (i, obj) in objs.iter().enumerate() {
            let name = format!("k{i}");
            assert_eq!(is_fresh(&c, &name), i >= 16, "{name}");
            assert_eq!(*c.get(&key(&name)).unwrap(), **obj);
        }
        // A recent object is the stored Arc, not a decoded copy.
        assert!(Arc::ptr_eq(&c.get(&key("k19")).unwrap(), &objs[19]));
        let mut v1 = names(&c.by_index("by_val", "v1").unwrap());
        v1.sort();
        assert_eq!(v1, ["k1", "k10", "k13", "k16", "k19", "k4", "k7"]);
        // The published state installs them too.
        c.publish();
        assert_eq!(c.reader().snapshot().compact_stats().unwrap().fresh, 4);
    }

    #[test]
    fn objects_written_again_and_again_stay_decoded_and_counted_once() {
        let mut c = behind(4);
        for round in 0..2000 {
            for k in 0..4 {
                put(&mut c, &format!("hot{k}"), &round.to_string());
            }
            if round % 100 == 0 {
                c.publish();
            }
        }
        c.settle();
        let b = c.behind.as_ref().unwrap();
        assert_eq!((b.waiting, b.compaction.in_flight()), (4, 0));
        assert!(
            b.fresh.len() <= 2 * 4 + JOB_BATCH,
            "{} items",
            b.fresh.len()
        );
        assert_eq!(c.compact_stats().unwrap().fresh, 4);
        assert_eq!(c.compact_stats().unwrap().bytes, 0, "none compressed");
        // A fifth object pushes out the least recently written one.
        put(&mut c, "cold", "x");
        c.settle();
        assert!(!is_fresh(&c, "hot0") && is_fresh(&c, "hot3") && is_fresh(&c, "cold"));
        assert_eq!(val(&c.get("hot0").unwrap()), "1999");
        // Removals and replacements keep the count.
        c.discard(&key("hot3"));
        c.remove(&key("cold"));
        assert_eq!(c.behind.as_ref().unwrap().waiting, 2);
        c.replace(vec![(key("n"), cm("n", "1"))]);
        c.settle();
        let b = c.behind.as_ref().unwrap();
        assert_eq!((b.waiting, c.compact_stats().unwrap().fresh), (1, 1));
    }

    #[test]
    fn entries_compressed_before_the_dictionary_are_compressed_again_with_it() {
        let options = CompactOptions::new().dictionary(8, 1024).recent(0);
        let mut c = Cache::<ConfigMap>::compact_json(options).unwrap();
        let big = "x".repeat(4000);
        let n = super::compact_tests::fill_until_dictionary(&mut c, &big, Cache::settle);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        // Each publish hands out a slice of them; settle installs it.
        while !c.behind.as_ref().unwrap().early.is_empty() {
            assert!(std::time::Instant::now() < deadline, "not compressed again");
            c.settle();
        }
        for i in 0..n {
            match c.current.items.get(&key(&format!("k{i}"))) {
                Some(Stored::Compact(e)) => assert!(e.data.has_dictionary(), "k{i}"),
                _ => panic!("k{i} is not compact"),
            }
            assert_eq!(val(&c.get(&key(&format!("k{i}"))).unwrap()), big);
        }
    }

    #[test]
    fn an_update_of_a_recent_object_answers_the_stored_arc() {
        let mut c = behind(8);
        let one = cm("a", "1");
        c.upsert(key("a"), one.clone());
        let up = c.upsert(key("a"), cm("a", "2"));
        assert!(up.previous.unwrap().is(&one), "no decode");
    }

    #[test]
    fn a_result_for_an_overwritten_write_is_not_installed() {
        let mut c = behind(0);
        c.add_index("by_val", by_val()).unwrap();
        put(&mut c, "a", "old");
        // The job for "old" runs; its result comes back after "new" is written.
        let done = run_oldest_job(&mut c);
        assert_eq!(done.len(), 1);
        put(&mut c, "a", "new");
        c.install(done);
        assert!(is_fresh(&c, "a"), "the stale result was dropped");
        assert_eq!(val(&c.get("a").unwrap()), "new");
        c.settle();
        assert!(!is_fresh(&c, "a"));
        assert_eq!(val(&c.get("a").unwrap()), "new");
        assert_eq!(keys_of(&c, "by_val", "new"), ["a"]);
        let stats = c.compact_stats().unwrap();
        assert_eq!((stats.fresh, stats.decoded), (0, 0));
    }

    #[test]
    fn a_panicking_encoder_keeps_the_object_decoded_and_the_thread_alive() {
        let codec = Codec::new(
            CompactOptions::new().without_dictionary().recent(0),
            |o: &ConfigMap| match o.metadata.name.as_deref() {
                Some("panicky") => panic!("encoder bug"),
                _ => serde_json::to_vec(o).map_err(|e| e.to_string()),
            },
            |b| serde_json::from_slice(b).map_err(|e| e.to_string()),
        );
        let mut c = Cache::compact(codec).unwrap();
        put(&mut c, "panicky", "v");
        c.settle();
        assert_eq!(c.compact_stats().unwrap().decoded, 1);
        assert_eq!(val(&c.get("panicky").unwrap()), "v");
        put(&mut c, "fine", "w");
        c.settle();
        let stats = c.compact_stats().unwrap();
        assert_eq!((stats.decoded, stats.fresh), (1, 0));
        assert!(stats.bytes > 0, "the compactor thread still runs");
    }

    /// A decoder that panics reads as an undecodable entry: absent, counted,
    /// never a panic of the reader.
    #[test]
    fn a_panicking_decoder_reads_as_an_undecodable_entry() {
        let codec = Codec::new(
            CompactOptions::new().without_dictionary().recent(0),
            |o: &ConfigMap| serde_json::to_vec(o).map_err(|e| e.to_string()),
            |b| match serde_json::from_slice::<ConfigMap>(b) {
                Ok(o) if o.metadata.name.as_deref() == Some("panicky") => panic!("decoder bug"),
                other => other.map_err(|e| e.to_string()),
            },
        );
        let mut c = Cache::compact(codec).unwrap();
        put(&mut c, "panicky", "v");
        put(&mut c, "fine", "w");
        c.settle();
        assert_eq!(c.compact_stats().unwrap().fresh, 0, "both compressed");
        assert!(c.get("panicky").is_none());
        assert_eq!(val(&c.get("fine").unwrap()), "w");
        assert!(c.compact_stats().unwrap().decode_errors >= 1);
    }

    #[test]
    fn decoded_objects_held_stay_bounded_without_publishing() {
        // A slow encoder: without the back-pressure, jobs would pile up.
        let codec = Codec::new(
            CompactOptions::new().without_dictionary().recent(16),
            |o: &ConfigMap| {
                std::thread::sleep(Duration::from_micros(50));
                serde_json::to_vec(o).map_err(|e| e.to_string())
            },
            |b| serde_json::from_slice(b).map_err(|e| e.to_string()),
        );
        let mut c = Cache::compact(codec).unwrap();
        for i in 0..5000 {
            put(&mut c, &format!("k{i}"), "v");
            let fresh = c.compact_stats().unwrap().fresh;
            let in_flight = c.behind.as_ref().unwrap().compaction.in_flight();
            assert!(in_flight <= MAX_IN_FLIGHT, "{in_flight} in flight");
            assert!(
                fresh <= 16 + MAX_IN_FLIGHT + JOB_BATCH,
                "{fresh} decoded after {i} writes"
            );
        }
        c.settle();
        assert_eq!(c.compact_stats().unwrap().fresh, 16);
        assert_eq!(c.len(), 5000);
    }

    #[test]
    fn results_ready_while_idle_wake_the_writer() {
        let mut c = behind(0);
        let (tx, rx) = mpsc::channel();
        c.on_compacted(move || {
            let _ = tx.send(());
        });
        for i in 0..10 {
            put(&mut c, &format!("k{i}"), "v");
        }
        assert_eq!(
            c.compact_stats().unwrap().fresh,
            10,
            "fewer than a job batch: not sent"
        );
        c.publish();
        rx.recv_timeout(Duration::from_secs(20)).expect("woken");
        c.publish();
        let stats = c.reader().snapshot().compact_stats().unwrap();
        assert_eq!(stats.fresh, 0);
        assert!(stats.bytes > 0);
        // Taking the results re-armed the wake-up: a second round wakes too.
        while rx.try_recv().is_ok() {}
        for i in 10..20 {
            put(&mut c, &format!("k{i}"), "v");
        }
        c.publish();
        rx.recv_timeout(Duration::from_secs(20))
            .expect("woken again");
        c.publish();
        assert_eq!(c.reader().snapshot().compact_stats().unwrap().fresh, 0);
    }

    #[test]
    fn a_dictionary_learned_while_idle_is_noticed_and_used() {
        let options = CompactOptions::new().dictionary(8, 1024).recent(0);
        let mut c = Cache::<ConfigMap>::compact_json(options).unwrap();
        let (tx, rx) = mpsc::channel();
        c.on_compacted(move || {
            let _ = tx.send(());
        });
        let big = "x".repeat(4000);
        for i in 0..8 {
            put(&mut c, &format!("k{i}"), &big);
        }
        // The 8th compression starts learning; no write comes after it.
        c.settle();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let all_with_dictionary = |c: &Cache<ConfigMap>| {
            (0..8).all(|i| {
                matches!(c.current.items.get(&key(&format!("k{i}"))),
                    Some(Stored::Compact(e)) if e.data.has_dictionary())
            })
        };
        while !all_with_dictionary(&c) {
            assert!(
                std::time::Instant::now() < deadline,
                "dictionary never used"
            );
            let _ = rx.recv_timeout(Duration::from_millis(100));
            c.publish(); // what the Indexer does on a wake
        }
        assert!(c.compact_stats().unwrap().dictionary);
    }

    #[test]
    fn removed_and_replaced_entries_ignore_their_results() {
        for replace in [false, true] {
            let mut c = behind(0);
            put(&mut c, "a", "old");
            let done = run_oldest_job(&mut c);
            if replace {
                c.replace(vec![(key("a"), cm("a", "new"))]);
            } else {
                assert!(c.discard(&key("a")));
            }
            c.install(done);
            let stats = c.compact_stats().unwrap();
            assert_eq!(stats.bytes, 0, "nothing installed");
            assert_eq!(stats.fresh, usize::from(replace));
            assert_eq!(c.behind.as_ref().unwrap().waiting, usize::from(replace));
            c.settle();
            let stats = c.compact_stats().unwrap();
            assert_eq!((stats.fresh, stats.decoded), (0, 0));
            assert_eq!(c.len(), usize::from(replace));
            if replace {
                assert_eq!(val(&c.get("a").unwrap()), "new");
            }
        }
    }
}
