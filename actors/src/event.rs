//! What a subscriber receives: [`Event`], with the [`Cause`] of every change.
//!
//! client-go hands subscribers `OnUpdate(old, new)` and leaves them to compare
//! resourceVersions to tell a real change from a resync (the argument of the
//! seed notes). kinformer says why each notification happened instead.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::key::{DeletedObject, ObjectKey};
use crate::old::OldObject;

/// Why a notification was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    /// Part of the initial list, or of the cache replayed to a late subscriber (SI-5).
    Initial,
    /// Part of a cache restored from an on-disk snapshot at start
    /// (`InformerBuilder::persist`): the state at the snapshot's
    /// resourceVersion, not yet confirmed by the server. What changed since
    /// follows as `Watch` events (the watch resumed) or `Relist` changes and
    /// tombstones (the snapshot was too old: 410). A subscriber that comes
    /// later gets the cache as `Initial` adds, as always.
    Restored,
    /// A watch event from the server: a real change.
    Watch,
    /// Found by a relist after the watch broke (an add, a changed object, or a tombstone).
    Relist,
    /// A periodic resync: the object did not change (SI-11). An unchanged
    /// object found by a relist is also a `Resync`, sent only to subscribers
    /// whose resync sweep is in progress (SI-10), so a relist is no update storm.
    Resync,
}

/// One notification for a subscriber. Objects are shared `Arc`s, never deep copies.
///
/// ```
/// use kinformer_actors::{Cause, Event};
///
/// fn describe(event: &Event<String>) -> String {
///     match event {
///         Event::Added { key, cause, .. } => format!("{key} added ({cause:?})"),
///         Event::Updated { key, cause: Cause::Resync, .. } => format!("{key} replayed"),
///         Event::Updated { key, .. } => format!("{key} changed"),
///         Event::Deleted { key, .. } => format!("{key} deleted"),
///     }
/// }
/// ```
#[derive(Debug)]
pub enum Event<K> {
    /// The object is new to the subscriber.
    Added {
        /// Its key.
        key: ObjectKey,
        /// Its state.
        object: Arc<K>,
        /// `Initial`, `Restored`, `Watch` or `Relist`.
        cause: Cause,
    },
    /// The object changed (or, with `Cause::Resync`, is replayed unchanged).
    Updated {
        /// Its key.
        key: ObjectKey,
        /// The state the subscriber last saw. From a compact cache it may be
        /// kept compressed until read: [`OldObject::get`] decodes it.
        old: OldObject<K>,
        /// The new state.
        new: Arc<K>,
        /// `Watch`, `Relist` or `Resync`.
        cause: Cause,
    },
    /// The object is gone: with its final state, or a tombstone when unknown.
    Deleted {
        /// Its key.
        key: ObjectKey,
        /// The final state, or the tombstone.
        object: DeletedObject<K>,
        /// `Watch` for a watch `DELETED`, `Relist` for a tombstone.
        cause: Cause,
    },
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Event::Added { key, object, cause } => Event::Added {
                key: key.clone(),
                object: object.clone(),
                cause: *cause,
            },
            Event::Updated {
                key,
                old,
                new,
                cause,
            } => Event::Updated {
                key: key.clone(),
                old: old.clone(),
                new: new.clone(),
                cause: *cause,
            },
            Event::Deleted { key, object, cause } => Event::Deleted {
                key: key.clone(),
                object: object.clone(),
                cause: *cause,
            },
        }
    }
}

impl<K> Event<K> {
    /// The key of the object.
    pub fn key(&self) -> &ObjectKey {
        match self {
            Event::Added { key, .. } | Event::Updated { key, .. } | Event::Deleted { key, .. } => {
                key
            }
        }
    }

    /// Why the notification was sent.
    pub fn cause(&self) -> Cause {
        match self {
            Event::Added { cause, .. }
            | Event::Updated { cause, .. }
            | Event::Deleted { cause, .. } => *cause,
        }
    }

    /// The newest state it carries (`None` for a tombstone with no known state).
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Event::Added { object, .. } => Some(object),
            Event::Updated { new, .. } => Some(new),
            Event::Deleted { object, .. } => object.object(),
        }
    }

    /// True for an `Added` that is part of the initial list (client-go's
    /// `isInInitialList`), restored from a snapshot or not.
    pub fn is_initial(&self) -> bool {
        matches!(
            self,
            Event::Added {
                cause: Cause::Initial | Cause::Restored,
                ..
            }
        )
    }

    /// True for a resync replay, which carries no change.
    pub fn is_resync(&self) -> bool {
        self.cause() == Cause::Resync
    }
}

/// A subscriber's actor handles `Event<K>`; the listener waits for each
/// handler call to return before sending the next (one in flight per subscriber).
impl<K: 'static> actix::Message for Event<K> {
    type Result = ();
}

/// Several notifications, in order, for a subscriber that asked for batches
/// ([`Target::Batches`](crate::listener::Target)). One handler call per batch
/// instead of per event: the per-message cost of an actor mailbox is paid once
/// per batch, which is what lets one informer feed many subscribers at a high
/// event rate. A batch holds what was queued when the previous call returned,
/// up to the subscriber's maximum; it is never held back to fill up.
///
/// It reads as the slice of its events (`len`, `iter`, indexing). Most
/// batches are a run of the events the Indexer shares between all its
/// subscribers, not a copy: reading them by reference copies nothing, and
/// taking them by value ([`IntoIterator`], [`into_vec`](Self::into_vec))
/// clones each event (its key and `Arc`s). A batch kept keeps its whole
/// chunk (at most 256 events) alive until it is dropped.
pub struct EventBatch<K>(Events<K>);

/// A batch's events: its own, or a run of a chunk shared with others.
enum Events<K> {
    Owned(Vec<Event<K>>),
    Shared {
        events: Arc<[Event<K>]>,
        range: Range<usize>,
    },
}

impl<K> EventBatch<K> {
    /// A batch of `events[range]`, shared, not copied. An out-of-bounds
    /// range is cut to the events there are.
    pub fn shared(events: Arc<[Event<K>]>, range: Range<usize>) -> Self {
        let end = range.end.min(events.len());
        let start = range.start.min(end);
        EventBatch(Events::Shared {
            events,
            range: start..end,
        })
    }

    /// The events as a `Vec` of their own (cloned when shared).
    pub fn into_vec(self) -> Vec<Event<K>> {
        match self.0 {
            Events::Owned(events) => events,
            Events::Shared { events, range } => events[range].to_vec(),
        }
    }
}

impl<K> From<Vec<Event<K>>> for EventBatch<K> {
    fn from(events: Vec<Event<K>>) -> Self {
        EventBatch(Events::Owned(events))
    }
}

impl<K: 'static> actix::Message for EventBatch<K> {
    type Result = ();
}

impl<K> std::ops::Deref for EventBatch<K> {
    type Target = [Event<K>];

    fn deref(&self) -> &[Event<K>] {
        match &self.0 {
            Events::Owned(events) => events,
            Events::Shared { events, range } => &events[range.clone()],
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for EventBatch<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The events, oldest first (a shared batch's cloned one by one).
impl<K> IntoIterator for EventBatch<K> {
    type Item = Event<K>;
    type IntoIter = std::vec::IntoIter<Event<K>>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

/// The events by reference, oldest first.
impl<'a, K> IntoIterator for &'a EventBatch<K> {
    type Item = &'a Event<K>;
    type IntoIter = std::slice::Iter<'a, Event<K>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn added(name: &str) -> Event<ConfigMap> {
        let object = crate::testing::configmap(name, "1");
        Event::Added {
            key: ObjectKey::of(object.as_ref()).unwrap(),
            object,
            cause: Cause::Watch,
        }
    }

    #[test]
    fn a_batch_reads_as_its_events_in_order() {
        let batch = EventBatch::from(vec![added("a"), added("b")]);
        assert_eq!(batch.len(), 2);
        let by_ref: Vec<String> = (&batch).into_iter().map(|e| e.key().to_string()).collect();
        assert_eq!(by_ref, ["ns/a", "ns/b"]);
        assert_eq!(batch[1].key().as_str(), "ns/b");
        let owned: Vec<String> = batch.into_iter().map(|e| e.key().to_string()).collect();
        assert_eq!(owned, ["ns/a", "ns/b"]);
    }

    /// A shared batch reads as its run of the chunk, without a copy; taken
    /// by value, its events are clones of the chunk's; a range past the end
    /// is cut to the events there are.
    #[test]
    fn a_shared_batch_reads_as_its_run_of_the_chunk() {
        let chunk: Arc<[Event<ConfigMap>]> = vec![added("a"), added("b"), added("c")].into();
        let batch = EventBatch::shared(chunk.clone(), 1..3);
        assert_eq!(batch.len(), 2);
        assert!(std::ptr::eq(&batch[0], &chunk[1]), "not a copy");
        assert_eq!(format!("{batch:?}").matches("Added").count(), 2);
        let owned = batch.into_vec();
        assert_eq!(owned[1].key().as_str(), "ns/c");
        assert!(Arc::ptr_eq(
            owned[1].object().unwrap(),
            chunk[2].object().unwrap()
        ));
        assert_eq!(Arc::strong_count(&chunk), 1, "the batch let the chunk go");
        assert_eq!(EventBatch::shared(chunk.clone(), 2..9).len(), 1);
        assert!(EventBatch::shared(chunk, 7..9).is_empty());
    }
}
