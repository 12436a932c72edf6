//! A `#[derive(CustomResource)]` type through kube-client: its CRD is created with
//! kube-client, discovered by kube's `Discovery` (both styles), and the type round-trips.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::discovery::{Discovery, Scope};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A gadget.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "example.org",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus",
    shortname = "gd"
)]
pub struct GadgetSpec {
    /// How big.
    pub size: i64,
    /// Its colour.
    pub color: Option<String>,
}

/// What a gadget reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct GadgetStatus {
    /// Its phase.
    pub phase: String,
}

#[tokio::test]
async fn a_derived_custom_resource_round_trips_through_kube_client() {
    let server = start().await;
    let client = kube_client(&server);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .create(&PostParams::default(), &Gadget::crd())
        .await
        .unwrap();
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Established"))
        .map(|c| c.status.clone());
    assert_eq!(established.as_deref(), Some("True"));

    // Both discovery styles find it, with its scope and short name.
    for aggregated in [false, true] {
        let d = Discovery::new(client.clone());
        let d = if aggregated {
            d.run_aggregated().await.unwrap()
        } else {
            d.run().await.unwrap()
        };
        let group = d.get("example.org").expect("the CRD's group is discovered");
        let (ar, caps) = group
            .recommended_resources()
            .into_iter()
            .find(|(ar, _)| ar.plural == "gadgets")
            .expect("gadgets");
        assert_eq!(ar.kind, "Gadget");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(caps.supports_operation("watch"), "aggregated={aggregated}");
        assert!(
            caps.subresources.iter().any(|(s, _)| s.plural == "status"),
            "aggregated={aggregated}: {:?}",
            caps.subresources
        );
    }

    let api: Api<Gadget> = Api::namespaced(client.clone(), "default");
    let mut watch = api
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    let mut g = Gadget::new(
        "g1",
        GadgetSpec {
            size: 3,
            color: Some("red".into()),
        },
    );
    let created = api.create(&PostParams::default(), &g).await.unwrap();
    assert_eq!(created.spec, g.spec);
    assert_eq!(created.metadata.generation, Some(1));
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].spec, g.spec);

    // Status through its subresource, spec through the object.
    let status = api
        .patch_status(
            "g1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.as_ref().unwrap().phase, "Ready");
    assert_eq!(api.get_status("g1").await.unwrap().status, status.status);
    g = api.get("g1").await.unwrap();
    g.spec.size = 4;
    let replaced = api.replace("g1", &PostParams::default(), &g).await.unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(replaced.status.unwrap().phase, "Ready");
    // A stale replace conflicts.
    let stale = api
        .replace("g1", &PostParams::default(), &g)
        .await
        .unwrap_err();
    assert!(matches!(stale, kube::Error::Api(s) if s.code == 409));

    // A custom resource's delete answers the object.
    let deleted = api.delete("g1", &DeleteParams::default()).await.unwrap();
    assert_eq!(deleted.left().expect("the object").spec.size, 4);

    let mut kinds = Vec::new();
    while kinds.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(5), watch.try_next())
            .await
            .expect("watch event in time")
            .unwrap()
            .expect("watch open");
        match ev {
            WatchEvent::Added(_) => kinds.push("ADDED"),
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            _ => {}
        }
    }
    assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);

    // Deleting the CRD stops serving the type.
    crds.delete("gadgets.example.org", &DeleteParams::default())
        .await
        .unwrap();
    let gone = api.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&gone, kube::Error::Api(s) if s.code == 404),
        "{gone:?}"
    );
}
