//! Whether one subscriber has synced: client-go's `SingleFileTracker` (HS-1, HS-2).
//!
//! A subscriber has synced once the informer has synced **and** every
//! initial-list `Added` handed to its listener has been handled (HS-2). The
//! listener calls [`SyncTracker::start`] for each initial `Added` it queues
//! (SI-18 `add`), [`SyncTracker::finish`] when the subscriber has handled one,
//! or when its queue merged one away ([`Pushed::dropped_initial`](super::Pushed)),
//! and [`SyncTracker::upstream_synced`] when the informer reports synced.
//! [`SyncTracker::has_synced`] latches true (HS-1).
//!
//! Deliberate deviations from client-go:
//! * An extra `finish` (more finishes than starts) panics in client-go
//!   ("synctrack: negative counter", HS-T3). Here it is an error value,
//!   [`SyncError::NegativeCounter`]; the counter stays at 0 and a synced
//!   tracker stays synced.
//! * A plain struct owned by the listener actor, not an atomic shared by
//!   goroutines: no `Done()` channel; the owner asks [`SyncTracker::has_synced`].
//! * The multi-worker `AsyncTracker` (HS-3) and `Lazy` (HS-4) are not needed by
//!   a single-consumer listener and are not ported.
//! * Whether a subscriber whose handler fails on an initial `Added` still
//!   syncs (client-go: never, HS-2 / k8s#129024) is decided by the listener:
//!   it must call `finish` for every initial `Added` it delivered, failed or not.

/// A misuse of the tracker, reported instead of client-go's panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    /// More `finish` calls than `start` calls; `extra` is how many more.
    #[error("synctrack: negative counter: {extra} more finish() than start() calls")]
    NegativeCounter {
        /// The unmatched finishes.
        extra: usize,
    },
}

/// The sync state of one subscriber (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncTracker {
    pending: usize,
    upstream_synced: bool,
    synced: bool,
}

impl SyncTracker {
    /// A tracker with nothing started, upstream not synced.
    pub fn new() -> Self {
        Self::default()
    }

    /// One more initial-list `Added` handed to the listener (HS-1 `Start`).
    pub fn start(&mut self) {
        self.start_many(1);
    }

    /// `n` more initial-list `Added`s handed to the listener at once (a replay).
    pub fn start_many(&mut self, n: usize) {
        self.pending += n;
    }

    /// One initial `Added` handled or dropped (HS-1 `Finished`). More finishes
    /// than starts is an error; the counter stays at 0.
    pub fn finish(&mut self) -> Result<(), SyncError> {
        self.finish_many(1)
    }

    /// `n` initial `Added`s handled or dropped at once (e.g. a queue's
    /// `dropped_initial`). On error the matched ones are still finished.
    pub fn finish_many(&mut self, n: usize) -> Result<(), SyncError> {
        let matched = n.min(self.pending);
        self.pending -= matched;
        self.latch();
        match n - matched {
            0 => Ok(()),
            extra => {
                tracing::warn!(
                    extra,
                    "sync tracker finished more initial adds than started"
                );
                Err(SyncError::NegativeCounter { extra })
            }
        }
    }

    /// The informer has synced (HS-1 `UpstreamHasSynced`).
    pub fn upstream_synced(&mut self) {
        self.upstream_synced = true;
        self.latch();
    }

    /// True once upstream synced with no initial `Added` pending; stays true.
    pub fn has_synced(&self) -> bool {
        self.synced
    }

    /// Initial `Added`s started and not yet finished.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// True once [`SyncTracker::upstream_synced`] was called.
    pub fn is_upstream_synced(&self) -> bool {
        self.upstream_synced
    }

    fn latch(&mut self) {
        if self.upstream_synced && self.pending == 0 {
            self.synced = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row of client-go's `TestBasicLogic` / `TestSingleFile`.
    struct Row {
        upstream_synced: bool,
        synced_before_finish: bool,
        starts: usize,
        finishes: usize,
        expect_synced: bool,
    }

    /// The truth table of spec 3.9 HS-T1 / HS-T4, with counts.
    fn table(n: usize) -> Vec<Row> {
        let row = |upstream_synced, synced_before_finish, start: bool, finish: bool, expect| Row {
            upstream_synced,
            synced_before_finish,
            starts: if start { n } else { 0 },
            finishes: if finish { n } else { 0 },
            expect_synced: expect,
        };
        vec![
            row(false, false, true, true, false),
            row(true, false, true, false, false),
            row(true, true, true, false, false),
            row(false, false, true, false, false),
            row(true, false, true, true, true),
            row(true, true, true, true, true),
        ]
    }

    /// Runs one row, checking that the tracker is not synced at any step
    /// before the last; returns the final state.
    fn run(row: &Row) -> bool {
        let mut t = SyncTracker::new();
        assert!(!t.has_synced(), "synced before start");
        for _ in 0..row.starts {
            t.start();
        }
        assert!(!t.has_synced(), "synced after start");
        if row.upstream_synced && row.synced_before_finish {
            t.upstream_synced();
            assert!(!t.has_synced(), "synced after upstream, before finish");
        }
        for _ in 0..row.finishes {
            t.finish().unwrap();
        }
        if row.upstream_synced && !row.synced_before_finish {
            assert!(!t.has_synced(), "synced after finish, before upstream");
            t.upstream_synced();
        }
        t.has_synced()
    }

    #[test]
    fn hs_t1_basic_logic() {
        for (i, row) in table(1).iter().enumerate() {
            assert_eq!(run(row), row.expect_synced, "row {i}");
        }
    }

    #[test]
    fn hs_t4_single_file() {
        for n in [1, 2, 7] {
            for (i, row) in table(n).iter().enumerate() {
                assert_eq!(run(row), row.expect_synced, "row {i} with {n} starts");
            }
        }
    }

    #[test]
    fn hs_t3_single_file_counting() {
        let mut t = SyncTracker::new();
        for _ in 0..100 {
            t.start();
        }
        assert!(!t.has_synced());
        for _ in 0..99 {
            t.finish().unwrap();
        }
        assert!(!t.has_synced());
        assert_eq!(t.pending(), 1);
        t.finish().unwrap();
        t.upstream_synced();
        assert!(t.has_synced());
        // client-go panics here; kinformer returns an error and stays synced.
        let err = t.finish().unwrap_err();
        assert_eq!(err, SyncError::NegativeCounter { extra: 1 });
        assert!(err.to_string().contains("negative counter"));
        assert!(t.has_synced());
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn no_initial_adds_syncs_with_upstream() {
        let mut t = SyncTracker::new();
        assert!(!t.has_synced());
        t.upstream_synced();
        assert!(t.has_synced());
        assert!(t.is_upstream_synced());
    }

    #[test]
    fn synced_is_latched_across_later_starts() {
        let mut t = SyncTracker::new();
        t.start();
        t.upstream_synced();
        assert!(!t.has_synced());
        t.finish().unwrap();
        assert!(t.has_synced());
        t.start();
        assert!(t.has_synced(), "HS-1: once synced, stays synced");
        assert_eq!(t.pending(), 1);
    }

    #[test]
    fn finish_many_counts_dropped_initial_adds() {
        let mut t = SyncTracker::new();
        for _ in 0..3 {
            t.start();
        }
        t.upstream_synced();
        t.finish_many(2).unwrap();
        assert!(!t.has_synced());
        t.finish_many(0).unwrap();
        assert!(!t.has_synced());
        assert_eq!(
            t.finish_many(3),
            Err(SyncError::NegativeCounter { extra: 2 })
        );
        assert!(t.has_synced(), "the matched finish still counts");
        assert_eq!(t.pending(), 0);
    }

    #[test]
    fn extra_finish_before_upstream_does_not_sync() {
        let mut t = SyncTracker::new();
        assert!(t.finish().is_err());
        assert!(!t.has_synced());
        t.start();
        assert_eq!(
            t.pending(),
            1,
            "the error left the counter at 0, not negative"
        );
        t.upstream_synced();
        assert!(!t.has_synced());
        t.finish().unwrap();
        assert!(t.has_synced());
    }
}
