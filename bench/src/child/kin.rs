//! The informer under test, kinformer flavour: an `Informer` with one actix
//! actor per subscriber recording what it receives.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kinformer::{
    Cause, Event, EventBatch, Informer, OverflowPolicy, SubscribeOptions, Subscription, WarmStart,
    Workers,
};
use kinformer_actors::Object;
use kube::Api;
use serde_json::{Value, json};

use super::Under;
use crate::objects::seed_index;
use crate::probe::Probe;
use crate::proto::{CONFIRM_WAIT, ChildSpec, Delivery, Policy, Stall, Strip, SubSpec};

/// A subscriber actor that records into its [`Probe`] and may stall once.
struct Recorder {
    probe: Arc<Probe>,
    stall: Option<Stall>,
    stalled: bool,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl<K: Object> Handler<Event<K>> for Recorder {
    type Result = ();

    fn handle(&mut self, event: Event<K>, ctx: &mut Context<Self>) {
        self.record(&event);
        self.maybe_stall(ctx);
    }
}

impl<K: Object> Handler<EventBatch<K>> for Recorder {
    type Result = ();

    fn handle(&mut self, batch: EventBatch<K>, ctx: &mut Context<Self>) {
        for event in batch.iter() {
            self.record(event);
        }
        self.maybe_stall(ctx);
    }
}

impl<K: Object> StreamHandler<Event<K>> for Recorder {
    fn handle(&mut self, event: Event<K>, ctx: &mut Context<Self>) {
        self.record(&event);
        self.maybe_stall(ctx);
    }
}

impl<K: Object> StreamHandler<EventBatch<K>> for Recorder {
    fn handle(&mut self, batch: EventBatch<K>, ctx: &mut Context<Self>) {
        for event in batch.iter() {
            self.record(event);
        }
        self.maybe_stall(ctx);
    }
}

impl Recorder {
    fn record<K: Object>(&self, event: &Event<K>) {
        record(&self.probe, event);
    }

    fn maybe_stall(&mut self, ctx: &mut Context<Self>) {
        let p = &self.probe;
        if let (Some(stall), false, Some(began)) = (self.stall, self.stalled, p.began())
            && began.elapsed() >= Duration::from_millis(stall.after_ms)
        {
            self.stalled = true;
            tracing::info!(?stall, "subscriber stalls");
            ctx.wait(tokio::time::sleep(Duration::from_millis(stall.for_ms)).into_actor(self));
        }
    }
}

/// Records `event` into `p`: what every kinformer subscriber does.
fn record<K: Object>(p: &Probe, event: &Event<K>) {
    match event {
        Event::Added {
            cause: Cause::Initial | Cause::Restored,
            ..
        } => {
            p.initial.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Event::Added {
            object,
            cause: Cause::Watch,
            ..
        }
        | Event::Updated {
            new: object,
            cause: Cause::Watch,
            ..
        } => p.watch_update(object.meta().annotations.as_ref()),
        Event::Updated {
            key,
            cause: Cause::Resync,
            ..
        }
        | Event::Added {
            key,
            cause: Cause::Resync,
            ..
        } => p.resync(seed_index(key.name())),
        Event::Added { .. } | Event::Updated { .. } => p.count(&p.relisted),
        Event::Deleted { object, .. } => {
            p.count(&p.deleted);
            if object.is_final_state_unknown() {
                p.count(&p.tombstones);
            }
        }
    }
}

/// A running kinformer informer with its subscribers.
pub struct KinUnder<K: Object> {
    informer: Informer<K>,
    subs: Vec<Subscription<K>>,
    probes: Vec<Arc<Probe>>,
    /// Stream-reading subscriber actors and their worker threads, kept alive.
    _actors: (Vec<Addr<Recorder>>, Option<Workers>),
}

/// The `indexed` variants' index: 1000 seeded objects per value.
const BUCKET: &str = "bucket";

/// Builds and starts the informer and subscribes the recorders.
pub async fn start<K>(api: Api<K>, spec: &ChildSpec) -> anyhow::Result<KinUnder<K>>
where
    K: Object + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut builder = Informer::builder(api)
        .page_size(spec.page_size)
        .streaming_lists(spec.variant.streaming)
        .reflector_thread(spec.variant.reflector_thread);
    if let Some(n) = spec.variant.list_decoders {
        builder = builder.list_decoders(n);
    }
    if spec.variant.strip == Strip::AfterDecode {
        builder = builder.transform(|mut o: K| {
            o.meta_mut().managed_fields = None;
            o
        });
    }
    if spec.variant.strip == Strip::AtDecode {
        builder = builder.skip_managed_fields(true);
    }
    if let Some(dir) = &spec.persist {
        builder = builder.persist(dir, "bench");
    }
    if spec.variant.compact {
        let mut options = kinformer::CompactOptions::default();
        if let Some(n) = spec.variant.compact_recent {
            options = options.recent(n);
        }
        builder = builder.compact_cache(options);
    }
    if spec.variant.indexed {
        builder = builder.index(BUCKET, |o: &K| {
            let name = o.meta().name.as_deref().unwrap_or_default();
            Ok(crate::objects::seed_index(name)
                .map(|i| (i / 1000).to_string())
                .into_iter()
                .collect())
        });
    }
    let informer = if spec.variant.on_tokio_workers() {
        builder.start_on_own_thread()?
    } else {
        builder.start()?
    };
    let mut subs = Vec::new();
    let mut probes = Vec::new();
    let workers = match spec.variant.stream_actors {
        Some(threads) if threads > 0 => Some(Workers::new(threads)?),
        _ => None,
    };
    let mut actors = Vec::new();
    for s in &spec.subscribers {
        let probe = Arc::new(Probe::new(resync_tracking(spec, s)).count_to(spec.count_to));
        if spec.persist.is_some() {
            // A restart counts what it notifies beyond the initial adds from the start.
            probe.begin();
        }
        let options = SubscribeOptions::default()
            .resync(Duration::from_secs(s.resync_secs))
            .policy(match s.policy {
                Policy::Block => OverflowPolicy::Block,
                Policy::Coalesce => OverflowPolicy::Coalesce,
            })
            .capacity(spec.capacity);
        if spec.variant.on_tokio_workers() {
            subs.push(
                read_on_tokio(
                    &informer,
                    spec.variant.delivery,
                    options,
                    s.stall,
                    probe.clone(),
                )
                .await?,
            );
            probes.push(probe);
            continue;
        }
        if spec.variant.stream_actors.is_some() {
            let recorder = Recorder {
                probe: probe.clone(),
                stall: s.stall,
                stalled: false,
            };
            let workers = workers.as_ref();
            let (sub, actor) = match spec.variant.delivery {
                Delivery::Batched => {
                    let stream = informer.stream_batches(options).await?;
                    let sub = stream.subscription().clone();
                    (sub, start_reading(workers, recorder, stream))
                }
                Delivery::Inline => anyhow::bail!("inline handlers read no stream"),
                Delivery::Each | Delivery::Pipelined | Delivery::Closure => {
                    let stream = informer.stream(options).await?;
                    let sub = stream.subscription().clone();
                    (sub, start_reading(workers, recorder, stream))
                }
            };
            subs.push(sub);
            actors.push(actor);
            probes.push(probe);
            continue;
        }
        if spec.variant.delivery == Delivery::Inline {
            // A stall would stall the informer's thread: not this variant's workload.
            anyhow::ensure!(s.stall.is_none(), "an inline handler cannot stall");
            let probe_in = probe.clone();
            subs.push(
                informer
                    .subscribe_inline(options, move |event| record(&probe_in, event))
                    .await?,
            );
            probes.push(probe);
            continue;
        }
        let actor = Recorder {
            probe: probe.clone(),
            stall: s.stall,
            stalled: false,
        }
        .start();
        subs.push(match spec.variant.delivery {
            Delivery::Batched => {
                informer
                    .subscribe_batches(actor.recipient(), options)
                    .await?
            }
            Delivery::Pipelined => informer.subscribe_pipelined(&actor, options).await?,
            Delivery::Inline => anyhow::bail!("inline handlers are subscribed above"),
            Delivery::Each | Delivery::Closure => {
                informer.subscribe(actor.recipient(), options).await?
            }
        });
        probes.push(probe);
    }
    Ok(KinUnder {
        informer,
        subs,
        probes,
        _actors: (actors, workers),
    })
}

/// Starts `recorder` reading `stream` in its own context, on the next of
/// `workers` or on the current thread.
fn start_reading<T, S>(workers: Option<&Workers>, recorder: Recorder, stream: S) -> Addr<Recorder>
where
    Recorder: StreamHandler<T>,
    S: futures::Stream<Item = T> + Send + 'static,
    T: 'static,
{
    match workers {
        Some(workers) => workers.start_reading(stream, move |_| recorder),
        None => Recorder::create(move |ctx| {
            ctx.add_stream(stream);
            recorder
        }),
    }
}

/// Subscribes a stream (a batch stream when batched) read by a task of the
/// current (multi-thread) tokio runtime, recording into `probe`; a stall
/// sleeps in that task.
async fn read_on_tokio<K: Object>(
    informer: &Informer<K>,
    delivery: Delivery,
    options: SubscribeOptions,
    stall: Option<Stall>,
    probe: Arc<Probe>,
) -> anyhow::Result<Subscription<K>> {
    use futures::StreamExt;
    let stalls = async move |probe: &Probe, stalled: &mut bool| {
        if let (Some(stall), false, Some(began)) = (stall, *stalled, probe.began())
            && began.elapsed() >= Duration::from_millis(stall.after_ms)
        {
            *stalled = true;
            tracing::info!(?stall, "subscriber stalls");
            tokio::time::sleep(Duration::from_millis(stall.for_ms)).await;
        }
    };
    Ok(match delivery {
        Delivery::Batched => {
            let mut stream = informer.stream_batches(options).await?;
            let sub = stream.subscription().clone();
            tokio::spawn(async move {
                let mut stalled = false;
                while let Some(batch) = stream.next().await {
                    for event in batch.iter() {
                        record(&probe, event);
                    }
                    stalls(&probe, &mut stalled).await;
                }
            });
            sub
        }
        Delivery::Closure => {
            let mut stalled = false;
            informer
                .subscribe_fn(options, move |event| {
                    record(&probe, &event);
                    let wait = match (stall, stalled, probe.began()) {
                        (Some(stall), false, Some(began))
                            if began.elapsed() >= Duration::from_millis(stall.after_ms) =>
                        {
                            stalled = true;
                            tracing::info!(?stall, "subscriber stalls");
                            Some(Duration::from_millis(stall.for_ms))
                        }
                        _ => None,
                    };
                    async move {
                        if let Some(wait) = wait {
                            tokio::time::sleep(wait).await;
                        }
                    }
                })
                .await?
        }
        Delivery::Inline => anyhow::bail!("inline handlers do not run on tokio workers"),
        Delivery::Each | Delivery::Pipelined => {
            let mut stream = informer.stream(options).await?;
            let sub = stream.subscription().clone();
            tokio::spawn(async move {
                let mut stalled = false;
                while let Some(event) = stream.next().await {
                    record(&probe, &event);
                    stalls(&probe, &mut stalled).await;
                }
            });
            sub
        }
    })
}

impl<K: Object> KinUnder<K> {
    /// The snapshot is committed at what the informer holds.
    fn snapshot_caught_up(&self) -> bool {
        let rv = self.informer.last_sync_resource_version();
        self.informer
            .persistence()
            .is_some_and(|p| !rv.is_empty() && p.resource_version == rv)
    }
}

/// Per-object resync tracking for subscribers with a period.
pub fn resync_tracking(spec: &ChildSpec, sub: &SubSpec) -> Option<(usize, u64)> {
    (sub.resync_secs > 0).then_some((spec.objects, sub.resync_secs * 1000))
}

impl<K: Object> Under for KinUnder<K> {
    async fn informer_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        Ok(self.informer.wait_for_sync(timeout).await?)
    }

    async fn subscribers_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        for s in &self.subs {
            s.wait_for_sync(timeout).await?;
        }
        Ok(())
    }

    fn objects(&self) -> usize {
        self.informer.stats().objects
    }

    fn watch_events(&self) -> u64 {
        self.informer.stats().events
    }

    fn lists(&self) -> u64 {
        self.informer.stats().relists + 1
    }

    fn list_progress(&self) -> u64 {
        self.informer.stats().list_progress.0
    }

    fn pending(&self) -> Vec<usize> {
        self.subs
            .iter()
            .map(|s| {
                // Not yet handled: queued, plus sent and not yet returned.
                let stats = s.stats();
                stats.pending + stats.in_flight
            })
            .collect()
    }

    fn queued(&self) -> usize {
        self.informer.stats().queued_deltas
    }

    fn probes(&self) -> &[Arc<Probe>] {
        &self.probes
    }

    /// `get` of 1000 keys spread over the cache, each timed, and
    /// `by_index` of up to 5 buckets of 1000 objects, each timed.
    fn read_probe(&self) -> Value {
        let snapshot = self.informer.store().snapshot();
        if snapshot.index_names().is_empty() {
            return Value::Null;
        }
        let keys = snapshot.keys();
        let step = (keys.len() / 1000).max(1);
        let mut gets: Vec<f64> = keys
            .iter()
            .step_by(step)
            .take(1000)
            .map(|k| {
                let t = std::time::Instant::now();
                let o = snapshot.get(k);
                let us = t.elapsed().as_secs_f64() * 1e6;
                assert!(o.is_some(), "cached");
                us
            })
            .collect();
        gets.sort_by(f64::total_cmp);
        let mut by_index: Vec<(f64, usize)> = snapshot
            .list_index_values(BUCKET)
            .iter()
            .take(5)
            .map(|v| {
                let t = std::time::Instant::now();
                let n = snapshot.by_index(BUCKET, v).map_or(0, |objs| objs.len());
                (t.elapsed().as_secs_f64() * 1e3, n)
            })
            .collect();
        by_index.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pct = |v: &[f64], p: f64| {
            v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
                .copied()
        };
        json!({
            "get_us_p50": pct(&gets, 0.5),
            "get_us_p99": pct(&gets, 0.99),
            "by_index_ms_p50": by_index.get(by_index.len() / 2).map(|b| b.0),
            "by_index_objects": by_index.first().map(|b| b.1),
            "compact": self.compact_stats(),
        })
    }

    fn compact_stats(&self) -> Value {
        match self.informer.stats().compact {
            Some(c) => json!({
                "bytes": c.bytes,
                "decoded": c.decoded,
                "fresh": c.fresh,
                "decode_errors": c.decode_errors,
                "dictionary": c.dictionary,
            }),
            None => Value::Null,
        }
    }

    async fn persist_counters(&self, timeout: Duration) -> Value {
        if self.informer.persistence().is_none() {
            return Value::Null;
        }
        let deadline = std::time::Instant::now() + timeout;
        while !self.snapshot_caught_up() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let p = self.informer.persistence().unwrap_or_default();
        json!({
            "caught_up": self.snapshot_caught_up(),
            "commits": p.commits,
            "objects_written": p.objects_written,
            "bytes_written": p.bytes_written,
            "json_bytes_written": p.json_bytes_written,
            "write_micros": p.write_micros,
            "file_bytes": p.file_bytes,
            "writer_cpu_ms": crate::mem::thread_cpu_ms("kinformer-snaps"),
            "disk_write_bytes": crate::mem::disk_write_bytes(),
        })
    }

    async fn warm_report(
        &self,
        timeout: Duration,
        t0: std::time::Instant,
    ) -> anyhow::Result<Value> {
        if self.informer.persistence().is_none() {
            return Ok(Value::Null);
        }
        // Confirmed by the server (a restored cache resumed or relisted) and
        // what that brought handled by every subscriber. A resume is
        // confirmed by the watch's first event or bookmark, which a quiet
        // server may send only minutes later: waited for a few seconds only.
        let confirmed = || {
            let s = self.informer.stats();
            s.warm_start != WarmStart::Restored
                && s.queued_deltas == 0
                && self.pending().iter().all(|p| *p == 0)
        };
        let waited = std::time::Instant::now();
        let confirmed_ms = loop {
            if confirmed() {
                break Some(t0.elapsed().as_secs_f64() * 1000.0);
            }
            // A relist after a 410 is under way: waited for to its end (a
            // (b) start left unconfirmed would leave the next start a
            // snapshot from before the compaction).
            let relisting = self.informer.stats().lists > 0;
            let limit = if relisting { timeout } else { CONFIRM_WAIT };
            if waited.elapsed() >= limit {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // Once confirmed, the snapshot commits what the informer holds (a
        // restored one not yet confirmed is already at its resourceVersion).
        let deadline = std::time::Instant::now() + timeout;
        while confirmed_ms.is_some() && !self.snapshot_caught_up() {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the snapshot did not catch up within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let s = self.informer.stats();
        let p = self.informer.persistence().unwrap_or_default();
        let probe = self.probes.first().map(|p| p.report());
        Ok(json!({
            "warm_start": format!("{:?}", s.warm_start),
            "confirmed_ms": confirmed_ms,
            "lists": s.lists,
            "restored_objects": s.restored_objects,
            "restore_ms": s.restore_ms,
            "notified_relisted": probe.as_ref().map_or(0, |r| r.relisted),
            "notified_watch": probe.as_ref().map_or(0, |r| r.other + r.stamped),
            "notified_deleted": probe.as_ref().map_or(0, |r| r.deleted),
            "notified_tombstones": probe.as_ref().map_or(0, |r| r.tombstones),
            "file_bytes": p.file_bytes,
            "commits": p.commits,
            "objects_written": p.objects_written,
            "bytes_written": p.bytes_written,
            "json_bytes_written": p.json_bytes_written,
            "write_micros": p.write_micros,
            "discarded": p.discarded,
        }))
    }
}
