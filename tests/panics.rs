//! Panic containment where user code runs: a transform, an index function,
//! subscriber handlers (per event, batched, pipelined, inline), including during the
//! initial list. Each time the informer and the other subscribers go on,
//! the failure is counted, and `wait_for_sync` never hangs because a handler
//! panicked during the initial list (k8s#129024).
//!
//! A transform that panics skips the object. The controller's
//! reconcile and mappers: `tests/controller.rs`.

mod common;
#[path = "support/logs.rs"]
mod logs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Event, EventBatch, InformerError, SubscribeOptions};
use kinformer_apiserver::ServerHandle;

const SYNC: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(30);
const BUG: &str = "user-code bug (expected by the test)";

fn is(cm: &ConfigMap, name: &str) -> bool {
    cm.metadata.name.as_deref() == Some(name)
}

/// A subscriber that panics at its `at`-th notification, in any delivery mode.
struct Panicky {
    seen: usize,
    at: usize,
}

impl Actor for Panicky {
    type Context = Context<Self>;
}

impl Panicky {
    fn count(&mut self, n: usize) {
        self.seen += n;
        if self.seen >= self.at {
            panic!("{BUG}");
        }
    }
}

impl Handler<Event<ConfigMap>> for Panicky {
    type Result = ();

    fn handle(&mut self, _: Event<ConfigMap>, _: &mut Context<Self>) {
        self.count(1);
    }
}

impl Handler<EventBatch<ConfigMap>> for Panicky {
    type Result = ();

    fn handle(&mut self, batch: EventBatch<ConfigMap>, _: &mut Context<Self>) {
        self.count(batch.len());
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Each,
    Batches,
    Pipelined,
    Inline,
}

/// A subscriber that panics during the initial list (with a small Block
/// queue, so the panic comes while the list is still being delivered).
async fn panics_during_the_initial_list(mode: Mode) {
    let server = server(10_000);
    server.seed_configmaps("default", 200).unwrap();
    let informer = informer(&server).backoff(fast_backoff()).start().unwrap();
    let panicky = Panicky { seen: 0, at: 5 }.start();
    let options = SubscribeOptions::default().capacity(2).batch_size(4);
    let doomed = match mode {
        Mode::Each => informer.subscribe(panicky.recipient(), options).await,
        Mode::Batches => {
            informer
                .subscribe_batches(panicky.recipient(), options)
                .await
        }
        Mode::Pipelined => informer.subscribe_pipelined(&panicky, options).await,
        Mode::Inline => {
            let mut seen = 0;
            informer
                .subscribe_inline(options, move |_| {
                    seen += 1;
                    if seen >= 5 {
                        panic!("{BUG}");
                    }
                })
                .await
        }
    }
    .unwrap();
    let (alive, log) = Recorder::start();
    let alive_sub = informer
        .subscribe(alive.recipient(), SubscribeOptions::default().capacity(2))
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    informer
        .wait_for_sync(SYNC)
        .await
        .unwrap_or_else(|e| panic!("{mode:?}: the informer never synced: {e}"));
    alive_sub.wait_for_sync(SYNC).await.unwrap();
    // The doomed subscription's own wait ends at once with SubscriberGone.
    let gone = tokio::time::timeout(Duration::from_secs(5), doomed.wait_for_sync(SYNC))
        .await
        .unwrap_or_else(|_| panic!("{mode:?}: wait_for_sync hung on a dead subscriber"));
    assert!(
        matches!(gone, Err(InformerError::SubscriberGone)),
        "{mode:?}: {gone:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{mode:?}");
    create(&server, "after", "1");
    converges(&server, &log, "the other subscriber goes on").await;
    eventually(SETTLE, "the lost subscriber is counted", || {
        informer.stats().subscribers_lost == 1
    })
    .await;
    informer.stop().await;
}

/// SI-T21: a subscriber that panics on its last initial add (here the
/// only one) never syncs its handle, though its failed call counts as
/// handled for the informer's own sync: its wait answers `SubscriberGone`.
#[actix::test]
async fn a_subscriber_panicking_on_its_last_initial_add_never_syncs() {
    for batched in [false, true] {
        let server = server(10_000);
        server.seed_configmaps("default", 1).unwrap();
        let informer = informer(&server).start().unwrap();
        informer.wait_for_sync(SYNC).await.unwrap();
        let panicky = Panicky { seen: 0, at: 1 }.start();
        let options = SubscribeOptions::default();
        let doomed = if batched {
            informer
                .subscribe_batches(panicky.recipient(), options)
                .await
        } else {
            informer.subscribe(panicky.recipient(), options).await
        }
        .unwrap();
        let gone = tokio::time::timeout(Duration::from_secs(5), doomed.wait_for_sync(SYNC))
            .await
            .unwrap_or_else(|_| panic!("batched {batched}: wait_for_sync hung"));
        assert!(
            matches!(gone, Err(InformerError::SubscriberGone)),
            "batched {batched}: {gone:?}"
        );
        assert!(!doomed.has_synced(), "batched {batched}");
        informer.stop().await;
    }
}

#[actix::test]
async fn a_subscriber_panicking_during_the_initial_list_does_not_block_sync() {
    panics_during_the_initial_list(Mode::Each).await;
}

#[actix::test]
async fn a_batched_subscriber_panicking_during_the_initial_list_does_not_block_sync() {
    panics_during_the_initial_list(Mode::Batches).await;
}

#[actix::test]
async fn a_pipelined_subscriber_panicking_during_the_initial_list_does_not_block_sync() {
    panics_during_the_initial_list(Mode::Pipelined).await;
}

#[actix::test]
async fn an_inline_handler_panicking_during_the_initial_list_does_not_block_sync() {
    panics_during_the_initial_list(Mode::Inline).await;
}

#[actix::test]
async fn a_subscriber_panicking_on_a_watch_event_is_removed_and_counted() {
    let server = server(10_000);
    server.seed_configmaps("default", 3).unwrap();
    let informer = informer(&server).start().unwrap();
    let doomed = informer
        .subscribe(
            Panicky { seen: 0, at: 4 }.start().recipient(),
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    let (alive, log) = Recorder::start();
    informer
        .subscribe(alive.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    assert!(!doomed.is_gone());
    create(&server, "trigger", "1");
    eventually(SETTLE, "the panicking subscriber is gone", || {
        doomed.is_gone()
    })
    .await;
    assert!(doomed.stats().gone);
    create(&server, "later", "1");
    converges(&server, &log, "the other subscriber goes on").await;
    assert_eq!(informer.stats().subscribers_lost, 1);
    informer.stop().await;
}

#[actix::test]
async fn an_index_function_that_panics_leaves_the_object_cached_and_unindexed() {
    let server = server(10_000);
    server.seed_configmaps("default", 3).unwrap();
    let informer = informer(&server)
        .index("name", |cm: &ConfigMap| {
            if is(cm, "boom") {
                panic!("{BUG}");
            }
            Ok(cm.metadata.name.clone().into_iter().collect())
        })
        .start()
        .unwrap();
    let log = subscribed(&informer).await;
    create(&server, "boom", "1");
    create(&server, "fine", "1");
    converges(&server, &log, "the subscriber sees both").await;
    let snapshot = informer.store().snapshot();
    assert_eq!(snapshot.len(), 5, "the object is cached");
    assert!(snapshot.by_index("name", "boom").unwrap().is_empty());
    assert_eq!(snapshot.by_index("name", "fine").unwrap().len(), 1);
    assert!(informer.stats().index_errors >= 1);
    assert_eq!(informer.stats().reflector_panics, 0);
    informer.stop().await;
}

#[actix::test]
async fn an_index_function_panic_is_logged_with_the_object_key() {
    let (logs, _guard) = logs::capture(tracing::Level::WARN);
    let server = server(10_000);
    let informer = informer(&server)
        .index("name", |cm: &ConfigMap| {
            if is(cm, "boom") {
                panic!("{BUG}");
            }
            Ok(Vec::new())
        })
        .start()
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    create(&server, "boom", "1");
    eventually(SETTLE, "the failure is counted", || {
        informer.stats().index_errors >= 1
    })
    .await;
    let lines = logs.lines_with("default/boom");
    assert!(
        !lines.is_empty(),
        "no log line names the key: {}",
        logs.text()
    );
    informer.stop().await;
}

/// A transform that panics on every ConfigMap named "boom" and on every one
/// whose value is "bad", counting its panics.
fn panicking_transform(
    calls: Arc<AtomicUsize>,
) -> impl Fn(ConfigMap) -> ConfigMap + Send + Sync + 'static {
    move |cm: ConfigMap| {
        let value = cm.data.as_ref().and_then(|d| d.get("value"));
        if is(&cm, "boom") || value.map(String::as_str) == Some("bad") {
            calls.fetch_add(1, Ordering::SeqCst);
            panic!("{BUG}");
        }
        cm
    }
}

/// Sets ConfigMap `name`'s value on the server.
fn set_value(server: &ServerHandle, name: &str, value: &str) {
    let mut cm = server.get("", "configmaps", Some("default"), name).unwrap();
    cm["data"]["value"] = value.into();
    server
        .update("", "configmaps", Some("default"), cm)
        .unwrap();
}

/// The server's ConfigMaps but `skipped` (what an informer whose transform
/// skips them converges to).
fn server_view_without(server: &ServerHandle, skipped: &str) -> BTreeMap<String, String> {
    let mut view = server_view(server);
    view.remove(&format!("default/{skipped}"));
    view
}

#[actix::test]
async fn r29_a_transform_that_always_panics_on_one_object_skips_it_and_the_others_go_on() {
    let (logs, _guard) = logs::capture(tracing::Level::WARN);
    let server = server(10_000);
    server.seed_configmaps("default", 3).unwrap();
    create(&server, "boom", "1");
    let calls = Arc::new(AtomicUsize::new(0));
    let informer = informer(&server)
        .backoff(fast_backoff())
        .transform(panicking_transform(calls.clone()))
        .start()
        .unwrap();
    let log = subscribed(&informer).await;
    // The initial list leaves the object out: the informer syncs all the same.
    informer.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(informer.stats().transform_panics, 1);
    let failure = informer.last_failure().expect("the skip is reported");
    assert!(failure.message.contains("default/boom"), "{failure}");
    assert!(
        !logs.lines_with("default/boom").is_empty(),
        "no log line names the key: {}",
        logs.text()
    );
    // A watch event on it is skipped too; the others' go on.
    set_value(&server, "boom", "2");
    create(&server, "later", "1");
    let truth = server_view_without(&server, "boom");
    eventually(
        SETTLE,
        "the others converge without the skipped object",
        || log.lock().unwrap().view == truth,
    )
    .await;
    eventually(SETTLE, "the watch event is skipped too", || {
        informer.stats().transform_panics == 2
    })
    .await;
    assert!(informer.store().snapshot().get("default/boom").is_none());
    let stats = informer.stats();
    assert_eq!(
        stats.relists, 0,
        "a skip fails neither the list nor the watch"
    );
    assert_eq!(stats.reflector_panics, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    informer.stop().await;
}

#[actix::test]
async fn r29_an_object_the_transform_panics_on_leaves_the_view_and_comes_back_at_its_next_change() {
    let (logs, _guard) = logs::capture(tracing::Level::WARN);
    let server = server(10_000);
    server.seed_configmaps("default", 2).unwrap();
    create(&server, "flaky", "good");
    let calls = Arc::new(AtomicUsize::new(0));
    let informer = informer(&server)
        .transform(panicking_transform(calls.clone()))
        .start()
        .unwrap();
    let log = subscribed(&informer).await;
    informer.wait_for_sync(SYNC).await.unwrap();
    assert!(informer.last_failure().is_none());
    // A change the transform panics on: the cached state is deleted.
    set_value(&server, "flaky", "bad");
    let without = server_view_without(&server, "flaky");
    eventually(
        SETTLE,
        "the skipped object's cached state is deleted",
        || log.lock().unwrap().view == without,
    )
    .await;
    assert!(informer.store().snapshot().get("default/flaky").is_none());
    assert!(
        !logs.lines_with("default/flaky").is_empty(),
        "no log line names the key: {}",
        logs.text()
    );
    // Its next change that the transform survives brings it back.
    set_value(&server, "flaky", "good again");
    converges(&server, &log, "the object is back").await;
    let stats = informer.stats();
    assert_eq!(stats.transform_panics, 1);
    assert_eq!(stats.relists, 0);
    assert_eq!(stats.reflector_panics, 0);
    informer.stop().await;
}
