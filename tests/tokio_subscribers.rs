//! Stream and closure subscribers from plain tokio (no actix in the test):
//! how their subscriptions end. Their delivery guarantees are the shared
//! tests of `engine.rs` (`for_each_kind!`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{EventBatch, EventStream, InformerError, SubscribeOptions};

const SYNC: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(20);

/// Both stream types can move into a `tokio::spawn`ed task.
#[test]
fn streams_are_send() {
    fn send<T: Send>() {}
    send::<EventStream<ConfigMap>>();
    send::<EventStream<ConfigMap, EventBatch<ConfigMap>>>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_unsubscribes() {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = Kind::Stream.start(informer(&server));
    // Subscribed and consumed from spawned tasks: the futures and the stream are `Send`.
    let subscribing = informer.clone();
    let mut stream = tokio::spawn(async move {
        subscribing
            .stream(SubscribeOptions::default())
            .await
            .unwrap()
    })
    .await
    .unwrap();
    let (_other, other_log) = Kind::Stream
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    let sub = stream.subscription().clone();
    let consumer = tokio::spawn(async move {
        for _ in 0..20 {
            stream.next().await.expect("an initial add");
        }
        // Asking for more is what counts the last one as handled.
        assert!(
            futures::FutureExt::now_or_never(stream.next()).is_none(),
            "nothing beyond the 20 initial adds"
        );
        stream
    });
    let stream = consumer.await.unwrap();
    sub.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(informer.stats().subscribers, 2);
    // A call in flight when the stream goes (pushed, not taken): its
    // failure is the unsubscribe, not a lost subscriber.
    create(&server, "unread", "1");
    eventually(SETTLE, "a call in flight", || sub.stats().in_flight == 1).await;
    drop(stream);
    eventually(SETTLE, "the dropped stream's subscriber is removed", || {
        informer.stats().subscribers == 1
    })
    .await;
    assert_eq!(
        informer.stats().subscribers_lost,
        0,
        "unsubscribed, not lost"
    );
    assert!(!sub.is_gone(), "unsubscribed, not gone");
    create(&server, "after", "1");
    converges(&server, &other_log, "the other subscriber goes on").await;
    assert_eq!(sub.stats().delivered, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_closure_ends_its_subscription_and_others_go_on() {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = Kind::Closure.start(informer(&server));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let panicking = informer
        .subscribe_fn(SubscribeOptions::default(), move |_| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                assert!(n < 5, "the closure's future panics at its 5th event");
            }
        })
        .await
        .unwrap();
    let (_alive, log) = Kind::Closure
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    // Noticed without a later delivery to find it gone.
    eventually(SETTLE, "the panicking subscriber is removed", || {
        panicking.is_gone()
    })
    .await;
    eventually(SETTLE, "the informer counts it lost", || {
        let stats = informer.stats();
        stats.subscribers_lost == 1 && stats.subscribers == 1
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 5, "no call after the panic");
    assert_eq!(panicking.stats().delivered, 4);
    assert!(matches!(
        panicking.wait_for_sync(SYNC).await,
        Err(InformerError::SubscriberGone)
    ));
    create(&server, "after", "1");
    converges(&server, &log, "the other subscriber converges").await;
}

/// Once the informer on its own thread is stopped, no new subscription starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_informer_on_its_own_thread_takes_no_subscription() {
    let server = server(10_000);
    let informer = informer(&server).start_on_own_thread().unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    informer.stop().await;
    assert!(matches!(
        informer.stream(SubscribeOptions::default()).await,
        Err(InformerError::Stopped)
    ));
    assert!(matches!(
        informer
            .subscribe_fn(SubscribeOptions::default(), |_| async {})
            .await,
        Err(InformerError::Stopped)
    ));
}
