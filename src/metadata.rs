//! Metadata-only informers: an `Api<K>` turned into an
//! `Api<PartialObjectMeta<K>>`, whose lists and watches kube-client asks
//! with `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`
//! (`as=PartialObjectMetadata` for watches), so the server sends, and the
//! informer caches, only each object's `metadata` (client-go's
//! `metadatainformer`, kube-runtime's `metadata_watcher`).

use kube::core::{ClusterResourceScope, DynamicResourceScope, NamespaceResourceScope};
use kube::core::{PartialObjectMeta, Resource};
use kube::{Api, Client};

mod sealed {
    pub trait Sealed {}
    impl Sealed for kube::core::ClusterResourceScope {}
    impl Sealed for kube::core::NamespaceResourceScope {}
    impl Sealed for kube::core::DynamicResourceScope {}
}

/// The scopes of resources a metadata-only informer can watch: every
/// resource scope (cluster, namespaced, dynamic), not subresources.
/// Sealed; it only tells [`Informer::metadata`](crate::Informer::metadata)
/// how to carry an `Api`'s namespace over.
pub trait MetadataScope: sealed::Sealed {
    /// `api` narrowed to namespace `ns`.
    #[doc(hidden)]
    fn in_namespace<K: Resource<Scope = Self>>(api: Api<K>, ns: &str) -> Api<K>;
}

impl MetadataScope for NamespaceResourceScope {
    fn in_namespace<K: Resource<Scope = Self>>(api: Api<K>, ns: &str) -> Api<K> {
        api.constrain(ns)
    }
}

impl MetadataScope for DynamicResourceScope {
    fn in_namespace<K: Resource<Scope = Self>>(api: Api<K>, ns: &str) -> Api<K> {
        api.constrain(ns)
    }
}

/// A cluster-scoped `Api` has no namespace to carry over.
impl MetadataScope for ClusterResourceScope {
    fn in_namespace<K: Resource<Scope = Self>>(api: Api<K>, _ns: &str) -> Api<K> {
        api
    }
}

/// The metadata-only `Api` of the same resource, namespace and client as
/// `api`; `dyntype` is the one `api` was made with (`()` for k8s-openapi
/// types, the `ApiResource` of a `DynamicObject`).
pub fn metadata_api<K>(api: Api<K>, dyntype: &K::DynamicType) -> Api<PartialObjectMeta<K>>
where
    K: Resource,
    K::Scope: MetadataScope,
{
    let url = api.resource_url().to_owned();
    let namespace = api.namespace().map(str::to_owned);
    let client: Client = api.into_client();
    let all = Api::<PartialObjectMeta<K>>::all_with(client, dyntype);
    let meta = match namespace {
        Some(ns) => K::Scope::in_namespace(all, &ns),
        None => all,
    };
    if meta.resource_url() != url {
        // Only a `dyntype` other than `api`'s gets here.
        tracing::warn!(
            given = %url,
            metadata = %meta.resource_url(),
            "the metadata-only Api names another resource than the Api it was made from: check the dyntype"
        );
    }
    meta
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use kube::api::ApiResource;
    use kube::core::DynamicObject;

    use super::*;

    fn client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn the_metadata_api_keeps_the_resource_and_namespace_of_any_scope() {
        let namespaced = Api::<ConfigMap>::namespaced(client(), "apps");
        let meta = metadata_api(namespaced, &());
        assert_eq!(meta.resource_url(), "/api/v1/namespaces/apps/configmaps");
        assert_eq!(meta.namespace(), Some("apps"));
        let all = metadata_api(Api::<ConfigMap>::all(client()), &());
        assert_eq!(all.resource_url(), "/api/v1/configmaps");
        let nodes = metadata_api(Api::<Node>::all(client()), &());
        assert_eq!(nodes.resource_url(), "/api/v1/nodes");
        let ar = ApiResource::erase::<ConfigMap>(&());
        let dynamic = Api::<DynamicObject>::namespaced_with(client(), "x", &ar);
        let meta = metadata_api(dynamic, &ar);
        assert_eq!(meta.resource_url(), "/api/v1/namespaces/x/configmaps");
        assert!(<PartialObjectMeta<DynamicObject> as Resource>::metadata_api());
    }
}
