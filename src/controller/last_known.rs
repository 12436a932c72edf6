//! The last known state of deleted primary objects (CTL-9), shared by the
//! primary feeder (which records deletes) and the workers (which read it and
//! clear it once a reconcile of the deleted key succeeds).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kinformer_actors::ObjectKey;

/// Deleted keys still to be reconciled, with their last state. Bounded by
/// the deleted keys in the queue: an entry goes when its key is recreated or
/// a reconcile of the deletion succeeds.
pub(crate) struct LastKnown<K>(Mutex<HashMap<ObjectKey, Arc<K>>>);

impl<K> Default for LastKnown<K> {
    fn default() -> Self {
        LastKnown(Mutex::new(HashMap::new()))
    }
}

impl<K> LastKnown<K> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Arc<K>>> {
        // A panic cannot leave the map half-updated: every change is one call.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `key` was deleted; its last state, if known.
    pub(crate) fn deleted(&self, key: &ObjectKey, last: Option<&Arc<K>>) {
        let mut map = self.map();
        match last {
            Some(object) => map.insert(key.clone(), object.clone()),
            None => map.remove(key),
        };
    }

    /// `key` exists (again), or is not this replica's to reconcile: forget it.
    pub(crate) fn exists(&self, key: &ObjectKey) {
        self.map().remove(key);
    }

    /// The last state of deleted `key`, if known.
    pub(crate) fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.map().get(key).cloned()
    }

    /// A reconcile given `state` for deleted `key` succeeded: forget it,
    /// unless a newer delete replaced it meanwhile.
    pub(crate) fn settled(&self, key: &ObjectKey, state: &Arc<K>) {
        let mut map = self.map();
        if map.get(key).is_some_and(|s| Arc::ptr_eq(s, state)) {
            map.remove(key);
        }
    }

    /// The deleted keys remembered.
    pub(crate) fn keys(&self) -> Vec<ObjectKey> {
        self.map().keys().cloned().collect()
    }

    /// Forgets the deleted keys `keep` refuses (keys another replica owns).
    /// `keep` is called without the lock held (it may read this map).
    pub(crate) fn retain(&self, keep: impl Fn(&ObjectKey) -> bool) {
        let refused: Vec<ObjectKey> = self.keys().into_iter().filter(|k| !keep(k)).collect();
        let mut map = self.map();
        for key in refused {
            map.remove(&key);
        }
    }

    /// Deleted keys remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctl_9_a_newer_delete_survives_the_settling_of_an_older_one() {
        let last = LastKnown::default();
        let key = ObjectKey::from("ns/a");
        let first = Arc::new(1);
        last.deleted(&key, Some(&first));
        assert_eq!(last.get(&key), Some(first.clone()));
        let second = Arc::new(2);
        last.deleted(&key, Some(&second));
        last.settled(&key, &first);
        assert_eq!(
            last.get(&key),
            Some(second.clone()),
            "not the state it was given"
        );
        last.settled(&key, &second);
        assert_eq!(last.len(), 0);
        last.deleted(&key, Some(&first));
        last.exists(&key);
        assert_eq!(last.get(&key), None, "recreated");
    }
}
