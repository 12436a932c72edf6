//! Listener queue throughput: coalescing many notifications over few keys,
//! and the plain bounded FIFO.
//!
//! Run: `cargo bench -p kinformer-actors --bench listener`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_actors::listener::{ListenerQueue, OverflowPolicy};
use kinformer_actors::{Cause, DeletedObject, Event, ObjectKey};
use kube::api::ObjectMeta;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const EVENTS: usize = 100_000;
const KEYS: usize = 1_000;

fn object(name: &str, version: u64) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("bench".into()),
            name: Some(name.into()),
            resource_version: Some(version.to_string()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// A valid history of `EVENTS` notifications over `KEYS` keys: every key is
/// added first, then random keys are updated (90 %), resynced (5 %) or
/// deleted and later re-added (5 %). With `fresh_objects`, every change
/// carries a newly allocated object, as decoded from the wire; without, each
/// key reuses one object, which keeps them all in cache and isolates the
/// queue's own work from the cost of releasing cold `Arc`s.
fn history(fresh_objects: bool) -> Vec<Event<ConfigMap>> {
    let mut rng = StdRng::seed_from_u64(7);
    let keys: Vec<(ObjectKey, String)> = (0..KEYS)
        .map(|i| {
            let name = format!("cm-{i}");
            (ObjectKey::new(Some("bench"), &name), name)
        })
        .collect();
    let shared: Vec<Arc<ConfigMap>> = keys.iter().map(|(_, name)| object(name, 0)).collect();
    let mut state: Vec<Option<Arc<ConfigMap>>> = vec![None; KEYS];
    let mut version = 0u64;
    let mut events = Vec::with_capacity(EVENTS);
    while events.len() < EVENTS {
        let i = if events.len() < KEYS {
            events.len()
        } else {
            rng.random_range(0..KEYS)
        };
        let (key, name) = &keys[i];
        version += 1;
        let roll = rng.random_range(0..100);
        let fresh = |name: &str| {
            if fresh_objects {
                object(name, version)
            } else {
                shared[i].clone()
            }
        };
        let event = match state[i].take() {
            None => {
                let new = fresh(name);
                state[i] = Some(new.clone());
                Event::Added {
                    key: key.clone(),
                    object: new,
                    cause: Cause::Watch,
                }
            }
            Some(old) if roll < 5 => Event::Deleted {
                key: key.clone(),
                object: DeletedObject::Final(old),
                cause: Cause::Watch,
            },
            Some(old) if roll < 10 => {
                state[i] = Some(old.clone());
                Event::Updated {
                    key: key.clone(),
                    old: old.clone(),
                    new: old,
                    cause: Cause::Resync,
                }
            }
            Some(old) => {
                let new = fresh(name);
                state[i] = Some(new.clone());
                Event::Updated {
                    key: key.clone(),
                    old,
                    new,
                    cause: Cause::Watch,
                }
            }
        };
        events.push(event);
    }
    events
}

fn bench_listener_queue(c: &mut Criterion) {
    let events = history(true);
    let hot_events = history(false);
    let mut group = c.benchmark_group("listener_queue");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.throughput(Throughput::Elements(EVENTS as u64));

    // The floor: moving 100k events out of the batch and dropping them (the
    // `Arc` releases every queue pays), with no queue at all.
    group.bench_function("baseline_move_and_drop_100k", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                for e in events {
                    black_box(e);
                }
            },
            BatchSize::LargeInput,
        )
    });

    group.bench_function("coalesce_100k_over_1k_keys_then_drain", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, KEYS);
                for e in events {
                    let _ = black_box(q.push(e));
                }
                let mut n = 0usize;
                while let Some(e) = q.pop() {
                    black_box(&e);
                    n += 1;
                }
                black_box(n)
            },
            BatchSize::LargeInput,
        )
    });

    group.bench_function("coalesce_100k_over_1k_keys_then_drain_hot_objects", |b| {
        b.iter_batched(
            || hot_events.clone(),
            |events| {
                let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, KEYS);
                for e in events {
                    let _ = black_box(q.push(e));
                }
                while let Some(e) = q.pop() {
                    black_box(&e);
                }
            },
            BatchSize::LargeInput,
        )
    });

    group.bench_function("coalesce_100k_interleaved_pop_every_4", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, KEYS);
                for (i, e) in events.into_iter().enumerate() {
                    let _ = black_box(q.push(e));
                    if i % 4 == 3 {
                        black_box(q.pop());
                    }
                }
                while let Some(e) = q.pop() {
                    black_box(&e);
                }
            },
            BatchSize::LargeInput,
        )
    });

    group.bench_function("block_100k_push_pop_capacity_1024", |b| {
        b.iter_batched(
            || events.clone(),
            |events| {
                let mut q = ListenerQueue::new(OverflowPolicy::Block, 1024);
                for e in events {
                    let mut e = e;
                    // The producer waits (here: the consumer pops) while the queue is full.
                    loop {
                        match q.push(e) {
                            Ok(p) => {
                                black_box(p);
                                break;
                            }
                            Err(full) => {
                                black_box(q.pop());
                                e = full.into_event();
                            }
                        }
                    }
                }
                while let Some(e) = q.pop() {
                    black_box(&e);
                }
            },
            BatchSize::LargeInput,
        )
    });

    group.finish();
}

criterion_group!(benches, bench_listener_queue);
criterion_main!(benches);
