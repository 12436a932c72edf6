//! The notation of the spec's FIFO scenarios (section 3), shared by the
//! tests of both orderings: `o(name, v)` objects, deltas as text, and a
//! fixed list of known objects.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use crate::delta::{Delta, KnownObjects};
use crate::key::{DeletedObject, ObjectKey};

/// `o(name, v)`: key `name`, resourceVersion `v`.
pub(super) fn o(name: &str, v: u64) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            resource_version: Some(v.to_string()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The `v` of `o(name, v)`.
pub(super) fn version(obj: &ConfigMap) -> u64 {
    obj.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn name_at(obj: &ConfigMap) -> String {
    format!(
        "{}@{}",
        obj.metadata.name.as_deref().unwrap_or("?"),
        version(obj)
    )
}

/// A delta as text: `Added foo@2`, `Deleted foo@2`, `Deleted DFSU(foo, foo@2)`.
pub(super) fn show(d: &Delta<ConfigMap>) -> String {
    match d {
        Delta::Deleted(DeletedObject::Unknown(t)) => format!(
            "Deleted DFSU({}, {})",
            t.key,
            t.last_known.as_deref().map_or("nil".to_owned(), name_at)
        ),
        Delta::Deleted(DeletedObject::Final(obj)) => format!("Deleted {}", name_at(obj)),
        other => format!(
            "{:?} {}",
            other.delta_type(),
            other.object().map_or("nil".to_owned(), |o| name_at(o))
        ),
    }
}

/// Deltas as text.
pub(super) fn shows(deltas: &[Delta<ConfigMap>]) -> Vec<String> {
    deltas.iter().map(show).collect()
}

/// Owned strings, for comparing with [`shows`].
pub(super) fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A fixed list of known objects (client-go's `literalListerGetter`).
pub(super) struct Listed(pub(super) Vec<Arc<ConfigMap>>);

impl KnownObjects<ConfigMap> for Listed {
    fn known_keys(&self) -> Vec<ObjectKey> {
        self.0
            .iter()
            .filter_map(|o| ObjectKey::of(&**o).ok())
            .collect()
    }

    fn known_object(&self, key: &ObjectKey) -> Option<Arc<ConfigMap>> {
        self.0
            .iter()
            .find(|o| ObjectKey::of(&***o).is_ok_and(|k| &k == key))
            .cloned()
    }
}

/// A known key whose object cannot be fetched (`DFSU(D, nil)`).
pub(super) struct KeyOnly(pub(super) &'static str);

impl KnownObjects<ConfigMap> for KeyOnly {
    fn known_keys(&self) -> Vec<ObjectKey> {
        vec![self.0.into()]
    }

    fn known_object(&self, _: &ObjectKey) -> Option<Arc<ConfigMap>> {
        None
    }
}
