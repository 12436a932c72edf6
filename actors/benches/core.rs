//! Informer core micro-benchmarks: DeltaQueue push/pop, Cache upsert with two
//! indexes, `by_index` at 100k objects, and snapshot publication (persistent
//! `imbl` maps + `ArcSwap` against cloning a `std` HashMap per publish).
//!
//! Run: `cargo bench -p kinformer-actors --bench core`

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_actors::ObjectKey;
use kinformer_actors::delta_fifo::{DeltaQueue, DeltaQueueOptions};
use kinformer_actors::indexer::{Cache, IndexFn};
use kube::api::ObjectMeta;

const QUEUE_OPS: usize = 10_000;
const CACHE_OBJECTS: usize = 100_000;
const NAMESPACES: usize = 100;

fn object(i: usize, version: u64) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some(format!("ns-{}", i % NAMESPACES)),
            name: Some(format!("cm-{i}")),
            resource_version: Some(version.to_string()),
            labels: Some(BTreeMap::from([(
                "tier".to_owned(),
                format!("t{}", version % 4),
            )])),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn key_of(obj: &ConfigMap) -> ObjectKey {
    ObjectKey::of(obj).expect("bench objects have names")
}

fn namespace_index() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| Ok(o.metadata.namespace.clone().into_iter().collect()))
}

fn tier_index() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| {
        Ok(o.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("tier"))
            .cloned()
            .into_iter()
            .collect())
    })
}

/// A cache of `n` objects with the `namespace` and `tier` indexes.
fn indexed_cache(n: usize) -> (Cache<ConfigMap>, Vec<Arc<ConfigMap>>) {
    let mut cache = Cache::new();
    cache
        .add_index("namespace", namespace_index())
        .expect("new index");
    cache.add_index("tier", tier_index()).expect("new index");
    let objects: Vec<Arc<ConfigMap>> = (0..n).map(|i| object(i, 1)).collect();
    cache.replace(objects.iter().map(|o| (key_of(o), o.clone())).collect());
    cache.publish();
    (cache, objects)
}

fn queue_push_pop(c: &mut Criterion) {
    let mut group = c.benchmark_group("delta_queue");
    group.throughput(Throughput::Elements(QUEUE_OPS as u64));

    // 10k adds of distinct keys, then everything popped and done.
    let distinct: Vec<Arc<ConfigMap>> = (0..QUEUE_OPS).map(|i| object(i, 1)).collect();
    group.bench_function("add_pop_done_10k_distinct_keys", |b| {
        b.iter_batched(
            || distinct.clone(),
            |objects| {
                let mut q = DeltaQueue::new(DeltaQueueOptions::default());
                for obj in objects {
                    q.add(obj, &()).expect("key");
                }
                while let Some(p) = q.pop() {
                    q.done(&p.receipt);
                    black_box(p.deltas.len());
                }
            },
            BatchSize::SmallInput,
        );
    });

    // 10k updates over 100 keys, popped in batches of 64 along the way: the
    // per-key delta lists grow and are drained.
    let hot: Vec<Arc<ConfigMap>> = (0..QUEUE_OPS).map(|i| object(i % 100, i as u64)).collect();
    group.bench_function("update_pop_batch_10k_over_100_keys", |b| {
        b.iter_batched(
            || hot.clone(),
            |objects| {
                let mut q = DeltaQueue::new(DeltaQueueOptions::default());
                for (i, obj) in objects.into_iter().enumerate() {
                    q.update(obj, &()).expect("key");
                    if i % 256 == 255 {
                        for p in q.pop_batch(64) {
                            q.done(&p.receipt);
                        }
                    }
                }
                while !q.is_empty() {
                    for p in q.pop_batch(64) {
                        q.done(&p.receipt);
                    }
                }
            },
            BatchSize::SmallInput,
        );
    });

    // A relist of 10k objects against a cache holding them: Replaced deltas,
    // deletion detection over the known keys, then drained.
    let (cache, objects) = indexed_cache(QUEUE_OPS);
    group.bench_function("replace_10k_against_cache", |b| {
        b.iter_batched(
            || objects.clone(),
            |list| {
                let mut q = DeltaQueue::new(DeltaQueueOptions::default());
                q.replace(list, &cache).expect("keys");
                while let Some(p) = q.pop() {
                    q.done(&p.receipt);
                }
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn cache_upsert(c: &mut Criterion) {
    let mut group = c.benchmark_group("cache_upsert_2_indexes");
    let (mut cache, _) = indexed_cache(CACHE_OBJECTS);
    // Updates that move each object to another `tier` value (both indexes
    // recomputed, one of them changes).
    let updates: Vec<(ObjectKey, Arc<ConfigMap>)> = (0..QUEUE_OPS)
        .map(|i| {
            let obj = object(i * 7 % CACHE_OBJECTS, 2 + i as u64);
            (key_of(&obj), obj)
        })
        .collect();
    group.throughput(Throughput::Elements(QUEUE_OPS as u64));
    group.bench_function("update_10k_at_100k", |b| {
        b.iter(|| {
            for (key, obj) in &updates {
                black_box(cache.upsert(key.clone(), obj.clone()).previous);
            }
        });
    });
    // Inserting 10k new objects into an empty indexed cache.
    let fresh: Vec<(ObjectKey, Arc<ConfigMap>)> = (0..QUEUE_OPS)
        .map(|i| {
            let obj = object(i, 1);
            (key_of(&obj), obj)
        })
        .collect();
    group.bench_function("insert_10k_into_empty", |b| {
        b.iter_batched(
            || {
                let mut cache = Cache::new();
                cache
                    .add_index("namespace", namespace_index())
                    .expect("new index");
                cache.add_index("tier", tier_index()).expect("new index");
                (cache, fresh.clone())
            },
            |(mut cache, items)| {
                for (key, obj) in items {
                    cache.upsert(key, obj);
                }
                cache
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

fn cache_reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("cache_read_100k");
    let (cache, _) = indexed_cache(CACHE_OBJECTS);
    let snapshot = cache.reader().snapshot();
    // 1 000 objects per namespace.
    group.bench_function("by_index_namespace_1000_hits", |b| {
        b.iter(|| {
            black_box(
                snapshot
                    .by_index("namespace", black_box("ns-42"))
                    .expect("index")
                    .len(),
            )
        });
    });
    group.bench_function("index_keys_namespace_1000_hits", |b| {
        b.iter(|| {
            black_box(
                snapshot
                    .index_keys("namespace", black_box("ns-42"))
                    .expect("index")
                    .len(),
            )
        });
    });
    let key = ObjectKey::new(Some("ns-42"), "cm-4242");
    group.bench_function("get", |b| {
        b.iter(|| black_box(snapshot.get(black_box(&key))))
    });
    group.finish();
}

/// Publication: one write, then make it visible to another thread's reader.
/// `imbl` + `ArcSwap` (what `Cache` does) against a `std` HashMap whose
/// snapshot is cloned at every publish.
fn snapshot_publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("publish_100k");
    let (mut cache, objects) = indexed_cache(CACHE_OBJECTS);
    let reader = cache.reader();
    let mut i = 0usize;
    group.bench_function("imbl_upsert_publish_read", |b| {
        b.iter(|| {
            i = (i + 1) % CACHE_OBJECTS;
            let obj = objects[i].clone();
            cache.upsert(key_of(&obj), obj);
            cache.publish();
            black_box(reader.snapshot().get(&key_of(&objects[i])));
        });
    });
    group.bench_function("imbl_publish_only", |b| b.iter(|| cache.publish()));

    let mut std_map: HashMap<ObjectKey, Arc<ConfigMap>> =
        objects.iter().map(|o| (key_of(o), o.clone())).collect();
    let published = Arc::new(ArcSwap::from_pointee(std_map.clone()));
    let mut j = 0usize;
    group.bench_function("std_hashmap_clone_upsert_publish_read", |b| {
        b.iter(|| {
            j = (j + 1) % CACHE_OBJECTS;
            let obj = objects[j].clone();
            std_map.insert(key_of(&obj), obj);
            published.store(Arc::new(std_map.clone()));
            black_box(published.load().get(&key_of(&objects[j])).cloned());
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = queue_push_pop, cache_upsert, cache_reads, snapshot_publish
}
criterion_main!(benches);
