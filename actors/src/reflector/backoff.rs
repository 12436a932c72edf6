//! The Reflector's backoff (spec ): 800 ms doubling to 30 s, each wait
//! jittered uniformly into `[d, 2d)`, reset after 2 minutes without a step.
//!
//! Hand-written rather than taken from `backon`/`backoff`: the state must be
//! plain data that survives actor restarts, take time and randomness as inputs
//! so tests are exact, and reset only after a quiet period, not on every
//! relist start as kube-runtime does.

use std::time::{Duration, Instant};

/// Exponential backoff with jitter, whose state survives Reflector restarts.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    reset_after: Duration,
    next: Duration,
    last_step: Option<Instant>,
    steps: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    /// The shortest delay a backoff starts from.
    pub const MIN_DELAY: Duration = Duration::from_millis(1);

    /// A backoff from `initial`, doubling up to `cap`, reset after `reset_after` without a step.
    /// `initial` is at least 1 ms (a zero delay would hammer a failing server)
    /// and `cap` at least `initial`.
    pub fn new(initial: Duration, cap: Duration, reset_after: Duration) -> Self {
        let initial = initial.max(Self::MIN_DELAY);
        let cap = cap.max(initial);
        Backoff {
            initial,
            cap,
            reset_after,
            next: initial,
            last_step: None,
            steps: 0,
        }
    }

    /// The first wait (before jitter).
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// How long without a failure resets the waits to `initial`.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// The next wait. `jitter` is a uniform sample in `[0, 1)`: the wait is `d × (1 + jitter)`.
    pub fn next_delay(&mut self, now: Instant, jitter: f64) -> Duration {
        if self
            .last_step
            .is_some_and(|t| now.saturating_duration_since(t) >= self.reset_after)
        {
            self.reset();
        }
        let base = self.next;
        self.next = self.next.saturating_mul(2).min(self.cap);
        self.last_step = Some(now);
        self.steps = self.steps.saturating_add(1);
        Duration::try_from_secs_f64(base.as_secs_f64() * (1.0 + jitter.clamp(0.0, 1.0)))
            .unwrap_or(Duration::MAX)
    }

    /// Back to the initial delay.
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.last_step = None;
        self.steps = 0;
    }

    /// How many steps since the last reset (a metric, and for tests).
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// The longest base delay.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The base (un-jittered) delay of the next step.
    pub fn peek(&self) -> Duration {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_settings_neither_hammer_nor_panic() {
        let t = Instant::now();
        let mut zero = Backoff::new(Duration::ZERO, Duration::ZERO, Duration::from_secs(120));
        assert!(zero.next_delay(t, 0.0) >= Backoff::MIN_DELAY);
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX, Duration::MAX);
        for _ in 0..3 {
            assert_eq!(huge.next_delay(t, 0.999), Duration::MAX);
        }
    }

    #[test]
    fn r_2_doubles_to_the_cap_with_jitter_in_d_2d() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let waits: Vec<_> = (0..8)
            .map(|i| b.next_delay(t + Duration::from_secs(i), 0.0))
            .collect();
        let ms: Vec<_> = waits.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        let mut b = Backoff::default();
        assert_eq!(b.next_delay(t, 0.5), Duration::from_millis(1200));
        assert_eq!(b.next_delay(t, 0.999_999).as_millis(), 3199);
    }

    #[test]
    fn r_5_resets_after_two_quiet_minutes_not_before() {
        let mut b = Backoff::default();
        let t = Instant::now();
        for _ in 0..5 {
            b.next_delay(t, 0.0);
        }
        assert_eq!(
            b.next_delay(t + Duration::from_secs(119), 0.0),
            Duration::from_millis(25600)
        );
        assert_eq!(
            b.next_delay(t + Duration::from_secs(119 + 120), 0.0),
            Duration::from_millis(800)
        );
        assert_eq!(b.steps(), 1);
    }
}
