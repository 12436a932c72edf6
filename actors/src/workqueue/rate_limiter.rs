//! Rate limiters (spec RL-1..RL-7): how long a key waits before its next try.
//!
//! Hand-written rather than taken from `governor` or `backon`: client-go's
//! outcomes are specified to the millisecond (RL-T1..RL-T5), the state must be
//! per key and forgettable, and time is an argument. `governor`'s GCRA does
//! not queue reservations past the burst (client-go's token bucket answers a
//! delay and consumes the token anyway), and `backon` drives a retry loop,
//! where a workqueue needs a delay per call.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use super::hasher::Hasher;

/// RL-1: when a key may be retried, and its failures so far.
pub trait RateLimiter<K>: Send {
    /// How long `key` waits before its next try; records one failure of it.
    fn when(&mut self, key: &K, now: Instant) -> Duration;
    /// Forgets `key`'s failures (it succeeded, or left the queue).
    fn forget(&mut self, key: &K);
    /// `key`'s failures since it was last forgotten.
    fn num_requeues(&self, key: &K) -> u32;
}

impl<K, L: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<L> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        (**self).when(key, now)
    }
    fn forget(&mut self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}

/// RL-2: `base × 2^failures`, at most `max`, per key.
#[derive(Debug)]
pub struct ItemExponential<K> {
    base: Duration,
    max: Duration,
    failures: HashMap<K, u32, Hasher>,
}

impl<K> ItemExponential<K> {
    /// Waits `base`, `2 × base`, `4 × base`, ... up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponential {
            base,
            max,
            failures: HashMap::default(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send> RateLimiter<K> for ItemExponential<K> {
    fn when(&mut self, key: &K, _: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_default();
        let exp = *failures;
        *failures = failures.saturating_add(1);
        // Exact in nanoseconds; anything past u64 nanoseconds (585 years) is `max`.
        let nanos = 1u128
            .checked_shl(exp)
            .and_then(|factor| self.base.as_nanos().checked_mul(factor))
            .and_then(|n| u64::try_from(n).ok());
        nanos.map_or(self.max, |n| Duration::from_nanos(n).min(self.max))
    }

    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// RL-3: one token bucket shared by every key (golang.org/x/time/rate's
/// `Reserve().Delay()`): `rate` tokens a second, at most `burst` saved; each
/// call takes a token, waiting for it when none is left. No per-key state.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// `rate` tokens per second (at least one a day), `burst` at most (at least 1); full at first.
    pub fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate: rate.max(1.0 / 86_400.0),
            burst,
            tokens: burst,
            last: None,
        }
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&mut self, _: &K, now: Instant) -> Duration {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(-self.tokens / self.rate).unwrap_or(Duration::MAX)
    }

    fn forget(&mut self, _: &K) {}

    fn num_requeues(&self, _: &K) -> u32 {
        0
    }
}

/// RL-4: `fast` for the first `max_fast` failures of a key, then `slow`.
#[derive(Debug)]
pub struct FastSlow<K> {
    fast: Duration,
    slow: Duration,
    max_fast: u32,
    failures: HashMap<K, u32, Hasher>,
}

impl<K> FastSlow<K> {
    /// `fast` while a key has failed at most `max_fast` times, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast: u32) -> Self {
        FastSlow {
            fast,
            slow,
            max_fast,
            failures: HashMap::default(),
        }
    }
}

impl<K: Clone + Eq + Hash + Send> RateLimiter<K> for FastSlow<K> {
    fn when(&mut self, key: &K, _: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_default();
        *failures = failures.saturating_add(1);
        if *failures <= self.max_fast {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// RL-5: the longest wait of several limiters, every one of which records the failure.
pub struct MaxOf<K>(Vec<Box<dyn RateLimiter<K>>>);

impl<K> MaxOf<K> {
    /// The maximum of `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        MaxOf(limiters)
    }
}

impl<K> std::fmt::Debug for MaxOf<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MaxOf({} limiters)", self.0.len())
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        // Every limiter is asked (none short-circuited), so each records the failure.
        self.0
            .iter_mut()
            .map(|l| l.when(key, now))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&mut self, key: &K) {
        for l in &mut self.0 {
            l.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.0
            .iter()
            .map(|l| l.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

/// RL-6: another limiter's wait, at most `max`.
#[derive(Debug)]
pub struct WithMaxWait<L> {
    inner: L,
    max: Duration,
}

impl<L> WithMaxWait<L> {
    /// `inner`'s waits capped at `max`.
    pub fn new(inner: L, max: Duration) -> Self {
        WithMaxWait { inner, max }
    }
}

impl<K, L: RateLimiter<K>> RateLimiter<K> for WithMaxWait<L> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        self.inner.when(key, now).min(self.max)
    }

    fn forget(&mut self, key: &K) {
        self.inner.forget(key)
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.inner.num_requeues(key)
    }
}

/// RL-7 `DefaultControllerRateLimiter`: the maximum of a per-key exponential
/// backoff (5 ms doubling to 1000 s) and an overall token bucket (10 a
/// second, bursts of 100).
pub fn default_controller_rate_limiter<K>() -> MaxOf<K>
where
    K: Clone + Eq + Hash + Send + 'static,
{
    MaxOf::new(vec![
        Box::new(ItemExponential::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(TokenBucket::new(10.0, 100)),
    ])
}

/// RL-7 `DefaultItemBasedRateLimiter`: per-key exponential, 1 ms doubling to 1000 s.
pub fn default_item_based_rate_limiter<K>() -> ItemExponential<K> {
    ItemExponential::new(Duration::from_millis(1), Duration::from_secs(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn whens<L: RateLimiter<&'static str>>(
        l: &mut L,
        key: &'static str,
        n: usize,
    ) -> Vec<Duration> {
        let now = Instant::now();
        (0..n).map(|_| l.when(&key, now)).collect()
    }

    #[test]
    fn rl_t1_item_exponential() {
        let mut l = ItemExponential::new(ms(1), Duration::from_secs(1));
        assert_eq!(
            whens(&mut l, "one", 5),
            [ms(1), ms(2), ms(4), ms(8), ms(16)]
        );
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(whens(&mut l, "two", 2), [ms(1), ms(2)]);
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(whens(&mut l, "one", 1), [ms(1)]);
    }

    #[test]
    fn rl_t2_item_exponential_overflow_clamps_to_max() {
        let mut l = ItemExponential::new(ms(1), Duration::from_secs(1000));
        whens(&mut l, "one", 5);
        assert_eq!(whens(&mut l, "one", 1), [ms(32)]);
        whens(&mut l, "overflow", 1000);
        assert_eq!(whens(&mut l, "overflow", 1), [Duration::from_secs(1000)]);

        let minute = Duration::from_secs(60);
        let mut l = ItemExponential::new(minute, 1000 * 60 * minute);
        whens(&mut l, "one", 2);
        assert_eq!(whens(&mut l, "one", 1), [4 * minute]);
        whens(&mut l, "overflow", 1000);
        assert_eq!(whens(&mut l, "overflow", 1), [1000 * 60 * minute]);
    }

    /// RL-T3 and RL-T4 expect the same: `one` gets 5 ms three times, then
    /// `slow`; `two` counts apart; `forget` starts `one` over.
    fn three_fast_then_slow<L: RateLimiter<&'static str>>(l: &mut L, slow: Duration) {
        assert_eq!(whens(l, "one", 5), [ms(5), ms(5), ms(5), slow, slow]);
        assert_eq!(l.num_requeues(&"one"), 5);
        assert_eq!(whens(l, "two", 2), [ms(5), ms(5)]);
        assert_eq!(l.num_requeues(&"two"), 2);
        l.forget(&"one");
        assert_eq!(l.num_requeues(&"one"), 0);
        assert_eq!(whens(l, "one", 1), [ms(5)]);
    }

    #[test]
    fn rl_t3_fast_slow() {
        let mut l = FastSlow::new(ms(5), Duration::from_secs(10), 3);
        let slow = Duration::from_secs(10);
        three_fast_then_slow(&mut l, slow);
    }

    #[test]
    fn rl_t4_max_of() {
        let mut l: MaxOf<&'static str> = MaxOf::new(vec![
            Box::new(FastSlow::new(ms(5), Duration::from_secs(3), 3)),
            Box::new(ItemExponential::new(ms(1), Duration::from_secs(1))),
        ]);
        let slow = Duration::from_secs(3);
        three_fast_then_slow(&mut l, slow);
    }

    #[test]
    fn rl_t5_with_max_wait() {
        // The step limiter of client-go's test: 100 × 5 ms, then 1000 s.
        let step = FastSlow::new(ms(5), Duration::from_secs(1000), 100);
        let mut l = WithMaxWait::new(step, Duration::from_secs(500));
        let got = whens(&mut l, "one", 200);
        assert!(got[..100].iter().all(|&d| d == ms(5)));
        assert!(got[100..].iter().all(|&d| d == Duration::from_secs(500)));
    }

    /// RL-3: the burst is free, then one token per `1 / rate`, shared by all
    /// keys; tokens come back with time, up to the burst.
    #[test]
    fn rl_3_token_bucket_is_shared_and_refills() {
        let t = Instant::now();
        let mut l = TokenBucket::new(10.0, 100);
        for i in 0..100 {
            assert_eq!(RateLimiter::<u32>::when(&mut l, &i, t), Duration::ZERO);
        }
        let d = |l: &mut TokenBucket, at| RateLimiter::<u32>::when(l, &7, at);
        assert_eq!(d(&mut l, t), ms(100));
        assert_eq!(d(&mut l, t), ms(200), "reservations queue up");
        // 1 s later 10 tokens came back: two pay the debt, 8 are free.
        let later = t + Duration::from_secs(1);
        for _ in 0..8 {
            assert_eq!(d(&mut l, later), Duration::ZERO);
        }
        assert_eq!(d(&mut l, later), ms(100));
        assert_eq!(RateLimiter::<u32>::num_requeues(&l, &7), 0);
        // Refills stop at the burst.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..100 {
            assert_eq!(d(&mut l, much_later), Duration::ZERO);
        }
        assert_eq!(d(&mut l, much_later), ms(100));
    }

    /// RL-7: 5 ms doubling per key, unless the shared bucket is empty.
    #[test]
    fn rl_7_default_controller_rate_limiter() {
        let t = Instant::now();
        let mut l = default_controller_rate_limiter::<u32>();
        assert_eq!(l.when(&1, t), ms(5));
        assert_eq!(l.when(&1, t), ms(10));
        assert_eq!(l.when(&2, t), ms(5));
        assert_eq!(l.num_requeues(&1), 2);
        for k in 3..100 {
            l.when(&k, t);
        }
        // 100 tokens spent: the bucket's 100 ms now exceeds 5 ms.
        assert_eq!(l.when(&200, t), ms(100));
        l.forget(&1);
        assert_eq!(l.num_requeues(&1), 0);
        let mut l = default_item_based_rate_limiter::<u32>();
        assert_eq!((l.when(&1, t), l.when(&1, t)), (ms(1), ms(2)));
    }
}
