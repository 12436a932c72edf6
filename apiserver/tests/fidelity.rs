//! Answers shaped like a real server's: list items without apiVersion/kind (built-in
//! types), managedFields written per manager and operation, metadata-only answers
//! (`PartialObjectMetadata`), 406 for representations the server does not have.

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_apiserver::ServerConfig;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

#[tokio::test]
async fn list_items_of_built_in_types_carry_no_api_version_or_kind() {
    let server = start().await;
    let url = server.url();
    post_json(
        &format!("{url}/api/v1/namespaces/default/configmaps"),
        &cm("a", &[]),
    )
    .await;
    server.seed_configmaps("seeded", 2).unwrap();
    let list = get(&format!("{url}/api/v1/configmaps")).await.json();
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (&json!("ConfigMapList"), &json!("v1"))
    );
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for item in items {
        assert!(
            item.get("apiVersion").is_none() && item.get("kind").is_none(),
            "{item}"
        );
        assert!(item["metadata"]["name"].is_string());
    }
    // A get and a watch event carry them.
    let one = get(&format!("{url}/api/v1/namespaces/default/configmaps/a"))
        .await
        .json();
    assert_eq!(
        (&one["kind"], &one["apiVersion"]),
        (&json!("ConfigMap"), &json!("v1"))
    );
    let mut w = WatchLines::open(&format!(
        "{url}/api/v1/namespaces/seeded/configmaps?watch=1"
    ))
    .await;
    let ev = w.events(1, Duration::from_secs(5)).await;
    assert_eq!(ev[0].event()["object"]["kind"], "ConfigMap");
    // Custom resources keep them in lists, as a real server's do.
    post_json(
        &format!("{url}/apis/example.com/v1/namespaces/default/widgets"),
        &json!({"metadata": {"name": "w"}}),
    )
    .await;
    let widgets = get(&format!("{url}/apis/example.com/v1/widgets"))
        .await
        .json();
    assert_eq!(widgets["items"][0]["kind"], "Widget");
}

fn entries(obj: &Value) -> Vec<(String, String, Option<String>)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap().to_string(),
                        e["operation"].as_str().unwrap().to_string(),
                        e["subresource"].as_str().map(str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn managed_fields_name_each_manager_and_operation() {
    let server = start().await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let ua = [
        ("content-type", "application/json"),
        ("user-agent", "my-controller/1.2 (linux)"),
    ];
    let created = request_with("POST", &base, &ua, cm("a", &[("app", "x")]).to_string())
        .await
        .json();
    assert_eq!(
        entries(&created),
        [("my-controller".into(), "Update".into(), None)]
    );
    let e = &created["metadata"]["managedFields"][0];
    assert_eq!(
        (&e["apiVersion"], &e["fieldsType"]),
        (&json!("v1"), &json!("FieldsV1"))
    );
    assert_eq!(e["fieldsV1"]["f:data"], json!({".": {}, "f:key": {}}));
    assert_eq!(
        e["fieldsV1"]["f:metadata"]["f:labels"],
        json!({".": {}, "f:app": {}})
    );
    assert!(e["time"].is_string());

    // Another manager changes one field: it owns that one now.
    let patched = request_with(
        "PATCH",
        &format!("{base}/a?fieldManager=editor"),
        &[("content-type", "application/merge-patch+json")],
        json!({"data": {"key": "changed"}}).to_string(),
    )
    .await
    .json();
    let es = entries(&patched);
    assert_eq!(es.len(), 2, "{patched}");
    assert_eq!(es[1], ("editor".into(), "Update".into(), None));
    assert_eq!(
        patched["metadata"]["managedFields"][1]["fieldsV1"],
        json!({"f:data": {"f:key": {}}})
    );
    assert_eq!(
        patched["metadata"]["managedFields"][0]["fieldsV1"]["f:data"],
        json!({})
    );

    // An apply records an Apply entry; a body without managedFields keeps them.
    let applied = request_with(
        "PATCH",
        &format!("{base}/a?fieldManager=applier"),
        &[("content-type", "application/apply-patch+yaml")],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"other": "1"}}).to_string(),
    )
    .await
    .json();
    assert!(
        entries(&applied).contains(&("applier".into(), "Apply".into(), None)),
        "{applied}"
    );
    let mut replace = applied.clone();
    replace["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    let same = put_json(&format!("{base}/a"), &replace).await.json();
    assert_eq!(
        same["metadata"]["resourceVersion"], applied["metadata"]["resourceVersion"],
        "a no-op"
    );

    // A status write is recorded with its subresource.
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());
    post_json(
        &pods,
        &json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .await;
    let st = request_with(
        "PATCH",
        &format!("{pods}/p/status?fieldManager=kubelet"),
        &[("content-type", "application/merge-patch+json")],
        json!({"status": {"phase": "Running"}}).to_string(),
    )
    .await
    .json();
    assert!(
        entries(&st).contains(&("kubelet".into(), "Update".into(), Some("status".into()))),
        "{st}"
    );

    // An apply needs a field manager.
    let a = request_with(
        "PATCH",
        &format!("{base}/a"),
        &[("content-type", "application/apply-patch+yaml")],
        "{}",
    )
    .await;
    assert_eq!(a.status, 422);
}

#[tokio::test]
async fn managed_fields_can_be_switched_off() {
    let server = start_with(ServerConfig {
        managed_fields: false,
        ..fast_config()
    })
    .await;
    let created = post_json(
        &format!("{}/api/v1/namespaces/default/configmaps", server.url()),
        &cm("a", &[]),
    )
    .await
    .json();
    assert!(created["metadata"].get("managedFields").is_none());
    server.seed_configmaps("default", 1).unwrap();
    let seeded = server
        .get("", "configmaps", Some("default"), "seed-000000")
        .unwrap();
    assert!(seeded["metadata"].get("managedFields").is_none());
}

const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

#[tokio::test]
async fn metadata_only_lists_gets_and_watches() {
    let server = start().await;
    let url = server.url();
    let base = format!("{url}/api/v1/namespaces/default/configmaps");
    post_json(&base, &cm("a", &[("app", "x")])).await;
    let list = request_with("GET", &base, &[("accept", META_LIST)], "")
        .await
        .json();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    assert!(list["metadata"]["resourceVersion"].is_string());
    let item = &list["items"][0];
    assert_eq!(item["kind"], "PartialObjectMetadata");
    assert_eq!(item["metadata"]["labels"]["app"], "x");
    assert!(item.get("data").is_none(), "{item}");
    let one = request_with("GET", &format!("{base}/a"), &[("accept", META)], "")
        .await
        .json();
    assert_eq!(
        (&one["kind"], &one["metadata"]["name"]),
        (&json!("PartialObjectMetadata"), &json!("a"))
    );
    assert!(one.get("data").is_none());

    // The wrong form for the request, or an unknown one: 406.
    for (path, accept) in [
        (base.clone(), META),
        (format!("{base}/a"), META_LIST),
        (
            base.clone(),
            "application/json;as=Unknown;g=example.com;v=v1",
        ),
    ] {
        let a = request_with("GET", &path, &[("accept", accept)], "").await;
        assert_eq!(a.status, 406, "{path} {accept}");
        assert_eq!(a.json()["reason"], "NotAcceptable");
    }

    // kube-client's metadata API, watch included.
    let api: Api<ConfigMap> = Api::namespaced(kube_client(&server), "default");
    let metas = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(metas.items[0].metadata.name.as_deref(), Some("a"));
    let meta = api.get_metadata("a").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["app"], "x");
    let mut stream = api
        .watch_metadata(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    post_json(&base, &cm("b", &[])).await;
    let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match ev {
        WatchEvent::Added(m) => assert_eq!(m.metadata.name.as_deref(), Some("b")),
        other => panic!("{other:?}"),
    }
    let mut w = WatchLines::open_with_accept(&format!("{base}?watch=1"), Some(META)).await;
    let ev = w.events(1, Duration::from_secs(5)).await;
    assert_eq!(ev[0].event()["object"]["kind"], "PartialObjectMetadata");
    assert!(ev[0].event()["object"].get("data").is_none());
}
