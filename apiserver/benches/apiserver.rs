//! API server benchmarks: list throughput over HTTP (10k and 100k ConfigMaps) and watch
//! fan-out (events per second delivered to 1, 10 and 100 watchers).
//!
//! Run: `cargo bench -p kinformer-apiserver --bench apiserver`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

fn server() -> ServerHandle {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.create_namespace("fan").expect("namespace");
    server
}

/// Read a whole list response; returns the body size.
async fn fetch(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
) -> usize {
    let req = http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = client.request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("frame").into_data() {
            n += data.len();
        }
    }
    n
}

fn list_throughput(c: &mut Criterion) {
    let server = server();
    let rt = runtime();
    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut group = c.benchmark_group("list");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    for count in [10_000usize, 100_000] {
        let ns = format!("list-{count}");
        server.seed_configmaps(&ns, count).expect("seed");
        let url = format!("{}/api/v1/namespaces/{ns}/configmaps", server.url());
        let bytes = rt.block_on(fetch(&client, &url));
        eprintln!("list of {count} ConfigMaps: {} MB", bytes / 1_000_000);
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(format!("configmaps_{count}"), |b| {
            b.iter(|| rt.block_on(fetch(&client, &url)))
        });
    }
    group.finish();
    server.shutdown();
}

fn watch_fanout(c: &mut Criterion) {
    const EVENTS: u64 = 1_000;
    let mut group = c.benchmark_group("watch_fanout");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(6))
        .warm_up_time(Duration::from_secs(1));
    for watchers in [1usize, 10, 100] {
        let server = server();
        let rt = runtime();
        for i in 0..EVENTS {
            server
                .create("", "configmaps", Some("fan"), json!({"metadata": {"name": format!("cm-{i:04}")}, "data": {"v": "0", "payload": "x".repeat(1000)}}))
                .expect("create");
        }
        let received: Arc<Vec<AtomicU64>> =
            Arc::new((0..watchers).map(|_| AtomicU64::new(0)).collect());
        let url = format!(
            "{}/api/v1/namespaces/fan/configmaps?watch=1&resourceVersion={}",
            server.url(),
            server.resource_version()
        );
        for w in 0..watchers {
            let received = received.clone();
            let url = url.clone();
            rt.spawn(async move {
                let client: Client<_, Full<Bytes>> =
                    Client::builder(TokioExecutor::new()).build_http();
                let req = http::Request::get(url)
                    .body(Full::new(Bytes::new()))
                    .expect("request");
                let mut body = client.request(req).await.expect("watch").into_body();
                while let Some(Ok(frame)) = body.frame().await {
                    if let Ok(data) = frame.into_data() {
                        let lines = data.iter().filter(|b| **b == b'\n').count() as u64;
                        received[w].fetch_add(lines, Ordering::Relaxed);
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.watcher_count() < watchers {
            assert!(Instant::now() < deadline, "watchers did not connect");
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut round = 0u64;
        group.throughput(Throughput::Elements(EVENTS * watchers as u64));
        group.bench_function(format!("watchers_{watchers}"), |b| {
            b.iter(|| {
                round += 1;
                for i in 0..EVENTS {
                    server
                        .update("", "configmaps", Some("fan"), json!({"metadata": {"name": format!("cm-{i:04}")}, "data": {"v": round.to_string(), "payload": "x".repeat(1000)}}))
                        .expect("update");
                }
                let target = round * EVENTS;
                let deadline = Instant::now() + Duration::from_secs(60);
                while received.iter().any(|r| r.load(Ordering::Relaxed) < target) {
                    assert!(Instant::now() < deadline, "watchers fell behind");
                    std::thread::yield_now();
                }
            })
        });
        server.shutdown();
        drop(rt);
    }
    group.finish();
}

criterion_group!(benches, list_throughput, watch_fanout);
criterion_main!(benches);
