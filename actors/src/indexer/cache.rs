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

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;

use arc_swap::ArcSwap;
use kube::Resource;

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
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Index {
            func: self.func.clone(),
            values: self.values.clone(),
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

/// The objects by key. foldhash rather than SipHash: every upsert and read
/// hashes a key (still randomly seeded per map).
type Items<K> = imbl::GenericHashMap<
    ObjectKey,
    Arc<K>,
    foldhash::fast::RandomState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// The objects of one cache state, produced lazily
/// ([`CacheView::entries_lazily`]): it drains a copy of the persistent map,
/// copying each tree node when it first reaches it.
pub struct LazyEntries<K> {
    drain: imbl::hashmap::ConsumingIter<(ObjectKey, Arc<K>), imbl::shared_ptr::DefaultSharedPtr>,
}

impl<K> Iterator for LazyEntries<K> {
    type Item = (ObjectKey, Arc<K>);

    fn next(&mut self) -> Option<(ObjectKey, Arc<K>)> {
        self.drain.next()
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

/// Every read operation, shared by [`Cache`] (the writer's current state) and
/// [`Snapshot`] (an immutable published state) through `Deref`.
pub struct CacheView<K> {
    items: Items<K>,
    indices: BTreeMap<String, Index<K>>,
}

impl<K> Clone for CacheView<K> {
    /// O(number of indexes): the maps are persistent and share structure.
    fn clone(&self) -> Self {
        CacheView {
            items: self.items.clone(),
            indices: self.indices.clone(),
        }
    }
}

impl<K> fmt::Debug for CacheView<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheView")
            .field("len", &self.items.len())
            .field("indices", &self.indices.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<K> CacheView<K> {
    fn empty() -> Self {
        CacheView {
            items: Items::default(),
            indices: BTreeMap::new(),
        }
    }

    /// The object stored under `key` (IDX-4): an [`ObjectKey`] or a
    /// `&str` `"namespace/name"` (`"name"` when cluster-scoped).
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<K>>
    where
        ObjectKey: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.items.get(key).cloned()
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
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectKey, &Arc<K>)> {
        self.items.iter()
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
        self.items.values().cloned().collect()
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
        keys.filter_map(|k| self.items.get(k).cloned()).collect()
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

impl<K: Resource + Send + Sync + 'static> Cache<K> {
    /// An empty cache without indexes; the empty state is published.
    pub fn new() -> Self {
        let current = CacheView::empty();
        let published = Arc::new(ArcSwap::from_pointee(current.clone()));
        Cache { current, published }
    }

    /// Registers index `name` and indexes every stored object at once (IDX-10).
    /// Fails on a name conflict; otherwise returns the objects whose index
    /// function failed (they are stored, under no value of this index).
    pub fn add_index(&mut self, name: &str, f: IndexFn<K>) -> Result<Vec<IndexError>, CacheError> {
        if self.current.indices.contains_key(name) {
            return Err(CacheError::IndexConflict(vec![name.to_owned()]));
        }
        let mut index = Index {
            func: f,
            values: imbl::HashMap::new(),
        };
        let mut errors = Vec::new();
        for (key, obj) in self.current.items.iter() {
            match index.values_of(name, key, obj) {
                Ok(values) => values.into_iter().for_each(|v| index.insert_key(v, key)),
                Err(e) => errors.push(e),
            }
        }
        self.current.indices.insert(name.to_owned(), index);
        Ok(errors)
    }

    /// Stores `obj` under `key` and updates every index (IDX-2, IDX-6).
    pub fn upsert(&mut self, key: ObjectKey, obj: Arc<K>) -> Upserted<K> {
        let mut index_errors = Vec::new();
        let previous = self.current.items.insert(key.clone(), obj.clone());
        for (name, index) in self.current.indices.iter_mut() {
            // The old object's failure was reported when it was stored.
            let old = previous
                .as_deref()
                .and_then(|o| index.values_of(name, &key, o).ok())
                .unwrap_or_default();
            let new = match index.values_of(name, &key, &obj) {
                Ok(v) => v,
                Err(e) => {
                    index_errors.push(e);
                    Vec::new()
                }
            };
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
                if !old.contains(&v) {
                    index.insert_key(v, &key);
                }
            }
        }
        Upserted {
            previous,
            index_errors,
        }
    }

    /// Removes `key` and its index entries (IDX-3); a missing key is a no-op.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.current.items.remove(key)?;
        for (name, index) in self.current.indices.iter_mut() {
            for v in index.values_of(name, key, &old).unwrap_or_default() {
                index.remove_key(&v, key);
            }
        }
        Some(old)
    }

    /// Replaces the whole content atomically (IDX-5): a later duplicate key
    /// wins and every index is rebuilt. Returns the index failures.
    pub fn replace(&mut self, items: Vec<(ObjectKey, Arc<K>)>) -> Vec<IndexError> {
        let items: Items<K> = items.into_iter().collect();
        let mut errors = Vec::new();
        for (name, index) in self.current.indices.iter_mut() {
            let mut values: imbl::HashMap<String, KeySet> = imbl::HashMap::new();
            for (key, obj) in items.iter() {
                match index.values_of(name, key, obj) {
                    Ok(vs) => {
                        for v in vs {
                            values.entry(v).or_default().insert(key.clone());
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
            index.values = values;
        }
        self.current.items = items;
        errors
    }

    /// Makes the current state what [`CacheReader::snapshot`] returns.
    /// O(number of indexes).
    pub fn publish(&mut self) {
        self.published.store(Arc::new(self.current.clone()));
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
    use super::*;
    use std::collections::BTreeMap as Map;
    use std::sync::mpsc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    /// A ConfigMap named `name` whose `data.val` is `val`.
    fn cm(name: &str, val: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            data: Some(Map::from([("val".to_owned(), val.to_owned())])),
            ..Default::default()
        })
    }

    fn val(obj: &ConfigMap) -> String {
        obj.data
            .as_ref()
            .and_then(|d| d.get("val"))
            .cloned()
            .unwrap_or_default()
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::from(name)
    }

    fn put(cache: &mut Cache<ConfigMap>, name: &str, v: &str) -> Upserted<ConfigMap> {
        cache.upsert(key(name), cm(name, v))
    }

    /// Indexes an object under its `val`.
    fn by_val() -> IndexFn<ConfigMap> {
        Arc::new(|o: &ConfigMap| Ok(vec![val(o)]))
    }

    /// Indexes an object under each comma-separated part of its `val`.
    fn split_val() -> IndexFn<ConfigMap> {
        Arc::new(|o: &ConfigMap| Ok(val(o).split(',').map(str::to_owned).collect()))
    }

    /// Fails for objects whose `val` is `bad`.
    fn fallible() -> IndexFn<ConfigMap> {
        Arc::new(|o: &ConfigMap| {
            if val(o) == "bad" {
                Err("bad value".to_owned())
            } else {
                Ok(vec![val(o)])
            }
        })
    }

    fn vals(objs: &[Arc<ConfigMap>]) -> Vec<String> {
        let mut v: Vec<String> = objs.iter().map(|o| val(o)).collect();
        v.sort();
        v
    }

    fn names(objs: &[Arc<ConfigMap>]) -> Vec<String> {
        objs.iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }

    fn keys_of(view: &CacheView<ConfigMap>, index: &str, value: &str) -> Vec<String> {
        view.index_keys(index, value)
            .unwrap()
            .iter()
            .map(|k| k.to_string())
            .collect()
    }

    #[test]
    fn s_t1_store() {
        let mut c = Cache::new();
        put(&mut c, "foo", "bar");
        assert_eq!(val(&c.get(&key("foo")).unwrap()), "bar");
        let up = put(&mut c, "foo", "baz");
        assert_eq!(val(&up.previous.unwrap()), "bar");
        assert_eq!(val(&c.get(&key("foo")).unwrap()), "baz");
        assert_eq!(val(&c.remove(&key("foo")).unwrap()), "baz");
        assert!(c.get(&key("foo")).is_none());
        assert!(
            c.remove(&key("foo")).is_none(),
            "IDX-3: a missing key is a no-op"
        );

        put(&mut c, "a", "b");
        put(&mut c, "c", "d");
        put(&mut c, "e", "e");
        assert_eq!(vals(&c.list()), ["b", "d", "e"]);

        c.replace(vec![
            (key("foo"), cm("foo", "foo")),
            (key("bar"), cm("bar", "bar")),
        ]);
        assert_eq!(vals(&c.list()), ["bar", "foo"]);
        let mut keys: Vec<String> = c.keys().iter().map(|k| k.to_string()).collect();
        keys.sort();
        assert_eq!(keys, ["bar", "foo"]);
        assert_eq!(c.len(), 2);
        // Reads by string, without building a key.
        assert_eq!(val(&c.get("foo").unwrap()), "foo");
        assert!(c.contains("bar") && !c.contains("nope"));
        let mut iterated: Vec<(String, String)> = c
            .iter()
            .map(|(k, o)| (k.to_string(), val(o).to_owned()))
            .collect();
        iterated.sort();
        assert_eq!(
            iterated,
            [("bar".into(), "bar".into()), ("foo".into(), "foo".into())]
        );
    }

    #[test]
    fn s_t2_index() {
        let mut c = Cache::new();
        assert!(c.add_index("by_val", by_val()).unwrap().is_empty());
        put(&mut c, "a", "b");
        put(&mut c, "c", "b");
        put(&mut c, "e", "f");
        put(&mut c, "g", "h");
        for (v, expected) in [("b", vec!["a", "c"]), ("f", vec!["e"]), ("h", vec!["g"])] {
            let found = c.index("by_val", &cm("probe", v)).unwrap();
            assert_eq!(names(&found), expected, "value {v}");
        }
    }

    #[test]
    fn i_t1_get_index_func_values() {
        let label_foo: IndexFn<ConfigMap> = Arc::new(|o: &ConfigMap| {
            Ok(o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("foo"))
                .cloned()
                .into_iter()
                .collect())
        });
        let pod = |name: &str, foo: &str| {
            Arc::new(ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(Map::from([("foo".to_owned(), foo.to_owned())])),
                    ..Default::default()
                },
                ..Default::default()
            })
        };
        let mut c = Cache::new();
        c.add_index("testmodes", label_foo).unwrap();
        c.upsert(key("one"), pod("one", "bar"));
        c.upsert(key("two"), pod("two", "bar"));
        c.upsert(key("tre"), pod("tre", "biz"));
        assert_eq!(c.list_index_values("testmodes"), ["bar", "biz"]);
    }

    #[test]
    fn t_t1_delete_removes_empty_sets_from_index() {
        let by_name: IndexFn<ConfigMap> =
            Arc::new(|o: &ConfigMap| Ok(o.metadata.name.clone().into_iter().collect()));
        let mut c = Cache::new();
        c.add_index("by_name", by_name).unwrap();
        put(&mut c, "k", "v");
        assert_eq!(keys_of(&c, "by_name", "k"), ["k"]);
        c.remove(&key("k"));
        assert!(
            c.indices["by_name"].values.get("k").is_none(),
            "the value entry is removed"
        );
        assert!(c.list_index_values("by_name").is_empty());
    }

    #[test]
    fn t_t2_add_keeps_non_empty_set_post_delete_from_index() {
        let constant: IndexFn<ConfigMap> =
            Arc::new(|_: &ConfigMap| Ok(vec!["constant".to_owned()]));
        let mut c = Cache::new();
        c.add_index("by_constant", constant).unwrap();
        put(&mut c, "retain", "x");
        put(&mut c, "delete", "x");
        c.remove(&key("delete"));
        assert_eq!(
            c.indices["by_constant"]
                .values
                .get("constant")
                .map(|s| s.len()),
            Some(1)
        );
        assert_eq!(keys_of(&c, "by_constant", "constant"), ["retain"]);
    }

    #[test]
    fn t_t3_multiple_values() {
        let mut c = Cache::new();
        c.add_index("split", split_val()).unwrap();
        let check = |c: &Cache<ConfigMap>, foo: &[&str], bar: &[&str], baz: &[&str]| {
            assert_eq!(keys_of(c, "split", "foo"), foo, "foo");
            assert_eq!(keys_of(c, "split", "bar"), bar, "bar");
            assert_eq!(keys_of(c, "split", "baz"), baz, "baz");
            // IDX-6: no empty value sets are left behind
            assert!(c.indices["split"].values.values().all(|s| !s.is_empty()));
        };
        put(&mut c, "key1", "foo");
        put(&mut c, "key2", "bar");
        check(&c, &["key1"], &["key2"], &[]);
        put(&mut c, "key2", "foo,bar");
        check(&c, &["key1", "key2"], &["key2"], &[]);
        put(&mut c, "key1", "foo,bar");
        check(&c, &["key1", "key2"], &["key1", "key2"], &[]);
        put(&mut c, "key3", "foo,bar,baz");
        check(
            &c,
            &["key1", "key2", "key3"],
            &["key1", "key2", "key3"],
            &["key3"],
        );
        put(&mut c, "key1", "foo");
        check(&c, &["key1", "key2", "key3"], &["key2", "key3"], &["key3"]);
        put(&mut c, "key2", "bar");
        check(&c, &["key1", "key3"], &["key2", "key3"], &["key3"]);
        c.remove(&key("key1"));
        check(&c, &["key3"], &["key2", "key3"], &["key3"]);
        c.remove(&key("key3"));
        check(&c, &[], &["key2"], &[]);
        assert_eq!(c.list_index_values("split"), ["bar"]);
    }

    #[test]
    fn idx_7_index_is_the_union_over_values_each_once() {
        let mut c = Cache::new();
        c.add_index("split", split_val()).unwrap();
        put(&mut c, "a", "x,y");
        put(&mut c, "b", "y");
        put(&mut c, "c", "z");
        let found = c.index("split", &cm("probe", "x,y,y")).unwrap();
        assert_eq!(names(&found), ["a", "b"]);
        assert!(c.index("split", &cm("probe", "none")).unwrap().is_empty());
    }

    #[test]
    fn idx_8_idx_9_unknown_index_and_value() {
        let mut c = Cache::new();
        c.add_index("by_val", by_val()).unwrap();
        put(&mut c, "a", "b");
        let unknown = CacheError::UnknownIndex("nope".to_owned());
        assert_eq!(c.by_index("nope", "b").unwrap_err(), unknown);
        assert_eq!(c.index_keys("nope", "b").unwrap_err(), unknown);
        assert_eq!(c.index("nope", &cm("a", "b")).unwrap_err(), unknown);
        assert_eq!(unknown.to_string(), "index with name nope does not exist");
        assert!(c.list_index_values("nope").is_empty(), "IDX-9: no error");
        assert!(
            c.by_index("by_val", "zzz").unwrap().is_empty(),
            "an unknown value is empty"
        );
        assert_eq!(names(&c.by_index("by_val", "b").unwrap()), ["a"]);
    }

    #[test]
    fn idx_10_add_index_after_data_reindexes_and_conflicts() {
        let mut c = Cache::new();
        put(&mut c, "a", "x");
        put(&mut c, "b", "y");
        put(&mut c, "c", "x");
        assert!(c.add_index("by_val", by_val()).unwrap().is_empty());
        assert_eq!(keys_of(&c, "by_val", "x"), ["a", "c"]);
        assert_eq!(keys_of(&c, "by_val", "y"), ["b"]);
        let err = c.add_index("by_val", split_val()).unwrap_err();
        assert_eq!(err, CacheError::IndexConflict(vec!["by_val".to_owned()]));
        assert_eq!(
            keys_of(&c, "by_val", "x"),
            ["a", "c"],
            "the existing index is untouched"
        );
        // later writes keep both indexes up to date
        c.add_index("split", split_val()).unwrap();
        put(&mut c, "b", "x,z");
        assert_eq!(keys_of(&c, "by_val", "x,z"), ["b"]);
        assert_eq!(keys_of(&c, "split", "x"), ["a", "b", "c"]);
        assert_eq!(c.index_names(), ["by_val", "split"]);
    }

    #[test]
    fn idx_5_replace_later_duplicate_wins_and_indices_rebuilt() {
        let mut c = Cache::new();
        c.add_index("by_val", by_val()).unwrap();
        put(&mut c, "old", "x");
        let errors = c.replace(vec![
            (key("a"), cm("a", "1")),
            (key("b"), cm("b", "2")),
            (key("a"), cm("a", "3")),
        ]);
        assert!(errors.is_empty());
        assert_eq!(c.len(), 2);
        assert_eq!(val(&c.get(&key("a")).unwrap()), "3");
        assert_eq!(
            c.list_index_values("by_val"),
            ["2", "3"],
            "old values are gone"
        );
    }

    #[test]
    fn index_func_panic_is_contained_as_an_error() {
        let mut c = Cache::new();
        let panicky: IndexFn<ConfigMap> = Arc::new(|o: &ConfigMap| {
            if val(o) == "boom" {
                panic!("index bug (expected by the test)");
            }
            Ok(vec![val(o)])
        });
        c.add_index("p", panicky).unwrap();
        let up = put(&mut c, "a", "boom");
        assert_eq!(up.index_errors.len(), 1);
        assert_eq!(up.index_errors[0].message, "index function panicked");
        assert!(c.contains(&key("a")));
        assert!(put(&mut c, "b", "fine").index_errors.is_empty());
        assert_eq!(keys_of(&c, "p", "fine"), ["b"]);
    }

    #[test]
    fn index_func_failure_is_an_error_value_not_a_panic() {
        let mut c = Cache::new();
        put(&mut c, "pre", "bad");
        let errors = c.add_index("f", fallible()).unwrap();
        assert_eq!(
            errors,
            [IndexError {
                index: "f".into(),
                key: key("pre"),
                message: "bad value".into()
            }]
        );

        let up = put(&mut c, "a", "bad");
        assert_eq!(up.index_errors.len(), 1);
        assert_eq!(up.index_errors[0].key, key("a"));
        assert!(c.contains(&key("a")), "the object is stored anyway");
        assert!(
            c.list_index_values("f").is_empty(),
            "indexed under no value"
        );

        // Becoming valid indexes it; becoming invalid again unindexes it.
        assert!(put(&mut c, "a", "good").index_errors.is_empty());
        assert_eq!(keys_of(&c, "f", "good"), ["a"]);
        assert_eq!(put(&mut c, "a", "bad").index_errors.len(), 1);
        assert!(c.list_index_values("f").is_empty());
        assert!(c.remove(&key("a")).is_some());

        let errors = c.replace(vec![(key("x"), cm("x", "bad")), (key("y"), cm("y", "ok"))]);
        assert_eq!(errors.len(), 1);
        assert_eq!(c.len(), 2);
        assert_eq!(keys_of(&c, "f", "ok"), ["y"]);

        let err = c.index("f", &cm("probe", "bad")).unwrap_err();
        assert!(
            matches!(err, CacheError::IndexFunc(IndexError { ref message, .. }) if message == "bad value")
        );
    }

    #[test]
    fn idx_13_objects_are_shared() {
        let obj = cm("a", "x");
        let mut c = Cache::new();
        c.add_index("by_val", by_val()).unwrap();
        c.upsert(key("a"), obj.clone());
        assert!(Arc::ptr_eq(&c.get(&key("a")).unwrap(), &obj));
        assert!(Arc::ptr_eq(&c.by_index("by_val", "x").unwrap()[0], &obj));
        assert!(Arc::ptr_eq(&c.snapshot().get(&key("a")).unwrap(), &obj));
    }

    #[test]
    fn snapshot_is_immutable_and_known_objects() {
        let mut c = Cache::new();
        put(&mut c, "a", "1");
        let snap = c.snapshot();
        put(&mut c, "b", "2");
        c.remove(&key("a"));
        assert_eq!(snap.len(), 1);
        assert!(snap.contains(&key("a")) && !snap.contains(&key("b")));
        let known: &dyn KnownObjects<ConfigMap> = &snap;
        assert_eq!(known.known_keys(), [key("a")]);
        assert!(known.knows(&key("a")));
        assert_eq!(val(&known.known_object(&key("a")).unwrap()), "1");
        let known: &dyn KnownObjects<ConfigMap> = &c;
        assert_eq!(known.known_keys(), [key("b")]);
    }

    #[test]
    fn readers_see_only_published_state() {
        let mut c = Cache::new();
        let reader = c.reader();
        put(&mut c, "a", "1");
        assert!(reader.snapshot().is_empty(), "not published yet");
        assert_eq!(c.snapshot().len(), 1, "the writer's snapshot sees it");
        c.publish();
        assert_eq!(reader.snapshot().len(), 1);
        assert_eq!(reader.clone().snapshot().len(), 1);
    }

    #[test]
    fn reader_on_another_thread_sees_published_snapshots_while_writer_continues() {
        const TOTAL: usize = 2_000;
        const EVERY: usize = 100;
        let mut c = Cache::new();
        c.add_index("by_val", by_val()).unwrap();
        let reader = c.reader();
        let (tx, rx) = mpsc::channel();

        let handle = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut seen = Vec::new();
            loop {
                let snap = reader.snapshot();
                let n = snap.len();
                // Every published state is a consistent prefix: n objects,
                // each indexed under its own value.
                let consistent = (0..n).all(|i| {
                    let name = format!("k{i:05}");
                    snap.contains(&key(&name))
                        && snap
                            .index_keys("by_val", &name)
                            .is_ok_and(|k| k == [key(&name)])
                });
                seen.push((n, consistent));
                if n == TOTAL || std::time::Instant::now() > deadline {
                    break;
                }
                std::thread::yield_now();
            }
            tx.send(seen).ok();
        });

        // The writer never waits for the reader.
        for i in 0..TOTAL {
            let name = format!("k{i:05}");
            put(&mut c, &name, &name);
            if (i + 1) % EVERY == 0 {
                c.publish();
            }
        }
        let seen = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the reader finished");
        handle.join().unwrap();
        assert_eq!(
            seen.last().map(|s| s.0),
            Some(TOTAL),
            "the reader saw the final state"
        );
        assert!(
            seen.iter().all(|&(n, ok)| ok && n % EVERY == 0),
            "only whole published states are visible"
        );
    }
}
