//! kube-client (`kube::Api`) against the server: CRUD, patches, pagination, errors, watches with bookmarks.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::ObjectMeta;
use serde_json::json;

fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), name.to_string())])),
        ..Default::default()
    }
}

fn api_status(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_patch_and_errors() {
    let server = start().await;
    let client = kube_client(&server);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = api
        .create(&PostParams::default(), &config_map("a", &[("app", "web")]))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert!(created.metadata.creation_timestamp.is_some());
    // A real server keeps no generation on ConfigMaps.
    assert_eq!(created.metadata.generation, None);
    assert_eq!(api.get("a").await.unwrap().metadata.uid.unwrap(), uid);

    let dup = api_status(
        api.create(&PostParams::default(), &config_map("a", &[]))
            .await
            .unwrap_err(),
    );
    assert!(dup.is_already_exists());
    assert!(api_status(api.get("missing").await.unwrap_err()).is_not_found());

    // generateName
    let mut generated = config_map("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("generated-".into());
    let g = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(g.metadata.name.unwrap().starts_with("generated-"));

    // patches
    let pp = PatchParams::default();
    let p = api
        .patch("a", &pp, &Patch::Merge(json!({"data": {"m": "1"}})))
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["m"], "1");
    let p = api
        .patch("a", &pp, &Patch::Strategic(json!({"data": {"s": "1"}})))
        .await
        .unwrap();
    assert_eq!(p.data.as_ref().unwrap()["s"], "1");
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/data/j", "value": "1"}])).unwrap();
    let p = api.patch("a", &pp, &Patch::<()>::Json(jp)).await.unwrap();
    assert_eq!(p.data.as_ref().unwrap().len(), 4);
    assert_eq!(p.metadata.generation, None);

    // replace with a stale resourceVersion
    let stale = created.clone();
    let conflict = api_status(
        api.replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert!(conflict.is_conflict());
    let mut fresh = api.get("a").await.unwrap();
    fresh.data = Some(BTreeMap::from([("only".to_string(), "this".to_string())]));
    let replaced = api
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap().len(), 1);

    // delete answers a Status naming the object, as a real server's ConfigMap registry
    let deleted = api.delete("a", &DeleteParams::default()).await.unwrap();
    let status = deleted.right().expect("a Status");
    assert_eq!(status.details.unwrap().uid, uid);
    assert!(
        api_status(api.delete("a", &DeleteParams::default()).await.unwrap_err()).is_not_found()
    );

    // cluster-scoped
    let ns: Api<Namespace> = Api::all(client);
    let names: Vec<String> = ns
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"default".to_string()));
}

#[tokio::test]
async fn pagination_selectors_and_delete_collection() {
    let server = start().await;
    for ns in ["ns1", "ns2"] {
        server.create_namespace(ns).unwrap();
    }
    for i in 0..25 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        server
            .create(
                "",
                "configmaps",
                Some("ns1"),
                cm(&format!("c{i:02}"), &[("tier", tier)]),
            )
            .unwrap();
    }
    server
        .create(
            "",
            "configmaps",
            Some("ns2"),
            cm("other", &[("tier", "even")]),
        )
        .unwrap();
    let client = kube_client(&server);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "ns1");

    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    let mut first_rv = None;
    loop {
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        let rv = page.metadata.resource_version.clone();
        assert_eq!(
            *first_rv.get_or_insert(rv.clone()),
            rv,
            "pages share the RV of the first page"
        );
        names.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => {
                assert!(page.metadata.remaining_item_count.unwrap() > 0);
                lp = lp.continue_token(&c);
            }
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 25);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);

    let even = api
        .list(&ListParams::default().labels("tier=even"))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 13);
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default().labels("tier=even"))
            .await
            .unwrap()
            .items
            .len(),
        14
    );
    assert_eq!(
        all.list(&ListParams::default().fields("metadata.namespace=ns2"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        api.list(&ListParams::default().labels("tier notin (even)"))
            .await
            .unwrap()
            .items
            .len(),
        12
    );

    let gone = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=odd"),
        )
        .await
        .unwrap();
    assert_eq!(gone.left().unwrap().items.len(), 12);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        13
    );
}

#[tokio::test]
async fn watch_events_and_bookmarks() {
    let server = start().await;
    let client = kube_client(&server);
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let wp = WatchParams::default().labels("app=web").timeout(10);
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();

    api.create(&PostParams::default(), &config_map("w", &[("app", "web")]))
        .await
        .unwrap();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();
    // invisible to this watch, but it moves the RV: a bookmark must report it
    api.create(
        &PostParams::default(),
        &config_map("hidden", &[("app", "db")]),
    )
    .await
    .unwrap();

    let mut seen = Vec::new();
    let mut bookmark_rv = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 3 || bookmark_rv.is_none() {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .expect("watch timed out")
            .unwrap()
            .expect("stream ended");
        match ev {
            WatchEvent::Added(c) => seen.push(("ADDED", c.metadata.name.unwrap())),
            WatchEvent::Modified(c) => seen.push(("MODIFIED", c.metadata.name.unwrap())),
            WatchEvent::Deleted(c) => seen.push(("DELETED", c.metadata.name.unwrap())),
            WatchEvent::Bookmark(b) => {
                if seen.len() == 3 {
                    bookmark_rv = Some(b.metadata.resource_version);
                }
            }
            WatchEvent::Error(e) => panic!("error event {e:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            ("ADDED", "w".to_string()),
            ("MODIFIED", "w".to_string()),
            ("DELETED", "w".to_string())
        ]
    );
    assert_eq!(bookmark_rv.unwrap(), server.resource_version().to_string());
}

#[tokio::test]
async fn dynamic_custom_resource() {
    let server = start().await;
    let client = kube_client(&server);
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let mut w = DynamicObject::new("w1", &ar);
    w.data = json!({"spec": {"size": 3}});
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.data["spec"]["size"], 3);
    let patched = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["size"], 4);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    // server-side apply is approximated as merge-or-create
    let applied = api
        .patch("w2", &PatchParams::apply("test"), &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}, "spec": {"size": 1}})))
        .await
        .unwrap();
    assert_eq!(applied.data["spec"]["size"], 1);
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}
