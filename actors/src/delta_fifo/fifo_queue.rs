//! The interface the DeltaFIFO actor uses, whichever the ordering: the
//! merging [`DeltaQueue`] or the arrival-order [`RealFifo`].

use std::sync::Arc;

use kube::Resource;

use super::options::FifoOrdering;
use super::queue::{DeltaQueue, DeltaQueueOptions};
use super::real_fifo::RealFifo;
use crate::delta::{KnownObjects, PopReceipt, Popped};
use crate::key::KeyError;

/// A queue of deltas between the Reflector and the Indexer, with the
/// in-flight overlay and the latched HasSynced both orderings keep.
pub trait FifoQueue<K> {
    /// A watch `ADDED` event.
    fn add(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError>;
    /// A watch `MODIFIED` event.
    fn update(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError>;
    /// A watch `DELETED` event, with the server's final state.
    fn delete(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError>;
    /// A relist: the complete state. Atomic: a key error changes nothing.
    fn replace(&mut self, list: Vec<Arc<K>>, known: &dyn KnownObjects<K>) -> Result<(), KeyError>;
    /// One page of a list that [`finish_list`](Self::finish_list) ends;
    /// `first` starts a new list.
    fn list_page(&mut self, page: Vec<Arc<K>>, first: bool) -> Result<(), KeyError>;
    /// The end of a list: its last items, then what vanished.
    fn finish_list(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError>;
    /// A periodic resync of the known objects.
    fn resync(&mut self, known: &dyn KnownObjects<K>);
    /// Up to `max` popped items, never two of one key, never across the
    /// end of the initial population; each stays in flight until `done`.
    fn pop_batch(&mut self, max: usize) -> Vec<Popped<K>>;
    /// The consumer has applied a popped item to the cache.
    fn done(&mut self, receipt: &PopReceipt);
    /// True once the initial population has been popped and processed.
    fn has_synced(&self) -> bool;
    /// Distinct keys with queued deltas.
    fn queued_keys(&self) -> usize;
    /// Queued deltas (what bounds the queue's memory).
    fn pending_deltas(&self) -> usize;
    /// Popped items not yet done.
    fn in_flight(&self) -> usize;
    /// Gives back what a burst left behind, once nothing is queued or out.
    fn release_idle_memory(&mut self);
    /// The in-flight overlay holds nothing (an invariant once all is done).
    #[cfg(test)]
    fn overlay_is_empty(&self) -> bool;
}

/// Objects without a usable key can never be cached: dropped with a log
/// rather than failing the whole list (client-go aborts part-way, DF-9).
pub(super) fn usable<K: Resource>(objects: Vec<Arc<K>>) -> Vec<Arc<K>> {
    // The condition of `ObjectKey::of`, without building the key twice.
    let (usable, unusable): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|o| o.meta().name.as_deref().is_some_and(|n| !n.is_empty()));
    if !unusable.is_empty() {
        tracing::warn!(
            count = unusable.len(),
            "list items without metadata.name: skipped"
        );
    }
    usable
}

impl FifoOrdering {
    /// An empty queue of this ordering.
    pub fn queue<K: Resource + 'static>(self) -> Box<dyn FifoQueue<K>> {
        match self {
            FifoOrdering::Merged => Box::new(DeltaQueue::new(DeltaQueueOptions::default())),
            FifoOrdering::Arrival => Box::new(RealFifo::new()),
        }
    }
}

impl<K: Resource> FifoQueue<K> for DeltaQueue<K> {
    fn add(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        DeltaQueue::add(self, obj, known)
    }
    fn update(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        DeltaQueue::update(self, obj, known)
    }
    fn delete(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        DeltaQueue::delete(self, obj, known)
    }
    fn replace(&mut self, list: Vec<Arc<K>>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        DeltaQueue::replace(self, list, known)
    }
    fn list_page(&mut self, page: Vec<Arc<K>>, first: bool) -> Result<(), KeyError> {
        DeltaQueue::list_page(self, page, first)
    }
    fn finish_list(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError> {
        DeltaQueue::finish_list(self, list, known)
    }
    fn resync(&mut self, known: &dyn KnownObjects<K>) {
        DeltaQueue::resync(self, known)
    }
    fn pop_batch(&mut self, max: usize) -> Vec<Popped<K>> {
        DeltaQueue::pop_batch(self, max)
    }
    fn done(&mut self, receipt: &PopReceipt) {
        DeltaQueue::done(self, receipt)
    }
    fn has_synced(&self) -> bool {
        DeltaQueue::has_synced(self)
    }
    fn queued_keys(&self) -> usize {
        DeltaQueue::len(self)
    }
    fn pending_deltas(&self) -> usize {
        DeltaQueue::pending_deltas(self)
    }
    fn in_flight(&self) -> usize {
        DeltaQueue::in_flight(self)
    }
    fn release_idle_memory(&mut self) {
        DeltaQueue::release_idle_memory(self)
    }
    #[cfg(test)]
    fn overlay_is_empty(&self) -> bool {
        DeltaQueue::overlay_is_empty(self)
    }
}

impl<K: Resource> FifoQueue<K> for RealFifo<K> {
    fn add(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        RealFifo::add(self, obj, known)
    }
    fn update(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        RealFifo::update(self, obj, known)
    }
    fn delete(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        RealFifo::delete(self, obj, known)
    }
    fn replace(&mut self, list: Vec<Arc<K>>, known: &dyn KnownObjects<K>) -> Result<(), KeyError> {
        RealFifo::replace(self, list, known)
    }
    fn list_page(&mut self, page: Vec<Arc<K>>, first: bool) -> Result<(), KeyError> {
        RealFifo::list_page(self, page, first)
    }
    fn finish_list(
        &mut self,
        list: Vec<Arc<K>>,
        known: &dyn KnownObjects<K>,
    ) -> Result<(), KeyError> {
        RealFifo::finish_list(self, list, known)
    }
    fn resync(&mut self, known: &dyn KnownObjects<K>) {
        RealFifo::resync(self, known)
    }
    fn pop_batch(&mut self, max: usize) -> Vec<Popped<K>> {
        RealFifo::pop_batch(self, max)
    }
    fn done(&mut self, receipt: &PopReceipt) {
        RealFifo::done(self, receipt)
    }
    fn has_synced(&self) -> bool {
        RealFifo::has_synced(self)
    }
    fn queued_keys(&self) -> usize {
        RealFifo::queued_keys(self)
    }
    fn pending_deltas(&self) -> usize {
        RealFifo::len(self)
    }
    fn in_flight(&self) -> usize {
        RealFifo::in_flight(self)
    }
    fn release_idle_memory(&mut self) {
        RealFifo::release_idle_memory(self)
    }
    #[cfg(test)]
    fn overlay_is_empty(&self) -> bool {
        RealFifo::overlay_is_empty(self)
    }
}

/// Property tests of both orderings: the queue and the cache together
/// against a model server.
#[cfg(test)]
mod properties {
    use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;

    use super::super::scenario::{o, version};
    use super::*;
    use crate::delta::Delta;
    use crate::indexer::Cache;
    use crate::key::ObjectKey;

    /// One step of the model world.
    #[derive(Debug, Clone)]
    enum Op {
        /// Create the object (absent), or update / delete it (present).
        Write { key: u8, delete: bool },
        /// The watch breaks: later server writes are missed.
        Disconnect,
        /// The watch is back after a relist: `replace` with the server state.
        Reconnect,
        /// A periodic resync against the cache.
        Resync,
        /// The consumer pops a batch (it is applied later).
        Pop(usize),
        /// The consumer applies its oldest popped items and reports them done.
        Apply(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u8..5, any::<bool>()).prop_map(|(key, delete)| Op::Write { key, delete }),
            1 => Just(Op::Disconnect),
            1 => Just(Op::Reconnect),
            1 => Just(Op::Resync),
            3 => (1usize..5).prop_map(Op::Pop),
            3 => (1usize..5).prop_map(Op::Apply),
        ]
    }

    /// The model: a server, the queue, the cache, and an observer that
    /// rebuilds the state from the popped deltas alone.
    struct World {
        server: BTreeMap<String, u64>,
        rv: u64,
        connected: bool,
        queue: Box<dyn FifoQueue<ConfigMap>>,
        cache: Cache<ConfigMap>,
        popped: VecDeque<Popped<ConfigMap>>,
        observer: BTreeMap<String, u64>,
        newest_seen: HashMap<String, u64>,
    }

    impl World {
        fn new(ordering: FifoOrdering, initial: &[bool]) -> Self {
            let mut w = World {
                server: BTreeMap::new(),
                rv: 0,
                connected: true,
                queue: ordering.queue(),
                cache: Cache::new(),
                popped: VecDeque::new(),
                observer: BTreeMap::new(),
                newest_seen: HashMap::new(),
            };
            for (i, &present) in initial.iter().enumerate() {
                if present {
                    w.rv += 1;
                    w.server.insert(format!("k{i}"), w.rv);
                }
            }
            w.relist();
            w
        }

        fn relist(&mut self) {
            let list = self.server.iter().map(|(k, &v)| o(k, v)).collect();
            self.queue.replace(list, &self.cache).unwrap();
        }

        fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
            match *op {
                Op::Write { key, delete } => {
                    let name = format!("k{key}");
                    self.rv += 1;
                    let obj = o(&name, self.rv);
                    match self.server.get(&name) {
                        None => {
                            self.server.insert(name, self.rv);
                            if self.connected {
                                self.queue.add(obj, &self.cache).unwrap();
                            }
                        }
                        Some(_) if delete => {
                            self.server.remove(&name);
                            if self.connected {
                                self.queue.delete(obj, &self.cache).unwrap();
                            }
                        }
                        Some(_) => {
                            self.server.insert(name, self.rv);
                            if self.connected {
                                self.queue.update(obj, &self.cache).unwrap();
                            }
                        }
                    }
                }
                Op::Disconnect => self.connected = false,
                Op::Reconnect => {
                    if !self.connected {
                        self.connected = true;
                        self.relist();
                    }
                }
                Op::Resync => self.queue.resync(&self.cache),
                Op::Pop(n) => {
                    let batch = self.queue.pop_batch(n);
                    let keys: HashSet<&ObjectKey> = batch.iter().map(|p| &p.key).collect();
                    prop_assert_eq!(keys.len(), batch.len(), "a key twice in one batch");
                    for p in batch {
                        self.observe(&p)?;
                        self.popped.push_back(p);
                    }
                }
                Op::Apply(n) => {
                    for _ in 0..n {
                        let Some(p) = self.popped.pop_front() else {
                            break;
                        };
                        for d in &p.deltas {
                            match d {
                                Delta::Deleted(_) => {
                                    self.cache.remove(&p.key);
                                }
                                other => {
                                    let obj =
                                        other.object().expect("non-delete deltas carry an object");
                                    self.cache.upsert(p.key.clone(), obj.clone());
                                }
                            }
                        }
                        self.queue.done(&p.receipt);
                    }
                }
            }
            // HasSynced only once every initial item has been applied.
            if self.queue.has_synced() {
                prop_assert!(self.popped.iter().all(|p| !p.is_in_initial_list));
            }
            Ok(())
        }

        /// The observer rebuilds the state from the deltas, which must never
        /// go back in time nor delete what the observer does not have.
        fn observe(&mut self, p: &Popped<ConfigMap>) -> Result<(), TestCaseError> {
            prop_assert!(!p.deltas.is_empty());
            let key = p.key.to_string();
            for d in &p.deltas {
                if let Some(obj) = d.object() {
                    let v = version(obj);
                    let newest = self.newest_seen.entry(key.clone()).or_insert(0);
                    prop_assert!(v >= *newest, "{key}: {d:?} goes back from {newest}");
                    *newest = v;
                }
                match d {
                    Delta::Deleted(_) => {
                        prop_assert!(
                            self.observer.remove(&key).is_some(),
                            "{key}: delete of an unknown object"
                        );
                    }
                    other => {
                        let obj = other.object().expect("non-delete deltas carry an object");
                        self.observer.insert(key.clone(), version(obj));
                    }
                }
            }
            Ok(())
        }

        fn drain(&mut self) -> Result<(), TestCaseError> {
            self.step(&Op::Reconnect)?;
            while self.queue.pending_deltas() > 0 || !self.popped.is_empty() {
                self.step(&Op::Pop(3))?;
                self.step(&Op::Apply(2))?;
            }
            Ok(())
        }

        fn cache_state(&self) -> BTreeMap<String, u64> {
            self.cache
                .list()
                .iter()
                .map(|o| (o.metadata.name.clone().unwrap_or_default(), version(o)))
                .collect()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        #[test]
        fn queue_into_cache_converges_to_server_state(
            arrival in any::<bool>(),
            initial in proptest::collection::vec(any::<bool>(), 5),
            ops in proptest::collection::vec(op(), 0..120),
        ) {
            let ordering = if arrival { FifoOrdering::Arrival } else { FifoOrdering::Merged };
            let mut w = World::new(ordering, &initial);
            for op in &ops {
                w.step(op)?;
            }
            w.drain()?;
            prop_assert_eq!(&w.cache_state(), &w.server);
            prop_assert_eq!(&w.observer, &w.server);
            prop_assert_eq!(w.queue.pending_deltas(), 0);
            prop_assert_eq!(w.queue.in_flight(), 0);
            prop_assert!(w.queue.overlay_is_empty());
            prop_assert!(w.queue.has_synced());
        }
    }
}
