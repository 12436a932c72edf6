//! The namespace lifecycle of a real API server (NamespaceLifecycle
//! admission and the namespace controller): no create in a missing
//! namespace (404) or in one being deleted (403); a deleted namespace is
//! `Terminating` until its content is gone; the initial namespaces cannot
//! be deleted.

mod common;

use common::{delete, fast_config, get, post_json, put_json, start, start_with};
use kinformer_apiserver::ServerConfig;
use serde_json::{Value, json};

fn cm(name: &str, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "finalizers": finalizers}, "data": {"k": "v"}})
}

fn ns(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

#[tokio::test]
async fn a_create_in_a_missing_namespace_is_404_before_validation() {
    let s = start().await;
    let url = format!("{}/api/v1/namespaces/nope/configmaps", s.url());
    let rv = s.resource_version();
    for body in [
        cm("a", &[]),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not Valid"}}),
    ] {
        let a = post_json(&url, &body).await;
        assert_eq!(a.status, 404, "{}", String::from_utf8_lossy(&a.body));
        let status = a.json();
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "namespaces \"nope\" not found");
        assert_eq!(
            status["details"],
            json!({"name": "nope", "kind": "namespaces"})
        );
    }
    let a = post_json(&format!("{url}?dryRun=All"), &cm("a", &[])).await;
    assert_eq!(a.status, 404);
    let e = s
        .create("", "configmaps", Some("nope"), cm("a", &[]))
        .unwrap_err();
    assert_eq!(e.code, 404);
    assert_eq!(s.resource_version(), rv, "nothing written");
    // Cluster-scoped objects have no namespace to check.
    let a = post_json(&format!("{}/api/v1/namespaces", s.url()), &ns("fresh")).await;
    assert_eq!(a.status, 201);
    assert_eq!(
        post_json(&url.replace("nope", "fresh"), &cm("a", &[]))
            .await
            .status,
        201
    );
}

#[tokio::test]
async fn a_namespace_is_created_active_and_keeps_its_finalizer_and_phase() {
    let s = start().await;
    let url = format!("{}/api/v1/namespaces", s.url());
    let mut body = ns("team");
    body["status"] = json!({"phase": "Terminating"});
    let created = post_json(&url, &body).await.json();
    assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(created["status"]["phase"], "Active");
    let mut changed = created.clone();
    changed["spec"]["finalizers"] = json!([]);
    changed["status"]["phase"] = json!("Terminating");
    changed["metadata"]["labels"] = json!({"team": "a"});
    let updated = put_json(&format!("{url}/team"), &changed).await.json();
    assert_eq!(updated["metadata"]["labels"]["team"], "a");
    assert_eq!(updated["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(updated["status"]["phase"], "Active");
}

#[tokio::test]
async fn a_deleted_namespace_terminates_until_its_content_is_gone() {
    let s = start().await;
    let base = s.url();
    assert_eq!(
        post_json(&format!("{base}/api/v1/namespaces"), &ns("doomed"))
            .await
            .status,
        201
    );
    let cms = format!("{base}/api/v1/namespaces/doomed/configmaps");
    assert_eq!(
        post_json(&cms, &cm("held", &["example.com/hold"]))
            .await
            .status,
        201
    );
    assert_eq!(post_json(&cms, &cm("plain", &[])).await.status, 201);
    let secrets = format!("{base}/api/v1/namespaces/doomed/secrets");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    assert_eq!(post_json(&secrets, &secret).await.status, 201);
    // The same names elsewhere are not touched.
    let elsewhere = format!("{base}/api/v1/namespaces/default/configmaps");
    assert_eq!(post_json(&elsewhere, &cm("plain", &[])).await.status, 201);

    let a = delete(&format!("{base}/api/v1/namespaces/doomed")).await;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let terminating = a.json();
    assert_eq!(terminating["status"]["phase"], "Terminating");
    assert!(terminating["metadata"]["deletionTimestamp"].is_string());

    // The content without finalizers is gone; the held one is marked.
    assert_eq!(get(&format!("{cms}/plain")).await.status, 404);
    assert_eq!(get(&format!("{secrets}/s")).await.status, 404);
    let held = get(&format!("{cms}/held")).await.json();
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(get(&format!("{elsewhere}/plain")).await.status, 200);

    // Nothing new goes in while it terminates.
    let a = post_json(&cms, &cm("late", &[])).await;
    assert_eq!(a.status, 403);
    let status = a.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    let ns_now = get(&format!("{base}/api/v1/namespaces/doomed"))
        .await
        .json();
    assert_eq!(ns_now["status"]["phase"], "Terminating");

    // Deleting it again is a conflict, as on a real server; namespaces
    // have no deletecollection.
    let a = delete(&format!("{base}/api/v1/namespaces/doomed")).await;
    assert_eq!(a.status, 409);
    assert!(
        a.json()["message"]
            .as_str()
            .unwrap()
            .contains("The system is ensuring all content is removed from this namespace")
    );
    assert_eq!(
        delete(&format!("{base}/api/v1/namespaces")).await.status,
        405
    );

    // The last finalizer goes: the object, then the namespace.
    let mut released = held.clone();
    released["metadata"]["finalizers"] = json!([]);
    assert_eq!(
        put_json(&format!("{cms}/held"), &released).await.status,
        200
    );
    assert_eq!(get(&format!("{cms}/held")).await.status, 404);
    assert_eq!(
        get(&format!("{base}/api/v1/namespaces/doomed"))
            .await
            .status,
        404
    );

    // Created again: empty and active.
    let again = post_json(&format!("{base}/api/v1/namespaces"), &ns("doomed"))
        .await
        .json();
    assert_eq!(again["status"]["phase"], "Active");
    let list = get(&cms).await.json();
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn the_initial_namespaces_are_a_real_clusters_and_three_cannot_be_deleted() {
    let s = start().await;
    let base = s.url();
    let list = get(&format!("{base}/api/v1/namespaces")).await.json();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    for name in ["default", "kube-system", "kube-public"] {
        let a = delete(&format!("{base}/api/v1/namespaces/{name}")).await;
        assert_eq!(a.status, 403, "{name}");
        assert_eq!(
            a.json()["message"],
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
    }
    // An empty namespace goes at once: no content holds it.
    assert_eq!(
        delete(&format!("{base}/api/v1/namespaces/kube-node-lease"))
            .await
            .status,
        200
    );
    assert_eq!(
        get(&format!("{base}/api/v1/namespaces/kube-node-lease"))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn auto_created_namespaces_come_first_and_not_for_a_dry_run() {
    let s = start_with(ServerConfig {
        auto_create_namespaces: true,
        ..fast_config()
    })
    .await;
    let base = s.url();
    let dry = post_json(
        &format!("{base}/api/v1/namespaces/ghost/configmaps?dryRun=All"),
        &cm("a", &[]),
    )
    .await;
    assert_eq!(dry.status, 201);
    assert_eq!(
        get(&format!("{base}/api/v1/namespaces/ghost")).await.status,
        404
    );
    let created = post_json(
        &format!("{base}/api/v1/namespaces/fresh/configmaps"),
        &cm("a", &[]),
    )
    .await
    .json();
    let namespace = get(&format!("{base}/api/v1/namespaces/fresh")).await.json();
    assert_eq!(namespace["status"]["phase"], "Active");
    let rv = |v: &Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&namespace) < rv(&created));
}

#[tokio::test]
async fn seeding_creates_its_namespace_and_refuses_a_terminating_one() {
    let s = start().await;
    s.seed_configmaps("seeded", 3).unwrap();
    assert_eq!(s.count("", "configmaps"), 3);
    assert!(s.get("", "namespaces", None, "seeded").is_ok());
    s.create(
        "",
        "configmaps",
        Some("seeded"),
        cm("held", &["example.com/hold"]),
    )
    .unwrap();
    s.delete("", "namespaces", None, "seeded").unwrap();
    let e = s.seed_configmaps("seeded", 3).unwrap_err();
    assert_eq!(e.code, 403);
    assert!(s.create_namespace("other").unwrap());
    assert!(!s.create_namespace("other").unwrap(), "exists already");
}

/// A scheduled Pod (which a kubelet would finish after its grace period)
/// does not hold a terminating namespace here: there is no kubelet.
#[tokio::test]
async fn a_namespace_with_a_scheduled_pod_goes() {
    let s = start().await;
    let base = s.url();
    assert_eq!(
        post_json(&format!("{base}/api/v1/namespaces"), &ns("pods"))
            .await
            .status,
        201
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]}});
    let pods = format!("{base}/api/v1/namespaces/pods/pods");
    assert_eq!(post_json(&pods, &pod).await.status, 201);
    // A plain delete leaves it terminating (its grace period).
    assert_eq!(delete(&format!("{pods}/p")).await.status, 200);
    assert!(get(&format!("{pods}/p")).await.json()["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        delete(&format!("{base}/api/v1/namespaces/pods"))
            .await
            .status,
        200
    );
    assert_eq!(get(&format!("{pods}/p")).await.status, 404);
    assert_eq!(
        get(&format!("{base}/api/v1/namespaces/pods")).await.status,
        404
    );
}
