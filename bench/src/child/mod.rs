//! The child process: runs one informer (kinformer or kube-runtime) through
//! one job, reports its figures on stdout and takes commands on stdin. Being
//! alone in its process, its heap, RSS and CPU time are its own.

mod control;
mod ctl;
mod decode;
mod kin;
mod krt;

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer_actors::Object;
use kube::Api;
use kube::core::PartialObjectMeta;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::mem::{PeakSampler, cpu_time, heap_now, reset_rss_peak, rss};
use crate::objects::now_nanos;
use crate::probe::{Probe, ProbeReport};
use crate::proto::{ChildSpec, Command, Job, Kind, Lib, MSG_PREFIX, Message};
use crate::stats::{Latency, latency_histogram};

pub use krt::KrtObject;

/// How long a child waits for a sync or a drain before it gives up.
const PATIENCE: Duration = Duration::from_secs(600);

/// What every informer under test offers the jobs.
pub(crate) trait Under {
    /// Waits until the informer's cache holds the initial list.
    async fn informer_synced(&self, timeout: Duration) -> anyhow::Result<()>;
    /// Waits until every subscriber has handled its initial objects.
    async fn subscribers_synced(&self, timeout: Duration) -> anyhow::Result<()>;
    /// Objects cached.
    fn objects(&self) -> usize;
    /// Events received from the watch (or yielded by the reflector stream).
    fn watch_events(&self) -> u64;
    /// Completed lists (1 after the initial sync).
    fn lists(&self) -> u64;
    /// Objects received by the list in progress (or yielded at list time).
    fn list_progress(&self) -> u64;
    /// Notifications not yet handled per subscriber: queued or in flight (kinformer only).
    fn pending(&self) -> Vec<usize>;
    /// Deltas queued inside the informer (kinformer only).
    fn queued(&self) -> usize;
    /// The subscribers' probes.
    fn probes(&self) -> &[Arc<Probe>];
    /// With a snapshot (kinformer's `persist`): waits until the server
    /// confirmed the cache and the snapshot caught up, and reports the warm
    /// start (times from `t0`); `Null` without one.
    async fn warm_report(&self, _timeout: Duration, _t0: Instant) -> anyhow::Result<Value> {
        Ok(Value::Null)
    }
    /// With a snapshot: waits until it caught up (at most `timeout`), then
    /// the writer's counters so far; `Null` without one.
    async fn persist_counters(&self, _timeout: Duration) -> Value {
        Value::Null
    }
    /// With an index (kinformer's `indexed` variants): timed reads of the
    /// cache; `Null` without one.
    fn read_probe(&self) -> Value {
        Value::Null
    }
    /// A compact cache's stats (kinformer's compact variants); `Null` otherwise.
    fn compact_stats(&self) -> Value {
        Value::Null
    }
}

/// When this process started running the child (a restart is timed from it).
static PROCESS_START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Prints one message for the parent.
pub fn emit(event: &str, data: Value) {
    let msg = Message {
        event: event.into(),
        data,
    };
    let line = serde_json::to_string(&msg).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MSG_PREFIX}{line}");
    let _ = out.flush();
}

/// Runs the child described by `spec`; errors are reported to the parent too.
pub fn run(spec: ChildSpec) -> anyhow::Result<()> {
    PROCESS_START.get_or_init(Instant::now);
    // Streams on tokio workers: the runtime kube-runtime's subscribers get.
    let multi_thread = spec.variant.on_tokio_workers();
    // Once done, exit at once: tearing down gigabytes of cache is not
    // measured, and would only lengthen the run and blur profiles.
    let job = async {
        let result = by_kind(spec).await;
        if result.is_ok() {
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
        result
    };
    let result = match multi_thread {
        false => actix::System::new().block_on(job),
        true => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
            .block_on(job),
    };
    if let Err(e) = &result {
        emit("error", json!({ "message": format!("{e:#}") }));
    }
    result
}

async fn by_kind(spec: ChildSpec) -> anyhow::Result<()> {
    if spec.job == Job::Controller {
        anyhow::ensure!(
            spec.kind == Kind::ConfigMap,
            "controller jobs reconcile ConfigMaps"
        );
        return ctl::run(&spec, stdin_commands()).await;
    }
    match spec.kind {
        Kind::ConfigMap => typed::<ConfigMap>(spec).await,
        Kind::Pod => typed::<Pod>(spec).await,
    }
}

/// The kube client of the embedded server (kube's defaults otherwise).
pub fn client(url: &str) -> anyhow::Result<kube::Client> {
    let config = kube::Config::new(url.parse().context("server url")?);
    Ok(kube::Client::try_from(config)?)
}

async fn typed<K>(spec: ChildSpec) -> anyhow::Result<()>
where
    K: Object
        + KrtObject
        + serde::Serialize
        + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let client = client(&spec.url)?;
    let api: Api<K> = Api::namespaced(client.clone(), &spec.namespace);
    let metadata_api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), &spec.namespace);
    let commands = stdin_commands();
    let sampler = PeakSampler::start();
    if spec.job == Job::Decode {
        let data = decode::run::<K>(&client, &spec).await?;
        emit("report", data);
        return Ok(());
    }
    // The baseline: runtime, client and sampler exist, the informer does not.
    let control = if spec.control_watch {
        Some(control::start::<K>(&spec.url, &spec.namespace)?)
    } else {
        None
    };
    let heap0 = heap_now();
    sampler.reset();
    reset_rss_peak();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let baseline = Baseline { heap0, cpu0, t0 };
    let control = control.as_deref();
    match (spec.variant.lib, spec.variant.metadata) {
        (Lib::Kinformer, false) => {
            let under = kin::start(api, &spec).await?;
            job(&spec, &under, commands, baseline, &sampler, control).await
        }
        (Lib::Kinformer, true) => {
            let under = kin::start(metadata_api, &spec).await?;
            job(&spec, &under, commands, baseline, &sampler, control).await
        }
        (Lib::KubeRuntime, false) => {
            let under = krt::start(api, &spec);
            job(&spec, &under, commands, baseline, &sampler, control).await
        }
        (Lib::KubeRuntime, true) => {
            // kube-runtime 5's `metadata_watcher(api)` is deprecated for this,
            // the same requests: `watcher()` over an `Api<PartialObjectMeta<K>>`.
            let under = krt::start(metadata_api, &spec);
            job(&spec, &under, commands, baseline, &sampler, control).await
        }
    }
}

struct Baseline {
    heap0: usize,
    cpu0: Duration,
    t0: Instant,
}

fn stdin_commands() -> mpsc::Receiver<Command> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Command>(&line) {
                Ok(cmd) => {
                    if tx.blocking_send(cmd).is_err() {
                        break;
                    }
                }
                Err(e) => tracing::warn!(%e, %line, "bad command"),
            }
        }
    });
    rx
}

async fn next_command(rx: &mut mpsc::Receiver<Command>) -> anyhow::Result<Command> {
    rx.recv().await.context("the parent closed stdin")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn job<U: Under>(
    spec: &ChildSpec,
    under: &U,
    mut commands: mpsc::Receiver<Command>,
    base: Baseline,
    sampler: &PeakSampler,
    control: Option<&Probe>,
) -> anyhow::Result<()> {
    under.informer_synced(PATIENCE).await?;
    let sync = base.t0.elapsed();
    let sync_peak = sampler.peak().saturating_sub(base.heap0);
    under.subscribers_synced(PATIENCE).await?;
    let subs_sync = base.t0.elapsed();
    let process_start = *PROCESS_START.get_or_init(Instant::now);
    let start_to_synced = process_start.elapsed();
    let sync_cpu = cpu_time().saturating_sub(base.cpu0);
    // Before the steady reading: it times the server's confirmation.
    let warm = under.warm_report(PATIENCE, process_start).await?;
    // Let decode buffers and queues drain before the steady reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let steady = heap_now().saturating_sub(base.heap0);
    let objects = under.objects();
    let reads = under.read_probe();
    let synced = json!({
        "reads": reads,
        "start_to_synced_ms": ms(start_to_synced),
        "warm": warm,
        "objects": objects,
        "sync_ms": ms(sync),
        "subscribers_synced_ms": ms(subs_sync),
        "sync_cpu_ms": ms(sync_cpu),
        "peak_heap": sync_peak,
        "steady_heap": steady,
        "steady_bytes_per_object": steady as f64 / objects.max(1) as f64,
        "rss": rss(),
    });
    match spec.job {
        Job::Sync | Job::Decode | Job::Controller => {
            emit("report", synced);
            Ok(())
        }
        Job::Deliver => {
            emit("ready", synced);
            deliver(spec, under, &mut commands, sampler, control).await
        }
        Job::Relist => {
            emit("ready", synced);
            relist(under, &mut commands, sampler, steady, base.heap0).await
        }
    }
}

/// Write-to-delivery latencies and CPU between `begin` and `end`.
async fn deliver<U: Under>(
    spec: &ChildSpec,
    under: &U,
    commands: &mut mpsc::Receiver<Command>,
    sampler: &PeakSampler,
    control: Option<&Probe>,
) -> anyhow::Result<()> {
    let Command::Begin = next_command(commands).await? else {
        anyhow::bail!("expected begin");
    };
    for p in under.probes().iter().map(|p| &**p).chain(control) {
        p.begin();
    }
    sampler.reset();
    let heap_begin = heap_now();
    let cpu0 = cpu_time();
    let events0 = under.watch_events();
    let t_begin = Instant::now();
    let begin_ns = now_nanos();
    let persist_begin = under.persist_counters(Duration::from_secs(30)).await;
    emit("begun", json!({}));
    // A time series of heap, watch flow and queues (for the slow-subscriber workload).
    let mut samples = Vec::new();
    let end = loop {
        tokio::select! {
            cmd = next_command(commands) => break cmd?,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                samples.push(json!({
                    "t_ms": ms(t_begin.elapsed()),
                    "heap": heap_now(),
                    "watch_events": under.watch_events() - events0,
                    "pending": under.pending(),
                }));
            }
        }
    };
    let Command::End {
        stamped,
        timeout_ms,
    } = end
    else {
        anyhow::bail!("expected end");
    };
    let writes_done = Instant::now();
    let deadline = writes_done + Duration::from_millis(timeout_ms);
    // A coalescing subscriber may see fewer updates than were written (merged).
    let may_merge: Vec<bool> = spec
        .subscribers
        .iter()
        .map(|s| s.stall.is_some() || s.policy == crate::proto::Policy::Coalesce)
        .collect();
    let not_other: Vec<bool> = spec
        .subscribers
        .iter()
        .map(|s| s.stall.is_some() || s.not_other)
        .collect();
    let mut complete = false;
    while Instant::now() < deadline {
        let pending = under.pending();
        let all = under.probes().iter().enumerate().all(|(i, p)| {
            let r = p.report();
            // A coalescing subscriber may see fewer updates: done when its queue is empty.
            r.stamped >= stamped
                || (may_merge.get(i) == Some(&true)
                    && pending.get(i) == Some(&0)
                    && writes_done.elapsed() > Duration::from_secs(1))
        });
        if all {
            complete = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = t_begin.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    let events = under.watch_events() - events0;
    let reports: Vec<ProbeReport> = under.probes().iter().map(|p| p.report()).collect();
    let mut all = latency_histogram();
    let mut others = latency_histogram();
    let mut in_sweeps = latency_histogram();
    for (i, p) in under.probes().iter().enumerate() {
        let h = p.histogram();
        let _ = all.add(&h);
        let _ = in_sweeps.add(p.sweep_histogram());
        if not_other.get(i) != Some(&true) {
            let _ = others.add(&h);
        }
    }
    let first = under
        .probes()
        .iter()
        .map(|p| p.first_ns.load(std::sync::atomic::Ordering::SeqCst))
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    let last = under
        .probes()
        .iter()
        .map(|p| p.last_ns.load(std::sync::atomic::Ordering::SeqCst))
        .max()
        .unwrap_or(0);
    let deliveries: u64 = reports.iter().map(|r| r.stamped).sum();
    let persist_end = under.persist_counters(Duration::from_secs(30)).await;
    emit(
        "report",
        json!({
            "persist_begin": persist_begin,
            "compact": under.compact_stats(),
            "persist_end": persist_end,
            "complete": complete,
            "elapsed_ms": ms(elapsed),
            "cpu_ms": ms(cpu),
            "watch_events": events,
            "deliveries": deliveries,
            "cpu_us_per_event": cpu.as_secs_f64() * 1e6 / stamped.max(1) as f64,
            "cpu_us_per_delivery": cpu.as_secs_f64() * 1e6 / deliveries.max(1) as f64,
            "first_to_last_ms": last.saturating_sub(first) as f64 / 1e6,
            "latency_all": Latency::of(&all),
            "latency_others": Latency::of(&others),
            "latency_in_sweeps": Latency::of(&in_sweeps),
            "heap_begin": heap_begin,
            "heap_peak": sampler.peak(),
            "heap_end": heap_now(),
            "subscribers": reports,
            "samples": samples,
            "begin_ns": begin_ns,
            "outliers": under.probes().first().map(|p| p.outliers()).unwrap_or_default(),
            "now_ns": now_nanos(),
            "control": control.map(|c| json!({
                "latency_all": Latency::of(&c.histogram()),
                "latency_in_sweeps": Latency::of(&c.sweep_histogram()),
            })),
        }),
    );
    Ok(())
}

/// Counts what a relist delivers between `begin` and `end_relist`.
async fn relist<U: Under>(
    under: &U,
    commands: &mut mpsc::Receiver<Command>,
    sampler: &PeakSampler,
    steady: usize,
    heap0: usize,
) -> anyhow::Result<()> {
    let Command::Begin = next_command(commands).await? else {
        anyhow::bail!("expected begin");
    };
    for p in under.probes() {
        p.begin();
    }
    let lists0 = under.lists();
    let progress0 = under.list_progress();
    sampler.reset();
    reset_rss_peak();
    let heap_begin = heap_now();
    let cpu0 = cpu_time();
    emit("begun", json!({}));
    let Command::EndRelist {
        objects,
        modified,
        deleted,
        timeout_ms,
    } = next_command(commands).await?
    else {
        anyhow::bail!("expected end_relist");
    };
    let t_end = Instant::now();
    let deadline = t_end + Duration::from_millis(timeout_ms);
    let mut list_started = None;
    let mut complete = false;
    while Instant::now() < deadline {
        if list_started.is_none() && under.list_progress() != progress0 {
            list_started = Some(t_end.elapsed());
        }
        let relisted = under.lists() > lists0 && under.objects() == objects;
        let delivered = under.probes().iter().all(|p| {
            let r = p.report();
            r.relisted >= modified && r.deleted >= deleted
        });
        let drained = under.pending().iter().all(|&n| n == 0) && under.queued() == 0;
        if relisted && delivered && drained {
            complete = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let resynced = t_end.elapsed();
    let peak = sampler.peak();
    let cpu = cpu_time().saturating_sub(cpu0);
    // Anything more that arrives soon after is counted too (spurious notifications).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reports: Vec<ProbeReport> = under.probes().iter().map(|p| p.report()).collect();
    emit(
        "report",
        json!({
            "complete": complete,
            "resynced_ms": ms(resynced),
            "list_started_ms": list_started.map(ms),
            "cpu_ms": ms(cpu),
            "steady_heap": steady,
            "heap_begin": heap_begin.saturating_sub(heap0),
            "spike": peak.saturating_sub(heap_begin),
            "rss": rss(),
            "lists": under.lists() - lists0,
            "list_progress": under.list_progress(),
            "list_progress0": progress0,
            "objects": under.objects(),
            "subscribers": reports,
        }),
    );
    Ok(())
}
