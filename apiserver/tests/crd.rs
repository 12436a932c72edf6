//! CustomResourceDefinitions over HTTP: a CRD makes its type served and discovered, its
//! objects follow the CRD's rules (versions, status subresource, generation, schema), and
//! deleting it deletes its objects and stops serving the type.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn gadget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": {"size": size}})
}

fn condition<'a>(crd: &'a Value, t: &str) -> &'a Value {
    crd["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .unwrap_or_else(|| panic!("no {t} condition in {crd}"))
}

#[tokio::test]
async fn a_crd_makes_its_type_served_and_discovered_at_every_version() {
    let server = start().await;
    let url = server.url();
    let a = post_json(&format!("{url}{CRDS}"), &gadget_crd()).await;
    assert_eq!(a.status, 201, "{}", a.json());
    let crd = a.json();
    assert_eq!(condition(&crd, "Established")["status"], "True");
    assert_eq!(condition(&crd, "NamesAccepted")["status"], "True");
    assert_eq!(crd["status"]["acceptedNames"]["shortNames"], json!(["gd"]));
    assert_eq!(crd["metadata"]["generation"], 1);
    assert_eq!(
        crd["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );

    // Discovery: the group, both versions (v2 preferred), the status and scale subresources.
    let group = get(&format!("{url}/apis/example.org")).await.json();
    assert_eq!(group["preferredVersion"]["version"], "v2");
    let v1 = get(&format!("{url}/apis/example.org/v1")).await.json();
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gadgets", "gadgets/status", "gadgets/scale"]);
    assert_eq!(v1["resources"][0]["shortNames"], json!(["gd"]));
    assert_eq!(v1["resources"][0]["categories"], json!(["all"]));
    let v2 = get(&format!("{url}/apis/example.org/v2")).await.json();
    assert_eq!(v2["resources"][0]["name"], "gadgets");

    // Objects: created at v1, read at v2 with only apiVersion rewritten.
    let v1_path = format!("{url}/apis/example.org/v1/namespaces/default/gadgets");
    let v2_path = format!("{url}/apis/example.org/v2/namespaces/default/gadgets");
    let created = post_json(&v1_path, &gadget("g1", 3)).await;
    assert_eq!(created.status, 201, "{}", created.json());
    assert_eq!(created.json()["metadata"]["generation"], 1);
    let at_v2 = get(&format!("{v2_path}/g1")).await.json();
    assert_eq!(at_v2["apiVersion"], "example.org/v2");
    assert_eq!(at_v2["spec"]["size"], 3);
    let list = get(&v2_path).await.json();
    assert_eq!(list["kind"], "GadgetList");
    assert_eq!(list["apiVersion"], "example.org/v2");
    assert_eq!(
        list["items"][0]["apiVersion"], "example.org/v2",
        "custom resources' list items keep apiVersion and kind"
    );
    assert_eq!(list["items"][0]["kind"], "Gadget");
    // A write at v2 is stored at v1.
    let mut body = at_v2.clone();
    body["spec"]["size"] = json!(4);
    let replaced = put_json(&format!("{v2_path}/g1"), &body).await;
    assert_eq!(replaced.status, 200, "{}", replaced.json());
    assert_eq!(replaced.json()["apiVersion"], "example.org/v2");
    assert_eq!(
        server
            .get("example.org", "gadgets", Some("default"), "g1")
            .unwrap()["apiVersion"],
        "example.org/v1"
    );
}

#[tokio::test]
async fn the_status_subresource_changes_only_status_and_generation_counts_spec_changes() {
    let server = start().await;
    let url = server.url();
    server.create_crd(gadget_crd()).unwrap();
    let base = format!("{url}/apis/example.org/v1/namespaces/default/gadgets");
    let mut body = gadget("g", 1);
    body["status"] = json!({"phase": "ignored on create"});
    let created = post_json(&base, &body).await.json();
    assert!(created.get("status").is_none(), "{created}");

    // The main endpoint ignores status.
    let mut with_status = created.clone();
    with_status["status"] = json!({"phase": "Ready"});
    let a = put_json(&format!("{base}/g"), &with_status).await.json();
    assert!(a.get("status").is_none(), "{a}");
    assert_eq!(
        a["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
        "a no-op"
    );

    // The status endpoint changes only status, and not the generation.
    let mut status_body = created.clone();
    status_body["status"] = json!({"phase": "Ready", "replicas": 2});
    status_body["spec"]["size"] = json!(99);
    let s = put_json(&format!("{base}/g/status"), &status_body).await;
    assert_eq!(s.status, 200, "{}", s.json());
    let s = s.json();
    assert_eq!(s["status"]["phase"], "Ready");
    assert_eq!(s["spec"]["size"], 1);
    assert_eq!(s["metadata"]["generation"], 1);
    let patched = merge_patch(
        &format!("{base}/g/status"),
        &json!({"status": {"phase": "Done"}}),
    )
    .await;
    assert_eq!(patched.json()["status"]["phase"], "Done");
    assert_eq!(
        get(&format!("{base}/g/status")).await.json()["status"]["phase"],
        "Done"
    );

    // A spec change bumps it.
    let p = merge_patch(&format!("{base}/g"), &json!({"spec": {"size": 2}}))
        .await
        .json();
    assert_eq!(p["metadata"]["generation"], 2);
    assert_eq!(
        p["status"]["phase"], "Done",
        "status kept by the main endpoint"
    );
    let p = merge_patch(
        &format!("{base}/g"),
        &json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await
    .json();
    assert_eq!(
        p["metadata"]["generation"], 2,
        "metadata changes do not count"
    );

    // The scale subresource reads and writes the CRD's paths.
    let scale = get(&format!("{base}/g/scale")).await.json();
    assert_eq!(
        (&scale["kind"], &scale["status"]["replicas"]),
        (&json!("Scale"), &json!(2))
    );
    let s = merge_patch(
        &format!("{base}/g/scale"),
        &json!({"spec": {"replicas": 5}}),
    )
    .await
    .json();
    assert_eq!(s["spec"]["replicas"], 5);
    assert_eq!(
        server
            .get("example.org", "gadgets", Some("default"), "g")
            .unwrap()["spec"]["replicas"],
        5
    );
}

#[tokio::test]
async fn schemas_and_crds_are_validated_with_every_cause() {
    let server = start().await;
    let url = server.url();
    let mut bad = gadget_crd();
    bad["metadata"]["name"] = json!("wrong.example.org");
    bad["spec"]["scope"] = json!("Galaxy");
    let a = post_json(&format!("{url}{CRDS}"), &bad).await;
    assert_eq!(a.status, 422);
    let s = a.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(s["details"]["causes"].as_array().unwrap().len(), 2, "{s}");
    assert!(get(&format!("{url}/apis/example.org")).await.status == 404);

    server.create_crd(gadget_crd()).unwrap();
    let base = format!("{url}/apis/example.org/v1/namespaces/default/gadgets");
    let a = post_json(
        &base,
        &json!({"metadata": {"name": "x"}, "spec": {"size": "big", "color": "green"}}),
    )
    .await;
    assert_eq!(a.status, 422, "{}", a.json());
    let s = a.json();
    assert_eq!(s["details"]["kind"], "Gadget");
    let fields: Vec<&str> = s["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.color", "spec.size"]);
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("spec.size in body must be of type integer: \"string\""),
        "{s}"
    );
    // Strategic merge patches are refused for custom resources, as on a real server.
    post_json(&base, &gadget("ok", 1)).await;
    let a = request(
        "PATCH",
        &format!("{base}/ok"),
        Some("application/strategic-merge-patch+json"),
        "{}",
    )
    .await;
    assert_eq!(a.status, 415);
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving_it() {
    let server = start().await;
    let url = server.url();
    server.create_crd(gadget_crd()).unwrap();
    let base = format!("{url}/apis/example.org/v1/namespaces/default/gadgets");
    post_json(&base, &gadget("a", 1)).await;
    let mut held = gadget("held", 1);
    held["metadata"]["finalizers"] = json!(["example.org/hold"]);
    post_json(&base, &held).await;
    let mut watch = WatchLines::open(&format!(
        "{base}?watch=1&resourceVersion={}",
        server.resource_version()
    ))
    .await;

    // The answer is the CRD marked for deletion; it waits for the held object.
    let a = delete(&format!("{url}{CRDS}/gadgets.example.org")).await;
    assert_eq!(a.status, 200);
    let crd = a.json();
    assert!(crd["metadata"]["deletionTimestamp"].is_string(), "{crd}");
    assert_eq!(condition(&crd, "Terminating")["status"], "True");
    let gone = watch
        .until(Duration::from_secs(5), |l| l.kind() == "DELETED")
        .await;
    assert_eq!(gone.name(), "a");
    let marked = watch
        .until(Duration::from_secs(5), |l| l.kind() == "MODIFIED")
        .await;
    assert_eq!(marked.name(), "held");
    assert!(marked.event()["object"]["metadata"]["deletionTimestamp"].is_string());
    // While terminating: still served, but no new objects.
    assert_eq!(get(&format!("{base}/held")).await.status, 200);
    let refused = post_json(&base, &gadget("new", 1)).await;
    assert_eq!(
        (refused.status, refused.json()["reason"].clone()),
        (405, json!("MethodNotAllowed"))
    );

    // The last finalizer goes: the object, then the CRD, then the type.
    let p = merge_patch(
        &format!("{base}/held"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(p.status, 200, "{}", p.json());
    let last = watch
        .until(Duration::from_secs(5), |l| l.kind() == "DELETED")
        .await;
    assert_eq!(last.name(), "held");
    watch.until_end(Duration::from_secs(5)).await;
    let a = get(&base).await;
    assert_eq!(
        (a.status, a.json()["reason"].clone()),
        (404, json!("NotFound"))
    );
    assert_eq!(get(&format!("{url}/apis/example.org")).await.status, 404);
    assert_eq!(
        get(&format!("{url}{CRDS}/gadgets.example.org"))
            .await
            .status,
        404
    );
    let groups = get(&format!("{url}/apis")).await.json();
    assert!(!groups.to_string().contains("example.org"), "{groups}");

    // A new CRD of the same name starts empty.
    server.create_crd(gadget_crd()).unwrap();
    let list = get(&base).await.json();
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn a_cluster_scoped_crd_and_a_name_conflict() {
    let server = start().await;
    let url = server.url();
    let mut crd = gadget_crd();
    crd["spec"]["scope"] = json!("Cluster");
    server.create_crd(crd).unwrap();
    let a = post_json(
        &format!("{url}/apis/example.org/v1/gadgets"),
        &gadget("c", 1),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.json());
    assert!(a.json()["metadata"].get("namespace").is_none());
    assert_eq!(
        get(&format!(
            "{url}/apis/example.org/v1/namespaces/default/gadgets"
        ))
        .await
        .status,
        404
    );

    // widgets.example.com is already served (the default Widget type).
    let mut widgets = gadget_crd();
    widgets["metadata"]["name"] = json!("widgets.example.com");
    widgets["spec"]["group"] = json!("example.com");
    widgets["spec"]["names"] = json!({"plural": "widgets", "kind": "Widget"});
    let created = server.create_crd(widgets).unwrap();
    assert_eq!(condition(&created, "NamesAccepted")["status"], "False");
    assert_eq!(
        condition(&created, "NamesAccepted")["reason"],
        "NameConflict"
    );
    assert_eq!(condition(&created, "Established")["status"], "False");
    // Deleting it leaves the served type alone.
    let d = server.delete_crd("widgets.example.com").unwrap();
    assert!(d.gone, "no objects to wait for");
    assert_eq!(
        get(&format!(
            "{url}/apis/example.com/v1/namespaces/default/widgets"
        ))
        .await
        .status,
        200
    );
}

/// As the real server: a custom resource is never updated without a
/// resourceVersion (422), where a built-in one is (unconditional, "0" too).
#[tokio::test]
async fn a_custom_resource_update_needs_a_resource_version() {
    let server = start().await;
    let url = server.url();
    server.create_crd(gadget_crd()).unwrap();
    let base = format!("{url}/apis/example.org/v1/namespaces/default/gadgets");
    assert_eq!(post_json(&base, &gadget("g", 1)).await.status, 201);
    for rv in [None, Some("0")] {
        let mut body = gadget("g", 2);
        if let Some(rv) = rv {
            body["metadata"]["resourceVersion"] = json!(rv);
        }
        let a = put_json(&format!("{base}/g"), &body).await;
        assert_eq!(a.status, 422, "{rv:?}: {}", a.json());
        let message = a.json()["message"].as_str().unwrap_or_default().to_owned();
        assert!(
            message.contains("must be specified for an update"),
            "{message}"
        );
    }
    let cms = format!("{url}/api/v1/namespaces/default/configmaps");
    let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
    assert_eq!(post_json(&cms, &cm).await.status, 201);
    let mut zero = json!({"metadata": {"name": "c", "resourceVersion": "0"}, "data": {"a": "2"}});
    assert_eq!(put_json(&format!("{cms}/c"), &zero).await.status, 200);
    zero["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(put_json(&format!("{cms}/c"), &zero).await.status, 200);
}
