//! The delaying queue (spec DQ-1..DQ-3): keys that become ready at a time,
//! over the base [`Queue`].
//!
//! client-go runs a goroutine that wakes at the next ready time or every
//! 10 s; here the owner calls [`DelayingQueue::release_due`] (the actor arms
//! one timer for [`DelayingQueue::next_ready_at`]), and every `get` releases
//! what is due first, so no heartbeat is needed.
//!
//! Deliberate deviations: one place per key (PQ-4: an add of a waiting key
//! ends its wait instead of queueing it beside the wait) and backoff waits
//! that a plain add does not cut short (PQ-5).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::ops::Deref;
use std::time::{Duration, Instant};

use super::hasher::Hasher;
use super::metrics::QueueMetrics;
use super::priority::Priority;
use super::queue::{Added, Get, Queue};

/// The longest wait, about 30 years: a longer delay (`Duration::MAX` for
/// "not before a change") waits this long rather than overflow the clock.
pub const LONGEST_WAIT: Duration = Duration::from_secs(30 * 365 * 86_400);

/// A key waiting for its ready time.
#[derive(Debug)]
struct Wait {
    at: Instant,
    /// Tie-break among keys with the same ready time: order of arrival.
    seq: u64,
    priority: Priority,
    /// A failure backoff, which a plain add does not end (PQ-5).
    backoff: bool,
}

/// A [`Queue`] whose keys can be added for later (DQ-1).
#[derive(Debug)]
pub struct DelayingQueue<K> {
    queue: Queue<K>,
    /// Waiting keys in ready-time order (DQ-2). Invariant (PQ-4): every key
    /// here is in `waits` with this time and seq, and neither ready nor
    /// pending in `queue` (it may be processing).
    timeline: BTreeMap<(Instant, u64), K>,
    waits: HashMap<K, Wait, Hasher>,
    seq: u64,
    /// `workqueue_retries_total` (DQ-1).
    retries: u64,
}

impl<K> Deref for DelayingQueue<K> {
    type Target = Queue<K>;

    /// The queue below, for reads (`len`, `is_processing`, ...).
    fn deref(&self) -> &Queue<K> {
        &self.queue
    }
}

impl<K: Clone + Eq + Hash> DelayingQueue<K> {
    /// An empty queue named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        DelayingQueue {
            queue: Queue::new(name),
            timeline: BTreeMap::new(),
            waits: HashMap::default(),
            seq: 0,
            retries: 0,
        }
    }

    /// WQ-2 for a key that may be waiting: a plain delay ends and the key is
    /// ready now (PQ-4); a backoff keeps it waiting, at the higher of the two
    /// priorities (PQ-5).
    pub fn add(&mut self, key: K, priority: Priority, now: Instant) -> Added {
        if self.queue.shutting_down() {
            return Added::Ignored;
        }
        let Some(wait) = self.waits.get_mut(&key) else {
            return self.queue.add(key, priority, now);
        };
        if wait.backoff {
            wait.priority = wait.priority.max(priority);
            return Added::Deduplicated;
        }
        let wait = self.unwait(&key).expect("just found");
        self.queue.add(key, priority.max(wait.priority), now)
    }

    /// DQ-1 `AddAfter`: `key` becomes ready after `delay` (now for a zero
    /// delay). Ignored while shutting down; otherwise counts a retry.
    pub fn add_after(&mut self, key: K, delay: Duration, priority: Priority, now: Instant) {
        self.delay(key, delay, priority, false, now);
    }

    /// As [`add_after`](Self::add_after), for a failure backoff: until it
    /// ends, a plain add of `key` does not make it ready (PQ-5). A key
    /// re-added while processing waits for the backoff too.
    pub fn add_backoff(&mut self, key: K, delay: Duration, priority: Priority, now: Instant) {
        self.delay(key, delay, priority, true, now);
    }

    fn delay(&mut self, key: K, delay: Duration, priority: Priority, backoff: bool, now: Instant) {
        if self.queue.shutting_down() {
            return;
        }
        self.retries += 1;
        if delay.is_zero() {
            self.add(key, priority, now);
            return;
        }
        let mut priority = priority;
        // PQ-4: a ready key is due sooner than any wait.
        if self.queue.is_ready(&key) {
            self.queue.add(key, priority, now);
            return;
        }
        if self.queue.is_pending(&key) {
            if !backoff {
                self.queue.add(key, priority, now);
                return;
            }
            // PQ-5: the re-run waits for the backoff.
            priority = priority.max(self.queue.take_pending(&key).expect("pending"));
        }
        let at = now + delay.min(LONGEST_WAIT);
        if let Some(wait) = self.waits.get_mut(&key) {
            wait.priority = wait.priority.max(priority);
            wait.backoff |= backoff;
            if at >= wait.at {
                return; // DQ-2: an earlier ready time is kept.
            }
            let old = (wait.at, wait.seq);
            wait.at = at;
            self.timeline.remove(&old);
            self.timeline.insert((at, old.1), key);
            return;
        }
        self.seq += 1;
        self.timeline.insert((at, self.seq), key.clone());
        let wait = Wait {
            at,
            seq: self.seq,
            priority,
            backoff,
        };
        self.waits.insert(key, wait);
    }

    fn unwait(&mut self, key: &K) -> Option<Wait> {
        let wait = self.waits.remove(key)?;
        self.timeline.remove(&(wait.at, wait.seq));
        Some(wait)
    }

    /// DQ-2: moves every key due at `now` to the queue, in ready-time order,
    /// with the usual deduplication; answers how many were released.
    pub fn release_due(&mut self, now: Instant) -> usize {
        let mut released = 0;
        while let Some(entry) = self.timeline.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            let wait = self.waits.remove(&key).expect("a timeline key waits");
            self.queue.add(key, wait.priority, now);
            released += 1;
        }
        released
    }

    /// When the next waiting key is due, if any.
    pub fn next_ready_at(&self) -> Option<Instant> {
        self.timeline.first_key_value().map(|((at, _), _)| *at)
    }

    /// When `key` is due, while it waits.
    pub fn ready_at(&self, key: &K) -> Option<Instant> {
        self.waits.get(key).map(|w| w.at)
    }

    /// True while `key` waits out a failure backoff.
    pub fn in_backoff(&self, key: &K) -> bool {
        self.waits.get(key).is_some_and(|w| w.backoff)
    }

    /// Keys waiting for their ready time.
    pub fn waiting(&self) -> usize {
        self.waits.len()
    }

    /// True while `key` is ready, waiting, processing or pending.
    pub fn contains(&self, key: &K) -> bool {
        self.queue.contains(key) || self.waits.contains_key(key)
    }

    /// WQ-3 after releasing what is due.
    pub fn get(&mut self, now: Instant) -> Get<K> {
        self.release_due(now);
        self.queue.get(now)
    }

    /// WQ-4.
    pub fn done(&mut self, key: &K, now: Instant) -> bool {
        self.queue.done(key, now)
    }

    /// Undoes a `get` whose ticket reached no worker ([`Queue::put_back`]).
    pub fn put_back(&mut self, key: &K) -> bool {
        self.queue.put_back(key)
    }

    /// DQ-3 / WQ-6 `ShutDown`: waiting keys are dropped (DQ-2), and returned.
    pub fn shut_down(&mut self) -> Vec<K> {
        self.queue.shut_down();
        self.drop_waits()
    }

    /// DQ-3 / WQ-6 `ShutDownWithDrain`: waiting keys are dropped, and returned.
    pub fn shut_down_with_drain(&mut self) -> Vec<K> {
        self.queue.shut_down_with_drain();
        self.drop_waits()
    }

    fn drop_waits(&mut self) -> Vec<K> {
        self.waits.clear();
        std::mem::take(&mut self.timeline).into_values().collect()
    }

    /// PQ-8: shuts down and takes what is left to hand out: the ready and
    /// pending keys, then the waiting ones.
    pub fn close(&mut self) -> (Vec<K>, Vec<K>) {
        let waiting = self.shut_down();
        (self.queue.take_dirty(), waiting)
    }

    /// WQ-7 at `now`, retries and waiting keys included.
    pub fn metrics(&self, now: Instant) -> QueueMetrics {
        QueueMetrics {
            retries: self.retries,
            waiting: self.waits.len(),
            ..self.queue.metrics(now)
        }
    }

    /// Panics unless PQ-4 and the queue's own invariants hold.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        self.queue.check_invariants();
        assert_eq!(self.timeline.len(), self.waits.len());
        for ((at, seq), key) in &self.timeline {
            let wait = self.waits.get(key).expect("a timeline key waits");
            assert_eq!((wait.at, wait.seq), (*at, *seq));
            assert!(!self.queue.is_ready(key), "PQ-4: waiting or ready");
            assert!(!self.queue.is_pending(key), "PQ-4: waiting or pending");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: Priority = Priority::Normal;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn take(q: &mut DelayingQueue<&'static str>, now: Instant) -> Option<&'static str> {
        match q.get(now) {
            Get::Item(t) => {
                q.done(&t.key, now);
                Some(t.key)
            }
            _ => None,
        }
    }

    #[test]
    fn dq_t1_simple_queue() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("dq1");
        q.add_after("foo", ms(50), N, t);
        q.release_due(t);
        assert_eq!(q.len(), 0);
        assert_eq!(q.release_due(t + ms(60)), 1);
        assert_eq!(q.len(), 1);
        assert_eq!(take(&mut q, t + ms(60)), Some("foo"));
        assert_eq!(q.release_due(t + ms(60) + Duration::from_secs(10)), 0);
        assert_eq!(q.len(), 0, "nothing more after the heartbeat's 10 s");
        assert_eq!(q.next_ready_at(), None);
    }

    /// DQ-1: a delay too long for the clock (`Duration::MAX`) is a wait
    /// of [`LONGEST_WAIT`], not a panic; an add ends it (PQ-4).
    #[test]
    fn dq_1_an_endless_delay_waits_the_longest_wait() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("dq-max");
        q.add_after("foo", Duration::MAX, N, t);
        assert_eq!(q.next_ready_at(), Some(t + LONGEST_WAIT));
        assert_eq!(q.release_due(t + Duration::from_secs(86_400)), 0);
        q.add_backoff("bar", Duration::MAX, N, t);
        assert_eq!(q.len(), 0);
        q.add("foo", N, t);
        assert_eq!(take(&mut q, t), Some("foo"));
    }

    #[test]
    fn dq_t3_add_two_fire_early() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("dq3");
        // Releases what is due at `at`: exactly one key, handed out and done.
        let one_at = |q: &mut DelayingQueue<&'static str>, at| {
            q.release_due(at);
            assert_eq!(q.len(), 1);
            take(q, at)
        };
        q.add_after("foo", Duration::from_secs(1), N, t);
        q.add_after("bar", ms(50), N, t);
        let t = t + ms(60);
        assert_eq!(one_at(&mut q, t), Some("bar"));
        q.add_after("baz", Duration::from_secs(2), N, t);
        let t = t + Duration::from_secs(1);
        assert_eq!(one_at(&mut q, t), Some("foo"));
        assert_eq!(one_at(&mut q, t + Duration::from_secs(2)), Some("baz"));
    }

    #[test]
    fn dq_t4_copy_shifting_releases_in_ready_time_order() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("dq4");
        q.add_after("foo", Duration::from_secs(1), N, t);
        q.add_after("bar", ms(500), N, t);
        q.add_after("baz", ms(250), N, t);
        q.release_due(t + Duration::from_secs(2));
        assert_eq!(q.len(), 3);
        let t = t + Duration::from_secs(2);
        let order: Vec<_> = std::iter::from_fn(|| take(&mut q, t)).collect();
        assert_eq!(order, ["baz", "bar", "foo"]);
    }

    /// DQ-2: a key waiting twice keeps the earlier time, never a later one.
    #[test]
    fn dq_2_earliest_ready_time_wins() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("dq2");
        q.add_after("foo", ms(100), N, t);
        q.add_after("foo", ms(500), N, t);
        assert_eq!(q.ready_at(&"foo"), Some(t + ms(100)));
        q.add_after("foo", ms(20), N, t);
        assert_eq!(q.ready_at(&"foo"), Some(t + ms(20)));
        assert_eq!(q.waiting(), 1);
        q.check_invariants();
        assert_eq!(q.release_due(t + ms(20)), 1);
        assert_eq!(q.release_due(t + ms(500)), 0, "the later times were merged");
    }

    /// DQ-1: a zero delay adds at once; every delayed add counts a retry;
    /// shutting down, delayed adds are ignored and waiting keys dropped.
    #[test]
    fn dq_1_zero_delay_retries_and_shutdown() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("dq1b");
        q.add_after("now", Duration::ZERO, N, t);
        assert_eq!(q.len(), 1);
        q.add_after("later", ms(10), N, t);
        assert_eq!(q.metrics(t).retries, 2);
        assert_eq!(q.shut_down(), ["later"]);
        q.add_after("ignored", ms(10), N, t);
        assert_eq!((q.waiting(), q.metrics(t).retries), (0, 2));
        assert_eq!(q.release_due(t + ms(10)), 0);
    }

    /// PQ-4 (kubernetes#126027): an add of a key waiting for a plain delay
    /// makes it ready now and ends the wait: it is processed once, not twice.
    #[test]
    fn pq_4_an_add_ends_a_plain_delay() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("pq4");
        q.add_after("foo", Duration::from_secs(3600), Priority::Low, t);
        assert_eq!(q.add("foo", N, t), Added::Queued);
        assert_eq!(q.waiting(), 0);
        q.check_invariants();
        assert_eq!(take(&mut q, t), Some("foo"));
        assert_eq!(q.release_due(t + Duration::from_secs(3600)), 0);
        // A delay of a key already ready is a no-op: it is due sooner.
        q.add("bar", N, t);
        q.add_after("bar", ms(10), N, t);
        assert_eq!((q.len(), q.waiting()), (1, 0));
    }

    /// PQ-5 (kubernetes#132805): an add of a key in backoff merges into the
    /// backoff: it is ready when the backoff ends, once, at the higher priority.
    #[test]
    fn pq_5_an_add_does_not_cut_a_backoff_short() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("pq5");
        q.add_backoff("foo", ms(100), Priority::Low, t);
        assert_eq!(q.add("foo", N, t + ms(1)), Added::Deduplicated);
        assert_eq!(q.get(t + ms(1)), Get::Empty, "still backing off");
        assert_eq!(q.release_due(t + ms(100)), 1);
        match q.get(t + ms(100)) {
            Get::Item(ticket) => assert_eq!((ticket.key, ticket.priority), ("foo", N)),
            other => panic!("{other:?}"),
        }
    }

    /// PQ-5: a key re-added while processing that then enters a backoff waits
    /// for the backoff, instead of being requeued by its `done`.
    #[test]
    fn pq_5_a_pending_rerun_waits_for_the_backoff() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("pq5b");
        q.add("foo", Priority::Low, t);
        assert!(matches!(q.get(t), Get::Item(_)));
        assert_eq!(q.add("foo", N, t), Added::Pending);
        q.add_backoff("foo", ms(50), Priority::Low, t);
        q.done(&"foo", t);
        q.check_invariants();
        assert_eq!(q.get(t), Get::Empty);
        assert!(q.in_backoff(&"foo"));
        match q.get(t + ms(50)) {
            Get::Item(ticket) => assert_eq!(ticket.priority, N, "the re-add's priority"),
            other => panic!("{other:?}"),
        }
        // A plain delay of a pending key is a no-op: it is due at its done.
        q.add("foo", N, t + ms(50));
        q.add_after("foo", Duration::from_secs(1), N, t + ms(50));
        assert_eq!(q.waiting(), 0);
        q.done(&"foo", t + ms(50));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn close_returns_ready_pending_and_waiting_keys() {
        let t = Instant::now();
        let mut q = DelayingQueue::new("close");
        q.add("ready", N, t);
        q.add("busy", N, t);
        q.add_after("later", ms(10), N, t);
        let Get::Item(ready) = q.get(t) else { panic!() };
        assert_eq!(ready.key, "ready");
        q.add("ready", N, t);
        let (queued, waiting) = q.close();
        let mut queued = queued;
        queued.sort();
        assert_eq!((queued, waiting), (vec!["busy", "ready"], vec!["later"]));
        q.done(&"ready", t);
        assert_eq!(q.get(t), Get::ShutDown, "nothing more to hand out");
    }
}
