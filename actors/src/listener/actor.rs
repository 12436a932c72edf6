//! The listener actor: one per subscriber, a shell over its [`Delivery`]. It
//! takes the Indexer's messages, asks its delivery what to send next and when
//! to answer, and performs that: handler calls to the subscriber's actor (each
//! spawned, never `ctx.wait`), or an inline function's turns; answers in
//! place or held, the resync answer's timer, stats, credit and sync channel.

use std::sync::Arc;

use actix::prelude::*;
use futures::channel::oneshot;
use tokio::sync::watch;

use super::credit::DeliveryCredit;
use super::delivery::{Delivery, Due, Sent, When};
use super::inline::{InlineTurns, Turn, after_yield};
use super::messages::{
    CacheSynced, Deliver, DeliverResync, ListenerGone, RESYNC_HOLD_MAX, Replay, StopListener,
};
use super::options::{ListenerOptions, Target};
use super::reply::{Reply, answer, held};
use super::sink::{Calls, Replies, Sink};
use super::stats::{ListenerStats, SyncedChannel};
use crate::answer::Answer;
use crate::subscriber::SubscriberId;

/// The listener actor of one subscriber.
pub struct Listener<K: Send + Sync + 'static> {
    id: SubscriberId,
    delivery: Delivery<K, Reply>,
    sink: Sink<K>,
    /// Handler calls in flight, awaited by a [`Replies`] future.
    calls: Calls<K>,
    /// A timer for the held resync answer is pending. One at most: the
    /// context polls every pending timer at each wake-up, and one per chunk
    /// took about 10 % of the CPU of a run with sweeps (BENCHMARKS.md).
    resync_timer: bool,
    /// An inline handler's turns.
    inline: InlineTurns,
    /// Answered once stopped.
    idle_waiters: Vec<oneshot::Sender<()>>,
    synced: SyncedChannel,
    /// What the Indexer may send without waiting for an answer.
    credit: Arc<DeliveryCredit>,
    /// Shared with the subscription and the Indexer.
    pub(crate) stats: Arc<ListenerStats>,
    span: tracing::Span,
}

/// The clock the held resync answer is timed on (paused in tests).
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl<K: Send + Sync + 'static> Listener<K> {
    /// A listener delivering to `target` (a `Recipient<Event<K>>` converts);
    /// `synced` reports its HS-2 state.
    pub fn new(
        id: SubscriberId,
        target: impl Into<Target<K>>,
        options: ListenerOptions,
        synced: watch::Sender<bool>,
        stats: Arc<ListenerStats>,
    ) -> Self {
        let (sink, shape) = Sink::new(target.into());
        let delivery = Delivery::new(options.policy, options.capacity, shape);
        Listener {
            id,
            credit: DeliveryCredit::new(delivery.room()),
            delivery,
            sink,
            calls: Calls::new(),
            resync_timer: false,
            inline: InlineTurns::default(),
            idle_waiters: Vec::new(),
            synced: SyncedChannel::new(synced),
            stats,
            span: tracing::Span::none(),
        }
    }

    /// Handles messages inside `span` (e.g. one naming the subscriber).
    pub fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }

    /// The credit the Indexer sends on ([`Subscribe`](crate::indexer::Subscribe) carries it).
    pub fn credit(&self) -> Arc<DeliveryCredit> {
        Arc::clone(&self.credit)
    }

    /// Publishes the room, the counters and the sync state.
    fn publish(&self) {
        self.credit.set_room(self.delivery.room());
        self.stats.publish(&self.delivery, &self.synced);
    }

    /// Sends handler calls while the window has room and anything is pending.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.sink.is_inline() {
            // A scheduled turn takes what came since (`super::inline`).
            if !self.inline.is_queued() {
                self.run_inline(ctx);
            }
            return;
        }
        let mut sent_any = false;
        while let Some(call) = self.sink.call(&mut self.delivery) {
            self.calls.push(call);
            sent_any = true;
        }
        if sent_any {
            if self.calls.start_awaiting() {
                ctx.spawn(Replies::new(|a: &mut Self| &mut a.calls, Self::returned));
            }
            answer(self.delivery.sent_calls());
            self.publish();
        }
        self.when_idle();
    }

    /// Once nothing is pending or in flight: answers who waits for that.
    fn when_idle(&mut self) {
        if self.delivery.is_idle() {
            for w in self.idle_waiters.drain(..) {
                let _ = w.send(());
            }
            self.delivery.release_idle_memory();
        }
    }

    /// One turn of the inline handler (see [`super::inline`]); the next
    /// after a yield to the runtime, while anything is pending.
    fn run_inline(&mut self, ctx: &mut Context<Self>) {
        match (self.inline).run(self.id, &mut self.sink, &mut self.delivery, &self.stats) {
            Turn::Panicked(panic) => return self.lost(panic, ctx),
            Turn::Ran(0) => {}
            Turn::Ran(_) => self.publish(),
        }
        let more = !self.delivery.is_idle() && !self.delivery.is_stopped();
        if self.inline.schedule_next(more) {
            after_yield(ctx, |act: &mut Self, ctx| {
                let _span = act.span.clone().entered();
                act.inline.started();
                act.run_inline(ctx);
            });
        }
        self.when_idle();
    }

    /// One handler call returned (or the subscriber is gone).
    fn returned(&mut self, result: Result<(), MailboxError>, sent: Sent, ctx: &mut Context<Self>) {
        self.delivery.returned(&sent);
        if self.delivery.is_stopped() {
            self.publish();
            if self.calls.is_empty() {
                ctx.stop();
            }
            return;
        }
        match result {
            Ok(()) => {
                self.stats.handled(&sent);
                self.publish();
                self.pump(ctx);
            }
            Err(err) => self.lost(err, ctx),
        }
    }

    /// The subscriber is gone (its actor stopped, its function panicked),
    /// or unsubscribed while a call was in flight (not lost).
    fn lost(&mut self, why: impl std::fmt::Display, ctx: &mut Context<Self>) {
        self.stats.lost(self.id, &why, self.sink.unsubscribed());
        ctx.stop();
    }

    /// Gives the held resync answer once it is due, waking in `after`.
    fn arm_resync_timer(&mut self, after: std::time::Duration, ctx: &mut Context<Self>) {
        self.resync_timer = true;
        ctx.run_later(after, |act, ctx| {
            act.resync_timer = false;
            match act.delivery.resync_due(now()) {
                Due::Now(reply) => drop(reply.send(Ok(()))),
                Due::In(after) => act.arm_resync_timer(after, ctx),
                Due::Nothing => {}
            }
        });
    }
}

impl<K: Send + Sync + 'static> Actor for Listener<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Deliveries are answered only when accepted: the mailbox itself never grows past
        // what the Indexer has in flight, but give it room for control messages too.
        ctx.set_mailbox_capacity(64);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        answer(self.delivery.stop());
        self.idle_waiters.clear(); // a dropped sender ends a wait too
        self.publish();
    }
}

impl<K: Send + Sync + 'static> Handler<Deliver<K>> for Listener<K> {
    type Result = Answer<Result<(), ListenerGone>>;

    fn handle(&mut self, Deliver(events): Deliver<K>, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        if self.delivery.is_stopped() {
            return Answer::Now(Err(ListenerGone));
        }
        let taken = events.len();
        answer(self.delivery.deliver(&events));
        self.publish();
        // After the room it left is published: the Indexer reads them in the other order.
        self.credit.took(taken);
        self.pump(ctx);
        match self.delivery.answer_delivery() {
            When::Now => Answer::Now(Ok(())),
            When::Later => held(|reply| self.delivery.hold_delivery(reply)),
        }
    }
}

impl<K: Send + Sync + 'static> Handler<Replay<K>> for Listener<K> {
    type Result = ();

    fn handle(&mut self, replay: Replay<K>, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if self.delivery.replay(replay) {
            self.publish();
            self.pump(ctx);
        }
    }
}

impl<K: Send + Sync + 'static> Handler<DeliverResync<K>> for Listener<K> {
    type Result = Answer<Result<(), ListenerGone>>;

    fn handle(
        &mut self,
        DeliverResync(events): DeliverResync<K>,
        ctx: &mut Context<Self>,
    ) -> Self::Result {
        let _span = self.span.clone().entered();
        if self.delivery.is_stopped() {
            return Answer::Now(Err(ListenerGone));
        }
        self.delivery.resync(events);
        self.publish();
        self.pump(ctx);
        let (earlier, when) = self.delivery.answer_resync();
        answer(earlier);
        match when {
            When::Now => Answer::Now(Ok(())),
            When::Later => {
                if !self.resync_timer {
                    self.arm_resync_timer(RESYNC_HOLD_MAX, ctx);
                }
                held(|reply| self.delivery.hold_resync(reply, now()))
            }
        }
    }
}

impl<K: Send + Sync + 'static> Handler<CacheSynced> for Listener<K> {
    type Result = ();

    fn handle(&mut self, _: CacheSynced, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.delivery.upstream_synced();
        self.publish();
    }
}

impl<K: Send + Sync + 'static> Handler<StopListener> for Listener<K> {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopListener, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        answer(self.delivery.stop());
        if self.calls.is_empty() {
            ctx.stop();
            return Box::pin(async {});
        }
        // The handler calls in flight end the listener when they returned.
        let (tx, rx) = oneshot::channel();
        self.idle_waiters.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}

#[cfg(test)]
#[path = "inline_tests.rs"]
mod inline_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Cause, Event, EventBatch};
    use crate::key::ObjectKey;
    use crate::listener::messages::RESYNC_LANE_LOW;
    use crate::listener::queue::OverflowPolicy;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    fn added(name: &str) -> Event<ConfigMap> {
        let object = Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        });
        Event::Added {
            key: name.into(),
            object,
            cause: Cause::Watch,
        }
    }

    /// Records (key, cause, resourceVersion) of each event; waits while the gate is closed.
    struct GatedSink {
        seen: Arc<std::sync::Mutex<Vec<(String, Cause, String)>>>,
        gate: watch::Receiver<bool>,
    }

    impl Actor for GatedSink {
        type Context = Context<Self>;
    }

    impl GatedSink {
        fn record(&self, e: &Event<ConfigMap>) {
            let rv = e
                .object()
                .and_then(|o| o.metadata.resource_version.clone())
                .unwrap_or_default();
            self.seen
                .lock()
                .unwrap()
                .push((e.key().to_string(), e.cause(), rv));
        }

        /// The handler's answer: once the gate is open.
        fn gate(&self) -> ResponseFuture<()> {
            let mut gate = self.gate.clone();
            Box::pin(async move {
                let _ = gate.wait_for(|open| *open).await;
            })
        }

        /// A gated sink (closed) and what it records.
        #[allow(clippy::type_complexity)]
        fn start_closed() -> (
            Addr<GatedSink>,
            Arc<std::sync::Mutex<Vec<(String, Cause, String)>>>,
            watch::Sender<bool>,
        ) {
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (gate_tx, gate) = watch::channel(false);
            let sink = GatedSink {
                seen: seen.clone(),
                gate,
            }
            .start();
            (sink, seen, gate_tx)
        }
    }

    impl Handler<Event<ConfigMap>> for GatedSink {
        type Result = ResponseFuture<()>;

        fn handle(&mut self, e: Event<ConfigMap>, _: &mut Context<Self>) -> Self::Result {
            self.record(&e);
            self.gate()
        }
    }

    impl Handler<EventBatch<ConfigMap>> for GatedSink {
        type Result = ResponseFuture<()>;

        fn handle(&mut self, batch: EventBatch<ConfigMap>, _: &mut Context<Self>) -> Self::Result {
            for e in batch.iter() {
                self.record(e);
            }
            self.gate()
        }
    }

    fn at_rv(name: &str, rv: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// The subscriber takes a replay sent as a message, and the sync
    /// channel turns true once it has handled all of it after `CacheSynced`
    /// (HS-2); the counters follow.
    #[actix::test]
    async fn the_sync_channel_turns_true_once_the_replay_was_handled() {
        let (sink, seen, gate_tx) = GatedSink::start_closed();
        let (synced, mut synced_rx) = watch::channel(false);
        let stats = Arc::new(ListenerStats::default());
        let listener = Listener::new(
            SubscriberId(1),
            sink.recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 2,
            },
            synced,
            stats.clone(),
        )
        .start();
        let names: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
        let objects: Vec<(ObjectKey, Arc<ConfigMap>)> = names
            .iter()
            .map(|n| (n.as_str().into(), at_rv(n, "1")))
            .collect();
        listener
            .send(crate::listener::fixtures::replay_of(objects))
            .await
            .unwrap();
        listener.send(CacheSynced).await.unwrap();
        assert!(!*synced_rx.borrow(), "synced before its replay was handled");
        gate_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), synced_rx.wait_for(|s| *s))
            .await
            .expect("synced once the replay was handled")
            .unwrap();
        let got: Vec<(String, Cause)> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(k, c, _)| (k.clone(), *c))
            .collect();
        let want: Vec<(String, Cause)> =
            names.iter().map(|n| (n.clone(), Cause::Initial)).collect();
        assert_eq!(got, want);
        assert_eq!(stats.delivered.load(Ordering::SeqCst), 5);
        assert_eq!(stats.pending.load(Ordering::SeqCst), 0);
    }

    /// A feed consumer that goes while a call is in flight: gone (lost) when
    /// it just went, not when it said it was unsubscribing first.
    #[actix::test]
    async fn a_feed_dropped_with_a_call_in_flight_is_lost_only_without_unsubscribing() {
        for unsubscribing in [false, true] {
            let (feed, rx) = crate::listener::feed::<Event<ConfigMap>>();
            let stats = Arc::new(ListenerStats::default());
            let listener = Listener::new(
                SubscriberId(1),
                Target::Feed { feed, depth: 1 },
                ListenerOptions {
                    policy: OverflowPolicy::Block,
                    capacity: 4,
                },
                watch::channel(false).0,
                stats.clone(),
            )
            .start();
            let objects = vec![(ObjectKey::from("a"), at_rv("a", "1"))];
            listener
                .send(crate::listener::fixtures::replay_of(objects))
                .await
                .unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while stats.in_flight.load(Ordering::SeqCst) == 0 {
                assert!(std::time::Instant::now() < deadline, "a call in flight");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if unsubscribing {
                rx.unsubscribing();
            }
            drop(rx);
            while listener.connected() {
                assert!(std::time::Instant::now() < deadline, "the listener stops");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(stats.gone.load(Ordering::SeqCst), !unsubscribing);
        }
    }

    /// The answer to a sweep the lane cannot take is held, and its timer
    /// gives it `RESYNC_HOLD_MAX` later while the subscriber is still stalled
    /// (driven time); the sweep then reaches the subscriber once it resumes.
    #[actix::test]
    async fn a_held_sweep_answer_comes_after_resync_hold_max_from_a_stalled_subscriber() {
        tokio::time::pause();
        let (sink, seen, gate_tx) = GatedSink::start_closed();
        let listener = Listener::new(
            SubscriberId(1),
            sink.recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 16,
            },
            watch::channel(false).0,
            Arc::new(ListenerStats::default()),
        )
        .start();
        let n = RESYNC_LANE_LOW + 50;
        let sweep = (0..n)
            .map(|i| {
                let o = at_rv(&format!("r{i}"), "1");
                Event::Updated {
                    key: format!("r{i}").as_str().into(),
                    old: o.clone().into(),
                    new: o,
                    cause: Cause::Resync,
                }
            })
            .collect();
        let mut answer = Box::pin(listener.send(DeliverResync(sweep)));
        settle().await;
        assert!(
            futures::poll!(&mut answer).is_pending(),
            "paced by the lane"
        );
        tokio::time::advance(RESYNC_HOLD_MAX - Duration::from_millis(1)).await;
        settle().await;
        assert!(
            futures::poll!(&mut answer).is_pending(),
            "held until RESYNC_HOLD_MAX"
        );
        // Past it: tokio's timers round their deadlines up to the next millisecond.
        tokio::time::advance(Duration::from_millis(2)).await;
        settle().await;
        match futures::poll!(&mut answer) {
            std::task::Poll::Ready(Ok(Ok(()))) => {}
            other => panic!("not answered Ok at RESYNC_HOLD_MAX: {other:?}"),
        }
        assert_eq!(seen.lock().unwrap().len(), 1, "still stalled at its first");
        gate_tx.send_replace(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < n {
            assert!(tokio::time::Instant::now() < deadline, "not all delivered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// A subscriber that stops itself after its first event.
    struct Quitter;

    impl Actor for Quitter {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for Quitter {
        type Result = ();

        fn handle(&mut self, _: Event<ConfigMap>, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    /// A subscriber whose actor stopped fails the next handler call: its
    /// listener marks it gone and stops, and takes nothing more.
    #[actix::test]
    async fn a_gone_subscriber_removes_its_listener() {
        let stats = Arc::new(ListenerStats::default());
        let listener = Listener::new(
            SubscriberId(1),
            Quitter.start().recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 8,
            },
            watch::channel(false).0,
            stats.clone(),
        )
        .start();
        listener
            .send(Deliver(vec![added("a"), added("b"), added("c")].into()))
            .await
            .unwrap()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while listener.connected() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "listener still running"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(stats.gone.load(Ordering::SeqCst));
        assert_eq!(stats.delivered.load(Ordering::SeqCst), 1);
        assert_eq!(
            stats.pending.load(Ordering::SeqCst),
            0,
            "what was pending is dropped"
        );
        assert!(
            listener
                .send(Deliver(vec![added("d")].into()))
                .await
                .is_err()
        );
    }

    /// A synchronous subscriber (`Result = ()`) that pauses its mailbox after
    /// its first event until the gate opens.
    struct PausingSink {
        seen: Arc<std::sync::Mutex<Vec<String>>>,
        gate: watch::Receiver<bool>,
    }

    impl Actor for PausingSink {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for PausingSink {
        type Result = ();

        fn handle(&mut self, e: Event<ConfigMap>, ctx: &mut Context<Self>) {
            self.seen.lock().unwrap().push(e.key().to_string());
            crate::testing::hold_until_open(self, &self.gate, ctx);
        }
    }

    /// A `Block` listener (capacity 1000) over a [`PausingSink`] whose gate is closed.
    struct Paused {
        sink: Addr<PausingSink>,
        listener: Addr<Listener<ConfigMap>>,
        stats: Arc<ListenerStats>,
        seen: Arc<std::sync::Mutex<Vec<String>>>,
        gate_tx: watch::Sender<bool>,
    }

    impl Paused {
        fn start(target: impl FnOnce(Recipient<Event<ConfigMap>>) -> Target<ConfigMap>) -> Self {
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (gate_tx, gate) = watch::channel(false);
            let sink = PausingSink {
                seen: seen.clone(),
                gate,
            }
            .start();
            let (synced, _) = watch::channel(false);
            let stats = Arc::new(ListenerStats::default());
            let listener = Listener::new(
                SubscriberId(1),
                target(sink.clone().recipient()),
                ListenerOptions {
                    policy: OverflowPolicy::Block,
                    capacity: 1000,
                },
                synced,
                stats.clone(),
            )
            .start();
            Paused {
                sink,
                listener,
                stats,
                seen,
                gate_tx,
            }
        }
    }

    /// Records keys; every few calls it pauses its mailbox for a moment, so
    /// the listener sees answers late and its queue fill and drain.
    struct JitterySink {
        seen: Arc<std::sync::Mutex<Vec<String>>>,
        calls: u64,
        every: u64,
    }

    impl JitterySink {
        fn record(&mut self, keys: impl Iterator<Item = String>, ctx: &mut Context<Self>) {
            self.seen.lock().unwrap().extend(keys);
            self.calls += 1;
            if self.calls.is_multiple_of(self.every) {
                ctx.wait(
                    async {
                        for _ in 0..3 {
                            tokio::task::yield_now().await;
                        }
                    }
                    .into_actor(self),
                );
            }
        }
    }

    impl Actor for JitterySink {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for JitterySink {
        type Result = ();

        fn handle(&mut self, e: Event<ConfigMap>, ctx: &mut Context<Self>) {
            self.record(std::iter::once(e.key().to_string()), ctx);
        }
    }

    impl Handler<EventBatch<ConfigMap>> for JitterySink {
        type Result = ();

        fn handle(&mut self, b: EventBatch<ConfigMap>, ctx: &mut Context<Self>) {
            self.record(b.iter().map(|e| e.key().to_string()), ctx);
        }
    }

    /// Every combination of policy, capacity, delivery mode and Deliver size
    /// (seeded pseudo-random sizes, a subscriber that pauses now and then)
    /// hands the subscriber exactly what was delivered, in order.
    #[actix::test]
    async fn every_delivery_mode_keeps_order_under_varying_pressure() {
        let mut next = crate::listener::fixtures::seeded();
        for policy in [OverflowPolicy::Block, OverflowPolicy::Coalesce] {
            for capacity in [1, 2, 3, 8] {
                for mode in 0..7 {
                    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
                    let sink = JitterySink {
                        seen: seen.clone(),
                        calls: 0,
                        every: 1 + next(4),
                    }
                    .start();
                    let target = match mode {
                        0 => Target::Each(sink.clone().recipient()),
                        1..=3 => Target::Pipelined {
                            recipient: sink.clone().recipient(),
                            depth: [2, 4, 8][mode - 1],
                        },
                        4 | 5 => Target::Batches {
                            recipient: sink.clone().recipient(),
                            max: [1, 5][mode - 4],
                        },
                        _ => {
                            let seen = seen.clone();
                            Target::Inline(Box::new(move |e| {
                                seen.lock().unwrap().push(e.key().to_string())
                            }))
                        }
                    };
                    let stats = Arc::new(ListenerStats::default());
                    let listener = Listener::new(
                        SubscriberId(1),
                        target,
                        ListenerOptions { policy, capacity },
                        watch::channel(false).0,
                        stats.clone(),
                    )
                    .start();
                    let case = format!("{policy:?}, capacity {capacity}, mode {mode}");
                    let mut names = Vec::new();
                    for _ in 0..20 {
                        let size = 1 + next(2 * capacity as u64 + 4) as usize;
                        let batch: Vec<String> = (names.len()..names.len() + size)
                            .map(|i| format!("o{i}"))
                            .collect();
                        let events: Vec<_> = batch.iter().map(|n| added(n)).collect();
                        names.extend(batch);
                        tokio::time::timeout(
                            Duration::from_secs(5),
                            listener.send(Deliver(events.into())),
                        )
                        .await
                        .unwrap_or_else(|_| panic!("{case}: Deliver not answered"))
                        .unwrap()
                        .unwrap();
                    }
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                    while seen.lock().unwrap().len() < names.len() {
                        assert!(
                            tokio::time::Instant::now() < deadline,
                            "{case}: {} of {} delivered",
                            seen.lock().unwrap().len(),
                            names.len()
                        );
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    assert_eq!(*seen.lock().unwrap(), names, "{case}");
                    assert_eq!(stats.pending.load(Ordering::SeqCst), 0, "{case}");
                    // The sink records before its answer reaches the
                    // listener, which then counts the call returned.
                    while stats.in_flight.load(Ordering::SeqCst) != 0 {
                        assert!(
                            tokio::time::Instant::now() < deadline,
                            "{case}: calls still in flight"
                        );
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        }
    }

    /// A pipelined listener (depth 4) over a paused subscriber with 20 events
    /// queued: four sent (two answered sends, each acknowledging the event
    /// sent before it), one of them handled, the rest pending.
    #[allow(clippy::type_complexity)]
    async fn pipelined_and_paused() -> (
        Addr<Listener<ConfigMap>>,
        Arc<ListenerStats>,
        Arc<std::sync::Mutex<Vec<String>>>,
        watch::Sender<bool>,
        Vec<String>,
    ) {
        let Paused {
            listener,
            stats,
            seen,
            gate_tx,
            ..
        } = Paused::start(|recipient| Target::Pipelined {
            recipient,
            depth: 4,
        });
        let names: Vec<String> = (0..20).map(|i| format!("o{i}")).collect();
        listener
            .send(Deliver(names.iter().map(|n| added(n)).collect()))
            .await
            .unwrap()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while stats.pending.load(Ordering::SeqCst) > 16 {
            assert!(tokio::time::Instant::now() < deadline, "window not filled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            stats.pending.load(Ordering::SeqCst),
            16,
            "at most 4 in flight"
        );
        assert_eq!(
            stats.in_flight.load(Ordering::SeqCst),
            4,
            "the stats count what is in flight"
        );
        assert_eq!(seen.lock().unwrap().clone(), vec!["o0".to_string()]);
        (listener, stats, seen, gate_tx, names)
    }

    /// Pipelined events wait in the subscriber's mailbox, never more than the
    /// depth, and are handled one at a time in order.
    #[actix::test]
    async fn pipelined_events_are_bounded_and_ordered() {
        let (_listener, stats, seen, gate_tx, names) = pipelined_and_paused().await;
        gate_tx.send_replace(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while stats.delivered.load(Ordering::SeqCst) < 20 {
            assert!(tokio::time::Instant::now() < deadline, "not all delivered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.lock().unwrap().clone(), names);
        assert_eq!(stats.in_flight.load(Ordering::SeqCst), 0);
    }

    /// A full `Block` listener answers a delivery it had to park only once
    /// its subscriber made room (the answer is deferred, not given in place),
    /// and then with `Ok`; one it parks when stopped is answered as gone.
    #[actix::test]
    async fn a_parked_delivery_is_answered_when_room_is_made_or_as_gone_on_stop() {
        for stop in [false, true] {
            let (sink, seen, gate_tx) = GatedSink::start_closed();
            let listener = Listener::new(
                SubscriberId(1),
                sink.recipient(),
                ListenerOptions {
                    policy: OverflowPolicy::Block,
                    capacity: 1,
                },
                watch::channel(false).0,
                Arc::new(ListenerStats::default()),
            )
            .start();
            // One in flight (held by the gate), one queued: full.
            listener
                .send(Deliver(vec![added("a"), added("b")].into()))
                .await
                .unwrap()
                .unwrap();
            let mut parked = Box::pin(listener.send(Deliver(vec![added("c")].into())));
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            assert!(
                futures::poll!(&mut parked).is_pending(),
                "stop={stop}: answered while the queue was full"
            );
            if stop {
                let _stopping = listener.send(StopListener);
                let answer = tokio::time::timeout(Duration::from_secs(5), parked)
                    .await
                    .expect("a parked delivery is answered when its listener stops");
                assert!(
                    !matches!(answer, Ok(Ok(()))),
                    "answered Ok though dropped: {answer:?}"
                );
            } else {
                gate_tx.send_replace(true);
                let answer = tokio::time::timeout(Duration::from_secs(5), parked)
                    .await
                    .expect("answered once the subscriber made room");
                assert!(matches!(answer, Ok(Ok(()))), "{answer:?}");
                let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                while seen.lock().unwrap().len() < 3 {
                    assert!(tokio::time::Instant::now() < deadline, "not all delivered");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }

    /// Stopping a pipelined listener waits for the events already in the
    /// subscriber's mailbox and drops the pending ones (SI-12, SI-13).
    #[actix::test]
    async fn stopping_a_pipelined_listener_waits_for_what_was_sent() {
        let (listener, stats, seen, gate_tx, names) = pipelined_and_paused().await;
        let mut stop = Box::pin(listener.send(StopListener));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert!(
            futures::poll!(&mut stop).is_pending(),
            "events still in flight"
        );
        gate_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), stop)
            .await
            .expect("stopped once the sent events were handled")
            .unwrap();
        assert_eq!(seen.lock().unwrap().clone(), names[..4].to_vec());
        assert_eq!(stats.pending.load(Ordering::SeqCst), 0);
        assert_eq!(stats.in_flight.load(Ordering::SeqCst), 0);
    }

    /// Another sender's message to the same subscriber.
    #[derive(Message)]
    #[rtype(result = "()")]
    struct Noise;

    impl Handler<Noise> for PausingSink {
        type Result = ();

        fn handle(&mut self, _: Noise, _: &mut Context<Self>) {}
    }

    /// Regression: when the subscriber's mailbox is over its capacity
    /// (others send to it too), an answered send is held back by actix
    /// until the mailbox drains, while later events went on: out of order.
    #[actix::test]
    async fn pipelined_events_keep_their_order_when_the_mailbox_is_over_capacity() {
        over_capacity_keeps_order(|recipient| Target::Pipelined {
            recipient,
            depth: 8,
        })
        .await;
    }

    /// The same for one event per call: every event arrives, in order.
    #[actix::test]
    async fn single_events_keep_their_order_when_the_mailbox_is_over_capacity() {
        over_capacity_keeps_order(Target::Each).await;
    }

    async fn over_capacity_keeps_order(
        target: impl FnOnce(Recipient<Event<ConfigMap>>) -> Target<ConfigMap>,
    ) {
        let Paused {
            sink,
            listener,
            stats,
            seen,
            gate_tx,
        } = Paused::start(target);
        // Paused at its first event, then flooded past its mailbox capacity (16).
        listener
            .send(Deliver(vec![added("first")].into()))
            .await
            .unwrap()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "first not handled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for _ in 0..40 {
            sink.do_send(Noise);
        }
        let mut names = vec!["first".to_string()];
        names.extend((0..200).map(|i| format!("o{i}")));
        listener
            .send(Deliver(names[1..].iter().map(|n| added(n)).collect()))
            .await
            .unwrap()
            .unwrap();
        gate_tx.send_replace(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while stats.delivered.load(Ordering::SeqCst) < names.len() as u64 {
            assert!(tokio::time::Instant::now() < deadline, "not all delivered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.lock().unwrap().clone(), names);
    }
}
