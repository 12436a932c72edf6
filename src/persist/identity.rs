//! What a snapshot belongs to: it is used only by an informer with the same
//! identity, so never for another cluster, resource, namespace or selector,
//! nor after an incompatible change.

use super::error::ClusterIdentityError;

use serde::Serialize;

/// Bumped on any change of the file's layout or of what is stored (2:
/// values compressed, a dictionary in the meta table). A snapshot of
/// another schema is outdated: discarded, and the informer lists.
pub const SNAPSHOT_SCHEMA: u32 = 2;

/// Everything a snapshot is keyed by. Stored in the file and compared whole
/// on load; the file name is derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotIdentity {
    /// The cluster: its server URL, or a name the caller chose.
    pub cluster: String,
    /// The resource path (group, version, plural and namespace), e.g.
    /// `/api/v1/namespaces/ns/configmaps`.
    pub resource: String,
    /// The label selector, `""` for none.
    pub label_selector: String,
    /// The field selector, `""` for none.
    pub field_selector: String,
    /// What the stored objects are: the Rust type, the decoding options and
    /// a tag the caller changes when its transform changes.
    pub object_schema: String,
}

impl SnapshotIdentity {
    /// The identity as stored (JSON, fields in declaration order).
    pub fn canonical(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The file name: readable, and unique per identity (a 64-bit FNV-1a of
    /// the canonical form; a collision is caught by the stored identity).
    pub fn file_name(&self) -> String {
        let plural = self.resource.rsplit('/').next().unwrap_or("objects");
        let readable: String = plural
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .take(64)
            .collect();
        format!(
            "{readable}-{:016x}.redb",
            fnv1a(self.canonical().as_bytes())
        )
    }
}

/// FNV-1a, 64 bits: stable across Rust releases, unlike `DefaultHasher`,
/// which is all a file name needs (no crate for six lines).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A name of the cluster `client` talks to that differs between clusters,
/// for [`InformerBuilder::persist`](crate::InformerBuilder::persist)'s
/// `cluster`: the uid of its `kube-system` namespace, which is made with the
/// cluster and kept for its life (a server URL is not: every cluster's
/// in-cluster address is the same). Needs `get` on that namespace.
pub async fn cluster_identity(client: &kube::Client) -> Result<String, ClusterIdentityError> {
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let namespace = api.get("kube-system").await?;
    match namespace.metadata.uid {
        Some(uid) if !uid.is_empty() => Ok(format!("kube-system/{uid}")),
        _ => Err(ClusterIdentityError::NoUid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> SnapshotIdentity {
        SnapshotIdentity {
            cluster: "https://a:6443".into(),
            resource: "/api/v1/namespaces/ns/configmaps".into(),
            label_selector: "app=web".into(),
            field_selector: String::new(),
            object_schema: "ConfigMap".into(),
        }
    }

    /// Any difference (cluster, resource, selector, schema) gives another
    /// file; the same identity always the same one.
    #[test]
    fn every_part_of_the_identity_changes_the_file() {
        let base = identity();
        assert_eq!(base.file_name(), identity().file_name());
        assert!(base.file_name().starts_with("configmaps-"));
        let variants = [
            SnapshotIdentity {
                cluster: "https://b:6443".into(),
                ..identity()
            },
            SnapshotIdentity {
                resource: "/api/v1/configmaps".into(),
                ..identity()
            },
            SnapshotIdentity {
                label_selector: "app=db".into(),
                ..identity()
            },
            SnapshotIdentity {
                field_selector: "metadata.name=x".into(),
                ..identity()
            },
            SnapshotIdentity {
                object_schema: "ConfigMap;v2".into(),
                ..identity()
            },
        ];
        for v in variants {
            assert_ne!(v.file_name(), base.file_name(), "{v:?}");
            assert_ne!(v.canonical(), base.canonical());
        }
    }

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
