//! The Indexer actor's hot path: batches of updates applied to a 10k-object
//! cache, published, turned into events and handed to 0, 1 or 10 listeners
//! on credit, until every subscriber has every event; then the same with 1
//! listener on compact caches (each update's old state compact: 10k objects
//! round-robin, more than the 1024 recent ones kept decoded).
//!
//! Run: `cargo bench -p kinformer-actors --bench indexer`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_actors::delta_fifo::{DeltaQueue, DeltaQueueOptions};
use kinformer_actors::indexer::{Cache, CompactOptions, Indexer, IndexerStats, Process, Subscribe};
use kinformer_actors::listener::{
    Listener, ListenerOptions, ListenerStats, OverflowPolicy, Target,
};
use kinformer_actors::{EventBatch, SubscriberId};
use kube::api::ObjectMeta;

const OBJECTS: usize = 10_000;
const BATCH: usize = 256;

fn object(i: usize, version: u64) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("bench".into()),
            name: Some(format!("cm-{i}")),
            resource_version: Some(version.to_string()),
            labels: Some([("app".to_owned(), format!("app-{}", i % 50))].into()),
            ..Default::default()
        },
        // About 1 KB of data, like the end-to-end churn ConfigMaps.
        data: Some(
            (0..8)
                .map(|k| {
                    (
                        format!("key-{k}"),
                        format!("{i:08}-{version:08}-").repeat(6),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    })
}

/// Counts the events it is handed.
struct Sink(Arc<AtomicUsize>);

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<EventBatch<ConfigMap>> for Sink {
    type Result = ();

    fn handle(&mut self, batch: EventBatch<ConfigMap>, _: &mut Context<Self>) {
        self.0.fetch_add(batch.len(), Ordering::Relaxed);
    }
}

/// Every object updated once (to `version`), popped in batches of [`BATCH`].
fn batches(version: u64) -> Vec<Process<ConfigMap>> {
    let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
    for i in 0..OBJECTS {
        queue.update(object(i, version), &()).expect("named");
    }
    let mut out = Vec::new();
    while !queue.is_empty() {
        out.push(Process::new(queue.pop_batch(BATCH)));
    }
    out
}

/// The caches compared: decoded, and compact three ways.
fn cache(name: &str) -> Cache<ConfigMap> {
    let compact = |o: CompactOptions| Cache::compact_json(o).expect("compact cache");
    match name {
        "decoded" => Cache::new(),
        "compact" => compact(CompactOptions::new()),
        "compact_inline" => compact(CompactOptions::new().background(false)),
        "compact_all_recent" => compact(CompactOptions::new().recent(2 * OBJECTS)),
        _ => unreachable!("{name}"),
    }
}

fn bench_indexer(c: &mut Criterion) {
    let mut group = c.benchmark_group("indexer_10k_updates_batches_256");
    group.throughput(Throughput::Elements(OBJECTS as u64));
    let runs = [0usize, 1, 10]
        .map(|n| (n, "decoded"))
        .into_iter()
        .chain(["compact", "compact_inline", "compact_all_recent"].map(|c| (1, c)));
    for (listeners, cache_name) in runs {
        let sys = System::new();
        let (indexer, counts) = sys.block_on(async move {
            let indexer =
                Indexer::new(cache(cache_name), Arc::new(IndexerStats::default())).start();
            for p in batches(1) {
                indexer.send(p).await.expect("indexer");
            }
            let mut counts = Vec::new();
            for id in 0..listeners {
                let count = Arc::new(AtomicUsize::new(0));
                let sink = Sink(count.clone()).start();
                let listener = Listener::new(
                    SubscriberId(id as u64),
                    Target::Batches {
                        recipient: sink.recipient(),
                        max: BATCH,
                    },
                    ListenerOptions {
                        policy: OverflowPolicy::Block,
                        capacity: 4 * OBJECTS,
                    },
                    tokio::sync::watch::channel(false).0,
                    Arc::new(ListenerStats::default()),
                );
                indexer
                    .send(Subscribe::start(SubscriberId(id as u64), listener))
                    .await
                    .expect("indexer");
                counts.push(count);
            }
            // The replays.
            while counts.iter().any(|c| c.load(Ordering::Relaxed) < OBJECTS) {
                tokio::task::yield_now().await;
            }
            (indexer, counts)
        });
        let mut version = 1;
        let label = match cache_name {
            "decoded" => format!("{listeners}_listeners"),
            other => format!("{listeners}_listeners_{other}"),
        };
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let indexer = indexer.clone();
                let counts = counts.clone();
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    version += 1;
                    let work = batches(version);
                    let indexer = indexer.clone();
                    let counts = counts.clone();
                    let goal: Vec<usize> = counts
                        .iter()
                        .map(|c| c.load(Ordering::Relaxed) + OBJECTS)
                        .collect();
                    total += sys.block_on(async move {
                        let t = Instant::now();
                        for p in work {
                            indexer.send(p).await.expect("indexer");
                        }
                        while counts
                            .iter()
                            .zip(&goal)
                            .any(|(c, g)| c.load(Ordering::Relaxed) < *g)
                        {
                            tokio::task::yield_now().await;
                        }
                        t.elapsed()
                    });
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench_indexer
}
criterion_main!(benches);
