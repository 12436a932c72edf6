//! The engine under faults and in its less common shapes: shared informers,
//! panics, streaming lists, custom resources, error storms. Random schedules
//! of writes, faults and consumers are the simulator's (`sim/`, its CI batch
//! in `sim/tests/simulator.rs`).

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::Backoff;
use kinformer::{Event, Informer, InformerFactory, SubscribeOptions};
use kinformer_apiserver::{Failure, ServerHandle, Verb};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

const SYNC: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(30);

#[actix::test]
async fn factory_shares_one_informer_per_resource_namespace_and_selectors() {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    let factory = InformerFactory::new();
    let api = || kube::Api::<ConfigMap>::namespaced(client(&server), "default");
    let first = factory.informer(api(), None, None, |b| b).unwrap();
    let second = factory
        .informer(api(), None, None, |b| b.page_size(1))
        .unwrap();
    // `configure` runs without the factory's lock held: it may use the factory.
    let other = factory
        .informer(api(), Some("app=test"), None, |b| {
            assert_eq!(factory.len(), 1, "{factory:?}");
            b
        })
        .unwrap();
    assert_eq!(factory.len(), 2);
    let (a, log_a) = Recorder::start();
    let (b, log_b) = Recorder::start();
    first
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    second
        .subscribe(b.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    first.wait_for_sync(SYNC).await.unwrap();
    other.wait_for_sync(SYNC).await.unwrap();
    // Both subscriptions hang off one informer: it counts both subscribers.
    eventually(SETTLE, "both subscribers on one informer", || {
        second.stats().subscribers == 2
    })
    .await;
    let truth = server_view(&server);
    eventually(SETTLE, "both views", || {
        log_a.lock().unwrap().view == truth && log_b.lock().unwrap().view == truth
    })
    .await;
}

/// A subscriber whose handler panics on its `n`-th event.
struct Panicker {
    seen: usize,
    panic_at: usize,
}

impl Actor for Panicker {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Panicker {
    type Result = ();

    fn handle(&mut self, _: Event<ConfigMap>, _: &mut Context<Self>) {
        self.seen += 1;
        if self.seen == self.panic_at {
            panic!("subscriber bug (expected by the test)");
        }
    }
}

#[actix::test]
async fn a_subscriber_that_panics_is_removed_and_others_are_unaffected() {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    let informer = informer(&server).start().unwrap();
    let panicker = Panicker {
        seen: 0,
        panic_at: 3,
    }
    .start();
    let doomed = informer
        .subscribe(panicker.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    let (alive, log) = Recorder::start();
    informer
        .subscribe(alive.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    eventually(SETTLE, "the panicking subscriber is removed", || {
        doomed.is_gone()
    })
    .await;
    create(&server, "later", "1");
    converges(&server, &log, "the other subscriber goes on").await;
    assert!(
        !doomed.has_synced(),
        "a subscriber that died during its initial adds never syncs"
    );
    eventually(SETTLE, "lost subscriber counted", || {
        informer.stats().subscribers_lost == 1
    })
    .await;
}

/// A streaming list's initial events, decoded on the Reflector's thread or
/// ahead on blocking threads: every object cached as the server has it,
/// then the same stream goes on as the watch.
#[actix::test]
async fn streaming_lists_sync_and_keep_watching() {
    for decoders in [0, 2] {
        let server = server(10_000);
        server.seed_configmaps("default", 1_000).unwrap();
        let informer = informer(&server)
            .streaming_lists(true)
            .list_decoders(decoders)
            .start()
            .unwrap();
        let log = subscribed(&informer).await;
        let cached: std::collections::BTreeMap<String, String> = informer
            .store()
            .snapshot()
            .iter()
            .map(|(k, o)| (k.to_string(), o.metadata.resource_version.clone().unwrap()))
            .collect();
        assert_eq!(cached, server_view(&server), "{decoders} decoders");
        server
            .create(
                "",
                "configmaps",
                Some("default"),
                configmap("streamed", "1"),
            )
            .unwrap();
        converges(&server, &log, "watch continues after the streaming list").await;
        let stats = informer.stats();
        assert_eq!(
            (stats.relists, stats.failures),
            (0, 0),
            "{decoders} decoders"
        );
        informer.stop().await;
    }
}

/// DF-9: a compact cache takes a streaming list's initial events in pages
/// while it streams; each object is added once, and a streaming relist
/// after a 410 notifies only what changed.
#[actix::test]
async fn a_streaming_list_in_pages_adds_each_object_once_and_relists_only_changes() {
    let server = server(10_000);
    server.seed_configmaps("default", 100).unwrap();
    let informer = informer(&server)
        .streaming_lists(true)
        .page_size(7)
        .compact_cache(kinformer::CompactOptions::new().recent(0))
        .start()
        .unwrap();
    let (a, log) = Recorder::start();
    let sub = informer
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    sub.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(informer.store().snapshot().len(), 100);
    assert_eq!(
        log.lock()
            .unwrap()
            .count(|s| s.kind == "Added" && s.cause == kinformer::Cause::Initial),
        100
    );
    let names: Vec<String> = server_view(&server)
        .keys()
        .map(|k| k.trim_start_matches("default/").to_owned())
        .collect();
    change_during_outage(&server, Some(&names[0]), &names[1]);
    converges(&server, &log, "view equals server after a streaming relist").await;
    // Counted once the DeltaFIFO answered the relist, which may be after
    // the subscriber converged.
    eventually(SETTLE, "the relist counted", || {
        informer.stats().relists >= 1
    })
    .await;
    let log = log.lock().unwrap();
    assert_eq!(log.count(|s| s.kind == "Deleted" && s.unknown), 1);
    assert_eq!(log.count(|s| s.kind == "Updated"), 1, "no update storm");
    assert_eq!(
        log.count(|s| s.kind == "Added"),
        100,
        "no object added twice"
    );
}

/// Records the keys of `DynamicObject` events.
struct DynRecorder(Arc<Mutex<Vec<(String, String)>>>);

impl Actor for DynRecorder {
    type Context = Context<Self>;
}

impl Handler<Event<DynamicObject>> for DynRecorder {
    type Result = ();

    fn handle(&mut self, event: Event<DynamicObject>, _: &mut Context<Self>) {
        let kind = match event {
            Event::Added { .. } => "Added",
            Event::Updated { .. } => "Updated",
            Event::Deleted { .. } => "Deleted",
        };
        self.0
            .lock()
            .unwrap()
            .push((kind.to_owned(), event.key().to_string()));
    }
}

#[actix::test]
async fn custom_resources_through_dynamic_objects() {
    let server = server(10_000);
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api = kube::Api::<DynamicObject>::namespaced_with(client(&server), "default", &ar);
    let informer = Informer::builder(api).start().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    informer
        .subscribe(
            DynRecorder(seen.clone()).start().recipient(),
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    let widget = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": 3}
    });
    server
        .create("example.com", "widgets", Some("default"), widget)
        .unwrap();
    server
        .delete("example.com", "widgets", Some("default"), "w1")
        .unwrap();
    eventually(SETTLE, "widget add and delete", || {
        seen.lock().unwrap().len() == 2
    })
    .await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], ("Added".to_owned(), "default/w1".to_owned()));
    assert_eq!(seen[1], ("Deleted".to_owned(), "default/w1".to_owned()));
}

#[actix::test]
async fn list_500_storm_backs_off_with_growing_delays_then_syncs() {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    server.faults().fail_next(Verb::List, 4, Failure::Internal);
    let informer = informer(&server)
        .backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_secs(1),
            Duration::from_secs(120),
        ))
        .start()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    informer.wait_for_sync(SYNC).await.unwrap();
    let stats = informer.stats();
    assert_eq!(stats.failures, 4);
    // Four jittered waits of at least 50, 100, 200 and 400 ms.
    assert!(
        stats.backoff_ms >= 750,
        "backoff waited {} ms",
        stats.backoff_ms
    );
    assert!(t0.elapsed() >= Duration::from_millis(750));
}

/// A port nobody listens on (yet), and a kube client for it (no retries of its own).
fn client_of_a_closed_port() -> (std::net::SocketAddr, kube::Client) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    config.default_retry = false;
    (addr, kube::Client::try_from(config).unwrap())
}

/// An API server listening at `addr` with 5 ConfigMaps in `default`.
fn serve_5_configmaps_at(addr: std::net::SocketAddr) -> ServerHandle {
    let server =
        kinformer_apiserver::ApiServer::start_in_thread(kinformer_apiserver::ServerConfig {
            listen: addr,
            ..Default::default()
        })
        .unwrap();
    server.seed_configmaps("default", 5).unwrap();
    server
}

#[actix::test]
async fn refused_connections_back_off_until_the_server_appears() {
    let (addr, client) = client_of_a_closed_port();
    let informer = Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default"))
        .backoff(fast_backoff())
        .start()
        .unwrap();
    eventually(SETTLE, "a few refused lists", || {
        informer.stats().failures >= 3
    })
    .await;
    assert!(!informer.has_synced());
    let _server = serve_5_configmaps_at(addr);
    informer.wait_for_sync(SYNC).await.unwrap();
    eventually(SETTLE, "the cache fills", || {
        informer.store().snapshot().len() == 5
    })
    .await;
}

/// Issue 28 finding 3, through kube-client: while the relist waits on a long
/// backoff after a refused connection, `GET /version` probes notice the
/// server as soon as it listens, and the wait is cut.
#[actix::test]
async fn probes_notice_a_server_that_appears_long_before_the_backoff_ends() {
    let (addr, client) = client_of_a_closed_port();
    let backoff = Duration::from_secs(20);
    let informer = Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default"))
        .backoff(Backoff::new(backoff, backoff, Duration::from_secs(120)))
        .start()
        .unwrap();
    // A probe has found nobody: the next one that gets an answer means the server came.
    eventually(SETTLE, "a refused probe", || informer.stats().probes >= 1).await;
    let _server = serve_5_configmaps_at(addr);
    let up = tokio::time::Instant::now();
    // Without probes the relist would wait at least the 20 s backoff.
    informer
        .wait_for_sync(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(up.elapsed() < Duration::from_secs(3), "{:?}", up.elapsed());
    assert_eq!(informer.store().snapshot().len(), 5);
    assert_eq!(informer.stats().failures, 1);
}

#[actix::test]
async fn a_stopped_informer_refuses_subscribers_and_the_factory_replaces_it() {
    let server = server(10_000);
    let factory = InformerFactory::new();
    let api = || kube::Api::<ConfigMap>::namespaced(client(&server), "default");
    let informer = factory.informer(api(), None, None, |b| b).unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(factory.len(), 1);
    informer.stop().await;
    assert!(informer.is_stopped());
    assert_eq!(factory.len(), 0, "a stopped informer is not counted");
    let (a, _log) = Recorder::start();
    assert!(matches!(
        informer
            .subscribe(a.clone().recipient(), SubscribeOptions::default())
            .await,
        Err(kinformer::InformerError::Stopped)
    ));
    let fresh = factory.informer(api(), None, None, |b| b).unwrap();
    assert!(!fresh.is_stopped());
    fresh
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    let other = factory.informer(api(), Some("app=x"), None, |b| b).unwrap();
    assert_eq!(factory.len(), 2);
    assert!(format!("{factory:?}").contains("running: 2"), "{factory:?}");
    factory.stop_all().await;
    assert!(fresh.is_stopped() && other.is_stopped());
    assert_eq!(factory.len(), 0);
    let again = factory.informer(api(), None, None, |b| b).unwrap();
    assert!(!again.is_stopped());
    assert_eq!(factory.len(), 1);
}

/// An informer whose actors are gone (the arbiter that hosted them
/// stopped) reads as stopped, and the factory replaces it.
#[actix::test]
async fn an_informer_whose_thread_stopped_is_stopped_and_replaced() {
    let server = server(10_000);
    let factory = InformerFactory::new();
    let url = server.url();
    let arbiter = actix::Arbiter::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let on_arbiter = factory.clone();
    assert!(arbiter.spawn(async move {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
        let api = kube::Api::<ConfigMap>::namespaced(client, "default");
        let _ = tx.send(on_arbiter.informer(api, None, None, |b| b).unwrap());
    }));
    let informer = rx.await.unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    assert!(!informer.is_stopped());
    arbiter.stop();
    let deadline = std::time::Instant::now() + SYNC;
    while !informer.is_stopped() {
        assert!(std::time::Instant::now() < deadline, "its actors are gone");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(factory.len(), 0);
    let api = kube::Api::<ConfigMap>::namespaced(client(&server), "default");
    let fresh = factory.informer(api, None, None, |b| b).unwrap();
    fresh.wait_for_sync(SYNC).await.unwrap();
    fresh.stop().await;
}

/// An index function that fails (an `Err` or a panic) leaves the object
/// cached and unindexed, and is counted where a service can see it.
#[actix::test]
async fn failing_index_functions_are_counted_and_the_objects_cached() {
    let server = server(10_000);
    server.seed_configmaps("default", 6).unwrap();
    let informer = informer(&server)
        .index("name", |cm: &ConfigMap| {
            let name = cm.metadata.name.clone().unwrap_or_default();
            match name.as_bytes().last() {
                Some(b'1') => Err("no index for this one".to_owned()),
                Some(b'2') => panic!("an index function that panics"),
                _ => Ok(vec![name]),
            }
        })
        .start()
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    assert!(informer.store().has_synced());
    let snapshot = informer.store().snapshot();
    assert_eq!(snapshot.len(), 6);
    let stats = informer.stats();
    let unindexed = snapshot
        .list()
        .iter()
        .filter(|cm| {
            let name = cm.metadata.name.clone().unwrap_or_default();
            snapshot.by_index("name", &name).unwrap().is_empty()
        })
        .count();
    assert!(unindexed > 0, "the seed has names ending in 1 or 2");
    assert_eq!(stats.index_errors, unindexed as u64);
    assert!(
        format!("{informer:?}").contains("synced: true"),
        "{informer:?}"
    );
    informer.stop().await;
}

/// The factory shares informers by their selectors, so selectors set in
/// `configure` cannot make the informer watch something else than its key.
#[actix::test]
async fn the_factory_key_decides_the_selectors() {
    let server = server(10_000);
    server.seed_configmaps("default", 3).unwrap();
    let factory = InformerFactory::new();
    let api = kube::Api::<ConfigMap>::namespaced(client(&server), "default");
    let informer = factory
        .informer(api, None, None, |b| {
            b.label_selector("app=nothing-has-this")
        })
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(informer.store().snapshot().len(), 3);
}

#[actix::test]
async fn a_subscription_keeps_its_informer_alive_across_relists() {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    let (a, log) = Recorder::start();
    // The informer handle is dropped at once; only the subscription remains.
    let sub = informer(&server)
        .backoff(fast_backoff())
        .start()
        .unwrap()
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    sub.wait_for_sync(SYNC).await.unwrap();
    // Force a relist (the Reflector actor stops and its supervisor restarts it).
    server.faults().stall_watches(true);
    create(&server, "during-outage", "1");
    server.faults().compact();
    server.faults().close_all_watches();
    server.faults().stall_watches(false);
    converges(
        &server,
        &log,
        "the subscription still converges after a relist",
    )
    .await;
}

#[actix::test]
async fn stop_ends_resyncs_too() {
    let server = server(10_000);
    server.seed_configmaps("default", 5).unwrap();
    let informer = informer(&server).start().unwrap();
    let (a, log) = Recorder::start();
    let _sub = informer
        .subscribe(
            a.recipient(),
            SubscribeOptions::default().resync(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let resyncs = || {
        log.lock()
            .unwrap()
            .count(|s| s.cause == kinformer::Cause::Resync)
    };
    eventually(SETTLE, "a first resync", || resyncs() >= 5).await;
    // A second informer with the same period, as a clock: when it has swept
    // twice more, the stopped one would have too.
    let control = common::informer(&server).start().unwrap();
    let (c, control_log) = Recorder::start();
    let _control_sub = control
        .subscribe(
            c.recipient(),
            SubscribeOptions::default().resync(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let control_resyncs = || {
        control_log
            .lock()
            .unwrap()
            .count(|s| s.cause == kinformer::Cause::Resync)
    };
    informer.stop().await;
    let at_stop = resyncs();
    let control_at_stop = control_resyncs();
    eventually(SETTLE, "two more sweeps of the control informer", || {
        control_resyncs() >= control_at_stop + 10
    })
    .await;
    // At most the sweep that was under way when it stopped.
    assert!(
        resyncs() <= at_stop + 5,
        "resyncs went on after stop: {at_stop} → {}",
        resyncs()
    );
}

#[actix::test]
async fn dropping_every_handle_stops_the_informer() {
    let server = server(10_000);
    server.seed_configmaps("default", 5).unwrap();
    let informer = informer(&server).start().unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    eventually(SETTLE, "the informer watches", || {
        server.watcher_count() == 1
    })
    .await;
    drop(informer);
    let mut n = 0;
    eventually(SETTLE, "the watch is closed", || {
        // A write makes the server notice a closed connection.
        n += 1;
        create(&server, &format!("poke-{n}"), "1");
        server.watcher_count() == 0
    })
    .await;
}

#[actix::test]
async fn wait_for_sync_returns_stopped_when_the_informer_stops_first() {
    let server = server(10_000);
    server
        .faults()
        .fail_next(Verb::List, 1_000_000, Failure::Internal);
    let informer = informer(&server).backoff(fast_backoff()).start().unwrap();
    let (a, _log) = Recorder::start();
    let sub = informer
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    let waiter = informer.clone();
    let waiting =
        tokio::task::spawn_local(
            async move { waiter.wait_for_sync(Duration::from_secs(300)).await },
        );
    eventually(SETTLE, "lists fail", || informer.stats().failures >= 2).await;
    informer.stop().await;
    let result = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the wait ends with the stop")
        .unwrap();
    assert!(
        matches!(result, Err(kinformer::InformerError::Stopped)),
        "{result:?}"
    );
    assert!(matches!(
        sub.wait_for_sync(Duration::from_secs(300)).await,
        Err(kinformer::InformerError::Stopped)
    ));
}

/// A fake API server on a raw socket: lists answer an empty ConfigMapList at
/// resourceVersion 5 unless `hang_lists`; watches answer their headers and
/// then never write nor close (a half-open connection, a frozen server).
/// Returns its URL and how many watches it opened.
async fn silent_server(hang_lists: bool) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    const EMPTY: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}"#;
    fake_server((!hang_lists).then_some(EMPTY)).await
}

/// [`silent_server`], answering lists with `list` (or never).
async fn fake_server(list: Option<&'static str>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let watches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let opened = watches.clone();
    let url = scripted_server(move |request| {
        if request.contains("watch=true") {
            opened.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        list.map(str::to_owned)
    })
    .await;
    (url, watches)
}

/// A server whose list answers page `i` of `pages` for `continue=i` (the
/// first without one), counting list requests; watches are held open.
async fn paged_server(pages: Vec<String>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let lists = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = lists.clone();
    let url = scripted_server(move |request| {
        let line = request.lines().next().unwrap_or_default();
        if line.contains("watch=true") {
            return None;
        }
        counted.fetch_add(1, Ordering::SeqCst);
        let page: usize = line
            .split(['?', '&', ' '])
            .find_map(|p| p.strip_prefix("continue="))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        Some(pages[page.min(pages.len() - 1)].clone())
    })
    .await;
    (url, lists)
}

/// A server that reads each request's head and answers it with `answer`:
/// `Some(body)`, a 200 with that JSON and the connection closed; `None`,
/// the connection held open without a word (after a 200 header for a watch:
/// a watch that never sends).
async fn scripted_server(mut answer: impl FnMut(&str) -> Option<String> + 'static) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::task::spawn_local(async move {
        let mut held = Vec::new();
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let request = String::from_utf8_lossy(&head).to_string();
            match answer(&request) {
                Some(body) => {
                    let _ = socket
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                }
                None => {
                    if request.contains("watch=true") {
                        let _ = socket
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                            .await;
                    }
                    held.push(socket);
                }
            }
        }
    });
    url
}

/// `pages` ConfigMap list pages of `per_page` objects each, chained by
/// `continue` tokens; `metadata` after `items` when `items_first`, and an
/// integer past 64 bits in the objects of page `huge` (simd-json refuses it).
fn list_pages(
    pages: usize,
    per_page: usize,
    items_first: bool,
    huge: Option<usize>,
) -> Vec<String> {
    (0..pages)
        .map(|p| {
            let items: Vec<String> = (0..per_page)
                .map(|i| {
                    let extra = if huge == Some(p) { r#","x-extension":18446744073709551616"# } else { "" };
                    format!(
                        r#"{{"metadata":{{"name":"cm-{p}-{i}","namespace":"default","resourceVersion":"5"}},"data":{{"k":"{p}-{i}"}}{extra}}}"#
                    )
                })
                .collect();
            let token = if p + 1 < pages { format!(r#","continue":"{}""#, p + 1) } else { String::new() };
            let metadata = format!(r#""metadata":{{"resourceVersion":"5"{token}}}"#);
            let items = format!(r#""items":[{}]"#, items.join(","));
            let (a, b) = if items_first { (items, metadata) } else { (metadata, items) };
            format!(r#"{{"kind":"ConfigMapList","apiVersion":"v1",{a},{b}}}"#)
        })
        .collect()
}

/// An informer synced from a [`paged_server`] of `pages`, with the server's
/// list request count.
async fn synced_paged(
    pages: Vec<String>,
    page_size: u32,
    decoders: usize,
) -> (Informer<ConfigMap>, Arc<std::sync::atomic::AtomicUsize>) {
    let (url, lists) = paged_server(pages).await;
    let informer = informer_at(&url)
        .page_size(page_size)
        .list_decoders(decoders)
        .start()
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    (informer, lists)
}

/// Every object of a paged list is cached once, whether its pages decode on
/// the Reflector's thread or ahead on tokio's blocking threads, and whatever the
/// order of `metadata` and `items` (the next page is asked for early only
/// when `continue` comes first): each page is requested once.
#[actix::test]
async fn a_paged_list_is_cached_whole_decoded_in_place_or_ahead() {
    for decoders in [0, 1, 2] {
        for items_first in [false, true] {
            let pages = list_pages(5, 7, items_first, None);
            let (informer, lists) = synced_paged(pages, 7, decoders).await;
            let snapshot = informer.store().snapshot();
            let what = format!("{decoders} decoders, items first: {items_first}");
            assert_eq!(snapshot.len(), 35, "{what}");
            for p in 0..5 {
                for i in 0..7 {
                    let cm = snapshot
                        .get(format!("default/cm-{p}-{i}").as_str())
                        .unwrap();
                    assert_eq!(cm.data.as_ref().unwrap()["k"], format!("{p}-{i}"), "{what}");
                }
            }
            assert_eq!(
                lists.load(Ordering::SeqCst),
                5,
                "one request per page: {what}"
            );
            let stats = informer.stats();
            assert_eq!((stats.failures, stats.relists), (0, 0), "{what}");
            informer.stop().await;
        }
    }
}

/// A page simd-json refuses, in the middle of a paged list: it and the
/// pages after it are fetched again for serde_json, and the list completes
/// without a failure, in place or ahead.
#[actix::test]
async fn a_page_simd_json_refuses_mid_list_is_fetched_again_for_serde_json() {
    for decoders in [0, 2] {
        let pages = list_pages(4, 3, false, Some(2));
        let (informer, lists) = synced_paged(pages, 3, decoders).await;
        let snapshot = informer.store().snapshot();
        assert_eq!(snapshot.len(), 12, "{decoders} decoders");
        assert_eq!(
            snapshot
                .get("default/cm-2-1")
                .unwrap()
                .data
                .as_ref()
                .unwrap()["k"],
            "2-1"
        );
        assert!(lists.load(Ordering::SeqCst) >= 5, "page 2 fetched again");
        let stats = informer.stats();
        assert_eq!(
            (stats.failures, stats.relists),
            (0, 0),
            "{decoders} decoders"
        );
        informer.stop().await;
    }
}

fn informer_at(url: &str) -> kinformer::InformerBuilder<ConfigMap> {
    let client = common::client_at(url);
    Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default"))
        .backoff(fast_backoff())
        .read_timeout(Duration::from_millis(500))
        .min_watch_timeout(Duration::from_secs(1))
}

/// simd-json refuses integers past 64 bits (even in a field the type does
/// not know), serde_json reads them as floats. Such a page is fetched again
/// and decoded by serde_json: the informer syncs, with one list.
#[actix::test]
async fn a_page_only_simd_json_refuses_is_decoded_by_serde_json() {
    const PAGE: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},
        "items":[{"metadata":{"name":"big","namespace":"default","resourceVersion":"5"},
        "data":{"k":"v"},"x-extension":18446744073709551616}]}"#;
    let (url, _) = fake_server(Some(PAGE)).await;
    let informer = informer_at(&url).start().unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    let snapshot = informer.store().snapshot();
    let cached: Vec<_> = snapshot.list();
    assert_eq!(cached.len(), 1);
    assert_eq!(cached[0].data.as_ref().unwrap()["k"], "v");
    let stats = informer.stats();
    assert_eq!((stats.failures, stats.relists), (0, 0));
    informer.stop().await;
}

#[actix::test]
async fn a_list_that_never_answers_is_given_up_and_retried() {
    let (url, _) = silent_server(true).await;
    let informer = informer_at(&url).start().unwrap();
    eventually(SETTLE, "two lists given up", || {
        informer.stats().failures >= 2
    })
    .await;
    assert!(!informer.has_synced());
    informer.stop().await;
}

#[actix::test]
async fn a_watch_that_goes_silent_past_its_timeout_is_replaced() {
    let (url, watches) = silent_server(false).await;
    let informer = informer_at(&url).start().unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    // Each watch asks for [1, 2) s and is given up 0.5 s after that.
    eventually(SETTLE, "the silent watch is re-opened", || {
        watches.load(Ordering::SeqCst) >= 3
    })
    .await;
    assert_eq!(informer.stats().relists, 0, "a re-watch, not a relist");
    informer.stop().await;
}

/// Actors need an actix System or a tokio LocalSet: anywhere else `start`
/// answers an error instead of panicking.
#[test]
fn starting_outside_an_actor_runtime_is_an_error_not_a_panic() {
    let server = server(10_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // (kube's client itself must be made inside a runtime.)
    let builder = rt.block_on(async { informer(&server) });
    let no_runtime = builder.start();
    assert!(matches!(
        no_runtime,
        Err(kinformer::InformerError::NoActorRuntime)
    ));
    rt.block_on(async {
        let plain_tokio = informer(&server).start();
        assert!(matches!(
            plain_tokio,
            Err(kinformer::InformerError::NoActorRuntime)
        ));
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let informer = informer(&server).start().expect("inside a LocalSet");
                informer.wait_for_sync(SYNC).await.unwrap();
                // The handle is `Send`: a subscribe from a thread without an
                // actor runtime is the same error, not a panic in actix.
                let (recorder, _log) = Recorder::start();
                let elsewhere = informer.clone();
                let outcome = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(
                        elsewhere.subscribe(recorder.recipient(), SubscribeOptions::default()),
                    )
                    .map(|_| ())
                })
                .join()
                .expect("no panic");
                assert!(matches!(
                    outcome,
                    Err(kinformer::InformerError::NoActorRuntime)
                ));
                assert_eq!(informer.stats().subscribers, 0);
                informer.stop().await;
            })
            .await;
    });
}

/// A `tokio::spawn`ed task on an actix System's thread runs outside its
/// LocalSet: a subscribe or a start from it is the same error, not a panic.
#[actix::test]
async fn starting_from_a_spawned_task_in_a_system_is_an_error_not_a_panic() {
    let server = server(10_000);
    let builder = informer(&server);
    let informer = informer(&server).start().unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    let (recorder, _log) = Recorder::start();
    let elsewhere = informer.clone();
    let outcome = tokio::spawn(async move {
        let subscribed = elsewhere
            .subscribe(recorder.recipient(), SubscribeOptions::default())
            .await
            .map(|_| ());
        (subscribed, builder.start().map(|_| ()))
    })
    .await
    .expect("no panic");
    assert!(matches!(
        outcome.0,
        Err(kinformer::InformerError::NoActorRuntime)
    ));
    assert!(matches!(
        outcome.1,
        Err(kinformer::InformerError::NoActorRuntime)
    ));
    assert_eq!(informer.stats().subscribers, 0);
    informer.stop().await;
}

/// A `subscribe` whose future is dropped half-way (e.g. under a timeout)
/// leaves no listener behind.
#[actix::test]
async fn a_subscribe_dropped_half_way_leaves_nothing_behind() {
    let server = server(10_000);
    server.seed_configmaps("default", 5).unwrap();
    let informer = informer(&server).start().unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    let (a, _log) = Recorder::start();
    let mut subscribing = Box::pin(informer.subscribe(a.recipient(), SubscribeOptions::default()));
    // The first poll sends the Subscribe; once the Indexer took the
    // listener, the second sends the resync schedule and waits for it.
    assert!(futures::poll!(&mut subscribing).is_pending());
    eventually(SETTLE, "the Indexer took the listener", || {
        informer.stats().subscribers == 1
    })
    .await;
    assert!(futures::poll!(&mut subscribing).is_pending());
    drop(subscribing);
    eventually(SETTLE, "the half-made subscription is removed", || {
        informer.stats().subscribers == 0
    })
    .await;
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(informer.stats().subscribers, 0);
    assert_eq!(informer.stats().subscribers_lost, 0, "an undo is no loss");
}

/// An informer that cannot list (here a malformed label selector: the server
/// answers 400) keeps retrying, and says why when asked: `last_failure`, and
/// in `wait_for_sync`'s timeout error. A successful list clears it.
#[actix::test]
async fn a_failing_list_is_reported_by_wait_for_sync() {
    let server = server(10_000);
    server.seed_configmaps("default", 2).unwrap();
    let informer = informer(&server)
        .label_selector("a in (b")
        .backoff(fast_backoff())
        .start()
        .unwrap();
    eventually(SETTLE, "a failed list", || informer.stats().failures >= 2).await;
    let failure = informer.last_failure().expect("a recorded failure");
    assert!(
        !informer.store().has_synced(),
        "a store read elsewhere can tell"
    );
    assert_eq!(failure.request, "list");
    assert_eq!(
        failure.status,
        Some(400),
        "the server's answer, to branch on"
    );
    assert!(failure.message.contains("BadRequest"), "{failure}");
    match informer.wait_for_sync(Duration::from_millis(100)).await {
        Err(kinformer::InformerError::SyncTimeout {
            last_failure: Some(f),
            ..
        }) => assert_eq!(f.request, "list"),
        other => panic!("{other:?}"),
    }
    let error = informer
        .wait_for_sync(Duration::from_millis(100))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("last list failed: ") && error.contains("BadRequest"),
        "{error}"
    );

    // One failed list, then a good one: the failure is forgotten.
    server.faults().fail_next(
        kinformer_apiserver::Verb::List,
        1,
        kinformer_apiserver::Failure::Internal,
    );
    let recovered = informer_at(&server.url())
        .backoff(fast_backoff())
        .start()
        .unwrap();
    recovered.wait_for_sync(SYNC).await.unwrap();
    assert!(recovered.stats().failures >= 1);
    assert_eq!(recovered.last_failure(), None);
}

/// A streaming list cut before its initial-events-end bookmark is retried,
/// counted as a failure, then that attempt falls back to a plain list (R-25),
/// so the informer syncs although every stream is cut.
#[actix::test]
async fn a_streaming_list_cut_short_falls_back_to_a_plain_list() {
    let server = server(10_000);
    server.seed_configmaps("default", 50).unwrap();
    server.faults().close_watches_after(Some(10));
    let lists_before = server.requests().counts().verb("list");
    let informer = informer(&server)
        .streaming_lists(true)
        .backoff(fast_backoff())
        .start()
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    assert!(informer.stats().failures >= 1);
    let lists = server.requests().counts().verb("list") - lists_before;
    assert!(lists >= 1, "a plain list after the cut streams");
    assert_eq!(informer.last_failure(), None);
}
