//! `Workers`: subscriber actors on threads of their own, reading their
//! streams in their own context. Their delivery guarantees are the shared
//! tests of `engine.rs` (the `worker` kind); here, where they run and how
//! their subscriptions end.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Event, SubscribeOptions, Workers};

const SYNC: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(20);

/// Records the name of the thread it handles events on, and may panic.
struct Placed {
    threads: Arc<Mutex<BTreeSet<String>>>,
    handled: Arc<AtomicUsize>,
    panic_at: Option<usize>,
}

impl Actor for Placed {
    type Context = Context<Self>;
}

impl StreamHandler<Event<ConfigMap>> for Placed {
    fn handle(&mut self, _: Event<ConfigMap>, _: &mut Context<Self>) {
        let n = self.handled.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(
            self.panic_at.is_none_or(|at| n < at),
            "this subscriber panics at its event {n}"
        );
        let name = std::thread::current()
            .name()
            .unwrap_or_default()
            .to_string();
        self.threads.lock().unwrap().insert(name);
    }
}

fn placed(panic_at: Option<usize>) -> (Placed, Arc<Mutex<BTreeSet<String>>>, Arc<AtomicUsize>) {
    let threads = Arc::new(Mutex::new(BTreeSet::new()));
    let handled = Arc::new(AtomicUsize::new(0));
    let actor = Placed {
        threads: threads.clone(),
        handled: handled.clone(),
        panic_at,
    };
    (actor, threads, handled)
}

#[test]
fn zero_threads_means_one_per_core() {
    let workers = Workers::new(0).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(workers.threads(), cores);
    assert_eq!(Workers::new(3).unwrap().threads(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_are_placed_round_robin_and_handle_on_their_worker() {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = informer(&server).start_on_own_thread().unwrap();
    let workers = Workers::new(2).unwrap();
    let mut subs = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let stream = informer.stream(SubscribeOptions::default()).await.unwrap();
        subs.push(stream.subscription().clone());
        let (actor, threads, handled) = placed(None);
        workers.start_reading(stream, move |_| actor);
        seen.push((threads, handled));
    }
    for sub in &subs {
        sub.wait_for_sync(SYNC).await.unwrap();
    }
    let mut all = BTreeSet::new();
    for (i, (threads, handled)) in seen.iter().enumerate() {
        assert_eq!(handled.load(Ordering::SeqCst), 20, "subscriber {i}");
        let threads = threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 1, "subscriber {i} stays on one thread");
        all.extend(threads);
    }
    let expected: BTreeSet<String> = ["kinformer-worker-0", "kinformer-worker-1"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(all, expected, "two subscribers on each worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_actor_on_a_worker_ends_its_subscription_and_its_neighbour_goes_on() {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = informer(&server).start_on_own_thread().unwrap();
    // One thread: the panicking actor and the other share it.
    let workers = Workers::new(1).unwrap();
    let stream = informer.stream(SubscribeOptions::default()).await.unwrap();
    let (actor, _, handled) = placed(Some(5));
    workers.start_reading(stream, move |_| actor);
    let stream = informer.stream(SubscribeOptions::default()).await.unwrap();
    let sub = stream.subscription().clone();
    let log = Arc::new(Mutex::new(Log::default()));
    let recorder = StreamRecorder {
        log: log.clone(),
        gate: None,
    };
    workers.start_reading(stream, move |_| recorder);
    eventually(
        SETTLE,
        "the panicking subscriber's subscription ends",
        || informer.stats().subscribers == 1,
    )
    .await;
    assert_eq!(
        handled.load(Ordering::SeqCst),
        5,
        "no event after the panic"
    );
    sub.wait_for_sync(SYNC).await.unwrap();
    create(&server, "after", "1");
    converges(&server, &log, "the neighbour on the same thread goes on").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_workers_end_their_subscriptions() {
    let server = server(10_000);
    server.seed_configmaps("default", 5).unwrap();
    let informer = informer(&server).start_on_own_thread().unwrap();
    let workers = Workers::new(2).unwrap();
    for _ in 0..3 {
        let stream = informer.stream(SubscribeOptions::default()).await.unwrap();
        let (actor, _, _) = placed(None);
        workers.start_reading(stream, move |_| actor);
    }
    eventually(SETTLE, "three subscribers", || {
        informer.stats().subscribers == 3
    })
    .await;
    tokio::task::spawn_blocking(move || workers.stop_and_join())
        .await
        .unwrap();
    eventually(SETTLE, "their subscriptions end with their threads", || {
        informer.stats().subscribers == 0
    })
    .await;
    assert_eq!(
        informer.stats().subscribers_lost,
        0,
        "unsubscribed, not lost"
    );
}
