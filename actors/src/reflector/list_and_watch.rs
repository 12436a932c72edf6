//! The Reflector loop, client-go's `ListAndWatch`: list (or stream the
//! initial events), hand the result to the sink, then watch from its
//! resourceVersion until a relist is needed. The rules are
//! [`ReflectorState`]'s; this loop makes the requests it asks for, over any
//! [`ListerWatcher`], and feeds any [`Sink`].
//!
//! Back-pressure: every batch is handed to the sink with `.await`; while
//! the sink has no room the loop does not poll the watch stream, so TCP
//! pushes back on the server.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::Resource;
use tokio::sync::watch;
use tokio::time::Instant;

use super::event::SourceEvent;
use super::failure::Failure;
use super::pager::list_pages;
use super::recovery::ProbeVerdict;
use super::sharing::{Sharing, Transform};
use super::sink::Sink;
use super::source::{ListerWatcher, WatchStream};
use super::state::{Next, ReflectorState, WatchEnd};
use super::stats::{ReflectorStats, WatchEndReason};
use super::streaming_list::{Initial, initial_events};
use super::warm_start::{RestoreFn, Restored, RestoredPage, WarmStart};
use crate::delta_fifo::WatchDelta;
use crate::indexer::CacheReader;

/// Which watch delta a shared object becomes.
type MakeDelta<K> = fn(Arc<K>) -> WatchDelta<K>;

/// Most watch events handed to the sink in one batch.
const WATCH_BATCH: usize = 256;

/// A completed streaming list: the items not handed on as pages, the end
/// bookmark's resourceVersion, the stream (it goes on as the watch), and
/// how many items went on as pages before.
type StreamedList<K> = (Vec<Arc<K>>, String, WatchStream<K>, usize);

/// How many times in a row a streaming list cut short before its
/// initial-events-end bookmark is retried at once; one more cut is a
/// failure, backed off, so a server that cuts every stream is not hammered.
pub const CUT_SHORT_RETRIES: u32 = 3;

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// A relist is needed, after this delay.
    Relist(Duration),
    /// The sink is gone: stop for good.
    SinkClosed,
}

/// One run of the Reflector loop, from a list to the next relist.
pub struct ListAndWatch<K: Resource, S, F> {
    source: S,
    sink: F,
    sharing: Sharing<K>,
    /// Shared with the actor, which keeps it across runs (last RV, backoff).
    state: Rc<RefCell<ReflectorState>>,
    rv: watch::Sender<String>,
    stats: Arc<ReflectorStats>,
    /// Uniform samples in `[0, 1)` for the state machine's jitter.
    jitter: fn() -> f64,
    /// A snapshot to start from instead of the first list.
    restore: Option<RestoreFn<K>>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<K, S, F> ListAndWatch<K, S, F>
where
    K: crate::Object,
    S: ListerWatcher<K>,
    F: Sink<K>,
{
    /// A run listing and watching `source` into `sink`, following `state`'s
    /// rules, publishing the last synced resourceVersion on `rv`.
    pub fn new(
        source: S,
        sink: F,
        state: Rc<RefCell<ReflectorState>>,
        rv: watch::Sender<String>,
        stats: Arc<ReflectorStats>,
    ) -> Self {
        ListAndWatch {
            source,
            sink,
            sharing: Sharing {
                transform: None,
                cache: None,
                stats: stats.clone(),
            },
            state,
            rv,
            stats,
            jitter: rand::random::<f64>,
            restore: None,
        }
    }

    /// Starts from the snapshot `restore` reads, if it reads one, instead of
    /// listing ([`warm_start`](super::warm_start)).
    pub fn restore(mut self, restore: Option<RestoreFn<K>>) -> Self {
        self.restore = restore;
        self
    }

    /// Applies `transform` to every object once, before it is shared.
    pub fn transform(mut self, transform: Option<Transform<K>>) -> Self {
        self.sharing.transform = transform;
        self
    }

    /// Reuses `cache`'s objects during relists (see [`Sharing`]).
    pub fn cache(mut self, cache: Option<CacheReader<K>>) -> Self {
        self.sharing.cache = cache;
        self
    }

    /// Draws the jitter from `jitter` (uniform in `[0, 1)`; tests fix it).
    pub fn jitter(mut self, jitter: fn() -> f64) -> Self {
        self.jitter = jitter;
        self
    }

    fn now() -> std::time::Instant {
        Instant::now().into_std()
    }

    fn publish_rv(&self) {
        let rv = self.state.borrow().last_sync_resource_version().to_owned();
        self.rv.send_if_modified(|cur| {
            let changed = *cur != rv;
            *cur = rv;
            changed
        });
    }

    /// Waits `d` (a backoff). After a failure without an answer, probes the
    /// server meanwhile and ends the wait early once it is back
    /// ([`recovery`](super::recovery)).
    async fn backoff(&mut self, d: Duration) {
        let start = Instant::now();
        let deadline = start + d;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let interval =
                self.state
                    .borrow()
                    .probe_interval(Self::now(), remaining, (self.jitter)());
            let Some(at) = interval.map(|i| Instant::now() + i) else {
                tokio::time::sleep_until(deadline).await;
                break;
            };
            tokio::time::sleep_until(at).await;
            let probe = tokio::time::timeout_at(deadline, self.source.probe()).await;
            let Ok(result) = probe else {
                break;
            };
            let verdict = self.state.borrow_mut().probed(&result);
            self.stats.probes.fetch_add(1, Ordering::Relaxed);
            match verdict {
                ProbeVerdict::Again => {}
                ProbeVerdict::Back => {
                    tracing::info!("the server answers again; the backoff is cut short");
                    break;
                }
                ProbeVerdict::Stop => {
                    tokio::time::sleep_until(deadline).await;
                    break;
                }
            }
        }
        let waited = start.elapsed();
        self.stats
            .backoff_ms
            .fetch_add(millis(waited), Ordering::Relaxed);
    }

    /// The one log line of a failed list or watch request: what failed (as
    /// recorded for `last_failure`) and when it is tried again.
    fn log_failure(&self, failure: &Failure, next: &Next) {
        let what = match self.stats.last_failure.get() {
            Some(recorded) => recorded.to_string(),
            None => format!("request failed: {failure:?}"),
        };
        match next {
            Next::ListAfter(d) | Next::WatchAfter(d) => {
                tracing::warn!(retry_in = ?d, "{what}; retrying in {d:?}");
            }
            Next::List | Next::Watch => tracing::warn!("{what}; retrying now"),
        }
    }

    /// Waits `delay` (a relist's backoff), lists, then watches until a relist
    /// is needed or the sink is gone.
    pub async fn run(mut self, delay: Duration) -> Exit {
        if let Some(restore) = self.restore.take() {
            let started = Instant::now();
            if let Some(restored) = restore().await {
                match self.resume(restored, started).await {
                    Err(exit) => return exit,
                    Ok(true) => return self.watch(None).await,
                    // Cut short: what was restored stays, as a list's pages
                    // would, and the list below completes it.
                    Ok(false) => self.state.borrow_mut().failed_after_pages(),
                }
            }
        }
        if !delay.is_zero() {
            tracing::info!(?delay, "relisting after backoff");
            self.backoff(delay).await;
        }
        let handed_over = match self.list().await {
            Ok(handed_over) => handed_over,
            Err(exit) => return exit,
        };
        self.watch(handed_over).await
    }

    /// Hands a restored snapshot to the sink page by page, in place of the
    /// first list; the watch then starts from its resourceVersion (`true`).
    /// `false`: the snapshot turned out damaged after its first pages, and
    /// the run lists instead.
    async fn resume(&mut self, restored: Restored<K>, started: Instant) -> Result<bool, Exit> {
        let Restored {
            resource_version,
            mut pages,
        } = restored;
        let mut count = 0u64;
        let mut first = true;
        let taken = loop {
            let page = match pages.recv().await {
                Some(RestoredPage::Objects(page)) => page,
                Some(RestoredPage::Complete(taken)) => break taken,
                damaged => {
                    let why = match damaged {
                        Some(RestoredPage::Damaged(why)) => why,
                        _ => "the snapshot's reader stopped".to_owned(),
                    };
                    tracing::warn!(restored = count, %why, "the snapshot could not be read on; listing");
                    return Ok(false);
                }
            };
            count += page.len() as u64;
            let was_first = std::mem::replace(&mut first, false);
            self.state.borrow_mut().pages_handed();
            if self.sink.restore_page(page, was_first).await.is_err() {
                return Err(Exit::SinkClosed);
            }
        };
        if self
            .sink
            .restore_end(resource_version.clone(), !first)
            .await
            .is_err()
        {
            return Err(Exit::SinkClosed);
        }
        taken.answer();
        self.state.borrow_mut().restored(&resource_version);
        self.publish_rv();
        let took = started.elapsed();
        self.stats.restored_objects.store(count, Ordering::Relaxed);
        self.stats.restore_ms.store(millis(took), Ordering::Relaxed);
        self.stats.warm_start.set(WarmStart::Restored);
        tracing::info!(objects = count, rv = %resource_version, ?took, "restored the cache from its snapshot; watching from its resourceVersion");
        Ok(true)
    }

    /// The list phase (R-8 .. R-13), or a streaming list (R-24 .. R-27),
    /// whose stream it hands over to the watch phase.
    async fn list(&mut self) -> Result<Option<WatchStream<K>>, Exit> {
        loop {
            let req = self.state.borrow().list_request();
            self.stats.lists.fetch_add(1, Ordering::Relaxed);
            let skipped_before = self.stats.transform_panics.load(Ordering::Relaxed);
            let mut handed_over = None;
            let outcome = if req.streaming {
                self.streaming_list().await.map(|listed| match listed {
                    Some((items, rv, stream, handed_out)) => {
                        handed_over = Some(stream);
                        (items, rv, false, handed_out > 0, false)
                    }
                    None => (Vec::new(), String::new(), false, false, true),
                })
            } else {
                let stats = &self.stats;
                let sharing = &self.sharing;
                let sink = &self.sink;
                let state = &self.state;
                // Shared page by page, and unchanged objects are the cached ones.
                let cached = sharing.reusable();
                // Each page but the last goes to the sink as soon as it is
                // read: the list is cached while it is read, never held whole.
                let mut first = true;
                list_pages(
                    &mut self.source,
                    &req,
                    |n, total| {
                        stats.list_progress.store(n, Ordering::Relaxed);
                        stats
                            .list_total
                            .store(total.unwrap_or(0), Ordering::Relaxed);
                    },
                    |o| sharing.share_listed(o, cached.as_ref()),
                    async |page| {
                        let was_first = std::mem::replace(&mut first, false);
                        state.borrow_mut().pages_handed();
                        sink.list_page(page, was_first).await.is_ok()
                    },
                )
                .await
                .map(|l| {
                    let continues = l.handed_out > 0;
                    (
                        l.items,
                        l.resource_version,
                        l.paginated,
                        continues,
                        l.stopped,
                    )
                })
            };
            match outcome {
                Ok((_, _, _, _, true)) => return Err(Exit::SinkClosed),
                Ok((objects, rv, paginated, continues, false)) => {
                    if self
                        .sink
                        .replace(objects, rv.clone(), continues)
                        .await
                        .is_err()
                    {
                        return Err(Exit::SinkClosed);
                    }
                    let mut st = self.state.borrow_mut();
                    if st.resuming() {
                        self.stats.warm_start.set(WarmStart::Relisted);
                        tracing::info!(rv = %rv, "the snapshot was too old (410): relisted, only the differences notified");
                    }
                    st.list_succeeded(&rv, paginated);
                    // An object skipped by this list stays the last failure.
                    if self.stats.transform_panics.load(Ordering::Relaxed) == skipped_before {
                        self.stats.last_failure.clear();
                    }
                    self.stats.relists.store(st.relists(), Ordering::Relaxed);
                    drop(st);
                    self.publish_rv();
                    return Ok(handed_over);
                }
                Err(failure) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    let next = self.state.borrow_mut().list_failed(
                        &failure,
                        req.streaming,
                        Self::now(),
                        (self.jitter)(),
                    );
                    // After pages, `list_failed` asked for the most recent state.
                    self.log_failure(&failure, &next);
                    match next {
                        Next::List => continue,
                        Next::ListAfter(d) | Next::WatchAfter(d) => return Err(Exit::Relist(d)),
                        Next::Watch => return Err(Exit::Relist(Duration::ZERO)),
                    }
                }
            }
        }
    }

    /// The watch phase (R-15 .. R-19), from `handed_over` if a streaming
    /// list left its stream open.
    async fn watch(&mut self, mut handed_over: Option<WatchStream<K>>) -> Exit {
        loop {
            let end = match handed_over.take() {
                Some(stream) => self.consume(stream).await,
                None => {
                    let req = self
                        .state
                        .borrow_mut()
                        .watch_request(Self::now(), (self.jitter)());
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
                                Self::now(),
                                (self.jitter)(),
                            );
                            self.log_failure(&failure, &next);
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
            let Some(end) = end else {
                return Exit::SinkClosed;
            };
            if let WatchEnd::Failed(_) = end {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
            }
            self.stats.watch_ended(WatchEndReason::of_end(&end));
            let next = self
                .state
                .borrow_mut()
                .watch_ended(&end, Self::now(), (self.jitter)());
            match next {
                Next::Watch => {}
                Next::WatchAfter(d) => self.backoff(d).await,
                Next::ListAfter(d) => return Exit::Relist(d),
                Next::List => return Exit::Relist(Duration::ZERO),
            }
        }
    }

    /// A streaming list (R-24 .. R-26), its initial events handed to the
    /// sink a page at a time (DF-9): a stream cut short before its
    /// initial-events-end bookmark is requested again at once (from `""` if
    /// it handed pages on, R-12),
    /// up to [`CUT_SHORT_RETRIES`] times in a row. `None`: the sink closed.
    async fn streaming_list(&mut self) -> Result<Option<StreamedList<K>>, Failure> {
        let mut req = self
            .state
            .borrow_mut()
            .streaming_request(Self::now(), (self.jitter)());
        let page = self.state.borrow().streamed_page();
        let mut cut_short = 0;
        loop {
            // Each attempt is a list of its own: its first page voids the
            // pages of the one before.
            let mut first = true;
            let sink = &self.sink;
            let state = &self.state;
            let initial = initial_events(
                &mut self.source,
                &req,
                &self.sharing,
                &self.stats,
                page,
                async |objects| {
                    let was_first = std::mem::replace(&mut first, false);
                    state.borrow_mut().pages_handed();
                    sink.list_page(objects, was_first).await.is_ok()
                },
            );
            match initial.await? {
                Initial::Complete {
                    items,
                    resource_version,
                    stream,
                    handed_out,
                } => return Ok(Some((items, resource_version, stream, handed_out))),
                Initial::Stopped => return Ok(None),
                Initial::CutShort if cut_short < CUT_SHORT_RETRIES => {
                    cut_short += 1;
                    // After pages, from "", never an older state.
                    if self.state.borrow().has_handed_pages() {
                        req.resource_version.clear();
                    }
                    tracing::info!(
                        "streaming list closed before its initial-events-end bookmark; asking again"
                    );
                }
                Initial::CutShort => return Err(Failure::Other),
            }
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
        let (o, delta): (K, MakeDelta<K>) = match event {
            SourceEvent::Added(o) => (o, WatchDelta::Added),
            SourceEvent::Modified(o) => (o, WatchDelta::Modified),
            SourceEvent::Deleted(o) => (o, WatchDelta::Deleted),
            SourceEvent::Bookmark {
                resource_version, ..
            } => {
                rvs.push(resource_version);
                return None;
            }
        };
        rvs.push(rv_of(&o));
        // An object the transform panicked on leaves the view.
        match self.sharing.share(o) {
            Ok(shared) => batch.push(delta(shared)),
            Err(skipped) => batch.extend(self.sharing.forget(skipped).map(WatchDelta::Deleted)),
        }
        None
    }

    /// Reads a watch stream in batches until it ends; `None` when the sink is gone.
    async fn consume(&mut self, mut stream: WatchStream<K>) -> Option<WatchEnd> {
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
            // A bookmark after the batch's last event (or alone) moves the
            // stream on with no change: the DeltaFIFO hears of it, so that a
            // snapshot of a quiet informer keeps up with the server.
            let last_event_rv = batch.last().and_then(|e| {
                let (WatchDelta::Added(o) | WatchDelta::Modified(o) | WatchDelta::Deleted(o)) = e;
                o.meta().resource_version.as_deref()
            });
            let progress = rvs
                .last()
                .filter(|rv| !rv.is_empty() && Some(rv.as_str()) != last_event_rv)
                .cloned();
            if !batch.is_empty() {
                // The next batch is sized like this one: at a low rate each
                // event is a batch of its own, and a fresh 256-slot buffer per
                // event cost a large allocation per event.
                let next = Vec::with_capacity(batch.len());
                let events = std::mem::replace(&mut batch, next);
                self.sink.enqueue(events).await.ok()?;
            }
            if let Some(rv) = progress {
                self.sink.progress(rv);
            }
            if !rvs.is_empty() {
                let mut st = self.state.borrow_mut();
                let resuming = st.resuming();
                for rv in rvs.drain(..) {
                    st.event_processed(&rv);
                }
                if resuming {
                    self.stats.warm_start.set(WarmStart::Resumed);
                    tracing::info!("the server had the snapshot's history: resumed without a list");
                }
                drop(st);
                self.publish_rv();
            }
            if let Some(end) = end {
                return Some(end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reflector::fake::{Driven, Request, SnapshotEnd, Step};
    use crate::reflector::source::PageRequest;
    use crate::reflector::state::{ListVersion, ReflectorOptions, WatchRequest};

    const MINUTE: Duration = Duration::from_secs(60);

    fn page(version: ListVersion, limit: Option<u32>, token: Option<&str>) -> Request {
        Request::Page(PageRequest {
            version,
            limit,
            continue_token: token.map(str::to_owned),
        })
    }

    fn at(rv: &str) -> ListVersion {
        ListVersion::NotOlderThan(rv.into())
    }

    /// The resourceVersions the watches asked for, in order.
    fn watched(d: &Driven) -> Vec<String> {
        d.source
            .requests()
            .into_iter()
            .filter_map(|r| match r {
                Request::Watch(w, false) => Some(w.resource_version),
                _ => None,
            })
            .collect()
    }

    fn lists(d: &Driven) -> usize {
        let first_pages = d
            .source
            .requests()
            .into_iter()
            .filter(|r| matches!(r, Request::Page(p) if p.continue_token.is_none()));
        first_pages.count()
    }

    /// Warm start, resumed: the snapshot goes to the sink in place of a
    /// list, the watch starts from its resourceVersion, no list is made,
    /// and the first event reports the path.
    #[tokio::test(start_paused = true)]
    async fn a_restored_snapshot_is_watched_from_its_rv_without_a_list() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.restore = Some(("10", vec![("a", "1")]));
        d.source.watch(&[Step::Added("b", "11"), Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(lists(&d), 0);
        assert_eq!(watched(&d), ["10"]);
        assert_eq!(
            d.sink.received(),
            ["restore 10 [a@1]", "enqueue [added b@11]"]
        );
        assert_eq!(d.stats.warm_start.get(), WarmStart::Resumed);
        assert_eq!(d.stats.restored_objects.load(Ordering::Relaxed), 1);
        // The reader hears that every page reached the sink.
        assert_eq!(d.taken.take().map(|mut t| t.try_recv()), Some(Ok(())));
    }

    /// Warm start, relisted: a 410 before the server's first event lists at
    /// once (no backoff), not older than the snapshot; the list's replace is
    /// what the DeltaFIFO diffs against the restored cache.
    #[tokio::test(start_paused = true)]
    async fn a_410_on_a_restored_snapshot_relists_at_once_at_its_rv() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.restore = Some(("10", vec![("a", "1"), ("b", "2")]));
        d.source
            .watch_fails(Failure::Expired)
            .page("20", &[("a", "1"), ("c", "20")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        let log = d.source.log();
        assert_eq!(log[1].1, page(at("10"), None, None));
        assert_eq!(log[1].0, log[0].0, "at once");
        assert_eq!(
            d.sink.received(),
            ["restore 10 [a@1 b@2]", "replace 20 [a@1 c@20]"]
        );
        assert_eq!(d.stats.warm_start.get(), WarmStart::Relisted);
        assert_eq!(watched(&d), ["10", "20"]);
    }

    /// A snapshot found damaged after its first page: that page stays
    /// handed over (as a list's cut short), no watch starts from the
    /// snapshot, and the run lists at once; the list's end diffs against
    /// what was restored.
    /// The same when the snapshot's reader stops without saying it was
    /// done (its thread panicked): pages that end without `Complete` are
    /// never taken for the whole snapshot.
    #[tokio::test(start_paused = true)]
    async fn a_snapshot_damaged_partway_is_completed_by_a_list() {
        for end in [SnapshotEnd::Damaged, SnapshotEnd::ReaderGone] {
            let mut d = Driven::new(ReflectorOptions::default());
            d.restore = Some(("10", vec![("a", "1"), ("b", "2")]));
            d.restore_end = end;
            d.source
                .page("20", &[("a", "1"), ("c", "20")], None)
                .watch(&[Step::Hang]);
            d.run_for(MINUTE).await;
            assert_eq!(d.sink.restoring(), ["a@1", "b@2"], "{end:?}");
            assert_eq!(d.sink.received(), ["replace 20 [a@1 c@20]"], "{end:?}");
            assert_eq!(lists(&d), 1);
            assert_eq!(watched(&d), ["20"]);
            assert_eq!(d.stats.warm_start.get(), WarmStart::Cold);
            let log = d.source.log();
            assert_eq!(log[0].0, Duration::ZERO, "listed at once");
        }
    }

    /// pages until the last, one Replace with the
    /// first page's resourceVersion, then a watch from it whose events go to
    /// the sink in one batch and advance the resourceVersion.
    #[tokio::test(start_paused = true)]
    async fn r_11_paginated_list_then_watch() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1"), ("b", "2")], Some("c1"))
            .page("99", &[("c", "3")], None)
            .watch(&[
                Step::Added("d", "11"),
                Step::Modified("a", "12"),
                Step::Hang,
            ]);
        d.run_for(MINUTE).await;
        assert_eq!(
            d.source.requests()[..2],
            [
                page(ListVersion::Any, Some(500), None),
                page(ListVersion::Any, Some(500), Some("c1")),
            ]
        );
        assert_eq!(watched(&d), ["10"]);
        assert_eq!(
            d.sink.received(),
            [
                "replace 10 [a@1 b@2 c@3]",
                "enqueue [added d@11 modified a@12]"
            ]
        );
        // The first page went to the sink before the list ended.
        assert_eq!(d.sink.pages(), [(true, "[a@1 b@2]".to_owned())]);
        assert_eq!(*d.rv.borrow(), "12");
        assert_eq!(d.stats.failures.load(Ordering::Relaxed), 0);
    }

    /// A list that fails after handing out pages is void: the next list
    /// starts with a first page, or is one whole `replace`; it asks for the
    /// most recent state, never one older than the pages.
    #[tokio::test(start_paused = true)]
    async fn r_11_a_list_failing_after_its_first_page_is_void() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1"), ("b", "2")], Some("c1"))
            .page_fails(Failure::ConnectionRefused)
            .page("11", &[("b", "3")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(d.sink.pages(), [(true, "[a@1 b@2]".to_owned())]);
        assert_eq!(d.sink.received(), ["replace 11 [b@3]"]);
        assert_eq!(d.stats.failures.load(Ordering::Relaxed), 1);
        let log = d.source.log();
        assert!(
            matches!(&log[2].1, Request::Page(p) if p.version == ListVersion::MostRecent && p.continue_token.is_none()),
            "{:?}",
            log[2].1
        );
    }

    /// a 410 inside the stream relists after a backoff at the last
    /// resourceVersion (not ""), unpaginated with the default page size.
    #[tokio::test(start_paused = true)]
    async fn r_19_a_410_in_the_stream_relists_at_the_last_rv() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1")], None)
            .watch(&[Step::Added("b", "11"), Step::Fail(Failure::Expired)])
            .page("20", &[("a", "1"), ("b", "11")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        let log = d.source.log();
        assert_eq!(log[2].1, page(at("11"), None, None));
        assert_eq!(log[2].0 - log[1].0, Duration::from_millis(800));
        assert_eq!(watched(&d), ["10", "20"]);
        assert_eq!(
            d.sink.received(),
            [
                "replace 10 [a@1]",
                "enqueue [added b@11]",
                "replace 20 [a@1 b@11]"
            ]
        );
        assert_eq!(d.state.borrow().relists(), 1);
    }

    /// a 410 when the watch opens relists at the last resourceVersion
    /// (kube-runtime would retry the stale one forever).
    #[tokio::test(start_paused = true)]
    async fn r_16_a_410_at_watch_start_relists() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1")], None)
            .watch_fails(Failure::Expired)
            .page("30", &[("a", "25")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        let log = d.source.log();
        assert_eq!(log[2].1, page(at("10"), None, None));
        assert_eq!(log[2].0 - log[1].0, Duration::from_millis(800));
        assert_eq!(watched(&d), ["10", "30"]);
        assert_eq!(d.sink.received(), ["replace 10 [a@1]", "replace 30 [a@25]"]);
    }

    /// R-16, R-19 (R-T17): 429s, when opening and inside the stream, back off
    /// with growing delays and re-watch from the same resourceVersion; the
    /// storm never costs a relist.
    #[tokio::test(start_paused = true)]
    async fn r_16_r_19_a_429_storm_rewatches_without_a_relist() {
        let mut d = Driven::new(ReflectorOptions::default());
        let throttled = Failure::TooManyRequests { retry_after: None };
        d.source.page("10", &[("a", "1")], None);
        for _ in 0..3 {
            d.source.watch_fails(throttled.clone());
        }
        d.source
            .watch(&[Step::Fail(throttled.clone())])
            .watch_fails(throttled.clone())
            .watch(&[Step::Added("b", "11"), Step::Hang]);
        d.run_for(5 * MINUTE).await;
        assert_eq!(lists(&d), 1);
        assert_eq!(watched(&d), ["10"; 6]);
        let log = d.source.log();
        let waits: Vec<u128> = log[1..]
            .windows(2)
            .map(|w| (w[1].0 - w[0].0).as_millis())
            .collect();
        assert_eq!(waits, [800, 1600, 3200, 6400, 12800]);
        assert_eq!(
            d.sink.received(),
            ["replace 10 [a@1]", "enqueue [added b@11]"]
        );
        assert_eq!(d.stats.failures.load(Ordering::Relaxed), 5);
        let throttled_ends = &d.stats.watch_ends[WatchEndReason::Throttled as usize];
        assert_eq!(throttled_ends.load(Ordering::Relaxed), 5);
        assert!(
            d.source.probes().is_empty(),
            "a server that answers 429 is not probed"
        );
    }

    /// a malformed line loses an event: the watch relists after
    /// a backoff, keeping what came before it.
    #[tokio::test(start_paused = true)]
    async fn r_19_a_malformed_line_relists() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1")], None)
            .watch(&[Step::Added("b", "11"), Step::Fail(Failure::Malformed)])
            .page("12", &[("a", "1"), ("b", "11"), ("c", "12")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(d.source.requests()[2], page(at("11"), None, None));
        assert_eq!(
            d.sink.received(),
            [
                "replace 10 [a@1]",
                "enqueue [added b@11]",
                "replace 12 [a@1 b@11 c@12]"
            ]
        );
        let malformed = &d.stats.watch_ends[WatchEndReason::Malformed as usize];
        assert_eq!(malformed.load(Ordering::Relaxed), 1);
    }

    /// a clean close re-watches at once from the last
    /// resourceVersion, bookmarks included, with no backoff step.
    #[tokio::test(start_paused = true)]
    async fn r_19_a_clean_close_rewatches_at_once() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[], None)
            .watch(&[
                Step::Sleep(Duration::from_secs(2)),
                Step::Bookmark("15", false),
            ])
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        let log = d.source.log();
        assert_eq!(watched(&d), ["10", "15"]);
        assert_eq!(log[2].0 - log[1].0, Duration::from_secs(2));
        assert_eq!(d.state.borrow().backoff().steps(), 0);
        assert_eq!(d.state.borrow().relists(), 0);
    }

    /// R-10 (R-T21): an explicit page size applies to the relist at a
    /// resourceVersion too, so that a continue token that expires there falls
    /// back to one unpaginated list.
    #[tokio::test(start_paused = true)]
    async fn r_10_an_explicit_page_size_pages_the_relist_and_reaches_the_full_list() {
        let mut d = Driven::new(ReflectorOptions {
            page_size: Some(4),
            ..Default::default()
        });
        d.source
            .page("10", &[("a", "1")], None)
            .watch_fails(Failure::Expired)
            .page(
                "20",
                &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")],
                Some("c1"),
            )
            .page_fails(Failure::Expired)
            .page(
                "21",
                &[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")],
                None,
            )
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        let pages: Vec<Request> = d
            .source
            .requests()
            .into_iter()
            .filter(|r| matches!(r, Request::Page(_)))
            .collect();
        assert_eq!(
            pages,
            [
                page(ListVersion::Any, Some(4), None),
                page(at("10"), Some(4), None),
                page(at("10"), Some(4), Some("c1")),
                page(at("10"), None, None),
            ]
        );
        assert_eq!(
            d.sink.received().last().map(String::as_str),
            Some("replace 21 [a@1 b@2 c@3 d@4 e@5]")
        );
        assert_eq!(watched(&d), ["10", "21"]);
    }

    /// R-10 (R-T22): with the default page size, the relist at a
    /// resourceVersion is unpaginated, so that the watch cache serves it.
    #[tokio::test(start_paused = true)]
    async fn r_10_the_default_page_size_leaves_the_relist_unpaginated() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1")], None)
            .watch_fails(Failure::Expired)
            .page("20", &[("a", "1")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(d.source.requests()[2], page(at("10"), None, None));
    }

    fn streaming() -> ReflectorOptions {
        ReflectorOptions {
            streaming_lists: true,
            ..Default::default()
        }
    }

    fn streaming_requests(d: &Driven) -> Vec<(Duration, WatchRequest)> {
        let log = d.source.log().into_iter();
        log.filter_map(|(t, r)| match r {
            Request::Watch(w, true) => Some((t, w)),
            _ => None,
        })
        .collect()
    }

    /// a streaming list whose stream closes before the
    /// initial-events-end bookmark is asked again at once with the identical
    /// request: no backoff, no failure counted.
    #[tokio::test(start_paused = true)]
    async fn r_26_a_streaming_list_cut_short_is_asked_again_at_once() {
        let mut d = Driven::new(streaming());
        d.source
            .watch(&[Step::Added("a", "5"), Step::Sleep(Duration::from_secs(3))])
            .watch(&[
                Step::Added("a", "5"),
                Step::Added("b", "6"),
                Step::Bookmark("7", true),
                Step::Added("c", "8"),
                Step::Hang,
            ]);
        d.run_for(MINUTE).await;
        let asked = streaming_requests(&d);
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0].1, asked[1].1, "the identical request");
        assert_eq!(asked[1].0 - asked[0].0, Duration::from_secs(3));
        assert_eq!(
            d.sink.received(),
            ["replace 7 [a@5 b@6]", "enqueue [added c@8]"]
        );
        assert_eq!(d.stats.failures.load(Ordering::Relaxed), 0);
        assert_eq!(d.state.borrow().backoff().steps(), 0);
        assert!(
            d.source
                .requests()
                .iter()
                .all(|r| !matches!(r, Request::Page(_)))
        );
    }

    /// R-26, bounded, and R-25: a server that cuts every streaming list short
    /// gets [`CUT_SHORT_RETRIES`] immediate retries, then a failure, and that
    /// attempt falls back to a plain list at once.
    #[tokio::test(start_paused = true)]
    async fn r_26_repeated_cut_short_streaming_lists_fall_back_to_a_list() {
        let mut d = Driven::new(streaming());
        for _ in 0..=CUT_SHORT_RETRIES {
            d.source
                .watch(&[Step::Added("a", "5"), Step::Sleep(Duration::from_secs(1))]);
        }
        d.source.page("7", &[("a", "5")], None).watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        let asked = streaming_requests(&d);
        assert_eq!(asked.len() as u32, CUT_SHORT_RETRIES + 1);
        let waits: Vec<u128> = asked
            .windows(2)
            .map(|w| (w[1].0 - w[0].0).as_millis())
            .collect();
        assert_eq!(waits, [1000, 1000, 1000]);
        assert_eq!(d.stats.failures.load(Ordering::Relaxed), 1);
        assert_eq!(d.sink.received(), ["replace 7 [a@5]"]);
    }

    fn streaming_in_pages_of(size: u32) -> ReflectorOptions {
        ReflectorOptions {
            page_size: Some(size),
            stream_in_pages: true,
            ..streaming()
        }
    }

    /// Without `stream_in_pages`, a streaming list goes on whole at its end.
    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_not_in_pages_goes_on_whole_at_its_end() {
        let mut d = Driven::new(ReflectorOptions {
            stream_in_pages: false,
            ..streaming_in_pages_of(2)
        });
        d.source.watch(&[
            Step::Added("a", "5"),
            Step::Added("b", "6"),
            Step::Added("c", "7"),
            Step::Bookmark("8", true),
            Step::Hang,
        ]);
        d.run_for(MINUTE).await;
        assert!(d.sink.pages().is_empty());
        assert_eq!(d.sink.received(), ["replace 8 [a@5 b@6 c@7]"]);
    }

    /// DF-9, R-27: a streaming list's initial events go to the sink a page
    /// at a time while it streams; the end bookmark's `Replace` brings the
    /// rest, continuing those pages.
    #[tokio::test(start_paused = true)]
    async fn df_9_a_streaming_list_hands_its_initial_events_on_in_pages() {
        let mut d = Driven::new(streaming_in_pages_of(2));
        d.source.watch(&[
            Step::Added("a", "5"),
            Step::Added("b", "6"),
            Step::Added("c", "7"),
            Step::Added("d", "8"),
            Step::Added("e", "9"),
            Step::Bookmark("10", true),
            Step::Added("f", "11"),
            Step::Hang,
        ]);
        d.run_for(MINUTE).await;
        assert_eq!(
            d.sink.pages(),
            [
                (true, "[a@5 b@6]".to_owned()),
                (false, "[c@7 d@8]".to_owned())
            ]
        );
        assert_eq!(
            d.sink.received(),
            ["replace 10 [a@5 b@6 c@7 d@8 e@9]", "enqueue [added f@11]"]
        );
    }

    /// DF-9, R-26: an attempt cut short after handing on a page is void:
    /// the next attempt's first page starts the list again.
    #[tokio::test(start_paused = true)]
    async fn df_9_a_streaming_list_cut_short_after_a_page_starts_again() {
        let mut d = Driven::new(streaming_in_pages_of(2));
        d.source
            .watch(&[
                Step::Added("a", "5"),
                Step::Added("b", "6"),
                Step::Added("c", "7"),
                Step::Sleep(Duration::from_secs(3)),
            ])
            .watch(&[
                Step::Added("b", "6"),
                Step::Added("c", "7"),
                Step::Bookmark("8", true),
                Step::Hang,
            ]);
        d.run_for(MINUTE).await;
        assert_eq!(
            d.sink.pages(),
            [
                (true, "[a@5 b@6]".to_owned()),
                (true, "[b@6 c@7]".to_owned())
            ]
        );
        assert_eq!(d.sink.received(), ["replace 8 [b@6 c@7]"]);
    }

    /// a delete before the end bookmark, once a page was handed on,
    /// cannot be applied to that page: streaming lists are given up for
    /// paginated ones, whose whole list voids the pages.
    #[tokio::test(start_paused = true)]
    async fn a_delete_in_a_streaming_list_after_a_page_falls_back_to_paginated_lists() {
        let mut d = Driven::new(streaming_in_pages_of(2));
        d.source
            .watch(&[
                Step::Added("a", "5"),
                Step::Added("b", "6"),
                Step::Deleted("a", "7"),
                Step::Hang,
            ])
            .page("7", &[("b", "6")], None)
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(d.sink.pages(), [(true, "[a@5 b@6]".to_owned())]);
        assert_eq!(d.sink.received(), ["replace 7 [b@6]"]);
        assert!(
            d.source
                .requests()
                .iter()
                .any(|r| matches!(r, Request::Page(_))),
            "a paginated list followed"
        );
        assert!(!d.state.borrow().list_request().streaming);
    }

    /// Before any page went on, a delete applies at the end as before, and
    /// nothing more is handed on.
    #[tokio::test(start_paused = true)]
    async fn a_delete_before_any_page_is_applied_at_the_end_of_a_streaming_list() {
        let mut d = Driven::new(streaming_in_pages_of(2));
        d.source.watch(&[
            Step::Added("a", "5"),
            Step::Deleted("a", "6"),
            Step::Added("b", "7"),
            Step::Added("c", "8"),
            Step::Bookmark("9", true),
            Step::Hang,
        ]);
        d.run_for(MINUTE).await;
        assert!(d.sink.pages().is_empty());
        assert_eq!(d.sink.received(), ["replace 9 [b@7 c@8]"]);
    }

    const SECOND: Duration = Duration::from_secs(1);

    fn waits_between_watches(d: &Driven) -> Vec<u128> {
        let watches: Vec<Duration> = d
            .source
            .log()
            .into_iter()
            .filter(|(_, r)| matches!(r, Request::Watch(..)))
            .map(|(t, _)| t)
            .collect();
        watches
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect()
    }

    /// Issue 28 finding 2: a transport failure on a watch (a reset when it
    /// opens, an error in its stream) re-watches from the last
    /// resourceVersion after a backoff: no relist.
    #[tokio::test(start_paused = true)]
    async fn a_transport_failure_rewatches_from_the_last_rv_after_a_backoff() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source
            .page("10", &[("a", "1")], None)
            .watch_fails(Failure::Transport)
            .watch(&[Step::Added("b", "11"), Step::Fail(Failure::Transport)])
            .watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(lists(&d), 1);
        assert_eq!(watched(&d), ["10", "10", "11"]);
        assert_eq!(waits_between_watches(&d), [800, 1600]);
        assert_eq!(d.source.probes().len(), 1, "in the 1.6 s wait, answered");
        let transport = &d.stats.watch_ends[WatchEndReason::Transport as usize];
        assert_eq!(transport.load(Ordering::Relaxed), 2);
        assert_eq!(d.state.borrow().relists(), 0);
    }

    /// The bound of the re-watches: the eighth watch failure in a row without
    /// an answer relists (after its backoff), so that a watch path that keeps
    /// failing while lists work still refreshes the cache.
    #[tokio::test(start_paused = true)]
    async fn the_eighth_unanswered_watch_failure_in_a_row_relists() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source.page("10", &[("a", "1")], None);
        for _ in 0..crate::reflector::recovery::MAX_UNREACHABLE_REWATCHES {
            d.source.watch_fails(Failure::Transport);
        }
        d.source
            .page("20", &[("a", "2")], None)
            .watch(&[Step::Hang]);
        d.run_for(10 * MINUTE).await;
        assert_eq!(lists(&d), 2);
        let mut expected = vec!["10"; 8];
        expected.push("20");
        assert_eq!(watched(&d), expected);
        assert_eq!(d.sink.received(), ["replace 10 [a@1]", "replace 20 [a@2]"]);
    }

    /// What one 30 s outage costs: the list and watch requests made while the
    /// server was away, and how long after its return the sink got `want`.
    struct Outage {
        requests: usize,
        probes: usize,
        recovered_after: Duration,
    }

    const DOWN: Duration = Duration::from_secs(10);
    const UP: Duration = Duration::from_secs(40);

    /// A watch at RV 11 closes as the server goes away at 10 s (a reset
    /// mid-stream ends it like a clean close); it is back at 40 s, and
    /// `after` scripts what it answers then.
    async fn outage(
        probe: bool,
        jitter: fn() -> f64,
        after: impl Fn(&Driven),
        want: &str,
    ) -> Outage {
        let mut d = Driven::new(ReflectorOptions {
            probe,
            ..Default::default()
        });
        d.jitter = jitter;
        d.source
            .outage(DOWN, UP)
            .page("10", &[("a", "1")], None)
            .watch(&[Step::Added("b", "11"), Step::Sleep(DOWN)]);
        after(&d);
        d.run_for(3 * MINUTE).await;
        let in_outage = |t: &Duration| (DOWN..UP).contains(t);
        let log = d.source.log();
        let received = d.sink.received_at();
        let (at, _) = received
            .iter()
            .find(|(_, r)| r == want)
            .unwrap_or_else(|| panic!("{want} never arrived: {received:?}"));
        Outage {
            requests: log.iter().filter(|(t, _)| in_outage(t)).count(),
            probes: d.source.probes().iter().filter(|t| in_outage(t)).count(),
            recovered_after: *at - UP,
        }
    }

    /// The outage with probes and without, jitter 0: with probes the sink
    /// gets `want` within 2 s of the return, without more requests during
    /// the outage; without, more than 20 s after it.
    async fn probed_and_waited(after: &impl Fn(&Driven), want: &str) -> (Outage, Outage) {
        let probed = outage(true, || 0.0, after, want).await;
        let waited = outage(false, || 0.0, after, want).await;
        let (p, w) = (probed.recovered_after, waited.recovered_after);
        assert!(p <= 2 * SECOND, "{p:?}");
        assert!(w > 20 * SECOND, "{w:?}");
        assert!(probed.requests <= waited.requests);
        (probed, waited)
    }

    /// Issue 28 finding 3: after a 30 s outage the state converges within
    /// 2 s of the server's return (the history kept: a re-watch resumes),
    /// with no more list or watch requests during the outage than without
    /// probes, which waited out the backoff built up meanwhile.
    #[tokio::test(start_paused = true)]
    async fn after_a_30s_outage_a_rewatch_converges_within_2s_of_the_return() {
        let after = |d: &Driven| {
            d.source.watch(&[Step::Added("c", "12"), Step::Hang]);
        };
        let want = "enqueue [added c@12]";
        let (probed, waited) = probed_and_waited(&after, want).await;
        assert_eq!(
            waited.requests, 6,
            "re-watches at 10, 10.8, 12.4, 15.6, 22 and 34.8 s"
        );
        // At most two probes a second, which a down server never sees.
        assert!(probed.probes <= 60, "{}", probed.probes);
        assert_eq!(waited.probes, 0);
        // The longest jitter: waits and probe intervals doubled.
        let probed = outage(true, || 0.999, &after, want).await;
        let waited = outage(false, || 0.999, &after, want).await;
        assert!(
            probed.recovered_after <= 2 * SECOND,
            "{:?}",
            probed.recovered_after
        );
        assert!(probed.requests <= waited.requests);
        assert!(probed.probes <= 30, "{}", probed.probes);
    }

    /// The same outage, the history lost (a 410 in the first re-watch after
    /// the return): the relist is made at once, not after the backoff.
    #[tokio::test(start_paused = true)]
    async fn after_a_30s_outage_that_lost_the_history_the_relist_comes_within_2s() {
        let after = |d: &Driven| {
            d.source
                .watch(&[Step::Fail(Failure::Expired)])
                .page("50", &[("a", "1"), ("b", "11"), ("c", "45")], None)
                .watch(&[Step::Hang]);
        };
        let want = "replace 50 [a@1 b@11 c@45]";
        probed_and_waited(&after, want).await;
    }

    /// A return just before the backoff ends, after the last probe: the
    /// re-watch itself gets the first answer, a 410, and relists at once too.
    #[tokio::test(start_paused = true)]
    async fn a_410_first_answered_to_the_rewatch_after_an_outage_relists_at_once() {
        let mut d = Driven::new(ReflectorOptions::default());
        let up = Duration::from_millis(60_200);
        d.source
            .outage(DOWN, up)
            .page("10", &[("a", "1")], None)
            .watch(&[Step::Added("b", "11"), Step::Sleep(DOWN)])
            .watch(&[Step::Fail(Failure::Expired)])
            .page("60", &[("a", "1"), ("b", "11")], None)
            .watch(&[Step::Hang]);
        d.run_for(3 * MINUTE).await;
        let probes = d.source.probes();
        assert!(probes.last().is_some_and(|p| *p < up), "{probes:?}");
        let log = d.source.log();
        let (rewatched, _) = log[log.len() - 3];
        let (relisted, ref relist) = log[log.len() - 2];
        assert_eq!(*relist, page(at("11"), None, None));
        assert_eq!(relisted, rewatched, "at once");
        assert!(relisted - up < 2 * SECOND, "{:?}", relisted - up);
    }

    /// A server that answers the probes at once while our watch keeps failing
    /// (only our request fails) is not hammered: the waits run their course.
    #[tokio::test(start_paused = true)]
    async fn a_server_that_answers_probes_keeps_the_backoff() {
        let mut d = Driven::new(ReflectorOptions::default());
        d.source.page("10", &[], None);
        for _ in 0..4 {
            d.source.watch_fails(Failure::Transport);
        }
        d.source.watch(&[Step::Hang]);
        d.run_for(MINUTE).await;
        assert_eq!(waits_between_watches(&d), [800, 1600, 3200, 6400]);
        assert_eq!(
            d.source.probes().len(),
            3,
            "one in each wait of 1 s or more, answered"
        );
    }
}
