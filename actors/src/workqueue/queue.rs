//! The base workqueue (spec WQ-1..WQ-7) with priority lanes (PQ-2, PQ-3).
//!
//! Non-blocking: [`Queue::get`] answers [`Get::Empty`] where client-go's
//! `Get` blocks, and waking waiters, the drain's wait and its deadline belong
//! to the owning actor. Time is an argument of every call that records a
//! metric.
//!
//! Deliberate deviations from client-go:
//! * `Touch` (WQ-2's priority hook) is the priority lane: an add of a key
//!   already waiting to be handed out can promote it (PQ-3).
//! * A drain is complete only when nothing is processing *and* nothing is
//!   ready (PQ-7).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

use super::hasher::Hasher;
use super::metrics::{DURATION_BUCKETS, Histogram, QueueMetrics};
use super::priority::Priority;

/// A key's place in the ready order: higher priority first, then by arrival.
type Slot = (Reverse<Priority>, u64);

/// A key handed out to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket<K> {
    /// The key to work on.
    pub key: K,
    /// The priority it was handed out at.
    pub priority: Priority,
    /// Its consecutive failures so far (RL-1 `NumRequeues`; always 0 below
    /// the rate-limiting layer).
    pub requeues: u32,
}

/// What [`Queue::get`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Get<K> {
    /// A key, now processing until its `done`.
    Item(Ticket<K>),
    /// Nothing ready: client-go's `Get` would block.
    Empty,
    /// Shutting down and nothing left to hand out (WQ-3).
    ShutDown,
}

/// What an add did (WQ-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// The key was not dirty: it is ready now.
    Queued,
    /// The key is being processed: it is handed out again after its `done` (WQ-4).
    Pending,
    /// Already waiting to be handed out (or re-added while processing): nothing changed.
    Deduplicated,
    /// Already ready, at a lower priority: moved to the back of the higher lane (PQ-3).
    Promoted,
    /// Shutting down: ignored.
    Ignored,
}

/// A key waiting to be processed (WQ-1's dirty set).
#[derive(Debug)]
struct Dirty {
    priority: Priority,
    /// Its place in `ready`; `None` while the key is also processing.
    slot: Option<Slot>,
    /// When it became dirty (the queue-duration metric starts there).
    since: Instant,
    /// Its queue-duration sample is recorded: put back (PQ-9) after a
    /// hand-out that recorded it, so the next `get` records none.
    observed: bool,
}

/// A key handed out and not done yet.
#[derive(Debug)]
struct Processing {
    priority: Priority,
    since: Instant,
    /// Where it was in `ready`, and since when dirty: what `put_back` restores.
    slot: Slot,
    queued_since: Instant,
}

/// The base workqueue: dirty set, processing set, priority lanes, shutdown.
#[derive(Debug)]
pub struct Queue<K> {
    name: String,
    /// Ready keys in hand-out order (PQ-2). Invariant (WQ-1): every key here
    /// is in `dirty` with this slot, and not in `processing`.
    ready: BTreeMap<Slot, K>,
    /// Keys to process: the ready ones, and those re-added while processing
    /// (`slot: None`, which are exactly the dirty keys in `processing`).
    dirty: HashMap<K, Dirty, Hasher>,
    /// Keys handed out by `get` and not yet `done`.
    processing: HashMap<K, Processing, Hasher>,
    /// The next arrival number (FIFO order within a lane).
    arrivals: u64,
    shutting_down: bool,
    drain: bool,
    adds: u64,
    queue_duration: Histogram,
    work_duration: Histogram,
}

impl<K: Clone + Eq + Hash> Queue<K> {
    /// An empty queue named `name` (the metrics' `name` label).
    pub fn new(name: impl Into<String>) -> Self {
        Queue {
            name: name.into(),
            ready: BTreeMap::new(),
            dirty: HashMap::default(),
            processing: HashMap::default(),
            arrivals: 0,
            shutting_down: false,
            drain: false,
            adds: 0,
            queue_duration: Histogram::new(DURATION_BUCKETS),
            work_duration: Histogram::new(DURATION_BUCKETS),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn slot(&mut self, priority: Priority) -> Slot {
        self.arrivals += 1;
        (Reverse(priority), self.arrivals)
    }

    /// WQ-2: marks `key` dirty at `priority`. A dirty key is not queued twice;
    /// a key being processed is queued again by its `done`; shutting down,
    /// nothing happens.
    pub fn add(&mut self, key: K, priority: Priority, now: Instant) -> Added {
        if self.shutting_down {
            return Added::Ignored;
        }
        if let Some(dirty) = self.dirty.get(&key) {
            let Some(old) = dirty.slot.filter(|_| priority > dirty.priority) else {
                // Pending while processing: keep the higher priority for its requeue.
                let dirty = self.dirty.get_mut(&key).expect("just found");
                dirty.priority = dirty.priority.max(priority);
                return Added::Deduplicated;
            };
            let slot = self.slot(priority);
            let key = self
                .ready
                .remove(&old)
                .expect("a ready dirty key has its slot");
            self.ready.insert(slot, key.clone());
            let dirty = self.dirty.get_mut(&key).expect("just found");
            dirty.priority = priority;
            dirty.slot = Some(slot);
            return Added::Promoted;
        }
        self.adds += 1;
        if self.processing.contains_key(&key) {
            let dirty = Dirty {
                priority,
                slot: None,
                since: now,
                observed: false,
            };
            self.dirty.insert(key, dirty);
            return Added::Pending;
        }
        let slot = self.slot(priority);
        self.ready.insert(slot, key.clone());
        let dirty = Dirty {
            priority,
            slot: Some(slot),
            since: now,
            observed: false,
        };
        self.dirty.insert(key, dirty);
        Added::Queued
    }

    /// WQ-3: hands out the first ready key (PQ-2), which is processing until
    /// its `done`. After shutdown, ready keys are still handed out.
    pub fn get(&mut self, now: Instant) -> Get<K> {
        let Some((slot, key)) = self.ready.pop_first() else {
            return if self.shutting_down {
                Get::ShutDown
            } else {
                Get::Empty
            };
        };
        let dirty = self.dirty.remove(&key).expect("a ready key is dirty");
        if !dirty.observed {
            self.queue_duration
                .observe(now.saturating_duration_since(dirty.since));
        }
        let processing = Processing {
            priority: dirty.priority,
            since: now,
            slot,
            queued_since: dirty.since,
        };
        self.processing.insert(key.clone(), processing);
        Get::Item(Ticket {
            key,
            priority: dirty.priority,
            requeues: 0,
        })
    }

    /// WQ-4: `key` is no longer processing; if it was re-added meanwhile it
    /// is ready again (also while shutting down). False if it was not
    /// processing.
    pub fn done(&mut self, key: &K, now: Instant) -> bool {
        let Some(processing) = self.processing.remove(key) else {
            return false;
        };
        self.work_duration
            .observe(now.saturating_duration_since(processing.since));
        let Some(priority) = self.dirty.get(key).map(|d| d.priority) else {
            return true;
        };
        let slot = self.slot(priority);
        self.ready.insert(slot, key.clone());
        self.dirty.get_mut(key).expect("just found").slot = Some(slot);
        true
    }

    /// PQ-9: undoes the `get` of `key` whose ticket reached no worker: it is ready
    /// again in the slot it left, first of its lane (a re-add meanwhile
    /// raises its priority, PQ-3). Not an add: not counted, and also while
    /// shutting down, where an add is ignored (the key would be lost; WQ-3
    /// hands out what is queued). No work duration is recorded, and its
    /// next `get` records no second queue duration for the wait the first
    /// recorded (a re-add's wait meanwhile is recorded). False if `key` was
    /// not processing.
    pub fn put_back(&mut self, key: &K) -> bool {
        let Some(processing) = self.processing.remove(key) else {
            return false;
        };
        let readded = self.dirty.get(key).map(|d| (d.priority, d.since));
        let (priority, slot) = match readded {
            Some((higher, _)) if higher > processing.priority => (higher, self.slot(higher)),
            _ => (processing.priority, processing.slot),
        };
        self.ready.insert(slot, key.clone());
        // Re-added while processing: that add's wait is not recorded yet.
        let (since, observed) = match readded {
            Some((_, since)) => (since, false),
            None => (processing.queued_since, true),
        };
        self.dirty.insert(
            key.clone(),
            Dirty {
                priority,
                slot: Some(slot),
                since,
                observed,
            },
        );
        true
    }

    /// WQ-5: keys ready to be handed out (not those processing, even if re-added).
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// True when no key is ready.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// True while `key` is handed out and not done.
    pub fn is_processing(&self, key: &K) -> bool {
        self.processing.contains_key(key)
    }

    /// The priority `key` was handed out at, while it is processing.
    pub fn processing_priority(&self, key: &K) -> Option<Priority> {
        self.processing.get(key).map(|p| p.priority)
    }

    /// True while `key` is ready to be handed out.
    pub fn is_ready(&self, key: &K) -> bool {
        self.dirty.get(key).is_some_and(|d| d.slot.is_some())
    }

    /// True while `key` is processing and was re-added meanwhile.
    pub fn is_pending(&self, key: &K) -> bool {
        self.dirty.get(key).is_some_and(|d| d.slot.is_none())
    }

    /// True while `key` is ready, processing or pending.
    pub fn contains(&self, key: &K) -> bool {
        self.dirty.contains_key(key) || self.processing.contains_key(key)
    }

    /// Takes back the re-add of a processing key (its `done` will not queue
    /// it again) and answers its priority; `None` if it had none.
    pub fn take_pending(&mut self, key: &K) -> Option<Priority> {
        if !self.is_pending(key) {
            return None;
        }
        self.dirty.remove(key).map(|d| d.priority)
    }

    /// The keys processing now.
    pub fn processing_keys(&self) -> impl Iterator<Item = &K> {
        self.processing.keys()
    }

    /// Takes every ready key and every pending re-add, in hand-out order
    /// (ready ones first): nothing is left to hand out.
    pub fn take_dirty(&mut self) -> Vec<K> {
        let mut keys: Vec<K> = std::mem::take(&mut self.ready).into_values().collect();
        keys.extend(
            self.dirty
                .drain()
                .filter(|(_, d)| d.slot.is_none())
                .map(|(k, _)| k),
        );
        keys
    }

    /// WQ-6 `ShutDown`: adds are ignored from now on; what is ready is still
    /// handed out; a drain in progress is released.
    pub fn shut_down(&mut self) {
        self.drain = false;
        self.shutting_down = true;
    }

    /// WQ-6 `ShutDownWithDrain`: as [`shut_down`](Self::shut_down), and the
    /// owner waits until [`is_drained`](Self::is_drained).
    pub fn shut_down_with_drain(&mut self) {
        self.drain = true;
        self.shutting_down = true;
    }

    /// WQ-6 `ShuttingDown`.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// True while a drain waits (a later `shut_down` ends the wait: WQ-6).
    pub fn draining(&self) -> bool {
        self.drain
    }

    /// PQ-7: shutting down, nothing processing and nothing ready.
    pub fn is_drained(&self) -> bool {
        self.shutting_down && self.processing.is_empty() && self.ready.is_empty()
    }

    /// The base metrics at `now` (WQ-7); the layers above fill in theirs.
    pub fn metrics(&self, now: Instant) -> QueueMetrics {
        let ages = self
            .processing
            .values()
            .map(|p| now.saturating_duration_since(p.since).as_secs_f64());
        let (total, longest) = ages.fold((0.0, 0.0_f64), |(t, l), a| (t + a, l.max(a)));
        QueueMetrics {
            name: self.name.clone(),
            depth: self.dirty.len(),
            adds: self.adds,
            queue_duration: self.queue_duration.clone(),
            work_duration: self.work_duration.clone(),
            unfinished_work_seconds: total,
            longest_running_processor_seconds: longest,
            retries: 0,
            waiting: 0,
            processing: self.processing.len(),
        }
    }

    /// Ready keys at `priority`.
    #[cfg(test)]
    pub(crate) fn ready_at_priority(&self, priority: Priority) -> usize {
        self.ready.keys().filter(|s| s.0.0 == priority).count()
    }

    /// Panics unless WQ-1's invariant and the slot bookkeeping hold.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        for (slot, key) in &self.ready {
            let dirty = self.dirty.get(key).expect("a ready key is dirty");
            assert_eq!(dirty.slot, Some(*slot), "its slot is recorded");
            assert_eq!(slot.0.0, dirty.priority, "in its priority's lane");
            assert!(!self.processing.contains_key(key), "and not processing");
        }
        for (key, dirty) in &self.dirty {
            match dirty.slot {
                Some(slot) => assert!(self.ready.get(&slot) == Some(key)),
                None => assert!(self.processing.contains_key(key), "pending ⇒ processing"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t0() -> Instant {
        Instant::now()
    }

    fn get(q: &mut Queue<&'static str>, now: Instant) -> Option<&'static str> {
        match q.get(now) {
            Get::Item(t) => Some(t.key),
            _ => None,
        }
    }

    /// A key whose ticket reached no worker is put back first in its lane,
    /// without counting an add, and also while draining, where an add is
    /// ignored: the drain waits for it, and it is handed out next.
    #[test]
    fn a_key_put_back_is_handed_out_first_even_while_draining() {
        let now = t0();
        let mut q = Queue::new("put-back");
        q.add("a", Priority::Normal, now);
        q.add("b", Priority::Normal, now);
        assert_eq!(get(&mut q, now), Some("a"));
        q.shut_down_with_drain();
        assert!(q.put_back(&"a"));
        q.check_invariants();
        assert!(!q.put_back(&"a"), "not processing any more");
        assert_eq!(q.metrics(now).adds, 2);
        assert!(q.is_ready(&"a") && !q.is_drained());
        assert_eq!(get(&mut q, now), Some("a"));
        assert_eq!(get(&mut q, now), Some("b"));
        assert!(q.done(&"a", now) && q.done(&"b", now));
        assert!(q.is_drained());
        // Re-added at a higher priority meanwhile: back in that lane.
        let mut q = Queue::new("put-back-raised");
        q.add("a", Priority::Low, now);
        q.add("b", Priority::Normal, now);
        q.add("c", Priority::Low, now);
        assert_eq!(get(&mut q, now), Some("b"));
        assert_eq!(get(&mut q, now), Some("a"));
        q.add("a", Priority::Normal, now);
        assert!(q.put_back(&"a"));
        q.check_invariants();
        assert_eq!(q.ready_at_priority(Priority::Normal), 1);
        assert_eq!(get(&mut q, now), Some("a"));
    }

    /// One queue-duration sample per wait: a hand-out that reached no
    /// worker recorded it, so the put-back key's next hand-out records
    /// none; a re-add while it was out is a wait of its own, recorded.
    #[test]
    fn a_put_back_key_records_its_queue_duration_once() {
        let t = t0();
        let ms = Duration::from_millis;
        let mut q = Queue::new("put-back-metrics");
        q.add("a", Priority::Normal, t);
        assert_eq!(get(&mut q, t + ms(10)), Some("a"));
        assert!(q.put_back(&"a"));
        assert_eq!(get(&mut q, t + ms(30)), Some("a"));
        let m = q.metrics(t + ms(30));
        assert_eq!(m.queue_duration.count(), 1);
        assert!((m.queue_duration.sum() - 0.010).abs() < 1e-9);
        q.add("a", Priority::Normal, t + ms(40));
        assert!(q.put_back(&"a"));
        assert_eq!(get(&mut q, t + ms(45)), Some("a"));
        let m = q.metrics(t + ms(45));
        assert_eq!(m.queue_duration.count(), 2, "the re-add's wait");
        assert!((m.queue_duration.sum() - 0.015).abs() < 1e-9);
        q.check_invariants();
    }

    /// WQ-T1: producers adding their own items many times, consumers taking
    /// and finishing them, interleaved; then a shutdown (plain or with
    /// drain): an add after it is never handed out, and the queue empties.
    fn basic(drain: bool) {
        let now = t0();
        let mut q = Queue::new("t1");
        let mut handed = Vec::new();
        let mut in_hand: Vec<u32> = Vec::new();
        // 50 producers × 50 adds, a consumer step after every 5 adds: 10
        // consumers, each finishing what it holds and taking the next.
        for round in 0..50 {
            for producer in 0..50u32 {
                assert_ne!(q.add(producer, Priority::Normal, now), Added::Ignored);
                if producer % 5 == 4 {
                    for held in in_hand.drain(..) {
                        assert!(q.done(&held, now));
                    }
                    for _ in 0..10 {
                        if let Get::Item(t) = q.get(now) {
                            assert!(!in_hand.contains(&t.key), "one worker per item");
                            in_hand.push(t.key);
                            handed.push((round, t.key));
                        }
                    }
                }
                q.check_invariants();
            }
        }
        if drain {
            q.shut_down_with_drain();
        } else {
            q.shut_down();
        }
        assert_eq!(q.add(999, Priority::Normal, now), Added::Ignored);
        loop {
            for held in in_hand.drain(..) {
                q.done(&held, now);
            }
            match q.get(now) {
                Get::Item(t) => {
                    assert_ne!(t.key, 999, "added after shutdown");
                    in_hand.push(t.key);
                }
                Get::ShutDown => break,
                Get::Empty => unreachable!("shutting down, nothing processing"),
            }
        }
        assert_eq!(q.len(), 0);
        assert!(q.is_drained());
        for producer in 0..50 {
            assert!(
                handed.iter().any(|&(_, k)| k == producer),
                "{producer} processed"
            );
        }
    }

    #[test]
    fn wq_t1_basic_with_shut_down() {
        basic(false);
    }

    #[test]
    fn wq_t1_basic_with_shut_down_with_drain() {
        basic(true);
    }

    /// WQ-T2: each consumer re-adds the item it holds until it has seen it
    /// twice; it terminates and the queue empties.
    #[test]
    fn wq_t2_add_while_processing() {
        let now = t0();
        let mut q = Queue::new("t2");
        for i in 0..50u32 {
            q.add(i, Priority::Normal, now);
        }
        let mut seen: HashMap<(usize, u32), u32> = HashMap::new();
        let mut steps = 0;
        'outer: loop {
            for consumer in 0..10usize {
                let Get::Item(t) = q.get(now) else {
                    break 'outer;
                };
                let n = seen.entry((consumer, t.key)).or_default();
                *n += 1;
                if *n < 2 {
                    assert_eq!(q.add(t.key, Priority::Normal, now), Added::Pending);
                }
                q.done(&t.key, now);
                q.check_invariants();
                steps += 1;
                assert!(steps < 10_000, "terminates");
            }
        }
        q.shut_down();
        assert_eq!(q.len(), 0);
        assert_eq!(q.get(now), Get::ShutDown);
    }

    #[test]
    fn wq_t3_len_dedups() {
        let now = t0();
        let mut q = Queue::new("t3");
        q.add("foo", Priority::Normal, now);
        assert_eq!(q.len(), 1);
        q.add("bar", Priority::Normal, now);
        assert_eq!(q.len(), 2);
        assert_eq!(q.add("foo", Priority::Normal, now), Added::Deduplicated);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn wq_t4_reinsert_while_processing_is_handed_out_again_after_done() {
        let now = t0();
        let mut q = Queue::new("t4");
        q.add("foo", Priority::Normal, now);
        assert_eq!(get(&mut q, now), Some("foo"));
        assert_eq!(q.add("foo", Priority::Normal, now), Added::Pending);
        assert_eq!(q.len(), 0, "WQ-5: pending keys are not counted");
        assert_eq!(q.get(now), Get::Empty, "not handed out while processing");
        q.done(&"foo", now);
        assert_eq!(get(&mut q, now), Some("foo"));
        q.done(&"foo", now);
        assert_eq!(q.len(), 0);
    }

    /// WQ-T5: a second add of a waiting key hits the `Touch` hook, which is
    /// our priority lane: at the same priority nothing moves, at a higher one
    /// the key is promoted ahead of the lower lane.
    #[test]
    fn wq_t5_collapse_touches_a_waiting_key() {
        let now = t0();
        let mut q = Queue::new("t5");
        q.add("bar", Priority::Normal, now);
        assert_eq!(q.add("bar", Priority::Normal, now), Added::Deduplicated);
        assert_eq!(get(&mut q, now), Some("bar"));
        q.done(&"bar", now);
        assert_eq!(q.len(), 0);
        assert_eq!(q.get(now), Get::Empty);

        q.add("a", Priority::Low, now);
        q.add("b", Priority::Low, now);
        assert_eq!(q.add("b", Priority::Normal, now), Added::Promoted);
        q.check_invariants();
        assert_eq!(get(&mut q, now), Some("b"));
        assert_eq!(get(&mut q, now), Some("a"));
    }

    /// WQ-T6: adds of a processing key collapse into one re-run, handed out
    /// only after its `done`; they are not touches.
    #[test]
    fn wq_t6_collapse_while_processing() {
        let now = t0();
        let mut q = Queue::new("t6");
        q.add("foo", Priority::Normal, now);
        assert_eq!(get(&mut q, now), Some("foo"));
        assert_eq!(q.add("foo", Priority::Normal, now), Added::Pending);
        assert_eq!(q.add("foo", Priority::Normal, now), Added::Deduplicated);
        assert_eq!(q.get(now), Get::Empty, "a second worker waits");
        q.done(&"foo", now);
        assert_eq!(get(&mut q, now), Some("foo"), "once");
        assert_eq!(q.get(now), Get::Empty);
        q.done(&"foo", now);
        assert_eq!(q.len(), 0);
    }

    /// WQ-T7: a drain is complete only once both keys in progress are done.
    #[test]
    fn wq_t7_drain_waits_for_processing() {
        let now = t0();
        let mut q = Queue::new("t7");
        q.add("foo", Priority::Normal, now);
        q.add("bar", Priority::Normal, now);
        get(&mut q, now);
        get(&mut q, now);
        q.shut_down_with_drain();
        assert_eq!(q.get(now), Get::ShutDown);
        assert!(!q.is_drained());
        q.done(&"foo", now);
        assert!(!q.is_drained(), "bar still processing");
        q.done(&"bar", now);
        assert!(q.is_drained());
    }

    /// WQ-T8: a plain shutdown does not wait: no drain is pending.
    #[test]
    fn wq_t8_shut_down_does_not_drain() {
        let now = t0();
        let mut q = Queue::new("t8");
        q.add("foo", Priority::Normal, now);
        q.add("bar", Priority::Normal, now);
        get(&mut q, now);
        get(&mut q, now);
        q.shut_down();
        assert!(q.shutting_down());
        assert!(!q.draining(), "nothing waits for the two in progress");
    }

    /// WQ-T9: a shutdown during a drain releases it without any `done`.
    #[test]
    fn wq_t9_shut_down_releases_a_drain() {
        let now = t0();
        let mut q = Queue::new("t9");
        q.add("foo", Priority::Normal, now);
        get(&mut q, now);
        q.shut_down_with_drain();
        assert!(q.draining() && !q.is_drained());
        q.shut_down();
        assert!(!q.draining());
    }

    /// PQ-7: keys still ready keep a drain open, even with nothing processing.
    #[test]
    fn pq_7_drain_is_not_complete_while_keys_are_ready() {
        let now = t0();
        let mut q = Queue::new("pq7");
        q.add("foo", Priority::Normal, now);
        q.add("bar", Priority::Normal, now);
        let foo = get(&mut q, now).unwrap();
        q.shut_down_with_drain();
        q.done(&foo, now);
        assert!(!q.is_drained(), "bar is still ready");
        let bar = get(&mut q, now).unwrap();
        q.done(&bar, now);
        assert!(q.is_drained());
    }

    /// WQ-4 during shutdown: a re-added key is still handed out after `done`.
    #[test]
    fn wq_4_pending_key_is_requeued_during_shutdown() {
        let now = t0();
        let mut q = Queue::new("wq4");
        q.add("foo", Priority::Normal, now);
        get(&mut q, now);
        q.add("foo", Priority::Normal, now);
        q.shut_down();
        q.done(&"foo", now);
        assert_eq!(get(&mut q, now), Some("foo"));
        q.done(&"foo", now);
        assert_eq!(q.get(now), Get::ShutDown);
    }

    #[test]
    fn pq_2_higher_priority_first_then_first_come_first_served() {
        let now = t0();
        let mut q = Queue::new("pq2");
        for k in ["l1", "l2"] {
            q.add(k, Priority::Low, now);
        }
        for k in ["n1", "n2"] {
            q.add(k, Priority::Normal, now);
        }
        q.add("l3", Priority::Low, now);
        let order: Vec<_> = std::iter::from_fn(|| get(&mut q, now)).collect();
        assert_eq!(order, ["n1", "n2", "l1", "l2", "l3"]);
    }

    /// PQ-3: a lower-priority add never demotes; a pending key keeps the
    /// highest priority it was re-added at.
    #[test]
    fn pq_3_priority_never_drops_and_pending_keeps_the_highest() {
        let now = t0();
        let mut q = Queue::new("pq3");
        q.add("a", Priority::Normal, now);
        q.add("b", Priority::Low, now);
        assert_eq!(q.add("a", Priority::Low, now), Added::Deduplicated);
        assert_eq!(get(&mut q, now), Some("a"));
        q.add("a", Priority::Low, now);
        q.add("a", Priority::Normal, now);
        q.done(&"a", now);
        q.check_invariants();
        assert_eq!(
            get(&mut q, now),
            Some("a"),
            "requeued at Normal, ahead of b"
        );
    }

    /// WQ-T13 (against our metrics): adds count only adds that mark a key
    /// dirty; depth counts a pending re-add; queue and work durations come
    /// from the times passed in; unfinished work is computed at read time.
    #[test]
    fn wq_t13_metrics() {
        let t = t0();
        let us = Duration::from_micros;
        let mut q = Queue::new("test");
        q.add("foo", Priority::Normal, t);
        let m = q.metrics(t);
        assert_eq!((m.name.as_str(), m.adds, m.depth), ("test", 1, 1));

        assert_eq!(get(&mut q, t + us(50)), Some("foo"));
        let m = q.metrics(t + us(50));
        assert_eq!(m.queue_duration.count(), 1);
        assert!((m.queue_duration.sum() - 5e-05).abs() < 1e-12);

        for _ in 0..5 {
            q.add("foo", Priority::Normal, t + us(50));
        }
        let m = q.metrics(t + us(50));
        assert_eq!(
            (m.adds, m.depth),
            (2, 1),
            "re-adds while processing count once"
        );

        q.done(&"foo", t + us(75));
        let m = q.metrics(t + us(75));
        assert_eq!(m.work_duration.count(), 1);
        assert!((m.work_duration.sum() - 2.5e-05).abs() < 1e-12);
        assert_eq!(m.depth, 1, "one thing remains in the queue");

        assert_eq!(get(&mut q, t + us(75)), Some("foo"));
        let m = q.metrics(t + us(75));
        assert_eq!(m.queue_duration.count(), 2);
        assert!(
            (m.queue_duration.sum() - 7.5e-05).abs() < 1e-12,
            "2.5e-05 more"
        );

        let later = t + us(75) + Duration::from_millis(1);
        let m = q.metrics(later);
        assert!((m.unfinished_work_seconds - 0.001).abs() < 1e-12);
        assert!((m.longest_running_processor_seconds - 0.001).abs() < 1e-12);

        q.done(&"foo", later);
        let m = q.metrics(later);
        assert_eq!(m.work_duration.count(), 2);
        assert!((m.work_duration.sum() - 0.001025).abs() < 1e-12);
        assert_eq!((m.unfinished_work_seconds, m.processing), (0.0, 0));
    }

    #[test]
    fn take_dirty_empties_ready_and_pending() {
        let now = t0();
        let mut q = Queue::new("take");
        q.add("a", Priority::Normal, now);
        q.add("b", Priority::Normal, now);
        let a = get(&mut q, now).unwrap();
        q.add(a, Priority::Normal, now);
        let mut left = q.take_dirty();
        left.sort();
        assert_eq!(left, ["a", "b"]);
        q.check_invariants();
        q.done(&a, now);
        assert_eq!(q.get(now), Get::Empty, "the pending re-add was taken");
    }
}
