//! The bounded ring of write events: watch replay, Exact lists and continue tokens read it.
//!
//! Pure data structure: no locking, no I/O, no clock.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use crate::object::ObjectRecord;

/// What a write did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Updated or patched.
    Modified,
    /// Deleted.
    Deleted,
}

impl EventKind {
    /// Watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One write, at one resourceVersion.
#[derive(Debug)]
pub struct Event {
    /// The global resourceVersion of this write.
    pub rv: u64,
    /// Index of the resource type in the registry.
    pub resource: usize,
    /// What happened.
    pub kind: EventKind,
    /// The object after the write (for `Deleted`, its final state stamped with `rv`).
    pub object: Arc<ObjectRecord>,
    /// The object before the write (`None` for `Added`).
    pub prev: Option<Arc<ObjectRecord>>,
    /// `prev` re-stamped with `rv`, built once on first need: the real server sends this
    /// as the DELETED object when an update moves an object out of a watcher's selector.
    prev_at_rv: OnceLock<Option<Arc<ObjectRecord>>>,
}

impl Event {
    /// A new event.
    pub fn new(
        rv: u64,
        resource: usize,
        kind: EventKind,
        object: Arc<ObjectRecord>,
        prev: Option<Arc<ObjectRecord>>,
    ) -> Self {
        Event {
            rv,
            resource,
            kind,
            object,
            prev,
            prev_at_rv: OnceLock::new(),
        }
    }

    /// The previous version stamped with this event's RV (shared by all watchers).
    pub fn prev_at_rv(&self) -> Option<Arc<ObjectRecord>> {
        self.prev_at_rv
            .get_or_init(|| {
                self.prev
                    .as_ref()
                    .and_then(|p| p.restamped(self.rv).ok())
                    .map(Arc::new)
            })
            .clone()
    }
}

/// A start resourceVersion older than the retained history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    /// The oldest resourceVersion still served.
    pub oldest: u64,
}

/// Bounded ring of events with contiguous resourceVersions `(compacted, newest]`.
#[derive(Debug)]
pub struct History {
    events: VecDeque<Arc<Event>>,
    limit: usize,
    compacted: u64,
}

impl History {
    /// An empty ring keeping at most `limit` events; `start_rv` is the RV history starts after.
    pub fn new(limit: usize, start_rv: u64) -> Self {
        History {
            events: VecDeque::with_capacity(limit.min(1 << 16)),
            limit,
            compacted: start_rv,
        }
    }

    /// Append an event (its RV must be above every retained one); drops the oldest beyond the limit.
    pub fn push(&mut self, event: Arc<Event>) {
        self.events.push_back(event);
        while self.events.len() > self.limit {
            if let Some(old) = self.events.pop_front() {
                self.compacted = old.rv;
            }
        }
    }

    /// Forget everything up to `rv` (the "compact" fault): older start points then get 410.
    pub fn compact(&mut self, rv: u64) {
        while self.events.front().is_some_and(|e| e.rv <= rv) {
            self.events.pop_front();
        }
        self.compacted = self.compacted.max(rv);
    }

    /// RVs at or above this are still complete in history.
    pub fn compacted_rv(&self) -> u64 {
        self.compacted
    }

    /// The oldest RV a client can still start from (events strictly after
    /// it are all kept), as shown in "too old resource version: N (M)": the
    /// real server prints the same, its watch cache's oldest event less one.
    pub fn oldest_available(&self) -> u64 {
        self.compacted
    }

    /// Number of retained events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no events are retained.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Events with RV strictly above `rv`, or `TooOld` when some of them are gone.
    pub fn since(&self, rv: u64) -> Result<impl Iterator<Item = &Arc<Event>>, TooOld> {
        if rv < self.compacted {
            return Err(TooOld {
                oldest: self.oldest_available(),
            });
        }
        let start = self.events.partition_point(|e| e.rv <= rv);
        Ok(self.events.range(start..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::ObjKey;

    fn ev(rv: u64) -> Arc<Event> {
        let obj = Arc::new(ObjectRecord::from_rendered(
            ObjKey::new("ns", "a"),
            String::new(),
            rv,
            Default::default(),
            b"{}".to_vec(),
        ));
        Arc::new(Event::new(rv, 0, EventKind::Modified, obj, None))
    }

    #[test]
    fn bounded_and_reports_too_old() {
        let mut h = History::new(3, 0);
        for rv in 1..=5 {
            h.push(ev(rv));
        }
        assert_eq!(h.len(), 3);
        assert_eq!(h.compacted_rv(), 2);
        let rvs: Vec<u64> = h.since(2).unwrap().map(|e| e.rv).collect();
        assert_eq!(rvs, vec![3, 4, 5]);
        let rvs: Vec<u64> = h.since(4).unwrap().map(|e| e.rv).collect();
        assert_eq!(rvs, vec![5]);
        assert_eq!(h.since(5).unwrap().count(), 0);
        // The message names the lowest RV a watch may start from: 2.
        assert_eq!(h.since(1).err(), Some(TooOld { oldest: 2 }));
    }

    #[test]
    fn compaction_forgets_everything_up_to_rv() {
        let mut h = History::new(10, 0);
        for rv in 1..=5 {
            h.push(ev(rv));
        }
        h.compact(5);
        assert!(h.is_empty());
        assert!(h.since(4).is_err());
        assert_eq!(h.since(5).unwrap().count(), 0);
        h.push(ev(6));
        assert_eq!(h.since(5).unwrap().count(), 1);
    }

    #[test]
    fn memory_stays_bounded_under_churn() {
        let mut h = History::new(100, 0);
        for rv in 1..=100_000 {
            h.push(ev(rv));
        }
        assert_eq!(h.len(), 100);
        assert_eq!(h.oldest_available(), 99_900);
        assert!(h.since(99_900).is_ok() && h.since(99_899).is_err());
    }
}
