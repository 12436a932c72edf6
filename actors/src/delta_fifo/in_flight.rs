//! What the consumer has popped but not applied yet: the in-flight overlay
//! both orderings keep between a pop and its `done`.
//!
//! client-go runs the consumer under the FIFO lock (DF-7, DF-17), so the
//! cache reflects every popped item before the producer's next call. Our
//! consumer (the Indexer actor) applies popped items after the pop returns,
//! so every known-objects lookup of the queue (the DF-6 delete filter, the
//! relist's tombstones of DF-9 step 3 / RF-5 step 3, resync) must see
//! *cache ∪ in flight*, the in-flight state taking precedence: a key whose
//! newest in-flight delta is a delete is not known.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::population::InitialPopulation;
use crate::delta::{KnownObjects, PopReceipt};
use crate::key::ObjectKey;

/// The hasher of the queues' maps, which hash every key on every delta:
/// foldhash instead of SipHash (SipHash was ~3 % of a 100k-object sync,
/// perf). Keys come from the API server; foldhash is still randomly seeded
/// per map.
pub(super) type KeyHasher = foldhash::fast::RandomState;

/// Containers grown past this many entries are given back once idle.
pub(super) const KEEP_WHEN_IDLE: usize = 4096;

/// Popped-not-done items of one key.
#[derive(Debug)]
struct KeyInFlight<K> {
    /// How many popped items of the key are not `done` yet; never 0.
    count: usize,
    /// The state the newest of them leaves the object in (`None`: deleted).
    newest: Option<Arc<K>>,
}

/// Every popped item whose receipt has not come back yet.
#[derive(Debug)]
pub(super) struct InFlight<K> {
    /// Per key; a key is here exactly while one of its items is out.
    per_key: HashMap<ObjectKey, KeyInFlight<K>, KeyHasher>,
    /// Ids of the receipts handed out and not yet done.
    outstanding: HashSet<u64, KeyHasher>,
    next_receipt: u64,
}

impl<K> InFlight<K> {
    pub(super) fn new() -> Self {
        InFlight {
            per_key: HashMap::default(),
            outstanding: HashSet::default(),
            next_receipt: 0,
        }
    }

    /// Records a pop of `key` whose deltas leave the object in `newest`
    /// (`None`: deleted) and returns the receipt the consumer gives back.
    pub(super) fn begin(
        &mut self,
        key: ObjectKey,
        newest: Option<Arc<K>>,
        counts_toward_initial: bool,
    ) -> PopReceipt {
        let entry = self.per_key.entry(key.clone()).or_insert(KeyInFlight {
            count: 0,
            newest: None,
        });
        entry.count += 1;
        entry.newest = newest;
        let id = self.next_receipt;
        self.next_receipt = self.next_receipt.wrapping_add(1);
        self.outstanding.insert(id);
        PopReceipt {
            id,
            key,
            counts_toward_initial,
        }
    }

    /// The consumer has applied the popped item of `receipt`: it leaves the
    /// overlay, and the last initial item latches HasSynced. A receipt given
    /// twice (or never handed out) is ignored with a warning.
    pub(super) fn done(&mut self, receipt: &PopReceipt, population: &mut InitialPopulation) {
        if !self.outstanding.remove(&receipt.id) {
            tracing::warn!(key = %receipt.key, "done for an unknown or already finished pop; ignored");
            return;
        }
        if let Entry::Occupied(mut e) = self.per_key.entry(receipt.key.clone()) {
            let f = e.get_mut();
            f.count = f.count.saturating_sub(1);
            if f.count == 0 {
                e.remove();
            }
        }
        if receipt.counts_toward_initial {
            population.finished();
        }
    }

    /// Whether an item of `key` is out.
    pub(super) fn contains(&self, key: &ObjectKey) -> bool {
        self.per_key.contains_key(key)
    }

    /// Number of items out (receipts not yet done).
    pub(super) fn len(&self) -> usize {
        self.outstanding.len()
    }

    /// True when nothing is out, per key as per receipt.
    pub(super) fn is_empty(&self) -> bool {
        self.outstanding.is_empty() && self.per_key.is_empty()
    }

    /// Capacity of the per-key map (what a burst may leave behind).
    #[cfg(test)]
    pub(super) fn key_capacity(&self) -> usize {
        self.per_key.capacity()
    }

    /// Capacity of the receipt set (what a burst may leave behind).
    #[cfg(test)]
    pub(super) fn receipt_capacity(&self) -> usize {
        self.outstanding.capacity()
    }

    /// Gives back containers grown past [`KEEP_WHEN_IDLE`] entries, once
    /// nothing is out.
    pub(super) fn release_idle_memory(&mut self) {
        if !self.is_empty() {
            return;
        }
        if self.per_key.capacity() > KEEP_WHEN_IDLE {
            self.per_key = HashMap::default();
        }
        if self.outstanding.capacity() > KEEP_WHEN_IDLE {
            self.outstanding = HashSet::default();
        }
    }

    /// What a periodic resync queues as `Sync` (DF-11, RF-7): each object
    /// of `cache` whose key has nothing queued (`queued` is false) and
    /// nothing out, so a resync never carries an older state than one on
    /// its way.
    pub(super) fn resyncable(
        &self,
        cache: &dyn KnownObjects<K>,
        queued: impl Fn(&ObjectKey) -> bool,
    ) -> Vec<(ObjectKey, Arc<K>)> {
        cache
            .known_keys()
            .into_iter()
            .filter(|key| !queued(key) && !self.contains(key))
            .filter_map(|key| match cache.known_object(&key) {
                Some(obj) => Some((key, obj)),
                None => {
                    tracing::debug!(%key, "resync: known key has no object; skipped");
                    None
                }
            })
            .collect()
    }

    /// The known objects as a queue must see them: `cache` overlaid with
    /// what is out.
    pub(super) fn overlay<'a>(&'a self, cache: &'a dyn KnownObjects<K>) -> Overlay<'a, K> {
        Overlay {
            cache,
            in_flight: &self.per_key,
        }
    }
}

/// The cache, overlaid with what is popped but not applied yet.
pub(super) struct Overlay<'a, K> {
    cache: &'a dyn KnownObjects<K>,
    in_flight: &'a HashMap<ObjectKey, KeyInFlight<K>, KeyHasher>,
}

impl<K> Overlay<'_, K> {
    /// The newest known state of `key`.
    pub(super) fn object(&self, key: &ObjectKey) -> Option<Arc<K>> {
        match self.in_flight.get(key) {
            Some(f) => f.newest.clone(),
            None => self.cache.known_object(key),
        }
    }

    /// Whether `key` is known (and not being deleted).
    pub(super) fn knows(&self, key: &ObjectKey) -> bool {
        match self.in_flight.get(key) {
            Some(f) => f.newest.is_some(),
            None => self.cache.knows(key),
        }
    }

    /// Every known key, in no particular order; may hold duplicates only if
    /// the cache's `known_keys` does.
    pub(super) fn keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = self
            .cache
            .known_keys()
            .into_iter()
            .filter(|k| self.in_flight.get(k).is_none_or(|f| f.newest.is_some()))
            .collect();
        keys.extend(
            self.in_flight
                .iter()
                .filter(|(k, f)| f.newest.is_some() && !self.cache.knows(k))
                .map(|(k, _)| k.clone()),
        );
        keys
    }

    /// Known keys missing from `listed` and for which `queued` is false,
    /// sorted (client-go uses Go map order, which is unspecified), each
    /// with its newest known state: the relist's tombstones for objects
    /// the queue holds nothing of (DF-9 step 3, RF-5 step 3).
    pub(super) fn vanished(
        &self,
        listed: &HashSet<ObjectKey, KeyHasher>,
        queued: impl Fn(&ObjectKey) -> bool,
    ) -> Vec<(ObjectKey, Option<Arc<K>>)> {
        let mut missing: Vec<ObjectKey> = self
            .keys()
            .into_iter()
            .filter(|key| !listed.contains(key) && !queued(key))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        missing
            .into_iter()
            .map(|key| {
                let last_known = self.object(&key);
                if last_known.is_none() {
                    tracing::debug!(%key, "known key vanished during relist; tombstone without last known state");
                }
                (key, last_known)
            })
            .collect()
    }
}
