//! Starting and stopping: thread mode, shutdown ends watches and closes the listener,
//! dropping the last handle stops the server; dry-run writes store nothing;
//! finalizers hold a delete.

mod common;

use std::time::Duration;

use common::*;
use kinformer_apiserver::ApiServer;
use serde_json::{Value, json};

#[test]
fn thread_mode_shutdown_ends_watches_and_closes_the_listener() {
    let server = ApiServer::start_in_thread(fast_config()).unwrap();
    let url = server.url();
    let addr = server.addr();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut w = WatchLines::open(&format!(
            "{url}/api/v1/configmaps?watch=1&resourceVersion={}",
            server.resource_version()
        ))
        .await;
        eventually(Duration::from_secs(5), "watch registered", || {
            server.watcher_count() == 1
        })
        .await;
        let s = server.clone();
        let stopper = tokio::task::spawn_blocking(move || s.shutdown());
        assert!(w.until_end(Duration::from_secs(5)).await.is_empty());
        tokio::time::timeout(Duration::from_secs(10), stopper)
            .await
            .unwrap()
            .unwrap();
    });
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "still listening"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_stops_a_tokio_mode_server() {
    let server = start().await;
    let addr = server.addr();
    let other = server.clone();
    drop(server);
    // a clone keeps it alive
    assert_eq!(get(&format!("http://{addr}/healthz")).await.status, 200);
    drop(other);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server kept listening"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn dry_run_validates_but_stores_nothing() {
    let server = start().await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let rv = server.resource_version();
    let a = post_json(&format!("{base}?dryRun=All"), &cm("dry", &[])).await;
    assert_eq!(a.status, 201);
    assert_eq!(a.json()["metadata"]["name"], "dry");
    assert!(
        server
            .get("", "configmaps", Some("default"), "dry")
            .is_err()
    );
    assert_eq!(server.resource_version(), rv);
    let bad = post_json(&format!("{base}?dryRun=All"), &json!({"metadata": {}})).await;
    assert_eq!(bad.status, 422);
}

/// An object with finalizers is only marked by a delete (MODIFIED with
/// `deletionTimestamp`; a second delete changes nothing; updates cannot
/// clear the mark); it goes (DELETED) when an update empties its finalizers.
#[tokio::test]
async fn finalizers_hold_a_delete_until_they_are_removed() {
    let server = start().await;
    let rv = server.resource_version();
    let mut w = WatchLines::open(&format!(
        "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}",
        server.url()
    ))
    .await;
    let mut selected = WatchLines::open(&format!(
        "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&labelSelector=app%3Da",
        server.url()
    ))
    .await;
    let mut held = cm("held", &[("app", "a")]);
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    server
        .create("", "configmaps", Some("default"), held)
        .unwrap();
    let marked = server
        .delete("", "configmaps", Some("default"), "held")
        .unwrap();
    assert!(
        marked["metadata"]["deletionTimestamp"].is_string(),
        "{marked}"
    );
    let again = server
        .delete("", "configmaps", Some("default"), "held")
        .unwrap();
    assert_eq!(again, marked);
    let mut changed = server
        .get("", "configmaps", Some("default"), "held")
        .unwrap();
    assert_eq!(changed, marked);
    changed["metadata"]["deletionTimestamp"] = Value::Null;
    changed["data"] = json!({"k": "v"});
    let still = server
        .update("", "configmaps", Some("default"), changed)
        .unwrap();
    assert!(
        still["metadata"]["deletionTimestamp"].is_string(),
        "{still}"
    );
    // The update that removes the last finalizer also changes the label: the
    // object is deleted as it was stored, so a watch on the old label sees it go.
    let mut released = still.clone();
    released["metadata"]["finalizers"] = json!([]);
    released["metadata"]["labels"] = json!({"app": "b"});
    server
        .update("", "configmaps", Some("default"), released)
        .unwrap();
    assert!(
        server
            .get("", "configmaps", Some("default"), "held")
            .is_err()
    );
    let kinds: Vec<String> = w
        .events(4, Duration::from_secs(5))
        .await
        .iter()
        .map(|l| l.kind().to_owned())
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    let seen = selected.events(4, Duration::from_secs(5)).await;
    assert_eq!(seen[3].kind(), "DELETED");
    assert_eq!(seen[3].event()["object"]["metadata"]["labels"]["app"], "a");
}
