//! The state machine of one listener: what it takes, what it sends its
//! subscriber next, and when it answers the Indexer.
//!
//! It owns the [`Pending`] notifications (their order) and the [`Window`] of
//! handler calls in flight, and holds the answers that have to wait, generic
//! over the reply type `R` (the actor's oneshot senders):
//! - a `Deliver` is answered at once unless some of its events are parked (a
//!   full `Block` queue); then at the first send after they all moved in;
//! - a `DeliverResync` is answered at once while the lane holds at most
//!   [`RESYNC_LANE_LOW`], else once it is down to that, once the next chunk
//!   comes, or [`RESYNC_HOLD_MAX`] after it came (time passed in): a stalled
//!   subscriber slows its own sweep and never stops it;
//! - once stopped it takes and sends nothing, and held answers go as gone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::messages::{ListenerGone, RESYNC_HOLD_MAX, RESYNC_LANE_LOW, Replay};
use super::pending::Pending;
use super::queue::OverflowPolicy;
use super::window::{CallShape, Window};
use crate::event::{Event, EventBatch};

/// What one handler call carried, counted when it returns.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Notifications.
    pub events: usize,
    /// Initial adds among them (HS-2).
    pub initial: usize,
    /// Resyncs among them.
    pub resyncs: usize,
}

impl Sent {
    fn count<K>(&mut self, event: &Event<K>) {
        self.events += 1;
        self.initial += usize::from(event.is_initial());
        self.resyncs += usize::from(event.is_resync());
    }
}

/// Whether a message is answered in place or later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Answer now.
    Now,
    /// Hand the reply over to be held ([`Delivery::hold_delivery`], [`Delivery::hold_resync`]).
    Later,
}

/// Held answers to give now, all with `outcome`.
#[must_use = "held answers must be sent"]
#[derive(Debug)]
pub struct Answers<R> {
    /// `Ok`, or `Err(ListenerGone)` once stopped.
    pub outcome: Result<(), ListenerGone>,
    replies: [Option<R>; 2],
}

impl<R> Answers<R> {
    #[inline]
    fn ok(delivery: Option<R>, resync: Option<R>) -> Self {
        Answers {
            outcome: Ok(()),
            replies: [delivery, resync],
        }
    }
}

impl<R> Answers<R> {
    /// Calls `send` with each reply and the outcome.
    #[inline]
    pub fn send(self, mut send: impl FnMut(R, Result<(), ListenerGone>)) {
        let [first, second] = self.replies;
        if let Some(reply) = first {
            send(reply, self.outcome);
        }
        if let Some(reply) = second {
            send(reply, self.outcome);
        }
    }
}

/// When the held `DeliverResync` answer is due.
#[derive(Debug, PartialEq, Eq)]
pub enum Due<R> {
    /// Now: answer it.
    Now(R),
    /// Not yet: ask again after this long.
    In(Duration),
    /// Nothing is held.
    Nothing,
}

/// One listener's state (see the module doc).
pub struct Delivery<K, R> {
    pending: Pending<K>,
    window: Window,
    /// The answer to a `Deliver` whose events were parked; `Some` only while
    /// some are, or until the first send after the last moved into the queue.
    held_delivery: Option<R>,
    /// The answer to the latest `DeliverResync`, due at the instant beside
    /// it; `Some` only while the lane holds more than [`RESYNC_LANE_LOW`].
    held_resync: Option<(Instant, R)>,
    /// Nothing is taken or sent any more; nothing pending, nothing held.
    stopped: bool,
}

impl<K, R> Delivery<K, R> {
    /// A listener with nothing pending, its queue per `policy` and
    /// `capacity`, calling its subscriber in `shape`.
    pub fn new(policy: OverflowPolicy, capacity: usize, shape: CallShape) -> Self {
        Delivery {
            pending: Pending::new(policy, capacity),
            window: Window::new(shape),
            held_delivery: None,
            held_resync: None,
            stopped: false,
        }
    }

    /// Takes a `Deliver`'s events, shared with the batch's other listeners
    /// (what does not fit is parked, in order).
    pub fn deliver(&mut self, events: &Arc<[Event<K>]>) -> Answers<R> {
        self.pending.accept_shared(events);
        Answers::ok(None, self.release_resync_if_low())
    }

    /// Takes a replay (false when it is empty or the listener stopped).
    pub fn replay(&mut self, replay: Replay<K>) -> bool
    where
        K: 'static,
    {
        !self.stopped && self.pending.replay(replay)
    }

    /// Takes a `DeliverResync`'s events into the lane.
    pub fn resync(&mut self, events: Vec<Event<K>>) {
        for event in events {
            self.pending.resync(event);
        }
    }

    /// The informer synced (HS-2).
    pub fn upstream_synced(&mut self) {
        self.pending.upstream_synced();
    }

    /// Most events [`Delivery::next_call`] would hand over now.
    pub fn next_call_len(&self) -> usize {
        self.window.next_call_max().min(self.pending.len())
    }

    /// The next handler call, if the window has room and anything is
    /// pending: hands its events to `take` in order and counts it in flight.
    pub fn next_call(&mut self, take: impl FnMut(Event<K>)) -> Option<Sent> {
        self.next_call_up_to(usize::MAX, take)
    }

    /// [`next_call`](Self::next_call) carrying at most `limit` events.
    pub fn next_call_up_to(
        &mut self,
        limit: usize,
        mut take: impl FnMut(Event<K>),
    ) -> Option<Sent> {
        if self.stopped {
            return None;
        }
        let most = self.window.next_call_max().min(limit);
        let mut sent = Sent::default();
        while sent.events < most {
            let Some(event) = self.pending.pop() else {
                break;
            };
            sent.count(&event);
            take(event);
        }
        if sent.events == 0 {
            return None;
        }
        self.window.sent(sent.events);
        Some(sent)
    }

    /// The next handler call as a batch sharing its chunk: only when the
    /// events [`next_call`](Self::next_call) would hand over are all in one
    /// run of it (see [`Pending::pop_shared`]), so a call never carries
    /// fewer events for being shared. Counted in flight like `next_call`.
    pub fn next_call_shared(&mut self) -> Option<(EventBatch<K>, Sent)> {
        self.shared_call(self.next_call_len())
    }

    /// The next handler call as the front run of a shared chunk, however
    /// few events that run holds (at most what a call may carry, and at
    /// most `limit`; the rest of the run stays in front): for a
    /// handler that reads events in place, where a shorter call costs
    /// nothing ([`Target::Inline`](super::Target::Inline)). Counted in
    /// flight like `next_call`.
    pub fn next_call_front_run(&mut self, limit: usize) -> Option<(EventBatch<K>, Sent)> {
        let n = self
            .pending
            .front_shared_len()
            .min(self.window.next_call_max())
            .min(limit);
        self.shared_call(n)
    }

    /// The next `n` events as one call sharing their chunk, if one run holds them.
    fn shared_call(&mut self, n: usize) -> Option<(EventBatch<K>, Sent)> {
        if self.stopped {
            return None;
        }
        let batch = self.pending.pop_shared(n)?;
        let mut sent = Sent::default();
        batch.iter().for_each(|event| sent.count(event));
        self.window.sent(sent.events);
        Some((batch, sent))
    }

    /// After one or more calls were sent: the room they made takes parked
    /// events; the answers that waited for that room go now.
    pub fn sent_calls(&mut self) -> Answers<R> {
        if self.held_delivery.is_none() && self.held_resync.is_none() {
            self.pending.refill();
            return Answers::ok(None, None);
        }
        let resync = self.release_resync_if_low();
        self.pending.refill();
        let resync = resync.or_else(|| self.release_resync_if_low());
        let delivery = if self.pending.has_parked() {
            None
        } else {
            self.held_delivery.take()
        };
        Answers::ok(delivery, resync)
    }

    /// A handler call returned (or failed: the subscriber is gone).
    pub fn returned(&mut self, sent: &Sent) {
        self.window.returned(sent.events);
        self.pending.handled_initial(sent.initial);
    }

    /// How to answer the `Deliver` just taken and sent on: now, unless some
    /// of its events are still parked.
    pub fn answer_delivery(&self) -> When {
        if self.pending.has_parked() {
            When::Later
        } else {
            When::Now
        }
    }

    /// Holds the answer to a `Deliver` until its parked events moved into
    /// the queue (it replaces, and drops, one held before).
    pub fn hold_delivery(&mut self, reply: R) {
        self.held_delivery = Some(reply);
    }

    /// How to answer the `DeliverResync` just taken and sent on: now while
    /// the lane is down to [`RESYNC_LANE_LOW`]. The answer held for the
    /// previous chunk goes now either way.
    pub fn answer_resync(&mut self) -> (Answers<R>, When) {
        let earlier = self.held_resync.take().map(|(_, reply)| reply);
        let when = if self.pending.lane_len() <= RESYNC_LANE_LOW {
            When::Now
        } else {
            When::Later
        };
        (Answers::ok(None, earlier), when)
    }

    /// Holds the answer to a `DeliverResync` that came at `now`, until the
    /// lane is down to [`RESYNC_LANE_LOW`] or [`RESYNC_HOLD_MAX`] passed.
    pub fn hold_resync(&mut self, reply: R, now: Instant) {
        self.held_resync = Some((now + RESYNC_HOLD_MAX, reply));
    }

    /// The held `DeliverResync` answer, if it is due at `now`.
    pub fn resync_due(&mut self, now: Instant) -> Due<R> {
        match self.held_resync.take() {
            Some((due, reply)) if due <= now => Due::Now(reply),
            Some((due, reply)) => {
                self.held_resync = Some((due, reply));
                Due::In(due - now)
            }
            None => Due::Nothing,
        }
    }

    fn release_resync_if_low(&mut self) -> Option<R> {
        if self.pending.lane_len() <= RESYNC_LANE_LOW {
            self.held_resync.take().map(|(_, reply)| reply)
        } else {
            None
        }
    }

    /// Stops: drops everything pending (SI-12); held answers go as gone.
    pub fn stop(&mut self) -> Answers<R> {
        self.stopped = true;
        self.pending.clear();
        Answers {
            outcome: Err(ListenerGone),
            replies: [
                self.held_delivery.take(),
                self.held_resync.take().map(|(_, reply)| reply),
            ],
        }
    }

    /// True once stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// True when nothing is pending or in flight.
    pub fn is_idle(&self) -> bool {
        self.window.is_empty() && self.pending.is_empty()
    }

    /// Once idle, gives back what a backlog grew.
    pub fn release_idle_memory(&mut self) {
        self.pending.release_idle_memory();
    }

    /// Events a `Deliver` may bring without any being parked.
    pub fn room(&self) -> usize {
        self.pending.room()
    }

    /// Notifications not sent yet.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Notifications sent and not yet handled.
    pub fn in_flight_events(&self) -> usize {
        self.window.in_flight_events()
    }

    /// Notifications merged away by the queue.
    pub fn coalesced(&self) -> u64 {
        self.pending.coalesced()
    }

    /// True once the subscriber synced (HS-2; latches).
    pub fn has_synced(&self) -> bool {
        self.pending.has_synced()
    }

    /// The shape of the handler calls.
    pub fn shape(&self) -> CallShape {
        self.window.shape()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use super::*;
    use crate::event::Cause;
    use crate::key::ObjectKey;
    use crate::listener::fixtures::{self, updated};

    type Seen = (String, Cause, u32);

    /// A listener's delivery driven as its actor drives it, with a
    /// subscriber that handles its calls when the test says so. Replies are
    /// names; the answers given are recorded.
    struct Driven {
        d: Delivery<u32, &'static str>,
        in_flight: VecDeque<(Vec<Event<u32>>, Sent)>,
        calls: Vec<usize>,
        handled: Vec<Seen>,
        answered: Vec<(&'static str, Result<(), ListenerGone>)>,
    }

    impl Driven {
        fn new(policy: OverflowPolicy, capacity: usize, shape: CallShape) -> Self {
            Driven {
                d: Delivery::new(policy, capacity, shape),
                in_flight: VecDeque::new(),
                calls: Vec::new(),
                handled: Vec::new(),
                answered: Vec::new(),
            }
        }

        fn answer(&mut self, answers: Answers<&'static str>) {
            answers.send(|reply, outcome| self.answered.push((reply, outcome)));
        }

        fn pump(&mut self) {
            let mut sent_any = false;
            loop {
                let mut events = Vec::with_capacity(self.d.next_call_len());
                let Some(sent) = self.d.next_call(|e| events.push(e)) else {
                    break;
                };
                assert_eq!(sent.events, events.len());
                self.calls.push(events.len());
                self.in_flight.push_back((events, sent));
                sent_any = true;
            }
            if sent_any {
                let answers = self.d.sent_calls();
                self.answer(answers);
            }
        }

        fn deliver(&mut self, events: Vec<Event<u32>>, reply: &'static str) {
            let answers = self.d.deliver(&events.into());
            self.answer(answers);
            self.pump();
            match self.d.answer_delivery() {
                When::Now => self.answered.push((reply, Ok(()))),
                When::Later => self.d.hold_delivery(reply),
            }
        }

        fn resync(&mut self, events: Vec<Event<u32>>, reply: &'static str, now: Instant) {
            self.d.resync(events);
            self.pump();
            let (earlier, when) = self.d.answer_resync();
            self.answer(earlier);
            match when {
                When::Now => self.answered.push((reply, Ok(()))),
                When::Later => self.d.hold_resync(reply, now),
            }
        }

        /// The subscriber handles its oldest call; false when none is in flight.
        fn handle_one(&mut self) -> bool {
            let Some((events, sent)) = self.in_flight.pop_front() else {
                return false;
            };
            self.handled.extend(
                events
                    .iter()
                    .map(|e| (e.key().to_string(), e.cause(), **e.object().unwrap())),
            );
            self.d.returned(&sent);
            self.pump();
            true
        }

        fn handle_all(&mut self) {
            while self.handle_one() {}
        }

        fn was_answered(&self, reply: &str) -> Option<Result<(), ListenerGone>> {
            self.answered
                .iter()
                .find(|(r, _)| *r == reply)
                .map(|(_, outcome)| *outcome)
        }

        fn keys(&self) -> Vec<String> {
            self.handled.iter().map(|(k, _, _)| k.clone()).collect()
        }
    }

    fn added(key: &str) -> Event<u32> {
        fixtures::added(key, Cause::Watch)
    }

    fn initial(key: &str) -> Event<u32> {
        fixtures::added(key, Cause::Initial)
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    const EACH: CallShape = CallShape::Events { depth: 1 };

    /// A batched listener (up to 16 events a call) holding two runs of
    /// shared chunks: `a`, then `b` and `c`.
    fn two_runs_batched() -> Delivery<u32, &'static str> {
        let shape = CallShape::Batches { max: 16, calls: 1 };
        let mut d = Delivery::new(OverflowPolicy::Block, 64, shape);
        let _ = d.deliver(&vec![added("a")].into());
        let _ = d.deliver(&vec![added("b"), added("c")].into());
        d
    }

    /// A batched call is a shared run only when that run holds everything
    /// the call would carry: several small runs queued go out together,
    /// copied, not one run per call (a slow subscriber would fall behind).
    #[test]
    fn a_batched_call_is_shared_only_when_one_run_holds_it_all() {
        let mut d = two_runs_batched();
        assert!(d.next_call_shared().is_none(), "three events over two runs");
        let mut keys = Vec::new();
        let sent = d.next_call(|e| keys.push(e.key().to_string())).unwrap();
        assert_eq!(
            (keys, sent.events),
            (vec!["a".into(), "b".into(), "c".into()], 3)
        );
        d.returned(&sent);
        let _ = d.deliver(&vec![added("d"), added("e")].into());
        let (batch, sent) = d.next_call_shared().expect("one run holds the call");
        assert_eq!((batch.len(), sent.events), (2, 2));
        assert!(d.next_call_shared().is_none(), "one call in flight");
    }

    /// A call of the front run takes that run alone, however short, and
    /// never reaches into the next; a front that is no shared run gives none.
    #[test]
    fn a_front_run_call_takes_the_front_run_alone() {
        let mut d = two_runs_batched();
        let (batch, sent) = d
            .next_call_front_run(usize::MAX)
            .expect("a shared run in front");
        assert_eq!((batch.len(), sent.events), (1, 1));
        assert!(
            d.next_call_front_run(usize::MAX).is_none(),
            "one call in flight"
        );
        d.returned(&sent);
        let (batch, sent) = d.next_call_front_run(usize::MAX).unwrap();
        let keys: Vec<String> = batch.iter().map(|e| e.key().to_string()).collect();
        assert_eq!((keys, sent.events), (vec!["b".into(), "c".into()], 2));
        d.returned(&sent);
        assert!(
            d.next_call_front_run(usize::MAX).is_none(),
            "nothing pending"
        );
        let shape = CallShape::Batches { max: 16, calls: 1 };
        let mut coalescing: Delivery<u32, &'static str> =
            Delivery::new(OverflowPolicy::Coalesce, 64, shape);
        let _ = coalescing.deliver(&vec![added("d")].into());
        assert!(
            coalescing.next_call_front_run(usize::MAX).is_none(),
            "not a shared run"
        );
        assert!(coalescing.next_call(|_| {}).is_some());
    }

    /// Regression: a `Deliver` one larger than an idle `Block` listener's
    /// capacity used to hold its answer after the parked event had already
    /// moved into the queue, so the answer never came.
    #[test]
    fn a_deliver_larger_than_the_capacity_is_answered() {
        let mut l = Driven::new(OverflowPolicy::Block, 4, EACH);
        let all = names("o", 15);
        let rounds = ["round 0", "round 1", "round 2"];
        for (round, reply) in rounds.into_iter().enumerate() {
            let events = all[5 * round..5 * round + 5].iter().map(|n| added(n));
            l.deliver(events.collect(), reply);
            if round == 0 {
                assert_eq!(l.was_answered(reply), Some(Ok(())), "answered in place");
            }
            while l.was_answered(reply).is_none() && l.handle_one() {}
            assert_eq!(l.was_answered(reply), Some(Ok(())), "{reply}");
        }
        l.handle_all();
        assert_eq!(l.keys(), all);
    }

    /// A `Deliver` some of whose events are parked is answered only once
    /// they all moved into the queue, then with `Ok`, and in order.
    #[test]
    fn a_parked_deliver_is_answered_once_its_events_fit() {
        let mut l = Driven::new(OverflowPolicy::Block, 4, EACH);
        let all = names("o", 20);
        l.deliver(all.iter().map(|n| added(n)).collect(), "parked");
        assert_eq!(l.was_answered("parked"), None, "held while parked");
        assert_eq!(l.d.room(), 0);
        // 1 in flight, 4 queued, 15 parked: room is made one event at a time.
        for _ in 0..14 {
            assert!(l.handle_one());
            assert_eq!(l.was_answered("parked"), None);
        }
        assert!(l.handle_one());
        assert_eq!(l.was_answered("parked"), Some(Ok(())));
        l.handle_all();
        assert_eq!(l.keys(), all);
    }

    /// Batches keep the order, never exceed their maximum, one in flight at
    /// a time, and the subscriber syncs once every initial add is handled (HS-2).
    #[test]
    fn batches_are_ordered_bounded_and_count_towards_sync() {
        let mut l = Driven::new(
            OverflowPolicy::Block,
            100,
            CallShape::Batches { max: 3, calls: 1 },
        );
        let all = names("o", 10);
        l.deliver(all.iter().map(|n| initial(n)).collect(), "d");
        l.d.upstream_synced();
        assert_eq!(l.in_flight.len(), 1, "one batch at a time");
        while l.in_flight.len() == 1 {
            assert!(
                !l.d.has_synced(),
                "synced before every initial add was handled"
            );
            l.handle_one();
        }
        assert!(l.d.has_synced());
        assert!(l.calls.iter().all(|n| (1..=3).contains(n)), "{:?}", l.calls);
        assert_eq!(l.calls.iter().sum::<usize>(), 10);
        assert_eq!(l.keys(), all);
        assert!(l.handled.iter().all(|(_, c, _)| *c == Cause::Initial));
    }

    /// Pipelined events go in groups of half the depth, never more than the
    /// depth unhandled, in order.
    #[test]
    fn pipelined_events_are_bounded_grouped_and_ordered() {
        let mut l = Driven::new(OverflowPolicy::Block, 1000, CallShape::Events { depth: 4 });
        let all = names("o", 20);
        l.deliver(all.iter().map(|n| added(n)).collect(), "d");
        assert_eq!(l.calls, vec![2, 2]);
        assert_eq!(l.d.in_flight_events(), 4);
        assert_eq!(l.d.pending_len(), 16);
        l.handle_one();
        assert_eq!(l.d.in_flight_events(), 4, "the room goes to the next group");
        l.handle_all();
        assert_eq!(l.keys(), all);
        assert_eq!(l.d.in_flight_events(), 0);
        assert!(l.d.is_idle());
    }

    /// SI-5, HS-2: a replay goes out before anything taken after it, as
    /// initial adds; it holds back no `Deliver` (answered in place while the
    /// replay waits); the subscriber syncs only once it handled all of it.
    #[test]
    fn a_replay_comes_first_and_counts_towards_sync() {
        let mut l = Driven::new(OverflowPolicy::Block, 2, EACH);
        let replayed = names("r", 5);
        let objects: Vec<(ObjectKey, Arc<u32>)> = replayed
            .iter()
            .map(|n| (n.as_str().into(), Arc::new(1)))
            .collect();
        assert!(l.d.replay(Replay {
            len: objects.len(),
            objects: Box::new(objects.into_iter()),
        }));
        l.pump();
        l.deliver(vec![added("w")], "w");
        assert_eq!(
            l.was_answered("w"),
            Some(Ok(())),
            "not held back by the replay"
        );
        l.d.upstream_synced();
        assert!(!l.d.has_synced(), "synced before its replay was handled");
        l.handle_all();
        assert!(l.d.has_synced());
        let got: Vec<(String, Cause)> = l.handled.iter().map(|(k, c, _)| (k.clone(), *c)).collect();
        let mut want: Vec<(String, Cause)> = replayed
            .iter()
            .map(|n| (n.clone(), Cause::Initial))
            .collect();
        want.push(("w".into(), Cause::Watch));
        assert_eq!(got, want);
    }

    /// Regression (review): a batch that drained a full `Block` queue used
    /// to go on into the resync lane while real changes were still parked,
    /// so a resync could overtake a real change of the same key (SI-11).
    #[test]
    fn a_batch_takes_parked_real_changes_before_the_resync_lane() {
        let t0 = Instant::now();
        let mut l = Driven::new(
            OverflowPolicy::Block,
            2,
            CallShape::Batches { max: 8, calls: 1 },
        );
        l.deliver(vec![added("a0")], "a0");
        l.resync(vec![updated("k", 1, Cause::Resync)], "sweep", t0);
        assert_eq!(
            l.was_answered("sweep"),
            Some(Ok(())),
            "a short lane answers at once"
        );
        let changes = vec![
            added("x1"),
            added("x2"),
            updated("k", 2, Cause::Watch),
            added("x3"),
        ];
        l.deliver(changes, "changes");
        assert_eq!(l.was_answered("changes"), None, "two fit, two are parked");
        l.handle_all();
        assert_eq!(l.was_answered("changes"), Some(Ok(())));
        let k: Vec<&Seen> = l.handled.iter().filter(|(key, _, _)| key == "k").collect();
        assert_eq!(
            k,
            vec![
                &("k".to_string(), Cause::Watch, 2),
                &("k".to_string(), Cause::Resync, 2)
            ],
            "{:?}",
            l.handled
        );
        assert_eq!(l.handled.len(), 6);
    }

    fn sweep(n: usize) -> Vec<Event<u32>> {
        (0..n)
            .map(|i| updated(&format!("r{i}"), 1, Cause::Resync))
            .collect()
    }

    /// SI-11: real changes overtake a sweep waiting in the lane; the sweep's
    /// answer waits for the lane, but a stalled subscriber holds it at most
    /// `RESYNC_HOLD_MAX`; a resync of a key that changed meanwhile carries
    /// the newer state.
    #[test]
    fn real_changes_overtake_a_pending_resync_sweep() {
        let t0 = Instant::now();
        let mut l = Driven::new(OverflowPolicy::Block, 16, EACH);
        let n = RESYNC_LANE_LOW + 50;
        l.resync(sweep(n), "sweep", t0);
        assert_eq!(l.was_answered("sweep"), None, "paced by the lane");
        l.deliver(vec![added("x"), updated("r5", 2, Cause::Watch)], "changes");
        assert_eq!(
            l.was_answered("changes"),
            Some(Ok(())),
            "real changes are taken while the sweep waits"
        );
        let before = RESYNC_HOLD_MAX - Duration::from_millis(1);
        assert_eq!(
            l.d.resync_due(t0 + before),
            Due::In(Duration::from_millis(1))
        );
        // Nothing handled yet: a stalled subscriber slows the sweep, never stops it.
        assert_eq!(l.d.resync_due(t0 + RESYNC_HOLD_MAX), Due::Now("sweep"));
        assert_eq!(l.d.resync_due(t0 + RESYNC_HOLD_MAX), Due::Nothing);
        l.handle_all();
        let seen = &l.handled;
        // r0 was already with the subscriber; then the real changes, then the rest.
        assert_eq!(seen[0].0, "r0");
        assert_eq!(seen[1].0, "x");
        assert_eq!(seen[2], ("r5".into(), Cause::Watch, 2));
        assert!(seen[3..].iter().all(|(_, c, _)| *c == Cause::Resync));
        let r5: Vec<_> = seen.iter().filter(|(k, _, _)| k == "r5").collect();
        assert_eq!(r5.len(), 2, "one change, one resync");
        assert_eq!(r5[1].2, 2, "the resync carries the newer state");
        assert_eq!(seen.len(), n + 2);
    }

    /// A held sweep answer goes as soon as sends bring the lane down to
    /// `RESYNC_LANE_LOW`, and at the latest when the next chunk comes.
    #[test]
    fn a_held_sweep_answer_goes_once_the_lane_is_low_or_the_next_chunk_comes() {
        let t0 = Instant::now();
        let mut l = Driven::new(OverflowPolicy::Block, 16, EACH);
        l.resync(sweep(RESYNC_LANE_LOW + 3), "first", t0);
        assert_eq!(l.was_answered("first"), None);
        // r0 went out at once; each handled call sends the next one.
        l.handle_one();
        assert_eq!(l.was_answered("first"), None, "one over the mark");
        l.handle_one();
        assert_eq!(l.was_answered("first"), Some(Ok(())));
        let more: Vec<Event<u32>> = (0..RESYNC_LANE_LOW + 10)
            .map(|i| updated(&format!("s{i}"), 1, Cause::Resync))
            .collect();
        l.resync(more, "second", t0);
        assert_eq!(l.was_answered("second"), None);
        l.resync(vec![updated("t", 1, Cause::Resync)], "third", t0);
        assert_eq!(
            l.was_answered("second"),
            Some(Ok(())),
            "released by the next chunk"
        );
        assert_eq!(l.was_answered("third"), None);
    }

    /// SI-12: stopping drops what is pending, sends nothing more, takes no
    /// replay, and answers what was held as gone.
    #[test]
    fn stop_drops_what_is_pending_and_answers_held_ones_as_gone() {
        let t0 = Instant::now();
        let mut l = Driven::new(OverflowPolicy::Block, 1, EACH);
        l.deliver(vec![added("a"), added("b"), added("c")], "parked");
        l.resync(sweep(RESYNC_LANE_LOW + 1), "sweep", t0);
        assert_eq!(l.answered, vec![]);
        let answers = l.d.stop();
        assert_eq!(answers.outcome, Err(ListenerGone));
        let mut replies = Vec::new();
        answers.send(|reply, _| replies.push(reply));
        replies.sort();
        assert_eq!(replies, ["parked", "sweep"]);
        assert!(l.d.is_stopped());
        assert_eq!(l.d.pending_len(), 0);
        assert!(l.d.next_call(|_| {}).is_none());
        assert!(!l.d.replay(Replay {
            len: 1,
            objects: Box::new(std::iter::once(("r".into(), Arc::new(1)))),
        }));
        assert_eq!(l.d.resync_due(t0 + RESYNC_HOLD_MAX), Due::Nothing);
        // The call in flight still returns.
        assert!(l.handle_one());
        assert!(l.d.is_idle());
        assert_eq!(l.keys(), ["a"]);
    }

    /// Every policy, capacity, call shape and `Deliver` size (seeded
    /// pseudo-random, the subscriber handling a random number of calls
    /// between deliveries) hands the subscriber exactly what was delivered,
    /// in order, and every `Deliver` is answered `Ok`.
    #[test]
    fn every_shape_keeps_order_under_varying_pressure() {
        let mut next = fixtures::seeded();
        let shapes = [
            EACH,
            CallShape::Events { depth: 2 },
            CallShape::Events { depth: 4 },
            CallShape::Events { depth: 8 },
            CallShape::Batches { max: 1, calls: 1 },
            CallShape::Batches { max: 5, calls: 1 },
            CallShape::Batches { max: 5, calls: 2 },
        ];
        const REPLIES: [&str; 20] = [
            "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
            "16", "17", "18", "19",
        ];
        for policy in [OverflowPolicy::Block, OverflowPolicy::Coalesce] {
            for capacity in [1, 2, 3, 8] {
                for shape in shapes {
                    let case = format!("{policy:?}, capacity {capacity}, {shape:?}");
                    let mut l = Driven::new(policy, capacity, shape);
                    let mut all = Vec::new();
                    for reply in REPLIES {
                        let size = 1 + next(2 * capacity as u64 + 4) as usize;
                        let batch = names("o", all.len() + size).split_off(all.len());
                        l.deliver(batch.iter().map(|n| added(n)).collect(), reply);
                        all.extend(batch);
                        // The Indexer waits for an answer before its next Deliver.
                        while l.was_answered(reply).is_none() {
                            assert!(l.handle_one(), "{case}: {reply} never answered");
                        }
                        for _ in 0..next(3) {
                            l.handle_one();
                        }
                    }
                    l.handle_all();
                    assert_eq!(l.keys(), all, "{case}");
                    assert!(l.answered.iter().all(|(_, o)| o.is_ok()), "{case}");
                    assert_eq!(l.d.pending_len(), 0, "{case}");
                    assert_eq!(l.d.in_flight_events(), 0, "{case}");
                    assert!(l.d.is_idle(), "{case}");
                }
            }
        }
    }
}
