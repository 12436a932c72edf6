//! The priority of a queued key, from the cause of the event that named it (PQ-1).

use crate::Cause;

/// How urgently a queued key should be handed out (PQ-2): higher first, first
/// come first served within a priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Nothing changed that the controller has not seen: the initial list
    /// (after a restart, every object) and resyncs.
    Low,
    /// A real change: a watch event, or a change found by a relist.
    #[default]
    Normal,
}

impl Priority {
    /// The priority of a key named by an event of this cause (PQ-1).
    pub fn of(cause: Cause) -> Self {
        match cause {
            Cause::Initial | Cause::Restored | Cause::Resync => Priority::Low,
            Cause::Watch | Cause::Relist => Priority::Normal,
        }
    }
}

impl From<Cause> for Priority {
    fn from(cause: Cause) -> Self {
        Priority::of(cause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pq_1_initial_and_resync_are_low_real_changes_normal() {
        assert_eq!(Priority::of(Cause::Initial), Priority::Low);
        assert_eq!(Priority::of(Cause::Resync), Priority::Low);
        assert_eq!(Priority::of(Cause::Watch), Priority::Normal);
        assert_eq!(Priority::of(Cause::Relist), Priority::Normal);
        assert!(Priority::Normal > Priority::Low);
    }
}
