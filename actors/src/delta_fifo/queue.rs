//! The classic client-go DeltaFIFO as a pure state machine: per-key lists of
//! deltas between the Reflector (producer) and the Indexer (consumer).
//!
//! # Rules implemented (spec section 1.3)
//!
//! * **DF-1** [`Delta`] / [`DeltaType`](crate::delta::DeltaType); deltas per key oldest first, never
//!   empty; a key is in the FIFO order if and only if it has deltas.
//! * **DF-2** [`DeltaQueueOptions`]: known objects are always passed in (the
//!   cache; `()` means "none"), `emit_replaced` defaults to **true**.
//! * **DF-3** a key that is already queued keeps its position: no line jumping.
//! * **DF-4** only the last two deltas are compared, and only two `Deleted`
//!   merge: a real final-state delete wins over a tombstone, a newer tombstone
//!   replaces an older one. `Sync, Sync` or `Added, Deleted, Added` stay as is.
//! * **DF-5** / **DF-6** `add`, `update`, `delete`; a delete of a key that is
//!   neither queued nor known is dropped.
//! * **DF-7** [`DeltaQueue::pop`] / [`DeltaQueue::pop_batch`] take the head key
//!   with all its deltas; `is_in_initial_list` is client-go's `!hasSynced`
//!   evaluated at pop time (the pop counts toward the initial population).
//! * **DF-9** `replace`: list items in list order, then tombstones for queued
//!   keys missing from the list (carrying the newest queued state; tombstones
//!   never nest), then tombstones for known keys missing from the list and not
//!   queued. **DF-10** `Replaced` or `Sync` per `emit_replaced`.
//! * **DF-11** `resync` queues `Sync` for known keys that have no pending
//!   deltas (the "UpdateResyncRace").
//! * **DF-12** tombstones come only from `replace`.
//! * **DF-15** [`DeltaQueue::has_synced`], latched.
//!
//! # Deliberate deviations
//!
//! * **Asynchronous consumer and the in-flight overlay** (see
//!   `in_flight.rs`). client-go runs the consumer's
//!   `process` under the FIFO lock (DF-7, DF-17), so the indexer always
//!   reflects every popped item before the next producer call. Our consumer
//!   (the Indexer actor) applies popped items *after* `pop` returns, so
//!   between [`DeltaQueue::pop`] and [`DeltaQueue::done`] every known-objects
//!   lookup (the DF-6 delete filter, DF-9 step 3, DF-11) sees *cache ∪ in
//!   flight*. Resync also skips keys in flight, exactly as it skips keys with
//!   pending deltas.
//! * **HasSynced is latched after processing** (the DF-15 note, spec section
//!   5): only once the last item of the initial population has been popped
//!   *and* reported [`done`](DeltaQueue::done).
//! * **No `ErrRequeue` / `AddIfNotPresent`** (DF-8): re-queueing lets an
//!   informer go back in time.
//! * **No transformer** (DF-3 step 2, DF-16): kinformer transforms an object
//!   once, when it is decoded, before its `Arc` exists, so the queue never
//!   transforms. The DF-T5 assertions about tombstones not being transformed
//!   twice therefore have nothing to check here.
//! * **Atomic `replace`**: every key is computed before anything changes, so a
//!   key error leaves the queue untouched (client-go may abort part-way).
//! * **Deterministic deletion order**: tombstones from DF-9 step 2 follow the
//!   queue order and those from step 3 are sorted by key (client-go uses Go
//!   map order, which is unspecified).
//! * **Non-blocking, no `Close`** (DF-7, DF-14): `pop` returns `None` on an
//!   empty queue; waiting and shutdown belong to the owning actor.
//! * **Typed keys** (KEY-4, DF-13): there is no `KeyOf(any)`. An object's key
//!   is [`ObjectKey::of`], a tombstone carries its key, and a popped item
//!   carries the key of its deltas ([`Popped::key`]).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use kube::Resource;

use super::in_flight::{InFlight, KEEP_WHEN_IDLE, KeyHasher};
use super::population::InitialPopulation;
use crate::delta::{Delta, KnownObjects, PopReceipt, Popped};
use crate::key::{DeletedObject, KeyError, ObjectKey};

/// Options of a [`DeltaQueue`] (DF-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaQueueOptions {
    /// Queue relist items as `Replaced` (true, the default) rather than `Sync`
    /// (DF-10), so consumers can tell a relist from a periodic resync.
    pub emit_replaced: bool,
}

impl Default for DeltaQueueOptions {
    fn default() -> Self {
        DeltaQueueOptions {
            emit_replaced: true,
        }
    }
}

/// The DeltaFIFO (spec 1.3): per-key deltas in FIFO order of keys, with
/// known objects = the cache. See the module documentation for the rules and
/// the deviations from client-go.
#[derive(Debug)]
pub struct DeltaQueue<K> {
    emit_replaced: bool,
    /// Pending deltas per key; never an empty list (DF-1).
    items: HashMap<ObjectKey, Vec<Delta<K>>, KeyHasher>,
    /// FIFO order of the keys of `items`, without duplicates (DF-1).
    queue: VecDeque<ObjectKey>,
    /// Popped, not yet done.
    in_flight: InFlight<K>,
    /// The initial population and the latched HasSynced (DF-15).
    population: InitialPopulation,
    /// Deltas in `items`, exactly (the DeltaFIFO's back-pressure measure).
    pending_deltas: usize,
    /// The keys of the list whose pages are arriving ([`Self::list_page`]),
    /// until its end ([`Self::finish_list`]); `None` when no list is open.
    listing: Option<HashSet<ObjectKey, KeyHasher>>,
}

impl<K: Resource> DeltaQueue<K> {
    /// An empty queue; not synced until the first mutation (DF-15).
    pub fn new(options: DeltaQueueOptions) -> Self {
        DeltaQueue {
            emit_replaced: options.emit_replaced,
            items: HashMap::default(),
            queue: VecDeque::new(),
            in_flight: InFlight::new(),
            population: InitialPopulation::default(),
            pending_deltas: 0,
            listing: None,
        }
    }

    /// Queues `Added` (DF-5). A key error changes nothing.
    pub fn add(&mut self, obj: Arc<K>, _known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        let key = ObjectKey::of(&*obj)?;
        self.population.mutated();
        self.queue_delta(key, Delta::Added(obj));
        Ok(())
    }

    /// Queues `Updated` (DF-5). A key error changes nothing.
    pub fn update(&mut self, obj: Arc<K>, _known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        let key = ObjectKey::of(&*obj)?;
        self.population.mutated();
        self.queue_delta(key, Delta::Updated(obj));
        Ok(())
    }

    /// Queues `Deleted` with the final state `obj` (DF-6), unless the key is
    /// neither queued nor known (cache ∪ in-flight): such a delete was already
    /// reported, by a relist tombstone or an earlier delete.
    pub fn delete(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        let key = ObjectKey::of(&*obj)?;
        self.population.mutated();
        if !self.items.contains_key(&key) && !self.in_flight.overlay(known).knows(&key) {
            tracing::trace!(%key, "delete of an unknown object dropped");
            return Ok(());
        }
        self.queue_delta(key, Delta::Deleted(DeletedObject::Final(obj)));
        Ok(())
    }

    /// A relist (DF-9): queues every item of `list` as `Replaced` (or `Sync`),
    /// then a tombstone for every queued or known key missing from the list.
    /// The first `replace` before any other mutation defines the initial
    /// population (DF-15). Atomic: a key error changes nothing. A list
    /// whose pages came through [`list_page`](Self::list_page) is void.
    pub fn replace(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError> {
        self.listing = None;
        self.finish_list(list, known)
    }

    /// One page of a relist, queued at once (DF-9 step 1 for its items), so
    /// the consumer takes a long list while it is read and nothing holds it
    /// whole; [`finish_list`](Self::finish_list) ends it. `first` starts a
    /// new list: the keys of an earlier list that never finished are
    /// forgotten (their queued states stay: they were the server's).
    /// Items of a first list join the initial population, which is not
    /// complete until the list ends. Atomic per page: a key error changes
    /// nothing (the pages before it stay queued).
    pub fn list_page(&mut self, page: Vec<Arc<K>>, first: bool) -> Result<(), KeyError> {
        let keyed = keyed(page)?;
        if first || self.listing.is_none() {
            self.listing = Some(HashSet::default());
        }
        let queued_before = self.queue.len();
        let listing = self.listing.get_or_insert_default();
        for (key, _) in &keyed {
            listing.insert(key.clone());
        }
        for (key, obj) in keyed {
            let delta = self.listed_delta(obj);
            self.queue_delta(key, delta);
        }
        self.population
            .listed_page(self.queue.len() - queued_before);
        Ok(())
    }

    /// The end of a relist (DF-9): `list`'s items, after the pages of this
    /// list queued by [`list_page`](Self::list_page) if any, then the
    /// tombstones for every queued or known key missing from the whole
    /// list. Atomic: a key error changes nothing.
    pub fn finish_list(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError> {
        let keyed = keyed(list)?;
        let queued_before = self.queue.len();

        // Step 1: list items, in list order.
        let mut listed = self.listing.take().unwrap_or_default();
        listed.reserve(keyed.len());
        for (key, obj) in keyed {
            listed.insert(key.clone());
            let delta = self.listed_delta(obj);
            self.queue_delta(key, delta);
        }

        // Step 2: queued keys missing from the list, with the newest queued
        // state (a tombstone is unwrapped, so tombstones never nest).
        let missing_queued: Vec<(ObjectKey, Option<Arc<K>>)> = self
            .queue
            .iter()
            .filter(|key| !listed.contains(*key))
            .map(|key| {
                let last_known = self
                    .items
                    .get(key)
                    .and_then(|d| d.last())
                    .and_then(|d| d.object().cloned());
                (key.clone(), last_known)
            })
            .collect();

        // Step 3: known keys (cache ∪ in-flight) missing from the list and
        // without pending deltas.
        let missing_known = self
            .in_flight
            .overlay(known)
            .vanished(&listed, |key| self.items.contains_key(key));

        for (key, last_known) in missing_queued.into_iter().chain(missing_known) {
            self.queue_tombstone(key, last_known);
        }

        // Step 4: the first mutation defines the initial population: the
        // keys this list queued (with its pages, if it had any).
        self.population
            .replaced(self.queue.len().saturating_sub(queued_before));
        Ok(())
    }

    /// A listed item's delta (DF-10).
    fn listed_delta(&self, obj: Arc<K>) -> Delta<K> {
        if self.emit_replaced {
            Delta::Replaced(obj)
        } else {
            Delta::Sync(obj)
        }
    }

    /// A periodic resync (DF-11): queues `Sync` with the cached object for
    /// every known key that has neither pending deltas nor popped-not-done
    /// items, so a resync never carries an older state than one on its way.
    pub fn resync(&mut self, known: &dyn KnownObjects<K>) {
        let due = self
            .in_flight
            .resyncable(known, |key| self.items.contains_key(key));
        for (key, obj) in due {
            self.queue_delta(key, Delta::Sync(obj));
        }
    }

    /// Takes the head key with all its deltas (DF-7); `None` when empty. The
    /// item stays in flight until [`done`](Self::done).
    pub fn pop(&mut self) -> Option<Popped<K>> {
        while let Some(key) = self.queue.pop_front() {
            let Some(deltas) = self.items.remove(&key) else {
                tracing::error!(%key, "queued key without deltas; skipped");
                continue;
            };
            self.pending_deltas -= deltas.len();
            let Some(newest) = deltas.last() else {
                tracing::error!(%key, "queued key with an empty delta list; skipped");
                continue;
            };
            let newest = newest.resulting_state();
            let is_in_initial_list = self.population.take();
            let receipt = self
                .in_flight
                .begin(key.clone(), newest, is_in_initial_list);
            return Some(Popped {
                key,
                deltas,
                is_in_initial_list,
                receipt,
            });
        }
        None
    }

    /// Pops up to `max` keys. A batch never crosses the end of the initial
    /// population (as RealFIFO's batches, RF-T20 h), so a consumer can treat
    /// a batch as wholly initial or wholly not.
    pub fn pop_batch(&mut self, max: usize) -> Vec<Popped<K>> {
        let mut batch: Vec<Popped<K>> = Vec::new();
        while batch.len() < max {
            let crosses_initial_end =
                batch.first().is_some_and(|p| p.is_in_initial_list) && self.population.all_taken();
            if crosses_initial_end {
                break;
            }
            match self.pop() {
                Some(p) => batch.push(p),
                None => break,
            }
        }
        batch
    }

    /// The consumer has applied a popped item to the cache: it leaves the
    /// in-flight overlay, and the last initial item latches HasSynced. A
    /// receipt given twice (or unknown) is ignored with a warning.
    pub fn done(&mut self, receipt: &PopReceipt) {
        self.in_flight.done(receipt, &mut self.population);
    }

    /// Gives back what a burst (the initial list, a large relist) left
    /// behind once nothing is queued or in flight: hash maps and the key
    /// order otherwise keep their largest size for the informer's lifetime
    /// (after a 100k-object list, ~60 bytes per cached object). A no-op
    /// while anything is queued, or when the containers are small.
    pub fn release_idle_memory(&mut self) {
        if !self.queue.is_empty() || !self.in_flight.is_empty() {
            return;
        }
        if self.items.capacity() > KEEP_WHEN_IDLE {
            self.items = HashMap::default();
        }
        if self.queue.capacity() > KEEP_WHEN_IDLE {
            self.queue = VecDeque::new();
        }
        self.in_flight.release_idle_memory();
    }

    /// True once the initial population has been popped and processed
    /// (DF-15, latched). A first `add`/`update`/`delete`, or a first
    /// `replace` that queues nothing, syncs at once.
    pub fn has_synced(&self) -> bool {
        self.population.has_synced()
    }

    /// Number of queued keys.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no key is queued (items may still be in flight).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Deltas waiting, over all keys (exact; what bounds the queue's memory).
    pub fn pending_deltas(&self) -> usize {
        self.pending_deltas
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

    fn queue_tombstone(&mut self, key: ObjectKey, last_known: Option<Arc<K>>) {
        self.queue_delta(key.clone(), Delta::tombstone(key, last_known));
    }

    /// DF-3 steps 3–4: append, deduplicate, and queue a new key at the tail.
    fn queue_delta(&mut self, key: ObjectKey, delta: Delta<K>) {
        match self.items.entry(key) {
            Entry::Occupied(mut e) => {
                let deltas = e.get_mut();
                let before = deltas.len();
                deltas.push(delta);
                dedup_deltas(deltas);
                self.pending_deltas += deltas.len() - before;
            }
            Entry::Vacant(e) => {
                self.queue.push_back(e.key().clone());
                e.insert(vec![delta]);
                self.pending_deltas += 1;
            }
        }
    }
}

/// Every object with its key; the first key error fails them all.
pub(super) fn keyed<K: Resource>(list: Vec<Arc<K>>) -> Result<Vec<(ObjectKey, Arc<K>)>, KeyError> {
    list.into_iter()
        .map(|obj| ObjectKey::of(&*obj).map(|key| (key, obj)))
        .collect()
}

/// DF-4: merge the last two deltas only if both are `Deleted`; keep the older
/// one unless it is a tombstone.
fn dedup_deltas<K>(deltas: &mut Vec<Delta<K>>) {
    let keep_newer = match deltas.as_slice() {
        [.., Delta::Deleted(older), Delta::Deleted(_)] => older.is_final_state_unknown(),
        _ => return,
    };
    if let Some(newer) = deltas.pop()
        && keep_newer
        && let Some(last) = deltas.last_mut()
    {
        *last = newer;
    }
}

#[cfg(test)]
mod tests {
    use super::super::scenario::{KeyOnly, Listed, o, show, shows, strs, version};
    use super::*;
    use crate::indexer::Cache;
    use crate::key::Tombstone;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Pops one item, marks it done, and returns its deltas as text.
    fn pop_one(q: &mut DeltaQueue<ConfigMap>) -> Vec<String> {
        let p = q.pop().expect("an item to pop");
        q.done(&p.receipt);
        shows(&p.deltas)
    }

    /// Pops one item, marks it done, and returns the newest object's version.
    fn pop_newest(q: &mut DeltaQueue<ConfigMap>) -> u64 {
        let p = q.pop().expect("an item to pop");
        q.done(&p.receipt);
        version(p.deltas.last().and_then(|d| d.object()).expect("an object"))
    }

    fn pending(q: &DeltaQueue<ConfigMap>, key: &str) -> Vec<String> {
        q.items.get(key).map(|d| shows(d)).unwrap_or_default()
    }

    fn queue() -> DeltaQueue<ConfigMap> {
        DeltaQueue::new(DeltaQueueOptions::default())
    }

    /// After a burst is popped and done, an idle queue gives its memory
    /// back; while anything is queued or in flight it keeps it.
    #[test]
    fn an_idle_queue_releases_what_a_burst_left_behind() {
        let mut q = queue();
        let objects: Vec<_> = (0..10_000).map(|i| o(&format!("o{i}"), 1)).collect();
        q.replace(objects, &()).unwrap();
        let batch = q.pop_batch(10_000);
        assert_eq!(batch.len(), 10_000);
        q.release_idle_memory();
        assert!(q.in_flight.key_capacity() >= 10_000, "in flight: kept");
        for p in &batch {
            q.done(&p.receipt);
        }
        q.release_idle_memory();
        assert!(q.items.capacity() <= 4096, "{}", q.items.capacity());
        assert!(q.queue.capacity() <= 4096);
        assert!(q.in_flight.key_capacity() <= 4096);
        assert!(q.in_flight.receipt_capacity() <= 4096);
        assert!(q.has_synced());
        // Still a working queue.
        q.add(o("late", 2), &()).unwrap();
        assert_eq!(pop_one(&mut q), vec!["Added late@2"]);
    }

    fn queue_emitting_sync() -> DeltaQueue<ConfigMap> {
        DeltaQueue::new(DeltaQueueOptions {
            emit_replaced: false,
        })
    }

    // ---- spec 3.1 scenarios -------------------------------------------------

    #[test]
    fn df_t2_replace_with_delete_delta_in() {
        for (mut q, replaced) in [(queue_emitting_sync(), "Sync"), (queue(), "Replaced")] {
            let k = Listed(vec![o("foo", 1)]);
            q.delete(o("foo", 1), &k).unwrap();
            q.replace(vec![o("foo", 2)], &k).unwrap();
            assert_eq!(
                pop_one(&mut q),
                vec!["Deleted foo@1".to_owned(), format!("{replaced} foo@2")]
            );
            assert!(q.is_empty());
        }
    }

    /// DF-T3: each row with no known objects (`()`) and with an empty known set.
    fn df_t3_case(
        emit_replaced: bool,
        ops: impl Fn(&mut DeltaQueue<ConfigMap>, &dyn KnownObjects<ConfigMap>),
        expected: &[&str],
    ) {
        let empty = Listed(vec![]);
        let knowns: [&dyn KnownObjects<ConfigMap>; 2] = [&(), &empty];
        for known in knowns {
            let mut q = DeltaQueue::new(DeltaQueueOptions { emit_replaced });
            ops(&mut q, known);
            assert_eq!(pop_one(&mut q), strs(expected));
            assert!(q.items.is_empty() && q.is_empty());
            assert!(q.pop().is_none());
        }
    }

    #[test]
    fn df_t3a_replace_makes_deletions_for_objects_only_in_queue() {
        df_t3_case(
            true,
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Deleted DFSU(foo, foo@2)"],
        );
    }

    #[test]
    fn df_t3b_replaced_then_deleted_by_empty_replace() {
        df_t3_case(
            true,
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![o("foo", 2)], k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Replaced foo@2", "Deleted DFSU(foo, foo@2)"],
        );
    }

    #[test]
    fn df_t3c_tombstone_deduplicated_into_real_delete() {
        df_t3_case(
            true,
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.delete(o("foo", 2), k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Deleted foo@2"],
        );
    }

    #[test]
    fn df_t3d_sync_deltas_not_deduplicated() {
        df_t3_case(
            false,
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![o("foo", 2)], k).unwrap();
                q.replace(vec![o("foo", 2)], k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &[
                "Added foo@2",
                "Sync foo@2",
                "Sync foo@2",
                "Deleted DFSU(foo, foo@2)",
            ],
        );
    }

    #[test]
    fn df_t3e_second_tombstone_replaces_first_no_nesting() {
        df_t3_case(
            true,
            |q, k| {
                q.add(o("foo", 2), k).unwrap();
                q.replace(vec![], k).unwrap();
                q.replace(vec![], k).unwrap();
            },
            &["Added foo@2", "Deleted DFSU(foo, foo@2)"],
        );
    }

    #[test]
    fn df_t3f_tombstone_carries_newest_queued_object() {
        df_t3_case(
            true,
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

    #[test]
    fn df_t4_add_update() {
        let mut q = queue();
        q.add(o("foo", 10), &()).unwrap();
        q.update(o("foo", 12), &()).unwrap();
        q.delete(o("foo", 15), &()).unwrap();
        assert_eq!(
            q.queue.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
            ["foo"]
        );
        let newest: Vec<String> = q
            .items
            .values()
            .filter_map(|d| d.last())
            .map(show)
            .collect();
        assert_eq!(newest, ["Deleted foo@15"]);
        assert_eq!(pop_newest(&mut q), 15);
        assert!(q.pop().is_none(), "no second item");
        assert!(!q.items.contains_key("foo"));
    }

    #[test]
    fn df_t6_enqueueing_no_lister() {
        let mut q = queue();
        q.add(o("foo", 10), &()).unwrap();
        q.update(o("bar", 15), &()).unwrap();
        q.add(o("qux", 17), &()).unwrap();
        q.delete(o("qux", 18), &()).unwrap();
        q.delete(o("baz", 20), &()).unwrap(); // never seen: dropped
        assert_eq!(
            [pop_newest(&mut q), pop_newest(&mut q), pop_newest(&mut q)],
            [10, 15, 18]
        );
        assert!(q.pop().is_none());
        assert!(q.items.is_empty());
    }

    #[test]
    fn df_t7_enqueueing_with_lister() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);
        let mut q = queue();
        q.add(o("foo", 10), &k).unwrap();
        q.update(o("bar", 15), &k).unwrap();
        q.delete(o("baz", 20), &k).unwrap(); // known: queued
        assert_eq!(
            [pop_newest(&mut q), pop_newest(&mut q), pop_newest(&mut q)],
            [10, 15, 20]
        );
        assert!(q.pop().is_none());
        assert!(q.items.is_empty());
    }

    #[test]
    fn df_t8_add_replace() {
        let mut q = queue();
        q.add(o("foo", 10), &()).unwrap();
        q.replace(vec![o("foo", 15)], &()).unwrap();
        let p = q.pop().unwrap();
        q.done(&p.receipt);
        assert_eq!(shows(&p.deltas), ["Added foo@10", "Replaced foo@15"]);
        assert!(q.pop().is_none());
        assert!(!q.items.contains_key("foo"));
    }

    #[test]
    fn df_t9_resync_non_existing() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = queue();
        q.delete(o("foo", 10), &k).unwrap();
        q.resync(&k);
        assert_eq!(pending(&q, "foo"), ["Deleted foo@10"]);
    }

    #[test]
    fn df_t10_resync() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = queue();
        q.resync(&k);
        assert_eq!(pending(&q, "foo"), ["Sync foo@5"]);
    }

    #[test]
    fn df_t11_delete_existing_non_propagated() {
        let k = Listed(vec![]);
        let mut q = queue();
        q.add(o("foo", 5), &k).unwrap();
        q.delete(o("foo", 6), &k).unwrap();
        assert_eq!(pending(&q, "foo"), ["Added foo@5", "Deleted foo@6"]);
    }

    /// DF-T12 (`TestDeltaFIFO_ReplaceMakesDeletions`; the spec table only
    /// refers to it from DF-T13). Emits `Sync`, as upstream.
    #[test]
    fn df_t12_replace_makes_deletions() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);

        // i) a pre-existing delete
        let mut q = queue_emitting_sync();
        q.delete(o("baz", 10), &k).unwrap();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        assert_eq!(pop_one(&mut q), ["Deleted baz@10"]);
        assert_eq!(pop_one(&mut q), ["Sync foo@5"]);
        assert_eq!(pop_one(&mut q), ["Deleted DFSU(bar, bar@6)"]);
        assert!(q.pop().is_none());

        // ii) a pre-existing add: the tombstone carries the queued state
        let mut q = queue_emitting_sync();
        q.add(o("baz", 10), &k).unwrap();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        assert_eq!(
            pop_one(&mut q),
            ["Added baz@10", "Deleted DFSU(baz, baz@10)"]
        );
        assert_eq!(pop_one(&mut q), ["Sync foo@5"]);
        assert_eq!(pop_one(&mut q), ["Deleted DFSU(bar, bar@6)"]);
        assert!(q.pop().is_none());

        // iii) deleted and re-created in the queue, then deleted by a relist
        let mut q = queue_emitting_sync();
        q.delete(o("bar", 6), &k).unwrap();
        q.add(o("bar", 100), &k).unwrap();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        assert_eq!(
            pop_one(&mut q),
            [
                "Deleted bar@6",
                "Added bar@100",
                "Deleted DFSU(bar, bar@100)"
            ]
        );
        assert_eq!(pop_one(&mut q), ["Sync foo@5"]);
        assert_eq!(pop_one(&mut q), ["Deleted DFSU(baz, baz@7)"]);
        assert!(q.pop().is_none());

        // iv) relisted first, so the delete uses the latest version
        let mut q = queue_emitting_sync();
        q.replace(vec![o("bar", 100), o("foo", 5)], &k).unwrap();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        assert_eq!(
            pop_one(&mut q),
            ["Sync bar@100", "Deleted DFSU(bar, bar@100)"]
        );
        assert_eq!(pop_one(&mut q), ["Sync foo@5", "Sync foo@5"]);
        assert_eq!(pop_one(&mut q), ["Deleted DFSU(baz, baz@7)"]);
        assert!(q.pop().is_none());

        // v) without known objects
        let mut q = queue_emitting_sync();
        q.add(o("baz", 10), &()).unwrap();
        q.replace(vec![o("foo", 5)], &()).unwrap();
        assert_eq!(
            pop_one(&mut q),
            ["Added baz@10", "Deleted DFSU(baz, baz@10)"]
        );
        assert_eq!(pop_one(&mut q), ["Sync foo@5"]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn df_t13_replace_makes_deletions_replaced() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);
        let mut q = queue();
        q.delete(o("baz", 10), &k).unwrap();
        q.replace(vec![o("foo", 6)], &k).unwrap();
        assert_eq!(pop_one(&mut q), ["Deleted baz@10"]);
        assert_eq!(pop_one(&mut q), ["Replaced foo@6"]);
        assert_eq!(pop_one(&mut q), ["Deleted DFSU(bar, bar@6)"]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn df_t14_replace_delta_type() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = queue();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        assert_eq!(pop_one(&mut q), ["Replaced foo@5"]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn df_t15_update_resync_race() {
        let k = Listed(vec![o("foo", 5)]);
        let mut q = queue();
        q.update(o("foo", 6), &k).unwrap();
        q.resync(&k);
        assert_eq!(pop_one(&mut q), ["Updated foo@6"]);
        assert!(q.pop().is_none());
    }

    /// DF-T16 (`TestDeltaFIFO_HasSyncedCorrectOnDeletion`, absent from the
    /// spec table): tombstones of the initial relist count toward the sync.
    #[test]
    fn df_t16_has_synced_correct_on_deletion() {
        let k = Listed(vec![o("foo", 5), o("bar", 6), o("baz", 7)]);
        let mut q = queue();
        q.replace(vec![o("foo", 5)], &k).unwrap();
        for expected in [
            "Replaced foo@5",
            "Deleted DFSU(bar, bar@6)",
            "Deleted DFSU(baz, baz@7)",
        ] {
            assert!(!q.has_synced());
            let p = q.pop().unwrap();
            assert!(p.is_in_initial_list);
            assert_eq!(shows(&p.deltas), [expected]);
            q.done(&p.receipt);
        }
        assert!(q.has_synced());
    }

    /// DF-T17 (`TestDeltaFIFO_detectLineJumpers`, absent from the spec
    /// table): a queued key keeps its position.
    #[test]
    fn df_t17_detect_line_jumpers() {
        let mut q = queue();
        q.add(o("foo", 10), &()).unwrap();
        q.add(o("bar", 1), &()).unwrap();
        q.add(o("foo", 11), &()).unwrap();
        q.add(o("foo", 13), &()).unwrap();
        q.add(o("zab", 30), &()).unwrap();
        assert_eq!(pop_newest(&mut q), 13);
        q.add(o("foo", 14), &()).unwrap(); // must not jump back in line
        assert_eq!(
            [pop_newest(&mut q), pop_newest(&mut q), pop_newest(&mut q)],
            [1, 30, 14]
        );
    }

    /// DF-T18: `KeyOf` of an object, a tombstone, and deltas of each. Keys are
    /// typed here: an object's key is `ObjectKey::of`, a tombstone carries its
    /// key, and a popped item carries the key of its deltas.
    #[test]
    fn df_t18_key_of() {
        assert_eq!(ObjectKey::of(&*o("A", 1)).unwrap().as_str(), "A");
        let t: Tombstone<ConfigMap> = Tombstone {
            key: "B".into(),
            last_known: None,
        };
        assert_eq!(t.key.as_str(), "B");

        let mut q = queue();
        q.add(o("C", 1), &()).unwrap();
        assert_eq!(q.pop().unwrap().key.as_str(), "C");

        // Deltas{DFSU(D, nil)}: a known key whose object vanished.
        let mut q = queue();
        q.replace(vec![], &KeyOnly("D")).unwrap();
        let p = q.pop().unwrap();
        assert_eq!(p.key.as_str(), "D");
        assert_eq!(shows(&p.deltas), ["Deleted DFSU(D, nil)"]);
        assert_eq!(p.receipt.key().as_str(), "D");
    }

    #[test]
    fn df_t19_has_synced() {
        // none → false
        assert!(!queue().has_synced());
        // Add a → true
        let mut q = queue();
        q.add(o("a", 1), &()).unwrap();
        assert!(q.has_synced());
        // Replace([]) → true
        let mut q = queue();
        q.replace(vec![], &()).unwrap();
        assert!(q.has_synced());
        // Replace([a, b]) → false; +1 Pop → false; +2 Pops → true
        let mut q = queue();
        q.replace(vec![o("a", 1), o("b", 2)], &()).unwrap();
        assert!(!q.has_synced());
        assert_eq!(pop_one(&mut q), ["Replaced a@1"]);
        assert!(!q.has_synced());
        assert_eq!(pop_one(&mut q), ["Replaced b@2"]);
        assert!(q.has_synced());
        // Replace([a1, a2]) (same key twice) + 1 Pop → true
        let mut q = queue();
        q.replace(vec![o("a", 1), o("a", 2)], &()).unwrap();
        assert_eq!(pop_one(&mut q), ["Replaced a@1", "Replaced a@2"]);
        assert!(q.has_synced());
    }

    /// DF-15 note / spec section 5: synced only once the last initial item is
    /// processed (`done`), not when it is popped; and it stays latched.
    #[test]
    fn df_15_synced_latched_after_done_not_pop() {
        let mut q = queue();
        q.replace(vec![o("a", 1), o("b", 2)], &()).unwrap();
        let a = q.pop().unwrap();
        let b = q.pop().unwrap();
        assert!(a.is_in_initial_list && b.is_in_initial_list);
        assert!(!q.has_synced(), "nothing processed yet");
        q.done(&b.receipt);
        assert!(!q.has_synced(), "a is still being processed");
        // A watch event after the initial list is not part of it, even while
        // the initial list is still being processed.
        q.add(o("c", 3), &()).unwrap();
        let c = q.pop().unwrap();
        assert!(!c.is_in_initial_list && !c.receipt.counts_toward_initial());
        q.done(&c.receipt);
        assert!(!q.has_synced());
        q.done(&a.receipt);
        assert!(q.has_synced());
        // Latched: a later relist does not unsync.
        q.replace(vec![o("d", 4)], &()).unwrap();
        assert!(q.has_synced());
        assert!(!q.pop().unwrap().is_in_initial_list);
    }

    /// DF-9 for a list read page by page: each page is queued at once (the
    /// consumer may take it before the list ends), and what vanished is
    /// deleted at its end, against the keys of all its pages.
    #[test]
    fn df_9_a_paged_list_is_queued_page_by_page_and_deletes_at_its_end() {
        let known = Listed(vec![o("a", 1), o("b", 2), o("gone", 3)]);
        let mut q = queue();
        q.list_page(vec![o("a", 5), o("b", 6)], true).unwrap();
        let a = q
            .pop()
            .expect("the first page is queued before the list ends");
        assert_eq!(shows(&a.deltas), ["Replaced a@5"]);
        q.list_page(vec![o("c", 7)], false).unwrap();
        assert!(pending(&q, "gone").is_empty(), "no delete before the end");
        q.finish_list(vec![o("d", 8)], &known).unwrap();
        q.done(&a.receipt);
        assert_eq!(pending(&q, "b"), ["Replaced b@6"]);
        assert_eq!(pending(&q, "c"), ["Replaced c@7"]);
        assert_eq!(pending(&q, "d"), ["Replaced d@8"]);
        assert_eq!(pending(&q, "gone").len(), 1);
        assert!(matches!(q.items["gone"][0], Delta::Deleted(_)));
        assert!(pending(&q, "a").is_empty(), "listed in the first page");
    }

    /// DF-15 for a paged initial list: popping and processing every item of
    /// the pages so far does not sync the queue; the list's end does.
    #[test]
    fn df_15_a_paged_initial_list_is_synced_only_at_its_end() {
        let mut q = queue();
        q.list_page(vec![o("a", 1), o("b", 2)], true).unwrap();
        for _ in 0..2 {
            let p = q.pop().unwrap();
            assert!(p.is_in_initial_list);
            q.done(&p.receipt);
        }
        assert!(!q.has_synced(), "the list goes on");
        q.finish_list(vec![o("c", 3)], &()).unwrap();
        assert!(!q.has_synced());
        let c = q.pop().unwrap();
        assert!(c.is_in_initial_list);
        q.done(&c.receipt);
        assert!(q.has_synced());
    }

    /// A list that failed after some pages: the next list's first page (or
    /// a whole `replace`) forgets its keys, so what vanished since is deleted.
    #[test]
    fn df_9_the_pages_of_a_list_that_never_ended_are_void() {
        let known = Listed(vec![o("x", 1)]);
        let mut q = queue();
        q.list_page(vec![o("x", 2), o("y", 3)], true).unwrap();
        q.list_page(vec![o("z", 4)], true).unwrap();
        q.finish_list(Vec::new(), &known).unwrap();
        for key in ["x", "y"] {
            let deltas = &q.items[key];
            assert!(
                matches!(deltas.last(), Some(Delta::Deleted(_))),
                "{key}: {:?}",
                shows(deltas)
            );
        }
        assert_eq!(pending(&q, "z"), ["Replaced z@4"]);

        let mut q = queue();
        q.list_page(vec![o("x", 2)], true).unwrap();
        q.replace(vec![o("z", 4)], &known).unwrap();
        assert!(matches!(q.items["x"].last(), Some(Delta::Deleted(_))));
    }

    /// DF-T20 is about `Close` waking blocked `Pop` calls. Our `pop` never
    /// blocks (the owning actor waits and shuts down), so the closest
    /// meaningful check is that it returns at once on an empty queue, and
    /// that items queued after that are returned.
    #[test]
    fn df_t20_pop_on_empty_returns_at_once() {
        let mut q = queue();
        for _ in 0..10 {
            assert!(q.pop().is_none());
        }
        assert!(q.pop_batch(10).is_empty());
        q.add(o("foo", 1), &()).unwrap();
        assert_eq!(pop_one(&mut q), ["Added foo@1"]);
    }

    // ---- DF-4 -------------------------------------------------------------

    #[test]
    fn df_4_dedup_rules() {
        fn final_(v: u64) -> Delta<ConfigMap> {
            Delta::Deleted(DeletedObject::Final(o("foo", v)))
        }
        fn dfsu(v: u64) -> Delta<ConfigMap> {
            Delta::Deleted(DeletedObject::Unknown(Tombstone {
                key: "foo".into(),
                last_known: Some(o("foo", v)),
            }))
        }
        let dedup = |mut deltas: Vec<Delta<ConfigMap>>| {
            dedup_deltas(&mut deltas);
            shows(&deltas)
        };
        // a real delete is preferred over a tombstone, whichever came first
        assert_eq!(dedup(vec![final_(1), dfsu(2)]), ["Deleted foo@1"]);
        assert_eq!(dedup(vec![dfsu(1), final_(2)]), ["Deleted foo@2"]);
        // a newer tombstone replaces an older one
        assert_eq!(dedup(vec![dfsu(1), dfsu(2)]), ["Deleted DFSU(foo, foo@2)"]);
        // two real deletes: the older is kept
        assert_eq!(dedup(vec![final_(1), final_(2)]), ["Deleted foo@1"]);
        // only the last two are compared; nothing else merges
        assert_eq!(
            dedup(vec![final_(1), final_(2), Delta::Added(o("foo", 3))]).len(),
            3
        );
        assert_eq!(
            dedup(vec![Delta::Sync(o("foo", 1)), Delta::Sync(o("foo", 1))]).len(),
            2
        );
        assert_eq!(
            dedup(vec![
                Delta::Updated(o("foo", 1)),
                Delta::Updated(o("foo", 2))
            ])
            .len(),
            2
        );

        // through the public API: final + final keeps the older one
        let mut q = queue();
        q.add(o("foo", 1), &()).unwrap();
        q.delete(o("foo", 2), &()).unwrap();
        q.delete(o("foo", 3), &()).unwrap();
        assert_eq!(pending(&q, "foo"), ["Added foo@1", "Deleted foo@2"]);
        // tombstone then a real delete: the real delete wins
        let mut q = queue();
        q.add(o("foo", 1), &()).unwrap();
        q.replace(vec![], &()).unwrap();
        q.delete(o("foo", 2), &()).unwrap();
        assert_eq!(pending(&q, "foo"), ["Added foo@1", "Deleted foo@2"]);
    }

    #[test]
    fn added_deleted_added_is_kept() {
        let mut q = queue();
        q.add(o("foo", 1), &()).unwrap();
        q.delete(o("foo", 2), &()).unwrap();
        q.add(o("foo", 3), &()).unwrap();
        assert_eq!(
            pop_one(&mut q),
            ["Added foo@1", "Deleted foo@2", "Added foo@3"]
        );
    }

    #[test]
    fn key_error_changes_nothing() {
        let nameless = Arc::new(ConfigMap::default());
        let mut q = queue();
        assert_eq!(q.add(nameless.clone(), &()), Err(KeyError::MissingName));
        assert_eq!(q.delete(nameless.clone(), &()), Err(KeyError::MissingName));
        assert!(!q.has_synced(), "a failed mutation does not populate");
        assert_eq!(
            q.replace(vec![o("a", 1), nameless], &()),
            Err(KeyError::MissingName)
        );
        assert!(q.is_empty(), "replace is atomic");
    }

    #[test]
    fn objects_are_shared_not_copied() {
        let obj = o("foo", 1);
        let mut q = queue();
        q.add(obj.clone(), &()).unwrap();
        q.replace(vec![], &()).unwrap();
        let p = q.pop().unwrap();
        assert!(Arc::ptr_eq(p.deltas[0].object().unwrap(), &obj));
        assert!(
            Arc::ptr_eq(p.deltas[1].object().unwrap(), &obj),
            "the tombstone shares it too"
        );
    }

    #[test]
    fn pop_batch_stops_at_end_of_initial_list() {
        let mut q = queue();
        q.replace(vec![o("a", 1), o("b", 2), o("c", 3)], &())
            .unwrap();
        q.add(o("d", 4), &()).unwrap();
        q.add(o("e", 5), &()).unwrap();
        let b1 = q.pop_batch(2);
        assert_eq!(
            b1.iter().map(|p| p.key.to_string()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let b2 = q.pop_batch(10);
        assert_eq!(
            b2.iter()
                .map(|p| (p.key.to_string(), p.is_in_initial_list))
                .collect::<Vec<_>>(),
            [("c".to_owned(), true)]
        );
        let b3 = q.pop_batch(10);
        assert_eq!(
            b3.iter()
                .map(|p| (p.key.to_string(), p.is_in_initial_list))
                .collect::<Vec<_>>(),
            [("d".to_owned(), false), ("e".to_owned(), false)]
        );
        assert_eq!(q.in_flight(), 5);
        for p in b1.iter().chain(&b2).chain(&b3) {
            q.done(&p.receipt);
        }
        assert_eq!(q.in_flight(), 0);
        assert!(q.has_synced());
        assert!(q.pop_batch(0).is_empty());
    }

    #[test]
    fn done_twice_is_ignored() {
        let mut q = queue();
        q.replace(vec![o("a", 1), o("b", 2)], &()).unwrap();
        let a = q.pop().unwrap();
        q.done(&a.receipt);
        q.done(&a.receipt);
        assert!(
            !q.has_synced(),
            "a second done must not count b as processed"
        );
        assert_eq!(q.in_flight(), 0);
        let b = q.pop().unwrap();
        assert_eq!(q.in_flight(), 1);
        q.done(&b.receipt);
        assert!(q.has_synced());
    }

    // ---- the in-flight overlay (popped, not yet applied to the cache) -----

    /// Applies a popped item to the cache as the Indexer actor does.
    fn apply(cache: &mut Cache<ConfigMap>, p: &Popped<ConfigMap>) {
        for d in &p.deltas {
            match d {
                Delta::Deleted(_) => {
                    cache.remove(&p.key);
                }
                other => {
                    if let Some(obj) = other.object() {
                        cache.upsert(p.key.clone(), obj.clone());
                    }
                }
            }
        }
    }

    #[test]
    fn overlay_add_in_flight_then_replace_empty_makes_tombstone() {
        let cache = Cache::<ConfigMap>::new();
        let mut q = queue();
        q.add(o("foo", 1), &cache).unwrap();
        let _p = q.pop().unwrap(); // popped, not applied: the cache is still empty
        q.replace(vec![], &cache).unwrap();
        assert_eq!(pop_one(&mut q), ["Deleted DFSU(foo, foo@1)"]);
    }

    #[test]
    fn overlay_add_in_flight_then_delete_is_not_dropped() {
        let cache = Cache::<ConfigMap>::new();
        let mut q = queue();
        q.add(o("foo", 1), &cache).unwrap();
        let _p = q.pop().unwrap();
        q.delete(o("foo", 2), &cache).unwrap();
        assert_eq!(pop_one(&mut q), ["Deleted foo@2"]);
    }

    #[test]
    fn overlay_delete_in_flight_is_not_known() {
        let mut cache = Cache::<ConfigMap>::new();
        cache.upsert("foo".into(), o("foo", 1));
        let mut q = queue();
        q.delete(o("foo", 2), &cache).unwrap();
        let p = q.pop().unwrap(); // the cache still holds foo
        // No second tombstone for an object whose delete is being applied,
        // and a repeated delete is dropped.
        q.replace(vec![], &cache).unwrap();
        q.delete(o("foo", 2), &cache).unwrap();
        q.resync(&cache);
        assert!(q.is_empty());
        apply(&mut cache, &p);
        q.done(&p.receipt);
        q.replace(vec![], &cache).unwrap();
        assert!(q.is_empty());
    }

    #[test]
    fn overlay_update_in_flight_resync_skips_key() {
        let mut cache = Cache::<ConfigMap>::new();
        cache.upsert("foo".into(), o("foo", 5));
        let mut q = queue();
        q.update(o("foo", 6), &cache).unwrap();
        let p = q.pop().unwrap();
        q.resync(&cache);
        assert!(q.is_empty(), "a Sync of foo@5 would go back in time");
        apply(&mut cache, &p);
        q.done(&p.receipt);
        q.resync(&cache);
        assert_eq!(pop_one(&mut q), ["Sync foo@6"]);
    }

    #[test]
    fn overlay_newest_in_flight_state_wins() {
        let mut cache = Cache::<ConfigMap>::new();
        let mut q = queue();
        q.add(o("foo", 1), &cache).unwrap();
        let p1 = q.pop().unwrap();
        q.delete(o("foo", 2), &cache).unwrap();
        let p2 = q.pop().unwrap();
        assert_eq!(q.in_flight(), 2);
        // Applying the add first leaves the cache with foo, but the delete is
        // still in flight: foo is not known.
        apply(&mut cache, &p1);
        q.done(&p1.receipt);
        q.replace(vec![], &cache).unwrap();
        assert!(q.is_empty());
        apply(&mut cache, &p2);
        q.done(&p2.receipt);
        assert_eq!(q.in_flight(), 0);
        assert!(q.in_flight.is_empty());
        assert!(cache.is_empty());
    }

    #[test]
    fn overlay_replace_keeps_in_flight_object_for_listed_key() {
        // An in-flight key that is in the new list gets no tombstone.
        let cache = Cache::<ConfigMap>::new();
        let mut q = queue();
        q.add(o("foo", 1), &cache).unwrap();
        let _p = q.pop().unwrap();
        q.replace(vec![o("foo", 2)], &cache).unwrap();
        assert_eq!(pop_one(&mut q), ["Replaced foo@2"]);
        assert!(q.pop().is_none());
    }
}

/// DF-T1 as a property test.
#[cfg(test)]
mod properties {
    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;

    use super::super::scenario::{o, version};
    use super::*;

    /// DF-T1 (`TestDeltaFIFO_basic`): two producers each add 500 distinct
    /// keys with increasing values, interleaved at random with pops of random
    /// batch sizes. Each producer's values come out strictly increasing and
    /// nothing is lost.
    mod df_t1 {
        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn df_t1_basic_per_producer_order(steps in proptest::collection::vec(0u8..6, 0..3000)) {
                const AMOUNT: u64 = 500;
                let mut q: DeltaQueue<ConfigMap> = DeltaQueue::new(DeltaQueueOptions::default());
                let (mut next_a, mut next_b) = (0u64, 0u64);
                let mut popped: Vec<(String, u64)> = Vec::new();
                let pop = |q: &mut DeltaQueue<ConfigMap>, n: usize, popped: &mut Vec<(String, u64)>| {
                    for p in q.pop_batch(n) {
                        let obj = p.deltas.last().and_then(|d| d.object()).expect("an object");
                        popped.push((p.key.as_str()[..1].to_owned(), version(obj)));
                        q.done(&p.receipt);
                    }
                };
                for step in steps {
                    match step {
                        0 | 1 if next_a < AMOUNT => {
                            next_a += 1;
                            q.add(o(&format!("a{next_a}"), next_a), &()).unwrap();
                        }
                        2 | 3 if next_b < AMOUNT => {
                            next_b += 1;
                            q.add(o(&format!("b{next_b}"), next_b), &()).unwrap();
                        }
                        n => pop(&mut q, usize::from(n), &mut popped),
                    }
                }
                while next_a < AMOUNT || next_b < AMOUNT {
                    if next_a < AMOUNT {
                        next_a += 1;
                        q.add(o(&format!("a{next_a}"), next_a), &()).unwrap();
                    }
                    if next_b < AMOUNT {
                        next_b += 1;
                        q.add(o(&format!("b{next_b}"), next_b), &()).unwrap();
                    }
                }
                pop(&mut q, usize::MAX, &mut popped);
                prop_assert_eq!(popped.len(), 2 * AMOUNT as usize);
                for producer in ["a", "b"] {
                    let values: Vec<u64> = popped.iter().filter(|(p, _)| p == producer).map(|&(_, v)| v).collect();
                    prop_assert_eq!(values, (1..=AMOUNT).collect::<Vec<_>>());
                }
                prop_assert!(q.is_empty() && q.in_flight() == 0);
            }
        }
    }
}
