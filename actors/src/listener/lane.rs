//! The resync lane of one listener: resync notifications wait here, apart
//! from real changes, and go out only when no real change is pending.
//!
//! A resync sweep replays the whole cache. Queued in line with real changes,
//! a sweep of 100k objects put every real event behind hundreds of replays
//! (p99 of real events 14× its baseline during sweeps, BENCHMARKS.md). In a
//! lane of their own they never delay a real change. Per key, order must still hold:
//! the subscriber may never see a state older than one it already saw. So
//! when a real change for a key is queued while its resync waits here, the
//! resync is brought up to that change's state (it goes out after it), and a
//! delete drops it (there is nothing left to replay).
//!
//! The lane holds at most one notification per key.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::event::{Cause, Event};
use crate::key::ObjectKey;

/// Pending resync notifications, at most one per key, oldest key first.
pub struct ResyncLane<K> {
    /// Keys in push order, each with the sequence number of its push; an
    /// entry whose number no longer matches `pending` is stale (dropped by a
    /// delete, maybe pushed again since) and skipped.
    order: VecDeque<(u64, ObjectKey)>,
    pending: HashMap<ObjectKey, (u64, Event<K>), foldhash::fast::RandomState>,
    next_seq: u64,
}

/// Stale `order` entries tolerated before it is compacted (beyond `pending.len()`).
const COMPACT_MIN_STALE: usize = 64;

impl<K> Default for ResyncLane<K> {
    fn default() -> Self {
        ResyncLane {
            order: VecDeque::new(),
            pending: HashMap::default(),
            next_seq: 0,
        }
    }
}

impl<K> ResyncLane<K> {
    /// An empty lane.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a resync notification; one already pending for the key is
    /// replaced in place (it keeps its position).
    pub fn push(&mut self, event: Event<K>) {
        if let Some((_, pending)) = self.pending.get_mut(event.key()) {
            *pending = event;
            return;
        }
        let key = event.key().clone();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.insert(key.clone(), (seq, event));
        self.order.push_back((seq, key));
    }

    /// A real change for `event`'s key was queued: the pending resync, if
    /// any, now carries that change's newest state, or goes away on a delete.
    pub fn observe(&mut self, event: &Event<K>) {
        if self.pending.is_empty() {
            return;
        }
        let key = event.key();
        match event {
            Event::Deleted { .. } => {
                if self.pending.remove(key).is_some() {
                    self.compact_if_needed();
                }
            }
            Event::Added { object: latest, .. } | Event::Updated { new: latest, .. } => {
                if let Some((_, pending)) = self.pending.get_mut(key) {
                    *pending = Event::Updated {
                        key: key.clone(),
                        old: Arc::clone(latest).into(),
                        new: Arc::clone(latest),
                        cause: Cause::Resync,
                    };
                }
            }
        }
    }

    /// Drops stale `order` entries once they outnumber the live ones (plus a
    /// margin): with deletes under way and no pops (a busy subscriber),
    /// `order` would otherwise grow with every delete.
    fn compact_if_needed(&mut self) {
        if self.order.len() > 2 * self.pending.len() + COMPACT_MIN_STALE {
            let pending = &self.pending;
            self.order
                .retain(|(seq, key)| pending.get(key).is_some_and(|(s, _)| s == seq));
        }
    }

    /// The oldest pending resync notification.
    pub fn pop(&mut self) -> Option<Event<K>> {
        while let Some((seq, key)) = self.order.pop_front() {
            if self.pending.get(&key).is_some_and(|(s, _)| *s == seq) {
                return self.pending.remove(&key).map(|(_, event)| event);
            }
        }
        None
    }

    /// Notifications pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Drops everything (the subscriber is removed, SI-12).
    pub fn clear(&mut self) {
        self.order.clear();
        self.pending.clear();
    }

    /// Once empty, gives back what a sweep left: a subscriber that was slow
    /// during a resync of 100k objects held one per object, and the lane
    /// would otherwise keep that size for good.
    pub fn release_idle_memory(&mut self) {
        const KEEP: usize = 4096;
        if self.pending.is_empty()
            && (self.order.capacity() > KEEP || self.pending.capacity() > KEEP)
        {
            self.order = VecDeque::new();
            self.pending = HashMap::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::DeletedObject;

    fn resync(key: &str, state: u32) -> Event<u32> {
        let o = Arc::new(state);
        Event::Updated {
            key: key.into(),
            old: o.clone().into(),
            new: o,
            cause: Cause::Resync,
        }
    }

    fn updated(key: &str, from: u32, to: u32) -> Event<u32> {
        Event::Updated {
            key: key.into(),
            old: Arc::new(from).into(),
            new: Arc::new(to),
            cause: Cause::Watch,
        }
    }

    fn state(e: &Event<u32>) -> (String, u32, Cause) {
        (e.key().to_string(), **e.object().unwrap(), e.cause())
    }

    #[test]
    fn an_idle_lane_releases_what_a_sweep_left() {
        let mut lane = ResyncLane::new();
        for i in 0..10_000 {
            lane.push(resync(&format!("k{i}"), 1));
        }
        lane.release_idle_memory();
        assert_eq!(lane.len(), 10_000, "pending: kept");
        while lane.pop().is_some() {}
        lane.release_idle_memory();
        assert!(lane.order.capacity() <= 4096 && lane.pending.capacity() <= 4096);
        lane.push(resync("a", 2));
        assert_eq!(
            lane.pop().map(|e| state(&e)),
            Some(("a".into(), 2, Cause::Resync))
        );
    }

    #[test]
    fn pops_in_push_order_one_per_key() {
        let mut lane = ResyncLane::new();
        lane.push(resync("a", 1));
        lane.push(resync("b", 1));
        lane.push(resync("a", 2));
        assert_eq!(lane.len(), 2);
        assert_eq!(state(&lane.pop().unwrap()), ("a".into(), 2, Cause::Resync));
        assert_eq!(state(&lane.pop().unwrap()), ("b".into(), 1, Cause::Resync));
        assert!(lane.pop().is_none());
        assert!(lane.is_empty());
    }

    #[test]
    fn a_real_change_brings_the_pending_resync_up_to_its_state() {
        let mut lane = ResyncLane::new();
        lane.push(resync("a", 1));
        lane.observe(&updated("a", 1, 2));
        lane.observe(&updated("b", 5, 6));
        let e = lane.pop().unwrap();
        assert_eq!(state(&e), ("a".into(), 2, Cause::Resync));
        match e {
            Event::Updated { old, new, .. } => assert!(old.is(&new)),
            other => panic!("not an update: {other:?}"),
        }
        assert!(lane.pop().is_none(), "no resync appears for b");
    }

    #[test]
    fn a_delete_drops_the_pending_resync_and_a_later_one_queues_again() {
        let mut lane = ResyncLane::new();
        lane.push(resync("a", 1));
        lane.push(resync("b", 1));
        lane.observe(&Event::Deleted {
            key: "a".into(),
            object: DeletedObject::Final(Arc::new(1)),
            cause: Cause::Watch,
        });
        assert_eq!(lane.len(), 1);
        lane.push(resync("a", 7));
        assert_eq!(state(&lane.pop().unwrap()).0, "b");
        assert_eq!(state(&lane.pop().unwrap()), ("a".into(), 7, Cause::Resync));
        assert!(lane.pop().is_none());
    }

    #[test]
    fn deletes_without_pops_do_not_grow_the_order() {
        let mut lane = ResyncLane::new();
        for round in 0..1_000u32 {
            lane.push(resync("a", round));
            lane.observe(&Event::Deleted {
                key: "a".into(),
                object: DeletedObject::Final(Arc::new(round)),
                cause: Cause::Watch,
            });
        }
        lane.push(resync("b", 1));
        assert!(
            lane.order.len() <= COMPACT_MIN_STALE + 2,
            "{}",
            lane.order.len()
        );
        assert_eq!(state(&lane.pop().unwrap()), ("b".into(), 1, Cause::Resync));
        assert!(lane.pop().is_none());
    }

    #[test]
    fn clear_empties_it() {
        let mut lane = ResyncLane::new();
        lane.push(resync("a", 1));
        lane.clear();
        assert!(lane.is_empty());
        assert!(lane.pop().is_none());
    }
}
