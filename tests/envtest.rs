//! The embedded API server as an envtest for Rust: kinformer's informer on a custom
//! resource whose CRD is created at run time; when the CRD goes, the informer sees its
//! objects deleted and reports the failures of its requests, and keeps running.

mod common;

use std::time::Duration;

use common::*;
use kinformer::{Backoff, Informer};
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
    status = "GadgetStatus"
)]
pub struct GadgetSpec {
    /// How big.
    pub size: i64,
}

/// What a gadget reports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct GadgetStatus {
    /// Its phase.
    pub phase: String,
}

const SETTLE: Duration = Duration::from_secs(20);

fn gadget(name: &str, size: i64) -> serde_json::Value {
    json!({"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": {"size": size}})
}

#[actix::test]
async fn an_informer_on_a_custom_resource_lists_watches_and_reports_its_crd_going() {
    let server = server(1000);
    server
        .create_crd(serde_json::to_value(Gadget::crd()).unwrap())
        .unwrap();
    server
        .create("example.org", "gadgets", Some("default"), gadget("g1", 1))
        .unwrap();
    let informer = Informer::builder(kube::Api::<Gadget>::namespaced(client(&server), "default"))
        .backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(200),
            Duration::from_secs(60),
        ))
        .start()
        .unwrap();
    informer.wait_for_sync(SETTLE).await.unwrap();
    let sizes = |i: &Informer<Gadget>| {
        let mut v: Vec<(String, i64)> = i
            .store()
            .snapshot()
            .list()
            .iter()
            .map(|g| (g.metadata.name.clone().unwrap_or_default(), g.spec.size))
            .collect();
        v.sort();
        v
    };
    assert_eq!(sizes(&informer), [("g1".to_string(), 1)]);

    server
        .create("example.org", "gadgets", Some("default"), gadget("g2", 2))
        .unwrap();
    let mut g2 = server
        .get("example.org", "gadgets", Some("default"), "g2")
        .unwrap();
    g2["spec"]["size"] = json!(5);
    server
        .update("example.org", "gadgets", Some("default"), g2)
        .unwrap();
    eventually(
        SETTLE,
        "the watch delivers the new object and its update",
        || sizes(&informer) == [("g1".to_string(), 1), ("g2".to_string(), 5)],
    )
    .await;
    assert!(informer.last_failure().is_none());

    // The CRD goes: its objects are deleted (the informer sees them go), its watch ends,
    // and every later request gets 404, which the informer reports and retries.
    assert!(server.delete_crd("gadgets.example.org").unwrap().gone);
    eventually(SETTLE, "the deletions reach the cache", || {
        informer.store().snapshot().is_empty()
    })
    .await;
    eventually(SETTLE, "the 404 is reported", || {
        informer
            .last_failure()
            .is_some_and(|f| f.status == Some(404))
    })
    .await;
    assert!(
        !informer.is_stopped(),
        "a missing type is retried, not fatal"
    );

    // The CRD comes back: the informer recovers by itself.
    server
        .create_crd(serde_json::to_value(Gadget::crd()).unwrap())
        .unwrap();
    server
        .create("example.org", "gadgets", Some("default"), gadget("g3", 3))
        .unwrap();
    eventually(SETTLE, "the informer sees the new CRD's object", || {
        sizes(&informer) == [("g3".to_string(), 3)]
    })
    .await;
    informer.stop().await;
}
