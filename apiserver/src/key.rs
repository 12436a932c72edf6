//! The key of a stored object inside one resource type.

use std::sync::Arc;

/// Key of an object inside one resource type: (namespace, name); namespace is `""` when cluster-scoped.
///
/// Ordered like the real server's etcd keys, so lists and continue tokens are deterministic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// Namespace, `""` for cluster-scoped objects.
    pub namespace: Arc<str>,
    /// Object name.
    pub name: Arc<str>,
}

impl ObjKey {
    /// Build a key.
    pub fn new(namespace: &str, name: &str) -> Self {
        ObjKey {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }
}
