//! The Reflector's counters, readable from any thread while it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::failure::Failure;
use super::last_failure::LastFailure;
use super::state::WatchEnd;
use super::warm_start::WarmStartCell;

/// Live counters of the Reflector, readable from any thread.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Lists made (the first one included).
    pub lists: AtomicU64,
    /// Lists made after the first one.
    pub relists: AtomicU64,
    /// Watches opened after the first one.
    pub watch_restarts: AtomicU64,
    /// Watch events received (bookmarks included).
    pub events: AtomicU64,
    /// Failures, any kind.
    pub failures: AtomicU64,
    /// Panics caught in the list-watch loop.
    pub panics: AtomicU64,
    /// Objects skipped because the transform panicked on them.
    pub transform_panics: AtomicU64,
    /// Objects received by the list in progress, and the total the server announced.
    pub list_progress: AtomicU64,
    /// The total the server announced for the list in progress (0 when unknown).
    pub list_total: AtomicU64,
    /// Total milliseconds spent in backoff waits.
    pub backoff_ms: AtomicU64,
    /// Probes of a server that did not answer, made while a backoff waited.
    pub probes: AtomicU64,
    /// Watches that ended or failed to open, by [`WatchEndReason`] (indexed by `as usize`).
    pub watch_ends: [AtomicU64; WatchEndReason::ALL.len()],
    /// The last failed request since the last successful list (give the same
    /// `Arc` to the [`ListWatch`](super::ListWatch) as its `failures`).
    pub last_failure: Arc<LastFailure>,
    /// Whether a snapshot was restored, and what became of it.
    pub warm_start: WarmStartCell,
    /// Objects restored from the snapshot.
    pub restored_objects: AtomicU64,
    /// Milliseconds the snapshot took to read and hand to the DeltaFIFO.
    pub restore_ms: AtomicU64,
}

/// Why a watch ended or could not be opened (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEndReason {
    /// The server closed it cleanly (timeout, or on purpose).
    Closed,
    /// 410 Gone / Expired (history compacted).
    Expired,
    /// 429 Too Many Requests.
    Throttled,
    /// Connection refused.
    Refused,
    /// No answer: the connection was reset or closed, or the request timed out.
    Transport,
    /// A line that could not be decoded.
    Malformed,
    /// Any other error.
    Other,
}

impl WatchEndReason {
    /// Every reason, in index order.
    pub const ALL: [WatchEndReason; 7] = [
        WatchEndReason::Closed,
        WatchEndReason::Expired,
        WatchEndReason::Throttled,
        WatchEndReason::Refused,
        WatchEndReason::Transport,
        WatchEndReason::Malformed,
        WatchEndReason::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEndReason::Closed => "closed",
            WatchEndReason::Expired => "expired",
            WatchEndReason::Throttled => "throttled",
            WatchEndReason::Refused => "refused",
            WatchEndReason::Transport => "transport",
            WatchEndReason::Malformed => "malformed",
            WatchEndReason::Other => "other",
        }
    }

    pub(crate) fn of_failure(failure: &Failure) -> Self {
        match failure {
            Failure::Expired | Failure::TooLargeResourceVersion => WatchEndReason::Expired,
            Failure::TooManyRequests { .. } => WatchEndReason::Throttled,
            Failure::ConnectionRefused => WatchEndReason::Refused,
            Failure::Transport => WatchEndReason::Transport,
            Failure::Malformed => WatchEndReason::Malformed,
            Failure::Unsupported | Failure::NotAcceptable | Failure::Other => WatchEndReason::Other,
        }
    }

    pub(crate) fn of_end(end: &WatchEnd) -> Self {
        match end {
            WatchEnd::Closed => WatchEndReason::Closed,
            WatchEnd::Failed(f) => Self::of_failure(f),
        }
    }
}

impl ReflectorStats {
    pub(crate) fn watch_ended(&self, reason: WatchEndReason) {
        self.watch_ends[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `watch_ends` is indexed by `reason as usize`, and metrics iterate
    /// `ALL`: each reason in `ALL` sits at its own index, and the last
    /// variant closes it (a reason added at the end must be added to `ALL`).
    #[test]
    fn every_watch_end_reason_is_listed_at_its_index() {
        for (i, reason) in WatchEndReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i, "{reason:?}");
        }
        assert_eq!(
            WatchEndReason::ALL.last().copied(),
            Some(WatchEndReason::Other)
        );
    }
}
