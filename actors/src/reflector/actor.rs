//! The Reflector actor: a supervised shell that drives [`ReflectorState`]
//! with real requests and feeds the DeltaFIFO.
//!
//! The list-then-watch loop runs as one future spawned in the actor. It asks
//! the state machine what to do after every outcome. When a relist is needed
//! the loop ends and the actor stops itself; its `Supervisor` restarts it, and
//! `started` relists after the backoff delay. The state (last RV, backoff)
//! lives in the actor struct, which the supervisor keeps across restarts. A
//! panic in the loop is caught and turned into such a restart.
//!
//! Back-pressure: every batch of watch events is sent with `send(..).await`;
//! the DeltaFIFO answers only when it has room, and while the loop waits it
//! does not poll the watch stream, so TCP pushes back on the server.

use std::cell::RefCell;
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use futures::{FutureExt, Stream, StreamExt};
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::messages::StopReflector;
use super::source::{ListWatch, SourceEvent};
use super::state::{Failure, Next, ReflectorOptions, ReflectorState, WatchEnd};
use crate::delta_fifo::{DeltaFifo, Enqueue, FifoClosed, Replace, WatchDelta};
use crate::indexer::{CacheReader, Snapshot};
use crate::key::ObjectKey;

/// Most watch events sent to the DeltaFIFO in one message.
const WATCH_BATCH: usize = 256;

/// A function applied to every object once, at decode time, before it is shared.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// Live counters of the Reflector, readable from any thread.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Lists made (the first one included).
    pub lists: AtomicU64,
    /// Lists made after the first one.
    pub relists: AtomicU64,
    /// Watches opened after the first one.
    pub watch_restarts: AtomicU64,
    /// Watch events received (bookmarks included).
    pub events: AtomicU64,
    /// Failures, any kind.
    pub failures: AtomicU64,
    /// Panics caught in the list-watch loop.
    pub panics: AtomicU64,
    /// Objects received by the list in progress, and the total the server announced.
    pub list_progress: AtomicU64,
    /// The total the server announced for the list in progress (0 when unknown).
    pub list_total: AtomicU64,
    /// Total milliseconds spent in backoff waits.
    pub backoff_ms: AtomicU64,
    /// Watches that ended or failed to open, by [`WatchEndReason`] (indexed by `as usize`).
    pub watch_ends: [AtomicU64; WatchEndReason::ALL.len()],
    /// The last failed request since the last successful list (give the same
    /// `Arc` to the [`ListWatch`] as its `failures`).
    pub last_failure: Arc<super::source::LastFailure>,
}

/// Why a watch ended or could not be opened (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEndReason {
    /// The server closed it cleanly (timeout, or on purpose).
    Closed,
    /// 410 Gone / Expired (history compacted).
    Expired,
    /// 429 Too Many Requests.
    Throttled,
    /// Connection refused.
    Refused,
    /// A line that could not be decoded.
    Malformed,
    /// Any other error.
    Other,
}

impl WatchEndReason {
    /// Every reason, in index order.
    pub const ALL: [WatchEndReason; 6] = [
        WatchEndReason::Closed,
        WatchEndReason::Expired,
        WatchEndReason::Throttled,
        WatchEndReason::Refused,
        WatchEndReason::Malformed,
        WatchEndReason::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEndReason::Closed => "closed",
            WatchEndReason::Expired => "expired",
            WatchEndReason::Throttled => "throttled",
            WatchEndReason::Refused => "refused",
            WatchEndReason::Malformed => "malformed",
            WatchEndReason::Other => "other",
        }
    }

    fn of_failure(failure: &Failure) -> Self {
        match failure {
            Failure::Expired | Failure::TooLargeResourceVersion => WatchEndReason::Expired,
            Failure::TooManyRequests { .. } => WatchEndReason::Throttled,
            Failure::ConnectionRefused => WatchEndReason::Refused,
            Failure::Malformed => WatchEndReason::Malformed,
            Failure::Unsupported | Failure::Other => WatchEndReason::Other,
        }
    }

    fn of_end(end: &WatchEnd) -> Self {
        match end {
            WatchEnd::Closed => WatchEndReason::Closed,
            WatchEnd::Failed(f) => Self::of_failure(f),
        }
    }
}

impl ReflectorStats {
    fn watch_ended(&self, reason: WatchEndReason) {
        self.watch_ends[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The Reflector's last synced resourceVersion, published for the informer handle.
pub type ResourceVersionWatch = watch::Receiver<String>;

/// The Reflector actor for objects of type `K`.
pub struct Reflector<K: Resource + Send + Sync + 'static> {
    source: ListWatch<K>,
    fifo: Addr<DeltaFifo<K>>,
    transform: Option<Transform<K>>,
    cache: Option<CacheReader<K>>,
    state: Rc<RefCell<ReflectorState>>,
    pending_delay: Option<Duration>,
    shutting_down: bool,
    rv: watch::Sender<String>,
    stats: Arc<ReflectorStats>,
    span: tracing::Span,
}

enum Exit {
    Relist(Duration),
    FifoClosed,
}

impl<K> Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A Reflector listing and watching `source` into `fifo`.
    pub fn new(
        source: ListWatch<K>,
        fifo: Addr<DeltaFifo<K>>,
        options: ReflectorOptions,
        transform: Option<Transform<K>>,
        rv: watch::Sender<String>,
        stats: Arc<ReflectorStats>,
    ) -> Self {
        Reflector {
            source,
            fifo,
            transform,
            cache: None,
            state: Rc::new(RefCell::new(ReflectorState::new(options))),
            pending_delay: None,
            shutting_down: false,
            rv,
            stats,
            span: tracing::Span::none(),
        }
    }

    /// Reads the informer's cache during relists: an object listed with the
    /// resourceVersion it has in the cache is not kept twice; the cached `Arc`
    /// is reused and the fresh copy freed at once. A relist then holds only
    /// what changed, not a second copy of the store (client-go and
    /// kube-runtime hold two).
    pub fn with_cache(mut self, cache: CacheReader<K>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Runs the list-watch loop inside `span` (e.g. one naming the informer).
    pub fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }
}

/// The cached object under `key`, when it has `obj`'s (non-empty) resourceVersion.
fn unchanged<K: Resource>(cache: &Snapshot<K>, key: &ObjectKey, obj: &K) -> Option<Arc<K>> {
    let rv = obj
        .meta()
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())?;
    cache
        .get(key)
        .filter(|old| old.meta().resource_version.as_deref() == Some(rv))
}

/// Per key deleted during a streaming list, the number of items received
/// before its latest delete.
type DeletedAt = std::collections::HashMap<ObjectKey, usize, foldhash::fast::RandomState>;

/// The items not deleted after they arrived.
fn without_deleted<K: Resource>(items: Vec<Arc<K>>, deleted_at: &DeletedAt) -> Vec<Arc<K>> {
    items
        .into_iter()
        .enumerate()
        .filter(|(pos, o)| {
            ObjectKey::of(&**o)
                .ok()
                .and_then(|k| deleted_at.get(&k))
                .is_none_or(|&at| *pos >= at)
        })
        .map(|(_, o)| o)
        .collect()
}

fn jitter() -> f64 {
    rand::random::<f64>()
}

struct Loop<K: Resource + Send + Sync + 'static> {
    source: ListWatch<K>,
    fifo: Addr<DeltaFifo<K>>,
    transform: Option<Transform<K>>,
    cache: Option<CacheReader<K>>,
    state: Rc<RefCell<ReflectorState>>,
    rv: watch::Sender<String>,
    stats: Arc<ReflectorStats>,
}

impl<K> Loop<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn share(&self, obj: K) -> Arc<K> {
        Arc::new(match &self.transform {
            Some(t) => t(obj),
            None => obj,
        })
    }

    /// The cache as the list starts, when it holds anything to reuse.
    fn reusable(&self) -> Option<Snapshot<K>> {
        self.cache
            .as_ref()
            .map(CacheReader::snapshot)
            .filter(|s| !s.is_empty())
    }

    /// Shares a listed object, reusing the cached `Arc` when the cache holds
    /// the same key at the same (non-empty) resourceVersion.
    fn share_listed(&self, obj: K, cached: Option<&Snapshot<K>>) -> Arc<K> {
        if let Some(snapshot) = cached
            && let Ok(key) = ObjectKey::of(&obj)
            && let Some(old) = unchanged(snapshot, &key, &obj)
        {
            return old;
        }
        self.share(obj)
    }

    fn publish_rv(&self) {
        let rv = self.state.borrow().last_sync_resource_version().to_owned();
        self.rv.send_if_modified(|cur| {
            let changed = *cur != rv;
            *cur = rv;
            changed
        });
    }

    async fn backoff(&self, d: Duration) {
        self.stats.backoff_ms.fetch_add(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        tokio::time::sleep(d).await;
    }

    async fn run(self) -> Exit {
        // List phase (R-8 .. R-13), or a streaming list (R-24 .. R-27).
        let mut handed_over = None;
        loop {
            let req = self.state.borrow().list_request();
            self.stats.lists.fetch_add(1, Ordering::Relaxed);
            let outcome = if req.streaming {
                self.streaming_list().await.map(|(items, rv, stream)| {
                    handed_over = Some(stream);
                    (items, rv, false)
                })
            } else {
                let stats = self.stats.clone();
                // Shared page by page: the list never holds decoded objects and
                // their shared form at once (measured: -210 MB at 100k Pods),
                // and unchanged objects are the cached ones.
                let cached = self.reusable();
                self.source
                    .list_with(
                        &req,
                        move |n, total| {
                            stats.list_progress.store(n, Ordering::Relaxed);
                            stats
                                .list_total
                                .store(total.unwrap_or(0), Ordering::Relaxed);
                        },
                        |o| self.share_listed(o, cached.as_ref()),
                    )
                    .await
                    .map(|l| (l.items, l.resource_version, l.paginated))
            };
            match outcome {
                Ok((objects, rv, paginated)) => {
                    if self
                        .fifo
                        .send(Replace {
                            objects,
                            resource_version: rv.clone(),
                        })
                        .await
                        .is_err()
                    {
                        return Exit::FifoClosed;
                    }
                    let mut st = self.state.borrow_mut();
                    st.list_succeeded(&rv, paginated);
                    self.stats.last_failure.clear();
                    self.stats.relists.store(st.relists(), Ordering::Relaxed);
                    drop(st);
                    self.publish_rv();
                    break;
                }
                Err(failure) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    let next = self.state.borrow_mut().list_failed(
                        &failure,
                        req.streaming,
                        Instant::now().into_std(),
                        jitter(),
                    );
                    match next {
                        Next::List => continue,
                        Next::ListAfter(d) | Next::WatchAfter(d) => return Exit::Relist(d),
                        Next::Watch => return Exit::Relist(Duration::ZERO),
                    }
                }
            }
        }
        // Watch phase (R-15 .. R-19).
        loop {
            let now = Instant::now().into_std();
            let end = match handed_over.take() {
                Some(stream) => self.consume(stream).await,
                None => {
                    let req = self.state.borrow_mut().watch_request(now, jitter());
                    self.stats
                        .watch_restarts
                        .store(self.state.borrow().watch_restarts(), Ordering::Relaxed);
                    match self.source.watch(&req, false).await {
                        Ok(stream) => self.consume(stream).await,
                        Err(failure) => {
                            self.stats.failures.fetch_add(1, Ordering::Relaxed);
                            self.stats.watch_ended(WatchEndReason::of_failure(&failure));
                            let next = self.state.borrow_mut().watch_open_failed(
                                &failure,
                                Instant::now().into_std(),
                                jitter(),
                            );
                            match next {
                                Next::WatchAfter(d) => {
                                    self.backoff(d).await;
                                    continue;
                                }
                                Next::ListAfter(d) => return Exit::Relist(d),
                                Next::List | Next::Watch => return Exit::Relist(Duration::ZERO),
                            }
                        }
                    }
                }
            };
            let end = match end {
                Ok(end) => end,
                Err(closed) => return closed,
            };
            if let WatchEnd::Failed(_) = end {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
            }
            self.stats.watch_ended(WatchEndReason::of_end(&end));
            let next =
                self.state
                    .borrow_mut()
                    .watch_ended(&end, Instant::now().into_std(), jitter());
            match next {
                Next::Watch => {}
                Next::WatchAfter(d) => self.backoff(d).await,
                Next::ListAfter(d) => return Exit::Relist(d),
                Next::List => return Exit::Relist(Duration::ZERO),
            }
        }
    }

    /// Streams initial events into a temporary list until the end bookmark.
    #[allow(clippy::type_complexity)]
    async fn streaming_list(
        &self,
    ) -> Result<
        (
            Vec<Arc<K>>,
            String,
            std::pin::Pin<Box<dyn Stream<Item = Result<SourceEvent<K>, Failure>> + Send>>,
        ),
        Failure,
    > {
        let now = Instant::now().into_std();
        let req = self.state.borrow_mut().streaming_request(now, jitter());
        let started = Instant::now();
        let mut events = 0u64;
        let mut stream = self.source.watch(&req, true).await?;
        // Objects in arrival order (the server's key order, as in a paginated
        // list), in a plain Vec: keeping a map of 100k keys cost about 30 % of a
        // 100k-ConfigMap streaming sync (measured). A key seen twice is left to
        // the Replace, which queues both states under the key, as client-go's
        // does (DF-T19); a delete before the end bookmark, which real servers
        // do not send, is applied at the end.
        let mut items: Vec<Arc<K>> = Vec::new();
        let mut deleted_at = DeletedAt::default();
        let cached = self.reusable();
        while let Some(event) = stream.next().await {
            events += 1;
            let event = event.inspect_err(|failure| {
                self.stats.last_failure.record(
                    "list",
                    &format_args!("the streaming list ended with {failure:?}"),
                );
            })?;
            match event {
                SourceEvent::Added(o) | SourceEvent::Modified(o) => {
                    let reused = cached.as_ref().and_then(|c| {
                        let k = ObjectKey::of(&o).ok()?;
                        unchanged(c, &k, &o)
                    });
                    items.push(reused.unwrap_or_else(|| self.share(o)));
                    self.stats
                        .list_progress
                        .store(items.len() as u64, Ordering::Relaxed);
                }
                SourceEvent::Deleted(o) => {
                    if let Ok(k) = ObjectKey::of(&o) {
                        deleted_at.insert(k, items.len());
                    }
                }
                SourceEvent::Bookmark {
                    resource_version,
                    initial_events_end: true,
                } => {
                    if !deleted_at.is_empty() {
                        items = without_deleted(items, &deleted_at);
                    }
                    return Ok((items, resource_version, Box::pin(stream)));
                }
                SourceEvent::Bookmark { .. } => {}
            }
        }
        // Closed before the end bookmark. A server without streaming lists
        // closes at once with nothing (R-26: then fall back to lists); a stream
        // cut short later is retried as a streaming list after a backoff.
        if events == 0 && started.elapsed() < super::state::VERY_SHORT_WATCH {
            Err(Failure::Unsupported)
        } else {
            self.stats.last_failure.record(
                "list",
                &"the streaming list was closed before its initial-events-end bookmark",
            );
            Err(Failure::Other)
        }
    }

    /// Adds one stream item to the batch; returns how the watch ended, if it did.
    fn absorb(
        &self,
        item: Option<Result<SourceEvent<K>, Failure>>,
        batch: &mut Vec<WatchDelta<K>>,
        rvs: &mut Vec<String>,
    ) -> Option<WatchEnd> {
        let event = match item {
            None => return Some(WatchEnd::Closed),
            Some(Err(f)) => return Some(WatchEnd::Failed(f)),
            Some(Ok(event)) => event,
        };
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        let rv_of = |o: &K| o.meta().resource_version.clone().unwrap_or_default();
        match event {
            SourceEvent::Added(o) => {
                rvs.push(rv_of(&o));
                batch.push(WatchDelta::Added(self.share(o)));
            }
            SourceEvent::Modified(o) => {
                rvs.push(rv_of(&o));
                batch.push(WatchDelta::Modified(self.share(o)));
            }
            SourceEvent::Deleted(o) => {
                rvs.push(rv_of(&o));
                batch.push(WatchDelta::Deleted(self.share(o)));
            }
            SourceEvent::Bookmark {
                resource_version, ..
            } => rvs.push(resource_version),
        }
        None
    }

    /// Reads a watch stream in batches until it ends; `Err` when the DeltaFIFO is gone.
    async fn consume(
        &self,
        mut stream: impl Stream<Item = Result<SourceEvent<K>, Failure>> + Unpin,
    ) -> Result<WatchEnd, Exit> {
        let mut batch = Vec::new();
        let mut rvs: Vec<String> = Vec::with_capacity(WATCH_BATCH);
        loop {
            let first = stream.next().await;
            let mut end = self.absorb(first, &mut batch, &mut rvs);
            // Bookmarks count too: a run of them must not grow `rvs` unbounded
            // nor keep the loop from yielding.
            while end.is_none() && rvs.len() < WATCH_BATCH {
                match stream.next().now_or_never() {
                    Some(item) => end = self.absorb(item, &mut batch, &mut rvs),
                    None => break,
                }
            }
            if !batch.is_empty() {
                // The next batch is sized like this one: at a low rate each
                // event is a batch of its own, and a fresh 256-slot buffer
                // per event was a large allocation per event (glibc then
                // consolidates its free lists, ~4 % of the CPU with 100
                // subscribers at 1000 events/s).
                let next = Vec::with_capacity(batch.len());
                let events = std::mem::replace(&mut batch, next);
                match self.fifo.send(Enqueue(events)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(FifoClosed)) | Err(_) => return Err(Exit::FifoClosed),
                }
            }
            if !rvs.is_empty() {
                let mut st = self.state.borrow_mut();
                for rv in rvs.drain(..) {
                    st.event_processed(&rv);
                }
                drop(st);
                self.publish_rv();
            }
            if let Some(end) = end {
                return Ok(end);
            }
        }
    }
}

impl<K> Actor for Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let delay = self.pending_delay.take().unwrap_or_default();
        let lp = Loop {
            source: self.source.clone(),
            fifo: self.fifo.clone(),
            transform: self.transform.clone(),
            cache: self.cache.clone(),
            state: self.state.clone(),
            rv: self.rv.clone(),
            stats: self.stats.clone(),
        };
        let stats = self.stats.clone();
        let state = self.state.clone();
        let fut = async move {
            if !delay.is_zero() {
                tracing::info!(?delay, "relisting after backoff");
                stats.backoff_ms.fetch_add(
                    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
                tokio::time::sleep(delay).await;
            }
            match AssertUnwindSafe(lp.run()).catch_unwind().await {
                Ok(exit) => exit,
                Err(_) => {
                    stats.panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        "panic in the reflector's list-watch loop; relisting after backoff"
                    );
                    stats
                        .last_failure
                        .record("list", &"the list-watch loop panicked (a transform?)");
                    // Through the state machine, so a panic that repeats backs off
                    // like any other failure instead of relisting at a fixed rate.
                    let next = state.borrow_mut().list_failed(
                        &Failure::Other,
                        false,
                        Instant::now().into_std(),
                        jitter(),
                    );
                    match next {
                        Next::ListAfter(d) | Next::WatchAfter(d) => Exit::Relist(d),
                        Next::List | Next::Watch => Exit::Relist(Duration::ZERO),
                    }
                }
            }
        };
        fut.instrument(self.span.clone())
            .into_actor(self)
            .map(|exit, act, ctx| match exit {
                Exit::Relist(delay) => {
                    act.pending_delay = Some(delay);
                    ctx.stop();
                }
                Exit::FifoClosed => {
                    tracing::info!("delta fifo is gone; reflector stops");
                    act.shutting_down = true;
                    ctx.stop();
                }
            })
            .spawn(ctx);
    }
}

impl<K> Supervised for Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn restarting(&mut self, _: &mut Context<Self>) {
        if !self.shutting_down {
            tracing::debug!("supervisor restarts the reflector");
        }
    }
}

impl<K> Handler<StopReflector> for Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    type Result = ();

    fn handle(&mut self, _: StopReflector, ctx: &mut Context<Self>) {
        self.shutting_down = true;
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        crate::testing::configmap(name, rv)
    }

    /// `watch_ends` is indexed by `reason as usize`, and metrics iterate
    /// `ALL`: each reason in `ALL` sits at its own index, and the last
    /// variant closes it (a reason added at the end must be added to `ALL`).
    #[test]
    fn every_watch_end_reason_is_listed_at_its_index() {
        for (i, reason) in WatchEndReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i, "{reason:?}");
        }
        assert_eq!(
            WatchEndReason::ALL.last().copied(),
            Some(WatchEndReason::Other)
        );
    }

    #[test]
    fn a_streaming_list_drops_what_was_deleted_after_it_arrived() {
        // a1 b1 [delete a] c1 a2 [delete c] b2
        let items = vec![
            cm("a", "1"),
            cm("b", "1"),
            cm("c", "1"),
            cm("a", "2"),
            cm("b", "2"),
        ];
        let mut deleted_at = DeletedAt::default();
        deleted_at.insert(ObjectKey::new(Some("ns"), "a"), 2);
        deleted_at.insert(ObjectKey::new(Some("ns"), "c"), 4);
        let kept: Vec<(String, String)> = without_deleted(items, &deleted_at)
            .iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap(),
                    o.metadata.resource_version.clone().unwrap(),
                )
            })
            .collect();
        let want = [("b", "1"), ("a", "2"), ("b", "2")];
        assert_eq!(kept, want.map(|(n, v)| (n.to_string(), v.to_string())));
    }
}
