//! The last known state of deleted primary objects, shared by the primary
//! feeder (which records deletes) and the workers (which read it and clear
//! it once a reconcile of the deleted key succeeds); CTL-9 and CTL-11.
//!
//! A delete of a key this replica owns is kept until a reconcile of it
//! succeeds. A delete of a key it does not own (a standby, another shard's)
//! is kept too, for a while: if the key comes to this replica before then
//! (a failover, a shard move), the delete is handed over with the key and
//! reconciled here, where otherwise nobody would reconcile it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kinformer_actors::ObjectKey;

/// The time deletes are remembered by: tokio's clock (paused in tests).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// How long, and how many, deletes of keys not ours are kept (CTL-11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// From when this replica saw the delete, or the key left its scope
    /// (whichever is later).
    pub(crate) max_age: Duration,
    /// Beyond it the oldest are forgotten (and counted).
    pub(crate) max_count: usize,
}

impl Default for Retention {
    /// Long enough for the default election timings (see
    /// [`Retention::for_timings`]); 10 000 deletes at most.
    fn default() -> Self {
        Retention::for_timings(crate::leader::ElectionTimings::default())
    }
}

impl Retention {
    /// Covers a hand-over after a crash under `timings` (a lease duration
    /// after the last heartbeat seen, plus three retry periods, SH-5 and
    /// LE-4), with one more lease duration of margin.
    pub(crate) fn for_timings(timings: crate::leader::ElectionTimings) -> Self {
        Retention {
            max_age: timings.lease_duration * 2 + timings.retry_period * 3,
            max_count: 10_000,
        }
    }
}

/// One remembered delete.
struct Entry<K> {
    /// The object's last state, if known (a tombstone may carry none).
    state: Option<Arc<K>>,
    /// Distinguishes deletes of one key: a reconcile settles the one it saw.
    seq: u64,
    /// `None`: ours (kept until settled). `Some(t)`: not ours since `t`.
    standby_since: Option<Instant>,
}

struct Inner<K> {
    /// A key is here iff the last event seen of it was a delete, not yet
    /// settled, and (if not ours) not older than the retention.
    entries: HashMap<ObjectKey, Entry<K>>,
    /// Exactly the entries not ours, by `(standby_since, seq)`: oldest first.
    standby: BTreeMap<(Instant, u64), ObjectKey>,
    next_seq: u64,
    retention: Retention,
    /// Deletes not ours forgotten before their age (over `max_count`).
    evicted: u64,
}

impl<K> Inner<K> {
    /// Records a delete of `key` (not there) with a new sequence number.
    fn insert(
        &mut self,
        key: &ObjectKey,
        state: Option<Arc<K>>,
        standby_since: Option<Instant>,
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.entries.insert(
            key.clone(),
            Entry {
                state,
                seq,
                standby_since,
            },
        );
        if let Some(at) = standby_since {
            self.standby.insert((at, seq), key.clone());
        }
        seq
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Entry<K>> {
        let entry = self.entries.remove(key)?;
        if let Some(since) = entry.standby_since {
            self.standby.remove(&(since, entry.seq));
        }
        Some(entry)
    }

    fn demote(&mut self, key: &ObjectKey, now: Instant) {
        if let Some(entry) = self.entries.get_mut(key)
            && entry.standby_since.is_none()
        {
            entry.standby_since = Some(now);
            self.standby.insert((now, entry.seq), key.clone());
        }
    }

    /// Forgets deletes not ours past their age, then the oldest beyond the
    /// count, never the one at `keep` (a delete just recorded, which its
    /// feeder may be about to own).
    fn prune(&mut self, now: Instant, keep: Option<(Instant, u64)>) {
        let mut kept = None;
        while let Some((&at, _)) = self.standby.first_key_value() {
            let expired = now.saturating_duration_since(at.0) > self.retention.max_age;
            let total = self.standby.len() + usize::from(kept.is_some());
            if !expired && total <= self.retention.max_count {
                break;
            }
            let key = self.standby.pop_first().expect("not empty").1;
            if Some(at) == keep && !expired {
                kept = Some((at, key));
                continue;
            }
            if !expired {
                self.evicted += 1;
            }
            self.entries.remove(&key);
        }
        if let Some((at, key)) = kept {
            self.standby.insert(at, key);
        }
    }
}

/// Deleted keys still to be reconciled here or possibly handed over, with
/// their last state (see the module docs).
pub(crate) struct LastKnown<K>(Mutex<Inner<K>>);

impl<K> LastKnown<K> {
    /// Deletes not ours are kept as `retention` says (at least one).
    pub(crate) fn new(retention: Retention) -> Self {
        LastKnown(Mutex::new(Inner {
            entries: HashMap::new(),
            standby: BTreeMap::new(),
            next_seq: 0,
            retention: Retention {
                max_count: retention.max_count.max(1),
                ..retention
            },
            evicted: 0,
        }))
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        // Each call's changes cannot panic halfway (no user code runs under it).
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `key` was deleted (last state `last`, if known), seen at `now`: kept
    /// as not ours until [`own`](Self::own) says otherwise.
    pub(crate) fn deleted(&self, key: &ObjectKey, last: Option<&Arc<K>>, now: Instant) {
        let mut inner = self.inner();
        inner.remove(key);
        let seq = inner.insert(key, last.cloned(), Some(now));
        inner.prune(now, Some((now, seq)));
    }

    /// The delete of `key` just [`deleted`](Self::deleted) (last state
    /// `last`) is ours to reconcile: kept until settled. Recorded again if
    /// it was forgotten since (a scope change pruning on another thread).
    pub(crate) fn own(&self, key: &ObjectKey, last: Option<&Arc<K>>) {
        if !self.promote(key) {
            self.inner().insert(key, last.cloned(), None);
        }
    }

    /// The delete of `key`, if one is remembered, is ours: kept until
    /// settled. Answers whether there was one.
    pub(crate) fn promote(&self, key: &ObjectKey) -> bool {
        let mut inner = self.inner();
        let Some(entry) = inner.entries.get_mut(key) else {
            return false;
        };
        if let Some(since) = entry.standby_since.take() {
            let seq = entry.seq;
            inner.standby.remove(&(since, seq));
        }
        true
    }

    /// The delete of `key` is not ours (any more) as of `now`: kept for the
    /// retention, in case the key comes back.
    pub(crate) fn disown(&self, key: &ObjectKey, now: Instant) {
        let mut inner = self.inner();
        inner.demote(key, now);
        inner.prune(now, None);
    }

    /// `key` exists (again): its delete is forgotten, whoever owned it.
    pub(crate) fn exists(&self, key: &ObjectKey) {
        self.inner().remove(key);
    }

    /// The last state of deleted `key`, if known.
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.inner().entries.get(key).and_then(|e| e.state.clone())
    }

    /// The delete of `key` remembered, if any: its last state and its
    /// sequence number (for [`settled`](Self::settled)).
    pub(crate) fn delete_of(&self, key: &ObjectKey) -> Option<(Option<Arc<K>>, u64)> {
        self.inner()
            .entries
            .get(key)
            .map(|e| (e.state.clone(), e.seq))
    }

    /// A reconcile of delete `seq` of `key` succeeded: forget it, unless a
    /// newer delete replaced it meanwhile.
    pub(crate) fn settled(&self, key: &ObjectKey, seq: u64) {
        let mut inner = self.inner();
        if inner.entries.get(key).is_some_and(|e| e.seq == seq) {
            inner.remove(key);
        }
    }

    /// The scope changed at `now`, to one that `owns` says a key is in: the
    /// deletes of keys no longer ours are kept for the retention from now;
    /// those of keys that became ours are ours, and returned (to queue).
    /// `owns` is called without the lock held (it may read this map).
    pub(crate) fn rescope(
        &self,
        owns: impl Fn(&ObjectKey) -> bool,
        now: Instant,
    ) -> Vec<ObjectKey> {
        let seen: Vec<(ObjectKey, u64, bool)> = {
            let mut inner = self.inner();
            inner.prune(now, None);
            inner
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.seq, e.standby_since.is_none()))
                .collect()
        };
        let judged: Vec<(ObjectKey, u64, bool, bool)> = seen
            .into_iter()
            .map(|(key, seq, ours)| {
                let owned = owns(&key);
                (key, seq, ours, owned)
            })
            .collect();
        let mut inner = self.inner();
        let mut gained = Vec::new();
        for (key, seq, ours, owned) in judged {
            // Skipped if a newer delete (or a recreate) came meanwhile: the
            // feeder judged that one under the new scope.
            if inner.entries.get(&key).is_none_or(|e| e.seq != seq) {
                continue;
            }
            match (ours, owned) {
                (true, false) => inner.demote(&key, now),
                (false, true) => {
                    // Owned meanwhile (by a feeder or a worker): theirs to queue.
                    let entry = inner.entries.get_mut(&key).expect("checked");
                    if let Some(since) = entry.standby_since.take() {
                        inner.standby.remove(&(since, seq));
                        gained.push(key);
                    }
                }
                _ => {}
            }
        }
        inner.prune(now, None);
        gained
    }

    /// Deletes of keys not ours remembered now, and those forgotten before
    /// their age because there were too many.
    pub(crate) fn standby_counts(&self) -> (usize, u64) {
        let inner = self.inner();
        (inner.standby.len(), inner.evicted)
    }

    /// Deleted keys remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner().entries.len()
    }

    /// The invariants on `Inner`'s fields; the age bound as of the last
    /// prune, at `pruned`.
    #[cfg(test)]
    fn check(&self, pruned: Option<Instant>) {
        let inner = self.inner();
        let standby: Vec<_> = inner
            .entries
            .iter()
            .filter_map(|(k, e)| e.standby_since.map(|s| ((s, e.seq), k.clone())))
            .collect();
        assert_eq!(standby.len(), inner.standby.len());
        for (at, key) in standby {
            assert_eq!(inner.standby.get(&at), Some(&key));
            if let Some(now) = pruned {
                assert!(now.saturating_duration_since(at.0) <= inner.retention.max_age);
            }
        }
        assert!(inner.standby.len() <= inner.retention.max_count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    const AGE: Duration = Duration::from_secs(10);

    fn retention(max_count: usize) -> Retention {
        Retention {
            max_age: AGE,
            max_count,
        }
    }

    fn key(s: &str) -> ObjectKey {
        ObjectKey::from(s)
    }

    #[test]
    fn ctl_9_a_newer_delete_survives_the_settling_of_an_older_one() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(10));
        let key = key("ns/a");
        let first = Arc::new(1);
        last.deleted(&key, Some(&first), t0);
        last.own(&key, None);
        let (state, first_seq) = last.delete_of(&key).unwrap();
        assert_eq!(state, Some(first.clone()));
        let second = Arc::new(2);
        last.deleted(&key, Some(&second), t0);
        last.own(&key, None);
        last.settled(&key, first_seq);
        assert_eq!(
            last.get(&key),
            Some(second.clone()),
            "not the state it was given"
        );
        let (_, seq) = last.delete_of(&key).unwrap();
        last.settled(&key, seq);
        assert_eq!(last.len(), 0);
        last.deleted(&key, Some(&first), t0);
        last.exists(&key);
        assert_eq!(last.get(&key), None, "recreated");
        last.check(Some(t0));
    }

    #[test]
    fn ctl_9_a_delete_of_ours_is_kept_until_settled_whatever_its_age() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(1));
        last.deleted(&key("ns/a"), Some(&Arc::new(1)), t0);
        last.own(&key("ns/a"), None);
        for i in 0..5 {
            last.deleted(&key(&format!("ns/other-{i}")), None, t0 + AGE * 10);
        }
        assert!(last.rescope(|_| false, t0 + AGE * 100).is_empty());
        // Left the scope just now: kept from now for the retention.
        assert_eq!(last.get(&key("ns/a")), Some(Arc::new(1)));
        last.check(Some(t0 + AGE * 100));
    }

    /// A delete just recorded is not the one evicted to make room, and one
    /// forgotten before its feeder owned it (a scope change pruning on
    /// another thread) is recorded again, with its state, when owned.
    #[test]
    fn ctl_9_a_delete_being_recorded_is_kept_for_its_owner() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(0));
        last.deleted(&key("ns/late"), None, t0 + AGE / 2);
        let state = Arc::new(3);
        last.deleted(&key("ns/a"), Some(&state), t0);
        last.check(Some(t0));
        last.own(&key("ns/a"), Some(&state));
        assert_eq!(last.get(&key("ns/a")), Some(state.clone()));
        assert_eq!(last.standby_counts(), (0, 1), "the other one made room");
        last.deleted(&key("ns/b"), Some(&state), t0);
        assert!(last.rescope(|_| false, t0 + AGE * 2).is_empty());
        assert_eq!(last.get(&key("ns/b")), None, "expired meanwhile");
        last.own(&key("ns/b"), Some(&state));
        assert_eq!(last.get(&key("ns/b")), Some(state));
        assert!(last.rescope(|_| false, t0 + AGE * 9).is_empty());
        assert!(
            last.get(&key("ns/b")).is_some(),
            "kept from leaving the scope"
        );
    }

    /// A delete owned by someone else (a worker or the feeder) while the
    /// scope change judged it is theirs to queue: no panic, not gained.
    #[test]
    fn ctl_11_a_delete_owned_during_a_rescope_is_not_gained_twice() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(10));
        last.deleted(&key("ns/a"), Some(&Arc::new(1)), t0);
        let gained = last.rescope(
            |k| {
                assert!(last.promote(k));
                true
            },
            t0,
        );
        assert!(gained.is_empty());
        assert_eq!(last.standby_counts(), (0, 0));
        assert_eq!(last.len(), 1);
        last.check(Some(t0));
    }

    #[test]
    fn ctl_11_a_delete_outside_the_scope_is_handed_over_when_the_key_is_gained() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(10));
        let state = Arc::new(7);
        last.deleted(&key("ns/a"), Some(&state), t0);
        last.deleted(&key("ns/b"), None, t0);
        let gained = last.rescope(|_| true, t0 + AGE / 2);
        assert_eq!(gained.len(), 2, "a tombstone without a state too");
        assert!(Arc::ptr_eq(&last.get(&key("ns/a")).unwrap(), &state));
        assert!(last.rescope(|_| true, t0 + AGE).is_empty(), "once");
        // Ours now: kept past the age.
        assert!(last.rescope(|_| true, t0 + AGE * 5).is_empty());
        assert_eq!(last.len(), 2);
        last.check(Some(t0 + AGE * 5));
    }

    #[test]
    fn ctl_11_deletes_outside_the_scope_expire_after_the_retention() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(10));
        last.deleted(&key("ns/a"), Some(&Arc::new(1)), t0);
        assert!(
            last.rescope(|_| true, t0 + AGE + Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(last.len(), 0);
        assert_eq!(last.standby_counts(), (0, 0), "expired, not evicted");
    }

    #[test]
    fn ctl_11_deletes_outside_the_scope_are_bounded_by_count_oldest_first() {
        let t0 = Instant::now();
        let last: LastKnown<u8> = LastKnown::new(retention(2));
        for (i, name) in ["ns/a", "ns/b", "ns/c"].iter().enumerate() {
            last.deleted(&key(name), None, t0 + Duration::from_secs(i as u64));
        }
        assert_eq!(last.standby_counts(), (2, 1));
        let mut gained = last.rescope(|_| true, t0 + Duration::from_secs(3));
        gained.sort();
        assert_eq!(gained, [key("ns/b"), key("ns/c")]);
    }

    #[test]
    fn ctl_11_a_key_leaving_the_scope_keeps_its_delete_for_the_retention_from_then() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(10));
        last.deleted(&key("ns/a"), Some(&Arc::new(1)), t0);
        last.own(&key("ns/a"), None);
        let left = t0 + AGE * 3;
        assert!(last.rescope(|_| false, left).is_empty());
        assert_eq!(
            last.rescope(|_| true, left + AGE / 2),
            [key("ns/a")],
            "back within the retention"
        );
        assert!(last.rescope(|_| false, left + AGE).is_empty());
        assert!(last.rescope(|_| true, left + AGE * 3).is_empty(), "expired");
        assert_eq!(last.len(), 0);
    }

    #[test]
    fn ctl_11_a_recreate_forgets_the_delete_ours_or_not() {
        let t0 = Instant::now();
        let last = LastKnown::new(retention(10));
        last.deleted(&key("ns/a"), Some(&Arc::new(1)), t0);
        last.deleted(&key("ns/b"), Some(&Arc::new(2)), t0);
        last.own(&key("ns/b"), None);
        last.exists(&key("ns/a"));
        last.exists(&key("ns/b"));
        assert_eq!(last.len(), 0);
        assert!(last.rescope(|_| true, t0).is_empty());
        last.check(Some(t0));
    }

    /// Random sequences keep the index of deletes not ours exact, within
    /// the age and the count.
    #[test]
    fn ctl_11_random_interleavings_keep_the_index_consistent() {
        for seed in 0..20 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let t0 = Instant::now();
            let last = LastKnown::new(retention(5));
            let mut now = t0;
            for _ in 0..500 {
                now += Duration::from_millis(rng.random_range(0..2000));
                let k = key(&format!("ns/{}", rng.random_range(0..12)));
                let op = rng.random_range(0..7);
                match op {
                    0 | 1 => last.deleted(&k, Some(&Arc::new(1)), now),
                    2 => last.own(&k, None),
                    3 => last.disown(&k, now),
                    4 => last.exists(&k),
                    5 => {
                        if let Some((_, seq)) = last.delete_of(&k) {
                            last.settled(&k, seq);
                        }
                    }
                    _ => {
                        let split = rng.random_range(0..12);
                        last.rescope(
                            |k| {
                                k.as_str().trim_start_matches("ns/").parse::<u32>().unwrap() < split
                            },
                            now,
                        );
                    }
                }
                // Only recording, disowning and rescoping prune.
                last.check(matches!(op, 0 | 1 | 3 | 6).then_some(now));
            }
        }
    }
}
