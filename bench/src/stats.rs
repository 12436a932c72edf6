//! Medians and spreads over repetitions, and latency percentiles.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One metric over several repetitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// Repetitions.
    pub n: usize,
}

impl Summary {
    /// The summary of `values` (NaNs are ignored; empty gives zeros).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        }
    }
}

/// A latency histogram in microseconds, 1 µs to 1 h, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    // Constant, valid bounds: this cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// Percentiles of a latency histogram, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Latency {
    /// The percentiles of `h`.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50) as f64,
            p99_us: h.value_at_quantile(0.99) as f64,
            p999_us: h.value_at_quantile(0.999) as f64,
            max_us: h.max() as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_median_and_spread() {
        let s = Summary::of([3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Summary::of([1.0, 2.0, 3.0, 10.0]).median, 2.5);
        assert_eq!(Summary::of(Vec::new()), Summary::default());
    }

    #[test]
    fn latency_percentiles() {
        let mut h = latency_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 1000);
        assert!((l.p50_us - 500.0).abs() <= 1.0, "{l:?}");
        assert!((l.p99_us - 990.0).abs() <= 1.0, "{l:?}");
    }
}
