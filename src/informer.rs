//! Building, running and stopping an informer.

use std::fmt::{self, Debug};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use kinformer_actors::Object;
use kinformer_actors::SubscriberId;
use kinformer_actors::delta_fifo::{DeltaFifo, FifoOptions, FifoOrdering, FifoStats};
use kinformer_actors::indexer::{
    Cache, Codec, CompactOptions, CompactStats, IndexFn, Indexer, IndexerStats, ListenerStopped,
    Subscribe, Unsubscribe,
};
use kinformer_actors::listener::{
    FeedSender, Listener, ListenerOptions, ListenerStats, StopListener, Target,
};
use kinformer_actors::reflector::decode::DecodeOptions;
use kinformer_actors::reflector::{
    Backoff, KubeSource, ListWatch, Reflector, ReflectorOptions, ReflectorStats, RequestFailure,
    StopReflector, Transform, WatchEndReason, default_list_decoders,
};
use kinformer_actors::resync::{CancelResync, ResyncTimer, ScheduleResync, StopResync};
use kinformer_actors::{Event, EventBatch};
use kube::Api;
use kube::core::PartialObjectMeta;
use tokio::sync::watch;

use crate::callback::call_each;
use crate::error::InformerError;
use crate::metadata::{MetadataScope, metadata_api};
use crate::own_thread::run_at_home;
use crate::persist::{PersistConfig, PersistStatus, Persistence, SnapshotIdentity};
use crate::store::Store;
use crate::stream::EventStream;
use crate::subscription::{InformerLink, SubscribeOptions, Subscription, SubscriptionParts};
use crate::wait::wait_synced;
use kinformer_actors::reflector::WarmStart;

/// A compact cache's DeltaFIFO high watermark, at most (decoded objects
/// queued before the Reflector waits).
const COMPACT_HIGH_WATERMARK: usize = 1024;
/// A compact cache's initial batches, at most (decoded objects in flight to
/// the Indexer).
const COMPACT_INITIAL_BATCH: usize = 512;

/// Configures an [`Informer`]; see [`Informer::builder`].
///
/// ```no_run
/// # use std::time::Duration;
/// # use k8s_openapi::api::core::v1::Pod;
/// # use kinformer::Informer;
/// # fn build(client: kube::Client) -> Result<Informer<Pod>, kinformer::InformerError> {
/// let pods = kube::Api::<Pod>::namespaced(client, "default");
/// Informer::builder(pods)
///     .label_selector("app=web")
///     .skip_managed_fields(true)
///     .default_resync(Duration::from_secs(600))
///     .index("node", |pod| Ok(pod.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()))
///     .start() // inside an actix System or a tokio LocalSet; or start_on_own_thread()
/// # }
/// ```
pub struct InformerBuilder<K: Object> {
    api: Api<K>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    reflector: ReflectorOptions,
    fifo: FifoOptions,
    transform: Option<Transform<K>>,
    indexes: Vec<(String, IndexFn<K>)>,
    default_resync: Duration,
    skip_managed_fields: bool,
    reflector_thread: bool,
    list_decoders: usize,
    persist: Option<PersistConfig<K>>,
    /// `persist_schema`'s tag, kept apart so that it holds in either order.
    persist_schema: String,
    compact: Option<Codec<K>>,
}

impl<K> InformerBuilder<K>
where
    K: Object,
{
    /// Keeps an on-disk snapshot of the cache in `dir` (created if needed),
    /// and starts from it: see docs/guide.md, "Warm restart". `cluster`
    /// names the cluster: a snapshot is used only by an informer of the same
    /// cluster, resource, namespace, selectors and object type
    /// ([`persist_schema`](Self::persist_schema)). It must differ between
    /// clusters that may share `dir`: a server URL alone does not (the
    /// in-cluster `https://10.96.0.1` is every cluster's, and a test cluster
    /// recreated on the same port keeps its URL); the `kube-system`
    /// namespace's uid does ([`cluster_identity`](crate::cluster_identity)).
    ///
    /// With a valid snapshot, subscribers first get its objects as adds
    /// with `Cause::Restored`, [`Informer::has_synced`] turns true once they
    /// are in the cache (the state at the snapshot's resourceVersion, not yet
    /// confirmed by the server, as a list served from a watch cache is), and
    /// the Reflector watches from its resourceVersion: what changed since
    /// comes as `Watch` events, or, after a 410, as `Relist` changes and
    /// tombstones found by one list. [`InformerStats::warm_start`] says which.
    /// A corrupt, foreign or outdated snapshot is discarded and the informer
    /// lists; a directory that cannot be written stops persistence with an
    /// error in [`Informer::persistence`], and the informer goes on in memory.
    pub fn persist(mut self, dir: impl Into<std::path::PathBuf>, cluster: impl Into<String>) -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        self.persist = Some(PersistConfig {
            dir: dir.into(),
            cluster: cluster.into(),
            encode: |o| serde_json::to_vec(o),
            decode: |d, b| d.decode(b, DecodeOptions::default()),
        });
        self
    }

    /// Keeps the cache compact: each object is stored as its JSON compressed
    /// with zstd and a dictionary learned from the first objects (a 6.9 KB
    /// Pod in about 230 B, against 51 KB decoded; BENCHMARKS.md, "Compact
    /// cache"), with its index values and resourceVersion kept beside it.
    ///
    /// Compression is write-behind: the last objects written (1024 by
    /// default, [`CompactOptions::recent`]) stay decoded, and the others are
    /// compressed on a thread of the cache's own, so storing an object costs
    /// the informer's thread what the decoded cache costs, and updating a
    /// recent one decodes nothing.
    ///
    /// Subscribers still get decoded `Arc<K>`s, decoded once per event as
    /// in the decoded cache. Reads of compressed objects decode: [`Store`]
    /// `get`, `list` and index queries decode every such object they return
    /// (tens of µs for a Pod), and return fresh `Arc`s, equal in content to
    /// what was stored. An update's `old`, when compressed, is decoded from
    /// the cache for that event only (about 8 µs for a 1 KB ConfigMap, on
    /// the informer's thread). A replay to a
    /// late subscriber and a resync decode each object they send. An object
    /// that does not encode stays decoded; an entry that does not decode is
    /// read as absent, logged and counted ([`InformerStats::compact`]):
    /// neither is expected, the cache encoded it itself with `K`'s serde.
    ///
    /// Choose it when memory matters more than read latency: large caches
    /// read mostly through events. Keep the decoded cache for hot `get`s.
    ///
    /// It also bounds the decoded objects on their way in: the DeltaFIFO's
    /// high watermark becomes at most 1024 deltas and its initial batches at
    /// most 512 keys (a later [`fifo_options`](Self::fifo_options) sets
    /// them again), so a list, read page by page, is cached as it is read
    /// and the peak during a sync stays near the compact cache's size; a
    /// streaming list is handed on a page at a time as it streams, too.
    pub fn compact_cache(mut self, options: CompactOptions) -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        self.compact = Some(Codec::json(options));
        self.reflector.stream_in_pages = true;
        self.fifo = self
            .fifo
            .high_watermark(self.fifo.high_watermark.min(COMPACT_HIGH_WATERMARK))
            .initial_batch_size(self.fifo.initial_batch_size.min(COMPACT_INITIAL_BATCH));
        self
    }

    /// A tag of what the cached objects are, beyond their type: change it
    /// when a [`transform`](Self::transform) changes, so that snapshots of the
    /// old objects are not restored. Before or after [`persist`](Self::persist).
    pub fn persist_schema(mut self, tag: impl Into<String>) -> Self {
        self.persist_schema = tag.into();
        self
    }

    /// Both selectors at once, `None` for none (the factory's key).
    pub(crate) fn selectors(mut self, label: Option<String>, field: Option<String>) -> Self {
        if self
            .label_selector
            .as_ref()
            .is_some_and(|l| Some(l) != label.as_ref())
            || self
                .field_selector
                .as_ref()
                .is_some_and(|f| Some(f) != field.as_ref())
        {
            tracing::warn!(
                configured_labels = ?self.label_selector,
                configured_fields = ?self.field_selector,
                labels = ?label,
                fields = ?field,
                "selectors set in the factory's `configure` are replaced by the factory key's"
            );
        }
        self.label_selector = label;
        self.field_selector = field;
        self
    }

    /// Only objects matching this label selector (`app=web,tier in (a,b)`).
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Only objects matching this field selector (`metadata.name=x`).
    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Page size of every list, relists at a resourceVersion included (R-10;
    /// 0 = unpaginated). Unset, lists ask for 500 and relists at a
    /// resourceVersion are unpaginated, so that the watch cache serves them.
    /// With a [`compact_cache`](Self::compact_cache), 0 loses its memory
    /// bound while listing (each list is held decoded at once; warned at
    /// start).
    pub fn page_size(mut self, page_size: u32) -> Self {
        self.reflector.page_size = Some(page_size);
        self
    }

    /// Use streaming lists (`sendInitialEvents`), falling back to lists when
    /// unsupported. A decoded cache takes a streaming list's objects at its
    /// end; a compact cache ([`InformerBuilder::compact_cache`]) a page
    /// ([`InformerBuilder::page_size`] objects) at a time while it streams,
    /// so the list is never held decoded.
    pub fn streaming_lists(mut self, on: bool) -> Self {
        self.reflector.streaming_lists = on;
        self
    }

    /// The backoff between failed attempts (default 800 ms doubling to 30 s, reset after 2 min).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.reflector.backoff = backoff;
        self
    }

    /// How long a list page or the opening of a watch may go without an
    /// answer, and how long past its asked-for timeout a watch may stay open,
    /// before it is given up (default 60 s): kube-client sets no read timeout,
    /// and a half-open connection would otherwise hang the informer silently.
    /// `ZERO` turns these deadlines off.
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.reflector.read_timeout = timeout;
        self
    }

    /// While a backoff after a failure without an answer (a refused or reset
    /// connection, a timeout) waits, probe the server with `GET /version` and
    /// end the wait once it answers again (default on). Off, the wait runs its
    /// course, as client-go's does.
    pub fn probes(mut self, on: bool) -> Self {
        self.reflector.probe = on;
        self
    }

    /// The shortest watch timeout asked of the server; each watch asks for a
    /// jittered `[min, 2·min)` (R-15; default 5 minutes, at least 1 s).
    pub fn min_watch_timeout(mut self, min: Duration) -> Self {
        self.reflector.min_watch_timeout = min;
        self
    }

    /// Tuning of the DeltaFIFO (batch size, high watermark, ordering).
    pub fn fifo_options(mut self, options: FifoOptions) -> Self {
        self.fifo = options;
        self
    }

    /// In which order changes reach the subscribers: merged per object (the
    /// default, client-go's classic DeltaFIFO) or every change in arrival
    /// order across objects (client-go's RealFIFO, its default since 1.33).
    /// See [`FifoOrdering`]. A later [`fifo_options`](Self::fifo_options)
    /// replaces it.
    pub fn fifo_ordering(mut self, ordering: FifoOrdering) -> Self {
        self.fifo = self.fifo.ordering(ordering);
        self
    }

    /// Applied once to every object before it is cached and shared (e.g. drop `managedFields`).
    /// It must be deterministic: a relist keeps the cached (transformed) object
    /// of every object whose resourceVersion did not change, without running
    /// the transform again. It should not panic: an object it panics on is
    /// skipped (R-29) until its next change or the next relist, as if it were
    /// outside the informer's selection (a cached earlier state of it is
    /// deleted), counted in [`InformerStats::transform_panics`], logged with
    /// its key and recorded as [`Informer::last_failure`]; the other objects
    /// go on. With `panic = "abort"`, the process aborts.
    pub fn transform(mut self, f: impl Fn(K) -> K + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }

    /// Skip `metadata.managedFields` while decoding, so it is never allocated
    /// (about 40 % of a decoded Pod's heap: 22 of 51 KB, BENCHMARKS.md). Cheaper than a [`transform`](Self::transform)
    /// that clears it, which runs after the fields were decoded. Off by default.
    pub fn skip_managed_fields(mut self, skip: bool) -> Self {
        self.skip_managed_fields = skip;
        self
    }

    /// Runs the Reflector (requests and the decoding of list pages and watch
    /// events) on a thread of its own, an actix `Arbiter`, so decoding can
    /// overlap caching and delivery on another core. Needs an actix `System`
    /// (under a bare tokio `LocalSet` the Reflector stays on the current
    /// thread). Off by default: on the 2-core benchmark machine, where the API
    /// server shares the cores, under glibc's allocator the cross-thread
    /// hand-off costs more than it saves (maximum ConfigMap event rate with
    /// 10 batched subscribers: 61k/s with it, 90k/s without). Under mimalloc
    /// it pays with many per-event subscribers (10: 77k/s against 34k/s) and
    /// is even with batched ones (BENCHMARKS.md, "The Reflector on a thread
    /// of its own"). Under glibc the initial sync takes 1.2–1.7× as long
    /// with it (10k–100k ConfigMaps, 10k Pods; even for 100k Pods); 1.24×
    /// for 100k ConfigMaps since its thread grows its arena ahead of the
    /// decoded pages (BENCHMARKS.md, "Growing the decoding threads'
    /// arenas"). Worth trying with spare cores, large objects (a Pod
    /// decodes in 31–53 µs) or a faster allocator than glibc's.
    pub fn reflector_thread(mut self, on: bool) -> Self {
        self.reflector_thread = on;
        self
    }

    /// List pages decoded at once (up to 4), on tokio's blocking threads,
    /// while the informer's thread caches the pages before them; for every
    /// list (the initial one, a relist), and likewise a streaming list's
    /// initial events, in runs of the lines already received (its watch
    /// events after the initial-events-end bookmark decode on the
    /// Reflector's thread, as every watch's do). 0 decodes them on the
    /// Reflector's thread. Default: 2, or 0 on one core. Decoding is most of
    /// a list's time: on the 2-core benchmark machine, shared with the API
    /// server, 10k and 100k Pods synced in 0.63–0.80× the time with 2
    /// (0.33–0.40× kube-runtime's), 10k ConfigMaps in 0.74–0.80×, 100k
    /// ConfigMaps in 0.92–1.01× (their cache, not their decoding, sets the
    /// pace), for 5–37 % more CPU (objects decoded on one core are touched
    /// on the other), and up to `n + 1` fetched pages held ahead
    /// (BENCHMARKS.md, "List pages decoded on more than one core"; streaming
    /// lists: "A streaming list's events decoded ahead").
    pub fn list_decoders(mut self, n: usize) -> Self {
        self.list_decoders = n;
        self
    }

    /// A named secondary index; `f` returns the object's values, or an error
    /// message. An object whose function fails (an `Err`, or a panic, which
    /// is caught) is still cached, under no value of this index; the failure
    /// is logged and counted in [`InformerStats::index_errors`]. `f` must be
    /// pure: an object's old values are recomputed to unindex it.
    pub fn index(
        mut self,
        name: impl Into<String>,
        f: impl Fn(&K) -> Result<Vec<String>, String> + Send + Sync + 'static,
    ) -> Self {
        self.indexes.push((name.into(), Arc::new(f)));
        self
    }

    /// Resync period of subscribers that do not choose one (default: never).
    pub fn default_resync(mut self, period: Duration) -> Self {
        self.default_resync = period;
        self
    }

    /// Starts the actors. Must run inside an actix `System` or a tokio
    /// `LocalSet`; elsewhere (e.g. directly in `#[tokio::main]`) it answers
    /// [`InformerError::NoActorRuntime`] (after tokio prints the panic it
    /// raised, which is how a `LocalSet` is detected): use
    /// [`start_on_own_thread`](Self::start_on_own_thread) there. Built with
    /// `panic = "abort"`, only an actix `System` is accepted. The Reflector's
    /// recovery from a panic in its loop also needs unwinding.
    pub fn start(self) -> Result<Informer<K>, InformerError> {
        self.start_at_home(None)
    }

    /// Starts the actors on a new thread the informer owns, running an actix
    /// `System`: for `#[tokio::main]` services and any code without a
    /// `LocalSet`. Callable from anywhere, including a multi-thread runtime;
    /// it blocks until the actors are started (a thread start, not the sync).
    ///
    /// Every `subscribe*` and `stream*` call then starts its listener on that
    /// thread, so they too work from any task. Actor subscribers may live in
    /// any actix System; [`Informer::stream`] and [`Informer::subscribe_fn`]
    /// need none. The thread ends once every handle ([`Informer`] clones,
    /// [`Subscription`]s, [`EventStream`]s) is dropped; [`Informer::stop`]
    /// alone stops listing and watching but keeps delivering what was queued.
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) -> Result<(), kinformer::InformerError> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let api = kube::Api::<ConfigMap>::all(client);
    /// let informer = kinformer::Informer::builder(api).start_on_own_thread()?;
    /// informer.wait_for_sync(std::time::Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub fn start_on_own_thread(self) -> Result<Informer<K>, InformerError> {
        crate::own_thread::start(move |home| self.start_at_home(Some(home)))
    }

    /// Starts the actors here; `home` is the informer's own System when it
    /// owns the thread (subscriptions are then set up there).
    pub(crate) fn start_at_home(self, home: Option<System>) -> Result<Informer<K>, InformerError> {
        if !can_start_actors() {
            return Err(InformerError::NoActorRuntime);
        }
        if self.compact.is_some() && self.reflector.page_size == Some(0) {
            // Unpaginated lists are decoded whole before they are cached.
            tracing::warn!(
                "a compact cache with page_size(0): lists are not paginated, so each is held decoded at once (the compact cache's memory bound is lost)"
            );
        }
        let mut cache = match self.compact {
            Some(codec) => Cache::compact(codec).map_err(InformerError::Compact)?,
            None => Cache::new(),
        };
        for (name, f) in self.indexes {
            cache.add_index(&name, f)?;
        }
        cache.publish();
        let reader = cache.reader();
        let stats = InformerStatsInner::default();
        let persist = self.persist.map(|config| {
            let identity = SnapshotIdentity {
                cluster: config.cluster.clone(),
                resource: self.api.resource_url().to_string(),
                label_selector: self.label_selector.clone().unwrap_or_default(),
                field_selector: self.field_selector.clone().unwrap_or_default(),
                object_schema: format!(
                    "{}; skip_managed_fields={}; transform={}; {}",
                    std::any::type_name::<K>(),
                    self.skip_managed_fields,
                    self.transform.is_some(),
                    self.persist_schema
                ),
            };
            crate::persist::prepare(config, identity)
        });
        let (restore, persist) = match persist {
            Some((restore, handle)) => (Some(restore), Some(handle)),
            None => (None, None),
        };
        let span = tracing::info_span!(
            "informer",
            resource = %self.api.resource_url(),
            labels = self.label_selector.as_deref().unwrap_or(""),
            fields = self.field_selector.as_deref().unwrap_or(""),
        );
        let mut indexer = Indexer::new(cache, stats.indexer.clone())
            .in_span(tracing::info_span!(parent: &span, "indexer"));
        if let Some(p) = &persist {
            indexer = indexer.with_feed(p.feed.clone());
        }
        let indexer = indexer.start();
        let (synced_tx, synced) = watch::channel(false);
        let fifo = DeltaFifo::new(
            reader.clone(),
            indexer.clone(),
            self.fifo,
            synced_tx,
            stats.fifo.clone(),
        )
        .in_span(tracing::info_span!(parent: &span, "delta_fifo"))
        .start();
        let resync = ResyncTimer::new(indexer.clone().recipient()).start();
        let (rv_tx, rv) = watch::channel(String::new());
        stats
            .reflector
            .last_failure
            .set_target(self.api.resource_url().to_string());
        let source = KubeSource::new(ListWatch {
            api: self.api,
            label_selector: self.label_selector,
            field_selector: self.field_selector,
            decode: DecodeOptions {
                skip_managed_fields: self.skip_managed_fields,
            },
            read_timeout: self.reflector.read_timeout,
            failures: stats.reflector.last_failure.clone(),
            list_decoders: self.list_decoders,
        });
        let reflector_stats = stats.reflector.clone();
        let transform = self.transform;
        let options = self.reflector;
        let fifo_addr = fifo.clone();
        let reflector_span = tracing::info_span!(parent: &span, "reflector");
        let reflector_cache = reader.clone();
        let make = move |_: &mut Context<Reflector<K>>| {
            let reflector = Reflector::new(
                source,
                fifo_addr,
                options,
                transform,
                rv_tx,
                reflector_stats,
            )
            .with_cache(reflector_cache)
            .in_span(reflector_span);
            match restore {
                Some(restore) => reflector.with_restore(restore),
                None => reflector,
            }
        };
        let reflector_arbiter =
            (self.reflector_thread && System::try_current().is_some()).then(Arbiter::new);
        if self.reflector_thread && reflector_arbiter.is_none() {
            tracing::warn!(
                "reflector_thread(true) needs an actix System; the Reflector runs on this thread"
            );
        }
        let reflector = match &reflector_arbiter {
            Some(arbiter) => Supervisor::start_in_arbiter(&arbiter.handle(), make),
            None => Supervisor::start(make),
        };
        Ok(Informer {
            inner: Arc::new(Shared {
                indexer,
                reflector,
                reflector_arbiter,
                resync,
                reader,
                synced,
                rv,
                next_id: AtomicU64::new(1),
                stopped: watch::channel(false).0,
                span,
                default_resync: self.default_resync,
                stats,
                home,
                persist,
            }),
        })
    }
}

/// True inside an actix `System`'s or a tokio `LocalSet`'s tasks, where
/// actors can be started; starting one elsewhere panics (tokio's
/// `spawn_local`), a `tokio::spawn`ed task on an actix System's thread
/// included.
pub(crate) fn can_start_actors() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    // Where panics abort, the probe below cannot be caught: an actix System
    // is taken at its word (a `tokio::spawn`ed task on its thread still
    // panics there).
    if cfg!(panic = "abort") {
        return System::try_current().is_some();
    }
    // tokio has no "inside a LocalSet?" query: spawn an empty local task. Outside
    // one this panics (tokio prints its message), and the panic is caught here.
    std::panic::catch_unwind(|| drop(tokio::task::spawn_local(async {}))).is_ok()
}

#[derive(Default, Clone)]
struct InformerStatsInner {
    reflector: Arc<ReflectorStats>,
    fifo: Arc<FifoStats>,
    indexer: Arc<IndexerStats>,
}

/// Watches that ended or failed to open, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchEnds {
    /// Closed cleanly by the server (timeout, or on purpose): re-watched at once.
    pub closed: u64,
    /// 410 Expired: relisted.
    pub expired: u64,
    /// 429: backed off and re-watched.
    pub throttled: u64,
    /// Connection refused: backed off and re-watched.
    pub refused: u64,
    /// No answer (a reset or closed connection, a timeout): backed off and re-watched.
    pub transport: u64,
    /// A malformed line: relisted.
    pub malformed: u64,
    /// Any other error: relisted.
    pub other: u64,
}

impl WatchEnds {
    /// The count of one reason (an exhaustive match: a new reason cannot be forgotten).
    pub fn count(&self, reason: WatchEndReason) -> u64 {
        match reason {
            WatchEndReason::Closed => self.closed,
            WatchEndReason::Expired => self.expired,
            WatchEndReason::Throttled => self.throttled,
            WatchEndReason::Refused => self.refused,
            WatchEndReason::Transport => self.transport,
            WatchEndReason::Malformed => self.malformed,
            WatchEndReason::Other => self.other,
        }
    }

    /// Every reason's label (a metric label value) with its count.
    pub fn by_reason(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        WatchEndReason::ALL
            .into_iter()
            .map(|r| (r.as_str(), self.count(r)))
    }
}

/// A snapshot of an informer's counters (each read on its own: counters
/// that move together may be one event apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerStats {
    /// Objects cached.
    pub objects: usize,
    /// Lists made, the first one included.
    pub lists: u64,
    /// Lists made after the first one.
    pub relists: u64,
    /// Watches re-opened.
    pub watch_restarts: u64,
    /// Watch events received.
    pub events: u64,
    /// Failed requests.
    pub failures: u64,
    /// Panics caught in the Reflector (each one restarted it).
    pub reflector_panics: u64,
    /// Objects skipped because the transform panicked on them (R-29).
    pub transform_panics: u64,
    /// Milliseconds spent waiting in backoff.
    pub backoff_ms: u64,
    /// Probes of a server that did not answer, made while a backoff waited.
    pub probes: u64,
    /// Adds applied to the cache.
    pub added: u64,
    /// Updates applied (unchanged relist/resync replays excluded).
    pub updated: u64,
    /// Deletes applied.
    pub deleted: u64,
    /// Of which tombstones (final state unknown).
    pub tombstones: u64,
    /// Deltas waiting in the DeltaFIFO.
    pub queued_deltas: usize,
    /// Keys waiting in the DeltaFIFO.
    pub queued_keys: usize,
    /// True while the DeltaFIFO holds the Reflector back (back-pressure).
    pub fifo_saturated: bool,
    /// Watches that ended or failed to open, by reason.
    pub watch_ends: WatchEnds,
    /// Live subscribers.
    pub subscribers: usize,
    /// Subscribers removed because their actor stopped.
    pub subscribers_lost: u64,
    /// Index-function calls that failed (returned `Err` or panicked); each
    /// such object is cached but not indexed under that index. A function
    /// that keeps failing for an object counts again at each of its updates
    /// and relists.
    pub index_errors: u64,
    /// Objects received by the list in progress, and the total announced (0 = unknown).
    pub list_progress: (u64, u64),
    /// Whether the informer started from a snapshot, and what became of it
    /// (`InformerBuilder::persist`).
    pub warm_start: WarmStart,
    /// Objects restored from the snapshot.
    pub restored_objects: u64,
    /// Milliseconds the snapshot took to read and hand over.
    pub restore_ms: u64,
    /// A compact cache's sizes and counters, as of the last published
    /// state (`InformerBuilder::compact_cache`); `None` for a decoded cache.
    pub compact: Option<CompactStats>,
}

struct Shared<K: Object> {
    indexer: Addr<Indexer<K>>,
    reflector: Addr<Reflector<K>>,
    /// The Reflector's own thread, when it has one; stopped with the informer.
    reflector_arbiter: Option<Arbiter>,
    resync: Addr<ResyncTimer>,
    reader: kinformer_actors::indexer::CacheReader<K>,
    synced: watch::Receiver<bool>,
    rv: watch::Receiver<String>,
    next_id: AtomicU64,
    /// Set once by [`Informer::stop`] (or the drop of the last handle);
    /// sync waiters watch it.
    stopped: watch::Sender<bool>,
    span: tracing::Span,
    default_resync: Duration,
    stats: InformerStatsInner,
    /// The actix System of the thread this informer owns
    /// ([`InformerBuilder::start_on_own_thread`]), if it owns one; stopped
    /// when the last handle is dropped.
    home: Option<System>,
    /// The snapshot writer's handle, when the informer persists.
    persist: Option<Persistence<K>>,
}

impl<K: Object> Shared<K> {
    /// Stops listing, watching and resyncing (idempotent); true the first time.
    fn stop(&self) -> bool {
        if self.stopped.send_replace(true) {
            return false;
        }
        self.resync.do_send(StopResync);
        true
    }
}

/// Removes a subscription being set up, unless disarmed: `subscribe` failed,
/// or its future was dropped, before the `Subscription` was handed over.
struct Undo<K: Object> {
    id: SubscriberId,
    indexer: Addr<Indexer<K>>,
    resync: Addr<ResyncTimer>,
    listener: Option<Addr<Listener<K>>>,
}

impl<K: Object> Undo<K> {
    fn disarm(mut self) {
        self.listener = None;
    }
}

impl<K: Object> Drop for Undo<K> {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.take() {
            self.indexer.do_send(Unsubscribe(self.id));
            self.resync.do_send(CancelResync(self.id));
            listener.do_send(StopListener);
        }
    }
}

impl<K: Object> InformerLink for Shared<K> {
    fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.subscribe()
    }

    fn last_failure(&self) -> Option<RequestFailure> {
        self.stats.reflector.last_failure.get()
    }
}

/// The last handle is gone (every `Informer` and `Subscription`): nobody can
/// stop the informer any more, so it stops, as [`Informer::stop`] would.
impl<K: Object> Drop for Shared<K> {
    fn drop(&mut self) {
        if self.stop() {
            self.reflector.do_send(StopReflector);
        }
        if let Some(arbiter) = &self.reflector_arbiter {
            arbiter.stop();
        }
        if let Some(home) = &self.home {
            home.stop();
        }
    }
}

/// Metadata-only informers (see [`Informer::metadata`]).
impl<K> Informer<PartialObjectMeta<K>>
where
    K: Object,
    PartialObjectMeta<K>: Object,
{
    /// A metadata-only informer over the resource and namespace of `api`:
    /// its lists and watches ask the server for `PartialObjectMetadata`
    /// (`Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`),
    /// so only each object's `metadata` is sent, decoded and cached, and
    /// every event carries a [`PartialObjectMeta<K>`](kube::core::PartialObjectMeta).
    /// Everything else is as for [`Informer::builder`] (selectors, indexes on
    /// metadata, resyncs, every kind of subscriber, `skip_managed_fields`);
    /// `Informer::builder(Api::<PartialObjectMeta<K>>::all(client))` is the
    /// same informer. A server that cannot answer in that form (406) fails
    /// each list, recorded in [`Informer::last_failure`] with status 406.
    /// For a `DynamicObject` use [`Informer::metadata_with`].
    ///
    /// ```no_run
    /// # async fn f(client: kube::Client) -> Result<(), kinformer::InformerError> {
    /// use k8s_openapi::api::core::v1::Pod;
    /// let pods = kube::Api::<Pod>::all(client);
    /// let informer = kinformer::Informer::metadata(pods)
    ///     .skip_managed_fields(true)
    ///     .start_on_own_thread()?;
    /// informer.wait_for_sync(std::time::Duration::from_secs(60)).await?;
    /// for pod in informer.store().snapshot().list() {
    ///     println!("{:?}", pod.metadata.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn metadata(api: Api<K>) -> InformerBuilder<PartialObjectMeta<K>>
    where
        K::DynamicType: Default,
        K::Scope: MetadataScope,
    {
        Informer::builder(metadata_api(api, &K::DynamicType::default()))
    }

    /// [`Informer::metadata`] for resources whose `Api` was made with a
    /// dynamic type (`DynamicObject` and its `ApiResource`): `dyntype` must
    /// be the one `api` was made with.
    pub fn metadata_with(
        api: Api<K>,
        dyntype: &K::DynamicType,
    ) -> InformerBuilder<PartialObjectMeta<K>>
    where
        K::Scope: MetadataScope,
    {
        Informer::builder(metadata_api(api, dyntype))
    }
}

/// A running informer: subscribe actors, read the cache, wait for sync, stop.
///
/// ```no_run
/// # use std::time::Duration;
/// # use futures::StreamExt;
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// # use kinformer::{Informer, SubscribeOptions};
/// # async fn run(client: kube::Client) -> anyhow::Result<()> {
/// let informer = Informer::builder(kube::Api::<ConfigMap>::all(client)).start_on_own_thread()?;
/// let mut events = informer.stream(SubscribeOptions::default()).await?;
/// // Read the stream while waiting: a `Block` subscriber that is not read
/// // holds the informer back once its queue is full (the sync included).
/// let reader = tokio::spawn(async move {
///     while let Some(event) = events.next().await {
///         println!("{:?} {}", event.cause(), event.key());
///     }
/// });
/// informer.wait_for_sync(Duration::from_secs(60)).await?;
/// println!("{} cached", informer.store().snapshot().len());
/// informer.stop().await;
/// reader.abort();
/// # Ok(())
/// # }
/// ```
pub struct Informer<K: Object> {
    inner: Arc<Shared<K>>,
}

impl<K: Object> fmt::Debug for Informer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("synced", &self.has_synced())
            .field("stopped", &self.is_stopped())
            .field(
                "objects",
                &self.inner.stats.indexer.objects.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

impl<K: Object> fmt::Debug for InformerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerBuilder")
            .field("resource_url", &self.api.resource_url())
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field(
                "indexes",
                &self.indexes.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("default_resync", &self.default_resync)
            .field("skip_managed_fields", &self.skip_managed_fields)
            .finish_non_exhaustive()
    }
}

impl<K: Object> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Informer<K>
where
    K: Object,
{
    /// An informer over `api` (a resource, in one namespace or all).
    pub fn builder(api: Api<K>) -> InformerBuilder<K> {
        InformerBuilder {
            api,
            label_selector: None,
            field_selector: None,
            reflector: ReflectorOptions::default(),
            fifo: FifoOptions::default(),
            transform: None,
            indexes: Vec::new(),
            default_resync: Duration::ZERO,
            skip_managed_fields: false,
            reflector_thread: false,
            list_decoders: default_list_decoders(),
            persist: None,
            persist_schema: String::new(),
            compact: None,
        }
    }

    /// Subscribes an actor. Before or after sync alike, it first receives the
    /// cache as `Initial` adds (SI-5), then every change; it syncs on its own (HS-2).
    ///
    /// Every `subscribe*` call starts the subscription's listener actor on the
    /// calling thread, so it must be made inside an actix System or a tokio
    /// `LocalSet` (elsewhere: [`InformerError::NoActorRuntime`]), unless the
    /// informer runs on its own thread
    /// ([`InformerBuilder::start_on_own_thread`]): the listener then starts
    /// there, and any task may subscribe. The listener
    /// holds a strong address of the subscriber: the actor keeps receiving
    /// until it stops itself (`ctx.stop()`), panics, or is unsubscribed;
    /// dropping your own `Addr` is not enough.
    pub async fn subscribe(
        &self,
        recipient: Recipient<Event<K>>,
        options: SubscribeOptions,
    ) -> Result<Subscription<K>, InformerError> {
        self.subscribe_target(move || Target::Each(recipient), options)
            .await
    }

    /// Subscribes an actor whose handler finishes its work inside `handle`
    /// (`Result = ()`), with the same guarantees as [`Informer::subscribe`]:
    /// one event per call, in order. Up to [`SubscribeOptions::pipeline`]
    /// events wait in its mailbox, so the subscriber takes them without a
    /// round trip per event; [`Informer::subscribe`] sends the next event only
    /// when the previous call returned, which async handlers need.
    pub async fn subscribe_pipelined<A>(
        &self,
        subscriber: &Addr<A>,
        options: SubscribeOptions,
    ) -> Result<Subscription<K>, InformerError>
    where
        A: Actor<Context = Context<A>> + Handler<Event<K>, Result = ()>,
    {
        let recipient = subscriber.clone().recipient();
        let depth = options.pipeline;
        self.subscribe_target(move || Target::Pipelined { recipient, depth }, options)
            .await
    }

    /// Subscribes an actor that handles [`EventBatch`]es of up to
    /// [`SubscribeOptions::batch_size`] events per call, with the same
    /// guarantees as [`Informer::subscribe`]. For subscribers that keep up with
    /// high event rates: one handler call (one mailbox message and answer) per
    /// batch rather than per event. A batch holds what is queued when the
    /// previous call returns; nothing waits to fill one.
    pub async fn subscribe_batches(
        &self,
        recipient: Recipient<EventBatch<K>>,
        options: SubscribeOptions,
    ) -> Result<Subscription<K>, InformerError> {
        let max = options.batch_size;
        self.subscribe_target(move || Target::Batches { recipient, max }, options)
            .await
    }

    /// Subscribes a function called with each event, in order, by the
    /// listener itself: no actor message, channel or answer per event, so
    /// this is the cheapest way to take one event per call (BENCHMARKS.md,
    /// issue 24). Same guarantees as [`Informer::subscribe`]: the cache as
    /// `Initial` adds first, then every change; a call is handled once it
    /// returned, so the subscription syncs once the initial adds' calls did,
    /// and `Block` waits for the function.
    ///
    /// The function runs on the listener's thread (the informer's own
    /// thread with [`InformerBuilder::start_on_own_thread`], else the one
    /// that subscribed), between the informer's other work: whatever it
    /// does delays every subscriber there. Made for handlers that record,
    /// or hand work on to a workqueue or a channel, as client-go's handler
    /// functions do; anything slower belongs in an actor
    /// ([`Informer::subscribe`]) or a stream, which a slow consumer cannot
    /// hold up the others with. A replay or backlog is taken in turns of at
    /// most [`INLINE_TURN`](kinformer_actors::listener::INLINE_TURN) events.
    /// A panic in the function ends the subscription, as a panicking
    /// subscriber actor does: it is logged, [`Subscription::is_gone`] turns
    /// true and [`InformerStats::subscribers_lost`] counts it.
    ///
    /// An inline function cannot wait, so it cannot push into a bounded
    /// channel; an unbounded one would give up `Block`'s bound. Record what
    /// is to be done in a structure bounded by the objects, as a workqueue
    /// holds each key once:
    ///
    /// ```no_run
    /// # async fn f(informer: kinformer::Informer<k8s_openapi::api::core::v1::ConfigMap>)
    /// # -> Result<(), kinformer::InformerError> {
    /// use std::collections::BTreeSet;
    /// use std::sync::{Arc, Mutex};
    /// let dirty: Arc<Mutex<BTreeSet<kinformer::ObjectKey>>> = Arc::default();
    /// let marked = dirty.clone();
    /// let subscription = informer
    ///     .subscribe_inline(kinformer::SubscribeOptions::default(), move |event| {
    ///         marked.lock().unwrap().insert(event.key().clone());
    ///     })
    ///     .await?;
    /// // Elsewhere: take the keys marked so far and work on them.
    /// let keys = std::mem::take(&mut *dirty.lock().unwrap());
    /// # Ok(()) }
    /// ```
    pub async fn subscribe_inline<F>(
        &self,
        options: SubscribeOptions,
        handler: F,
    ) -> Result<Subscription<K>, InformerError>
    where
        F: FnMut(&Event<K>) + Send + 'static,
    {
        self.subscribe_target(move || Target::Inline(Box::new(handler)), options)
            .await
    }

    /// Subscribes a [`Stream`](futures::Stream) of events, with the same
    /// guarantees as [`Informer::subscribe`]; see [`EventStream`] (an event
    /// counts as handled once the consumer polls the stream again; dropping
    /// the stream unsubscribes). Up to [`SubscribeOptions::pipeline`] events wait in the
    /// stream's channel, so a consumer on another thread takes them without
    /// a round trip per event (`pipeline(1)`: one at a time; with
    /// `Coalesce`, events already in the channel are not merged any more).
    /// Made for tokio code: with an informer on its own
    /// thread ([`InformerBuilder::start_on_own_thread`]) it needs no actix
    /// runtime, and the stream is `Send`.
    ///
    /// ```no_run
    /// # async fn f(informer: kinformer::Informer<k8s_openapi::api::core::v1::ConfigMap>)
    /// # -> Result<(), kinformer::InformerError> {
    /// use futures::StreamExt;
    /// let mut events = informer.stream(kinformer::SubscribeOptions::default()).await?;
    /// while let Some(event) = events.next().await {
    ///     println!("{:?} {}", event.cause(), event.key());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn stream(&self, options: SubscribeOptions) -> Result<EventStream<K>, InformerError> {
        let depth = options.pipeline;
        self.subscribe_feed(move |feed| Target::Feed { feed, depth }, options)
            .await
    }

    /// Like [`Informer::stream`], yielding [`EventBatch`]es of up to
    /// [`SubscribeOptions::batch_size`] events, as [`Informer::subscribe_batches`]
    /// delivers them: for consumers of high event rates.
    pub async fn stream_batches(
        &self,
        options: SubscribeOptions,
    ) -> Result<EventStream<K, EventBatch<K>>, InformerError> {
        let max = options.batch_size;
        self.subscribe_feed(move |feed| Target::FeedBatches { feed, max }, options)
            .await
    }

    /// Subscribes a stream over a new feed, delivered as `target` says.
    async fn subscribe_feed<T: Send + 'static>(
        &self,
        target: impl FnOnce(FeedSender<T>) -> Target<K> + Send + 'static,
        options: SubscribeOptions,
    ) -> Result<EventStream<K, T>, InformerError> {
        let (feed, taken) = kinformer_actors::listener::feed();
        let subscription = self.subscribe_target(move || target(feed), options).await?;
        Ok(EventStream::new(subscription, taken))
    }

    /// Subscribes a closure, called with each event in order; the next call
    /// comes once the future it returned finished, with the same guarantees
    /// as [`Informer::subscribe`] (the subscription syncs once the futures of
    /// the initial adds finished; `Block` waits for slow futures). As for
    /// [`Informer::stream`], up to [`SubscribeOptions::pipeline`] events wait
    /// in the task's channel (`Coalesce` no longer merges those).
    ///
    /// The futures run in a task spawned on the caller's tokio runtime
    /// (elsewhere: [`InformerError::NoActorRuntime`]). A panic in the closure
    /// or its future ends the subscription, as a panicking subscriber actor
    /// does: it is logged, [`Subscription::is_gone`] turns true, and the
    /// informer counts it in [`InformerStats::subscribers_lost`]. The
    /// subscription lasts until [`Subscription::unsubscribe`] (dropping the
    /// handle does not end it) or until the informer's last handle is gone.
    ///
    /// ```no_run
    /// # async fn f(informer: kinformer::Informer<k8s_openapi::api::core::v1::ConfigMap>)
    /// # -> Result<(), kinformer::InformerError> {
    /// let options = kinformer::SubscribeOptions::default();
    /// let subscription = informer
    ///     .subscribe_fn(options, |event| async move {
    ///         println!("{:?} {}", event.cause(), event.key());
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn subscribe_fn<F, Fut>(
        &self,
        options: SubscribeOptions,
        f: F,
    ) -> Result<Subscription<K>, InformerError>
    where
        F: FnMut(Event<K>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| InformerError::NoActorRuntime)?;
        let (feed, taken) = kinformer_actors::listener::feed();
        let depth = options.pipeline;
        let subscription = self
            .subscribe_target(move || Target::Feed { feed, depth }, options)
            .await?;
        runtime.spawn(call_each(taken, f, subscription.id()));
        Ok(subscription)
    }

    /// Sets up a subscription delivering to `target()`, made where the
    /// listener starts: on the informer's own thread if it has one, else here.
    async fn subscribe_target(
        &self,
        target: impl FnOnce() -> Target<K> + Send + 'static,
        options: SubscribeOptions,
    ) -> Result<Subscription<K>, InformerError> {
        let Some(home) = &self.inner.home else {
            return self.subscribe_here(target, options).await;
        };
        let informer = self.clone();
        let result = run_at_home(
            home,
            move || async move { informer.subscribe_here(target, options).await },
            // The caller stopped waiting: undo, as `Undo` does here.
            |result| {
                if let Ok(subscription) = result {
                    subscription.unsubscribe_now();
                }
            },
        )
        .await;
        result?
    }

    async fn subscribe_here(
        &self,
        target: impl FnOnce() -> Target<K>,
        options: SubscribeOptions,
    ) -> Result<Subscription<K>, InformerError> {
        if self.is_stopped() {
            return Err(InformerError::Stopped);
        }
        // The listener is an actor started here, on the caller's thread: from
        // a plain tokio task that would panic inside actix.
        if !can_start_actors() {
            return Err(InformerError::NoActorRuntime);
        }
        let target = target();
        let id = SubscriberId(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let (synced_tx, synced) = watch::channel(false);
        let stats = Arc::new(ListenerStats::default());
        let listener = Listener::new(
            id,
            target,
            ListenerOptions {
                policy: options.policy,
                capacity: options.capacity,
            },
            synced_tx,
            stats.clone(),
        )
        .in_span(tracing::info_span!(parent: &self.inner.span, "listener", subscriber = %id));
        let subscribe = Subscribe::start(id, listener);
        let listener = subscribe.listener.clone();
        let period = options.resync.unwrap_or(self.inner.default_resync);
        // Until the `Subscription` is handed over, an error (the informer
        // stopped meanwhile) or a dropped future undoes what was set up.
        let undo = Undo {
            id,
            indexer: self.inner.indexer.clone(),
            resync: self.inner.resync.clone(),
            listener: Some(listener.clone()),
        };
        self.inner
            .indexer
            .send(subscribe)
            .await
            .map_err(|_| InformerError::Stopped)?;
        let resync_period = self
            .inner
            .resync
            .send(ScheduleResync { id, period })
            .await
            .map_err(|_| InformerError::Stopped)?;
        undo.disarm();
        // The listener owns the sender of `synced`: once it stops (its
        // subscriber's actor stopped, or an unsubscribe), forget it at once.
        // Weak addresses: this task must not keep a stopped informer alive.
        let mut listener_alive = synced.clone();
        let indexer = self.inner.indexer.downgrade();
        let resync = self.inner.resync.downgrade();
        actix::spawn(async move {
            while listener_alive.changed().await.is_ok() {}
            if let Some(indexer) = indexer.upgrade() {
                indexer.do_send(ListenerStopped(id));
            }
            if let Some(resync) = resync.upgrade() {
                resync.do_send(CancelResync(id));
            }
        });
        Ok(Subscription::new(SubscriptionParts {
            id,
            listener,
            indexer: self.inner.indexer.clone(),
            resync: self.inner.resync.clone(),
            resync_period,
            synced,
            stats,
            informer: self.inner.clone(),
        }))
    }

    /// True once [`Informer::stop`] was called (SI-4: it cannot be
    /// restarted), or once its actors are gone (the thread that hosted them
    /// stopped).
    pub fn is_stopped(&self) -> bool {
        *self.inner.stopped.borrow() || !self.inner.indexer.connected()
    }

    /// True once the initial list has been processed into the cache (DF-15).
    pub fn has_synced(&self) -> bool {
        *self.inner.synced.borrow()
    }

    /// Waits until [`Informer::has_synced`], at most `timeout`; `Stopped`
    /// when the informer is stopped before it synced. A subscriber with
    /// `Block` that is not consumed holds the informer back once its queue
    /// is full, the initial list included: read streams while waiting.
    pub async fn wait_for_sync(&self, timeout: Duration) -> Result<(), InformerError> {
        wait_synced(
            self.inner.synced.clone(),
            self.stopped(),
            timeout,
            InformerError::Stopped,
            || self.last_failure(),
        )
        .await
    }

    /// The last failed list or watch request since the last successful list,
    /// if any: why an informer that keeps retrying has not synced (a bad
    /// selector, a missing permission, an unreachable server). Once synced,
    /// a failed watch stays here until the next list succeeds (see its `at`);
    /// watch health is in [`InformerStats::watch_ends`].
    pub fn last_failure(&self) -> Option<RequestFailure> {
        self.inner.stats.reflector.last_failure.get()
    }

    /// Turns `true` once the informer is stopped.
    pub(crate) fn stopped(&self) -> watch::Receiver<bool> {
        self.inner.stopped()
    }

    /// The resourceVersion of the last list, or of the last watch event the
    /// DeltaFIFO accepted (client-go's `LastSyncResourceVersion`): it can be
    /// ahead of the `Store` by the batches still queued.
    pub fn last_sync_resource_version(&self) -> String {
        self.inner.rv.borrow().clone()
    }

    /// The read-only cache, with its indexes.
    pub fn store(&self) -> Store<K> {
        Store::new(self.inner.reader.clone(), self.inner.synced.clone())
    }

    /// The informer's counters.
    pub fn stats(&self) -> InformerStats {
        let s = &self.inner.stats;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        InformerStats {
            objects: s.indexer.objects.load(Ordering::Relaxed),
            lists: r(&s.reflector.lists),
            relists: r(&s.reflector.relists),
            watch_restarts: r(&s.reflector.watch_restarts),
            events: r(&s.reflector.events),
            failures: r(&s.reflector.failures),
            reflector_panics: r(&s.reflector.panics),
            transform_panics: r(&s.reflector.transform_panics),
            backoff_ms: r(&s.reflector.backoff_ms),
            probes: r(&s.reflector.probes),
            added: r(&s.indexer.added),
            updated: r(&s.indexer.updated),
            deleted: r(&s.indexer.deleted),
            tombstones: r(&s.indexer.tombstones),
            queued_deltas: s.fifo.queued_deltas.load(Ordering::Relaxed),
            queued_keys: s.fifo.queued_keys.load(Ordering::Relaxed),
            fifo_saturated: s.fifo.saturated.load(Ordering::Relaxed),
            watch_ends: WatchEnds {
                closed: r(&s.reflector.watch_ends[WatchEndReason::Closed as usize]),
                expired: r(&s.reflector.watch_ends[WatchEndReason::Expired as usize]),
                throttled: r(&s.reflector.watch_ends[WatchEndReason::Throttled as usize]),
                refused: r(&s.reflector.watch_ends[WatchEndReason::Refused as usize]),
                transport: r(&s.reflector.watch_ends[WatchEndReason::Transport as usize]),
                malformed: r(&s.reflector.watch_ends[WatchEndReason::Malformed as usize]),
                other: r(&s.reflector.watch_ends[WatchEndReason::Other as usize]),
            },
            subscribers: s.indexer.listeners.load(Ordering::Relaxed),
            subscribers_lost: r(&s.indexer.listeners_lost),
            index_errors: r(&s.indexer.index_errors),
            list_progress: (r(&s.reflector.list_progress), r(&s.reflector.list_total)),
            warm_start: s.reflector.warm_start.get(),
            restored_objects: r(&s.reflector.restored_objects),
            restore_ms: r(&s.reflector.restore_ms),
            compact: self.inner.reader.snapshot().compact_stats(),
        }
    }

    /// The state of the on-disk snapshot, if the informer persists
    /// (`InformerBuilder::persist`): its file, the resourceVersion of its
    /// last commit, what was written, and why it stopped, if it did.
    pub fn persistence(&self) -> Option<PersistStatus> {
        self.inner.persist.as_ref().map(Persistence::status)
    }

    /// Stops listing, watching and resyncing for good. What is already
    /// queued is still delivered; nothing new arrives. An informer cannot be
    /// restarted (SI-4). Dropping every handle to it (each `Informer` clone
    /// and each [`Subscription`]) stops it too.
    ///
    /// An informer that persists commits what its snapshot writer was
    /// offered and closes the file before this returns (a new informer may
    /// then open it).
    pub async fn stop(&self) {
        self.inner.stop();
        let _ = self.inner.reflector.send(StopReflector).await;
        if let Some(persist) = &self.inner.persist {
            persist.finish().await;
        }
    }
}
