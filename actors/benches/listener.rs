//! Listener throughput: the queue alone (coalescing many notifications over
//! few keys, the plain bounded FIFO), and the fan-out path through listener
//! actors to 1, 10 and 100 subscribers in each delivery mode.
//!
//! Run: `cargo bench -p kinformer-actors --bench listener`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use futures::channel::oneshot;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_actors::listener::{
    CreditLine, Deliver, Listener, ListenerOptions, ListenerQueue, ListenerStats, OverflowPolicy,
    Target,
};
use kinformer_actors::{Cause, DeletedObject, Event, EventBatch, ObjectKey, SubscriberId};
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
                    old: old.clone().into(),
                    new: old,
                    cause: Cause::Resync,
                }
            }
            Some(old) => {
                let new = fresh(name);
                state[i] = Some(new.clone());
                Event::Updated {
                    key: key.clone(),
                    old: old.into(),
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

/// Deliveries per fan-out run, spread over the subscribers.
const FANOUT_DELIVERIES: usize = 50_000;

/// Events per `Deliver`, as the Indexer chunks them.
const FANOUT_CHUNK: usize = 256;

#[derive(Clone, Copy)]
enum Mode {
    Each,
    Pipelined,
    Batches,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Each => "each",
            Mode::Pipelined => "pipelined_8",
            Mode::Batches => "batches_256",
        }
    }
}

/// A subscriber that counts what it handled and reports once it has all.
struct Counter {
    seen: usize,
    want: usize,
    done: Option<oneshot::Sender<()>>,
}

impl Counter {
    fn took(&mut self, n: usize) {
        self.seen += n;
        if self.seen >= self.want
            && let Some(done) = self.done.take()
        {
            let _ = done.send(());
        }
    }
}

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Counter {
    type Result = ();

    fn handle(&mut self, e: Event<ConfigMap>, _: &mut Context<Self>) {
        black_box(&e);
        self.took(1);
    }
}

impl Handler<EventBatch<ConfigMap>> for Counter {
    type Result = ();

    fn handle(&mut self, b: EventBatch<ConfigMap>, _: &mut Context<Self>) {
        black_box(&b);
        self.took(b.len());
    }
}

/// One fan-out run: `subscribers` Block listeners (capacity 1024, the
/// default) each get `events` updates in chunks, sent as the Indexer sends
/// them (unanswered within the listener's credit, else answered and awaited
/// before the next chunk). Times from the first send until every subscriber
/// handled its last event; starting and stopping the actors is not timed.
async fn fanout_run(mode: Mode, subscribers: usize, events: &[Event<ConfigMap>]) -> Duration {
    let mut outlets = Vec::with_capacity(subscribers);
    let mut done = Vec::with_capacity(subscribers);
    for i in 0..subscribers {
        let (tx, rx) = oneshot::channel();
        done.push(rx);
        let counter = Counter {
            seen: 0,
            want: events.len(),
            done: Some(tx),
        }
        .start();
        let target = match mode {
            Mode::Each => Target::Each(counter.clone().recipient()),
            Mode::Pipelined => Target::Pipelined {
                recipient: counter.clone().recipient(),
                depth: 8,
            },
            Mode::Batches => Target::Batches {
                recipient: counter.clone().recipient(),
                max: 256,
            },
        };
        let listener = Listener::new(
            SubscriberId(i as u64),
            target,
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 1024,
            },
            tokio::sync::watch::channel(false).0,
            Arc::new(ListenerStats::default()),
        );
        let credit = CreditLine::new(listener.credit());
        outlets.push((listener.start(), credit, counter));
    }
    // The chunks, made up front (the Indexer's cost, not the listener's)
    // and shared by every listener, as the Indexer shares them.
    let shared: Vec<std::sync::Arc<[Event<ConfigMap>]>> =
        events.chunks(FANOUT_CHUNK).map(Into::into).collect();
    let start = std::time::Instant::now();
    for shared_chunk in &shared {
        let mut answered = Vec::new();
        for (addr, credit, _) in outlets.iter_mut() {
            let chunk = shared_chunk.clone();
            if credit.try_unanswered(chunk.len()) {
                addr.do_send(Deliver(chunk));
            } else {
                credit.sent(chunk.len());
                answered.push(addr.send(Deliver(chunk)));
            }
        }
        for answer in futures::future::join_all(answered).await {
            answer.expect("listener alive").expect("listener alive");
        }
    }
    futures::future::join_all(done).await;
    let elapsed = start.elapsed();
    drop(outlets);
    // Let the actors stop before the next run starts its clock.
    actix::clock::sleep(Duration::from_millis(2)).await;
    elapsed
}

fn bench_listener_fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("listener_fanout");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(FANOUT_DELIVERIES as u64));
    for subscribers in [1, 10, 100] {
        let per_subscriber = FANOUT_DELIVERIES / subscribers;
        let events: Vec<Event<ConfigMap>> = (0..per_subscriber)
            .map(|i| {
                let name = format!("cm-{}", i % KEYS);
                Event::Updated {
                    key: ObjectKey::new(Some("bench"), &name),
                    old: object(&name, i as u64).into(),
                    new: object(&name, i as u64 + 1),
                    cause: Cause::Watch,
                }
            })
            .collect();
        for mode in [Mode::Each, Mode::Pipelined, Mode::Batches] {
            let name = format!("{}_{subscribers}_subscribers", mode.name());
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    actix::System::new().block_on(async {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            total += fanout_run(mode, subscribers, &events).await;
                        }
                        total
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_listener_queue, bench_listener_fanout);
criterion_main!(benches);
