//! The listener actor: one per subscriber, owning its [`ListenerQueue`] and
//! [`SyncTracker`], delivering to the subscriber's own actor.
//!
//! Flow control: the Indexer sends [`Deliver`] and waits for its answer. A
//! `Coalesce` listener answers at once (its queue merges per key); a `Block`
//! listener whose queue is full parks the rest and answers only when its
//! subscriber has caught up — that is the back-pressure path, and it holds
//! the whole informer (every subscriber, the cache) until then. A new
//! subscriber's [`Replay`] of the cache is handed over whole and read as the
//! subscriber takes it, so it holds nobody back. Delivery to the
//! subscriber is one `send` at a time ([`Target::Each`], [`Target::Batches`]),
//! or up to a fixed number of them in the subscriber's mailbox
//! ([`Target::Pipelined`]); each is spawned (never `ctx.wait`), so the
//! listener's own mailbox keeps draining while the subscriber is busy.
//! Handler calls run in the subscriber's actor, never in the engine's.

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{self, Poll, ready};

use actix::dev::RecipientRequest;
use actix::prelude::*;
use futures::channel::oneshot;
use tokio::sync::watch;

use super::credit::DeliveryCredit;
use super::lane::ResyncLane;
use super::messages::{
    CacheSynced, Deliver, DeliverResync, ListenerGone, RESYNC_HOLD_MAX, RESYNC_LANE_LOW, Replay,
    StopListener,
};
use super::queue::{ListenerQueue, OverflowPolicy};
use super::sync::SyncTracker;
use crate::answer::Answer;
use crate::event::{Cause, Event, EventBatch};
use crate::subscriber::SubscriberId;

/// Live counters of one listener, readable from any thread (metrics, status).
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Notifications waiting in the queue.
    pub pending: AtomicUsize,
    /// Notifications sent to the subscriber whose handler call has not
    /// returned yet (at most the pipeline depth, or one batch).
    pub in_flight: AtomicUsize,
    /// Notifications handled by the subscriber.
    pub delivered: AtomicU64,
    /// Resync notifications handled by the subscriber.
    pub resyncs: AtomicU64,
    /// Notifications merged away (Coalesce).
    pub coalesced: AtomicU64,
    /// The subscriber's actor stopped; the listener removed itself.
    pub gone: AtomicBool,
}

/// Options of one subscription that the listener enforces.
#[derive(Debug, Clone, Copy)]
pub struct ListenerOptions {
    /// Block (bounded, back-pressure) or Coalesce (merge per key).
    pub policy: OverflowPolicy,
    /// Bound of a Block queue; allocation hint for Coalesce.
    pub capacity: usize,
}

/// Where a listener delivers: one notification per handler call, or batches.
pub enum Target<K: Send + Sync + 'static> {
    /// One [`Event`] per handler call (client-go's one notification at a
    /// time); the next is sent when the previous call returned, so this suits
    /// any handler, async ones included.
    Each(Recipient<Event<K>>),
    /// One [`Event`] per handler call, with up to `depth` of them in the
    /// subscriber's mailbox at once. The mailbox still hands them over one at
    /// a time and in order, but without a round trip per event. Only for
    /// handlers that finish their work inside `handle`: an async handler
    /// (`ResponseFuture`, `ResponseActFuture`) would start the next
    /// notification before the previous one finished.
    Pipelined {
        /// The subscriber.
        recipient: Recipient<Event<K>>,
        /// Most notifications sent and not yet handled (at least 1).
        depth: usize,
    },
    /// [`EventBatch`]es of up to `max` events per handler call.
    Batches {
        /// The subscriber.
        recipient: Recipient<EventBatch<K>>,
        /// Most events in one batch (at least 1).
        max: usize,
    },
}

impl<K: Send + Sync + 'static> From<Recipient<Event<K>>> for Target<K> {
    fn from(recipient: Recipient<Event<K>>) -> Self {
        Target::Each(recipient)
    }
}

/// The subscriber as the listener calls it.
enum Sink<K: Send + Sync + 'static> {
    Events(Arc<Recipient<Event<K>>>),
    Batches(Arc<Recipient<EventBatch<K>>>),
}

impl<K: Send + Sync + 'static> Clone for Sink<K> {
    fn clone(&self) -> Self {
        match self {
            Sink::Events(r) => Sink::Events(r.clone()),
            Sink::Batches(r) => Sink::Batches(r.clone()),
        }
    }
}

/// What one handler call carried: for sync tracking and counters once it returns.
#[derive(Default, Clone, Copy)]
struct Sent {
    events: u64,
    initial: usize,
    resyncs: u64,
}

impl Sent {
    fn count<K>(&mut self, event: &Event<K>) {
        self.events += 1;
        self.initial += usize::from(event.is_initial());
        self.resyncs += u64::from(event.is_resync());
    }
}

/// The listener actor of one subscriber.
pub struct Listener<K: Send + Sync + 'static> {
    id: SubscriberId,
    /// What is left of the replay: delivered before anything in `queue`.
    replay: Option<Replay<K>>,
    queue: ListenerQueue<K>,
    lane: ResyncLane<K>,
    /// The held answer to a `DeliverResync`, with when it is due at the latest.
    lane_reply: Option<(
        tokio::time::Instant,
        oneshot::Sender<Result<(), ListenerGone>>,
    )>,
    /// A timer for `lane_reply` is pending. One at most: the context polls
    /// every pending timer at each wake-up, and one per chunk (each left
    /// pending 50 ms after its answer went) took about 10 % of the CPU of a
    /// run with sweeps (perf, BENCHMARKS.md workload 5).
    lane_timer: bool,
    sync: SyncTracker,
    sink: Sink<K>,
    /// Most handler calls in flight at once.
    window: usize,
    /// Most events per batch ([`Sink::Batches`]).
    batch_max: usize,
    /// Handler calls sent and not yet returned, oldest first (the subscriber
    /// answers in order), awaited by a [`Replies`] future while any is.
    replies: VecDeque<Call<K>>,
    /// Window units in flight: events for an events sink, calls for batches.
    in_flight: usize,
    /// Most events acknowledged by one answer ([`Listener::next_request`]).
    ack_every: usize,
    /// A [`Replies`] future is spawned. It ends when no call is in flight;
    /// the next call spawns one, which the context polls in the same pass
    /// (waking the task from here instead cost an extra poll per event).
    awaiting_replies: bool,
    parked: VecDeque<Event<K>>,
    parked_reply: Option<oneshot::Sender<Result<(), ListenerGone>>>,
    idle_waiters: Vec<oneshot::Sender<()>>,
    stopping: bool,
    synced: watch::Sender<bool>,
    /// What `synced` was last set to. Reading the channel itself takes its
    /// lock (a `lock cmpxchg`): about 3 % of the CPU with 100 subscribers at
    /// 1000 events/s (perf), for a value only this listener writes.
    synced_sent: Cell<bool>,
    /// What the Indexer may send without waiting for an answer.
    credit: Arc<DeliveryCredit>,
    stats: Arc<ListenerStats>,
    span: tracing::Span,
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
        let synced_now = *synced.borrow();
        let (sink, window, batch_max) = match target.into() {
            Target::Each(recipient) => (Sink::Events(Arc::new(recipient)), 1, 1),
            Target::Pipelined { recipient, depth } => {
                (Sink::Events(Arc::new(recipient)), depth.max(1), 1)
            }
            Target::Batches { recipient, max } => {
                (Sink::Batches(Arc::new(recipient)), 1, max.max(1))
            }
        };
        let queue = ListenerQueue::new(options.policy, options.capacity);
        Listener {
            id,
            replay: None,
            credit: DeliveryCredit::new(queue.room()),
            queue,
            lane: ResyncLane::new(),
            lane_reply: None,
            lane_timer: false,
            sync: SyncTracker::new(),
            sink,
            window,
            batch_max,
            replies: VecDeque::new(),
            in_flight: 0,
            ack_every: window.div_ceil(2),
            awaiting_replies: false,
            parked: VecDeque::new(),
            parked_reply: None,
            idle_waiters: Vec::new(),
            stopping: false,
            synced_sent: Cell::new(synced_now),
            synced,
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

    /// Pushes what fits; the rest stays parked (queue full) in order.
    fn accept(&mut self, events: impl IntoIterator<Item = Event<K>>) {
        let mut events = events.into_iter();
        while let Some(event) = self.parked.pop_front().or_else(|| events.next()) {
            if event.is_resync() {
                self.lane.push(event);
                continue;
            }
            self.lane.observe(&event);
            let initial = event.is_initial();
            match self.queue.push(event) {
                Ok(pushed) => {
                    if initial {
                        self.sync.start();
                    }
                    if pushed.dropped_initial > 0 {
                        let _ = self.sync.finish_many(pushed.dropped_initial);
                    }
                }
                Err(full) => {
                    // Back where it came from: the front of `parked` (new
                    // events are only taken once `parked` is empty).
                    self.parked.push_front(full.into_event());
                    self.parked.extend(events);
                    self.release_sweep();
                    self.refresh_stats();
                    return;
                }
            }
        }
        self.release_sweep();
        self.refresh_stats();
    }

    /// Answers the held `DeliverResync` once it is due, waking in `after`.
    fn arm_lane_timer(&mut self, after: std::time::Duration, ctx: &mut Context<Self>) {
        self.lane_timer = true;
        ctx.run_later(after, |act, ctx| {
            act.lane_timer = false;
            let now = tokio::time::Instant::now();
            match &act.lane_reply {
                Some((due, _)) if *due <= now => {
                    if let Some((_, reply)) = act.lane_reply.take() {
                        let _ = reply.send(Ok(()));
                    }
                }
                Some((due, _)) => {
                    let after = *due - now;
                    act.arm_lane_timer(after, ctx);
                }
                None => {}
            }
        });
    }

    fn release_sweep(&mut self) {
        if self.lane.len() <= RESYNC_LANE_LOW
            && let Some((_, reply)) = self.lane_reply.take()
        {
            let _ = reply.send(Ok(()));
        }
    }

    fn refresh_stats(&self) {
        self.credit
            .set_room(self.queue.room().saturating_sub(self.parked.len()));
        self.stats.pending.store(
            self.replay_len() + self.queue.len() + self.lane.len() + self.parked.len(),
            Ordering::Relaxed,
        );
        self.stats.in_flight.store(
            self.replies.iter().map(|c| c.sent.events as usize).sum(),
            Ordering::Relaxed,
        );
        self.stats
            .coalesced
            .store(self.queue.coalesced(), Ordering::Relaxed);
        // Compared with the copy first: this runs once per delivery, and the
        // channel's own lock is not free.
        let now = self.sync.has_synced();
        if self.synced_sent.get() != now {
            self.synced.send_replace(now);
            self.synced_sent.set(now);
        }
    }

    /// Objects of the replay not delivered yet.
    fn replay_len(&self) -> usize {
        self.replay.as_ref().map_or(0, |r| r.len)
    }

    /// The next object of the replay as an `Initial` add, if any is left.
    fn next_replayed(&mut self) -> Option<Event<K>> {
        let replay = self.replay.as_mut()?;
        if let Some((key, object)) = replay.objects.next() {
            replay.len = replay.len.saturating_sub(1);
            return Some(Event::Added {
                key,
                object,
                cause: Cause::Initial,
            });
        }
        // Announced and never yielded: never to be handled either.
        let missing = replay.len;
        self.replay = None;
        if missing > 0 {
            let _ = self.sync.finish_many(missing);
        }
        None
    }

    /// The next notification: the replay first (everything else came after
    /// the state it shows), then real changes (parked ones included, so a
    /// resync never overtakes a real change it has not seen), then the
    /// resync lane.
    fn next_event(&mut self) -> Option<Event<K>> {
        if let Some(event) = self.next_replayed() {
            return Some(event);
        }
        if let Some(event) = self.queue.pop() {
            return Some(event);
        }
        if !self.parked.is_empty() {
            self.accept(std::iter::empty());
            if let Some(event) = self.queue.pop() {
                return Some(event);
            }
        }
        self.lane.pop()
    }

    /// The next handler call (one notification or a batch), if anything is
    /// queued: real changes first, then the resync lane.
    ///
    /// Up to `most` events go to an events sink at once: all but the last
    /// without an answer (`do_send`), the last with one. The subscriber
    /// handles its mailbox in order, so that answer acknowledges them all,
    /// with one reply channel per group rather than per event.
    fn next_request(&mut self, most: usize) -> Option<(Request<K>, Sent)> {
        let mut sent = Sent::default();
        // A clone of the `Arc` (not of the recipient, which allocates): the
        // queues are borrowed mutably while the request is built.
        let request = match self.sink.clone() {
            Sink::Events(recipient) => {
                let mut last = self.next_event()?;
                sent.count(&last);
                while (sent.events as usize) < most {
                    let Some(event) = self.next_event() else {
                        break;
                    };
                    sent.count(&event);
                    // Unanswered: a closed mailbox fails the answered send below.
                    recipient.do_send(std::mem::replace(&mut last, event));
                }
                futures::future::Either::Left(send_now(&recipient, last))
            }
            Sink::Batches(recipient) => {
                let queued =
                    self.replay_len() + self.queue.len() + self.parked.len() + self.lane.len();
                let mut batch = Vec::with_capacity(self.batch_max.min(queued));
                while batch.len() < self.batch_max {
                    let Some(event) = self.next_event() else {
                        break;
                    };
                    sent.count(&event);
                    batch.push(event);
                }
                if batch.is_empty() {
                    return None;
                }
                futures::future::Either::Right(send_now(&recipient, EventBatch(batch)))
            }
        };
        Some((request, sent))
    }

    /// Sends handler calls while the window has room: real changes first,
    /// then the resync lane.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let mut sent_any = false;
        while self.in_flight < self.window && !self.stopping {
            let most = (self.window - self.in_flight).min(self.ack_every);
            let Some((request, sent)) = self.next_request(most) else {
                break;
            };
            sent_any = true;
            let units = match self.sink {
                Sink::Events(_) => sent.events as usize,
                Sink::Batches(_) => 1,
            };
            self.in_flight += units;
            self.replies.push_back(Call {
                request: Box::pin(request),
                sent,
                units,
            });
        }
        if sent_any {
            if !self.awaiting_replies {
                self.awaiting_replies = true;
                ctx.spawn(Replies);
            }
            self.release_sweep();
            // Room freed: take parked notifications and release the producer.
            if !self.parked.is_empty() {
                self.accept(std::iter::empty());
            }
            if self.parked.is_empty()
                && let Some(reply) = self.parked_reply.take()
            {
                let _ = reply.send(Ok(()));
            }
            self.refresh_stats();
        }
        if self.replies.is_empty()
            && self.replay.is_none()
            && self.queue.is_empty()
            && self.lane.is_empty()
        {
            for w in self.idle_waiters.drain(..) {
                let _ = w.send(());
            }
            // Caught up: give back what a backlog grew.
            self.queue.release_idle_memory();
            self.lane.release_idle_memory();
            if self.parked.is_empty() && self.parked.capacity() > 1024 {
                self.parked = VecDeque::new();
            }
        }
    }

    /// One handler call returned (or the subscriber is gone).
    fn returned(
        &mut self,
        result: Result<(), MailboxError>,
        sent: Sent,
        units: usize,
        ctx: &mut Context<Self>,
    ) {
        self.in_flight -= units;
        if sent.initial > 0 {
            let _ = self.sync.finish_many(sent.initial);
        }
        if self.stopping {
            self.refresh_stats();
            if self.replies.is_empty() {
                ctx.stop();
            }
            return;
        }
        match result {
            Ok(()) => {
                self.stats
                    .delivered
                    .fetch_add(sent.events, Ordering::Relaxed);
                if sent.resyncs > 0 {
                    self.stats
                        .resyncs
                        .fetch_add(sent.resyncs, Ordering::Relaxed);
                }
                self.refresh_stats();
                self.pump(ctx);
            }
            Err(err) => {
                tracing::warn!(subscriber = %self.id, %err, "subscriber is gone; removing its listener");
                self.stats.gone.store(true, Ordering::Relaxed);
                ctx.stop();
            }
        }
    }
}

/// Awaits the answers of the handler calls in flight, oldest first, until
/// none is left. One future per listener rather than one spawned per call:
/// the context polls every spawned future on each wake-up, which cost
/// O(pipeline) per event.
struct Replies;

impl<K: Send + Sync + 'static> ActorFuture<Listener<K>> for Replies {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut Listener<K>,
        ctx: &mut Context<Listener<K>>,
        task: &mut task::Context<'_>,
    ) -> Poll<()> {
        loop {
            let Some(Call { request, .. }) = act.replies.front_mut() else {
                act.awaiting_replies = false;
                return Poll::Ready(());
            };
            let result = ready!(request.as_mut().poll(task));
            let Some(Call { sent, units, .. }) = act.replies.pop_front() else {
                return Poll::Pending;
            };
            act.returned(result, sent, units, ctx);
            if ctx.state() != ActorState::Running {
                return Poll::Ready(());
            }
        }
    }
}

/// `send` through a fresh sender, so the message is in the subscriber's
/// mailbox when this returns. actix parks a sender whose `send` found the
/// mailbox over capacity (others send to the subscriber too); that sender's
/// next `send` is held back until polled again, with no wake-up registered,
/// and messages sent meanwhile overtake it. A fresh sender is never parked.
/// Costs a clone (three small allocations) per answered call.
fn send_now<M>(recipient: &Recipient<M>, message: M) -> RecipientRequest<M>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    recipient.clone().send(message)
}

/// A handler call in flight: its answer, what it carried, and the window
/// units it holds (events for an events sink, one for a batch).
struct Call<K: Send + Sync + 'static> {
    request: Pin<Box<Request<K>>>,
    sent: Sent,
    units: usize,
}

/// The answer of one handler call: a single notification or a batch.
type Request<K> =
    futures::future::Either<RecipientRequest<Event<K>>, RecipientRequest<EventBatch<K>>>;

impl<K: Send + Sync + 'static> Actor for Listener<K> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Deliveries are answered only when accepted: the mailbox itself never grows past
        // what the Indexer has in flight, but give it room for control messages too.
        ctx.set_mailbox_capacity(64);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for reply in [
            self.parked_reply.take(),
            self.lane_reply.take().map(|(_, reply)| reply),
        ]
        .into_iter()
        .flatten()
        {
            let _ = reply.send(Err(ListenerGone));
        }
        for w in self.idle_waiters.drain(..) {
            let _ = w.send(());
        }
        self.queue.clear();
        self.lane.clear();
        self.parked.clear();
        self.refresh_stats();
    }
}

impl<K: Send + Sync + 'static> Handler<Deliver<K>> for Listener<K> {
    type Result = Answer<Result<(), ListenerGone>>;

    fn handle(
        &mut self,
        Deliver(events): Deliver<K>,
        ctx: &mut Context<Self>,
    ) -> Answer<Result<(), ListenerGone>> {
        let _span = self.span.clone().entered();
        if self.stopping {
            return Answer::Now(Err(ListenerGone));
        }
        let taken = events.len();
        self.accept(events);
        // After `accept` published the room left.
        self.credit.took(taken);
        self.pump(ctx);
        // Decide after pumping: a delivery may already have made room for
        // everything that was parked.
        if self.parked.is_empty() {
            return Answer::Now(Ok(()));
        }
        let (tx, rx) = oneshot::channel();
        self.parked_reply = Some(tx);
        Answer::Later(rx)
    }
}

impl<K: Send + Sync + 'static> Handler<Replay<K>> for Listener<K> {
    type Result = ();

    fn handle(&mut self, replay: Replay<K>, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if self.stopping || replay.len == 0 {
            return;
        }
        self.sync.start_many(replay.len);
        self.replay = Some(match self.replay.take() {
            None => replay,
            // Not sent twice today; if it were, in order.
            Some(first) => Replay {
                len: first.len + replay.len,
                objects: Box::new(first.objects.chain(replay.objects)),
            },
        });
        self.refresh_stats();
        self.pump(ctx);
    }
}

impl<K: Send + Sync + 'static> Handler<DeliverResync<K>> for Listener<K> {
    type Result = Answer<Result<(), ListenerGone>>;

    fn handle(
        &mut self,
        DeliverResync(events): DeliverResync<K>,
        ctx: &mut Context<Self>,
    ) -> Answer<Result<(), ListenerGone>> {
        let _span = self.span.clone().entered();
        if self.stopping {
            return Answer::Now(Err(ListenerGone));
        }
        for event in events {
            self.lane.push(event);
        }
        self.refresh_stats();
        self.pump(ctx);
        if let Some((_, earlier)) = self.lane_reply.take() {
            let _ = earlier.send(Ok(()));
        }
        if self.lane.len() <= RESYNC_LANE_LOW {
            return Answer::Now(Ok(()));
        }
        let (tx, rx) = oneshot::channel();
        self.lane_reply = Some((tokio::time::Instant::now() + RESYNC_HOLD_MAX, tx));
        if !self.lane_timer {
            self.arm_lane_timer(RESYNC_HOLD_MAX, ctx);
        }
        Answer::Later(rx)
    }
}

impl<K: Send + Sync + 'static> Handler<CacheSynced> for Listener<K> {
    type Result = ();

    fn handle(&mut self, _: CacheSynced, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.sync.upstream_synced();
        self.refresh_stats();
    }
}

impl<K: Send + Sync + 'static> Handler<StopListener> for Listener<K> {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: StopListener, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        self.stopping = true;
        self.replay = None;
        self.queue.clear();
        self.lane.clear();
        self.parked.clear();
        for reply in [
            self.parked_reply.take(),
            self.lane_reply.take().map(|(_, reply)| reply),
        ]
        .into_iter()
        .flatten()
        {
            let _ = reply.send(Err(ListenerGone));
        }
        if self.replies.is_empty() {
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
mod tests {
    use super::*;
    use crate::event::Cause;
    use crate::key::ObjectKey;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use std::time::Duration;

    struct Sink(Arc<AtomicUsize>);

    impl Actor for Sink {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for Sink {
        type Result = ();

        fn handle(&mut self, _: Event<ConfigMap>, _: &mut Context<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

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

    /// Regression: a Deliver one larger than an idle Block listener's capacity
    /// used to park its answer after the parked event had already moved into
    /// the queue, so the answer never came and the informer stalled.
    #[actix::test]
    async fn deliver_larger_than_capacity_is_answered() {
        let seen = Arc::new(AtomicUsize::new(0));
        let sink = Sink(seen.clone()).start();
        let (synced, _) = watch::channel(false);
        let listener = Listener::new(
            SubscriberId(1),
            sink.recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 4,
            },
            synced,
            Arc::new(ListenerStats::default()),
        )
        .start();
        for round in 0..3 {
            let events = (0..5).map(|i| added(&format!("o{round}-{i}"))).collect();
            let answer =
                tokio::time::timeout(Duration::from_secs(5), listener.send(Deliver(events))).await;
            assert!(
                matches!(answer, Ok(Ok(Ok(())))),
                "round {round}: Deliver was not answered"
            );
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.load(Ordering::SeqCst) < 15 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} delivered",
                seen.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    struct BatchSink(Arc<std::sync::Mutex<Vec<Vec<String>>>>);

    impl Actor for BatchSink {
        type Context = Context<Self>;
    }

    impl Handler<EventBatch<ConfigMap>> for BatchSink {
        type Result = ();

        fn handle(&mut self, batch: EventBatch<ConfigMap>, _: &mut Context<Self>) {
            let names = batch.0.iter().map(|e| e.key().to_string()).collect();
            self.0.lock().unwrap().push(names);
        }
    }

    fn initial(name: &str) -> Event<ConfigMap> {
        match added(name) {
            Event::Added { key, object, .. } => Event::Added {
                key,
                object,
                cause: Cause::Initial,
            },
            other => other,
        }
    }

    /// Batches keep the order, never exceed their maximum, and count every
    /// initial add towards the subscriber's sync (HS-2) once handled.
    #[actix::test]
    async fn batches_are_ordered_bounded_and_count_towards_sync() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = BatchSink(seen.clone()).start();
        let (synced, mut synced_rx) = watch::channel(false);
        let stats = Arc::new(ListenerStats::default());
        let listener = Listener::new(
            SubscriberId(1),
            Target::Batches {
                recipient: sink.recipient(),
                max: 3,
            },
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 100,
            },
            synced,
            stats.clone(),
        )
        .start();
        let names: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
        let events = names.iter().map(|n| initial(n)).collect();
        listener.send(Deliver(events)).await.unwrap().unwrap();
        listener.send(CacheSynced).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), synced_rx.wait_for(|s| *s))
            .await
            .expect("synced once every initial add was handled")
            .unwrap();
        let batches = seen.lock().unwrap().clone();
        assert!(
            batches.iter().all(|b| (1..=3).contains(&b.len())),
            "{batches:?}"
        );
        assert_eq!(batches.concat(), names);
        assert_eq!(stats.delivered.load(Ordering::SeqCst), 10);
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
            for e in &batch.0 {
                self.record(e);
            }
            self.gate()
        }
    }

    /// A replay is delivered before anything sent after it, as `Initial`
    /// adds, without holding back what comes after it (the `Deliver` is
    /// answered while the replay waits), and the subscriber syncs only once
    /// it has handled all of it (HS-2).
    #[actix::test]
    async fn a_replay_comes_first_and_counts_towards_sync() {
        let (sink, seen, gate_tx) = GatedSink::start_closed();
        let (synced, mut synced_rx) = watch::channel(false);
        let listener = Listener::new(
            SubscriberId(1),
            sink.recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 2,
            },
            synced,
            Arc::new(ListenerStats::default()),
        )
        .start();
        let names: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
        let objects: Vec<(ObjectKey, Arc<ConfigMap>)> = names
            .iter()
            .map(|n| (n.as_str().into(), at_rv(n, "1")))
            .collect();
        listener
            .send(Replay {
                len: objects.len(),
                objects: Box::new(objects.into_iter()),
            })
            .await
            .unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            listener.send(Deliver(vec![added("w")])),
        )
        .await
        .expect("a Deliver is not held back by the replay")
        .unwrap()
        .unwrap();
        listener.send(CacheSynced).await.unwrap();
        assert!(!*synced_rx.borrow(), "synced before its replay was handled");
        gate_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), synced_rx.wait_for(|s| *s))
            .await
            .expect("synced once the replay was handled")
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < names.len() + 1 {
            assert!(tokio::time::Instant::now() < deadline, "{seen:?}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let got: Vec<(String, Cause)> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(k, c, _)| (k.clone(), *c))
            .collect();
        let mut want: Vec<(String, Cause)> =
            names.iter().map(|n| (n.clone(), Cause::Initial)).collect();
        want.push(("w".into(), Cause::Watch));
        assert_eq!(got, want);
    }

    /// Regression (review): a batch that drained a full Block queue used to
    /// go on into the resync lane while real changes were still parked, so a
    /// resync could overtake a real change of the same key.
    #[actix::test]
    async fn a_batch_takes_parked_real_changes_before_the_resync_lane() {
        let (sink, seen, gate_tx) = GatedSink::start_closed();
        let (synced, _) = watch::channel(false);
        let listener = Listener::new(
            SubscriberId(1),
            Target::Batches {
                recipient: sink.recipient(),
                max: 8,
            },
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 2,
            },
            synced,
            Arc::new(ListenerStats::default()),
        )
        .start();
        // In flight, held by the gate.
        listener
            .send(Deliver(vec![added("a0")]))
            .await
            .unwrap()
            .unwrap();
        let s1 = at_rv("k", "1");
        listener
            .send(DeliverResync(vec![Event::Updated {
                key: "k".into(),
                old: s1.clone(),
                new: s1.clone(),
                cause: Cause::Resync,
            }]))
            .await
            .unwrap()
            .unwrap();
        // Two fit; the change of k and x3 are parked (the answer waits).
        let changes = vec![
            added("x1"),
            added("x2"),
            Event::Updated {
                key: "k".into(),
                old: s1,
                new: at_rv("k", "2"),
                cause: Cause::Watch,
            },
            added("x3"),
        ];
        let parked = listener.send(Deliver(changes));
        gate_tx.send_replace(true);
        let answer = tokio::time::timeout(Duration::from_secs(5), parked).await;
        assert!(matches!(answer, Ok(Ok(Ok(())))));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < 6 {
            assert!(tokio::time::Instant::now() < deadline, "not all delivered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = seen.lock().unwrap().clone();
        let k: Vec<_> = seen.iter().filter(|(key, _, _)| key == "k").collect();
        assert_eq!(
            k,
            vec![
                &("k".to_string(), Cause::Watch, "2".to_string()),
                &("k".to_string(), Cause::Resync, "2".to_string())
            ],
            "{seen:?}"
        );
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

    /// Real changes overtake a resync sweep waiting in the lane; the sweep
    /// is paced by the lane, but a stalled subscriber holds it at most
    /// `RESYNC_HOLD_MAX`; a resync of a key that changed meanwhile carries
    /// the newer state.
    #[actix::test]
    async fn real_changes_overtake_a_pending_resync_sweep() {
        let (sink, seen, gate_tx) = GatedSink::start_closed();
        let (synced, _) = watch::channel(false);
        let listener = Listener::new(
            SubscriberId(1),
            sink.recipient(),
            ListenerOptions {
                policy: OverflowPolicy::Block,
                capacity: 16,
            },
            synced,
            Arc::new(ListenerStats::default()),
        )
        .start();
        let n = RESYNC_LANE_LOW + 50;
        let sweep = (0..n)
            .map(|i| {
                let o = at_rv(&format!("r{i}"), "1");
                Event::Updated {
                    key: format!("r{i}").as_str().into(),
                    old: o.clone(),
                    new: o,
                    cause: Cause::Resync,
                }
            })
            .collect();
        // The subscriber is stalled: the sweep waits (it is paced by the lane)...
        let mut sweep_answer = Box::pin(listener.send(DeliverResync(sweep)));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(futures::poll!(&mut sweep_answer).is_pending());
        let changes = vec![
            added("x"),
            Event::Updated {
                key: "r5".into(),
                old: at_rv("r5", "1"),
                new: at_rv("r5", "2"),
                cause: Cause::Watch,
            },
        ];
        let answer = tokio::time::timeout(Duration::from_secs(5), listener.send(Deliver(changes)))
            .await
            .expect("real changes are accepted while the sweep waits");
        assert!(matches!(answer, Ok(Ok(()))));
        // ...at most RESYNC_HOLD_MAX: a stalled subscriber slows sweeps, never stops them.
        let answer = tokio::time::timeout(Duration::from_secs(5), sweep_answer).await;
        assert!(matches!(answer, Ok(Ok(Ok(())))));
        assert!(!gate_tx.borrow().to_owned(), "answered while still stalled");
        gate_tx.send_replace(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < n + 2 {
            assert!(tokio::time::Instant::now() < deadline, "not all delivered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = seen.lock().unwrap().clone();
        // r0 was already with the subscriber; then the real changes, then the rest.
        assert_eq!(seen[0].0, "r0");
        assert_eq!(seen[1].0, "x");
        assert_eq!(seen[2], ("r5".into(), Cause::Watch, "2".into()));
        assert!(seen[3..].iter().all(|(_, c, _)| *c == Cause::Resync));
        let r5: Vec<_> = seen.iter().filter(|(k, _, _)| k == "r5").collect();
        assert_eq!(r5.len(), 2, "one change, one resync");
        assert_eq!(r5[1].2, "2", "the resync carries the newer state");
        assert_eq!(seen.len(), n + 2);
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
            Self::with_capacity(1000, target)
        }

        fn with_capacity(
            capacity: usize,
            target: impl FnOnce(Recipient<Event<ConfigMap>>) -> Target<ConfigMap>,
        ) -> Self {
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
                    capacity,
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

    /// Regression: a full `Block` queue taking parked events one slot at a
    /// time put the parked event that did not fit behind the others (o2
    /// after o19), reordering what a stalled subscriber then received.
    #[actix::test]
    async fn parked_events_keep_their_order_as_a_full_queue_drains() {
        let Paused {
            listener,
            stats,
            seen,
            gate_tx,
            ..
        } = Paused::with_capacity(4, Target::Each);
        let names: Vec<String> = (0..20).map(|i| format!("o{i}")).collect();
        let mut answer = Box::pin(listener.send(Deliver(names.iter().map(|n| added(n)).collect())));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert!(
            futures::poll!(&mut answer).is_pending(),
            "the Deliver that overflowed waits for room"
        );
        gate_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("answered once the parked events fit")
            .unwrap()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while stats.delivered.load(Ordering::SeqCst) < 20 {
            assert!(tokio::time::Instant::now() < deadline, "not all delivered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen.lock().unwrap().clone(), names);
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
            self.record(b.0.iter().map(|e| e.key().to_string()), ctx);
        }
    }

    /// Every combination of policy, capacity, delivery mode and Deliver size
    /// (seeded pseudo-random sizes, a subscriber that pauses now and then)
    /// hands the subscriber exactly what was delivered, in order.
    #[actix::test]
    async fn every_delivery_mode_keeps_order_under_varying_pressure() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for policy in [OverflowPolicy::Block, OverflowPolicy::Coalesce] {
            for capacity in [1, 2, 3, 8] {
                for mode in 0..6 {
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
                        _ => Target::Batches {
                            recipient: sink.clone().recipient(),
                            max: [1, 5][mode - 4],
                        },
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
                        let events = batch.iter().map(|n| added(n)).collect();
                        names.extend(batch);
                        tokio::time::timeout(
                            Duration::from_secs(5),
                            listener.send(Deliver(events)),
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
                    assert_eq!(stats.in_flight.load(Ordering::SeqCst), 0, "{case}");
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
                .send(Deliver(vec![added("a"), added("b")]))
                .await
                .unwrap()
                .unwrap();
            let mut parked = Box::pin(listener.send(Deliver(vec![added("c")])));
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
            .send(Deliver(vec![added("first")]))
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
