//! The errors of leader election.

use std::time::Duration;

/// Why [`ElectionTimings`](super::ElectionTimings) were refused (LE-1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingsError {
    /// A duration is zero.
    #[error("the {name} must be greater than zero")]
    Zero {
        /// Which one.
        name: &'static str,
    },
    /// The lease duration is written as the Lease's `leaseDurationSeconds`.
    #[error(
        "the lease duration must be a whole number of seconds (at most i32::MAX), not {lease_duration:?}"
    )]
    LeaseNotWholeSeconds {
        /// What was given.
        lease_duration: Duration,
    },
    /// A leader must stop before others may take over.
    #[error(
        "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})"
    )]
    RenewNotBeforeExpiry {
        /// What was given.
        renew_deadline: Duration,
        /// What was given.
        lease_duration: Duration,
    },
    /// A leader must have time for more than one jittered retry before its deadline.
    #[error(
        "the renew deadline ({renew_deadline:?}) must be longer than 1.2 × the retry period ({retry_period:?})"
    )]
    RetryTooLong {
        /// What was given.
        retry_period: Duration,
        /// What was given.
        renew_deadline: Duration,
    },
}

/// Why a leader elector could not start, or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderError {
    /// The timings break client-go's rules.
    #[error("leader election timings: {0}")]
    Timings(#[from] TimingsError),
    /// No identity was given, `POD_NAME` is unset and the host name is unreadable.
    #[error("no identity for leader election: set one, or POD_NAME, or a readable host name")]
    NoIdentity,
    /// An identity or Lease name that is empty.
    #[error("the {what} must not be empty")]
    Empty {
        /// `identity` or `lease name`.
        what: &'static str,
    },
    /// `start` was called outside a tokio runtime.
    #[error("a leader elector must be started inside a tokio runtime (actix's included)")]
    NoRuntime,
    /// The graceful stop could not clear the holder within the renew
    /// deadline; others take over once the Lease expires.
    #[error("the Lease was not released: {reason}")]
    ReleaseFailed {
        /// The last failure.
        reason: String,
    },
    /// The elector's task panicked or was cancelled (its runtime shut down).
    #[error("the leader elector's task ended abnormally: {0}")]
    Task(String),
}
