//! The Indexer actor: applies each batch to the [`Cache`] and publishes it
//! (`apply`), hands its events out a chunk at a time (`distribution`,
//! `outlets`) and runs the resync sweeps (`sweeps`); it only performs what
//! those parts decide. A batch is answered to the DeltaFIFO once every
//! listener accepted its events (sent on credit, [`DeliveryCredit`](crate::listener::DeliveryCredit),
//! or answered once queued): a full `Block` listener holds the pipeline back.
//! A new listener gets the cache whole ([`Replay`], O(1), SI-5). Sweep chunks
//! go to resync lanes ([`DeliverResync`]), one in flight per subscriber,
//! after real work, one per step.

use std::collections::VecDeque;
use std::sync::Arc;

use actix::prelude::*;
use futures::channel::oneshot;
use kube::Resource;

use super::cache::Cache;
use super::distribution::HandOut;
use super::feed::{FeedOutlet, SnapshotFeed, apply_noted};
use super::messages::*;
use super::outlets::{Outlets, send_answered};
use super::stats::IndexerStats;
use super::sweeps::{SweepChunk, Sweeps, now};
use crate::answer::Answer;
use crate::listener::{CacheSynced, DeliverResync, Replay};
use crate::subscriber::SubscriberId;

/// The Indexer actor.
pub struct Indexer<K: Resource + Send + Sync + 'static> {
    cache: Cache<K>,
    listeners: Outlets<K>,
    /// The DeltaFIFO synced: listeners subscribed from now on sync at once.
    upstream_synced: bool,
    /// Batches not applied yet, oldest first.
    batches: VecDeque<(Process<K>, oneshot::Sender<()>)>,
    /// Where consistent states go for a snapshot writer, if one persists.
    feed: Option<FeedOutlet<K>>,
    /// A chunk of a batch waits for listeners' answers: no batch is applied
    /// until it is accepted, so each listener gets the batches in order.
    busy: bool,
    sweeps: Sweeps<K>,
    /// A step is scheduled after a yield (a sweep may go).
    sweeps_resuming: bool,
    /// A timer for the sweeps' places is pending. One at most: actix polls
    /// every pending timer at each wake-up.
    place_timer: bool,
    stats: Arc<IndexerStats>,
    span: tracing::Span,
}

impl<K: Resource + Send + Sync + 'static> Indexer<K> {
    /// An Indexer owning `cache` (indexes already added).
    pub fn new(cache: Cache<K>, stats: Arc<IndexerStats>) -> Self {
        Indexer {
            cache,
            listeners: Outlets::new(stats.clone()),
            upstream_synced: false,
            batches: VecDeque::new(),
            feed: None,
            busy: false,
            sweeps: Sweeps::default(),
            sweeps_resuming: false,
            place_timer: false,
            stats,
            span: tracing::Span::none(),
        }
    }

    /// Handles messages inside `span` (e.g. one naming the informer).
    pub fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// Offers consistent cache states to a snapshot writer through `feed`.
    pub fn with_feed(mut self, feed: Arc<SnapshotFeed<K>>) -> Self {
        self.feed = Some(FeedOutlet::new(feed));
        self
    }

    /// Applies the waiting batches unless one waits for listeners, then
    /// sends a sweep chunk. Real work first: a batch applied now reaches
    /// each listener before any resync chunk read from the cache after it.
    fn step(&mut self, ctx: &mut Context<Self>) {
        self.sweeps.tidy();
        while !self.busy
            && let Some((process, reply)) = self.batches.pop_front()
        {
            let events = apply_noted(&mut self.cache, &self.stats, process, self.feed.as_mut());
            let sweeps = &self.sweeps;
            let targets = self.listeners.ids().map(|id| (id, sweeps.is_syncing(id)));
            self.hand_out(HandOut::new(events, targets.collect()), reply, ctx);
        }
        self.step_sweeps(ctx);
    }

    /// Hands `out` out a chunk at a time, each once the one before was
    /// accepted, then answers the DeltaFIFO. Sweeps pause meanwhile.
    fn hand_out(
        &mut self,
        mut out: HandOut<K>,
        reply: oneshot::Sender<()>,
        ctx: &mut Context<Self>,
    ) {
        let answered = loop {
            let chunk = out.next_chunk(|id| self.listeners.contains(id));
            self.sweeps.pause(!out.is_done());
            let (answered, gone) = self.listeners.send(chunk);
            gone.into_iter().for_each(|id| self.remove(id, true));
            if !answered.is_empty() || out.is_done() {
                break answered;
            }
        };
        if answered.is_empty() {
            let _ = reply.send(());
            return;
        }
        self.busy = true;
        send_answered(answered)
            .into_actor(self)
            .map(move |gone, act, ctx| {
                gone.into_iter().for_each(|id| act.remove(id, true));
                act.busy = false;
                if out.is_done() {
                    let _ = reply.send(());
                } else {
                    act.hand_out(out, reply, ctx);
                }
                act.step(ctx);
            })
            .spawn(ctx);
    }

    /// Sends the next sweep chunk, if one may go, and steps again after a
    /// yield while more may.
    fn step_sweeps(&mut self, ctx: &mut Context<Self>) {
        let listeners = &self.listeners;
        let next = self
            .sweeps
            .next(&self.cache, now(), |id| listeners.contains(id));
        if let Some(SweepChunk { events, to }) = next {
            let (mut events, mut to) = (Some(events), to.into_iter().peekable());
            while let Some(chunk) = to.next() {
                let id = chunk.subscriber();
                let Some(addr) = self.listeners.addr(id).cloned() else {
                    self.sweeps.taken(chunk, now(), false);
                    continue;
                };
                // The last one takes the chunk, the others a copy.
                let evs = if to.peek().is_some() {
                    events.clone()
                } else {
                    events.take()
                };
                addr.send(DeliverResync(evs.unwrap_or_default()))
                    .into_actor(self)
                    .map(move |answer, act, ctx| {
                        if !matches!(answer, Ok(Ok(()))) {
                            act.remove(id, true);
                        }
                        let subscribed = act.listeners.contains(id);
                        act.sweeps.taken(chunk, now(), subscribed);
                        act.step(ctx);
                    })
                    .spawn(ctx);
            }
            self.arm_place_timer(ctx);
        }
        if self.sweeps.ready() && !self.sweeps_resuming {
            self.sweeps_resuming = true;
            tokio::task::yield_now()
                .into_actor(self)
                .map(|_, act, ctx| {
                    act.sweeps_resuming = false;
                    act.step(ctx);
                })
                .spawn(ctx);
        }
    }

    /// Wakes at the sweeps' next place expiry, unless a timer is pending.
    fn arm_place_timer(&mut self, ctx: &mut Context<Self>) {
        let Some(at) = self.sweeps.next_expiry().filter(|_| !self.place_timer) else {
            return;
        };
        self.place_timer = true;
        ctx.run_later(at.saturating_duration_since(now()), |act, ctx| {
            act.place_timer = false;
            let freed = act.sweeps.expire(now());
            act.arm_place_timer(ctx);
            if freed {
                act.step(ctx);
            }
        });
    }

    /// Forgets a listener; `lost`: its subscriber is gone (not unsubscribed).
    fn remove(&mut self, id: SubscriberId, lost: bool) {
        self.listeners.remove(id, lost);
        self.sweeps.forget(id);
    }
}

impl<K: Resource + Send + Sync + 'static> Actor for Indexer<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let me = ctx.address().downgrade(); // weak: the compactor outlives no actor
        let wake = move || me.upgrade().into_iter().for_each(|a| a.do_send(Compacted));
        self.cache.on_compacted(wake);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Compacted> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, _: Compacted, _: &mut Context<Self>) {
        self.cache.publish();
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Process<K>> for Indexer<K> {
    type Result = Answer<()>;

    fn handle(&mut self, process: Process<K>, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let (tx, rx) = oneshot::channel();
        self.batches.push_back((process, tx));
        self.step(ctx);
        // Listeners with credit took it all already: answered in place.
        Answer::from_receiver(rx, ())
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<FifoSynced> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, _: FifoSynced, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.upstream_synced = true;
        for addr in self.listeners.addrs() {
            addr.do_send(CacheSynced);
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Subscribe<K>> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, msg: Subscribe<K>, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // Every batch applied so far; the listener gets every later one.
        if !self.cache.is_empty() {
            msg.listener.do_send(Replay {
                len: self.cache.len(),
                objects: Box::new(self.cache.entries_lazily()),
            });
        }
        if self.upstream_synced {
            msg.listener.do_send(CacheSynced);
        }
        self.listeners
            .insert(msg.id, msg.listener, msg.credit, msg.stats);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Unsubscribe> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, Unsubscribe(id): Unsubscribe, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.remove(id, false);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<ListenerStopped> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, ListenerStopped(id): ListenerStopped, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.remove(id, true);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<ResyncDue> for Indexer<K> {
    type Result = MessageResult<ResyncDue>;

    fn handle(&mut self, ResyncDue(due): ResyncDue, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let (known, gone): (Vec<_>, Vec<_>) =
            due.into_iter().partition(|&id| self.listeners.contains(id));
        // One still taking its replay is swept now: its lane comes after the
        // replay, so it never gets the resync of an object before its add.
        self.sweeps.start(known, &self.cache);
        self.step(ctx);
        MessageResult(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta_fifo::{DeltaQueue, DeltaQueueOptions};
    use crate::event::{Cause, Event};
    use crate::indexer::distribution::CHUNK;
    use crate::indexer::sweeps::SWEEP_SLOT_MAX;
    use crate::key::ObjectKey;
    use crate::listener::{Listener, ListenerOptions, ListenerStats, OverflowPolicy, StopListener};
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::watch;

    type Seen = Arc<Mutex<Vec<(String, Cause)>>>;

    /// Records (key, cause); its handler waits while the gate is closed.
    struct Gated {
        seen: Seen,
        gate: watch::Receiver<bool>,
    }

    impl Actor for Gated {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for Gated {
        type Result = ();

        fn handle(&mut self, e: Event<ConfigMap>, ctx: &mut Context<Self>) {
            let cause = match &e {
                Event::Added { cause, .. }
                | Event::Updated { cause, .. }
                | Event::Deleted { cause, .. } => *cause,
            };
            self.seen.lock().unwrap().push((e.key().to_string(), cause));
            crate::testing::hold_until_open(self, &self.gate, ctx);
        }
    }

    /// A Block listener of `capacity` over a [`Gated`] subscriber.
    fn listener(capacity: usize, gate: watch::Receiver<bool>) -> (Listener<ConfigMap>, Seen) {
        listener_with(OverflowPolicy::Block, capacity, gate)
    }

    fn listener_with(
        policy: OverflowPolicy,
        capacity: usize,
        gate: watch::Receiver<bool>,
    ) -> (Listener<ConfigMap>, Seen) {
        let seen = Seen::default();
        let sink = Gated {
            seen: seen.clone(),
            gate,
        }
        .start();
        let listener = Listener::new(
            SubscriberId(0),
            sink.recipient(),
            ListenerOptions { policy, capacity },
            watch::channel(false).0,
            Arc::new(ListenerStats::default()),
        );
        (listener, seen)
    }

    /// A cache holding a ConfigMap of each name.
    fn cache_of(names: &[String]) -> Cache<ConfigMap> {
        let mut cache = Cache::new();
        for name in names {
            let obj = cm(name);
            cache.upsert(ObjectKey::of(obj.as_ref()).unwrap(), obj);
        }
        cache
    }

    fn cm(name: &str) -> Arc<ConfigMap> {
        crate::testing::configmap(name, "1")
    }

    /// Subscribes these listeners, in order, under these ids.
    async fn subscribe<const N: usize>(
        indexer: &Addr<Indexer<ConfigMap>>,
        listeners: [(u64, Listener<ConfigMap>); N],
    ) {
        for (id, listener) in listeners {
            indexer
                .send(Subscribe::start(SubscriberId(id), listener))
                .await
                .unwrap();
        }
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// An unsubscribe whose listener stopped before this actor read the
    /// `Unsubscribe` (it sat behind a batch that then found the listener
    /// gone) is no loss; a listener that stops on its own is one.
    #[actix::test]
    async fn a_listener_unsubscribed_behind_a_batch_is_not_counted_lost() {
        let stats = Arc::new(IndexerStats::default());
        let indexer = Indexer::new(Cache::new(), stats.clone()).start();
        let (left, _) = listener(16, watch::channel(true).1);
        let (dropped, _) = listener(16, watch::channel(true).1);
        let (left_stats, left_addr) = (Arc::clone(&left.stats), left.start());
        let dropped_addr = dropped.start();
        for (id, addr, listener_stats) in [
            (1, left_addr.clone(), left_stats.clone()),
            (2, dropped_addr.clone(), Arc::new(ListenerStats::default())),
        ] {
            let credit = crate::listener::DeliveryCredit::new(16);
            let subscribe = Subscribe {
                id: SubscriberId(id),
                listener: addr,
                credit,
                stats: listener_stats,
            };
            indexer.send(subscribe).await.unwrap();
        }
        // What a `Subscription` does to unsubscribe, with the listener
        // stopped first and a batch ahead of the `Unsubscribe`.
        left_stats.unsubscribed.store(true, Ordering::SeqCst);
        left_addr.send(StopListener).await.unwrap();
        dropped_addr.send(StopListener).await.unwrap();
        until("both listeners stopped", || {
            !left_addr.connected() && !dropped_addr.connected()
        })
        .await;
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        queue.add(cm("o"), &()).unwrap();
        let processed = indexer.send(Process::new(queue.pop_batch(1)));
        indexer.do_send(Unsubscribe(SubscriberId(1)));
        processed.await.unwrap();
        until("both listeners removed", || {
            stats.listeners.load(Ordering::SeqCst) == 0
        })
        .await;
        assert_eq!(
            stats.listeners_lost.load(Ordering::SeqCst),
            1,
            "only the listener that stopped on its own"
        );
    }

    /// Regression: a sweep read the cache while a batch of more than one
    /// chunk was still being handed out (a full Block listener held its
    /// second chunk), so a fast subscriber got resyncs of keys whose adds
    /// had not reached it yet.
    #[actix::test]
    async fn a_resync_never_overtakes_the_rest_of_a_batch() {
        let indexer = Indexer::new(Cache::new(), Arc::new(IndexerStats::default())).start();
        let (stalled_gate, closed) = watch::channel(false);
        let (stalled, _) = listener(1, closed);
        let (fast, seen) = listener(1024, watch::channel(true).1);
        subscribe(&indexer, [(1, stalled), (2, fast)]).await;
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        let keys: Vec<String> = (0..300).map(|i| format!("o{i:03}")).collect();
        for k in &keys {
            queue.add(cm(k), &()).unwrap();
        }
        let processed = indexer.send(Process::new(queue.pop_batch(300)));
        let due = indexer.send(ResyncDue(vec![SubscriberId(2)]));
        until("the first chunk reached the fast subscriber", || {
            seen.lock().unwrap().len() >= CHUNK
        })
        .await;
        assert!(due.await.unwrap().is_empty());
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        let early: Vec<_> = seen.lock().unwrap()[CHUNK..].to_vec();
        assert!(
            early.is_empty(),
            "nothing after the first chunk while the batch is held: {:?}",
            &early[..early.len().min(3)]
        );
        stalled_gate.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), processed)
            .await
            .expect("the batch is answered once the stalled listener took it")
            .unwrap();
        until(
            "every add and every resync reached the fast subscriber",
            || seen.lock().unwrap().len() == 2 * keys.len(),
        )
        .await;
        let seen = seen.lock().unwrap();
        for k in &keys {
            let key = format!("ns/{k}");
            let at = |resync: bool| {
                seen.iter()
                    .position(|(s, c)| *s == key && (*c == Cause::Resync) == resync)
            };
            assert!(
                at(false).unwrap() < at(true).unwrap(),
                "{key}: resync before its add"
            );
        }
    }

    /// Credit (deliveries sent unanswered) never takes a `Block` listener
    /// past its bound: what its queue cannot take goes answered, and the
    /// batches after it wait until the subscriber makes room, in order.
    #[actix::test]
    async fn a_full_block_listener_holds_the_batches_beyond_its_credit() {
        let indexer = Indexer::new(Cache::new(), Arc::new(IndexerStats::default())).start();
        let (gate, closed) = watch::channel(false);
        let seen = Seen::default();
        let sink = Gated {
            seen: seen.clone(),
            gate: closed,
        }
        .start();
        let stats = Arc::new(ListenerStats::default());
        let capacity = 4;
        let listener = Listener::new(
            SubscriberId(1),
            sink.recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity,
            },
            watch::channel(false).0,
            stats.clone(),
        );
        subscribe(&indexer, [(1, listener)]).await;
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        let answered = Arc::new(AtomicUsize::new(0));
        let n = 20;
        for i in 0..n {
            queue.add(cm(&format!("o{i:02}")), &()).unwrap();
            let processed = indexer.send(Process::new(queue.pop_batch(1)));
            let answered = answered.clone();
            actix::spawn(async move {
                processed.await.unwrap();
                answered.fetch_add(1, Ordering::SeqCst);
            });
        }
        // The queue full and one delivery parked behind it, unanswered.
        until("the listener is full", || {
            stats.pending.load(Ordering::SeqCst) == capacity + 1
        })
        .await;
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        // Answered: the events queued, the one the subscriber handled and
        // the one in its mailbox (the gate pauses it after a handler call).
        let taken = answered.load(Ordering::SeqCst);
        assert!(taken <= capacity + 2, "{taken} batches answered");
        assert_eq!(stats.pending.load(Ordering::SeqCst), capacity + 1);
        assert_eq!(seen.lock().unwrap().len(), 1);
        gate.send_replace(true);
        until("every batch answered", || {
            answered.load(Ordering::SeqCst) == n
        })
        .await;
        until("every event delivered", || seen.lock().unwrap().len() == n).await;
        let keys: Vec<_> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        let expected: Vec<_> = (0..n).map(|i| format!("ns/o{i:02}")).collect();
        assert_eq!(keys, expected, "in order");
    }

    /// A subscriber that comes due for resync while its replay (SI-5) is
    /// held back by its own full queue is swept at once, and gets the
    /// resyncs after the whole replay: no period skipped, no resync of an
    /// object before its add.
    #[actix::test]
    async fn a_subscriber_due_during_its_replay_is_swept_after_it() {
        let keys: Vec<String> = (0..300).map(|i| format!("o{i:03}")).collect();
        let cache = cache_of(&keys);
        let indexer = Indexer::new(cache, Arc::new(IndexerStats::default())).start();
        let (gate, closed) = watch::channel(false);
        let (listener, seen) = listener(1, closed);
        subscribe(&indexer, [(1, listener)]).await;
        until("the replay began", || !seen.lock().unwrap().is_empty()).await;
        let gone = indexer
            .send(ResyncDue(vec![SubscriberId(1)]))
            .await
            .unwrap();
        assert!(gone.is_empty(), "a replaying subscriber is known");
        gate.send_replace(true);
        until("the replay and then a full resync", || {
            seen.lock().unwrap().len() == 2 * keys.len()
        })
        .await;
        let seen = seen.lock().unwrap();
        assert!(seen[..keys.len()].iter().all(|(_, c)| *c == Cause::Initial));
        assert!(seen[keys.len()..].iter().all(|(_, c)| *c == Cause::Resync));
    }

    /// Regression: a late `Block` subscriber that did not take its replay
    /// held every delta back (the replay had to be taken first, SI-5), so
    /// the other subscribers and the cache stopped. The replay is now handed
    /// to its listener whole: batches go on, and the late subscriber gets
    /// the whole replay first, then the batch.
    #[actix::test]
    async fn a_late_subscriber_taking_its_replay_holds_no_one_back() {
        let keys: Vec<String> = (0..300).map(|i| format!("o{i:03}")).collect();
        let cache = cache_of(&keys);
        let indexer = Indexer::new(cache, Arc::new(IndexerStats::default())).start();
        let (fast, fast_seen) = listener(1024, watch::channel(true).1);
        subscribe(&indexer, [(1, fast)]).await;
        let (gate, closed) = watch::channel(false);
        let (late, late_seen) = listener(16, closed);
        subscribe(&indexer, [(2, late)]).await;
        until("the late subscriber's first handler call", || {
            !late_seen.lock().unwrap().is_empty()
        })
        .await;
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        queue.add(cm("new"), &()).unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            indexer.send(Process::new(queue.pop_batch(1))),
        )
        .await
        .expect("the batch is not held back by the late subscriber's replay")
        .unwrap();
        until("the fast subscriber's replay and the add", || {
            fast_seen.lock().unwrap().len() == keys.len() + 1
        })
        .await;
        assert_eq!(
            late_seen.lock().unwrap().len(),
            1,
            "the late one is stalled"
        );
        gate.send_replace(true);
        until("the late subscriber's replay and the add", || {
            late_seen.lock().unwrap().len() == keys.len() + 1
        })
        .await;
        for seen in [fast_seen, late_seen] {
            let seen = seen.lock().unwrap();
            assert!(seen[..keys.len()].iter().all(|(_, c)| *c == Cause::Initial));
            let mut replayed: Vec<_> = seen[..keys.len()].iter().map(|(k, _)| k.clone()).collect();
            replayed.sort();
            let want: Vec<_> = keys.iter().map(|k| format!("ns/{k}")).collect();
            assert_eq!(replayed, want);
            assert_eq!(seen[keys.len()], ("ns/new".to_string(), Cause::Watch));
        }
    }

    /// Polls `done` between yields, never letting the runtime idle (so a
    /// paused clock does not advance); fails after many rounds.
    async fn spin(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..200_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never happened: {what}");
    }

    /// Regression: one chunk of one sweep was in flight for all subscribers,
    /// and a stalled subscriber's listener holds each chunk's answer for up
    /// to `RESYNC_HOLD_MAX`, so it slowed every other subscriber's resyncs.
    /// The place timer now gives a stalled sweep's place up after
    /// `SWEEP_SLOT_MAX` (the rule: `sweeps::tests`): on a paused clock, the
    /// fast subscriber's whole resync ends before a single hold expired.
    #[actix::test]
    async fn the_place_timer_lets_the_others_overtake_a_stalled_sweep() {
        tokio::time::pause();
        let n = 10 * CHUNK;
        let mut cache = Cache::new();
        for i in 0..n {
            let obj = cm(&format!("o{i:04}"));
            cache.upsert(ObjectKey::of(obj.as_ref()).unwrap(), obj);
        }
        let indexer = Indexer::new(cache, Arc::new(IndexerStats::default())).start();
        let (_gate, closed) = watch::channel(false);
        let (stalled, _) = listener_with(OverflowPolicy::Coalesce, 16, closed);
        let (fast, seen) = listener(2 * n, watch::channel(true).1);
        subscribe(&indexer, [(1, stalled), (2, fast)]).await;
        spin("the fast subscriber's replay", || {
            seen.lock().unwrap().len() == n
        })
        .await;
        let t0 = tokio::time::Instant::now();
        // The stalled subscriber is due first: its sweep goes first.
        let due = vec![SubscriberId(1), SubscriberId(2)];
        assert!(indexer.send(ResyncDue(due)).await.unwrap().is_empty());
        // The clock moves only while everything waits (for the stalled
        // sweep to give its turn up).
        until("the fast subscriber's whole resync", || {
            seen.lock().unwrap().len() == 2 * n
        })
        .await;
        let elapsed = t0.elapsed();
        assert!(elapsed >= SWEEP_SLOT_MAX, "{elapsed:?}");
        assert!(elapsed < crate::listener::RESYNC_HOLD_MAX, "{elapsed:?}");
    }
}
