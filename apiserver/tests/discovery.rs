//! Discovery in both styles: aggregated (`APIGroupDiscoveryList` on `/api` and `/apis`, as
//! 1.26+ serves it to clients that ask) and legacy (1.24: `APIGroupList` only, when
//! `ServerConfig::aggregated_discovery` is off), with what kube-client's `Discovery` makes
//! of each.

mod common;

use common::*;
use kinformer_apiserver::ServerConfig;
use kube::discovery::Discovery;
use serde_json::json;

const KUBE_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// `GET /apis` asking for aggregated discovery first, as kube-client and kubectl do.
async fn apis_as_kube_asks(url: &str) -> Answer {
    request_with(
        "GET",
        &format!("{url}/apis"),
        &[("accept", KUBE_ACCEPT)],
        "",
    )
    .await
}

#[tokio::test]
async fn aggregated_discovery_is_served_to_clients_that_ask_for_it() {
    let server = start().await;
    server.create_crd(gadget_crd()).unwrap();
    let url = server.url();
    let a = apis_as_kube_asks(&url).await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let doc = a.json();
    assert_eq!(
        (&doc["kind"], &doc["apiVersion"]),
        (
            &json!("APIGroupDiscoveryList"),
            &json!("apidiscovery.k8s.io/v2")
        )
    );
    let gadgets = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "example.org")
        .expect("the CRD's group");
    assert_eq!(gadgets["versions"][0]["version"], "v2", "preferred first");
    let r = &gadgets["versions"][0]["resources"][0];
    assert_eq!(
        (&r["resource"], &r["scope"]),
        (&json!("gadgets"), &json!("Namespaced"))
    );
    assert_eq!(
        r["responseKind"],
        json!({"group": "example.org", "version": "v2", "kind": "Gadget"})
    );
    assert_eq!(r["shortNames"], json!(["gd"]));

    // The core group on /api, and v2beta1 for clients that only know it.
    let core = request_with(
        "GET",
        &format!("{url}/api"),
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        )],
        "",
    )
    .await;
    assert_eq!(core.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    let pods = core.json()["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "pods")
        .cloned()
        .unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["subresources"][0]["subresource"], "status");

    // Without the parameters: the legacy documents.
    let legacy = get(&format!("{url}/apis")).await.json();
    assert_eq!(legacy["kind"], "APIGroupList");

    // kube-client: both algorithms find the same groups and resources.
    let client = kube_client(&server);
    let legacy = Discovery::new(client.clone()).run().await.unwrap();
    let aggregated = Discovery::new(client).run_aggregated().await.unwrap();
    let names = |d: &Discovery| {
        let mut v: Vec<String> = d
            .groups()
            .flat_map(|g| {
                g.recommended_resources()
                    .into_iter()
                    .map(|(ar, _)| format!("{}/{}", ar.group, ar.plural))
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&legacy), names(&aggregated));
    assert!(names(&aggregated).contains(&"apps/deployments".to_string()));
    assert!(names(&aggregated).contains(&"/configmaps".to_string()));
}

#[tokio::test]
async fn a_1_24_style_server_answers_apis_with_the_group_list_only() {
    let server = start_with(ServerConfig {
        aggregated_discovery: false,
        ..fast_config()
    })
    .await;
    let url = server.url();
    let a = apis_as_kube_asks(&url).await;
    assert_eq!(a.headers["content-type"], "application/json");
    assert_eq!(a.json()["kind"], "APIGroupList");
    let client = kube_client(&server);
    // kube's aggregated algorithm decodes the group list as an empty aggregated list (the
    // client must fall back to the legacy one, as kubectl does).
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(aggregated.get("apps").is_none());
    let legacy = Discovery::new(client).run().await.unwrap();
    assert!(legacy.get("apps").is_some());
}
