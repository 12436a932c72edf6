//! The resync timer actor: owns the [`ResyncSchedule`] and, at each due time,
//! tells the Indexer which subscribers to replay the cache to.
//!
//! Time comes from tokio's clock, so tests can pause and advance it.

use actix::prelude::*;

use super::messages::{CancelResync, ScheduleResync, StopResync};
use super::schedule::ResyncSchedule;
use crate::indexer::ResyncDue;
use crate::subscriber::SubscriberId;

/// The resync timer actor.
pub struct ResyncTimer {
    schedule: ResyncSchedule<SubscriberId>,
    indexer: Recipient<ResyncDue>,
    timer: Option<SpawnHandle>,
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl ResyncTimer {
    /// A timer that sends [`ResyncDue`] to `indexer`.
    pub fn new(indexer: Recipient<ResyncDue>) -> Self {
        ResyncTimer {
            schedule: ResyncSchedule::new(),
            indexer,
            timer: None,
        }
    }

    fn reschedule(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let Some(at) = self.schedule.next_wakeup() else {
            return;
        };
        let wait = at.saturating_duration_since(now());
        self.timer = Some(ctx.run_later(wait, |act, ctx| {
            act.timer = None;
            let due = act.schedule.due(now());
            if !due.is_empty() {
                tracing::debug!(?due, "resync due");
                // The answer names subscribers that are gone: forget them.
                act.indexer
                    .send(ResyncDue(due))
                    .into_actor(act)
                    .map(|gone, act, ctx| {
                        let gone = gone.unwrap_or_default();
                        if !gone.is_empty() {
                            for id in &gone {
                                act.schedule.remove(id);
                            }
                            act.reschedule(ctx);
                        }
                    })
                    .spawn(ctx);
            }
            act.reschedule(ctx);
        }));
    }
}

impl Actor for ResyncTimer {
    type Context = Context<Self>;
}

impl Handler<ScheduleResync> for ResyncTimer {
    type Result = MessageResult<ScheduleResync>;

    fn handle(&mut self, msg: ScheduleResync, ctx: &mut Context<Self>) -> Self::Result {
        let effective = self.schedule.insert(msg.id, msg.period, now());
        self.reschedule(ctx);
        MessageResult(effective)
    }
}

impl Handler<CancelResync> for ResyncTimer {
    type Result = ();

    fn handle(&mut self, CancelResync(id): CancelResync, ctx: &mut Context<Self>) {
        self.schedule.remove(&id);
        self.reschedule(ctx);
    }
}

impl Handler<StopResync> for ResyncTimer {
    type Result = ();

    fn handle(&mut self, _: StopResync, ctx: &mut Context<Self>) {
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        self.schedule = ResyncSchedule::new();
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts the `ResyncDue` it receives.
    struct Due(Arc<AtomicUsize>);

    impl Actor for Due {
        type Context = Context<Self>;
    }

    impl Handler<ResyncDue> for Due {
        type Result = MessageResult<ResyncDue>;

        fn handle(&mut self, _: ResyncDue, _: &mut Context<Self>) -> Self::Result {
            self.0.fetch_add(1, Ordering::SeqCst);
            MessageResult(Vec::new())
        }
    }

    async fn advance(d: Duration) {
        tokio::time::advance(d).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[actix::test]
    async fn a_stopped_timer_sends_nothing_more() {
        tokio::time::pause();
        let due = Arc::new(AtomicUsize::new(0));
        let timer = ResyncTimer::new(Due(due.clone()).start().recipient()).start();
        timer
            .send(ScheduleResync {
                id: SubscriberId(1),
                period: Duration::from_secs(1),
            })
            .await
            .unwrap();
        advance(Duration::from_millis(1100)).await;
        assert_eq!(due.load(Ordering::SeqCst), 1, "due after one period");
        timer.send(StopResync).await.unwrap();
        advance(Duration::from_secs(5)).await;
        assert_eq!(due.load(Ordering::SeqCst), 1, "nothing after the stop");
        assert!(!timer.connected(), "the timer actor stopped");
    }
}
