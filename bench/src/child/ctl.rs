//! The controller under test: kinformer's `Controller` or kube-runtime 5's,
//! reconciling the namespace's ConfigMaps with the same reconcile (record
//! what it read, then await a timer of `reconcile_us`), the same number of
//! reconciles at once.
//!
//! Flow: start the controller; a churn run (`record_from_start` false) waits
//! until every object was reconciled once, says `ready`, and records from
//! `begin`; a start-up run records from the start and says `reconciling`
//! once a tenth of the objects were reconciled. Both then wait for
//! `await_reconciled` and report.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use hdrhistogram::Histogram;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{PATIENCE, emit, ms, next_command};
use crate::mem::cpu_time;
use crate::objects::{now_nanos, written_at};
use crate::proto::{ChildSpec, Command, Lib};
use crate::stats::{Latency, latency_histogram};

/// What one object's reconciles have read so far.
#[derive(Debug, Default)]
struct KeyState {
    /// Reconciles since recording began.
    reconciles: u64,
    /// The newest write timestamp a reconcile read (0: none).
    stamp: u64,
    /// The highest `data.counter` a reconcile read.
    counter: u64,
}

/// Everything the reconciles recorded; one lock, taken once per reconcile.
struct State {
    recording: bool,
    /// Wall-clock ns at which recording began; writes before it have no latency.
    begin_ns: u64,
    keys: HashMap<String, KeyState>,
    /// Distinct objects at which `all_keys_ns` is taken.
    expect_keys: usize,
    /// Reconcile starts since recording began.
    reconciles: u64,
    /// Of those, reconciles of an object already reconciled that read no newer write.
    stale: u64,
    first_ns: u64,
    last_ns: u64,
    /// When the `expect_keys`-th distinct object was first reconciled.
    all_keys_ns: u64,
    /// Write-to-reconcile-start of every write read for the first time.
    latency: Histogram<u64>,
    /// `(written_ns, reconcile_start_ns)` of the same reads (start-up runs).
    changes: Vec<(u64, u64)>,
}

/// The reconciles' shared record.
pub struct Reconciles {
    state: Mutex<State>,
}

impl Reconciles {
    fn new(expect_keys: usize) -> Self {
        Reconciles {
            state: Mutex::new(State {
                recording: false,
                begin_ns: 0,
                keys: HashMap::new(),
                expect_keys,
                reconciles: 0,
                stale: 0,
                first_ns: 0,
                last_ns: 0,
                all_keys_ns: 0,
                latency: latency_histogram(),
                changes: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the counters half-updated in a way that matters here.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts recording: counters from zero, latencies of writes from now on.
    fn begin(&self) {
        let mut s = self.lock();
        s.recording = true;
        s.begin_ns = now_nanos();
        s.reconciles = 0;
        s.stale = 0;
        for k in s.keys.values_mut() {
            k.reconciles = 0;
        }
    }

    /// What a reconcile does first: note the time and what it read.
    fn reconcile(&self, cm: &ConfigMap) {
        let now = now_nanos();
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        let stamp = written_at(cm.metadata.annotations.as_ref()).unwrap_or(0);
        let counter = cm
            .data
            .as_ref()
            .and_then(|d| d.get("counter"))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut guard = self.lock();
        let s = &mut *guard;
        let first_read = !s.keys.contains_key(name);
        let key = s.keys.entry(name.to_owned()).or_default();
        let fresh = stamp > key.stamp;
        key.stamp = key.stamp.max(stamp);
        key.counter = key.counter.max(counter);
        if s.recording {
            key.reconciles += 1;
            s.reconciles += 1;
            if s.first_ns == 0 {
                s.first_ns = now;
            }
            s.last_ns = now;
            if fresh && stamp >= s.begin_ns {
                let _ = s.latency.record((now.saturating_sub(stamp) / 1_000).max(1));
                s.changes.push((stamp, now));
            } else if !fresh && !first_read {
                s.stale += 1;
            }
        }
        if first_read && s.keys.len() == s.expect_keys {
            s.all_keys_ns = now;
        }
    }

    fn distinct(&self) -> usize {
        self.lock().keys.len()
    }

    fn reconciles(&self) -> u64 {
        self.lock().reconciles
    }

    /// True once `keys` distinct objects were reconciled and each named one
    /// at its counter or later.
    fn reached(&self, counters: &BTreeMap<String, u64>, keys: usize) -> bool {
        let s = self.lock();
        s.keys.len() >= keys
            && counters
                .iter()
                .all(|(name, c)| s.keys.get(name).is_some_and(|k| k.counter >= *c))
    }

    fn report(&self) -> Value {
        let s = self.lock();
        let mut per_key: Vec<u64> = s.keys.values().map(|k| k.reconciles).collect();
        per_key.sort_unstable();
        let keys = per_key.len().max(1);
        json!({
            "reconciles": s.reconciles,
            "stale": s.stale,
            "keys": s.keys.len(),
            "reconciles_per_key": s.reconciles as f64 / keys as f64,
            "reconciles_per_key_max": per_key.last().copied().unwrap_or(0),
            "latency": Latency::of(&s.latency),
            "begin_ns": s.begin_ns,
            "first_ns": s.first_ns,
            "last_ns": s.last_ns,
            "all_keys_ns": s.all_keys_ns,
            // A churn run reads tens of thousands of writes: only the histogram.
            "changes": if s.changes.len() <= 10_000 { json!(s.changes) } else { Value::Null },
        })
    }
}

/// Runs a controller job to its report.
pub async fn run(spec: &ChildSpec, mut commands: mpsc::Receiver<Command>) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(super::client(&spec.url)?, &spec.namespace);
    let probe = Arc::new(Reconciles::new(spec.objects));
    let from_start = spec.controller.record_from_start;
    if from_start {
        probe.begin();
    }
    let t0 = Instant::now();
    let start_ns = now_nanos();
    let cpu0 = cpu_time();
    // Kept alive until the report: dropping kinformer's handle stops it.
    let _running = match spec.variant.lib {
        Lib::Kinformer => Some(start_kinformer(api, spec, probe.clone()).await?),
        Lib::KubeRuntime => {
            start_kube_runtime(api, spec, probe.clone());
            None
        }
    };
    let watch = Watch::new(&probe, t0 + PATIENCE);
    let mut cpu_first = None;
    let cpu_begin = if from_start {
        let tenth = (spec.objects / 10).max(1);
        watch
            .until(|| probe.distinct() >= tenth, &mut cpu_first)
            .await?;
        emit("reconciling", json!({ "keys": probe.distinct() }));
        cpu0
    } else {
        watch
            .until(|| probe.distinct() >= spec.objects, &mut cpu_first)
            .await?;
        // Let the initial reconciles' timers end before measuring.
        tokio::time::sleep(Duration::from_millis(200)).await;
        emit("ready", json!({ "startup_ms": ms(t0.elapsed()) }));
        let Command::Begin = next_command(&mut commands).await? else {
            anyhow::bail!("expected begin");
        };
        probe.begin();
        emit("begun", json!({}));
        cpu_time()
    };
    let Command::AwaitReconciled {
        counters,
        keys,
        timeout_ms,
    } = next_command(&mut commands).await?
    else {
        anyhow::bail!("expected await_reconciled");
    };
    let watch = Watch::new(&probe, Instant::now() + Duration::from_millis(timeout_ms));
    let complete = watch
        .until(|| probe.reached(&counters, keys), &mut cpu_first)
        .await
        .is_ok();
    let cpu_all = cpu_time();
    let mut report = probe.report();
    let cpu = cpu_all.saturating_sub(cpu_begin);
    report["complete"] = json!(complete);
    report["cpu_ms"] = json!(ms(cpu));
    report["cpu_us_per_reconcile"] = json!(
        cpu_all
            .saturating_sub(cpu_first.unwrap_or(cpu_begin))
            .as_secs_f64()
            * 1e6
            / probe.reconciles().max(1) as f64
    );
    report["start_ns"] = json!(start_ns);
    emit("report", report);
    Ok(())
}

/// Polls a condition every millisecond until a deadline, noting the CPU time
/// at the first poll that sees a reconcile (start of the reconcile phase).
struct Watch<'a> {
    probe: &'a Reconciles,
    deadline: Instant,
}

impl<'a> Watch<'a> {
    fn new(probe: &'a Reconciles, deadline: Instant) -> Self {
        Watch { probe, deadline }
    }

    async fn until(
        &self,
        mut done: impl FnMut() -> bool,
        cpu_first: &mut Option<Duration>,
    ) -> anyhow::Result<()> {
        loop {
            if cpu_first.is_none() && self.probe.reconciles() > 0 {
                *cpu_first = Some(cpu_time());
            }
            if done() {
                return Ok(());
            }
            if Instant::now() >= self.deadline {
                anyhow::bail!(
                    "controller: not reconciled in time ({} objects so far)",
                    self.probe.distinct()
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The reconcile's await: a timer, or nothing.
async fn work(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// kinformer: an `Informer` (page size as the spec says) and a `Controller`
/// with `workers` workers, on the child's actix system.
async fn start_kinformer(
    api: Api<ConfigMap>,
    spec: &ChildSpec,
    probe: Arc<Reconciles>,
) -> anyhow::Result<kinformer::controller::ControllerHandle<ConfigMap>> {
    use kinformer::controller::{Action, Controller, Request};
    let informer = kinformer::Informer::builder(api)
        .page_size(spec.page_size)
        .start()?;
    let delay = Duration::from_micros(spec.controller.reconcile_us);
    Controller::new(informer)
        .name("bench")
        .workers(spec.controller.workers)
        .start(move |req: Request<ConfigMap>| {
            let probe = probe.clone();
            async move {
                if let Some(cm) = &req.object {
                    probe.reconcile(cm);
                }
                work(delay).await;
                Ok::<_, Infallible>(Action::Done)
            }
        })
        .await
        .context("starting kinformer's controller")
}

/// kube-runtime: `Controller::new` (page size as the spec says) with
/// `concurrency(workers)`, its stream driven by a task.
fn start_kube_runtime(api: Api<ConfigMap>, spec: &ChildSpec, probe: Arc<Reconciles>) {
    use kube_runtime::controller::{Action, Config, Controller};
    let delay = Duration::from_micros(spec.controller.reconcile_us);
    let workers = u16::try_from(spec.controller.workers).unwrap_or(u16::MAX);
    let controller = Controller::new(
        api,
        kube_runtime::watcher::Config::default().page_size(spec.page_size),
    )
    .with_config(Config::default().concurrency(workers));
    let results = controller.run(
        move |cm: Arc<ConfigMap>, probe: Arc<Reconciles>| async move {
            probe.reconcile(&cm);
            work(delay).await;
            Ok::<_, Infallible>(Action::await_change())
        },
        |_, _: &Infallible, _| Action::await_change(),
        probe,
    );
    tokio::spawn(results.for_each(|r| async move {
        if let Err(e) = r {
            tracing::info!(%e, "kube-runtime controller error");
        }
    }));
}
