//! Every error answer is a proper `Status` with the real server's code and reason.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kinformer_apiserver::{Failure, Verb};
use serde_json::{Value, json};

fn assert_status(a: &Answer, code: u16, reason: &str) -> Value {
    assert_eq!(a.status, code, "body: {}", String::from_utf8_lossy(&a.body));
    let s = a.json();
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["apiVersion"], "v1");
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["code"], code);
    assert_eq!(s["reason"], reason, "{s}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()));
    s
}

#[tokio::test]
async fn create_errors() {
    let server = start().await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());

    let a = post_json(&url, &cm("a", &[])).await;
    assert_eq!(a.status, 201);
    assert_eq!(a.json()["metadata"]["name"], "a");

    let s = assert_status(&post_json(&url, &cm("a", &[])).await, 409, "AlreadyExists");
    assert_eq!(s["message"], "configmaps \"a\" already exists");
    assert_eq!(s["details"]["name"], "a");

    let bad = request(
        "POST",
        &url,
        Some("application/json"),
        "{\"kind\": \"ConfigMap\", ",
    )
    .await;
    assert_status(&bad, 400, "BadRequest");

    let no_name = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    let s = assert_status(&post_json(&url, &no_name).await, 422, "Invalid");
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");

    let secrets = format!("{}/api/v1/namespaces/default/secrets", server.url());
    assert_status(
        &post_json(&secrets, &cm("wrong", &[])).await,
        400,
        "BadRequest",
    );

    let mut other_ns = cm("b", &[]);
    other_ns["metadata"]["namespace"] = json!("elsewhere");
    assert_status(&post_json(&url, &other_ns).await, 400, "BadRequest");

    assert_status(
        &post_json(&url, &cm("Not_Valid", &[])).await,
        422,
        "Invalid",
    );
    assert_status(&post_json(&url, &json!([1, 2])).await, 400, "BadRequest");
    let bad_labels = json!({"metadata": {"name": "c", "labels": {"a": 5}}});
    assert_status(&post_json(&url, &bad_labels).await, 400, "BadRequest");

    // nothing of the above was stored
    assert_eq!(server.list("", "configmaps", Some("default")).len(), 1);
}

#[tokio::test]
async fn oversized_body_is_413_and_connection_survives() {
    let mut config = fast_config();
    config.max_body_bytes = 10_000;
    let server = start_with(config).await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let mut big = cm("big", &[]);
    big["data"]["key"] = json!("x".repeat(20_000));
    assert_status(&post_json(&url, &big).await, 413, "RequestEntityTooLarge");
    // the server still answers
    assert_eq!(post_json(&url, &cm("small", &[])).await.status, 201);
}

#[tokio::test]
async fn get_update_patch_delete_errors() {
    let server = start().await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let s = assert_status(&get(&format!("{base}/missing")).await, 404, "NotFound");
    assert_eq!(s["message"], "configmaps \"missing\" not found");

    let created = post_json(&base, &cm("a", &[])).await.json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut v1 = created.clone();
    v1["data"]["key"] = json!("v1");
    let a = request(
        "PUT",
        &format!("{base}/a"),
        Some("application/json"),
        v1.to_string(),
    )
    .await;
    assert_eq!(a.status, 200);
    assert_ne!(a.json()["metadata"]["resourceVersion"], json!(rv));
    // the same body again carries the now stale resourceVersion
    let a = request(
        "PUT",
        &format!("{base}/a"),
        Some("application/json"),
        v1.to_string(),
    )
    .await;
    let s = assert_status(&a, 409, "Conflict");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );

    // name mismatch between body and URL
    let a = request(
        "PUT",
        &format!("{base}/other"),
        Some("application/json"),
        cm("a", &[]).to_string(),
    )
    .await;
    assert_status(&a, 400, "BadRequest");
    // PUT of a missing object
    let a = request(
        "PUT",
        &format!("{base}/ghost"),
        Some("application/json"),
        cm("ghost", &[]).to_string(),
    )
    .await;
    assert_status(&a, 404, "NotFound");

    for (ct, body) in [
        ("application/merge-patch+json", r#"{"data":{"m":"1"}}"#),
        (
            "application/strategic-merge-patch+json",
            r#"{"data":{"s":"1"}}"#,
        ),
        (
            "application/json-patch+json",
            r#"[{"op":"add","path":"/data/j","value":"1"}]"#,
        ),
    ] {
        let a = request("PATCH", &format!("{base}/a"), Some(ct), body).await;
        assert_eq!(a.status, 200, "{ct}: {}", String::from_utf8_lossy(&a.body));
    }
    let now = server.get("", "configmaps", Some("default"), "a").unwrap();
    assert_eq!(
        now["data"],
        json!({"key": "v1", "m": "1", "s": "1", "j": "1"})
    );

    let a = request("PATCH", &format!("{base}/a"), Some("text/plain"), "{}").await;
    assert_status(&a, 415, "UnsupportedMediaType");
    let a = request(
        "PATCH",
        &format!("{base}/a"),
        Some("application/merge-patch+json"),
        "{nope",
    )
    .await;
    assert_status(&a, 400, "BadRequest");
    let a = request(
        "PATCH",
        &format!("{base}/a"),
        Some("application/json-patch+json"),
        r#"[{"op":"remove","path":"/nope"}]"#,
    )
    .await;
    assert_status(&a, 422, "Invalid");
    let a = request(
        "PATCH",
        &format!("{base}/a"),
        Some("application/merge-patch+json"),
        r#"{"metadata":{"resourceVersion":"1"}}"#,
    )
    .await;
    assert_status(&a, 409, "Conflict");
    let a = request(
        "PATCH",
        &format!("{base}/ghost"),
        Some("application/merge-patch+json"),
        "{}",
    )
    .await;
    assert_status(&a, 404, "NotFound");
    // strategic merge is for built-in types only, like the real server
    let widgets = format!(
        "{}/apis/example.com/v1/namespaces/default/widgets",
        server.url()
    );
    assert_eq!(
        post_json(
            &widgets,
            &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
        )
        .await
        .status,
        201
    );
    let a = request(
        "PATCH",
        &format!("{widgets}/w"),
        Some("application/strategic-merge-patch+json"),
        "{}",
    )
    .await;
    assert_status(&a, 415, "UnsupportedMediaType");

    let a = request("DELETE", &format!("{base}/a"), None, "").await;
    assert_eq!(a.status, 200);
    // A real server answers a ConfigMap delete with a Status naming it.
    assert_eq!(a.json()["status"], "Success");
    assert_eq!(a.json()["details"]["name"], "a");
    assert_status(
        &request("DELETE", &format!("{base}/a"), None, "").await,
        404,
        "NotFound",
    );
    // delete precondition
    let b = post_json(&base, &cm("b", &[])).await.json();
    let opts = json!({"preconditions": {"uid": "not-the-uid"}});
    assert_status(
        &request(
            "DELETE",
            &format!("{base}/b"),
            Some("application/json"),
            opts.to_string(),
        )
        .await,
        409,
        "Conflict",
    );
    let opts = json!({"preconditions": {"uid": b["metadata"]["uid"]}});
    assert_eq!(
        request(
            "DELETE",
            &format!("{base}/b"),
            Some("application/json"),
            opts.to_string()
        )
        .await
        .status,
        200
    );
}

#[tokio::test]
async fn list_errors_and_pagination() {
    let server = start().await;
    for i in 0..7 {
        server
            .create("", "configmaps", Some("default"), cm(&format!("c{i}"), &[]))
            .unwrap();
    }
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let page = get(&format!("{base}?limit=3")).await.json();
    assert_eq!(page["kind"], "ConfigMapList");
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    assert_eq!(page["metadata"]["remainingItemCount"], 4);
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    let page2 = get(&format!("{base}?limit=3&continue={token}"))
        .await
        .json();
    assert_eq!(page2["items"][0]["metadata"]["name"], "c3");
    assert_eq!(
        page2["metadata"]["resourceVersion"],
        page["metadata"]["resourceVersion"]
    );

    assert_status(
        &get(&format!("{base}?continue=garbage!")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &get(&format!("{base}?labelSelector=a%20b%20c")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &get(&format!("{base}?fieldSelector=spec.node%20name%3Dx")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &get(&format!("{base}?fieldSelector=nonsense")).await,
        400,
        "BadRequest",
    );
    // any other dotted path selects on the object's content
    let by_data = get(&format!("{base}?fieldSelector=data.key%3Dc4"))
        .await
        .json();
    assert_eq!(by_data["items"].as_array().unwrap().len(), 1);
    assert_status(
        &get(&format!("{base}?resourceVersionMatch=Exact")).await,
        422,
        "Invalid",
    );
    assert_status(
        &get(&format!("{base}?resourceVersion=xyz")).await,
        400,
        "BadRequest",
    );

    // a resourceVersion from the future: the real "Too large resource version" answer after a wait
    let future = server.resource_version() + 1000;
    let t0 = Instant::now();
    let a = get(&format!(
        "{base}?resourceVersion={future}&resourceVersionMatch=NotOlderThan"
    ))
    .await;
    let s = assert_status(&a, 504, "Timeout");
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "answered too early"
    );
    assert_eq!(
        s["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(
        s["message"],
        format!(
            "Timeout: Too large resource version: {future}, current: {}",
            server.resource_version()
        )
    );

    // Exact at a past RV still in history works, and sees the past state
    let old_rv: u64 = page["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    server
        .delete("", "configmaps", Some("default"), "c0")
        .unwrap();
    let exact = get(&format!(
        "{base}?resourceVersion={old_rv}&resourceVersionMatch=Exact"
    ))
    .await
    .json();
    assert_eq!(exact["items"].as_array().unwrap().len(), 7);
    assert_eq!(exact["metadata"]["resourceVersion"], old_rv.to_string());
    // A paginated list at N without resourceVersionMatch reads exactly N too
    // (the legacy rule client-go's paginated relists rely on).
    let paged = get(&format!("{base}?resourceVersion={old_rv}&limit=100"))
        .await
        .json();
    assert_eq!(paged["items"].as_array().unwrap().len(), 7);
    assert_eq!(paged["metadata"]["resourceVersion"], old_rv.to_string());

    // after compaction: Exact and the old continue token get 410 Expired
    server.faults().compact();
    let s = assert_status(
        &get(&format!(
            "{base}?resourceVersion={old_rv}&resourceVersionMatch=Exact"
        ))
        .await,
        410,
        "Expired",
    );
    assert!(s["message"].as_str().unwrap().contains("too old"));
    assert_status(
        &get(&format!("{base}?limit=3&continue={token}")).await,
        410,
        "Expired",
    );
    assert_status(
        &get(&format!("{base}?resourceVersion={old_rv}&limit=3")).await,
        410,
        "Expired",
    );
    // deletecollection has no all-namespaces form for a namespaced type.
    let everywhere = format!("{}/api/v1/configmaps", server.url());
    assert_status(
        &request("DELETE", &everywhere, None, Bytes::new()).await,
        405,
        "MethodNotAllowed",
    );
    assert!(
        !get(&base).await.json()["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // NotOlderThan an old RV is fine
    assert_eq!(
        get(&format!(
            "{base}?resourceVersion={old_rv}&resourceVersionMatch=NotOlderThan"
        ))
        .await
        .status,
        200
    );
}

#[tokio::test]
async fn injected_failures() {
    let server = start().await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let faults = server.faults();
    faults.fail_next(
        Verb::List,
        1,
        Failure::TooManyRequests {
            retry_after_secs: 3,
        },
    );
    let a = get(&base).await;
    let s = assert_status(&a, 429, "TooManyRequests");
    assert_eq!(a.headers.get("retry-after").unwrap(), "3");
    assert_eq!(s["details"]["retryAfterSeconds"], 3);
    assert_eq!(get(&base).await.status, 200, "only the next request fails");

    faults.fail_next(Verb::Create, 2, Failure::Internal);
    assert_status(&post_json(&base, &cm("x", &[])).await, 500, "InternalError");
    assert_status(&post_json(&base, &cm("x", &[])).await, 500, "InternalError");
    assert_eq!(post_json(&base, &cm("x", &[])).await.status, 201);

    // over the admin endpoint
    let admin = format!("{}/admin/faults/fail-next", server.url());
    let a = post_json(
        &admin,
        &json!({"verb": "get", "count": 1, "failure": "too-many-requests", "retryAfterSeconds": 2}),
    )
    .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["pendingFailures"]["get"], 1);
    let a = get(&format!("{base}/x")).await;
    assert_status(&a, 429, "TooManyRequests");
    assert_eq!(a.headers.get("retry-after").unwrap(), "2");
    let a = post_json(
        &format!("{}/admin/faults/nonsense", server.url()),
        &json!({}),
    )
    .await;
    assert_status(&a, 404, "NotFound");

    // latency
    faults.set_latency(Duration::from_millis(200));
    let t0 = Instant::now();
    assert_eq!(get(&base).await.status, 200);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    faults.set_latency(Duration::ZERO);
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let server = start().await;
    let u = server.url();
    assert_status(&get(&format!("{u}/api/v1/frobs")).await, 404, "NotFound");
    assert_status(&get(&format!("{u}/apis/nope.io/v1")).await, 404, "NotFound");
    assert_status(&get(&format!("{u}/openapi/v2")).await, 404, "NotFound");
    assert_status(
        &get(&format!("{u}/api/v1/configmaps/x")).await,
        404,
        "NotFound",
    );
    assert_status(
        &get(&format!("{u}/api/v1/namespaces/default/configmaps/x/scale")).await,
        404,
        "NotFound",
    );
    let a = request(
        "PUT",
        &format!("{u}/api/v1/namespaces/default/configmaps"),
        Some("application/json"),
        "{}",
    )
    .await;
    assert_status(&a, 405, "MethodNotAllowed");
    let a = request(
        "POST",
        &format!("{u}/api/v1/namespaces/default/configmaps/x"),
        Some("application/json"),
        "{}",
    )
    .await;
    assert_status(&a, 405, "MethodNotAllowed");
}

#[tokio::test]
async fn discovery_documents() {
    let server = start().await;
    let u = server.url();
    assert_eq!(get(&format!("{u}/healthz")).await.body, "ok");
    assert_eq!(get(&format!("{u}/readyz")).await.status, 200);
    assert_eq!(get(&format!("{u}/version")).await.json()["major"], "1");
    assert_eq!(
        get(&format!("{u}/api")).await.json()["versions"],
        json!(["v1"])
    );
    let core = get(&format!("{u}/api/v1")).await.json();
    assert_eq!(core["kind"], "APIResourceList");
    assert!(
        core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "configmaps" && r["namespaced"] == true)
    );
    let groups = get(&format!("{u}/apis")).await.json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com"),
        "{groups}"
    );
    let w = get(&format!("{u}/apis/example.com/v1")).await.json();
    assert_eq!(w["resources"][0]["kind"], "Widget");
    assert_eq!(get(&format!("{u}/openapi/v3")).await.status, 200);
}

/// As the real server: a create naming a resourceVersion is refused (500,
/// from storage), and an update whose body names another object's uid (the
/// one deleted and created again under its name) is a 409 precondition; a
/// patch that changes the uid is a 422.
#[tokio::test]
async fn a_create_with_a_version_and_an_update_of_another_uid_are_refused() {
    let server = start().await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let mut stale = json!({"metadata": {"name": "a", "resourceVersion": "7"}, "data": {"k": "v"}});
    let s = assert_status(&post_json(&url, &stale).await, 500, "InternalError");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("resourceVersion should not be set"),
        "{s}"
    );
    stale["metadata"]["resourceVersion"] = json!("0");
    let first = post_json(&url, &stale).await;
    assert_eq!(first.status, 201, "\"0\" is no version");
    let old_uid = first.json()["metadata"]["uid"].clone();
    assert_eq!(
        request("DELETE", &format!("{url}/a"), None, Bytes::new())
            .await
            .status,
        200
    );
    let again = post_json(&url, &json!({"metadata": {"name": "a"}})).await;
    assert_eq!(again.status, 201);
    let new_uid = again.json()["metadata"]["uid"].clone();
    let cached = json!({"metadata": {"name": "a", "uid": old_uid}, "data": {"k": "overwrite"}});
    let s = assert_status(
        &put_json(&format!("{url}/a"), &cached).await,
        409,
        "Conflict",
    );
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed: UID"),
        "{s}"
    );
    let ok = json!({"metadata": {"name": "a", "uid": new_uid}, "data": {"k": "fine"}});
    assert_eq!(put_json(&format!("{url}/a"), &ok).await.status, 200);
    // A patch that changes the uid: 422, the field is immutable (a patch
    // names no precondition); one that repeats it changes the data.
    let s = assert_status(
        &merge_patch(&format!("{url}/a"), &json!({"metadata": {"uid": "other"}})).await,
        422,
        "Invalid",
    );
    assert_eq!(
        s["message"],
        "ConfigMap \"a\" is invalid: metadata.uid: Invalid value: \"other\": field is immutable"
    );
    let same = json!({"metadata": {"uid": new_uid}, "data": {"k": "patched"}});
    let patched = merge_patch(&format!("{url}/a"), &same).await;
    assert_eq!(patched.status, 200);
    assert_eq!(patched.json()["data"]["k"], "patched");
}
