//! Restarts with state kept: objects and resourceVersions survive, open watches see their
//! connection reset or cut (not a clean end), old resourceVersions answer 410 unless the
//! history is kept, outages refuse or reset connections for as long as asked, and the
//! request log counts what clients did.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kinformer_apiserver::{CloseMode, DownMode, Phase, RestartOptions, ServerHandle};
use serde_json::{Value, json};

const WITHIN: Duration = Duration::from_secs(10);

fn names_and_rvs(server: &ServerHandle) -> Vec<(String, String)> {
    server
        .list("", "configmaps", None)
        .into_iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

/// How a raw watch body ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The chunked body ended cleanly.
    Clean,
    /// The connection was reset.
    Reset,
    /// The body was cut short (EOF inside the chunked encoding).
    Cut,
}

/// Opens a watch and returns its body (after checking for a 200).
async fn open_watch(url: &str) -> hyper::body::Incoming {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(WITHIN, client.request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

/// Whether an I/O error of `kind` is in the chain of `err`.
fn has_io_error(err: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Reads the body to its end and says how it ended, with the data lines read.
async fn read_to_end(mut body: hyper::body::Incoming) -> (End, Vec<Value>) {
    let mut data = Vec::new();
    let end = loop {
        match tokio::time::timeout(WITHIN, body.frame())
            .await
            .expect("the watch neither sent nor ended")
        {
            Some(Ok(frame)) => {
                if let Ok(d) = frame.into_data() {
                    data.extend_from_slice(&d);
                }
            }
            Some(Err(e)) if has_io_error(&e, std::io::ErrorKind::ConnectionReset) => {
                break End::Reset;
            }
            Some(Err(e)) if has_io_error(&e, std::io::ErrorKind::UnexpectedEof) => break End::Cut,
            Some(Err(e)) => panic!("neither a reset nor a cut: {e:?}"),
            None => break End::Clean,
        }
    };
    let lines = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    (end, lines)
}

#[tokio::test]
async fn restart_keeps_objects_and_resource_versions() {
    let server = start().await;
    for i in 0..5 {
        server
            .create("", "configmaps", Some("default"), cm(&format!("c{i}"), &[]))
            .unwrap();
    }
    server
        .delete("", "configmaps", Some("default"), "c3")
        .unwrap();
    let before = names_and_rvs(&server);
    let rv = server.resource_version();
    server.restart(RestartOptions::default()).await.unwrap();
    assert!(server.is_serving());
    assert_eq!(server.serving_state().epoch, 1);
    assert_eq!(names_and_rvs(&server), before);
    assert_eq!(server.resource_version(), rv);
    // Over HTTP too, on the same address.
    let list = get(&format!(
        "{}/api/v1/namespaces/default/configmaps",
        server.url()
    ))
    .await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json()["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(list.json()["items"].as_array().unwrap().len(), 4);
    // The counter goes on from where it was.
    let created = post_json(
        &format!("{}/api/v1/namespaces/default/configmaps", server.url()),
        &cm("after", &[]),
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(
        created.json()["metadata"]["resourceVersion"],
        (rv + 1).to_string()
    );
}

#[tokio::test]
async fn open_watches_see_their_connection_reset_or_cut_not_a_clean_end() {
    let server = start().await;
    for (close, expected) in [(CloseMode::Reset, End::Reset), (CloseMode::Eof, End::Cut)] {
        let url = format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}",
            server.url(),
            server.resource_version()
        );
        let mut body = open_watch(&url).await;
        eventually(WITHIN, "watch registered", || server.watcher_count() == 1).await;
        server
            .create(
                "",
                "configmaps",
                Some("default"),
                cm(&format!("w-{close:?}").to_lowercase(), &[]),
            )
            .unwrap();
        // The event arrives before the restart.
        let first = tokio::time::timeout(WITHIN, body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap();
        assert!(String::from_utf8_lossy(&first).contains("ADDED"));
        server
            .restart(RestartOptions::default().close(close))
            .await
            .unwrap();
        let (end, lines) = read_to_end(body).await;
        assert_eq!(end, expected, "{close:?}");
        assert!(lines.is_empty(), "{lines:?}");
        assert_eq!(server.watcher_count(), 0);
    }
    // A shutdown, unlike a restart, ends watches cleanly.
    let url = format!("{}/api/v1/configmaps?watch=1", server.url());
    let body = open_watch(&url).await;
    let reader = tokio::spawn(read_to_end(body));
    eventually(WITHIN, "watch registered", || server.watcher_count() == 1).await;
    server.clone().shutdown_and_wait().await;
    assert_eq!(reader.await.unwrap().0, End::Clean);
    assert_eq!(server.serving_state().phase, Phase::Stopped);
    assert!(server.restart(RestartOptions::default()).await.is_err());
}

/// Watches from a resourceVersion before the restart, with and without the history kept.
/// A server with ConfigMaps `a` then `b`, and the resourceVersion between them.
async fn a_then_b() -> (ServerHandle, u64) {
    let server = start().await;
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    let between = server.resource_version();
    server
        .create("", "configmaps", Some("default"), cm("b", &[]))
        .unwrap();
    (server, between)
}

#[tokio::test]
async fn old_resource_versions_get_410_after_a_restart_unless_the_history_is_kept() {
    for keep_history in [false, true] {
        let (server, old) = a_then_b().await;
        let options = RestartOptions {
            keep_history,
            ..RestartOptions::default()
        };
        server.restart(options).await.unwrap();
        // A write after the restart: the watch from `old` sees b and c, or a 410.
        server
            .create("", "configmaps", Some("default"), cm("c", &[]))
            .unwrap();
        let url = format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old}",
            server.url()
        );
        let mut w = WatchLines::open(&url).await;
        if keep_history {
            let events = w.events(2, WITHIN).await;
            let names: Vec<&str> = events.iter().map(|l| l.name()).collect();
            assert_eq!(names, ["b", "c"]);
        } else {
            let line = w.next_within(WITHIN).await.unwrap();
            assert_eq!(line.kind(), "ERROR");
            let status = &line.event()["object"];
            assert_eq!(status["code"], 410);
            assert_eq!(status["reason"], "Expired");
            assert_eq!(
                status["message"],
                format!("too old resource version: {old} ({})", old + 1)
            );
            // The current resourceVersion (what an informer holds after a quiet period)
            // still resumes.
            let now = server.resource_version();
            let mut w = WatchLines::open(&format!(
                "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={now}",
                server.url()
            ))
            .await;
            server
                .create("", "configmaps", Some("default"), cm("d", &[]))
                .unwrap();
            assert_eq!(w.events(1, WITHIN).await[0].name(), "d");
        }
    }
}

/// A 30 s outage under paused time: connections are refused throughout, then served.
#[tokio::test(start_paused = true)]
async fn an_outage_is_held_for_its_duration_under_paused_time() {
    let server = start().await;
    let addr = server.addr();
    let started = tokio::time::Instant::now();
    let restart = tokio::spawn({
        let server = server.clone();
        async move {
            server
                .restart(RestartOptions::default().down_for(Duration::from_secs(30)))
                .await
        }
    });
    eventually(WITHIN, "down", || !server.is_serving()).await;
    let err = tokio::net::TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    restart.await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_secs(30));
    assert_eq!(get(&format!("{}/healthz", server.url())).await.status, 200);
}

/// While down in `Reset` mode the port accepts and resets each connection, and counts it;
/// the request log counts requests by verb and epoch.
#[tokio::test]
async fn requests_and_connections_are_counted_up_and_down() {
    let server = start().await;
    let url = server.url();
    let requests = server.requests();
    for _ in 0..3 {
        assert_eq!(
            get(&format!("{url}/api/v1/namespaces/default/configmaps"))
                .await
                .status,
            200
        );
    }
    assert_eq!(get(&format!("{url}/version")).await.status, 200);
    let counts = requests.counts();
    assert_eq!((counts.verb("list"), counts.verb("get")), (3, 1));
    let mark = requests.mark();
    server
        .stop_serving(RestartOptions::default().while_down(DownMode::Reset))
        .await
        .unwrap();
    for _ in 0..4 {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let req = http::Request::get(format!("{url}/version"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert!(client.request(req).await.is_err(), "answered while down");
    }
    assert_eq!(requests.counts().reset_while_down, 4);
    assert!(requests.since(mark).is_empty());
    server.start_serving().await.unwrap();
    let answer = get(&format!(
        "{url}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1"
    ))
    .await;
    assert_eq!(answer.status, 200);
    let after = requests.since(mark);
    assert_eq!(after.len(), 1);
    assert_eq!(
        (
            after[0].verb.as_str(),
            after[0].path.as_str(),
            after[0].epoch
        ),
        ("watch", "/api/v1/namespaces/default/configmaps", 1)
    );
    let over_http = get(&format!("{url}/admin/requests")).await.json();
    assert_eq!(over_http["byVerb"]["list"], 3);
    assert_eq!(over_http["resetWhileDown"], 4);
}

/// `POST /admin/faults/restart` answers, then restarts with the options given.
#[tokio::test]
async fn restart_over_http() {
    let (server, old) = a_then_b().await;
    let answer = post_json(
        &format!("{}/admin/faults/restart", server.url()),
        &json!({"keepHistory": true, "downForMillis": 200, "close": "eof"}),
    )
    .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    assert_eq!(answer.json()["options"]["keepHistory"], true);
    eventually(WITHIN, "restarted", || server.serving_state().epoch == 1).await;
    let mut w = WatchLines::open(&format!(
        "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old}",
        server.url()
    ))
    .await;
    assert_eq!(w.events(1, WITHIN).await[0].name(), "b");
    let bad = post_json(
        &format!("{}/admin/faults/restart", server.url()),
        &json!({"close": "sometimes"}),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(server.serving_state().epoch, 1);
}
