//! Workqueue metrics (WQ-7): client-go's names and meanings, computed by the
//! pure queue from the times passed in, read as a [`QueueMetrics`] snapshot.

use std::time::Duration;

/// Upper bounds (seconds) of the duration histograms: client-go's and
/// controller-runtime's workqueue buckets, `ExponentialBuckets(10e-9, 10, 12)`
/// (10 ns to 1000 s), plus the implicit `+Inf`.
pub const DURATION_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

/// A Prometheus-style histogram of durations in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); one more than `bounds`: the
    /// last counts those above every bound (`+Inf`).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (increasing upper bounds, seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one duration.
    pub fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        let bucket = self.bounds.partition_point(|&b| b < secs);
        self.counts[bucket] += 1;
        self.sum += secs;
        self.count += 1;
    }

    /// How many durations were recorded (`_count`).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Their sum in seconds (`_sum`).
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// `(upper bound, observations ≤ bound)` per bucket, cumulative as
    /// Prometheus' `_bucket{le}` series; the last bound is `f64::INFINITY`.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        let mut total = 0;
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        bounds.zip(&self.counts).map(move |(bound, n)| {
            total += n;
            (bound, total)
        })
    }
}

/// One queue's metrics at one moment. Field docs give client-go's Prometheus
/// names (component-base's `workqueue` subsystem, label `name`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueMetrics {
    /// The queue's name (the `name` label).
    pub name: String,
    /// `workqueue_depth`: keys waiting to be handed out, those re-added
    /// while processing included (client-go's counter; `len` excludes them).
    pub depth: usize,
    /// `workqueue_adds_total`: adds that marked a key dirty (an add of a key
    /// already waiting to be handed out does not count).
    pub adds: u64,
    /// `workqueue_queue_duration_seconds`: from the add that marked a key
    /// dirty to the moment it was handed out. A delayed key counts from the
    /// end of its delay.
    pub queue_duration: Histogram,
    /// `workqueue_work_duration_seconds`: from hand-out to `done`.
    pub work_duration: Histogram,
    /// `workqueue_unfinished_work_seconds`: the time the keys being processed
    /// have been processed so far, summed.
    pub unfinished_work_seconds: f64,
    /// `workqueue_longest_running_processor_seconds`: the longest of those.
    pub longest_running_processor_seconds: f64,
    /// `workqueue_retries_total`: delayed adds (DQ-1), rate-limited ones included.
    pub retries: u64,
    /// Keys waiting for a delay or a backoff (not in client-go, whose
    /// `delayed_items` gauge is still a proposal).
    pub waiting: usize,
    /// Keys being processed.
    pub processing: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_accumulate() {
        let mut h = Histogram::new(DURATION_BUCKETS);
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(1));
        h.observe(Duration::from_secs(5000));
        assert_eq!(h.count(), 3);
        assert!((h.sum() - 5000.00105).abs() < 1e-9);
        let c: Vec<_> = h.cumulative().collect();
        assert_eq!(c.len(), DURATION_BUCKETS.len() + 1);
        // 50 µs ≤ 1e-4; 1 ms ≤ 1e-3 (bounds are inclusive); 5000 s only in +Inf.
        assert_eq!(c[3], (1e-5, 0));
        assert_eq!(c[4], (1e-4, 1));
        assert_eq!(c[5], (1e-3, 2));
        assert_eq!(c[11], (1000.0, 2));
        assert_eq!(c[12], (f64::INFINITY, 3));
    }
}
