//! An inline handler's turns ([`Target::Inline`](super::Target::Inline)):
//! the listener calls the function itself, at most [`INLINE_TURN`] events
//! per turn, and yields to the runtime between turns, so a replay or a
//! backlog never holds the thread's other actors back for longer than one
//! turn. A turn of [`SLOW_INLINE_TURN`] or longer is counted and, at most
//! once per [`SLOW_INLINE_WARN_EVERY`], logged. Time is passed in.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::delivery::Delivery;
use super::options::{INLINE_TURN, SLOW_INLINE_TURN, SLOW_INLINE_WARN_EVERY};
use super::reply::{Reply, answer};
use super::sink::{HandlerPanicked, Sink};
use super::stats::ListenerStats;
use crate::subscriber::SubscriberId;

/// Whether the next turn is scheduled, and when a slow one was logged.
#[derive(Debug, Default)]
pub(super) struct InlineTurns {
    /// The next turn is scheduled: what comes meanwhile waits for it
    /// (running a turn for it at once would skip the yield).
    queued: bool,
    /// When a slow turn was last logged.
    slow_logged: Option<Instant>,
}

/// What one turn did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Turn {
    /// The function was called with this many events.
    Ran(usize),
    /// It panicked: the subscription ends.
    Panicked(HandlerPanicked),
}

impl InlineTurns {
    /// True while the next turn is scheduled.
    pub(super) fn is_queued(&self) -> bool {
        self.queued
    }

    /// After a turn: true if another is to be scheduled now (`more` is
    /// pending and none is scheduled yet); it then counts as scheduled.
    pub(super) fn schedule_next(&mut self, more: bool) -> bool {
        let schedule = more && !self.queued;
        self.queued |= schedule;
        schedule
    }

    /// The scheduled turn starts.
    pub(super) fn started(&mut self) {
        self.queued = false;
    }

    /// A turn of `events` events took `took`, ending at `now`: counts it
    /// when slow, and logs it unless one was logged less than
    /// [`SLOW_INLINE_WARN_EVERY`] ago. True when it was slow.
    pub(super) fn timed(
        &mut self,
        id: SubscriberId,
        took: Duration,
        events: usize,
        now: Instant,
        stats: &ListenerStats,
    ) -> bool {
        if took < SLOW_INLINE_TURN {
            return false;
        }
        stats.slow_inline_turns.fetch_add(1, Ordering::Relaxed);
        if self
            .slow_logged
            .is_none_or(|at| now.saturating_duration_since(at) >= SLOW_INLINE_WARN_EVERY)
        {
            self.slow_logged = Some(now);
            tracing::warn!(
                subscriber = %id,
                took_ms = took.as_millis() as u64,
                events,
                "an inline handler held its thread, and every actor on it, this long: hand slow work on to an actor, a stream or a workqueue"
            );
        }
        true
    }

    /// One turn ([`run_turn`]), timed ([`InlineTurns::timed`]).
    pub(super) fn run<K: Send + Sync + 'static>(
        &mut self,
        id: SubscriberId,
        sink: &mut Sink<K>,
        delivery: &mut Delivery<K, Reply>,
        stats: &ListenerStats,
    ) -> Turn {
        let began = Instant::now();
        let turn = run_turn(sink, delivery, stats);
        if let Turn::Ran(events @ 1..) = turn {
            let now = Instant::now();
            self.timed(id, now - began, events, now, stats);
        }
        turn
    }
}

/// Calls `then` once the runtime ran its other ready tasks: actix would
/// handle a message an actor sends itself in the same poll, before any
/// other actor of the thread.
pub(super) fn after_yield<A>(
    ctx: &mut Context<A>,
    then: impl FnOnce(&mut A, &mut Context<A>) + 'static,
) where
    A: Actor<Context = Context<A>>,
{
    let next = fut::wrap_future::<_, A>(tokio::task::yield_now());
    ctx.spawn(next.map(move |(), act, ctx| then(act, ctx)));
}

/// One turn: calls the function of `sink` with at most [`INLINE_TURN`]
/// pending events, in order. Each call returns before the next is made, so
/// the window is empty between calls and every answer the room frees goes
/// at once.
fn run_turn<K: Send + Sync + 'static>(
    sink: &mut Sink<K>,
    delivery: &mut Delivery<K, Reply>,
    stats: &ListenerStats,
) -> Turn {
    let mut handled = 0;
    while handled < INLINE_TURN {
        match sink.call_inline(delivery, INLINE_TURN - handled) {
            None => break,
            Some(Ok(sent)) => {
                delivery.returned(&sent);
                stats.handled(&sent);
                answer(delivery.sent_calls());
                handled += sent.events;
            }
            Some(Err(panic)) => return Turn::Panicked(panic),
        }
    }
    Turn::Ran(handled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_turn_is_scheduled_once_while_more_is_pending() {
        let mut turns = InlineTurns::default();
        assert!(!turns.schedule_next(false), "nothing pending");
        assert!(turns.schedule_next(true));
        assert!(turns.is_queued());
        assert!(!turns.schedule_next(true), "one is scheduled already");
        turns.started();
        assert!(!turns.is_queued());
        assert!(turns.schedule_next(true));
    }

    #[test]
    fn slow_turns_are_all_counted_and_logged_at_most_once_per_period() {
        let stats = ListenerStats::default();
        let mut turns = InlineTurns::default();
        let t0 = Instant::now();
        let id = SubscriberId(1);
        let fast = SLOW_INLINE_TURN - Duration::from_millis(1);
        assert!(!turns.timed(id, fast, 10, t0, &stats));
        assert!(turns.timed(id, SLOW_INLINE_TURN, 10, t0, &stats));
        assert_eq!(turns.slow_logged, Some(t0));
        let soon = t0 + SLOW_INLINE_WARN_EVERY - Duration::from_millis(1);
        assert!(turns.timed(id, SLOW_INLINE_TURN, 10, soon, &stats));
        assert_eq!(turns.slow_logged, Some(t0), "not logged again so soon");
        let later = t0 + SLOW_INLINE_WARN_EVERY;
        assert!(turns.timed(id, SLOW_INLINE_TURN, 10, later, &stats));
        assert_eq!(turns.slow_logged, Some(later));
        assert_eq!(stats.slow_inline_turns.load(Ordering::SeqCst), 3);
    }
}
