//! The rate-limiting queue (spec RL-8) over a [`DelayingQueue`], and the
//! [`Outcome`] a worker reports for each key it was handed.
//!
//! Deliberate deviations from client-go: a rate-limited add is a backoff that
//! a plain add does not cut short (PQ-5), and failure counters exist only
//! while their key is in the queue (PQ-6), so they are bounded by the keys
//! queued even when `forget` is never called.

use std::hash::Hash;
use std::ops::Deref;
use std::time::{Duration, Instant};

use super::delaying::DelayingQueue;
use super::metrics::QueueMetrics;
use super::priority::Priority;
use super::queue::{Added, Get};
use super::rate_limiter::RateLimiter;

/// How the work on a key handed out ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded: its failures are forgotten.
    Success,
    /// It succeeded and wants to run again after this delay (a plain delay:
    /// an add ends it, PQ-4); its failures are forgotten.
    RequeueAfter(Duration),
    /// It failed: it runs again after the limiter's backoff (RL-8, PQ-5).
    Failure,
}

/// What [`RateLimitingQueue::close`] took from the queue (PQ-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftovers<K> {
    /// Keys ready, or re-added while processing, in hand-out order first.
    pub queued: Vec<K>,
    /// Keys waiting for a delay or a backoff.
    pub waiting: Vec<K>,
}

impl<K> Default for Leftovers<K> {
    fn default() -> Self {
        Leftovers {
            queued: Vec::new(),
            waiting: Vec::new(),
        }
    }
}

/// A [`DelayingQueue`] with a [`RateLimiter`] for failed keys.
pub struct RateLimitingQueue<K> {
    queue: DelayingQueue<K>,
    /// Holds counters only for keys in `queue` (PQ-6).
    limiter: Box<dyn RateLimiter<K>>,
}

impl<K: Clone + Eq + Hash> std::fmt::Debug for RateLimitingQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("name", &self.queue.name())
            .field("len", &self.queue.len())
            .field("waiting", &self.queue.waiting())
            .finish_non_exhaustive()
    }
}

impl<K> Deref for RateLimitingQueue<K> {
    type Target = DelayingQueue<K>;

    /// The queue below, for reads.
    fn deref(&self) -> &DelayingQueue<K> {
        &self.queue
    }
}

impl<K: Clone + Eq + Hash> RateLimitingQueue<K> {
    /// An empty queue named `name` whose failed keys wait as `limiter` says.
    pub fn new(name: impl Into<String>, limiter: Box<dyn RateLimiter<K>>) -> Self {
        RateLimitingQueue {
            queue: DelayingQueue::new(name),
            limiter,
        }
    }

    /// WQ-2 / PQ-4 / PQ-5: see [`DelayingQueue::add`].
    pub fn add(&mut self, key: K, priority: Priority, now: Instant) -> Added {
        self.queue.add(key, priority, now)
    }

    /// DQ-1: see [`DelayingQueue::add_after`].
    pub fn add_after(&mut self, key: K, delay: Duration, priority: Priority, now: Instant) {
        self.queue.add_after(key, delay, priority, now)
    }

    /// RL-8 `AddRateLimited`: records a failure of `key` and makes it wait
    /// the limiter's delay, as a backoff (PQ-5); answers that delay. Shutting
    /// down, nothing is recorded and `None` is answered.
    pub fn add_rate_limited(
        &mut self,
        key: K,
        priority: Priority,
        now: Instant,
    ) -> Option<Duration> {
        if self.queue.shutting_down() {
            return None;
        }
        let delay = self.limiter.when(&key, now);
        self.queue.add_backoff(key, delay, priority, now);
        Some(delay)
    }

    /// RL-8 `Forget`: forgets `key`'s failures; it stays queued if it is.
    pub fn forget(&mut self, key: &K) {
        self.limiter.forget(key);
    }

    /// RL-8 `NumRequeues`: `key`'s failures so far.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.limiter.num_requeues(key)
    }

    /// WQ-3, with the key's failures so far in its ticket.
    pub fn get(&mut self, now: Instant) -> Get<K> {
        match self.queue.get(now) {
            Get::Item(mut ticket) => {
                ticket.requeues = self.limiter.num_requeues(&ticket.key);
                Get::Item(ticket)
            }
            other => other,
        }
    }

    /// Undoes a `get` whose ticket reached no worker
    /// ([`Queue::put_back`](super::queue::Queue::put_back)):
    /// its failures are kept, for its next ticket.
    pub fn put_back(&mut self, key: &K) -> bool {
        self.queue.put_back(key)
    }

    /// WQ-4; a key that leaves the queue has its failures forgotten (PQ-6).
    pub fn done(&mut self, key: &K, now: Instant) -> bool {
        let was = self.queue.done(key, now);
        self.forget_if_gone(key);
        was
    }

    /// Ends the work on a processing `key`: requeues it as `outcome` says, at
    /// the priority it was handed out at (PQ-3), then `done`. False if it
    /// was not processing (nothing happens).
    pub fn finish(&mut self, key: &K, outcome: Outcome, now: Instant) -> bool {
        let Some(priority) = self.queue.processing_priority(key) else {
            return false;
        };
        match outcome {
            Outcome::Success => self.limiter.forget(key),
            Outcome::RequeueAfter(delay) => {
                self.limiter.forget(key);
                self.queue.add_after(key.clone(), delay, priority, now);
            }
            Outcome::Failure => {
                self.add_rate_limited(key.clone(), priority, now);
            }
        }
        self.done(key, now)
    }

    fn forget_if_gone(&mut self, key: &K) {
        if !self.queue.contains(key) {
            self.limiter.forget(key);
        }
    }

    /// Releases what is due at `now` (DQ-2).
    pub fn release_due(&mut self, now: Instant) -> usize {
        self.queue.release_due(now)
    }

    /// WQ-6 `ShutDown`; the waiting keys dropped are forgotten and returned.
    pub fn shut_down(&mut self) -> Vec<K> {
        let dropped = self.queue.shut_down();
        self.forget_all(&dropped);
        dropped
    }

    /// WQ-6 `ShutDownWithDrain`; the waiting keys dropped are forgotten and returned.
    pub fn shut_down_with_drain(&mut self) -> Vec<K> {
        let dropped = self.queue.shut_down_with_drain();
        self.forget_all(&dropped);
        dropped
    }

    /// PQ-8: shuts down and takes every key not processing; they are forgotten.
    pub fn close(&mut self) -> Leftovers<K> {
        let (queued, waiting) = self.queue.close();
        self.forget_all(&queued);
        self.forget_all(&waiting);
        Leftovers { queued, waiting }
    }

    fn forget_all(&mut self, keys: &[K]) {
        for key in keys {
            self.forget_if_gone(key);
        }
    }

    /// WQ-7 at `now`.
    pub fn metrics(&self, now: Instant) -> QueueMetrics {
        self.queue.metrics(now)
    }

    /// Panics unless every layer's invariants hold.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        self.queue.check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::rate_limiter::{ItemExponential, default_controller_rate_limiter};

    const N: Priority = Priority::Normal;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn exponential(base: u64, max: u64) -> RateLimitingQueue<&'static str> {
        RateLimitingQueue::new("rl", Box::new(ItemExponential::new(ms(base), ms(max))))
    }

    fn ticket(
        q: &mut RateLimitingQueue<&'static str>,
        now: Instant,
    ) -> Option<(&'static str, u32)> {
        match q.get(now) {
            Get::Item(t) => Some((t.key, t.requeues)),
            _ => None,
        }
    }

    /// RL-T6: the delays handed to the delaying queue follow the limiter;
    /// `forget` starts them over.
    #[test]
    fn rl_t6_rate_limiting_queue() {
        let t = Instant::now();
        let mut q = exponential(1, 1000);
        assert_eq!(q.add_rate_limited("one", N, t), Some(ms(1)));
        assert_eq!(q.add_rate_limited("one", N, t), Some(ms(2)));
        assert_eq!(q.num_requeues(&"one"), 2);
        assert_eq!(
            q.ready_at(&"one"),
            Some(t + ms(1)),
            "DQ-2: the earlier time"
        );
        assert_eq!(q.add_rate_limited("two", N, t), Some(ms(1)));
        assert_eq!(q.add_rate_limited("two", N, t), Some(ms(2)));
        q.forget(&"one");
        assert_eq!(q.num_requeues(&"one"), 0);
        assert_eq!(q.add_rate_limited("one", N, t), Some(ms(1)));
        assert!(q.contains(&"one"), "RL-8: forget does not dequeue");
    }

    /// A key that keeps failing waits base, 2 × base, 4 × base... between
    /// attempts; one success forgets its failures.
    #[test]
    fn failures_back_off_and_a_success_resets() {
        let mut t = Instant::now();
        let mut q = exponential(10, 10_000);
        q.add("k", N, t);
        for (attempt, wait) in [10, 20, 40, 80].into_iter().enumerate() {
            assert_eq!(ticket(&mut q, t), Some(("k", attempt as u32)));
            q.finish(&"k", Outcome::Failure, t);
            assert_eq!(
                ticket(&mut q, t + ms(wait - 1)),
                None,
                "not before its backoff"
            );
            t += ms(wait);
        }
        assert_eq!(ticket(&mut q, t), Some(("k", 4)));
        q.finish(&"k", Outcome::Success, t);
        assert_eq!(q.num_requeues(&"k"), 0);
        q.add("k", N, t);
        assert_eq!(ticket(&mut q, t), Some(("k", 0)));
        q.finish(&"k", Outcome::Failure, t);
        assert_eq!(q.ready_at(&"k"), Some(t + ms(10)), "back to the base delay");
    }

    /// PQ-5 (kubernetes#132805): events that re-add a failing key during its
    /// backoff neither run it early nor count failures: the backoff grows
    /// per attempt, not per event.
    #[test]
    fn pq_5_events_during_a_backoff_do_not_inflate_it() {
        let mut t = Instant::now();
        let mut q = RateLimitingQueue::new("pq5", Box::new(default_controller_rate_limiter()));
        q.add("k", N, t);
        let mut attempts = 0;
        let end = t + Duration::from_secs(1);
        while t < end {
            if let Some(("k", _)) = ticket(&mut q, t) {
                attempts += 1;
                q.finish(&"k", Outcome::Failure, t);
            }
            q.add("k", N, t); // an unrelated event every millisecond
            t += ms(1);
        }
        // 5 ms doubling: attempts at 0, 5, 15, 35, 75, 155, 315, 635 ms.
        assert_eq!(attempts, 8);
        assert_eq!(q.num_requeues(&"k"), 8);
    }

    /// PQ-6: counters go when their key leaves the queue, even unforgotten.
    #[test]
    fn pq_6_failure_counters_are_bounded_by_the_queue() {
        let t = Instant::now();
        let mut q = exponential(1, 1000);
        q.add("k", N, t);
        ticket(&mut q, t);
        q.finish(&"k", Outcome::Failure, t);
        assert_eq!(q.num_requeues(&"k"), 1, "kept while waiting");
        let t = t + ms(1);
        assert_eq!(ticket(&mut q, t), Some(("k", 1)), "and while processing");
        // A plain `done` (client-go's pattern without Forget) still forgets.
        q.done(&"k", t);
        assert_eq!(q.num_requeues(&"k"), 0);
        // Dropped by a shutdown: forgotten too.
        q.add_rate_limited("w", N, t);
        assert_eq!(q.shut_down(), ["w"]);
        assert_eq!(q.num_requeues(&"w"), 0);
    }

    /// A requeue-after is a success (failures forgotten, kube#1916) and a
    /// plain delay: a real change ends it (PQ-4).
    #[test]
    fn requeue_after_forgets_failures_and_an_add_ends_it() {
        let t = Instant::now();
        let mut q = exponential(1, 1000);
        q.add("k", Priority::Low, t);
        ticket(&mut q, t);
        q.finish(&"k", Outcome::Failure, t);
        let t = t + ms(1);
        assert_eq!(ticket(&mut q, t), Some(("k", 1)));
        q.finish(&"k", Outcome::RequeueAfter(Duration::from_secs(60)), t);
        assert_eq!(q.num_requeues(&"k"), 0);
        assert_eq!(q.ready_at(&"k"), Some(t + Duration::from_secs(60)));
        q.add("k", N, t);
        assert_eq!(ticket(&mut q, t), Some(("k", 0)), "ready at once");
    }

    /// PQ-3: a retry keeps the priority of the attempt it follows.
    #[test]
    fn pq_3_retries_keep_their_priority() {
        let t = Instant::now();
        let mut q = exponential(1, 1000);
        q.add("initial", Priority::Low, t);
        assert!(matches!(q.get(t), Get::Item(ref x) if x.priority == Priority::Low));
        q.finish(&"initial", Outcome::Failure, t);
        q.add("change", N, t + ms(1));
        let t = t + ms(1);
        let order: Vec<_> = std::iter::from_fn(|| ticket(&mut q, t).map(|(k, _)| k)).collect();
        assert_eq!(order, ["change", "initial"]);
    }

    #[test]
    fn finish_of_a_key_not_processing_does_nothing() {
        let t = Instant::now();
        let mut q = exponential(1, 1000);
        assert!(!q.finish(&"ghost", Outcome::Failure, t));
        assert_eq!((q.waiting(), q.num_requeues(&"ghost")), (0, 0));
    }

    #[test]
    fn close_takes_and_forgets_what_is_left() {
        let t = Instant::now();
        let mut q = exponential(1, 1000);
        q.add("a", N, t);
        q.add("b", N, t);
        ticket(&mut q, t);
        q.add_rate_limited("c", N, t);
        let left = q.close();
        assert_eq!(left.queued, ["b"]);
        assert_eq!(left.waiting, ["c"]);
        assert_eq!(q.num_requeues(&"c"), 0);
        assert_eq!(q.add("d", N, t), Added::Ignored);
        assert!(q.finish(&"a", Outcome::Failure, t), "a may still finish");
        assert_eq!(q.get(t), Get::ShutDown);
        assert!(q.is_drained());
    }
}
