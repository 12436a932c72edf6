//! [`OldObject`]: the state an [`Event::Updated`](crate::Event::Updated)
//! replaces, held as the object or, from a compact cache, kept compressed
//! and decoded only when it is read.
//!
//! Why: in a compact cache (`InformerBuilder::compact_cache`) the state an
//! update replaces is usually compressed. Decoding it for every update cost
//! the Indexer's thread more than the rest of the update (a 1.3 KB
//! ConfigMap 6–8 µs, a Pod 30–50 µs), and most subscribers never look at
//! it: a controller reconciles by key. So the event carries the compressed
//! form and decodes it the first time a subscriber asks, once for all the
//! subscribers that share the event.

use std::fmt;
use std::sync::Arc;

/// A compressed old state could not be decoded (never expected: the cache
/// encoded it itself; counted in the cache's `decode_errors` and logged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the old state of {key} does not decode: {reason}")]
pub struct UndecodableObject {
    /// The object's key.
    pub key: String,
    /// Why it did not decode.
    pub reason: String,
}

/// What a compact cache hands over for a state it keeps compressed: decoded
/// at most once, on first read, and shared by every clone of the event.
pub(crate) trait Deferred<K>: Send + Sync {
    /// The object, decoded on the first call; later calls answer the same.
    fn get(&self) -> Result<Arc<K>, UndecodableObject>;
    /// The object if it was decoded already.
    fn decoded(&self) -> Option<Arc<K>>;
    /// Its resourceVersion, known without decoding.
    fn resource_version(&self) -> Option<&str>;
}

/// The state an update replaced: the state the subscriber last saw.
///
/// From a decoded cache (the default), and for resyncs, it is the object as
/// it was cached: [`get`](Self::get) answers that `Arc` and never fails.
/// From a compact cache it may be kept compressed until a subscriber calls
/// [`get`](Self::get), which decodes it once for every subscriber sharing
/// the event; subscribers that never look at it never pay for it.
///
/// ```
/// use std::sync::Arc;
/// use kinformer_actors::OldObject;
///
/// let old = OldObject::from(Arc::new(String::from("v1")));
/// assert_eq!(old.get().unwrap().as_str(), "v1");
/// assert!(old.is_decoded());
/// ```
pub struct OldObject<K>(Repr<K>);

enum Repr<K> {
    Held(Arc<K>),
    Deferred(Arc<dyn Deferred<K>>),
}

impl<K> OldObject<K> {
    /// A state kept compressed, decoded on first read.
    pub(crate) fn deferred(d: Arc<dyn Deferred<K>>) -> Self {
        OldObject(Repr::Deferred(d))
    }

    /// The old state, decoded now if it was kept compressed (once: clones
    /// share the result). Fails only if a compressed state does not decode.
    pub fn get(&self) -> Result<Arc<K>, UndecodableObject> {
        match &self.0 {
            Repr::Held(o) => Ok(o.clone()),
            Repr::Deferred(d) => d.get(),
        }
    }

    /// The old state if it is decoded already (always, outside a compact
    /// cache), without decoding anything.
    pub fn decoded(&self) -> Option<Arc<K>> {
        match &self.0 {
            Repr::Held(o) => Some(o.clone()),
            Repr::Deferred(d) => d.decoded(),
        }
    }

    /// Whether the old state is decoded already (always, outside a compact
    /// cache): [`get`](Self::get) then answers without decoding.
    pub fn is_decoded(&self) -> bool {
        match &self.0 {
            Repr::Held(_) => true,
            Repr::Deferred(d) => d.decoded().is_some(),
        }
    }

    /// Whether this is the very `Arc` given (for a resync, the old state is
    /// the new one); `false` for a state still compressed.
    pub fn is(&self, object: &Arc<K>) -> bool {
        self.decoded().is_some_and(|o| Arc::ptr_eq(&o, object))
    }
}

impl<K: kube::Resource> OldObject<K> {
    /// Its resourceVersion, read without decoding.
    pub fn resource_version(&self) -> Option<&str> {
        match &self.0 {
            Repr::Held(o) => o.meta().resource_version.as_deref(),
            Repr::Deferred(d) => d.resource_version(),
        }
    }
}

impl<K> From<Arc<K>> for OldObject<K> {
    fn from(object: Arc<K>) -> Self {
        OldObject(Repr::Held(object))
    }
}

impl<K> Clone for OldObject<K> {
    fn clone(&self) -> Self {
        OldObject(match &self.0 {
            Repr::Held(o) => Repr::Held(o.clone()),
            Repr::Deferred(d) => Repr::Deferred(d.clone()),
        })
    }
}

impl<K: fmt::Debug> fmt::Debug for OldObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.decoded() {
            Some(o) => f.debug_tuple("OldObject").field(&o).finish(),
            None => f.write_str("OldObject(compressed, not decoded)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Decodes by counting, to show it happens once and only on `get`.
    struct Counting {
        decodes: AtomicUsize,
        value: Mutex<Option<Arc<String>>>,
        fails: bool,
    }

    impl Deferred<String> for Counting {
        fn get(&self) -> Result<Arc<String>, UndecodableObject> {
            if self.fails {
                return Err(UndecodableObject {
                    key: "ns/a".into(),
                    reason: "damaged".into(),
                });
            }
            let mut v = self.value.lock().unwrap();
            Ok(v.get_or_insert_with(|| {
                self.decodes.fetch_add(1, Ordering::Relaxed);
                Arc::new("decoded".into())
            })
            .clone())
        }
        fn decoded(&self) -> Option<Arc<String>> {
            self.value.lock().unwrap().clone()
        }
        fn resource_version(&self) -> Option<&str> {
            Some("7")
        }
    }

    fn counting(fails: bool) -> Arc<Counting> {
        Arc::new(Counting {
            decodes: AtomicUsize::new(0),
            value: Mutex::new(None),
            fails,
        })
    }

    #[test]
    fn a_held_state_is_the_same_arc_and_never_fails() {
        let o = Arc::new(String::from("x"));
        let old = OldObject::from(o.clone());
        assert!(Arc::ptr_eq(&old.get().unwrap(), &o));
        assert!(old.is(&o) && old.is_decoded());
        assert!(!old.is(&Arc::new(String::from("x"))));
    }

    #[test]
    fn a_deferred_state_decodes_once_on_first_read_shared_by_clones() {
        let d = counting(false);
        let old = OldObject::deferred(d.clone());
        let copy = old.clone();
        assert!(!old.is_decoded() && old.decoded().is_none());
        assert_eq!(d.decodes.load(Ordering::Relaxed), 0, "nothing decoded yet");
        let first = old.get().unwrap();
        let second = copy.get().unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(d.decodes.load(Ordering::Relaxed), 1);
        assert!(copy.is_decoded() && copy.is(&first));
        assert_eq!(format!("{copy:?}"), "OldObject(\"decoded\")");
    }

    #[test]
    fn a_state_that_does_not_decode_is_a_typed_error() {
        let old = OldObject::deferred(counting(true));
        let e = old.get().unwrap_err();
        assert_eq!(
            e.to_string(),
            "the old state of ns/a does not decode: damaged"
        );
        assert_eq!(format!("{old:?}"), "OldObject(compressed, not decoded)");
    }
}
