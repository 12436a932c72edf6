//! Per-subscriber resync periods: who is due for a resync, and when the timer
//! should wake up next.
//!
//! Rules kept from client-go:
//! * SI-5: a positive period below [`MINIMUM_RESYNC_PERIOD`] (1 s) is raised to it.
//! * SI-5, SI-6: a period of 0 means the subscriber never resyncs.
//! * SI-10: at each check, the subscribers whose due time has come are the
//!   ones that receive the resync (SI-11: only they get `Cause::Resync`
//!   updates); each is then scheduled one period later.
//!
//! Deliberate deviations:
//! * No shared check period. client-go checks every `resyncCheckPeriod` and,
//!   after start, silently raises a smaller requested period to it (SI-5 step
//!   3), so a subscriber's real period is a multiple of the check period
//!   (SI-11). Here each subscriber has its own next due time, and the owner
//!   sleeps until [`ResyncSchedule::next_wakeup`]: a 1 s subscriber resyncs
//!   every second even beside a 3 s one, before or after start.
//! * No drift. client-go sets `nextResync = now + period` at the check (SI-10),
//!   so every late check delays all later resyncs. Here the next due time is
//!   the previous due time plus the period; only when that is already past
//!   (the check came more than a period late) is it `now + period`: missed
//!   periods are skipped, never replayed in a burst.
//! * SI-6's "the informer's check period is 0, so nobody resyncs" has no
//!   equivalent, since there is no check period: an owner that wants an
//!   informer-wide "never" passes a period of 0 for every subscriber.
//! * SI-10's `syncing = true` for a listener that joined before the first
//!   check exists because client-go cannot tell an unchanged relist update
//!   from a resync; kinformer events carry their [`Cause`](crate::Cause), so a
//!   new subscriber is first due one period after it joined.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The shortest positive resync period; shorter requests are raised to it (SI-5).
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// One subscriber's effective period and next due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// Effective period; `ZERO` never resyncs.
    period: Duration,
    /// `None` when it never resyncs (period 0, or a due time past `Instant`'s range).
    next_due: Option<Instant>,
}

/// The resync timetable of an informer's subscribers (see the module doc).
#[derive(Debug, Clone)]
pub struct ResyncSchedule<Id> {
    entries: BTreeMap<Id, Entry>,
}

impl<Id: Clone + Eq + Hash + Ord> Default for ResyncSchedule<Id> {
    fn default() -> Self {
        Self::new()
    }
}

/// The effective period of a requested one: 0 stays 0, anything positive is at
/// least [`MINIMUM_RESYNC_PERIOD`] (SI-5).
pub fn effective_resync_period(requested: Duration) -> Duration {
    if requested.is_zero() {
        Duration::ZERO
    } else {
        requested.max(MINIMUM_RESYNC_PERIOD)
    }
}

impl<Id: Clone + Eq + Hash + Ord> ResyncSchedule<Id> {
    /// An empty schedule.
    pub fn new() -> Self {
        ResyncSchedule {
            entries: BTreeMap::new(),
        }
    }

    /// Adds (or re-schedules) a subscriber; it is first due at `now` plus the
    /// returned effective period (`ZERO`: never). A subscriber scheduled
    /// again with the period in force keeps its due time (asking for the
    /// same period twice does not put its resync off).
    pub fn insert(&mut self, id: Id, period: Duration, now: Instant) -> Duration {
        let period = effective_resync_period(period);
        if self.entries.get(&id).is_some_and(|e| e.period == period) {
            return period;
        }
        let next_due = if period.is_zero() {
            None
        } else {
            now.checked_add(period)
        };
        if period > Duration::ZERO && next_due.is_none() {
            tracing::debug!(?period, "resync period beyond the clock's range; never due");
        }
        self.entries.insert(id, Entry { period, next_due });
        period
    }

    /// Forgets a subscriber; false when it was not scheduled.
    pub fn remove(&mut self, id: &Id) -> bool {
        self.entries.remove(id).is_some()
    }

    /// The subscribers due at `now` (sorted), each advanced to its next due time:
    /// previous due + period, or `now + period` when that is already past.
    pub fn due(&mut self, now: Instant) -> Vec<Id> {
        let mut due = Vec::new();
        for (id, entry) in &mut self.entries {
            let Some(at) = entry.next_due else { continue };
            if at > now {
                continue;
            }
            entry.next_due = match at.checked_add(entry.period) {
                Some(next) if next > now => Some(next),
                _ => now.checked_add(entry.period),
            };
            due.push(id.clone());
        }
        due
    }

    /// When the timer should next wake up: the earliest due time, `None` when
    /// nobody resyncs.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.entries.values().filter_map(|e| e.next_due).min()
    }

    /// A subscriber's next due time (`None`: unknown, or never resyncs).
    pub fn next_due(&self, id: &Id) -> Option<Instant> {
        self.entries.get(id).and_then(|e| e.next_due)
    }

    /// A subscriber's effective period (`ZERO`: never), `None` when unknown.
    pub fn period(&self, id: &Id) -> Option<Duration> {
        self.entries.get(id).map(|e| e.period)
    }

    /// Subscribers scheduled, including those that never resync.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no subscriber is scheduled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn periods_are_per_subscriber_never_rounded_to_each_other() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        assert_eq!(sched.insert("fast", s(1), base), s(1));
        assert_eq!(sched.insert("slow", s(3), base), s(3));
        let mut fast = Vec::new();
        let mut slow = Vec::new();
        for t in 0..=9 {
            for id in sched.due(base + s(t)) {
                match id {
                    "fast" => fast.push(t),
                    "slow" => slow.push(t),
                    other => panic!("unexpected {other}"),
                }
            }
        }
        assert_eq!(fast, (1..=9).collect::<Vec<_>>());
        assert_eq!(slow, vec![3, 6, 9]);
    }

    #[test]
    fn due_ids_are_sorted_and_exact_at_the_boundary() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        sched.insert(2, s(2), base);
        sched.insert(1, s(2), base);
        sched.insert(3, s(5), base);
        assert!(sched.due(base + s(2) - Duration::from_nanos(1)).is_empty());
        assert_eq!(sched.due(base + s(2)), vec![1, 2]);
        assert!(sched.due(base + s(2)).is_empty(), "advanced, not due twice");
        assert_eq!(sched.next_due(&1), Some(base + s(4)));
        assert_eq!(sched.due(base + s(10)), vec![1, 2, 3]);
    }

    #[test]
    fn period_zero_is_never_due() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        assert_eq!(sched.insert("never", Duration::ZERO, base), Duration::ZERO);
        assert_eq!(sched.period(&"never"), Some(Duration::ZERO));
        assert_eq!(sched.len(), 1);
        assert_eq!(sched.next_wakeup(), None);
        for t in [0, 1, 1000, 1_000_000] {
            assert!(sched.due(base + s(t)).is_empty());
        }
    }

    #[test]
    fn short_period_is_raised_to_the_minimum() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        assert_eq!(sched.insert("a", ms(500), base), MINIMUM_RESYNC_PERIOD);
        assert_eq!(sched.insert("b", Duration::from_nanos(1), base), s(1));
        assert_eq!(sched.period(&"a"), Some(s(1)));
        assert!(sched.due(base + ms(500)).is_empty());
        assert!(sched.due(base + ms(999)).is_empty());
        assert_eq!(sched.due(base + s(1)), vec!["a", "b"]);
        assert_eq!(effective_resync_period(ms(1500)), ms(1500));
    }

    #[test]
    fn removal() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        sched.insert("a", s(1), base);
        sched.insert("b", s(2), base);
        assert!(sched.remove(&"a"));
        assert!(!sched.remove(&"a"), "second removal is a no-op");
        assert_eq!(sched.period(&"a"), None);
        assert_eq!(sched.len(), 1);
        assert_eq!(sched.next_wakeup(), Some(base + s(2)));
        assert!(sched.due(base + s(1)).is_empty());
        assert_eq!(sched.due(base + s(2)), vec!["b"]);
        assert!(sched.remove(&"b"));
        assert!(sched.is_empty());
        assert_eq!(sched.next_wakeup(), None);
    }

    #[test]
    fn late_check_skips_missed_periods_without_bursting() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        sched.insert("a", s(1), base);
        // Checked 3.5 s late: due once, then next at now + period, not at 2 s, 3 s, 4 s.
        let late = base + ms(4500);
        assert_eq!(sched.due(late), vec!["a"]);
        assert_eq!(sched.next_due(&"a"), Some(late + s(1)));
        assert!(sched.due(late).is_empty());
        assert!(sched.due(late + ms(999)).is_empty());
        assert_eq!(sched.due(late + s(1)), vec!["a"]);
    }

    #[test]
    fn slightly_late_check_does_not_drift() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        sched.insert("a", s(10), base);
        // 300 ms late: the next due time stays on the 10 s grid (client-go would drift to 20.3 s).
        assert_eq!(sched.due(base + ms(10_300)), vec!["a"]);
        assert_eq!(sched.next_due(&"a"), Some(base + s(20)));
        assert_eq!(sched.next_wakeup(), Some(base + s(20)));
    }

    #[test]
    fn next_wakeup_is_the_earliest_due_time() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        assert_eq!(sched.next_wakeup(), None);
        sched.insert("slow", s(3), base);
        sched.insert("never", Duration::ZERO, base);
        assert_eq!(sched.next_wakeup(), Some(base + s(3)));
        sched.insert("fast", s(1), base + ms(100));
        assert_eq!(sched.next_wakeup(), Some(base + ms(1100)));
        assert_eq!(sched.due(base + ms(1100)), vec!["fast"]);
        assert_eq!(sched.next_wakeup(), Some(base + ms(2100)));
        assert_eq!(sched.due(base + ms(2100)), vec!["fast"]);
        assert_eq!(sched.next_wakeup(), Some(base + s(3)));
    }

    #[test]
    fn reinsert_reschedules_from_now() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        sched.insert("a", s(5), base);
        assert_eq!(sched.insert("a", s(2), base + s(1)), s(2));
        assert_eq!(sched.len(), 1);
        assert_eq!(sched.next_due(&"a"), Some(base + s(3)));
        assert_eq!(
            sched.insert("a", Duration::ZERO, base + s(2)),
            Duration::ZERO
        );
        assert_eq!(sched.next_wakeup(), None);
    }

    /// The same period again (as asked, or raised to the minimum) keeps the
    /// due time; another period starts from now.
    #[test]
    fn reinsert_with_the_period_in_force_keeps_the_due_time() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        sched.insert("a", s(5), base);
        assert_eq!(sched.insert("a", s(5), base + s(4)), s(5));
        assert_eq!(sched.next_due(&"a"), Some(base + s(5)));
        sched.insert("b", ms(10), base);
        sched.insert("b", ms(500), base + ms(700));
        assert_eq!(
            sched.next_due(&"b"),
            Some(base + s(1)),
            "both raised to 1 s"
        );
        sched.insert("a", s(6), base + s(4));
        assert_eq!(sched.next_due(&"a"), Some(base + s(10)));
    }

    #[test]
    fn huge_period_never_panics() {
        let base = Instant::now();
        let mut sched = ResyncSchedule::new();
        assert_eq!(sched.insert("a", Duration::MAX, base), Duration::MAX);
        assert_eq!(sched.next_wakeup(), None);
        assert!(sched.due(base + s(1_000_000)).is_empty());
    }
}
