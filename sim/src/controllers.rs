//! The controller probe: a [`Controller`] over every ConfigMap, whose
//! reconcile records what it saw and, by a rule fixed per key and state,
//! fails, panics, asks for a requeue or takes a few milliseconds. It checks
//! the controller's guarantees under the schedule's faults:
//!
//! * convergence: once the schedule is over, the last successful reconcile
//!   of every key saw the server's state of it (its resourceVersion, or its
//!   absence for a deleted one);
//! * CTL-1: no reconcile before the informer synced;
//! * CTL-2: never two reconciles of one key at once;
//! * CTL-3, CTL-4: a failed or panicking reconcile is retried until it
//!   succeeds, and an [`Action::RequeueAfter`] comes back;
//! * CTL-9: a deleted object's reconcile has its last known state while no
//!   reconcile of the deletion succeeded yet (or, when it started before
//!   the feeder noted the delete, a later reconcile of the key has it);
//! * CTL-5: a stop within its deadline cancels nothing (the namespaced
//!   restart steps of the schedule stop the controller and start a new one);
//! * its metrics count exactly the errors and panics the reconcile made.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::Informer;
use kinformer::controller::{Action, Controller, ControllerHandle, ItemExponential, Request};
use tokio::time::Instant;

use crate::informers::informer_builder;
use crate::run::Probe;
use crate::schedule::{Consumer, Schedule};
use crate::subscriber::EXPECTED_PANIC;
use crate::world::{Selection, World};

/// Reconciles at once.
const WORKERS: usize = 4;
/// A stop may take this long before it cancels reconciles (which take a
/// few milliseconds at most).
const STOP_DEADLINE: Duration = Duration::from_secs(5);
/// How soon a reconcile asking for a requeue wants it.
const REQUEUE_AFTER: Duration = Duration::from_millis(30);

/// What a reconcile does, decided by its key, the state it sees and its
/// retries: the same for every replay of a seed's schedule (no randomness).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Succeed,
    /// Succeeds after sleeping this many milliseconds (so reconciles overlap).
    Slow(u64),
    /// Answers an error on its first try.
    Fail,
    /// Panics on its first try.
    Panic,
    /// Succeeds and asks to be reconciled again soon (once per state).
    Requeue,
}

fn fate(key: &str, seen: Option<&str>, retries: u32) -> Fate {
    let mut h = std::hash::DefaultHasher::new();
    (key, seen).hash(&mut h);
    let h = h.finish();
    match h % 29 {
        0..=1 if retries == 0 => Fate::Fail,
        2 if retries == 0 => Fate::Panic,
        3..=4 => Fate::Requeue,
        5..=10 => Fate::Slow(h % 4 + 1),
        _ => Fate::Succeed,
    }
}

/// What the reconciles of one controller (and its successors) recorded.
#[derive(Debug, Default)]
struct Record {
    /// Per key: the state its last successful reconcile saw (`None`: gone).
    last: BTreeMap<String, Option<String>>,
    /// Keys whose reconcile is running now.
    running: HashSet<String>,
    /// Keys a successful reconcile saw present, with no successful
    /// reconcile of their deletion since.
    present: HashSet<String>,
    /// Keys whose deletion was reconciled without its last known state
    /// (CTL-9's brief exception: the feeder had not noted the delete yet):
    /// a later reconcile of the key must have it, or see the object.
    owed_last_known: BTreeSet<String>,
    /// Key and state of the reconciles that asked for a requeue and have
    /// not been reconciled since.
    requeues_due: BTreeSet<String>,
    /// States (`key@rv`) that asked for a requeue already.
    requeued: HashSet<String>,
    violations: Vec<String>,
    /// The running controller's injected errors and panics (its metrics
    /// count them).
    failed: u64,
    panicked: u64,
    reconciles: u64,
    deleted_reconciles: u64,
    /// Deletions reconciled before the feeder noted them (CTL-9's exception).
    without_last_known: u64,
    most_running: u64,
    restarts: u64,
}

fn lock(record: &Mutex<Record>) -> MutexGuard<'_, Record> {
    record.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps a key in `running` while its reconcile runs: removed when the
/// reconcile returns, panics or is cancelled.
struct Running {
    record: Arc<Mutex<Record>>,
    key: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.record).running.remove(&self.key);
    }
}

async fn reconcile(
    record: Arc<Mutex<Record>>,
    informer: Informer<ConfigMap>,
    req: Request<ConfigMap>,
) -> Result<Action, String> {
    let key = req.key.to_string();
    let seen = req
        .object
        .as_ref()
        .map(|o| o.metadata.resource_version.clone().unwrap_or_default());
    let fate = fate(&key, seen.as_deref(), req.retries);
    let running = {
        let mut r = lock(&record);
        r.reconciles += 1;
        if !informer.has_synced() {
            r.violations.push(format!(
                "{key}: reconciled before the informer synced (CTL-1)"
            ));
        }
        if !r.running.insert(key.clone()) {
            r.violations
                .push(format!("{key}: two reconciles at once (CTL-2)"));
        }
        r.most_running = r.most_running.max(r.running.len() as u64);
        if seen.is_some() || req.last_known.is_some() {
            r.owed_last_known.remove(&key);
        } else if r.present.contains(&key) {
            r.without_last_known += 1;
            r.owed_last_known.insert(key.clone());
        }
        r.requeues_due.remove(&key);
        match fate {
            Fate::Fail => r.failed += 1,
            Fate::Panic => r.panicked += 1,
            _ => {}
        }
        Running {
            record: record.clone(),
            key: key.clone(),
        }
    };
    let mut action = Action::Done;
    match fate {
        Fate::Fail => return Err("kinformer-sim: a reconcile fails on purpose".into()),
        Fate::Panic => panic!("{EXPECTED_PANIC} (a reconcile)"),
        Fate::Slow(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Fate::Requeue => {
            let state = format!("{key}@{}", seen.as_deref().unwrap_or("gone"));
            if lock(&record).requeued.insert(state) {
                action = Action::RequeueAfter(REQUEUE_AFTER);
            }
        }
        Fate::Succeed => {}
    }
    let mut r = lock(&record);
    if action != Action::Done {
        r.requeues_due.insert(key.clone());
    }
    match &seen {
        Some(_) => r.present.insert(key.clone()),
        None => {
            r.deleted_reconciles += 1;
            r.present.remove(&key)
        }
    };
    r.last.insert(key, seen);
    drop(r);
    drop(running);
    Ok(action)
}

/// The controller probe.
#[derive(Default)]
pub struct ControllerProbe {
    informer: Option<Informer<ConfigMap>>,
    controller: Option<ControllerHandle<ConfigMap>>,
    record: Arc<Mutex<Record>>,
    extra: Vec<String>,
    /// The informer's relists and watch restarts, once it stopped.
    informer_counts: Option<(u64, u64)>,
}

impl ControllerProbe {
    /// A probe with nothing started.
    pub fn new() -> Self {
        Self::default()
    }

    async fn start_controller(&mut self) -> anyhow::Result<()> {
        let Some(informer) = self.informer.clone() else {
            anyhow::bail!("no informer");
        };
        let record = self.record.clone();
        let seen_by = informer.clone();
        let handle = Controller::new(informer)
            .name("sim")
            .workers(WORKERS)
            .rate_limiter(ItemExponential::new(
                Duration::from_millis(1),
                Duration::from_millis(100),
            ))
            .start(move |req| reconcile(record.clone(), seen_by.clone(), req))
            .await?;
        self.controller = Some(handle);
        Ok(())
    }

    /// Stops the controller: nothing may be cancelled within the deadline.
    /// A successor starts with nothing recorded: deletes made while none
    /// ran are never reconciled (as for any controller without finalizers).
    async fn stop_controller(&mut self) {
        let Some(controller) = self.controller.take() else {
            return;
        };
        let report = controller.stop(STOP_DEADLINE).await;
        if !report.cancelled.is_empty() {
            self.extra.push(format!(
                "a stop within {STOP_DEADLINE:?} cancelled reconciles of {:?} (CTL-5)",
                report.cancelled
            ));
        }
        let mut r = lock(&self.record);
        r.last.clear();
        r.present.clear();
        r.requeues_due.clear();
        r.owed_last_known.clear();
        r.failed = 0;
        r.panicked = 0;
    }

    /// How the last reconciles differ from the server (empty: converged).
    fn unconverged(&self, world: &World, most: usize) -> Vec<String> {
        let truth = world.truth(&Selection::default());
        let r = lock(&self.record);
        let mut out = Vec::new();
        for (key, rv) in &truth {
            match r.last.get(key) {
                Some(Some(seen)) if seen == rv => {}
                Some(Some(seen)) => out.push(format!(
                    "{key}: server rv {rv}, last reconciled at rv {seen}"
                )),
                Some(None) => {
                    out.push(format!("{key}: server rv {rv}, last reconciled as deleted"))
                }
                None => out.push(format!("{key}: server rv {rv}, never reconciled")),
            }
        }
        for (key, seen) in &r.last {
            if let Some(seen) = seen
                && !truth.contains_key(key)
            {
                out.push(format!(
                    "{key}: gone from the server, last reconciled at rv {seen} (its deletion never reconciled)"
                ));
            }
        }
        for key in &r.requeues_due {
            out.push(format!("{key}: asked for a requeue, not reconciled again"));
        }
        for key in &r.owed_last_known {
            out.push(format!(
                "{key}: its deletion was never reconciled with its last known state (CTL-9)"
            ));
        }
        if !r.running.is_empty() {
            out.push(format!("reconciles still running: {:?}", r.running));
        }
        out.truncate(most);
        out
    }
}

impl Probe for ControllerProbe {
    const REPLAY: &'static str = "replay_controller";

    async fn start(&mut self, world: &mut World, schedule: &Schedule) -> anyhow::Result<()> {
        let informer = informer_builder(world, &schedule.engine, &Selection::default()).start()?;
        self.informer = Some(informer);
        self.start_controller().await
    }

    async fn consumer(&mut self, _world: &mut World, step: &Consumer) {
        if let Consumer::RestartNamespaced = step {
            self.stop_controller().await;
            lock(&self.record).restarts += 1;
            if let Err(e) = self.start_controller().await {
                self.extra
                    .push(format!("the controller did not start again: {e:#}"));
            }
        }
    }

    fn sample(&mut self, _world: &World) {}

    async fn settle(&mut self, world: &mut World, deadline: Instant) -> Vec<String> {
        while !self.unconverged(world, 1).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let mut out = self.unconverged(world, 20);
        if let Some(controller) = &self.controller {
            let metrics = controller.reconcile_metrics();
            let r = lock(&self.record);
            if metrics.errors != r.failed + r.panicked || metrics.panics != r.panicked {
                out.push(format!(
                    "metrics count {} errors and {} panics; the reconciles made {} errors and {} panics",
                    metrics.errors,
                    metrics.panics,
                    r.failed + r.panicked,
                    r.panicked
                ));
            }
        }
        let mut r = lock(&self.record);
        out.append(&mut r.violations);
        drop(r);
        out.append(&mut self.extra);
        out
    }

    async fn finish(&mut self) {
        self.stop_controller().await;
        if let Some(informer) = self.informer.take() {
            let stats = informer.stats();
            self.informer_counts = Some((stats.relists, stats.watch_restarts));
            informer.stop().await;
        }
    }

    fn summary(&self) -> BTreeMap<&'static str, u64> {
        let r = lock(&self.record);
        let mut m = BTreeMap::new();
        m.insert("reconciles", r.reconciles);
        m.insert("reconciles_of_deletes", r.deleted_reconciles);
        m.insert("deletes_before_their_note", r.without_last_known);
        m.insert("most_at_once", r.most_running);
        m.insert("controller_restarts", r.restarts);
        let counts = self.informer.as_ref().map_or(self.informer_counts, |i| {
            let stats = i.stats();
            Some((stats.relists, stats.watch_restarts))
        });
        if let Some((relists, watch_restarts)) = counts {
            m.insert("relists", relists);
            m.insert("watch_restarts", watch_restarts);
        }
        m
    }
}
