//! The workqueue actor: owns a [`RateLimitingQueue`], answers each worker's
//! [`Next`] when a key is ready, arms one timer for the next ready time, and
//! answers drains when they complete or their deadline passes.
//!
//! Time comes from tokio's clock, so tests can pause and advance it.

use std::hash::Hash;
use std::time::Instant;

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use futures::channel::oneshot;

use super::messages::*;
use super::rate_limiter::RateLimiter;
use super::rate_limiting::{Leftovers, RateLimitingQueue};
use super::waiters::Waiters;
use crate::answer::Answer;

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A drain waiting to complete.
struct Drain<K> {
    /// Tells this drain's deadline from another's.
    id: u64,
    reply: oneshot::Sender<DrainReport<K>>,
    deadline: SpawnHandle,
    dropped: Vec<K>,
}

/// The workqueue actor (see the [module docs](super)).
pub struct WorkQueue<K: Send + 'static> {
    queue: RateLimitingQueue<K>,
    waiters: Waiters<K>,
    /// The timer armed for the next ready time, and that time.
    timer: Option<(Instant, SpawnHandle)>,
    drains: Vec<Drain<K>>,
    next_drain: u64,
    /// Closed (PQ-8): nothing is handed out again, not even a key put back.
    closed: bool,
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> WorkQueue<K> {
    /// A queue named `name` whose failed keys wait as `limiter` says.
    pub fn new(name: impl Into<String>, limiter: Box<dyn RateLimiter<K>>) -> Self {
        WorkQueue {
            queue: RateLimitingQueue::new(name, limiter),
            waiters: Waiters::new(),
            timer: None,
            drains: Vec::new(),
            next_drain: 0,
            closed: false,
        }
    }

    /// After every change: releases what is due, hands ready keys to waiting
    /// workers, answers completed drains, re-arms the timer.
    fn settle(&mut self, ctx: &mut Context<Self>) {
        let now = now();
        self.queue.release_due(now);
        self.waiters.serve(&mut self.queue, now, || {
            ctx.address().downgrade().recipient()
        });
        self.answer_drains(ctx);
        self.arm(ctx, now);
    }

    fn answer_drains(&mut self, ctx: &mut Context<Self>) {
        if self.drains.is_empty() || (self.queue.draining() && !self.queue.is_drained()) {
            return;
        }
        for drain in std::mem::take(&mut self.drains) {
            ctx.cancel_future(drain.deadline);
            let _ = drain.reply.send(self.report(drain.dropped));
        }
    }

    fn report(&self, dropped: Vec<K>) -> DrainReport<K> {
        DrainReport {
            drained: self.queue.is_drained(),
            dropped,
            processing: self.queue.processing_keys().cloned().collect(),
            ready: self.queue.len(),
        }
    }

    fn arm(&mut self, ctx: &mut Context<Self>, now: Instant) {
        let next = self.queue.next_ready_at();
        if self.timer.as_ref().map(|(at, _)| *at) == next {
            return;
        }
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        let Some(at) = next else {
            return;
        };
        let handle = ctx.run_later(at.saturating_duration_since(now), |act, ctx| {
            act.timer = None;
            act.settle(ctx);
        });
        self.timer = Some((at, handle));
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Actor for WorkQueue<K> {
    type Context = Context<Self>;
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<Add<K>> for WorkQueue<K> {
    type Result = ();

    fn handle(&mut self, Add(keys): Add<K>, ctx: &mut Context<Self>) {
        let now = now();
        for (key, priority) in keys {
            self.queue.add(key, priority, now);
        }
        self.settle(ctx);
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<AddAfter<K>> for WorkQueue<K> {
    type Result = ();

    fn handle(&mut self, msg: AddAfter<K>, ctx: &mut Context<Self>) {
        self.queue
            .add_after(msg.key, msg.delay, msg.priority, now());
        self.settle(ctx);
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<AddRateLimited<K>> for WorkQueue<K> {
    type Result = Option<std::time::Duration>;

    fn handle(&mut self, msg: AddRateLimited<K>, ctx: &mut Context<Self>) -> Self::Result {
        let delay = self.queue.add_rate_limited(msg.key, msg.priority, now());
        self.settle(ctx);
        delay
    }
}

/// [`Next`]'s answer: the worker's reply joins the waiters (in the actor,
/// right after this message), and is sent when a key is ready.
pub struct Waiting;

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> MessageResponse<WorkQueue<K>, Next<K>>
    for Waiting
{
    fn handle(self, ctx: &mut Context<WorkQueue<K>>, tx: Option<OneshotSender<Option<Lease<K>>>>) {
        // `do_send(Next)` has nobody to answer: no key is handed out for it.
        let Some(tx) = tx else { return };
        ctx.spawn(
            actix::fut::ready(()).map(move |(), act: &mut WorkQueue<K>, ctx| {
                act.waiters.push(tx);
                act.settle(ctx);
            }),
        );
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<Next<K>> for WorkQueue<K> {
    type Result = Waiting;

    fn handle(&mut self, _: Next<K>, _: &mut Context<Self>) -> Waiting {
        Waiting
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<Release<K>> for WorkQueue<K> {
    type Result = ();

    fn handle(&mut self, Release(key): Release<K>, ctx: &mut Context<Self>) {
        if self.closed {
            // Its close answered what was left: a key no worker took is
            // done, not handed out again.
            self.queue.done(&key, now());
        } else {
            self.queue.put_back(&key);
        }
        self.settle(ctx);
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<Finish<K>> for WorkQueue<K> {
    type Result = bool;

    fn handle(&mut self, msg: Finish<K>, ctx: &mut Context<Self>) -> bool {
        let was = self.queue.finish(&msg.key, msg.outcome, now());
        self.settle(ctx);
        was
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<Forget<K>> for WorkQueue<K> {
    type Result = ();

    fn handle(&mut self, Forget(key): Forget<K>, _: &mut Context<Self>) {
        self.queue.forget(&key);
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<NumRequeues<K>> for WorkQueue<K> {
    type Result = u32;

    fn handle(&mut self, NumRequeues(key): NumRequeues<K>, _: &mut Context<Self>) -> u32 {
        self.queue.num_requeues(&key)
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<GetMetrics> for WorkQueue<K> {
    type Result = MessageResult<GetMetrics>;

    fn handle(&mut self, _: GetMetrics, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.queue.metrics(now()))
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<ShutDown<K>> for WorkQueue<K> {
    type Result = MessageResult<ShutDown<K>>;

    fn handle(&mut self, _: ShutDown<K>, ctx: &mut Context<Self>) -> Self::Result {
        let dropped = self.queue.shut_down();
        self.settle(ctx);
        MessageResult(dropped)
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<ShutDownWithDrain<K>> for WorkQueue<K> {
    type Result = Answer<DrainReport<K>>;

    fn handle(&mut self, msg: ShutDownWithDrain<K>, ctx: &mut Context<Self>) -> Self::Result {
        let dropped = self.queue.shut_down_with_drain();
        let (reply, rx) = oneshot::channel();
        let id = self.next_drain;
        self.next_drain += 1;
        let deadline = ctx.run_later(msg.timeout, move |act, _| {
            // This drain's timeout passed: it is answered as things stand;
            // others keep their own deadlines.
            if let Some(i) = act.drains.iter().position(|d| d.id == id) {
                let drain = act.drains.remove(i);
                let _ = drain.reply.send(act.report(drain.dropped));
            }
        });
        self.drains.push(Drain {
            id,
            reply,
            deadline,
            dropped,
        });
        self.settle(ctx);
        Answer::from_receiver(rx, self.report(Vec::new()))
    }
}

impl<K: Clone + Eq + Hash + Unpin + Send + 'static> Handler<Close<K>> for WorkQueue<K> {
    type Result = MessageResult<Close<K>>;

    fn handle(&mut self, _: Close<K>, ctx: &mut Context<Self>) -> Self::Result {
        let left: Leftovers<K> = self.queue.close();
        self.closed = true;
        self.settle(ctx);
        MessageResult(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::queue::Get;
    use crate::workqueue::{ItemExponential, Outcome, Priority};
    use std::time::Duration;

    const N: Priority = Priority::Normal;

    fn queue() -> Addr<WorkQueue<&'static str>> {
        let limiter = ItemExponential::new(Duration::from_millis(100), Duration::from_secs(10));
        WorkQueue::new("actor", Box::new(limiter)).start()
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[actix::test]
    async fn a_waiting_worker_is_answered_when_a_key_is_added() {
        let q = queue();
        let mut next = Box::pin(q.send(Next::new()));
        settle().await;
        assert!(
            futures::poll!(&mut next).is_pending(),
            "nothing ready: it waits"
        );
        q.send(Add(vec![("a", N)])).await.unwrap();
        let ticket = next.await.unwrap().unwrap().into_ticket();
        assert_eq!((ticket.key, ticket.requeues), ("a", 0));
        assert!(
            q.send(Finish {
                key: "a",
                outcome: Outcome::Success
            })
            .await
            .unwrap()
        );
    }

    #[actix::test]
    async fn a_failed_key_comes_back_after_its_backoff_from_the_timer() {
        tokio::time::pause();
        let q = queue();
        q.send(Add(vec![("a", N)])).await.unwrap();
        let t = q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        q.send(Finish {
            key: t.key,
            outcome: Outcome::Failure,
        })
        .await
        .unwrap();
        let mut next = Box::pin(q.send(Next::new()));
        tokio::time::advance(Duration::from_millis(99)).await;
        settle().await;
        assert!(futures::poll!(&mut next).is_pending(), "backing off");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        let t = next.await.unwrap().unwrap().into_ticket();
        assert_eq!((t.key, t.requeues), ("a", 1));
        assert_eq!(q.send(NumRequeues("a")).await.unwrap(), 1);
        let m = q.send(GetMetrics).await.unwrap();
        assert_eq!((m.name.as_str(), m.retries, m.processing), ("actor", 1, 1));
    }

    /// A worker that gives up its request loses no key: the key goes to the next one.
    #[actix::test]
    async fn a_dropped_request_does_not_lose_a_key() {
        let q = queue();
        let gone = q.send(Next::new());
        let mut gone = Box::pin(gone);
        settle().await;
        assert!(futures::poll!(&mut gone).is_pending());
        drop(gone);
        q.send(Add(vec![("a", N)])).await.unwrap();
        let t = q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        assert_eq!(t.key, "a");
    }

    /// PQ-9 for a request dropped after its answer was sent, unread (a
    /// `select!` that took another branch): the unread lease puts the key
    /// back, and the next worker gets it.
    #[actix::test]
    async fn a_request_dropped_after_its_answer_does_not_lose_the_key() {
        let q = queue();
        let answered = q.send(Next::new());
        q.send(Add(vec![("a", N)])).await.unwrap();
        settle().await;
        let m = q.send(GetMetrics).await.unwrap();
        assert_eq!(m.processing, 1, "handed out to the request");
        drop(answered);
        let t = tokio::time::timeout(Duration::from_secs(5), q.send(Next::new()))
            .await
            .expect("the key came back")
            .unwrap()
            .unwrap()
            .into_ticket();
        assert_eq!((t.key, t.requeues), ("a", 0));
        let m = q.send(GetMetrics).await.unwrap();
        assert_eq!((m.processing, m.adds), (1, 1), "put back, not added");
    }

    /// PQ-8 holds for a lease dropped unread after a close: the key is done,
    /// not handed out again.
    #[actix::test]
    async fn a_lease_dropped_after_a_close_hands_nothing_out() {
        let q = queue();
        let answered = q.send(Next::new());
        q.send(Add(vec![("a", N)])).await.unwrap();
        settle().await;
        let left = q.send(Close::new()).await.unwrap();
        assert!(left.queued.is_empty() && left.waiting.is_empty());
        drop(answered);
        settle().await;
        assert_eq!(q.send(Next::new()).await.unwrap(), None);
        assert_eq!(q.send(GetMetrics).await.unwrap().processing, 0);
    }

    /// A worker gone between the check and the send, while the queue
    /// drains: its key is not lost but handed out next.
    #[actix::test]
    async fn a_ticket_that_reaches_no_worker_goes_back_during_a_drain() {
        let limiter = ItemExponential::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut wq: WorkQueue<&'static str> = WorkQueue::new("hand-out", Box::new(limiter));
        let now = std::time::Instant::now();
        wq.queue.add("a", N, now);
        wq.queue.add("b", N, now);
        let Get::Item(ticket) = wq.queue.get(now) else {
            panic!("a is ready")
        };
        wq.queue.shut_down_with_drain();
        let (waiter, gone) = tokio::sync::oneshot::channel();
        drop(gone);
        let me = queue().downgrade().recipient();
        assert!(!Waiters::hand_out(&mut wq.queue, waiter, ticket, me));
        assert!(!wq.queue.is_drained());
        let keys: Vec<_> = std::iter::from_fn(|| match wq.queue.get(now) {
            Get::Item(t) => Some(t.key),
            _ => None,
        })
        .collect();
        assert_eq!(keys, ["a", "b"]);
    }

    /// WQ-T7 through the actor: the drain is answered once both are done;
    /// WQ-T9: a shutdown releases a drain; the deadline bounds it.
    #[actix::test]
    async fn drains_complete_are_released_or_time_out() {
        let q = queue();
        q.send(Add(vec![("foo", N), ("bar", N)])).await.unwrap();
        let foo = q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        let bar = q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        let mut drain = Box::pin(q.send(ShutDownWithDrain::new(Duration::from_secs(60))));
        settle().await;
        assert!(futures::poll!(&mut drain).is_pending());
        assert_eq!(
            q.send(Next::new()).await.unwrap(),
            None,
            "WQ-3: shut down, empty"
        );
        q.send(Finish {
            key: foo.key,
            outcome: Outcome::Success,
        })
        .await
        .unwrap();
        settle().await;
        assert!(
            futures::poll!(&mut drain).is_pending(),
            "bar still processing"
        );
        q.send(Finish {
            key: bar.key,
            outcome: Outcome::Success,
        })
        .await
        .unwrap();
        let report = drain.await.unwrap();
        assert!(report.drained && report.processing.is_empty());

        let q = queue();
        q.send(Add(vec![("foo", N)])).await.unwrap();
        q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        let drain = q.send(ShutDownWithDrain::new(Duration::from_secs(60)));
        let mut drain = Box::pin(drain);
        settle().await;
        assert!(futures::poll!(&mut drain).is_pending());
        q.send(ShutDown::new()).await.unwrap();
        let report = drain.await.unwrap();
        assert_eq!((report.drained, report.processing), (false, vec!["foo"]));

        tokio::time::pause();
        let q = queue();
        q.send(Add(vec![("foo", N)])).await.unwrap();
        q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        let drain = q.send(ShutDownWithDrain::new(Duration::from_secs(5)));
        settle().await;
        tokio::time::advance(Duration::from_secs(5)).await;
        let report = drain.await.unwrap();
        assert_eq!((report.drained, report.processing), (false, vec!["foo"]));
    }

    /// Each drain keeps its own deadline: a short one passing answers only
    /// itself, and the long one is still answered when the work is done.
    #[actix::test]
    async fn a_drain_deadline_answers_only_its_own_drain() {
        tokio::time::pause();
        let q = queue();
        q.send(Add(vec![("foo", N)])).await.unwrap();
        let foo = q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        let mut long = Box::pin(q.send(ShutDownWithDrain::new(Duration::from_secs(60))));
        settle().await;
        let short = q.send(ShutDownWithDrain::new(Duration::from_secs(1)));
        settle().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        let report = short.await.unwrap();
        assert_eq!((report.drained, report.processing), (false, vec!["foo"]));
        settle().await;
        assert!(futures::poll!(&mut long).is_pending(), "answered early");
        q.send(Finish {
            key: foo.key,
            outcome: Outcome::Success,
        })
        .await
        .unwrap();
        let report = long.await.unwrap();
        assert!(report.drained && report.processing.is_empty());
    }

    /// PQ-8: a close answers what is left and every waiting worker gets `None`.
    #[actix::test]
    async fn close_answers_leftovers_and_releases_workers() {
        let q = queue();
        q.send(Add(vec![("a", N), ("b", N)])).await.unwrap();
        q.send(AddAfter {
            key: "c",
            delay: Duration::from_secs(60),
            priority: N,
        })
        .await
        .unwrap();
        let a = q.send(Next::new()).await.unwrap().unwrap().into_ticket();
        let left = q.send(Close::new()).await.unwrap();
        assert_eq!((left.queued, left.waiting), (vec!["b"], vec!["c"]));
        assert_eq!(q.send(Next::new()).await.unwrap(), None);
        assert!(
            q.send(Finish {
                key: a.key,
                outcome: Outcome::Failure
            })
            .await
            .unwrap()
        );
        assert_eq!(
            q.send(Next::new()).await.unwrap(),
            None,
            "the requeue was ignored"
        );
    }
}
