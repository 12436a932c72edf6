//! How long a Lease lasts, how long a leader keeps trying to renew it, and
//! how often candidates try (LE-1, LE-2): client-go's `LeaderElectionConfig`
//! durations, with its defaults and its checks.

use std::time::Duration;

use super::error::TimingsError;

/// client-go's `JitterFactor`: a candidate waits `retry_period · (1 + 1.2·r)`,
/// `r` uniform in `[0, 1)`, between tries (LE-2), and the renew deadline must
/// exceed `1.2 · retry_period` (LE-1).
pub const JITTER_FACTOR: f64 = 1.2;

/// The three durations of an election (LE-1). Defaults: client-go's core
/// clients' 15 s, 10 s and 2 s.
///
/// Every elector of one Lease should use the same timings: others judge a
/// Lease's expiry by the `leaseDurationSeconds` its holder wrote (LE-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionTimings {
    /// How long others wait, after they last saw the Lease change, before
    /// they may take it (written as the Lease's `leaseDurationSeconds`, so a
    /// whole number of seconds).
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renew, counted
    /// from when it sent the last one that succeeded (LE-7). Shorter than
    /// `lease_duration`: the difference is the margin by which a leader that
    /// cannot renew stops before anyone else can start.
    pub renew_deadline: Duration,
    /// The leader renews this often; candidates try this often, jittered
    /// (LE-2).
    pub retry_period: Duration,
}

impl Default for ElectionTimings {
    fn default() -> Self {
        ElectionTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ElectionTimings {
    /// Checks client-go's rules (LE-1): every duration positive, the lease
    /// duration a whole number of seconds (at most `i32::MAX`), the renew
    /// deadline shorter than the lease duration and longer than
    /// `JITTER_FACTOR · retry_period`.
    pub fn validate(&self) -> Result<(), TimingsError> {
        let ElectionTimings {
            lease_duration,
            renew_deadline,
            retry_period,
        } = *self;
        for (name, value) in [
            ("lease duration", lease_duration),
            ("renew deadline", renew_deadline),
            ("retry period", retry_period),
        ] {
            if value.is_zero() {
                return Err(TimingsError::Zero { name });
            }
        }
        if lease_duration.subsec_nanos() != 0 || i32::try_from(lease_duration.as_secs()).is_err() {
            return Err(TimingsError::LeaseNotWholeSeconds { lease_duration });
        }
        if renew_deadline >= lease_duration {
            return Err(TimingsError::RenewNotBeforeExpiry {
                renew_deadline,
                lease_duration,
            });
        }
        if renew_deadline <= retry_period.mul_f64(JITTER_FACTOR) {
            return Err(TimingsError::RetryTooLong {
                retry_period,
                renew_deadline,
            });
        }
        Ok(())
    }

    /// The Lease's `leaseDurationSeconds` (valid once [`validate`](Self::validate) passed).
    pub fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// How long one request to the API server may take before it counts as
    /// failed: half the renew deadline, so a leader whose request hangs still
    /// has time for another before its deadline.
    pub fn request_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }

    /// The longest wait between a candidate's tries: `(1 + JITTER_FACTOR) · retry_period`.
    pub fn max_retry_wait(&self) -> Duration {
        self.retry_period.mul_f64(1.0 + JITTER_FACTOR)
    }
}
