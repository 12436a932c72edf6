//! Observability: the informers' counters as Prometheus metrics (through the
//! `metrics` facade and `metrics-exporter-prometheus`), and the HTTP endpoints
//! `/metrics`, `/healthz` and `/readyz`.
//!
//! The engine keeps its counters in atomics (`Informer::stats()`,
//! `Subscription::stats()`); [`Registry::sample`] copies them into the
//! recorder, on every scrape and every status tick, so a scrape always sees
//! current values. The HTTP server (`http`) runs on its own thread and
//! runtime, so probes answer even while the actor thread is busy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use kinformer::{Cause, Event, Informer, Subscription};
use kube::core::DynamicObject;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::http::{HttpServer, Limits};

/// Notification types, in label order.
pub const TYPES: [&str; 3] = ["added", "updated", "deleted"];
/// Causes, in label order.
pub const CAUSES: [&str; 5] = ["initial", "watch", "relist", "resync", "restored"];

/// Which (type, cause) pairs the engine sends: adds are initial, watch,
/// relist or restored; updates watch, relist or resync; deletes watch or relist.
const POSSIBLE: [[bool; 5]; 3] = [
    [true, true, true, false, true],
    [false, true, true, true, false],
    [false, true, true, false, false],
];

/// Notifications a subscriber handled, by type and cause.
#[derive(Debug, Default)]
pub struct Notifications {
    counts: [[AtomicU64; 5]; 3],
    tombstones: AtomicU64,
}

impl Notifications {
    /// Counts one notification.
    pub fn record<K>(&self, event: &Event<K>) {
        let t = match event {
            Event::Added { .. } => 0,
            Event::Updated { .. } => 1,
            Event::Deleted { object, .. } => {
                if object.is_final_state_unknown() {
                    self.tombstones.fetch_add(1, Ordering::Relaxed);
                }
                2
            }
        };
        self.counts[t][cause_index(event.cause())].fetch_add(1, Ordering::Relaxed);
    }

    /// Handled notifications of type `t` (index into [`TYPES`]) and cause `c` (into [`CAUSES`]).
    pub fn get(&self, t: usize, c: usize) -> u64 {
        self.counts[t][c].load(Ordering::Relaxed)
    }

    /// All handled notifications.
    pub fn total(&self) -> u64 {
        (0..3)
            .flat_map(|t| (0..CAUSES.len()).map(move |c| (t, c)))
            .map(|(t, c)| self.get(t, c))
            .sum()
    }

    /// Resync notifications handled.
    pub fn resyncs(&self) -> u64 {
        (0..3).map(|t| self.get(t, 3)).sum()
    }

    /// Tombstone deletes handled.
    pub fn tombstones(&self) -> u64 {
        self.tombstones.load(Ordering::Relaxed)
    }
}

fn cause_index(cause: Cause) -> usize {
    match cause {
        Cause::Initial => 0,
        Cause::Watch => 1,
        Cause::Relist => 2,
        Cause::Resync => 3,
        Cause::Restored => 4,
    }
}

/// One subscriber as the program sees it.
pub struct SubscriberView {
    /// Its configured name.
    pub name: String,
    /// What its actor counted.
    pub notifications: Arc<Notifications>,
    subscription: Mutex<Option<Subscription<DynamicObject>>>,
}

impl SubscriberView {
    /// Wraps a live subscription.
    pub fn new(
        name: String,
        notifications: Arc<Notifications>,
        subscription: Subscription<DynamicObject>,
    ) -> Self {
        SubscriberView {
            name,
            notifications,
            subscription: Mutex::new(Some(subscription)),
        }
    }

    /// The subscription, while it lasts.
    pub fn subscription(&self) -> MutexGuard<'_, Option<Subscription<DynamicObject>>> {
        self.subscription
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the subscription out (to unsubscribe it).
    pub fn take(&self) -> Option<Subscription<DynamicObject>> {
        self.subscription().take()
    }
}

/// One informer as the program sees it.
pub struct InformerView {
    /// Its configured name.
    pub name: String,
    /// `group/version/plural`.
    pub resource: String,
    /// The informer.
    pub informer: Informer<DynamicObject>,
    /// Its subscribers.
    pub subscribers: Vec<SubscriberView>,
    last_rv: Mutex<(String, Instant)>,
    /// The initial sync, once it is done.
    pub synced: Arc<OnceLock<InitialSync>>,
}

/// What the informer looked like when its initial sync was done: the status
/// line reports these, not the counts of the later tick that prints it.
#[derive(Debug, Clone)]
pub struct InitialSync {
    /// How long it took from the program's start.
    pub took: Duration,
    /// Objects cached at that moment.
    pub objects: usize,
    /// The resourceVersion synced to.
    pub resource_version: String,
}

impl InformerView {
    /// A view of a started informer.
    pub fn new(
        name: String,
        resource: String,
        informer: Informer<DynamicObject>,
        subscribers: Vec<SubscriberView>,
    ) -> Self {
        InformerView {
            name,
            resource,
            informer,
            subscribers,
            last_rv: Mutex::new((String::new(), Instant::now())),
            synced: Arc::new(OnceLock::new()),
        }
    }

    /// Seconds since the informer's last synced resourceVersion changed.
    pub fn resource_version_age(&self) -> f64 {
        let rv = self.informer.last_sync_resource_version();
        let mut last = self
            .last_rv
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.0 != rv {
            *last = (rv, Instant::now());
        }
        last.1.elapsed().as_secs_f64()
    }
}

/// Every informer of the program: sampled into metrics, asked for readiness.
pub struct Registry {
    /// The informers.
    pub informers: Vec<InformerView>,
    /// This replica's leader election, when configured.
    pub leader: Option<super::leadership::LeaderView>,
}

impl Registry {
    /// True when every informer has synced (what `/readyz` answers).
    pub fn ready(&self) -> bool {
        self.informers.iter().all(|i| i.informer.has_synced())
    }

    /// Copies the engine's counters into the metrics recorder.
    pub fn sample(&self) {
        if let Some(leader) = &self.leader {
            leader.sample();
        }
        for view in &self.informers {
            let inf = view.name.clone();
            let s = view.informer.stats();
            let c = |name: &'static str, v: u64| {
                counter!(name, "informer" => inf.clone()).absolute(v);
            };
            c("kinformer_watch_events_total", s.events);
            c("kinformer_lists_total", s.lists);
            c("kinformer_relists_total", s.relists);
            c("kinformer_reflector_panics_total", s.reflector_panics);
            c("kinformer_transform_panics_total", s.transform_panics);
            for (reason, v) in s.watch_ends.by_reason() {
                counter!("kinformer_watch_ends_total", "informer" => inf.clone(), "reason" => reason)
                    .absolute(v);
            }
            counter!("kinformer_backoff_milliseconds_total", "informer" => inf.clone())
                .absolute(s.backoff_ms);
            c("kinformer_watch_restarts_total", s.watch_restarts);
            c("kinformer_failures_total", s.failures);
            c("kinformer_subscribers_lost_total", s.subscribers_lost);
            c("kinformer_tombstones_total", s.tombstones);
            for (ty, v) in [
                ("added", s.added),
                ("updated", s.updated),
                ("deleted", s.deleted),
            ] {
                counter!("kinformer_cache_changes_total", "informer" => inf.clone(), "type" => ty)
                    .absolute(v);
            }
            let g = |name: &'static str, v: f64| {
                gauge!(name, "informer" => inf.clone()).set(v);
            };
            g("kinformer_objects", s.objects as f64);
            if let Some(compact) = s.compact {
                g("kinformer_compact_cache_bytes", compact.bytes as f64);
                g(
                    "kinformer_compact_cache_decoded_objects",
                    (compact.fresh + compact.decoded) as f64,
                );
                c(
                    "kinformer_compact_cache_decode_errors_total",
                    compact.decode_errors,
                );
            }
            if let Some(p) = view.informer.persistence() {
                for path in [
                    kinformer::WarmStart::Cold,
                    kinformer::WarmStart::Restored,
                    kinformer::WarmStart::Resumed,
                    kinformer::WarmStart::Relisted,
                ] {
                    let on = f64::from(u8::from(s.warm_start == path));
                    gauge!("kinformer_warm_start", "informer" => inf.clone(), "path" => path.as_str())
                        .set(on);
                }
                c("kinformer_snapshot_commits_total", p.commits);
                c(
                    "kinformer_snapshot_objects_written_total",
                    p.objects_written,
                );
                c("kinformer_snapshot_discarded_total", p.discarded);
                g("kinformer_snapshot_bytes", p.file_bytes as f64);
                g(
                    "kinformer_snapshot_failed",
                    f64::from(u8::from(p.error.is_some())),
                );
            }
            g(
                "kinformer_synced",
                f64::from(u8::from(view.informer.has_synced())),
            );
            g("kinformer_subscribers", s.subscribers as f64);
            g("kinformer_list_received_objects", s.list_progress.0 as f64);
            g("kinformer_list_announced_objects", s.list_progress.1 as f64);
            g(
                "kinformer_resource_version_age_seconds",
                view.resource_version_age(),
            );
            gauge!("kinformer_queue_depth", "informer" => inf.clone(), "actor" => "delta_fifo")
                .set(s.queued_deltas as f64);
            g("kinformer_fifo_queued_keys", s.queued_keys as f64);
            g(
                "kinformer_fifo_saturated",
                f64::from(u8::from(s.fifo_saturated)),
            );
            for sub in &view.subscribers {
                let name = sub.name.clone();
                if let Some(subscription) = sub.subscription().as_ref() {
                    let ls = subscription.stats();
                    let pending = ls.pending as f64;
                    gauge!("kinformer_queue_depth", "informer" => inf.clone(), "actor" => "listener", "subscriber" => name.clone())
                        .set(pending);
                    gauge!("kinformer_subscriber_pending", "informer" => inf.clone(), "subscriber" => name.clone())
                        .set(pending);
                    gauge!("kinformer_subscriber_in_flight", "informer" => inf.clone(), "subscriber" => name.clone())
                        .set(ls.in_flight as f64);
                    let sc = |metric: &'static str, v: u64| {
                        counter!(metric, "informer" => inf.clone(), "subscriber" => name.clone())
                            .absolute(v);
                    };
                    sc("kinformer_subscriber_delivered_total", ls.delivered);
                    sc("kinformer_subscriber_coalesced_total", ls.coalesced);
                    sc("kinformer_subscriber_resyncs_total", ls.resyncs);
                    gauge!("kinformer_subscriber_synced", "informer" => inf.clone(), "subscriber" => name.clone())
                        .set(f64::from(u8::from(subscription.has_synced())));
                }
                for (t, ty) in TYPES.iter().enumerate() {
                    for (c, cause) in CAUSES.iter().enumerate() {
                        if !POSSIBLE[t][c] {
                            continue;
                        }
                        counter!("kinformer_notifications_total", "informer" => inf.clone(), "subscriber" => name.clone(), "type" => *ty, "cause" => *cause)
                            .absolute(sub.notifications.get(t, c));
                    }
                }
            }
        }
    }
}

fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "kinformer_watch_events_total",
        "Watch events received (bookmarks included)."
    );
    describe_counter!(
        "kinformer_lists_total",
        "Lists made, the first one included."
    );
    describe_counter!(
        "kinformer_reflector_panics_total",
        "Panics caught in the Reflector's list-watch loop (each restarted it)."
    );
    describe_counter!(
        "kinformer_transform_panics_total",
        "Objects skipped because the transform panicked on them (R-29)."
    );
    describe_counter!(
        "kinformer_watch_ends_total",
        "Watches that ended or failed to open, by reason (closed, expired, throttled, refused, transport, malformed, other)."
    );
    describe_counter!(
        "kinformer_backoff_milliseconds_total",
        "Milliseconds the Reflector spent waiting in backoff."
    );
    describe_gauge!(
        "kinformer_fifo_queued_keys",
        "Keys waiting in the DeltaFIFO."
    );
    describe_gauge!(
        "kinformer_fifo_saturated",
        "1 while the DeltaFIFO holds the Reflector back (back-pressure)."
    );
    describe_gauge!(
        "kinformer_warm_start",
        "1 for the path the informer's start took: cold, restored (not confirmed yet), resumed or relisted."
    );
    describe_counter!(
        "kinformer_snapshot_commits_total",
        "Snapshot transactions committed."
    );
    describe_counter!(
        "kinformer_snapshot_objects_written_total",
        "Objects written to the snapshot."
    );
    describe_counter!(
        "kinformer_snapshot_discarded_total",
        "Snapshots discarded at start (corrupt, foreign, outdated)."
    );
    describe_gauge!("kinformer_snapshot_bytes", "Size of the snapshot file.");
    describe_gauge!(
        "kinformer_compact_cache_bytes",
        "Bytes a compact cache's entries hold (compressed objects, versions, index values)."
    );
    describe_gauge!(
        "kinformer_compact_cache_decoded_objects",
        "Objects a compact cache holds decoded: the recent ones, those being compressed, and any that did not encode."
    );
    describe_counter!(
        "kinformer_compact_cache_decode_errors_total",
        "Reads of a compact cache entry that did not decode (expected: 0)."
    );
    describe_gauge!(
        "kinformer_snapshot_failed",
        "1 once persistence stopped on an error (the informer goes on in memory)."
    );
    describe_counter!(
        "kinformer_relists_total",
        "Lists made after the first one (watch broke, 410, errors)."
    );
    describe_counter!(
        "kinformer_watch_restarts_total",
        "Watches re-opened after the first one."
    );
    describe_counter!(
        "kinformer_failures_total",
        "Failed list/watch requests, any kind."
    );
    describe_counter!(
        "kinformer_subscribers_lost_total",
        "Subscribers removed because their actor stopped."
    );
    describe_counter!(
        "kinformer_tombstones_total",
        "Deletes whose final state is unknown (found by a relist)."
    );
    describe_counter!(
        "kinformer_cache_changes_total",
        "Adds, updates and deletes applied to the cache."
    );
    describe_gauge!("kinformer_objects", "Objects in the informer's cache.");
    describe_gauge!(
        "kinformer_synced",
        "1 once the informer's initial list is in its cache."
    );
    describe_gauge!("kinformer_subscribers", "Live subscribers.");
    describe_gauge!(
        "kinformer_list_received_objects",
        "Objects received by the list in progress."
    );
    describe_gauge!(
        "kinformer_list_announced_objects",
        "Objects the server announced for the list in progress (0 = unknown)."
    );
    describe_gauge!(
        "kinformer_resource_version_age_seconds",
        "Seconds since the informer's last synced resourceVersion changed."
    );
    describe_gauge!(
        "kinformer_queue_depth",
        "Items waiting in an actor's queue (delta_fifo: deltas; listener: notifications)."
    );
    describe_gauge!(
        "kinformer_subscriber_pending",
        "Notifications waiting for the subscriber."
    );
    describe_gauge!(
        "kinformer_subscriber_in_flight",
        "Notifications sent to the subscriber whose handler has not returned yet."
    );
    describe_gauge!(
        "kinformer_subscriber_synced",
        "1 once the subscriber handled its initial adds."
    );
    describe_counter!(
        "kinformer_subscriber_delivered_total",
        "Notifications handled by the subscriber."
    );
    describe_counter!(
        "kinformer_subscriber_coalesced_total",
        "Notifications merged away (Coalesce policy)."
    );
    describe_counter!(
        "kinformer_subscriber_resyncs_total",
        "Resync notifications handled by the subscriber."
    );
    describe_counter!(
        "kinformer_notifications_total",
        "Notifications handled, by type and cause."
    );
    describe_gauge!(
        "kinformer_leader",
        "1 while this replica holds the leader election's Lease."
    );
    describe_counter!(
        "kinformer_leader_transitions_total",
        "Times this replica became leader or stepped down."
    );
}

/// Installs the Prometheus recorder and serves `/metrics`, `/healthz`,
/// `/readyz` on `listener` (bound with [`http::bind`](super::http::bind)),
/// within [`Limits`]' defaults.
pub fn serve(
    listener: std::net::TcpListener,
    registry: Arc<Registry>,
) -> anyhow::Result<HttpServer> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    describe();
    let state = AppState { registry, handle };
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(state);
    super::http::serve(listener, app, Limits::default(), "kinformer-metrics")
        .context("observability.metrics_addr")
}

#[derive(Clone)]
struct AppState {
    registry: Arc<Registry>,
    handle: PrometheusHandle,
}

async fn render(State(state): State<AppState>) -> String {
    state.registry.sample();
    state.handle.run_upkeep();
    state.handle.render()
}

async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    if state.registry.ready() {
        return (StatusCode::OK, "ready\n".into());
    }
    let waiting: Vec<&str> = state
        .registry
        .informers
        .iter()
        .filter(|i| !i.informer.has_synced())
        .map(|i| i.name.as_str())
        .collect();
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not synced: {}\n", waiting.join(", ")),
    )
}
