//! Watch semantics over raw HTTP: replay, initial events, bookmarks, 410s, selector
//! transitions, timeouts, legacy paths and the watch faults.

mod common;

use std::time::Duration;

use common::*;
use kinformer_apiserver::ServerConfig;
use serde_json::json;

const T: Duration = Duration::from_secs(5);

fn cms(server: &kinformer_apiserver::ServerHandle) -> String {
    format!("{}/api/v1/namespaces/default/configmaps", server.url())
}

#[tokio::test]
async fn replays_history_after_the_start_rv_in_order() {
    let server = start().await;
    server.create_namespace("other").unwrap();
    let start_rv = server.resource_version();
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    server
        .create("", "configmaps", Some("default"), cm("b", &[]))
        .unwrap();
    let mut a = server.get("", "configmaps", Some("default"), "a").unwrap();
    a["data"]["key"] = json!("changed");
    server.update("", "configmaps", Some("default"), a).unwrap();
    server
        .delete("", "configmaps", Some("default"), "b")
        .unwrap();
    // other namespaces and kinds are not part of this watch
    server
        .create("", "configmaps", Some("other"), cm("x", &[]))
        .unwrap();
    server
        .create(
            "",
            "secrets",
            Some("default"),
            json!({"metadata": {"name": "s"}}),
        )
        .unwrap();

    let mut w = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={start_rv}",
        cms(&server)
    ))
    .await;
    assert_eq!(w.status, 200);
    let evs = w.events(4, T).await;
    let got: Vec<(&str, &str)> = evs.iter().map(|l| (l.kind(), l.name())).collect();
    assert_eq!(
        got,
        vec![
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "b")
        ]
    );
    let rvs: Vec<u64> = evs.iter().map(Line::rv).collect();
    assert!(rvs.windows(2).all(|p| p[0] < p[1]), "{rvs:?}");
    // then live
    server
        .create("", "configmaps", Some("default"), cm("c", &[]))
        .unwrap();
    let live = w.events(1, T).await;
    assert_eq!((live[0].kind(), live[0].name()), ("ADDED", "c"));
}

#[tokio::test]
async fn watch_without_rv_sends_current_state_then_live() {
    let server = start().await;
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    server
        .create("", "configmaps", Some("default"), cm("b", &[]))
        .unwrap();
    for url in [
        format!("{}?watch=true", cms(&server)),
        format!("{}?watch=true&resourceVersion=0", cms(&server)),
    ] {
        let mut w = WatchLines::open(&url).await;
        let evs = w.events(2, T).await;
        assert!(evs.iter().all(|l| l.kind() == "ADDED"));
        server
            .delete("", "configmaps", Some("default"), "a")
            .unwrap();
        let live = w.events(1, T).await;
        assert_eq!((live[0].kind(), live[0].name()), ("DELETED", "a"));
        server
            .create("", "configmaps", Some("default"), cm("a", &[]))
            .unwrap();
    }
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_an_annotated_bookmark() {
    let server = start().await;
    for i in 0..3 {
        server
            .create("", "configmaps", Some("default"), cm(&format!("c{i}"), &[]))
            .unwrap();
    }
    let rv = server.resource_version();
    let mut w = WatchLines::open(&format!(
        "{}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0",
        cms(&server)
    ))
    .await;
    for _ in 0..3 {
        assert_eq!(w.next_within(T).await.unwrap().kind(), "ADDED");
    }
    let bm = w.next_within(T).await.unwrap();
    assert_eq!(bm.kind(), "BOOKMARK");
    let obj = &bm.event()["object"];
    assert_eq!(
        obj["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(obj["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(obj["kind"], "ConfigMap");
    // sendInitialEvents without the required companions is rejected
    let a = get(&format!(
        "{}?watch=true&sendInitialEvents=true",
        cms(&server)
    ))
    .await;
    assert_eq!(a.status, 422);
}

#[tokio::test]
async fn too_old_rv_gives_200_then_one_410_error_event() {
    let mut config = fast_config();
    config.history_limit = 5;
    let server = start_with(config).await;
    for i in 0..20 {
        server
            .create("", "configmaps", Some("default"), cm(&format!("c{i}"), &[]))
            .unwrap();
    }
    let mut w = WatchLines::open(&format!("{}?watch=1&resourceVersion=2", cms(&server))).await;
    assert_eq!(w.status, 200);
    let rest = w.until_end(T).await;
    assert_eq!(rest.len(), 1);
    let ev = rest[0].event();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["kind"], "Status");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    // The lowest resourceVersion a watch may still start from.
    let oldest = server.history_stats().1;
    assert_eq!(
        ev["object"]["message"],
        format!("too old resource version: 2 ({oldest})")
    );
}

#[tokio::test]
async fn future_rv_watch_times_out_with_504() {
    let server = start().await;
    let a = get(&format!(
        "{}?watch=1&resourceVersion={}",
        cms(&server),
        server.resource_version() + 50
    ))
    .await;
    assert_eq!(a.status, 504);
    assert_eq!(
        a.json()["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn label_selector_transitions_become_added_and_deleted() {
    let server = start().await;
    let rv = server.resource_version();
    let mut w = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb",
        cms(&server)
    ))
    .await;
    server
        .create("", "configmaps", Some("default"), cm("x", &[("app", "db")]))
        .unwrap();
    let set_app = |app: &str, data: &str| {
        let mut v = server.get("", "configmaps", Some("default"), "x").unwrap();
        v["metadata"]["labels"]["app"] = json!(app);
        v["data"]["key"] = json!(data);
        server.update("", "configmaps", Some("default"), v).unwrap()
    };
    set_app("web", "1"); // enters: ADDED
    set_app("web", "2"); // stays: MODIFIED
    let left = set_app("db", "3"); // leaves: DELETED
    set_app("db", "4"); // outside: nothing
    server
        .create(
            "",
            "configmaps",
            Some("default"),
            cm("y", &[("app", "web")]),
        )
        .unwrap();
    let evs = w.events(4, T).await;
    let got: Vec<(&str, &str)> = evs.iter().map(|l| (l.kind(), l.name())).collect();
    assert_eq!(
        got,
        vec![
            ("ADDED", "x"),
            ("MODIFIED", "x"),
            ("DELETED", "x"),
            ("ADDED", "y")
        ]
    );
    // DELETED carries the last matching content at the event's resourceVersion
    assert_eq!(evs[2].event()["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(evs[2].event()["object"]["data"]["key"], "2");
    assert_eq!(
        evs[2].event()["object"]["metadata"]["resourceVersion"],
        left["metadata"]["resourceVersion"]
    );

    // set-based and field selectors
    let mut w = WatchLines::open(&format!(
        "{}?watch=1&labelSelector=app%20in%20(web,api),!legacy&fieldSelector=metadata.name%3Dz",
        cms(&server)
    ))
    .await;
    server
        .create(
            "",
            "configmaps",
            Some("default"),
            cm("z", &[("app", "api"), ("legacy", "1")]),
        )
        .unwrap();
    server
        .create(
            "",
            "configmaps",
            Some("default"),
            cm("q", &[("app", "api")]),
        )
        .unwrap();
    let mut z = server.get("", "configmaps", Some("default"), "z").unwrap();
    z["metadata"]["labels"] = json!({"app": "api"});
    server.update("", "configmaps", Some("default"), z).unwrap();
    let evs = w.events(1, T).await;
    assert_eq!((evs[0].kind(), evs[0].name()), ("ADDED", "z"));
}

#[tokio::test]
async fn bookmarks_carry_only_the_resource_version() {
    let server = start().await; // bookmark interval 100 ms
    let rv = server.resource_version();
    let mut w = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&labelSelector=app%3Dnever",
        cms(&server)
    ))
    .await;
    // a write this watcher does not see still moves the RV: a BOOKMARK follows
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    let target = server.resource_version();
    let bm = w.until(T, |l| l.kind() == "BOOKMARK").await;
    let obj = &bm.event()["object"];
    assert_eq!(obj["metadata"]["resourceVersion"], target.to_string());
    assert_eq!(obj["metadata"].as_object().unwrap().len(), 1, "{obj}");
    assert_eq!(obj["kind"], "ConfigMap");
    assert_eq!(obj["apiVersion"], "v1");
}

#[tokio::test]
async fn timeout_ends_the_stream_with_one_bookmark_before_it_when_idle() {
    let server = start().await;
    let rv = server.resource_version();
    let started = std::time::Instant::now();
    let mut w = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1",
        cms(&server)
    ))
    .await;
    let lines = w.until_end(T).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    // nothing changed: the only line is the bookmark shortly before the timeout
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].kind(), "BOOKMARK");
}

#[tokio::test]
async fn legacy_watch_paths() {
    let server = start().await;
    server.create_namespace("other").unwrap();
    let rv = server.resource_version();
    let u = server.url();
    let mut all =
        WatchLines::open(&format!("{u}/api/v1/watch/configmaps?resourceVersion={rv}")).await;
    let mut one = WatchLines::open(&format!(
        "{u}/api/v1/watch/namespaces/default/configmaps/b?resourceVersion={rv}"
    ))
    .await;
    let mut ns =
        WatchLines::open(&format!("{u}/api/v1/watch/namespaces?resourceVersion={rv}")).await;
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    server
        .create("", "configmaps", Some("other"), cm("b", &[]))
        .unwrap();
    server
        .create("", "configmaps", Some("default"), cm("b", &[]))
        .unwrap();
    server
        .create(
            "",
            "namespaces",
            None,
            json!({"metadata": {"name": "fresh"}}),
        )
        .unwrap();
    let evs = all.events(3, T).await;
    assert_eq!(
        evs.iter().map(Line::name).collect::<Vec<_>>(),
        vec!["a", "b", "b"]
    );
    let evs = one.events(1, T).await;
    assert_eq!(evs[0].event()["object"]["metadata"]["namespace"], "default");
    let evs = ns.events(1, T).await;
    assert_eq!(evs[0].name(), "fresh");
    // custom resources too
    let mut w = WatchLines::open(&format!(
        "{u}/apis/example.com/v1/watch/namespaces/default/widgets?resourceVersion={}",
        server.resource_version()
    ))
    .await;
    server
        .create(
            "example.com",
            "widgets",
            Some("default"),
            json!({"metadata": {"name": "w"}, "spec": {"size": 1}}),
        )
        .unwrap();
    let evs = w.events(1, T).await;
    assert_eq!(evs[0].event()["object"]["kind"], "Widget");
}

#[tokio::test]
async fn close_all_and_close_after_n() {
    let server = start().await;
    let rv = server.resource_version();
    let url = format!("{}?watch=1&resourceVersion={rv}", cms(&server));
    let mut a = WatchLines::open(&url).await;
    let mut b = WatchLines::open(&url).await;
    eventually(T, "two watchers", || server.watcher_count() == 2).await;
    server.faults().close_all_watches();
    assert!(a.until_end(T).await.is_empty());
    assert!(b.until_end(T).await.is_empty());
    eventually(T, "watchers unregistered", || server.watcher_count() == 0).await;

    server.faults().close_watches_after(Some(2));
    let mut c = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={}",
        cms(&server),
        server.resource_version()
    ))
    .await;
    for i in 0..5 {
        server
            .create("", "configmaps", Some("default"), cm(&format!("c{i}"), &[]))
            .unwrap();
    }
    let lines = c.until_end(T).await;
    assert_eq!(lines.len(), 2);
    server.faults().close_watches_after(None);

    // over the admin endpoint
    let mut d = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={}",
        cms(&server),
        server.resource_version()
    ))
    .await;
    eventually(T, "watcher registered", || server.watcher_count() == 1).await;
    assert_eq!(
        post_json(
            &format!("{}/admin/faults/close-watches", server.url()),
            &json!({})
        )
        .await
        .status,
        200
    );
    assert!(d.until_end(T).await.is_empty());
}

#[tokio::test]
async fn malformed_line_stall_and_suppressed_bookmarks() {
    let server = start().await;
    let rv = server.resource_version();
    let mut w = WatchLines::open(&format!(
        "{}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true",
        cms(&server)
    ))
    .await;
    eventually(T, "watcher registered", || server.watcher_count() == 1).await;
    server.faults().inject_malformed_line();
    let line = w.next_within(T).await.unwrap();
    assert!(matches!(line, Line::Malformed(_)), "{line:?}");

    server.faults().suppress_bookmarks(true);
    server.faults().stall_watches(true);
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    // stalled: nothing arrives for a while although an event is pending
    assert!(
        tokio::time::timeout(Duration::from_millis(400), w.next_line())
            .await
            .is_err()
    );
    server.faults().stall_watches(false);
    let l = w.next_within(T).await.unwrap();
    assert_eq!((l.kind(), l.name()), ("ADDED", "a"));
    // bookmarks suppressed: another write, then only the event, no bookmark within several intervals
    server
        .create("", "configmaps", Some("default"), cm("b", &[]))
        .unwrap();
    assert_eq!(w.next_within(T).await.unwrap().name(), "b");
    server
        .create(
            "",
            "secrets",
            Some("default"),
            json!({"metadata": {"name": "moves-rv"}}),
        )
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(400), w.next_line())
            .await
            .is_err()
    );
    server.faults().suppress_bookmarks(false);
    assert_eq!(w.next_within(T).await.unwrap().kind(), "BOOKMARK");
}

/// A watcher whose buffer overflows is dropped without blocking writers.
/// As the real cacher does with an unresponsive watcher, its stream then ends
/// cleanly when the history still holds what it missed (the client
/// re-watches from its last resourceVersion and misses nothing), and with an
/// ERROR 410 only when that history is gone.
#[tokio::test]
async fn a_watcher_that_falls_behind_is_closed_and_never_blocks_writers() {
    for history_limit in [1_000, 5] {
        let config = ServerConfig {
            watch_buffer: 8,
            history_limit,
            ..fast_config()
        };
        let server = start_with(config).await;
        let rv = server.resource_version();
        let mut slow =
            WatchLines::open(&format!("{}?watch=1&resourceVersion={rv}", cms(&server))).await;
        let mut fast =
            WatchLines::open(&format!("{}?watch=1&resourceVersion={rv}", cms(&server))).await;
        eventually(T, "two watchers", || server.watcher_count() == 2).await;
        // stall every stream so nothing drains, then write far more than the buffer
        server.faults().stall_watches(true);
        let t0 = std::time::Instant::now();
        for i in 0..50 {
            server
                .create("", "configmaps", Some("default"), cm(&format!("c{i}"), &[]))
                .unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "writers were blocked"
        );
        eventually(T, "overflowed watchers dropped", || {
            server.watcher_count() == 0
        })
        .await;
        server.faults().stall_watches(false);
        for w in [&mut slow, &mut fast] {
            let lines = w.until_end(T).await;
            assert!(lines.len() <= 10, "buffered without bound: {}", lines.len());
            let errors: Vec<&Line> = lines.iter().filter(|l| l.kind() == "ERROR").collect();
            if history_limit >= 50 {
                assert!(errors.is_empty(), "{errors:?}");
                // Every event up to the last one sent is there, in order, and a
                // re-watch from it gets the rest.
                let seen: Vec<u64> = lines.iter().map(Line::rv).collect();
                assert!(seen.windows(2).all(|p| p[0] < p[1]), "{seen:?}");
                let from = seen.last().copied().unwrap_or(rv);
                let mut again =
                    WatchLines::open(&format!("{}?watch=1&resourceVersion={from}", cms(&server)))
                        .await;
                let rest = again.events(50 - seen.len(), T).await;
                assert_eq!(rest.last().unwrap().name(), "c49");
            } else {
                let last = lines.last().unwrap().event();
                assert_eq!(last["type"], "ERROR");
                assert_eq!(last["object"]["code"], 410);
            }
        }
    }
}

#[tokio::test]
async fn table_watch_for_kubectl() {
    let server = start().await;
    let mut w = WatchLines::open_with_accept(
        &format!(
            "{}?watch=1&resourceVersion={}",
            cms(&server),
            server.resource_version()
        ),
        Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
    )
    .await;
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    let ev = w.events(1, T).await;
    assert_eq!(ev[0].event()["object"]["kind"], "Table");
    assert_eq!(ev[0].event()["object"]["rows"][0]["cells"][0], "a");
}
