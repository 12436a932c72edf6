//! What one subscriber saw: counts per kind of notification, write-to-delivery
//! latencies of timestamped updates, and resync bookkeeping.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::objects::{now_nanos, written_at};
use crate::stats::{Latency, latency_histogram};

/// Per-object resync counts of one subscriber, to check "exactly one resync
/// notification per object per period".
#[derive(Debug)]
pub struct ResyncTracker {
    period_ms: u64,
    counts: Vec<u32>,
    last_ms: Vec<u64>,
    too_close: u64,
    too_far: u64,
}

/// What a [`ResyncTracker`] found.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ResyncCheck {
    /// The subscriber's period in seconds.
    pub period_s: f64,
    /// Fewest resync notifications any tracked object received.
    pub min_per_object: u32,
    /// Most resync notifications any tracked object received.
    pub max_per_object: u32,
    /// Consecutive resyncs of one object less than half a period apart.
    pub duplicates: u64,
    /// Consecutive resyncs of one object more than 1.5 periods apart (a
    /// period skipped for that object).
    pub missed: u64,
    /// Resync notifications in all.
    pub total: u64,
}

impl ResyncTracker {
    /// Tracks objects `0..objects` resynced every `period_ms`.
    pub fn new(objects: usize, period_ms: u64) -> Self {
        ResyncTracker {
            period_ms,
            counts: vec![0; objects],
            last_ms: vec![0; objects],
            too_close: 0,
            too_far: 0,
        }
    }

    /// A resync of object `index` at `now_ms` (ms since the run began).
    pub fn record(&mut self, index: usize, now_ms: u64) {
        let (Some(count), Some(last)) = (self.counts.get_mut(index), self.last_ms.get_mut(index))
        else {
            return;
        };
        if *count > 0 {
            let gap = now_ms.saturating_sub(*last);
            if gap < self.period_ms / 2 {
                self.too_close += 1;
            }
            if gap > self.period_ms + self.period_ms / 2 {
                self.too_far += 1;
            }
        }
        *count += 1;
        *last = now_ms;
    }

    /// The findings so far.
    pub fn check(&self) -> ResyncCheck {
        ResyncCheck {
            period_s: self.period_ms as f64 / 1000.0,
            min_per_object: self.counts.iter().copied().min().unwrap_or(0),
            max_per_object: self.counts.iter().copied().max().unwrap_or(0),
            duplicates: self.too_close,
            missed: self.too_far,
            total: self.counts.iter().map(|&c| u64::from(c)).sum(),
        }
    }
}

/// The counters and latencies of one subscriber.
pub struct Probe {
    recording: AtomicBool,
    begin: Mutex<Option<Instant>>,
    latency: Mutex<Histogram<u64>>,
    /// Latencies of the updates handled while a resync sweep was in progress.
    sweep_latency: Mutex<Histogram<u64>>,
    /// Initial adds (kinformer) or objects before `begin` (kube-runtime).
    pub initial: AtomicU64,
    /// Timestamped updates since `begin`.
    pub stamped: AtomicU64,
    /// Other adds and updates from the watch since `begin`.
    pub other: AtomicU64,
    /// Updates and adds caused by a relist since `begin`.
    pub relisted: AtomicU64,
    /// Deletes since `begin`.
    pub deleted: AtomicU64,
    /// Of which tombstones (final state unknown).
    pub tombstones: AtomicU64,
    /// Resync notifications since `begin`.
    pub resyncs: AtomicU64,
    /// Wall-clock ns of the first and last notification since `begin`.
    pub first_ns: AtomicU64,
    /// See `first_ns`.
    pub last_ns: AtomicU64,
    resync: Option<Mutex<ResyncTracker>>,
    outliers: Mutex<Vec<(u64, u64)>>,
    /// Wall-clock ns when `begin` was called: older write stamps are not this run's.
    begin_wall_ns: AtomicU64,
    /// Non-zero: count-only mode (see [`Probe::count_to`]).
    count_to: u64,
}

/// Wall-clock ns of the last resync notification any subscriber of this
/// process received: an update handled within [`SWEEP_WINDOW_NS`] of it was
/// handled while a resync sweep was in progress.
static LAST_RESYNC_NS: AtomicU64 = AtomicU64::new(0);
/// See [`LAST_RESYNC_NS`].
const SWEEP_WINDOW_NS: u64 = 20_000_000;

/// Latencies above this are kept with their write time (to see when tails happen).
const OUTLIER_US: u64 = 5_000;
/// At most this many outliers are kept per probe.
const MAX_OUTLIERS: usize = 200;

/// A snapshot of a [`Probe`] for the report.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ProbeReport {
    /// Initial adds.
    pub initial: u64,
    /// Timestamped updates since `begin`.
    pub stamped: u64,
    /// Other adds and updates.
    pub other: u64,
    /// Relist notifications.
    pub relisted: u64,
    /// Deletes.
    pub deleted: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// Resync notifications.
    pub resyncs: u64,
    /// Latency of the timestamped updates recorded.
    pub latency: Latency,
    /// Resync check, when tracked.
    pub resync: Option<ResyncCheck>,
}

impl Probe {
    /// A probe; `resync` tracks per-object resyncs of `objects` seeded objects.
    pub fn new(resync: Option<(usize, u64)>) -> Self {
        Probe {
            recording: AtomicBool::new(false),
            begin: Mutex::new(None),
            latency: Mutex::new(latency_histogram()),
            sweep_latency: Mutex::new(latency_histogram()),
            initial: AtomicU64::new(0),
            stamped: AtomicU64::new(0),
            other: AtomicU64::new(0),
            relisted: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            tombstones: AtomicU64::new(0),
            resyncs: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            resync: resync.map(|(n, p)| Mutex::new(ResyncTracker::new(n, p))),
            outliers: Mutex::new(Vec::new()),
            begin_wall_ns: AtomicU64::new(0),
            count_to: 0,
        }
    }

    /// Count-only mode for throughput runs (`n` > 0): a watch update is only
    /// counted, and the clock is read at the first and at the `n`-th, so the
    /// first-to-last time measures the informer rather than this probe (a
    /// clock read, a parse and a histogram per delivery were a third of the
    /// CPU with 100 subscribers, for both informers). No latencies are kept.
    pub fn count_to(mut self, n: u64) -> Self {
        self.count_to = n;
        self
    }

    /// Starts recording: counters (but `initial`) and latencies restart.
    pub fn begin(&self) {
        for c in [
            &self.stamped,
            &self.other,
            &self.relisted,
            &self.deleted,
            &self.tombstones,
            &self.resyncs,
            &self.first_ns,
            &self.last_ns,
        ] {
            c.store(0, Ordering::SeqCst);
        }
        for h in [&self.latency, &self.sweep_latency] {
            if let Ok(mut h) = h.lock() {
                h.reset();
            }
        }
        if let Ok(mut o) = self.outliers.lock() {
            o.clear();
        }
        if let Ok(mut b) = self.begin.lock() {
            *b = Some(Instant::now());
        }
        self.begin_wall_ns.store(now_nanos(), Ordering::SeqCst);
        self.recording.store(true, Ordering::SeqCst);
    }

    /// When recording began.
    pub fn began(&self) -> Option<Instant> {
        self.begin.lock().ok().and_then(|b| *b)
    }

    /// Whether `begin` was called.
    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        let now = now_nanos();
        let _ = self
            .first_ns
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.last_ns.store(now, Ordering::Relaxed);
    }

    /// An add or update from the watch, with the object's annotations: a
    /// timestamped update of this run (written after `begin`) or another one.
    /// The same path for both informers' subscribers.
    pub fn watch_update(&self, annotations: Option<&BTreeMap<String, String>>) {
        if !self.is_recording() {
            return;
        }
        if self.count_to > 0 {
            let n = self.stamped.fetch_add(1, Ordering::Relaxed) + 1;
            if n == 1 {
                self.first_ns.store(now_nanos(), Ordering::Relaxed);
            }
            if n == self.count_to {
                self.last_ns.store(now_nanos(), Ordering::Relaxed);
            }
            return;
        }
        match written_at(annotations) {
            Some(ts) if ts >= self.begin_wall_ns.load(Ordering::Relaxed) => self.stamped(ts),
            _ => self.count(&self.other),
        }
    }

    /// A timestamped update written at `written_ns`.
    pub fn stamped(&self, written_ns: u64) {
        if !self.is_recording() {
            return;
        }
        let now = now_nanos();
        let micros = now.saturating_sub(written_ns) / 1_000;
        if let Ok(mut h) = self.latency.lock() {
            let _ = h.record(micros.max(1));
        }
        if now.saturating_sub(LAST_RESYNC_NS.load(Ordering::Relaxed)) < SWEEP_WINDOW_NS
            && let Ok(mut h) = self.sweep_latency.lock()
        {
            let _ = h.record(micros.max(1));
        }
        if micros > OUTLIER_US
            && let Ok(mut o) = self.outliers.lock()
            && o.len() < MAX_OUTLIERS
        {
            o.push((written_ns, micros));
        }
        self.stamped.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    /// Adds one to `counter` (one of this probe's fields) if recording.
    pub fn count(&self, counter: &AtomicU64) {
        if self.is_recording() {
            counter.fetch_add(1, Ordering::Relaxed);
            self.touch();
        }
    }

    /// A resync notification of seeded object `index`.
    pub fn resync(&self, index: Option<usize>) {
        if !self.is_recording() {
            return;
        }
        self.resyncs.fetch_add(1, Ordering::Relaxed);
        LAST_RESYNC_NS.store(now_nanos(), Ordering::Relaxed);
        if let (Some(tracker), Some(index), Some(begin)) = (&self.resync, index, self.began())
            && let Ok(mut t) = tracker.lock()
        {
            t.record(index, begin.elapsed().as_millis() as u64);
        }
    }

    /// Latencies above 5 ms: (write time in wall-clock ns, latency in µs), the first 200.
    pub fn outliers(&self) -> Vec<(u64, u64)> {
        self.outliers.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// A copy of the histogram of updates handled during resync sweeps.
    pub fn sweep_histogram(&self) -> Histogram<u64> {
        self.sweep_latency
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|_| latency_histogram())
    }

    /// A copy of the latency histogram.
    pub fn histogram(&self) -> Histogram<u64> {
        self.latency
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|_| latency_histogram())
    }

    /// The report.
    pub fn report(&self) -> ProbeReport {
        let r = |c: &AtomicU64| c.load(Ordering::SeqCst);
        ProbeReport {
            initial: r(&self.initial),
            stamped: r(&self.stamped),
            other: r(&self.other),
            relisted: r(&self.relisted),
            deleted: r(&self.deleted),
            tombstones: r(&self.tombstones),
            resyncs: r(&self.resyncs),
            latency: Latency::of(&self.histogram()),
            resync: self
                .resync
                .as_ref()
                .and_then(|t| t.lock().ok().map(|t| t.check())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resync_tracker_counts_and_flags_duplicates() {
        let mut t = ResyncTracker::new(3, 1_000);
        for i in 0..3 {
            t.record(i, 1_000);
            t.record(i, 2_000);
        }
        t.record(1, 2_100);
        t.record(2, 3_600);
        t.record(99, 0);
        let c = t.check();
        assert_eq!((c.min_per_object, c.max_per_object), (2, 3));
        assert_eq!((c.duplicates, c.missed, c.total), (1, 1, 8));
    }

    #[test]
    fn probe_records_only_after_begin() {
        let p = Probe::new(None);
        p.stamped(now_nanos());
        assert_eq!(p.report().stamped, 0);
        p.begin();
        p.stamped(now_nanos().saturating_sub(2_000_000));
        p.count(&p.deleted);
        let r = p.report();
        assert_eq!((r.stamped, r.deleted), (1, 1));
        assert!(r.latency.p50_us >= 1_900.0, "{r:?}");
    }

    fn stamp(ns: u64) -> BTreeMap<String, String> {
        BTreeMap::from([(crate::objects::TS_ANNOTATION.to_string(), ns.to_string())])
    }

    #[test]
    fn watch_update_keeps_only_this_runs_stamps() {
        let p = Probe::new(None);
        let old = stamp(now_nanos().saturating_sub(60_000_000_000));
        p.begin();
        p.watch_update(Some(&old));
        p.watch_update(None);
        p.watch_update(Some(&stamp(now_nanos())));
        let r = p.report();
        assert_eq!((r.stamped, r.other), (1, 2), "{r:?}");
    }

    #[test]
    fn count_only_probe_times_first_and_nth_update() {
        let p = Probe::new(None).count_to(3);
        p.watch_update(None);
        assert_eq!(p.report().stamped, 0, "nothing counts before begin");
        p.begin();
        p.watch_update(None);
        let first = p.first_ns.load(Ordering::SeqCst);
        assert!(first > 0);
        p.watch_update(None);
        assert_eq!(
            p.last_ns.load(Ordering::SeqCst),
            0,
            "the last time waits for the 3rd"
        );
        p.watch_update(None);
        let r = p.report();
        assert_eq!((r.stamped, r.latency.count), (3, 0), "{r:?}");
        assert!(p.last_ns.load(Ordering::SeqCst) >= first);
    }
}
