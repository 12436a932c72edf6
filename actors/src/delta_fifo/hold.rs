//! Until the initial list is in, the DeltaFIFO holds a list's pages back
//! until half an initial batch is queued (DF-15a).
//!
//! Each batch is one publish of the Indexer's persistent cache, after
//! which every write copies the tree nodes it touches: handed on a
//! 500-object page at a time, a 100k-object list spent about 45 % of the
//! informer's thread copying and freeing nodes (BENCHMARKS.md, "issue 24's
//! bars in one run"). Pages still go on in order, at the list's end, once
//! the queue nears its high watermark, and at the latest [`MAX_HOLD`] after
//! the first page held, so a slow server does not keep the cache empty.
//! A compact cache's initial batches are small (512 keys), so its pages go
//! on one by one as before and its peak memory stays bounded.

use std::time::{Duration, Instant};

/// The longest a held page waits for more.
pub const MAX_HOLD: Duration = Duration::from_millis(250);

/// Whether the queued pages of a list go on now or wait for more.
#[derive(Debug)]
pub(super) struct ListHold {
    /// Keys queued from which the pages go on (half an initial batch).
    min_keys: usize,
    /// When the oldest page still held was first held; `None` when
    /// nothing is held.
    since: Option<Instant>,
    /// When the timer armed last fires: one timer per hold, not one per
    /// page that arrives while it is held.
    timer_at: Option<Instant>,
}

/// The clock the DeltaFIFO holds pages by (tokio's, so paused in tests).
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl ListHold {
    /// Holds pages until `initial_batch_size / 2` keys are queued.
    pub(super) fn new(initial_batch_size: usize) -> Self {
        ListHold {
            min_keys: initial_batch_size / 2,
            since: None,
            timer_at: None,
        }
    }

    /// As [`wait`](Self::wait), and whether to arm a timer: `None`: hand
    /// the keys on now; `Some(Some(d))`: hold them and look again after
    /// `d`; `Some(None)`: hold them, a timer armed before still runs.
    pub(super) fn next(
        &mut self,
        first_list: bool,
        saturated: bool,
        keys: usize,
        now: Instant,
    ) -> Option<Option<Duration>> {
        let wait = self.wait(first_list, saturated, keys, now)?;
        if self.timer_at.is_some_and(|at| at > now) {
            return Some(None);
        }
        self.timer_at = Some(now + wait);
        Some(Some(wait))
    }

    /// `None`: hand the `keys` queued on now; `Some(d)`: hold them, and
    /// look again after `d` at the latest. `first_list`: a first list's
    /// pages are arriving (no sync reported, the list not at its end), not
    /// a snapshot's; `saturated`: the queue is at its high watermark.
    pub(super) fn wait(
        &mut self,
        first_list: bool,
        saturated: bool,
        keys: usize,
        now: Instant,
    ) -> Option<Duration> {
        if !first_list || saturated || keys == 0 || keys >= self.min_keys {
            self.since = None;
            return None;
        }
        let held = now.saturating_duration_since(*self.since.get_or_insert(now));
        if held >= MAX_HOLD {
            self.since = None;
            return None;
        }
        Some(MAX_HOLD - held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first list's `keys` queued, the queue below its watermark.
    fn listing(hold: &mut ListHold, keys: usize, now: Instant) -> Option<Duration> {
        hold.wait(true, false, keys, now)
    }

    #[test]
    fn df_15a_pages_wait_for_half_an_initial_batch() {
        let t0 = Instant::now();
        let mut hold = ListHold::new(16_384);
        assert_eq!(listing(&mut hold, 500, t0), Some(MAX_HOLD));
        let later = t0 + Duration::from_millis(10);
        let left = MAX_HOLD - Duration::from_millis(10);
        assert_eq!(listing(&mut hold, 1000, later), Some(left), "held since t0");
        assert_eq!(listing(&mut hold, 8192, later), None, "half a batch queued");
        assert_eq!(listing(&mut hold, 500, later), Some(MAX_HOLD), "held anew");
    }

    #[test]
    fn df_15a_one_timer_per_hold() {
        let t0 = Instant::now();
        let mut hold = ListHold::new(16_384);
        assert_eq!(hold.next(true, false, 500, t0), Some(Some(MAX_HOLD)));
        let ms = Duration::from_millis;
        assert_eq!(
            hold.next(true, false, 1000, t0 + ms(5)),
            Some(None),
            "armed"
        );
        assert_eq!(
            hold.next(true, false, 8192, t0 + ms(6)),
            None,
            "half a batch"
        );
        // A new hold before the first timer fired waits for it, then arms
        // its own for what is left.
        assert_eq!(hold.next(true, false, 500, t0 + ms(7)), Some(None));
        let fired = t0 + MAX_HOLD;
        assert_eq!(hold.next(true, false, 900, fired), Some(Some(ms(7))));
        assert_eq!(
            hold.next(true, false, 900, fired + ms(7)),
            None,
            "held long enough"
        );
    }

    #[test]
    fn df_15a_held_pages_go_on_after_the_longest_hold() {
        let t0 = Instant::now();
        let mut hold = ListHold::new(16_384);
        assert!(listing(&mut hold, 500, t0).is_some());
        assert_eq!(listing(&mut hold, 1000, t0 + MAX_HOLD), None);
    }

    #[test]
    fn df_15a_nothing_is_held_outside_a_first_list_or_at_the_watermark() {
        let now = Instant::now();
        let mut hold = ListHold::new(16_384);
        assert_eq!(hold.wait(false, false, 10, now), None, "not a first list");
        assert_eq!(
            hold.wait(true, true, 10, now),
            None,
            "producers wait for room"
        );
        assert_eq!(listing(&mut hold, 0, now), None, "nothing queued");
        let mut compact = ListHold::new(512);
        assert_eq!(
            listing(&mut compact, 500, now),
            None,
            "a page is half a small batch"
        );
    }
}
