//! What an elector tells the service that runs it ([`LeaderEvent`]), what
//! ends it ([`StopMode`]), and how it ended ([`Finished`], [`StopOutcome`]).

use std::time::Instant;

/// A change of leadership, as this elector saw it (LE-10). `at` is the
/// local monotonic time (tokio's clock) of the step that made the change;
/// the leadership `watch` channel flips in the same step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderEvent {
    /// This elector acquired the Lease (or renewed it after having stepped down).
    BecameLeader {
        /// When.
        at: Instant,
    },
    /// This elector stopped leading; its work must stop (there is no
    /// fencing: work done by a leader must be idempotent, LE-7).
    SteppedDown {
        /// When.
        at: Instant,
        /// Why.
        reason: StepDownReason,
    },
    /// The Lease names a holder other than the one last reported, this
    /// elector included (the first holder seen is reported too).
    NewLeader {
        /// The holder's identity.
        identity: String,
        /// When it was observed.
        at: Instant,
    },
}

/// Why a leader stepped down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDownReason {
    /// No renew succeeded within the renew deadline (LE-7).
    RenewDeadline,
    /// The Lease names another holder (LE-6).
    LeaseTaken {
        /// Its identity.
        by: String,
    },
    /// The Lease was deleted: anyone may create it and lead (LE-6).
    LeaseDeleted,
    /// A graceful stop: the Lease is released next (LE-8).
    Stopped,
    /// A stop without release: the Lease stays held until it expires (LE-8).
    Abandoned,
}

/// How a stop is to end an election (sent once to the elector's task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Step down, then clear the holder so a successor takes over at once
    /// (client-go's `ReleaseOnCancel`).
    Release,
    /// Step down and leave the Lease as it is: others take over once it
    /// expires, as after a crash.
    Abandon,
}

/// How an election ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The holder was cleared.
    Released,
    /// The Lease did not name this elector: nothing to release.
    NotHolding,
    /// Stopped without release ([`StopMode::Abandon`]).
    Abandoned,
    /// The release did not succeed within the renew deadline.
    ReleaseFailed {
        /// The last failure.
        reason: String,
    },
}

/// What a graceful stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// This elector held the Lease and cleared its holder.
    Released,
    /// The Lease did not name this elector.
    NotHolding,
}
