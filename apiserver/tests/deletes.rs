//! What a DELETE answers, per kind, as kube-apiserver's registries answer it, and the
//! ownerReferences garbage collector with each propagation policy.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_apiserver::ServerConfig;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

fn delete_with(url: &str, options: &Value) -> impl std::future::Future<Output = Answer> {
    let url = url.to_string();
    let body = options.to_string();
    async move { request("DELETE", &url, Some("application/json"), body).await }
}

#[tokio::test]
async fn deletes_answer_a_status_or_the_object_as_the_kinds_registry_does() {
    let server = start().await;
    let url = server.url();
    let ns = format!("{url}/api/v1/namespaces/default");

    // ConfigMaps: a Status with the name, the resource as `kind`, and the uid.
    let created = post_json(&format!("{ns}/configmaps"), &cm("c", &[]))
        .await
        .json();
    let a = delete(&format!("{ns}/configmaps/c")).await;
    assert_eq!(a.status, 200);
    let s = a.json();
    assert_eq!(
        (&s["kind"], &s["status"]),
        (&json!("Status"), &json!("Success"))
    );
    assert_eq!(
        s["details"],
        json!({"name": "c", "kind": "configmaps", "uid": created["metadata"]["uid"]})
    );

    // apps/v1: the group is in the details too.
    let deploys = format!("{url}/apis/apps/v1/namespaces/default/deployments");
    let d = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}}}});
    post_json(&deploys, &d).await;
    let s = delete(&format!("{deploys}/d")).await.json();
    assert_eq!(s["details"]["group"], "apps");
    assert_eq!(s["details"]["kind"], "deployments");

    // Pods, Services, custom resources: the object.
    let pod =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    post_json(&format!("{ns}/pods"), &pod).await;
    let o = delete(&format!("{ns}/pods/p")).await.json();
    assert_eq!(
        (&o["kind"], &o["metadata"]["name"]),
        (&json!("Pod"), &json!("p"))
    );
    let widgets = format!("{url}/apis/example.com/v1/namespaces/default/widgets");
    post_json(&widgets, &json!({"metadata": {"name": "w"}})).await;
    assert_eq!(
        delete(&format!("{widgets}/w")).await.json()["kind"],
        "Widget"
    );

    // Held by a finalizer: the object, with its deletionTimestamp, for every kind.
    let mut held = cm("held", &[]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post_json(&format!("{ns}/configmaps"), &held).await;
    let o = delete(&format!("{ns}/configmaps/held")).await;
    assert_eq!(o.status, 200);
    let o = o.json();
    assert_eq!(o["kind"], "ConfigMap");
    assert!(o["metadata"]["deletionTimestamp"].is_string(), "{o}");
    // orphanDependents=false on a delete that does not complete: 202.
    let mut held2 = cm("held2", &[]);
    held2["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post_json(&format!("{ns}/configmaps"), &held2).await;
    let a = delete_with(
        &format!("{ns}/configmaps/held2"),
        &json!({"orphanDependents": false}),
    )
    .await;
    assert_eq!(a.status, 202);

    // kube-client sees the Status side for ConfigMaps.
    let api: Api<ConfigMap> = Api::namespaced(kube_client(&server), "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cm("k", &[])).unwrap(),
    )
    .await
    .unwrap();
    let answer = api.delete("k", &DeleteParams::default()).await.unwrap();
    let status = answer.right().expect("a Status");
    assert_eq!(status.details.unwrap().name, "k");
}

#[tokio::test]
async fn a_scheduled_pod_waits_for_its_grace_period_and_goes_at_grace_zero() {
    let server = start().await;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());
    let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "node-1", "terminationGracePeriodSeconds": 20, "containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}});
    post_json(&pods, &pod).await;
    let o = delete(&format!("{pods}/p")).await.json();
    assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 20);
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    // No kubelet ends it: it stays, Terminating, and an update does not delete it.
    assert_eq!(get(&format!("{pods}/p")).await.status, 200);
    let p = merge_patch(
        &format!("{pods}/p"),
        &json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    assert_eq!(p.status, 200);
    assert_eq!(get(&format!("{pods}/p")).await.status, 200);
    // Forced: gone.
    let a = delete_with(&format!("{pods}/p"), &json!({"gracePeriodSeconds": 0})).await;
    assert_eq!(a.status, 200);
    assert_eq!(get(&format!("{pods}/p")).await.status, 404);
    // A finished Pod goes at once.
    let mut done = pod.clone();
    done["metadata"]["name"] = json!("done");
    done["status"]["phase"] = json!("Succeeded");
    post_json(&pods, &done).await;
    delete(&format!("{pods}/done")).await;
    assert_eq!(get(&format!("{pods}/done")).await.status, 404);
}

fn gc_config() -> ServerConfig {
    ServerConfig {
        garbage_collection: true,
        ..fast_config()
    }
}

fn owned(name: &str, owner: &Value, block: bool) -> Value {
    let mut v = cm(name, &[]);
    v["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": block
    }]);
    v
}

#[tokio::test]
async fn the_garbage_collector_honours_each_propagation_policy() {
    let server = start_with(gc_config()).await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let exists = |name: &str| server.get("", "configmaps", Some("default"), name).is_ok();
    let within = Duration::from_secs(5);

    // Background (the default): the owner at once, its dependents after.
    let owner = post_json(&base, &cm("owner", &[])).await.json();
    post_json(&base, &owned("dep", &owner, false)).await;
    let s = delete(&format!("{base}/owner")).await.json();
    assert_eq!(s["status"], "Success");
    eventually(within, "dependent collected", || !exists("dep")).await;

    // Orphan (query parameter): the dependent stays, without its reference.
    let owner = post_json(&base, &cm("owner", &[])).await.json();
    post_json(&base, &owned("kept", &owner, false)).await;
    let a = request(
        "DELETE",
        &format!("{base}/owner?propagationPolicy=Orphan"),
        None,
        Bytes::new(),
    )
    .await;
    let o = a.json();
    assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]), "{o}");
    eventually(within, "orphaned owner gone", || !exists("owner")).await;
    let kept = server
        .get("", "configmaps", Some("default"), "kept")
        .unwrap();
    assert!(kept["metadata"].get("ownerReferences").is_none(), "{kept}");

    // Foreground (DeleteOptions body): the owner waits for blocking dependents.
    let owner = post_json(&base, &cm("owner", &[])).await.json();
    let mut held = owned("held", &owner, true);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post_json(&base, &held).await;
    let o = delete_with(
        &format!("{base}/owner"),
        &json!({"propagationPolicy": "Foreground"}),
    )
    .await
    .json();
    assert_eq!(o["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    eventually(within, "dependent marked", || {
        server
            .get("", "configmaps", Some("default"), "held")
            .is_ok_and(|h| h["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    assert_eq!(server.collect_garbage(), 0, "the owner waits");
    assert!(exists("owner"));
    merge_patch(
        &format!("{base}/held"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    eventually(within, "foreground owner gone", || {
        !exists("owner") && !exists("held")
    })
    .await;

    // A dependent whose owner never existed (or was replaced) is collected.
    let mut ghost = cm("ghost-owner", &[]);
    ghost["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    post_json(&base, &owned("stray", &ghost, false)).await;
    eventually(within, "stray dependent collected", || !exists("stray")).await;
}

#[tokio::test]
async fn without_the_collector_a_propagation_policy_changes_nothing() {
    let server = start().await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let owner = post_json(&base, &cm("owner", &[])).await.json();
    post_json(&base, &owned("dep", &owner, false)).await;
    let s = delete_with(
        &format!("{base}/owner"),
        &json!({"propagationPolicy": "Foreground"}),
    )
    .await
    .json();
    assert_eq!(s["status"], "Success", "deleted at once: {s}");
    assert_eq!(
        server.collect_garbage(),
        1,
        "a collection run by hand still works"
    );
    assert!(
        server
            .get("", "configmaps", Some("default"), "dep")
            .is_err()
    );
}

#[tokio::test]
async fn kube_client_delete_params_choose_the_propagation() {
    let server = start_with(gc_config()).await;
    let api: Api<ConfigMap> = Api::namespaced(kube_client(&server), "default");
    let make = |v: Value| serde_json::from_value::<ConfigMap>(v).unwrap();
    let owner = api
        .create(&PostParams::default(), &make(cm("owner", &[])))
        .await
        .unwrap();
    let owner_json = serde_json::to_value(&owner).unwrap();
    api.create(
        &PostParams::default(),
        &make(owned("dep", &owner_json, true)),
    )
    .await
    .unwrap();
    // Foreground: the answer is the owner, held by `foregroundDeletion`; both then go.
    let held = api
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .expect("the owner, still there");
    assert_eq!(
        held.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    let gone = |name: &str| server.get("", "configmaps", Some("default"), name).is_err();
    eventually(Duration::from_secs(5), "owner and dependent gone", || {
        gone("owner") && gone("dep")
    })
    .await;
    // Orphan through DeleteParams.
    let owner = api
        .create(&PostParams::default(), &make(cm("owner", &[])))
        .await
        .unwrap();
    let owner_json = serde_json::to_value(&owner).unwrap();
    api.create(
        &PostParams::default(),
        &make(owned("kept", &owner_json, false)),
    )
    .await
    .unwrap();
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    eventually(Duration::from_secs(5), "orphaned owner gone", || {
        gone("owner")
    })
    .await;
    let kept = api.get("kept").await.unwrap();
    assert!(kept.metadata.owner_references.is_none());
}
