//! client-go's RealFIFO (the default queue since 1.33) as a pure state
//! machine: every event kept, in arrival order across keys.
//!
//! # Rules implemented (spec section 1.4)
//!
//! * **RF-1** one entry per event, never merged; a pop hands over one delta.
//! * **RF-2** the non-atomic variant, with known objects = the cache, always
//!   passed in (`()` means "none").
//! * **RF-3** `add`, `update` and `delete` append unconditionally: unlike
//!   the DeltaFIFO (DF-6), a delete of a key neither queued nor known is
//!   queued too, and reaches the consumer.
//! * **RF-5** `replace`: first a tombstone for every queued key missing from
//!   the list whose newest queued delta is not a delete (first-seen order,
//!   carrying the newest queued state), then one for every known key missing
//!   from the list and not queued, then `Replaced` for each item in list
//!   order. **Deletes come before the replacements**, the other way round
//!   from the DeltaFIFO (DF-9).
//! * **RF-6** the initial population is every entry queued at the first
//!   `replace`; a key listed twice counts twice.
//! * **RF-7** `resync` queues `Sync` for known keys with nothing queued.
//! * **RF-9** [`RealFifo::pop_batch`] takes consecutive entries from the head
//!   while (b) their key is not in the batch yet, (c) the batch has room and
//!   (d) the batch does not cross the end of the initial population. Every
//!   delta type is batchable here (a); a key error cannot reach the queue
//!   (keys are computed when an event is queued).
//! * **RF-11** [`RealFifo::has_synced`], latched.
//!
//! # What kinformer adds or leaves out
//!
//! * The **in-flight overlay** and **HasSynced latched after processing**
//!   of the DeltaFIFO (see `queue.rs`) hold here too: the known objects of
//!   RF-5 step 3 and RF-7 are *cache ∪ in flight*, resync skips keys in
//!   flight, and the sync latches once the last initial entry is `done`
//!   (client-go also decrements after `process`, RF-6).
//! * **Batches never hold one key twice** (RF-9 b), so per-key order holds
//!   whatever the consumer does with a batch.
//! * **Atomic `replace`**: every key is computed before anything changes.
//! * **No atomic mode** (RF-8, RF-4, RF-10): no `ReplacedAll`, `SyncAll` or
//!   `Bookmark` deltas; deletion detection stays in the queue. RF-10's
//!   unlocking is moot: the consumer never holds the queue while it works.
//! * **No transformer, no `Close`, typed keys**, as in the DeltaFIFO.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use kube::Resource;

use super::in_flight::{InFlight, KEEP_WHEN_IDLE, KeyHasher};
use super::population::InitialPopulation;
use super::queue::keyed;
use crate::delta::{Delta, KnownObjects, PopReceipt, Popped};
use crate::key::{DeletedObject, KeyError, ObjectKey};

/// What is queued of one key.
#[derive(Debug)]
struct QueuedKey<K> {
    /// Entries of the key in `items`; never 0.
    count: usize,
    /// Whether the newest of them is a delete (a relist then adds no
    /// tombstone, RF-5 step 2).
    newest_deletes: bool,
    /// The object the newest of them carries (a tombstone's last known state).
    newest_object: Option<Arc<K>>,
}

/// The RealFIFO (spec 1.4): every delta in arrival order, with known
/// objects = the cache. See the module documentation for the rules and the
/// deviations from client-go.
#[derive(Debug)]
pub struct RealFifo<K> {
    /// Every queued delta with its key, oldest first (RF-1).
    items: VecDeque<(ObjectKey, Delta<K>)>,
    /// The keys of `items`, exactly, with what is queued of each.
    queued: HashMap<ObjectKey, QueuedKey<K>, KeyHasher>,
    /// Popped, not yet done.
    in_flight: InFlight<K>,
    /// The initial population and the latched HasSynced (RF-6).
    population: InitialPopulation,
    /// The pages of a list not finished yet ([`Self::list_page`]): a
    /// relist's deletes come before its items (RF-5), so a list is queued
    /// only whole.
    pages: Vec<Arc<K>>,
}

impl<K> Default for RealFifo<K> {
    fn default() -> Self {
        RealFifo {
            items: VecDeque::new(),
            queued: HashMap::default(),
            in_flight: InFlight::new(),
            population: InitialPopulation::default(),
            pages: Vec::new(),
        }
    }
}

impl<K: Resource> RealFifo<K> {
    /// An empty queue; not synced until the first mutation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `Added` (RF-3). A key error changes nothing.
    pub fn add(&mut self, obj: Arc<K>, _known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        self.append_event(obj, Delta::Added)
    }

    /// Queues `Updated` (RF-3). A key error changes nothing.
    pub fn update(&mut self, obj: Arc<K>, _known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        self.append_event(obj, Delta::Updated)
    }

    /// Queues `Deleted` with the final state `obj` (RF-3), known or not.
    pub fn delete(&mut self, obj: Arc<K>, _known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        self.append_event(obj, |o| Delta::Deleted(DeletedObject::Final(o)))
    }

    /// A relist (RF-5): tombstones for the queued and the known keys missing
    /// from `list`, then every item of `list` as `Replaced`. The first
    /// `replace` before any other mutation defines the initial population
    /// (RF-6). Atomic: a key error changes nothing.
    pub fn replace(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError> {
        self.pages = Vec::new();
        let keyed = keyed(list)?;
        let listed: HashSet<ObjectKey, KeyHasher> =
            keyed.iter().map(|(key, _)| key.clone()).collect();

        // Step 2: queued keys missing from the list, in first-seen order,
        // unless their newest queued delta is already a delete.
        let mut seen: HashSet<&ObjectKey, KeyHasher> = HashSet::default();
        let mut tombstones: Vec<(ObjectKey, Option<Arc<K>>)> = Vec::new();
        for (key, _) in &self.items {
            if listed.contains(key) || !seen.insert(key) {
                continue;
            }
            if let Some(q) = self.queued.get(key)
                && !q.newest_deletes
            {
                tombstones.push((key.clone(), q.newest_object.clone()));
            }
        }

        // Step 3: known keys (cache ∪ in flight) missing from the list, with
        // nothing queued.
        tombstones.extend(
            self.in_flight
                .overlay(known)
                .vanished(&listed, |key| self.queued.contains_key(key)),
        );

        for (key, last_known) in tombstones {
            self.append(key.clone(), Delta::tombstone(key, last_known));
        }
        // Step 4: the replacements, in list order.
        for (key, obj) in keyed {
            self.append(key, Delta::Replaced(obj));
        }
        self.population.replaced(self.items.len());
        Ok(())
    }

    /// One page of a list, kept until [`finish_list`](Self::finish_list)
    /// (the deletes of a relist come first, RF-5, and are known only at its
    /// end). `first` forgets the pages of an earlier list never finished.
    pub fn list_page(&mut self, page: Vec<Arc<K>>, first: bool) -> Result<(), KeyError> {
        if first {
            self.pages.clear();
        }
        self.pages.extend(page);
        Ok(())
    }

    /// The end of a list whose pages came through
    /// [`list_page`](Self::list_page): a [`replace`](Self::replace) with
    /// them and `list`.
    pub fn finish_list(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError> {
        let mut whole = std::mem::take(&mut self.pages);
        whole.extend(list);
        self.replace(whole, known)
    }

    /// A periodic resync (RF-7): queues `Sync` with the cached object for
    /// every known key with nothing queued and nothing in flight, so a
    /// resync never carries an older state than one on its way.
    pub fn resync(&mut self, known: &dyn KnownObjects<K>) {
        let due = self
            .in_flight
            .resyncable(known, |key| self.queued.contains_key(key));
        for (key, obj) in due {
            self.append(key, Delta::Sync(obj));
        }
    }

    /// Takes the oldest delta; `None` when empty. The item stays in flight
    /// until [`done`](Self::done).
    pub fn pop(&mut self) -> Option<Popped<K>> {
        let (key, delta) = self.items.pop_front()?;
        if let Some(q) = self.queued.get_mut(&key) {
            q.count -= 1;
            if q.count == 0 {
                self.queued.remove(&key);
            }
        }
        let is_in_initial_list = self.population.take();
        let receipt =
            self.in_flight
                .begin(key.clone(), delta.resulting_state(), is_in_initial_list);
        Some(Popped {
            key,
            deltas: vec![delta],
            is_in_initial_list,
            receipt,
        })
    }

    /// Pops up to `max` consecutive deltas of distinct keys (RF-9): a key
    /// already in the batch, or the end of the initial population, closes
    /// it, so per-key order holds and a batch is wholly initial or not.
    pub fn pop_batch(&mut self, max: usize) -> Vec<Popped<K>> {
        let mut batch: Vec<Popped<K>> = Vec::new();
        let mut keys: HashSet<ObjectKey, KeyHasher> = HashSet::default();
        while batch.len() < max {
            let Some((head, _)) = self.items.front() else {
                break;
            };
            let crosses_initial_end =
                batch.first().is_some_and(|p| p.is_in_initial_list) && self.population.all_taken();
            if keys.contains(head) || crosses_initial_end {
                break;
            }
            let Some(p) = self.pop() else {
                break;
            };
            keys.insert(p.key.clone());
            batch.push(p);
        }
        batch
    }

    /// The consumer has applied a popped item to the cache: it leaves the
    /// in-flight overlay, and the last initial item latches HasSynced. A
    /// receipt given twice (or unknown) is ignored with a warning.
    pub fn done(&mut self, receipt: &PopReceipt) {
        self.in_flight.done(receipt, &mut self.population);
    }

    /// Gives back what a burst left behind once nothing is queued or in
    /// flight (see [`DeltaQueue::release_idle_memory`](super::DeltaQueue::release_idle_memory)).
    pub fn release_idle_memory(&mut self) {
        if !self.items.is_empty() || !self.in_flight.is_empty() {
            return;
        }
        if self.items.capacity() > KEEP_WHEN_IDLE {
            self.items = VecDeque::new();
        }
        if self.queued.capacity() > KEEP_WHEN_IDLE {
            self.queued = HashMap::default();
        }
        self.in_flight.release_idle_memory();
    }

    /// True once the initial population has been popped and processed
    /// (RF-6, latched). A first `add`/`update`/`delete`, or a first
    /// `replace` that queues nothing, syncs at once.
    pub fn has_synced(&self) -> bool {
        self.population.has_synced()
    }

    /// Number of queued deltas (one per event).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is queued (items may still be in flight).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Number of distinct keys with queued deltas.
    pub fn queued_keys(&self) -> usize {
        self.queued.len()
    }

    /// Number of popped items not yet [`done`](Self::done).
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The in-flight overlay holds nothing, per key as per receipt.
    #[cfg(test)]
    pub(super) fn overlay_is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// A watch event: its key, the first mutation, the delta appended.
    fn append_event(
        &mut self,
        obj: Arc<K>,
        delta: impl FnOnce(Arc<K>) -> Delta<K>,
    ) -> Result<(), KeyError> {
        let key = ObjectKey::of(&*obj)?;
        self.population.mutated();
        self.append(key, delta(obj));
        Ok(())
    }

    fn append(&mut self, key: ObjectKey, delta: Delta<K>) {
        let newest_deletes = matches!(delta, Delta::Deleted(_));
        let newest_object = delta.object().cloned();
        let q = self.queued.entry(key.clone()).or_insert(QueuedKey {
            count: 0,
            newest_deletes,
            newest_object: None,
        });
        q.count += 1;
        q.newest_deletes = newest_deletes;
        q.newest_object = newest_object;
        self.items.push_back((key, delta));
    }
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{KeyOnly, Listed, o, shows, strs, version};
    use super::*;
    use crate::indexer::Cache;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn fifo() -> RealFifo<ConfigMap> {
        RealFifo::new()
    }

    /// What is queued, oldest first, as text.
    fn queued(q: &RealFifo<ConfigMap>) -> Vec<String> {
        q.items
            .iter()
            .flat_map(|(_, d)| shows(std::slice::from_ref(d)))
            .collect()
    }

    /// Pops one item, marks it done, and returns its deltas as text.
    fn pop_one(q: &mut RealFifo<ConfigMap>) -> Vec<String> {
        let p = q.pop().expect("an item to pop");
        q.done(&p.receipt);
        shows(&p.deltas)
    }

    /// Pops one item, marks it done, and returns its object's version.
    fn pop_version(q: &mut RealFifo<ConfigMap>) -> u64 {
        let p = q.pop().expect("an item to pop");
        q.done(&p.receipt);
        assert_eq!(p.deltas.len(), 1, "one delta per pop (RF-1)");
        version(p.deltas[0].object().expect("an object"))
    }

    /// Pops (and marks done) everything, flattened.
    fn pop_all(q: &mut RealFifo<ConfigMap>) -> Vec<String> {
        let mut all = Vec::new();
        while q.pop().is_some_and(|p| {
            q.done(&p.receipt);
            all.extend(shows(&p.deltas));
            true
        }) {}
        all
    }

    // ---- spec 3.2 scenarios -------------------------------------------------

    /// A paged list is queued whole at its end: its deletes come first (RF-5).
    #[test]
    fn rf_5_a_paged_list_is_queued_whole_at_its_end() {
        let known = Listed(vec![o("gone", 1)]);
        let mut q = RealFifo::new();
        q.list_page(vec![o("stale", 9)], true).unwrap();
        q.list_page(vec![o("a", 2)], true).unwrap();
        q.list_page(vec![o("b", 3)], false).unwrap();
        assert_eq!(q.len(), 0, "nothing queued before the end");
        q.finish_list(vec![o("c", 4)], &known).unwrap();
        let popped: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|p| shows(&p.deltas).join(" "))
            .collect();
        assert_eq!(popped.len(), 4, "{popped:?}");
        assert!(popped[0].starts_with("Deleted"), "{popped:?}");
        assert_eq!(
            &popped[1..],
            ["Replaced a@2", "Replaced b@3", "Replaced c@4"]
        );
    }

    #[test]
    fn rf_t2_replace_with_delete_delta_in() {
        let k = Listed(vec![o("foo", 1)]);
        let mut q = fifo();
        q.delete(o("foo", 1), &k).unwrap();
        q.replace(vec![o("foo", 2)], &k).unwrap();
        assert_eq!(queued(&q), ["Deleted foo@1", "Replaced foo@2"]);
    }

    /// RF-T3: each row with no known objects (`()`) and with an empty known
    /// set; everything is popped and flattened.
    fn rf_t3_case(
        ops: impl Fn(&mut RealFifo<ConfigMap>, &dyn KnownObjects<ConfigMap>),
        expected: &[&str],
    ) {
        let empty = Listed(vec![]);
        let knowns: [&dyn KnownObjects<ConfigMap>; 2] = [&(), &empty];
        for known in knowns {
            let mut q = fifo();
            ops(&mut q, known);
            assert_eq!(pop_all(&mut q), strs(expected));
            assert!(q.is_empty() && q.queued.is_empty());
        }
    }

    #[test]
    fn rf_t3a_replace_makes_deletions_for_objects_only_in_queue() {
        rf_t3_case(
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Deleted DFSU(foo, foo@2)"],
        );
    }

    #[test]
    fn rf_t3c_no_tombstone_after_a_queued_delete() {
        rf_t3_case(
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.delete(o("foo", 2), k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Deleted foo@2"],
        );
    }

    #[test]
    fn rf_t3d_every_replace_is_kept() {
        rf_t3_case(
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![o("foo", 2)], k).unwrap();
                q.replace(vec![o("foo", 2)], k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &[
                "Added foo@2",
                "Replaced foo@2",
                "Replaced foo@2",
                "Deleted DFSU(foo, foo@2)",
            ],
        );
    }

    #[test]
    fn rf_t3e_a_second_empty_replace_adds_nothing() {
        rf_t3_case(
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![], k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Deleted DFSU(foo, foo@2)"],
        );
    }

    #[test]
    fn rf_t3f_tombstone_carries_newest_queued_object() {
        rf_t3_case(
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.delete(o("foo", 2), k).unwrap();
                q.add(o("foo", 3), k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &[
                "Added foo@2",
                "Deleted foo@2",
                "Added foo@3",
                "Deleted DFSU(foo, foo@3)",
            ],
        );
    }

    /// RF-T3's "Bookmark without atomic" row: bookmarks are never queued
    /// here, and two empty relists of an empty queue queue nothing.
    #[test]
    fn rf_t3_empty_replaces_of_an_empty_queue_queue_nothing() {
        rf_t3_case(
            |q, k| {
                q.replace(vec![], k).unwrap();
                q.replace(vec![], k).unwrap();
                assert!(q.has_synced());
            },
            &[],
        );
    }

    #[test]
    fn rf_t4_add_update_keeps_every_event() {
        let mut q = fifo();
        q.add(o("foo", 10), &()).unwrap();
        q.update(o("foo", 12), &()).unwrap();
        q.delete(o("foo", 15), &()).unwrap();
        assert_eq!(q.len(), 3);
        assert_eq!(q.queued_keys(), 1);
        assert_eq!(
            [
                pop_version(&mut q),
                pop_version(&mut q),
                pop_version(&mut q)
            ],
            [10, 12, 15]
        );
        assert!(q.pop().is_none());
    }

    /// RF-T5, without the transformer (kinformer's queues never transform):
    /// what is queued around two relists, in arrival order.
    #[test]
    fn rf_t5_relist_tombstones_between_events() {
        let mut q = fifo();
        q.add(o("foo", 10), &()).unwrap();
        q.add(o("bar", 11), &()).unwrap();
        q.update(o("foo", 12), &()).unwrap();
        q.delete(o("foo", 15), &()).unwrap();
        q.replace(vec![], &()).unwrap();
        q.add(o("bar", 16), &()).unwrap();
        q.replace(vec![], &()).unwrap();
        assert_eq!(
            queued(&q),
            [
                "Added foo@10",
                "Added bar@11",
                "Updated foo@12",
                "Deleted foo@15",
                "Deleted DFSU(bar, bar@11)",
                "Added bar@16",
                "Deleted DFSU(bar, bar@16)",
            ]
        );
    }

    #[test]
    fn rf_t6_enqueueing_no_lister_keeps_unknown_deletes() {
        let mut q = fifo();
        q.add(o("foo", 10), &()).unwrap();
        q.update(o("bar", 15), &()).unwrap();
        q.add(o("qux", 17), &()).unwrap();
        q.delete(o("qux", 18), &()).unwrap();
        q.delete(o("baz", 20), &()).unwrap(); // never seen: queued all the same
        let popped: Vec<u64> = (0..5).map(|_| pop_version(&mut q)).collect();
        assert_eq!(popped, [10, 15, 17, 18, 20]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn rf_t7_enqueueing_with_lister() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);
        let mut q = fifo();
        q.add(o("foo", 10), &k).unwrap();
        q.update(o("bar", 15), &k).unwrap();
        q.delete(o("baz", 20), &k).unwrap();
        let popped: Vec<u64> = (0..3).map(|_| pop_version(&mut q)).collect();
        assert_eq!(popped, [10, 15, 20]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn rf_t8_add_replace() {
        let mut q = fifo();
        q.add(o("foo", 10), &()).unwrap();
        q.replace(vec![o("foo", 15)], &()).unwrap();
        assert_eq!([pop_version(&mut q), pop_version(&mut q)], [10, 15]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn rf_t9_resync_non_existing() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = fifo();
        q.delete(o("foo", 10), &k).unwrap();
        q.resync(&k);
        assert_eq!(queued(&q), ["Deleted foo@10"]);
    }

    #[test]
    fn rf_t10_resync() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = fifo();
        q.resync(&k);
        assert_eq!(queued(&q), ["Sync foo@5"]);
    }

    #[test]
    fn rf_t11_delete_existing_non_propagated() {
        let k = Listed(vec![]);
        let mut q = fifo();
        q.add(o("foo", 5), &k).unwrap();
        q.delete(o("foo", 6), &k).unwrap();
        assert_eq!(queued(&q), ["Added foo@5", "Deleted foo@6"]);
    }

    #[test]
    fn rf_t13_deletes_come_before_the_replacements() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);
        let mut q = fifo();
        q.delete(o("baz", 10), &k).unwrap();
        q.replace(vec![o("foo", 6)], &k).unwrap();
        assert_eq!(
            pop_all(&mut q),
            [
                "Deleted baz@10",
                "Deleted DFSU(bar, bar@6)",
                "Replaced foo@6"
            ]
        );
    }

    #[test]
    fn rf_t14_update_resync_race() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = fifo();
        q.update(o("foo", 6), &k).unwrap();
        q.resync(&k);
        assert_eq!(pop_all(&mut q), ["Updated foo@6"]);
    }

    #[test]
    fn rf_t15_has_synced_correct_on_deletion() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);
        let mut q = fifo();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        for expected in [
            "Deleted DFSU(bar, bar@6)",
            "Deleted DFSU(baz, baz@7)",
            "Replaced foo@5",
        ] {
            assert!(!q.has_synced());
            let p = q.pop().unwrap();
            assert!(p.is_in_initial_list);
            assert_eq!(shows(&p.deltas), [expected]);
            q.done(&p.receipt);
        }
        assert!(q.has_synced());
    }

    #[test]
    fn rf_t16_detect_line_jumpers_every_event_in_arrival_order() {
        let mut q = fifo();
        q.add(o("foo", 10), &()).unwrap();
        q.add(o("bar", 1), &()).unwrap();
        q.add(o("foo", 11), &()).unwrap();
        q.add(o("foo", 13), &()).unwrap();
        q.add(o("zab", 30), &()).unwrap();
        assert_eq!(pop_version(&mut q), 10);
        q.add(o("foo", 14), &()).unwrap();
        let rest: Vec<u64> = (0..5).map(|_| pop_version(&mut q)).collect();
        assert_eq!(rest, [1, 11, 13, 30, 14]);
        assert!(q.pop().is_none());
    }

    /// RF-T17 (as DF-T18): keys are typed; a popped item carries its key,
    /// also for a tombstone whose object could not be fetched.
    #[test]
    fn rf_t17_key_of() {
        let mut q = fifo();
        q.add(o("C", 1), &()).unwrap();
        assert_eq!(q.pop().unwrap().key.as_str(), "C");
        let mut q = fifo();
        q.replace(vec![], &KeyOnly("D")).unwrap();
        let p = q.pop().unwrap();
        assert_eq!(p.key.as_str(), "D");
        assert_eq!(shows(&p.deltas), ["Deleted DFSU(D, nil)"]);
        assert_eq!(p.receipt.key().as_str(), "D");
    }

    #[test]
    fn rf_t18_has_synced() {
        assert!(!fifo().has_synced());
        let mut q = fifo();
        q.add(o("a", 1), &()).unwrap();
        assert!(q.has_synced());
        let mut q = fifo();
        q.replace(vec![], &()).unwrap();
        assert!(q.has_synced());
        let mut q = fifo();
        q.replace(vec![o("a", 1), o("b", 2)], &()).unwrap();
        assert!(!q.has_synced());
        pop_one(&mut q);
        assert!(!q.has_synced());
        pop_one(&mut q);
        assert!(q.has_synced());
        // The same key twice: each event counts, so two pops.
        let mut q = fifo();
        q.replace(vec![o("a", 1), o("a", 2)], &()).unwrap();
        assert_eq!(pop_one(&mut q), ["Replaced a@1"]);
        assert!(!q.has_synced());
        assert_eq!(pop_one(&mut q), ["Replaced a@2"]);
        assert!(q.has_synced());
    }

    /// RF-T19 is about `Close` waking blocked pops; ours never block (see
    /// DF-T20), so: an empty queue answers at once, and later items come out.
    #[test]
    fn rf_t19_pop_on_empty_returns_at_once() {
        let mut q = fifo();
        for _ in 0..10 {
            assert!(q.pop().is_none());
        }
        assert!(q.pop_batch(10).is_empty());
        q.add(o("foo", 1), &()).unwrap();
        assert_eq!(pop_one(&mut q), ["Added foo@1"]);
    }

    /// RF-T20: the batches of `replace(initial)` then `updates`, with known
    /// objects = the initial items, popped `size` at a most; also checks that
    /// exactly the initial items are reported as initial.
    fn rf_t20_batches(initial: &[u64], updates: &[u64], size: usize) -> Vec<Vec<String>> {
        let obj = |i: u64| o(&format!("o{i}"), i);
        let k = Listed(initial.iter().map(|&i| obj(i)).collect());
        let mut q = fifo();
        q.replace(initial.iter().map(|&i| obj(i)).collect(), &k)
            .unwrap();
        for &i in updates {
            q.update(obj(i), &k).unwrap();
        }
        let (mut batches, mut initial_seen) = (Vec::new(), 0);
        loop {
            let batch = q.pop_batch(size);
            if batch.is_empty() {
                break;
            }
            let mut text = Vec::new();
            for p in &batch {
                initial_seen += usize::from(p.is_in_initial_list);
                assert_eq!(
                    p.is_in_initial_list,
                    matches!(p.deltas[0], Delta::Replaced(_))
                );
                text.extend(shows(&p.deltas));
                q.done(&p.receipt);
            }
            batches.push(text);
        }
        assert_eq!(initial_seen, initial.len());
        assert!(q.has_synced());
        batches
    }

    #[test]
    fn rf_t20_a_batch_never_holds_a_key_twice_nor_crosses_the_initial_list() {
        let unlimited = usize::MAX;
        let b = |v: &[&[&str]]| v.iter().map(|b| strs(b)).collect::<Vec<_>>();
        // (a) one batch of three
        assert_eq!(
            rf_t20_batches(&[1, 2, 3], &[], unlimited),
            b(&[&["Replaced o1@1", "Replaced o2@2", "Replaced o3@3"]])
        );
        // (b)
        assert_eq!(
            rf_t20_batches(&[1, 2], &[3, 4], 2),
            b(&[
                &["Replaced o1@1", "Replaced o2@2"],
                &["Updated o3@3", "Updated o4@4"]
            ])
        );
        // (c) a key already in the batch closes it
        assert_eq!(
            rf_t20_batches(&[1], &[1, 1], unlimited),
            b(&[&["Replaced o1@1"], &["Updated o1@1"], &["Updated o1@1"]])
        );
        // (d)
        assert_eq!(
            rf_t20_batches(&[1, 2], &[2, 3], unlimited),
            b(&[
                &["Replaced o1@1", "Replaced o2@2"],
                &["Updated o2@2", "Updated o3@3"]
            ])
        );
        // (e)
        assert_eq!(
            rf_t20_batches(&[1, 2, 3], &[2], unlimited),
            b(&[
                &["Replaced o1@1", "Replaced o2@2", "Replaced o3@3"],
                &["Updated o2@2"]
            ])
        );
        // (f)
        assert_eq!(
            rf_t20_batches(&[1, 2, 3], &[], 2),
            b(&[&["Replaced o1@1", "Replaced o2@2"], &["Replaced o3@3"]])
        );
        // (g) no initial items
        assert_eq!(
            rf_t20_batches(&[], &[1, 2, 3], 2),
            b(&[&["Updated o1@1", "Updated o2@2"], &["Updated o3@3"]])
        );
        // (h) never across the end of the initial list
        assert_eq!(
            rf_t20_batches(&[1, 2, 3], &[4], 2),
            b(&[
                &["Replaced o1@1", "Replaced o2@2"],
                &["Replaced o3@3"],
                &["Updated o4@4"]
            ])
        );
    }

    /// RF-T21 is about key errors inside a batch. Keys are computed when an
    /// event is queued here, so an object without a usable key is refused
    /// then, changes nothing, and never reaches a batch.
    #[test]
    fn rf_t21_keyless_objects_never_reach_a_batch() {
        let nameless = Arc::new(ConfigMap::default());
        let mut q = fifo();
        assert_eq!(q.add(nameless.clone(), &()), Err(KeyError::MissingName));
        assert_eq!(q.delete(nameless.clone(), &()), Err(KeyError::MissingName));
        assert!(!q.has_synced(), "a failed mutation does not populate");
        q.add(o("s1", 1), &()).unwrap();
        q.add(o("s2", 2), &()).unwrap();
        assert_eq!(
            q.replace(vec![o("s3", 3), nameless], &()),
            Err(KeyError::MissingName)
        );
        let batch = q.pop_batch(10);
        let text: Vec<String> = batch.iter().flat_map(|p| shows(&p.deltas)).collect();
        assert_eq!(text, ["Added s1@1", "Added s2@2"], "replace is atomic");
    }

    // ---- what kinformer adds: the in-flight overlay, memory ----------------

    #[test]
    fn overlay_add_in_flight_then_replace_empty_makes_tombstone() {
        let cache = Cache::<ConfigMap>::new();
        let mut q = fifo();
        q.add(o("foo", 1), &cache).unwrap();
        let _p = q.pop().unwrap(); // popped, not applied: the cache is still empty
        q.replace(vec![], &cache).unwrap();
        assert_eq!(pop_all(&mut q), ["Deleted DFSU(foo, foo@1)"]);
    }

    #[test]
    fn overlay_delete_in_flight_is_not_known() {
        let mut cache = Cache::<ConfigMap>::new();
        cache.upsert("foo".into(), o("foo", 1));
        let mut q = fifo();
        q.delete(o("foo", 2), &cache).unwrap();
        let p = q.pop().unwrap(); // the cache still holds foo
        // No tombstone for an object whose delete is being applied, and no
        // resync of it.
        q.replace(vec![], &cache).unwrap();
        q.resync(&cache);
        assert!(q.is_empty());
        cache.remove(&p.key);
        q.done(&p.receipt);
        q.replace(vec![], &cache).unwrap();
        assert!(q.is_empty());
    }

    #[test]
    fn overlay_update_in_flight_resync_skips_key() {
        let mut cache = Cache::<ConfigMap>::new();
        cache.upsert("foo".into(), o("foo", 5));
        let mut q = fifo();
        q.update(o("foo", 6), &cache).unwrap();
        let p = q.pop().unwrap();
        q.resync(&cache);
        assert!(q.is_empty(), "a Sync of foo@5 would go back in time");
        cache.upsert("foo".into(), o("foo", 6));
        q.done(&p.receipt);
        q.resync(&cache);
        assert_eq!(pop_all(&mut q), ["Sync foo@6"]);
    }

    /// Synced only once the last initial item is done, not when popped.
    #[test]
    fn synced_latched_after_done_not_pop() {
        let mut q = fifo();
        q.replace(vec![o("a", 1), o("b", 2)], &()).unwrap();
        let batch = q.pop_batch(10);
        assert_eq!(batch.len(), 2);
        assert!(!q.has_synced());
        q.done(&batch[1].receipt);
        q.done(&batch[1].receipt); // twice: ignored
        assert!(!q.has_synced(), "a is still being processed");
        q.done(&batch[0].receipt);
        assert!(q.has_synced());
        q.replace(vec![o("c", 3)], &()).unwrap();
        assert!(q.has_synced(), "latched");
        assert!(!q.pop().unwrap().is_in_initial_list);
    }

    #[test]
    fn an_idle_queue_releases_what_a_burst_left_behind() {
        let mut q = fifo();
        q.replace((0..10_000).map(|i| o(&format!("o{i}"), 1)).collect(), &())
            .unwrap();
        let batch = q.pop_batch(10_000);
        assert_eq!(batch.len(), 10_000);
        q.release_idle_memory();
        assert!(q.in_flight.key_capacity() >= 10_000, "in flight: kept");
        for p in &batch {
            q.done(&p.receipt);
        }
        q.release_idle_memory();
        assert!(q.items.capacity() <= 4096);
        assert!(q.queued.capacity() <= 4096);
        assert!(q.in_flight.key_capacity() <= 4096);
        assert!(q.in_flight.receipt_capacity() <= 4096);
        q.add(o("late", 2), &()).unwrap();
        assert_eq!(pop_one(&mut q), ["Added late@2"]);
    }
}

/// RF-T1 (`TestRealFIFO_basic`): two producers each add 500 distinct keys
/// with increasing values, interleaved at random with pops of random batch
/// sizes: everything comes out, in exactly the order it went in.
#[cfg(test)]
mod rf_t1 {
    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;

    use super::super::scenario::{o, version};
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn rf_t1_basic_arrival_order(steps in proptest::collection::vec(0u8..6, 0..3000)) {
            const AMOUNT: u64 = 500;
            let mut q: RealFifo<ConfigMap> = RealFifo::new();
            let (mut added, mut popped) = (Vec::new(), Vec::new());
            let mut next = [0u64; 2];
            let mut add = |q: &mut RealFifo<ConfigMap>, producer: usize| {
                if next[producer] < AMOUNT {
                    next[producer] += 1;
                    let name = format!("{}{}", ["a", "b"][producer], next[producer]);
                    q.add(o(&name, next[producer]), &()).unwrap();
                    added.push((name, next[producer]));
                }
            };
            let pop = |q: &mut RealFifo<ConfigMap>, n: usize, popped: &mut Vec<(String, u64)>| {
                for p in q.pop_batch(n) {
                    popped.push((p.key.to_string(), version(p.deltas[0].object().unwrap())));
                    q.done(&p.receipt);
                }
            };
            for step in steps {
                match step {
                    0 | 1 => add(&mut q, 0),
                    2 | 3 => add(&mut q, 1),
                    n => pop(&mut q, usize::from(n), &mut popped),
                }
            }
            for _ in 0..AMOUNT {
                add(&mut q, 0);
                add(&mut q, 1);
            }
            pop(&mut q, usize::MAX, &mut popped);
            prop_assert_eq!(popped.len(), 2 * AMOUNT as usize);
            prop_assert_eq!(&popped, &added);
            prop_assert!(q.is_empty() && q.in_flight() == 0);
        }
    }
}
