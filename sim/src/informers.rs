//! The informer probe: three informers (every namespace; `tier=a` in every
//! namespace, whose objects move in and out; `sim-b` only, started and
//! stopped during the run, persisting its cache so that each start after
//! the first is a warm restart from its snapshot) and their subscribers of
//! every kind, checked against the server at the end and against their
//! memory bounds throughout.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{
    Backoff, CompactOptions, FifoOptions, Informer, InformerBuilder, InformerError, InformerStats,
    OverflowPolicy, SubscribeOptions, Subscription, WarmStart,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::check::{cache_view, history_of, stream_violations, view_diff};
use crate::run::Probe;
use crate::schedule::{Consumer, EngineChoice, InformerSlot, Schedule, SubscriberKind, TIER_LABEL};
use crate::subscriber::{Behaviour, PipelinedRecorder, Recorder, SharedLog};
use crate::world::{Selection, World};

/// The informers' read timeout: short, so stalls can outlast it.
pub const READ_TIMEOUT: Duration = Duration::from_millis(300);

/// Most batched notifications parked by a listener beyond its queue
/// (README: "plus one parked batch of at most 256").
const PARKED: usize = 256;

/// Most deltas a Reflector hands over in one message beyond the FIFO's
/// high watermark (a watch batch).
const WATCH_BATCH: usize = 256;

struct Sub {
    name: String,
    informer: usize,
    kind: SubscriberKind,
    sub: Option<Subscription<ConfigMap>>,
    log: SharedLog,
    gate: Option<watch::Sender<bool>>,
    /// Notifications recorded when `unsubscribe` returned.
    unsubscribed_at: Option<usize>,
    /// The documented bound of its pending notifications.
    bound: usize,
    max_pending: usize,
}

struct Inf {
    name: &'static str,
    slot: InformerSlot,
    selection: Selection,
    informer: Informer<ConfigMap>,
    stopped: bool,
    max_queued: usize,
}

/// The informer probe.
pub struct InformerProbe {
    engine: Option<EngineChoice>,
    /// Distinct keys the schedule can make (namespaces × names).
    keys: usize,
    informers: Vec<Inf>,
    subs: Vec<Sub>,
    over_bound: Vec<String>,
    extra: Vec<String>,
    /// Where the `sim-b` informer keeps its snapshot (removed at the end).
    snapshots: PathBuf,
}

/// Tells the snapshot directories of the runs of one process apart.
static RUNS: AtomicU64 = AtomicU64::new(0);

impl Default for InformerProbe {
    fn default() -> Self {
        Self::new()
    }
}

fn tier_index(cm: &ConfigMap) -> Result<Vec<String>, String> {
    Ok(cm
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(TIER_LABEL).cloned())
        .into_iter()
        .collect())
}

/// An informer of `selection` as every probe configures it for `engine`:
/// quick backoff, a read timeout stalls can outlast, the engine's page size,
/// managedFields choice and FIFO bound.
pub(crate) fn informer_builder(
    world: &World,
    engine: &EngineChoice,
    selection: &Selection,
) -> InformerBuilder<ConfigMap> {
    let api = match &selection.namespace {
        Some(ns) => kube::Api::<ConfigMap>::namespaced(world.client(), ns),
        None => kube::Api::<ConfigMap>::all(world.client()),
    };
    Informer::builder(api)
        .backoff(Backoff::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
            Duration::from_secs(120),
        ))
        .read_timeout(READ_TIMEOUT)
        .min_watch_timeout(Duration::from_secs(1))
        .page_size(engine.page_size)
        .skip_managed_fields(engine.skip_managed_fields)
        .fifo_options(FifoOptions::default().high_watermark(engine.high_watermark))
}

impl InformerProbe {
    /// A probe with nothing started.
    pub fn new() -> Self {
        InformerProbe {
            engine: None,
            keys: 0,
            informers: Vec::new(),
            subs: Vec::new(),
            over_bound: Vec::new(),
            extra: Vec::new(),
            snapshots: std::env::temp_dir().join(format!(
                "kinformer-sim-{}-{}",
                std::process::id(),
                RUNS.fetch_add(1, Ordering::Relaxed)
            )),
        }
    }

    fn start_informer(
        &mut self,
        world: &World,
        slot: InformerSlot,
    ) -> Result<usize, InformerError> {
        let engine = self.engine.unwrap_or(EngineChoice {
            page_size: 500,
            streaming_lists: false,
            skip_managed_fields: false,
            high_watermark: 16_384,
            reflector_thread: false,
            compact_cache: false,
            compact_recent: 0,
            compact_background: true,
        });
        let (name, selection) = match slot {
            InformerSlot::All => ("all", Selection::default()),
            InformerSlot::Tiered => (
                "tiered",
                Selection {
                    namespace: None,
                    tier: Some("a"),
                },
            ),
            InformerSlot::Namespaced => (
                "sim-b",
                Selection {
                    namespace: Some("sim-b".into()),
                    tier: None,
                },
            ),
        };
        let mut b = informer_builder(world, &engine, &selection)
            // The tiered informer streams too when its cache is compact:
            // such lists go on in pages as they stream (DF-9).
            .streaming_lists(
                engine.streaming_lists
                    && (slot == InformerSlot::All
                        || (slot == InformerSlot::Tiered && engine.compact_cache)),
            )
            .reflector_thread(engine.reflector_thread && slot == InformerSlot::All)
            .index("tier", tier_index);
        if let Some(selector) = selection.label_selector() {
            b = b.label_selector(selector);
        }
        if slot == InformerSlot::Namespaced {
            // A stop and a start are a process restart with persistence on.
            b = b.persist(&self.snapshots, "sim");
        }
        if engine.compact_cache && slot != InformerSlot::All {
            let options = CompactOptions::new()
                .dictionary(8, 1024)
                .recent(engine.compact_recent)
                .background(engine.compact_background);
            b = b.compact_cache(options);
        }
        let informer = b.start()?;
        self.informers.push(Inf {
            name,
            slot,
            selection,
            informer,
            stopped: false,
            max_queued: 0,
        });
        Ok(self.informers.len() - 1)
    }

    fn running(&self, slot: InformerSlot) -> Option<usize> {
        self.informers
            .iter()
            .rposition(|i| i.slot == slot && !i.stopped)
    }

    async fn subscribe(&mut self, informer: usize, kind: SubscriberKind, resync: bool) {
        let inf = &self.informers[informer].informer;
        let mut options = SubscribeOptions::default().resync(if resync {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        });
        let n = self.subs.len();
        let mut gate = None;
        let mut gate_rx = || {
            let (tx, rx) = watch::channel(false);
            gate = Some(tx);
            Some(rx)
        };
        let policy = |coalesce: bool| {
            if coalesce {
                OverflowPolicy::Coalesce
            } else {
                OverflowPolicy::Block
            }
        };
        let (result, log) = match kind {
            SubscriberKind::Block { capacity } => {
                options = options.capacity(capacity);
                let (a, log) = Recorder::start(Behaviour::default());
                (inf.subscribe(a.recipient(), options).await, log)
            }
            SubscriberKind::Coalesce => {
                options = options.policy(OverflowPolicy::Coalesce).capacity(8);
                let (a, log) = Recorder::start(Behaviour::default());
                (inf.subscribe(a.recipient(), options).await, log)
            }
            SubscriberKind::Batches { batch_size } => {
                options = options.batch_size(batch_size).capacity(64);
                let (a, log) = Recorder::start(Behaviour::default());
                (inf.subscribe_batches(a.recipient(), options).await, log)
            }
            SubscriberKind::Pipelined { depth } => {
                options = options.pipeline(depth).capacity(64);
                let (a, log) = PipelinedRecorder::start(None);
                (inf.subscribe_pipelined(&a, options).await, log)
            }
            SubscriberKind::Inline { capacity } => {
                options = options.capacity(capacity);
                let log = SharedLog::default();
                let recording = log.clone();
                let subscribed = inf
                    .subscribe_inline(options, move |event| {
                        crate::subscriber::record(&recording, event);
                    })
                    .await;
                (subscribed, log)
            }
            SubscriberKind::Slow { delay_ms, coalesce } => {
                options = options.policy(policy(coalesce)).capacity(4);
                let (a, log) = Recorder::start(Behaviour {
                    delay: Some(Duration::from_millis(delay_ms)),
                    ..Behaviour::default()
                });
                (inf.subscribe(a.recipient(), options).await, log)
            }
            SubscriberKind::Gated { coalesce } => {
                options = options.policy(policy(coalesce)).capacity(2);
                let (a, log) = Recorder::start(Behaviour {
                    gate: gate_rx(),
                    ..Behaviour::default()
                });
                (inf.subscribe(a.recipient(), options).await, log)
            }
            SubscriberKind::Panics { after } => {
                let (a, log) = Recorder::start(Behaviour {
                    panic_at: Some(after),
                    ..Behaviour::default()
                });
                (inf.subscribe(a.recipient(), options).await, log)
            }
        };
        let keys = self.keys;
        let bound = match options.policy {
            // Its queue, one parked batch, the replay of the cache it
            // joined with and the resync lane (each at most every key).
            OverflowPolicy::Block => options.capacity + PARKED + 2 * keys,
            // One pending notification per key, plus the same.
            _ => 3 * keys + PARKED,
        };
        let name = format!(
            "{}#{n} {kind:?} resync={resync}",
            self.informers[informer].name
        );
        match result {
            Ok(sub) => self.subs.push(Sub {
                name,
                informer,
                kind,
                sub: Some(sub),
                log,
                gate,
                unsubscribed_at: None,
                bound,
                max_pending: 0,
            }),
            Err(e) => self.extra.push(format!(
                "{name}: subscribe to a running informer failed: {e}"
            )),
        }
    }

    fn open_gates(&mut self) {
        for s in &mut self.subs {
            if let Some(g) = s.gate.take() {
                g.send_replace(true);
            }
        }
    }

    fn live(&self) -> Vec<usize> {
        (0..self.subs.len())
            .filter(|&i| {
                let s = &self.subs[i];
                s.sub.is_some() && !self.informers[s.informer].stopped
            })
            .collect()
    }

    async fn unsubscribe(&mut self, pick: u8) {
        let live = self.live();
        if live.is_empty() {
            return;
        }
        let i = live[usize::from(pick) % live.len()];
        // A gated handler's call in progress never returns while the gate
        // is closed, and unsubscribe waits for it: open it first.
        if let Some(g) = self.subs[i].gate.take() {
            g.send_replace(true);
        }
        let Some(sub) = self.subs[i].sub.take() else {
            return;
        };
        let name = self.subs[i].name.clone();
        if tokio::time::timeout(Duration::from_secs(10), sub.unsubscribe())
            .await
            .is_err()
        {
            self.extra
                .push(format!("{name}: unsubscribe did not return within 10 s"));
        }
        let s = &mut self.subs[i];
        s.unsubscribed_at = Some(s.log.lock().unwrap_or_else(|p| p.into_inner()).events.len());
    }

    /// Starts the namespaced informer with a Block subscriber (no-op when
    /// running); after a stop it starts from the snapshot its predecessor left.
    async fn start_namespaced(&mut self, world: &World) {
        if self.running(InformerSlot::Namespaced).is_some() {
            return;
        }
        match self.start_informer(world, InformerSlot::Namespaced) {
            Ok(i) => {
                self.subscribe(i, SubscriberKind::Block { capacity: 4 }, false)
                    .await
            }
            Err(e) => self.extra.push(format!("start sim-b informer: {e}")),
        }
    }

    async fn stop_namespaced(&mut self) {
        let Some(i) = self.running(InformerSlot::Namespaced) else {
            return;
        };
        let inf = &mut self.informers[i];
        inf.informer.stop().await;
        inf.stopped = true;
        match tokio::time::timeout(
            Duration::from_secs(5),
            inf.informer.wait_for_sync(Duration::from_secs(60)),
        )
        .await
        {
            Err(_) => self
                .extra
                .push("a stopped informer's wait_for_sync did not end at once".into()),
            Ok(Ok(()) | Err(InformerError::Stopped)) => {}
            Ok(Err(e)) => self
                .extra
                .push(format!("a stopped informer's wait_for_sync answered {e}")),
        }
        let (a, _) = Recorder::start(Behaviour::default());
        if !matches!(
            inf.informer
                .subscribe(a.recipient(), SubscribeOptions::default())
                .await,
            Err(InformerError::Stopped)
        ) {
            self.extra
                .push("a stopped informer took a subscriber".into());
        }
    }

    /// Every divergence of the subscribers and caches now (empty: converged).
    fn divergences(&self, world: &World, detail: bool) -> Vec<String> {
        let mut out = Vec::new();
        let truths: Vec<BTreeMap<String, String>> = self
            .informers
            .iter()
            .map(|i| world.truth(&i.selection))
            .collect();
        for (i, inf) in self.informers.iter().enumerate() {
            // Re-checked until settled: the Indexer counts a subscriber lost
            // a few steps after its subscription reads as gone.
            let lost = self
                .subs
                .iter()
                .filter(|s| s.informer == i && s.sub.as_ref().is_some_and(|x| x.is_gone()))
                .count() as u64;
            let counted = inf.informer.stats().subscribers_lost;
            if counted < lost {
                out.push(format!(
                    "informer {}: {lost} subscribers gone, {counted} counted lost",
                    inf.name
                ));
            }
        }
        for (inf, truth) in self.informers.iter().zip(&truths) {
            if inf.stopped {
                continue;
            }
            let cache = cache_view(&inf.informer);
            let diff = view_diff(&cache, truth, 5);
            if !diff.is_empty() {
                let stats = inf.informer.stats();
                out.push(format!(
                    "informer {}: the cache differs from the server: {diff:?}{}",
                    inf.name,
                    if detail {
                        format!(
                            "; stats {stats:?}; last failure {:?}",
                            inf.informer.last_failure()
                        )
                    } else {
                        String::new()
                    }
                ));
            }
        }
        for s in &self.subs {
            let Some(sub) = &s.sub else { continue };
            let inf = &self.informers[s.informer];
            if inf.stopped {
                continue;
            }
            let log = s.log.lock().unwrap_or_else(|p| p.into_inner());
            if let SubscriberKind::Panics { after } = s.kind {
                let panicked = log.events.len() >= after;
                if panicked && !sub.is_gone() {
                    out.push(format!(
                        "{}: panicked, but the subscription is not gone",
                        s.name
                    ));
                }
                if panicked {
                    continue;
                }
            }
            if sub.is_gone() {
                out.push(format!("{}: gone without a panic", s.name));
                continue;
            }
            let diff = view_diff(&log.view, &truths[s.informer], 5);
            if !diff.is_empty() {
                let history = if detail {
                    format!(
                        "; its events for those keys: {:?}",
                        history_of(&log, &diff, 30)
                    )
                } else {
                    String::new()
                };
                out.push(format!(
                    "{}: did not converge: {diff:?}{history}; stats {:?}",
                    s.name,
                    sub.stats()
                ));
            }
        }
        out
    }

    fn final_checks(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.subs {
            let log = s.log.lock().unwrap_or_else(|p| p.into_inner());
            for v in stream_violations(&log, 3) {
                out.push(format!("{}: {v}", s.name));
            }
            for v in &log.wrong_olds {
                out.push(format!(
                    "{}: an update's old state is not what it saw: {v}",
                    s.name
                ));
            }
            if let Some(at) = s.unsubscribed_at
                && log.events.len() > at
            {
                out.push(format!(
                    "{}: {} notifications after unsubscribe returned",
                    s.name,
                    log.events.len() - at
                ));
            }
        }
        for inf in &self.informers {
            // No disk fault is simulated: a snapshot is never damaged.
            if let Some(p) = inf.informer.persistence()
                && (p.error.is_some() || p.discarded > 0)
            {
                out.push(format!(
                    "informer {}: persistence failed: {:?}, discarded {} ({:?})",
                    inf.name, p.error, p.discarded, p.discarded_because
                ));
            }
        }
        for inf in &self.informers {
            if !inf.stopped {
                let snapshot = inf.informer.store().snapshot();
                let by_index: Vec<String> = match snapshot.index_keys("tier", "a") {
                    Ok(keys) => keys.iter().map(|k| k.to_string()).collect(),
                    Err(e) => vec![format!("error {e}")],
                };
                let mut expected: Vec<String> = snapshot
                    .iter()
                    .filter(|(_, o)| tier_index(o).is_ok_and(|v| v.iter().any(|t| t == "a")))
                    .map(|(k, _)| k.to_string())
                    .collect();
                let mut by_index = by_index;
                by_index.sort();
                expected.sort();
                if by_index != expected {
                    out.push(format!(
                        "informer {}: index tier=a holds {by_index:?}, the cache {expected:?}",
                        inf.name
                    ));
                }
            }
        }
        out
    }

    /// The failed list and watch answers the server gave, against the
    /// failures the informers counted: every one must be counted (a
    /// request the informer gave up on is counted when it gives up).
    fn failures_reported(&self, world: &World) -> Option<String> {
        let answered = world.server.requests().count(|r| {
            (r.verb == "list" || r.verb == "watch")
                && r.status >= 400
                && r.path.contains("configmaps")
        }) as u64;
        let counted: u64 = self
            .informers
            .iter()
            .map(|i| i.informer.stats().failures)
            .sum();
        // A stopped informer misses the answers to requests it left open.
        let slack = self.informers.iter().filter(|i| i.stopped).count() as u64;
        (counted + slack < answered).then(|| {
            format!(
                "the server answered {answered} list/watch requests with an error, the informers counted {counted} failures"
            )
        })
    }
}

impl Probe for InformerProbe {
    async fn start(&mut self, world: &mut World, schedule: &Schedule) -> anyhow::Result<()> {
        self.engine = Some(schedule.engine);
        self.keys = crate::schedule::NAMESPACES.len() * usize::from(schedule.profile.names);
        let all = self.start_informer(world, InformerSlot::All)?;
        let tiered = self.start_informer(world, InformerSlot::Tiered)?;
        let mut gated_block = false;
        for c in &schedule.initial {
            if let Consumer::Subscribe {
                informer,
                kind,
                resync,
            } = c
            {
                gated_block |= matches!(kind, SubscriberKind::Gated { coalesce: false });
                let i = if *informer == InformerSlot::Tiered {
                    tiered
                } else {
                    all
                };
                self.subscribe(i, *kind, *resync).await;
            }
        }
        if !gated_block {
            // A subscriber that panics during the initial list must not
            // keep an informer from syncing (k8s#129024).
            for i in [all, tiered] {
                let inf = &self.informers[i].informer;
                if let Err(e) = inf.wait_for_sync(Duration::from_secs(20)).await {
                    self.extra.push(format!(
                        "informer {}: never synced: {e}",
                        self.informers[i].name
                    ));
                }
            }
        }
        Ok(())
    }

    async fn consumer(&mut self, world: &mut World, step: &Consumer) {
        match step {
            Consumer::Subscribe {
                informer,
                kind,
                resync,
            } => {
                if let Some(i) = self.running(*informer) {
                    self.subscribe(i, *kind, *resync).await;
                }
            }
            Consumer::Unsubscribe { pick } => self.unsubscribe(*pick).await,
            Consumer::OpenGates => self.open_gates(),
            Consumer::StartNamespaced => self.start_namespaced(world).await,
            Consumer::StopNamespaced => self.stop_namespaced().await,
            Consumer::RestartNamespaced => {
                self.stop_namespaced().await;
                self.start_namespaced(world).await;
            }
        }
    }

    fn sample(&mut self, _world: &World) {
        for s in &mut self.subs {
            let Some(sub) = &s.sub else { continue };
            let pending = sub.stats().pending;
            s.max_pending = s.max_pending.max(pending);
            if pending > s.bound && !self.over_bound.iter().any(|l| l.starts_with(&s.name)) {
                self.over_bound.push(format!(
                    "{}: {pending} pending notifications, over its bound {}",
                    s.name, s.bound
                ));
            }
        }
        let keys = self.keys;
        let hwm = self.engine.map_or(16_384, |e| e.high_watermark);
        for inf in &mut self.informers {
            let queued = inf.informer.stats().queued_deltas;
            inf.max_queued = inf.max_queued.max(queued);
            let bound = hwm + WATCH_BATCH + keys;
            if queued > bound {
                self.over_bound.push(format!(
                    "informer {}: {queued} deltas queued, over {bound}",
                    inf.name
                ));
            }
        }
    }

    async fn settle(&mut self, world: &mut World, deadline: Instant) -> Vec<String> {
        self.open_gates();
        loop {
            self.sample(world);
            let now = self.divergences(world, false);
            if now.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let mut out = self.divergences(world, true);
        out.extend(self.final_checks());
        out.extend(self.failures_reported(world));
        out.append(&mut self.over_bound);
        out.append(&mut self.extra);
        out
    }

    async fn finish(&mut self) {
        self.open_gates();
        for inf in &mut self.informers {
            if !inf.stopped {
                inf.informer.stop().await;
                inf.stopped = true;
            }
        }
        let _ = std::fs::remove_dir_all(&self.snapshots);
    }

    fn summary(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        let mut add = |k: &'static str, v: u64| *m.entry(k).or_insert(0) += v;
        for inf in &self.informers {
            let InformerStats {
                relists,
                watch_restarts,
                failures,
                events,
                tombstones,
                warm_start,
                ..
            } = inf.informer.stats();
            add("informers", 1);
            add("warm_starts", u64::from(warm_start != WarmStart::Cold));
            add("relists", relists);
            add("watch_restarts", watch_restarts);
            add("failures", failures);
            add("events", events);
            add("tombstones", tombstones);
        }
        add("subscribers", self.subs.len() as u64);
        add(
            "delivered",
            self.subs
                .iter()
                .map(|s| s.log.lock().map(|l| l.events.len()).unwrap_or(0) as u64)
                .sum(),
        );
        m
    }
}
