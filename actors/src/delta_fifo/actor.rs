//! The DeltaFIFO actor: owns a [`FifoQueue`] (merged per key or in arrival
//! order, per [`FifoOptions::ordering`]), takes watch events and lists from
//! the Reflector, and hands batches of deltas to the Indexer.
//!
//! Flow control, both ways, by acknowledgement (never by mailbox capacity, which actix's `send`/`do_send` ignore):
//! - Towards the Indexer: at most one batch in flight; the next is popped when the Indexer answers. Meanwhile new
//!   events wait in the queue (merged per key, or one entry each in arrival order). A first list's pages wait for
//!   half an initial batch (`hold.rs`, DF-15a).
//! - From the Reflector: [`Enqueue`] is answered at once while the queue holds fewer than `high_watermark` deltas
//!   (in both orderings: arrival order keeps every event, so a stalled consumer holds the Reflector back all the
//!   same), and only once it has drained below that otherwise. The Reflector awaits the answer before it reads more
//!   of the watch stream, so the server's TCP connection pushes back. [`Replace`] is answered the same way: its list
//!   is in memory, but relisting against a stalled consumer would queue one more state per key each time, without
//!   bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use actix::prelude::*;
use futures::channel::oneshot;
use kube::Resource;
use tokio::sync::watch;

use super::fifo_queue::{FifoQueue, usable};
use super::hold::{ListHold, now};
use super::messages::{Enqueue, FifoClosed, ListPage, Progress, Replace, WatchDelta};
use super::options::FifoOptions;
use super::origin::PopulationOrigin;
use crate::answer::Answer;
use crate::delta::PopReceipt;
use crate::indexer::{CacheReader, FifoSynced, Indexer, Process};

/// Live counters of the DeltaFIFO.
#[derive(Debug, Default)]
pub struct FifoStats {
    /// Keys waiting in the queue.
    pub queued_keys: AtomicUsize,
    /// Deltas waiting.
    pub queued_deltas: AtomicUsize,
    /// True while the Reflector is held back.
    pub saturated: AtomicBool,
}

/// The DeltaFIFO actor.
pub struct DeltaFifo<K: Resource + Send + Sync + 'static> {
    queue: Box<dyn FifoQueue<K>>,
    known: CacheReader<K>,
    indexer: Addr<Indexer<K>>,
    options: FifoOptions,
    in_flight: bool,
    held_producers: Vec<oneshot::Sender<Result<(), FifoClosed>>>,
    synced_sent: bool,
    synced: watch::Sender<bool>,
    /// The resourceVersion of the newest change accepted: a list's, or the
    /// last watch event's object's (the event's own). A batch that empties
    /// the queue brings the cache to it ([`Process::consistent_at`]).
    accepted_rv: String,
    /// `accepted_rv` moved on since the last batch that told the Indexer
    /// where the cache stands (a bookmark with nothing queued).
    progress_untold: bool,
    /// Whether the initial population is a snapshot restored from disk.
    origin: PopulationOrigin,
    /// A list's pages are arriving: the cache is at no one resourceVersion
    /// until its end.
    listing: bool,
    hold: ListHold,
    stats: Arc<FifoStats>,
    span: tracing::Span,
}

impl<K: Resource + Send + Sync + 'static> DeltaFifo<K> {
    /// A DeltaFIFO whose known objects are the Indexer's cache (`known`).
    pub fn new(
        known: CacheReader<K>,
        indexer: Addr<Indexer<K>>,
        options: FifoOptions,
        synced: watch::Sender<bool>,
        stats: Arc<FifoStats>,
    ) -> Self {
        DeltaFifo {
            queue: options.ordering.queue(),
            known,
            indexer,
            options: options.sanitized(),
            in_flight: false,
            held_producers: Vec::new(),
            synced_sent: false,
            synced,
            accepted_rv: String::new(),
            progress_untold: false,
            origin: PopulationOrigin::default(),
            listing: false,
            hold: ListHold::new(options.initial_batch_size),
            stats,
            span: tracing::Span::none(),
        }
    }

    /// Handles messages inside `span` (e.g. one naming the informer).
    pub fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    fn saturated(&self) -> bool {
        self.queue.pending_deltas() >= self.options.high_watermark
    }

    fn answer(&mut self) -> Answer<Result<(), FifoClosed>> {
        self.refresh_stats();
        if !self.saturated() {
            return Answer::Now(Ok(()));
        }
        let (tx, rx) = oneshot::channel();
        self.held_producers.push(tx);
        Answer::Later(rx)
    }

    fn refresh_stats(&self) {
        self.stats
            .queued_keys
            .store(self.queue.queued_keys(), Ordering::Relaxed);
        self.stats
            .queued_deltas
            .store(self.queue.pending_deltas(), Ordering::Relaxed);
        self.stats
            .saturated
            .store(self.saturated(), Ordering::Relaxed);
    }

    /// Hands the next batch to the Indexer if none is in flight.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight {
            return;
        }
        let most = self.options.most_per_batch(self.synced_sent);
        let first = self.listing && !self.synced_sent && !self.origin.restored();
        let held = self
            .hold
            .next(first, self.saturated(), self.queue.queued_keys(), now());
        if let Some(timer) = held {
            if let Some(wait) = timer {
                ctx.run_later(wait, |act, ctx| act.pump(ctx));
            }
            return;
        }
        let batch = self.queue.pop_batch(most);
        // An empty batch only to say that the cache is at a newer
        // resourceVersion (a bookmark), once the initial list is in.
        let tell_progress = self.progress_untold && self.synced_sent;
        if batch.is_empty() && !tell_progress {
            self.check_synced();
            self.release_producers();
            self.queue.release_idle_memory();
            return;
        }
        let receipts: Vec<PopReceipt> = batch.iter().map(|p| p.receipt.clone()).collect();
        self.in_flight = true;
        let restored =
            self.origin.restored() && batch.first().is_some_and(|p| p.is_in_initial_list);
        let consistent_at =
            (self.queue.pending_deltas() == 0 && !self.listing).then(|| self.accepted_rv.clone());
        if consistent_at.is_some() {
            self.progress_untold = false;
        }
        let process = Process {
            batch,
            consistent_at,
            restored,
        };
        self.indexer
            .send(process)
            .into_actor(self)
            .map(move |result, act, ctx| {
                act.in_flight = false;
                if result.is_err() {
                    tracing::warn!("indexer is gone; delta fifo stops");
                    ctx.stop();
                    return;
                }
                for r in &receipts {
                    act.queue.done(r);
                }
                act.check_synced();
                act.release_producers();
                act.pump(ctx);
            })
            .spawn(ctx);
        self.refresh_stats();
    }

    fn check_synced(&mut self) {
        if !self.synced_sent && self.queue.has_synced() {
            self.synced_sent = true;
            self.synced.send_replace(true);
            self.indexer.do_send(FifoSynced);
        }
    }

    fn release_producers(&mut self) {
        if !self.saturated() {
            for p in self.held_producers.drain(..) {
                let _ = p.send(Ok(()));
            }
        }
        self.refresh_stats();
    }
}

impl<K: Resource + Send + Sync + 'static> Actor for DeltaFifo<K> {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        for p in self.held_producers.drain(..) {
            let _ = p.send(Err(FifoClosed));
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Enqueue<K>> for DeltaFifo<K> {
    type Result = Answer<Result<(), FifoClosed>>;

    fn handle(&mut self, Enqueue(events): Enqueue<K>, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let known = self.known.snapshot();
        let newest = events.iter().rev().find_map(|e| {
            let (WatchDelta::Added(o) | WatchDelta::Modified(o) | WatchDelta::Deleted(o)) = e;
            o.meta()
                .resource_version
                .clone()
                .filter(|rv| !rv.is_empty())
        });
        if let Some(rv) = newest {
            self.accepted_rv = rv;
        }
        for event in events {
            let result = match event {
                WatchDelta::Added(o) => self.queue.add(o, &known),
                WatchDelta::Modified(o) => self.queue.update(o, &known),
                WatchDelta::Deleted(o) => self.queue.delete(o, &known),
            };
            if let Err(err) = result {
                tracing::warn!(%err, "watch event without a usable key: skipped");
            }
        }
        self.pump(ctx);
        self.answer()
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Progress> for DeltaFifo<K> {
    type Result = ();

    fn handle(&mut self, Progress(rv): Progress, ctx: &mut Context<Self>) {
        if !rv.is_empty() && rv != self.accepted_rv {
            self.accepted_rv = rv;
            self.progress_untold = true;
            self.pump(ctx);
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<ListPage<K>> for DeltaFifo<K> {
    type Result = Answer<Result<(), FifoClosed>>;

    fn handle(&mut self, msg: ListPage<K>, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        self.origin.page(msg.restored);
        self.listing = true;
        if let Err(err) = self.queue.list_page(usable(msg.objects), msg.first) {
            tracing::error!(%err, "list page failed");
        }
        self.pump(ctx);
        self.answer()
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Replace<K>> for DeltaFifo<K> {
    type Result = Answer<Result<(), FifoClosed>>;

    fn handle(&mut self, msg: Replace<K>, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let known = self.known.snapshot();
        let objects = usable(msg.objects);
        self.origin.end(msg.restored);
        let result = if msg.continues && self.listing {
            self.queue.finish_list(objects, &known)
        } else {
            self.queue.replace(objects, &known)
        };
        self.listing = false;
        if let Err(err) = result {
            tracing::error!(%err, rv = %msg.resource_version, "replace failed");
        }
        self.accepted_rv = msg.resource_version;
        self.pump(ctx);
        self.answer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta_fifo::FifoOrdering;
    use crate::event::Event;
    use crate::indexer::{Cache, IndexerStats, Subscribe};
    use crate::listener::{Listener, ListenerOptions, ListenerStats, OverflowPolicy};
    use crate::subscriber::SubscriberId;
    use k8s_openapi::api::core::v1::ConfigMap;

    /// Takes events, stalled in its handler while the gate is closed.
    struct Stalled(watch::Receiver<bool>);

    impl Actor for Stalled {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for Stalled {
        type Result = ();

        fn handle(&mut self, _: Event<ConfigMap>, ctx: &mut Context<Self>) {
            crate::testing::hold_until_open(self, &self.0, ctx);
        }
    }

    fn cm(name: &str) -> Arc<ConfigMap> {
        crate::testing::configmap(name, "1")
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    /// A `Replace` past the high watermark waits for room like an `Enqueue`:
    /// relisting again and again against a stalled consumer would otherwise
    /// queue one more state per key each time. In both orderings.
    #[actix::test]
    async fn a_replace_past_the_high_watermark_waits_for_room() {
        for ordering in [FifoOrdering::Merged, FifoOrdering::Arrival] {
            replace_waits_for_room(ordering, false).await;
        }
    }

    /// A list page past the high watermark waits the same: a long list is
    /// read no faster than it is cached (merged order; arrival order keeps
    /// pages aside until the list ends, so only its end waits).
    #[actix::test]
    async fn a_list_page_past_the_high_watermark_waits_for_room() {
        replace_waits_for_room(FifoOrdering::Merged, true).await;
    }

    /// An Indexer over an empty cache, with one `Block` subscriber.
    async fn indexer_with(
        subscriber: Recipient<Event<ConfigMap>>,
        capacity: usize,
    ) -> (Addr<Indexer<ConfigMap>>, CacheReader<ConfigMap>) {
        let cache = Cache::<ConfigMap>::new();
        let reader = cache.reader();
        let indexer = Indexer::new(cache, Arc::new(IndexerStats::default())).start();
        let listener = Listener::new(
            SubscriberId(1),
            subscriber,
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity,
            },
            watch::channel(false).0,
            Arc::new(ListenerStats::default()),
        );
        indexer
            .send(Subscribe::start(SubscriberId(1), listener))
            .await
            .unwrap();
        (indexer, reader)
    }

    async fn replace_waits_for_room(ordering: FifoOrdering, paged: bool) {
        let (gate, closed) = watch::channel(false);
        let (indexer, reader) = indexer_with(Stalled(closed).start().recipient(), 1).await;
        let stats = Arc::new(FifoStats::default());
        let fifo = DeltaFifo::new(
            reader,
            indexer,
            FifoOptions::default()
                .batch_size(16)
                .initial_batch_size(16)
                .high_watermark(64)
                .ordering(ordering),
            watch::channel(false).0,
            stats.clone(),
        )
        .start();
        let events = (0..40)
            .map(|i| WatchDelta::Added(cm(&format!("w{i}"))))
            .collect();
        fifo.send(Enqueue(events)).await.unwrap().unwrap();
        settle().await;
        let list = |n| (0..n).map(|i| cm(&format!("l{i}"))).collect::<Vec<_>>();
        let mut replaced = if paged {
            Box::pin(fifo.send(ListPage {
                objects: list(340),
                first: true,
                restored: false,
            })) as std::pin::Pin<Box<dyn Future<Output = _>>>
        } else {
            Box::pin(fifo.send(Replace {
                objects: list(340),
                resource_version: "9".into(),
                restored: false,
                continues: false,
            }))
        };
        settle().await;
        assert!(
            futures::poll!(&mut replaced).is_pending(),
            "{ordering:?}: held while {} deltas wait",
            stats.queued_deltas.load(Ordering::SeqCst)
        );
        gate.send_replace(true);
        tokio::time::timeout(std::time::Duration::from_secs(5), replaced)
            .await
            .expect("answered once the consumer drained the queue")
            .unwrap()
            .unwrap();
        assert!(
            stats.queued_deltas.load(Ordering::SeqCst) < 64,
            "{ordering:?}"
        );
    }

    /// Records each event's key and cause.
    struct Causes(Arc<std::sync::Mutex<Vec<(String, crate::event::Cause)>>>);

    impl Actor for Causes {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for Causes {
        type Result = ();

        fn handle(&mut self, e: Event<ConfigMap>, _: &mut Context<Self>) {
            let mut seen = self.0.lock().unwrap();
            seen.push((e.key().to_string(), e.cause()));
        }
    }

    /// A fifo over an Indexer with one subscriber recording causes.
    async fn fifo_with_causes() -> (
        Addr<DeltaFifo<ConfigMap>>,
        Arc<std::sync::Mutex<Vec<(String, crate::event::Cause)>>>,
        watch::Receiver<bool>,
    ) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (indexer, reader) = indexer_with(Causes(seen.clone()).start().recipient(), 64).await;
        let (synced_tx, synced) = watch::channel(false);
        let fifo = DeltaFifo::new(
            reader,
            indexer,
            FifoOptions::default(),
            synced_tx,
            Arc::new(FifoStats::default()),
        )
        .start();
        (fifo, seen, synced)
    }

    async fn wait_for(seen: &std::sync::Mutex<Vec<(String, crate::event::Cause)>>, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.lock().unwrap().len() < n {
            assert!(std::time::Instant::now() < deadline, "{n} events");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// Ends a paged list (or restored snapshot) with `objects` and waits
    /// until the queue is synced.
    async fn end_and_sync(
        fifo: &Addr<DeltaFifo<ConfigMap>>,
        synced: &watch::Receiver<bool>,
        objects: Vec<Arc<ConfigMap>>,
        restored: bool,
    ) {
        let end = Replace {
            objects,
            resource_version: "10".into(),
            restored,
            continues: true,
        };
        fifo.send(end).await.unwrap().unwrap();
        let mut synced = synced.clone();
        tokio::time::timeout(std::time::Duration::from_secs(5), synced.wait_for(|s| *s))
            .await
            .expect("synced")
            .unwrap();
    }

    fn page(names: &[&str], first: bool, restored: bool) -> ListPage<ConfigMap> {
        ListPage {
            objects: names.iter().map(|n| cm(n)).collect(),
            first,
            restored,
        }
    }

    /// DF-15a, on a paused clock: a first list's page waits for more (here
    /// for the longest hold, nothing more coming), and the list's end hands
    /// on what is held at once; pages of a synced queue's relist are not held.
    #[actix::test]
    async fn df_15a_a_first_lists_pages_are_held_until_more_come_or_it_ends() {
        use super::super::hold::MAX_HOLD;
        tokio::time::pause();
        let (fifo, seen, synced) = fifo_with_causes().await;
        let t0 = tokio::time::Instant::now();
        fifo.send(page(&["a", "b"], true, false))
            .await
            .unwrap()
            .unwrap();
        wait_for(&seen, 2).await;
        assert!(t0.elapsed() >= MAX_HOLD, "held {:?}", t0.elapsed());
        let t1 = tokio::time::Instant::now();
        fifo.send(page(&["c"], false, false))
            .await
            .unwrap()
            .unwrap();
        end_and_sync(&fifo, &synced, vec![cm("d")], false).await;
        wait_for(&seen, 4).await;
        assert!(
            t1.elapsed() < MAX_HOLD,
            "the end goes on at once: {:?}",
            t1.elapsed()
        );
        let t2 = tokio::time::Instant::now();
        fifo.send(page(&["e"], true, false)).await.unwrap().unwrap();
        wait_for(&seen, 5).await;
        assert!(t2.elapsed() < MAX_HOLD, "a relist's page is not held");
    }

    /// A snapshot restored in pages is one initial population: every add
    /// is `Restored`, and the queue is synced only at its end.
    #[actix::test]
    async fn a_snapshot_restored_in_pages_is_one_restored_population() {
        use crate::event::Cause;
        let (fifo, seen, synced) = fifo_with_causes().await;
        fifo.send(page(&["a", "b"], true, true))
            .await
            .unwrap()
            .unwrap();
        fifo.send(page(&["c"], false, true)).await.unwrap().unwrap();
        wait_for(&seen, 3).await;
        assert!(!*synced.borrow(), "not synced before the snapshot's end");
        end_and_sync(&fifo, &synced, Vec::new(), true).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|(_, c)| *c == Cause::Restored), "{seen:?}");
    }

    /// A restore cut short (its snapshot damaged after a page) is completed
    /// by a list: what was restored is `Restored`, the list's new objects
    /// `Initial`, and the list's end deletes what it no longer holds.
    #[actix::test]
    async fn a_restore_cut_short_is_completed_by_a_list() {
        use crate::event::Cause;
        let (fifo, seen, synced) = fifo_with_causes().await;
        fifo.send(page(&["a", "b"], true, true))
            .await
            .unwrap()
            .unwrap();
        wait_for(&seen, 2).await;
        fifo.send(page(&["a", "c"], true, false))
            .await
            .unwrap()
            .unwrap();
        end_and_sync(&fifo, &synced, vec![cm("d")], false).await;
        wait_for(&seen, 5).await;
        let seen = seen.lock().unwrap().clone();
        let of = |k: &str| -> Vec<Cause> {
            seen.iter()
                .filter(|(key, _)| key == &format!("ns/{k}"))
                .map(|(_, c)| *c)
                .collect()
        };
        assert_eq!(of("a"), [Cause::Restored], "unchanged: no second event");
        assert_eq!(
            of("b"),
            [Cause::Restored, Cause::Relist],
            "restored, then gone"
        );
        assert_eq!(of("c"), [Cause::Initial]);
        assert_eq!(of("d"), [Cause::Initial]);
    }

    fn names(point: &crate::indexer::ConsistentPoint<ConfigMap>) -> Vec<String> {
        let mut v: Vec<String> = point.changed.iter().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    /// The snapshot feed's consistent points, end to end through the
    /// DeltaFIFO and the Indexer: a restored population is one at its
    /// resourceVersion with no change to write; a watch batch that empties
    /// the queue is one at its last event's resourceVersion with its keys; a
    /// bookmark with nothing queued is one at the bookmark's, with no change.
    #[actix::test]
    async fn consistent_points_follow_the_queue_and_bookmarks() {
        use crate::indexer::SnapshotFeed;
        let cache = Cache::<ConfigMap>::new();
        let reader = cache.reader();
        let feed = SnapshotFeed::new();
        let indexer = Indexer::new(cache, Arc::new(IndexerStats::default()))
            .with_feed(feed.clone())
            .start();
        let fifo = DeltaFifo::new(
            reader.clone(),
            indexer,
            FifoOptions::default(),
            watch::channel(false).0,
            Arc::new(FifoStats::default()),
        )
        .start();
        let take = || {
            feed.take(std::time::Duration::from_secs(5))
                .unwrap()
                .unwrap()
        };
        let restored = Replace {
            objects: vec![cm("a"), cm("b")],
            resource_version: "10".into(),
            restored: true,
            continues: false,
        };
        fifo.send(restored).await.unwrap().unwrap();
        let point = take();
        assert_eq!(
            (point.resource_version.as_str(), point.snapshot.len()),
            ("10", 2)
        );
        assert!(
            point.changed.is_empty(),
            "restored objects are on disk already"
        );
        let events = vec![
            WatchDelta::Modified(crate::testing::configmap("a", "11")),
            WatchDelta::Added(crate::testing::configmap("c", "12")),
        ];
        fifo.send(Enqueue(events)).await.unwrap().unwrap();
        let point = take();
        assert_eq!(point.resource_version, "12");
        assert_eq!(names(&point), ["ns/a", "ns/c"]);
        fifo.send(Progress("15".into())).await.unwrap();
        let point = take();
        assert_eq!(point.resource_version, "15");
        assert!(point.changed.is_empty());
        assert_eq!(point.snapshot.len(), 3);
        // A paged relist: its first page is cached before the list ends, at
        // no one resourceVersion, so there is no point until its end.
        let page = vec![crate::testing::configmap("d", "20")];
        fifo.send(ListPage {
            objects: page,
            first: true,
            restored: false,
        })
        .await
        .unwrap()
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !reader.snapshot().contains("ns/d") {
            assert!(std::time::Instant::now() < deadline, "the page is cached");
            settle().await;
        }
        assert!(
            feed.take(std::time::Duration::ZERO).unwrap().is_none(),
            "no consistent point inside a list"
        );
        fifo.send(Replace {
            objects: vec![crate::testing::configmap("e", "20")],
            resource_version: "20".into(),
            restored: false,
            continues: true,
        })
        .await
        .unwrap()
        .unwrap();
        let point = take();
        assert_eq!(point.resource_version, "20");
        let mut left: Vec<String> = point
            .snapshot
            .keys()
            .iter()
            .map(|k| k.to_string())
            .collect();
        left.sort();
        assert_eq!(left, ["ns/d", "ns/e"], "a, b and c vanished from the list");
    }
}
