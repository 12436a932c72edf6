//! The vocabulary between the DeltaFIFO and its consumer: one change to one
//! object ([`Delta`]), a popped key with its deltas ([`Popped`]) and what the
//! queue may ask of the cache ([`KnownObjects`]). Both the `delta_fifo` and the
//! `indexer` modules speak it; neither owns it.

use std::sync::Arc;

use crate::key::{DeletedObject, ObjectKey, Tombstone};

/// One change to one object, as queued for the consumer (DF-1).
#[derive(Debug)]
pub enum Delta<K> {
    /// A watch `ADDED` event.
    Added(Arc<K>),
    /// A watch `MODIFIED` event.
    Updated(Arc<K>),
    /// A watch `DELETED` event (final state), or a tombstone found by a relist.
    Deleted(DeletedObject<K>),
    /// An item of a relist (`replace`), when `emit_replaced` is on.
    Replaced(Arc<K>),
    /// A periodic resync, or a relist item when `emit_replaced` is off.
    Sync(Arc<K>),
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        match self {
            Delta::Added(o) => Delta::Added(o.clone()),
            Delta::Updated(o) => Delta::Updated(o.clone()),
            Delta::Deleted(d) => Delta::Deleted(d.clone()),
            Delta::Replaced(o) => Delta::Replaced(o.clone()),
            Delta::Sync(o) => Delta::Sync(o.clone()),
        }
    }
}

impl<K> Delta<K> {
    /// A relist's delete of `key`, whose final state is unknown (KEY-4):
    /// `last_known` is the newest state the queue or the cache had.
    pub(crate) fn tombstone(key: ObjectKey, last_known: Option<Arc<K>>) -> Self {
        Delta::Deleted(DeletedObject::Unknown(Tombstone { key, last_known }))
    }

    /// The object the delta carries; for a tombstone, its last known state
    /// (tombstones never nest, so this is never another tombstone).
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Delta::Added(o) | Delta::Updated(o) | Delta::Replaced(o) | Delta::Sync(o) => Some(o),
            Delta::Deleted(d) => d.object(),
        }
    }

    /// The kind of change, without the object.
    pub fn delta_type(&self) -> DeltaType {
        match self {
            Delta::Added(_) => DeltaType::Added,
            Delta::Updated(_) => DeltaType::Updated,
            Delta::Deleted(_) => DeltaType::Deleted,
            Delta::Replaced(_) => DeltaType::Replaced,
            Delta::Sync(_) => DeltaType::Sync,
        }
    }

    /// The state this delta leaves the object in: `None` when it is deleted.
    pub(crate) fn resulting_state(&self) -> Option<Arc<K>> {
        match self {
            Delta::Deleted(_) => None,
            other => other.object().cloned(),
        }
    }
}

/// The kind of a [`Delta`] (DF-1), for matching and logging without the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeltaType {
    /// See [`Delta::Added`].
    Added,
    /// See [`Delta::Updated`].
    Updated,
    /// See [`Delta::Deleted`].
    Deleted,
    /// See [`Delta::Replaced`].
    Replaced,
    /// See [`Delta::Sync`].
    Sync,
}

/// What the queue knows of the cache (client-go's `KeyListerGetter`, DF-2).
///
/// The queue uses it to decide whether a delete is news (DF-6), which objects
/// a relist removed (DF-9 step 3) and what to resync (DF-11). `()` implements
/// it as "no known objects", which behaves exactly like client-go's FIFO
/// without `KnownObjects`.
pub trait KnownObjects<K> {
    /// Every key the cache holds, in any order.
    fn known_keys(&self) -> Vec<ObjectKey>;
    /// The cached object of `key`, if any.
    fn known_object(&self, key: &ObjectKey) -> Option<Arc<K>>;
    /// Whether the cache holds `key`. Override when it can be answered
    /// without fetching the object.
    fn knows(&self, key: &ObjectKey) -> bool {
        self.known_object(key).is_some()
    }
}

impl<K> KnownObjects<K> for () {
    fn known_keys(&self) -> Vec<ObjectKey> {
        Vec::new()
    }

    fn known_object(&self, _key: &ObjectKey) -> Option<Arc<K>> {
        None
    }

    fn knows(&self, _key: &ObjectKey) -> bool {
        false
    }
}

/// One popped key with all its deltas, handed to the consumer (DF-7).
#[derive(Debug)]
pub struct Popped<K> {
    /// The key of every delta in `deltas`.
    pub key: ObjectKey,
    /// The deltas, oldest first; never empty.
    pub deltas: Vec<Delta<K>>,
    /// True while the initial list is being delivered: client-go's
    /// `isInInitialList`, i.e. `!hasSynced` as of the pop.
    pub is_in_initial_list: bool,
    /// Give this back to [`DeltaQueue::done`](crate::delta_fifo::DeltaQueue::done) once the deltas are applied.
    pub receipt: PopReceipt,
}

/// Proof of a pop, returned to [`DeltaQueue::done`](crate::delta_fifo::DeltaQueue::done) once the consumer has
/// applied the popped deltas to the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopReceipt {
    pub(crate) id: u64,
    pub(crate) key: ObjectKey,
    pub(crate) counts_toward_initial: bool,
}

impl PopReceipt {
    /// The key that was popped.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// Whether the popped item belongs to the initial population, so its
    /// `done` may complete the sync (DF-15).
    pub fn counts_toward_initial(&self) -> bool {
        self.counts_toward_initial
    }
}
