//! The parent process: the embedded API server, the writer, and the
//! workloads, each of which runs its measured informers in child processes.

pub mod child;
mod churn;
mod controller;
mod relist;
mod restart;
mod resync;
mod slow;
mod sync;
mod writer;

use std::time::Duration;

use anyhow::Context as _;
use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};
use serde::Serialize;

use crate::objects::{churn_configmap, churn_pod, pod};
use crate::proto::{ChildSpec, Job, Kind, SubSpec, Variant};
use crate::report::Section;

/// How big the runs are.
#[derive(Debug, Clone, Serialize)]
pub struct Scale {
    /// `quick` or `full`.
    pub name: &'static str,
    /// Repetitions of each measurement (alternating the order of the libraries).
    pub reps: usize,
    /// Object counts of the initial-sync workload.
    pub sync_sizes: Vec<usize>,
    /// Churn objects (updated round-robin).
    pub churn_objects: usize,
    /// What the churn workload updates (ConfigMaps unless told).
    pub churn_kind: Kind,
    /// The steady write rate (events per second).
    pub rate: f64,
    /// Seconds of steady writing per churn measurement.
    pub churn_secs: f64,
    /// Subscriber counts of the churn workload.
    pub churn_subscribers: Vec<usize>,
    /// Events written while the watch is stalled, to measure the drain rate.
    pub drain_events: u64,
    /// When the slow subscriber stalls (ms after the writes start).
    pub stall_after_ms: u64,
    /// How long it stalls (ms).
    pub stall_ms: u64,
    /// Writing continues this long after the stall (ms).
    pub stall_tail_ms: u64,
    /// Objects of the relist workload.
    pub relist_objects: usize,
    /// Objects of the resync workload.
    pub resync_objects: usize,
    /// Resync periods of the resync workload's 10 subscribers (s; 0 = never).
    pub resync_periods: Vec<u64>,
    /// Seconds of writing during the resync workload.
    pub resync_secs: f64,
    /// Run only the informer variants with these labels, `|`-separated.
    pub only: Option<String>,
    /// Object kinds of the sync workload.
    pub sync_kinds: Vec<Kind>,
    /// Controller workload: ConfigMaps updated round-robin in its churn part.
    pub ctl_keys: usize,
    /// Controller workload: writes per second of its churn part.
    pub ctl_rate: f64,
    /// Controller workload: seconds of writing in its churn part.
    pub ctl_secs: f64,
    /// Controller workload: how long a reconcile awaits (µs).
    pub ctl_reconcile_us: u64,
    /// Controller workload: reconciles at once, both controllers.
    pub ctl_workers: usize,
    /// Controller workload: ConfigMaps at start-up.
    pub ctl_startup_objects: usize,
    /// Controller workload: real changes made during the initial reconciles.
    pub ctl_changes: usize,
    /// Restart workload: the object kinds and counts restarted.
    pub restart_sizes: Vec<(Kind, usize)>,
}

impl Scale {
    /// Whether `variant` is to run.
    pub fn runs(&self, variant: &Variant) -> bool {
        let label = variant.label();
        self.only
            .as_ref()
            .is_none_or(|o| o.split('|').any(|l| l.trim() == label))
    }
}

impl Scale {
    /// The full scale of issue 6.
    pub fn full() -> Self {
        Scale {
            name: "full",
            reps: 3,
            sync_sizes: vec![10_000, 100_000],
            churn_objects: 1_000,
            churn_kind: Kind::ConfigMap,
            rate: 1_000.0,
            churn_secs: 10.0,
            churn_subscribers: vec![1, 10, 100],
            drain_events: 20_000,
            stall_after_ms: 5_000,
            stall_ms: 30_000,
            stall_tail_ms: 5_000,
            relist_objects: 100_000,
            resync_objects: 100_000,
            // Every period at most half the 60 s measured, so each subscriber must show
            // at least one full period between two resyncs of every object.
            resync_periods: vec![10, 10, 15, 15, 20, 20, 30, 30, 30, 0],
            resync_secs: 60.0,
            only: None,
            sync_kinds: vec![Kind::ConfigMap, Kind::Pod],
            ctl_keys: 100,
            ctl_rate: 1_000.0,
            ctl_secs: 30.0,
            ctl_reconcile_us: 1_000,
            ctl_workers: 8,
            ctl_startup_objects: 100_000,
            ctl_changes: 100,
            restart_sizes: vec![(Kind::ConfigMap, 100_000), (Kind::Pod, 10_000)],
        }
    }

    /// A reduced scale that runs in about 30 s in a debug build (CI).
    pub fn quick() -> Self {
        Scale {
            name: "quick",
            reps: 1,
            sync_sizes: vec![200],
            churn_objects: 50,
            churn_kind: Kind::ConfigMap,
            rate: 200.0,
            churn_secs: 1.0,
            churn_subscribers: vec![1, 10],
            drain_events: 300,
            stall_after_ms: 200,
            stall_ms: 700,
            stall_tail_ms: 200,
            relist_objects: 200,
            resync_objects: 200,
            resync_periods: vec![1, 1, 2, 2, 1, 2, 1, 2, 1, 0],
            resync_secs: 2.5,
            only: None,
            sync_kinds: vec![Kind::ConfigMap, Kind::Pod],
            ctl_keys: 20,
            ctl_rate: 200.0,
            ctl_secs: 1.0,
            ctl_reconcile_us: 1_000,
            ctl_workers: 8,
            ctl_startup_objects: 1_000,
            ctl_changes: 20,
            restart_sizes: vec![(Kind::ConfigMap, 200), (Kind::Pod, 100)],
        }
    }
}

/// The workloads, by name.
pub const WORKLOADS: [&str; 7] = [
    "sync",
    "churn",
    "slow",
    "relist",
    "resync",
    "controller",
    "restart",
];

/// Runs one workload and returns its report section.
pub fn run_workload(name: &str, scale: &Scale) -> anyhow::Result<Section> {
    tracing::info!(workload = name, scale = scale.name, "running");
    match name {
        "sync" => sync::run(scale),
        "churn" => churn::run(scale),
        "slow" => slow::run(scale),
        "relist" => relist::run(scale),
        "resync" => resync::run(scale),
        "controller" => controller::run(scale),
        "restart" => restart::run(scale),
        other => anyhow::bail!("unknown workload {other}"),
    }
}

/// An embedded API server configured for benchmarks: deep watch buffers (a
/// stalled watch must not be cut with a 410) and a long history.
pub fn server() -> anyhow::Result<ServerHandle> {
    let config = ServerConfig {
        history_limit: 200_000,
        watch_buffer: 2_000_000,
        ..ServerConfig::default()
    };
    ApiServer::start_in_thread(config).context("starting the embedded API server")
}

/// Seeds `n` objects of `kind` into `namespace`.
pub fn seed(server: &ServerHandle, kind: Kind, namespace: &str, n: usize) -> anyhow::Result<()> {
    server.create_namespace(namespace)?;
    match kind {
        Kind::ConfigMap => server.seed_configmaps(namespace, n)?,
        Kind::Pod => {
            for i in 0..n {
                server.create("", "pods", Some(namespace), pod(i, namespace))?;
            }
        }
    }
    Ok(())
}

/// Creates the churn ConfigMaps in `namespace`; returns their templates.
pub fn seed_churn(
    server: &ServerHandle,
    namespace: &str,
    n: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    seed_churn_of(server, Kind::ConfigMap, namespace, n)
}

/// Creates `n` churn objects of `kind` in `namespace`; returns their templates.
pub fn seed_churn_of(
    server: &ServerHandle,
    kind: Kind,
    namespace: &str,
    n: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    server.create_namespace(namespace)?;
    let mut templates = Vec::with_capacity(n);
    for i in 0..n {
        let object = match kind {
            Kind::ConfigMap => churn_configmap(i),
            Kind::Pod => churn_pod(i, namespace),
        };
        server.create("", kind.plural(), Some(namespace), object.clone())?;
        templates.push(object);
    }
    Ok(templates)
}

/// A child spec with the defaults the workloads share.
pub fn spec(
    job: Job,
    variant: Variant,
    kind: Kind,
    url: &str,
    namespace: &str,
    objects: usize,
    subscribers: Vec<SubSpec>,
) -> ChildSpec {
    ChildSpec {
        job,
        variant,
        kind,
        url: url.into(),
        namespace: namespace.into(),
        objects,
        page_size: 500,
        subscribers,
        capacity: kinformer::SubscribeOptions::DEFAULT_CAPACITY,
        count_to: 0,
        control_watch: false,
        controller: crate::proto::CtlSpec::default(),
        persist: None,
    }
}

/// `order[rep]`: the variants, reversed on odd repetitions.
pub fn alternate<T: Clone>(items: &[T], rep: usize) -> Vec<T> {
    let mut v = items.to_vec();
    if rep % 2 == 1 {
        v.reverse();
    }
    v
}

/// Generous deadline for one child's whole job.
pub const CHILD_TIMEOUT: Duration = Duration::from_secs(900);
