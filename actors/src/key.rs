//! Object keys and tombstones (spec KEY-1..KEY-7).
//!
//! A key is `namespace/name` for namespaced objects and `name` for
//! cluster-scoped ones (KEY-1). Keys are cloned into the queue, the cache and
//! every listener queue, so they are a cheap-to-clone `Arc<str>` rather than a
//! `String`. A delete whose final state is unknown (client-go's
//! `DeletedFinalStateUnknown`, KEY-4) is the typed [`Tombstone`], carried in
//! [`DeletedObject::Unknown`]; it is never a string convention.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use kube::Resource;

/// The cache key of an object: `namespace/name`, or `name` when cluster-scoped.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

/// Why a key could not be computed (KEY-1, KEY-2, KEY-5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The object has no `metadata.name` (client-go: "object has no meta").
    #[error("object has no metadata.name")]
    MissingName,
    /// A key string with more than one `/` (KEY-2).
    #[error("unexpected key format: {0:?}")]
    Malformed(String),
}

impl ObjectKey {
    /// The key of `name` in `namespace` (`None` or empty for cluster-scoped).
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            // Not `format!`: its machinery was 8 % of a 100k-object sync (perf).
            Some(ns) if !ns.is_empty() => {
                let mut key = String::with_capacity(ns.len() + 1 + name.len());
                key.push_str(ns);
                key.push('/');
                key.push_str(name);
                ObjectKey(key.into())
            }
            _ => ObjectKey(name.into()),
        }
    }

    /// The key of an object (KEY-1). Fails when the object has no name.
    pub fn of<K: Resource>(obj: &K) -> Result<Self, KeyError> {
        let meta = obj.meta();
        match meta.name.as_deref() {
            Some(name) if !name.is_empty() => Ok(Self::new(meta.namespace.as_deref(), name)),
            _ => Err(KeyError::MissingName),
        }
    }

    /// Parses `ns/name` or `name` (KEY-2); more than one `/` is an error.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        if key.matches('/').count() > 1 {
            return Err(KeyError::Malformed(key.to_owned()));
        }
        Ok(ObjectKey(key.into()))
    }

    /// The namespace part, `None` for a cluster-scoped key.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once('/').map(|(ns, _)| ns)
    }

    /// The name part.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or(&self.0, |(_, name)| name)
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ObjectKey {
    /// Takes the string as a key as is (client-go's `ExplicitKey`).
    fn from(s: &str) -> Self {
        ObjectKey(s.into())
    }
}

/// A delete detected by a relist, whose final state is unknown (KEY-4).
///
/// `last_known` is the last state kinformer saw, which may be stale, or `None`
/// when it never had one.
#[derive(Debug)]
pub struct Tombstone<K> {
    /// The key of the deleted object.
    pub key: ObjectKey,
    /// The last state seen before the object disappeared, if any.
    pub last_known: Option<Arc<K>>,
}

impl<K> Clone for Tombstone<K> {
    fn clone(&self) -> Self {
        Tombstone {
            key: self.key.clone(),
            last_known: self.last_known.clone(),
        }
    }
}

/// What a delete carries: the server's final state (a watch `DELETED` event) or
/// a [`Tombstone`] (a delete found by a relist).
#[derive(Debug)]
pub enum DeletedObject<K> {
    /// The final state, as the server sent it.
    Final(Arc<K>),
    /// The final state is unknown; the last known state, if any, is inside.
    Unknown(Tombstone<K>),
}

impl<K> Clone for DeletedObject<K> {
    fn clone(&self) -> Self {
        match self {
            DeletedObject::Final(o) => DeletedObject::Final(o.clone()),
            DeletedObject::Unknown(t) => DeletedObject::Unknown(t.clone()),
        }
    }
}

impl<K> DeletedObject<K> {
    /// The best state known: the final one, or the tombstone's last known one.
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            DeletedObject::Final(o) => Some(o),
            DeletedObject::Unknown(t) => t.last_known.as_ref(),
        }
    }

    /// True for a tombstone (the final state is unknown).
    pub fn is_final_state_unknown(&self) -> bool {
        matches!(self, DeletedObject::Unknown(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: Option<&str>, name: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: ns.map(Into::into),
                name: name.map(Into::into),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn key_1_namespaced_and_cluster_scoped() {
        assert_eq!(
            ObjectKey::of(&cm(Some("ns"), Some("a"))).unwrap().as_str(),
            "ns/a"
        );
        assert_eq!(ObjectKey::of(&cm(None, Some("a"))).unwrap().as_str(), "a");
        assert_eq!(
            ObjectKey::of(&cm(Some(""), Some("a"))).unwrap().as_str(),
            "a"
        );
        assert_eq!(
            ObjectKey::of(&cm(Some("ns"), None)),
            Err(KeyError::MissingName)
        );
    }

    #[test]
    fn key_2_split() {
        let k = ObjectKey::parse("ns/a").unwrap();
        assert_eq!((k.namespace(), k.name()), (Some("ns"), "a"));
        let k = ObjectKey::parse("a").unwrap();
        assert_eq!((k.namespace(), k.name()), (None, "a"));
        let k = ObjectKey::parse("").unwrap();
        assert_eq!((k.namespace(), k.name()), (None, ""));
        assert_eq!(
            ObjectKey::parse("a/b/c"),
            Err(KeyError::Malformed("a/b/c".into()))
        );
    }

    #[test]
    fn key_4_tombstone_object() {
        let o = Arc::new(cm(Some("ns"), Some("a")));
        let t = DeletedObject::Unknown(Tombstone {
            key: "ns/a".into(),
            last_known: Some(o.clone()),
        });
        assert!(t.is_final_state_unknown());
        assert!(Arc::ptr_eq(t.object().unwrap(), &o));
        let f = DeletedObject::Final(o.clone());
        assert!(!f.is_final_state_unknown());
        let empty: DeletedObject<ConfigMap> = DeletedObject::Unknown(Tombstone {
            key: "x".into(),
            last_known: None,
        });
        assert!(empty.object().is_none());
    }
}
