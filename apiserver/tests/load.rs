//! Scale and load: big streamed lists and many watchers do not stall the server; history
//! stays bounded under churn; churn is deterministic; the binary starts and stops cleanly.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use futures::future::join_all;
use kinformer_apiserver::{ChurnSpec, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100k_list_streams_without_stalling_other_requests() {
    let server = start().await;
    let t0 = Instant::now();
    server.seed_configmaps("big", 100_000).unwrap();
    eprintln!("seeded 100k in {:?}", t0.elapsed());
    let url = format!("{}/api/v1/namespaces/big/configmaps", server.url());
    let list = tokio::spawn(async move {
        let t = Instant::now();
        let a = get(&url).await;
        (a, t.elapsed())
    });
    // while the big list streams, small requests keep being answered quickly
    let health = format!(
        "{}/api/v1/namespaces/big/configmaps/seed-000042",
        server.url()
    );
    let mut worst = Duration::ZERO;
    while !list.is_finished() {
        let t = Instant::now();
        assert_eq!(get(&health).await.status, 200);
        worst = worst.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (a, took) = list.await.unwrap();
    assert_eq!(a.status, 200);
    assert!(
        a.body.len() > 100_000 * 1_000,
        "body {} bytes",
        a.body.len()
    );
    let v = a.json();
    assert_eq!(v["items"].as_array().unwrap().len(), 100_000);
    eprintln!(
        "100k list: {} MB in {took:?}; slowest concurrent get {worst:?}",
        a.body.len() / 1_000_000
    );
    // Generous for a debug build on a loaded 2-core machine; it catches a
    // server that stops answering while a large list streams.
    assert!(
        worst < Duration::from_secs(5),
        "server stalled for {worst:?} during the list's {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_watchers_all_get_every_event() {
    let server = start().await;
    server.create_namespace("fan").unwrap();
    let rv = server.resource_version();
    let url = format!(
        "{}/api/v1/namespaces/fan/configmaps?watch=1&resourceVersion={rv}",
        server.url()
    );
    let mut watchers = join_all((0..100).map(|_| WatchLines::open(&url))).await;
    eventually(Duration::from_secs(10), "100 watchers", || {
        server.watcher_count() == 100
    })
    .await;
    let writer = {
        let server = server.clone();
        tokio::task::spawn_blocking(move || {
            for i in 0..200 {
                server
                    .create("", "configmaps", Some("fan"), cm(&format!("c{i}"), &[]))
                    .unwrap();
            }
        })
    };
    let t = Instant::now();
    let results = join_all(
        watchers
            .iter_mut()
            .map(|w| w.events(200, Duration::from_secs(30))),
    )
    .await;
    writer.await.unwrap();
    for evs in results {
        assert_eq!(evs.len(), 200);
        assert_eq!(evs[199].name(), "c199");
    }
    eprintln!("200 events to 100 watchers in {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_stays_bounded_under_churn() {
    let server = start_with(ServerConfig {
        history_limit: 500,
        ..fast_config()
    })
    .await;
    let churn = server.start_churn(ChurnSpec {
        objects: 50,
        ops_per_sec: 20_000.0,
        max_ops: Some(5_000),
        ..ChurnSpec::default()
    });
    eventually(Duration::from_secs(30), "churn done", || {
        churn.is_finished()
    })
    .await;
    let stats = churn.stop();
    assert_eq!(stats.total(), 5_000);
    let (len, _) = server.history_stats();
    assert!(len <= 500, "history grew to {len}");
    assert!(server.count("", "configmaps") <= 50);
    assert_eq!(server.watcher_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_is_deterministic_for_a_seed() {
    let mut finals = Vec::new();
    for _ in 0..2 {
        let server = start().await;
        let churn = server.start_churn(ChurnSpec {
            objects: 20,
            ops_per_sec: 10_000.0,
            seed: 42,
            max_ops: Some(300),
            ..ChurnSpec::default()
        });
        eventually(Duration::from_secs(20), "churn done", || {
            churn.is_finished()
        })
        .await;
        let stats = churn.stop();
        let state: Vec<(String, serde_json::Value)> = server
            .list("", "configmaps", Some("churn"))
            .into_iter()
            .map(|v| {
                (
                    v["metadata"]["name"].as_str().unwrap().to_string(),
                    v["data"].clone(),
                )
            })
            .collect();
        finals.push((stats, state));
    }
    assert_eq!(finals[0], finals[1]);
}

#[test]
fn binary_prints_its_address_serves_and_stops_on_ctrl_c() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kinformer-apiserver"))
        .args(["--listen", "127.0.0.1:0", "--seed", "25", "--churn", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .strip_prefix("listening on ")
        .expect(&first)
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"));
    let hint = lines.next().unwrap().unwrap();
    assert!(hint.contains(&format!("kubectl --server {url}")), "{hint}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let list = rt.block_on(get(&format!("{url}/api/v1/namespaces/default/configmaps")));
    assert_eq!(list.json()["items"].as_array().unwrap().len(), 25);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            assert!(code.success(), "exit {code:?}");
            break;
        }
        assert!(Instant::now() < deadline, "binary did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l == "stopped"), "{rest:?}");
}
