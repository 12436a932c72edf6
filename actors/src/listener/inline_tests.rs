//! A listener calling an inline handler ([`Target::Inline`]): a large
//! replay goes in turns with the thread's other actors running between
//! them, its sync follows the calls, and a panic ends the subscription.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

use super::*;
use crate::event::Cause;
use crate::key::ObjectKey;
use crate::listener::fixtures::{added, replay_of};
use crate::listener::options::{INLINE_TURN, SLOW_INLINE_TURN};
use crate::listener::queue::OverflowPolicy;

fn inline_listener(
    handler: impl FnMut(&crate::event::Event<u32>) + Send + 'static,
    capacity: usize,
) -> (
    Addr<Listener<u32>>,
    Arc<ListenerStats>,
    watch::Receiver<bool>,
) {
    let (synced, synced_rx) = watch::channel(false);
    let stats = Arc::new(ListenerStats::default());
    let listener = Listener::new(
        SubscriberId(1),
        Target::Inline(Box::new(handler)),
        ListenerOptions {
            policy: OverflowPolicy::Block,
            capacity,
        },
        synced,
        stats.clone(),
    )
    .start();
    (listener, stats, synced_rx)
}

/// Counts the `Tick`s it handled.
struct Ticker(Arc<AtomicUsize>);

impl Actor for Ticker {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "()")]
struct Tick;

impl Handler<Tick> for Ticker {
    type Result = ();

    fn handle(&mut self, _: Tick, _: &mut Context<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A replay of 2.5 turns is handled in order, a turn of `INLINE_TURN`
/// events at a time: a message another actor of the thread got during the
/// first turn is handled before the second starts. The subscription syncs
/// once every initial add was handled (HS-2).
#[actix::test]
async fn a_replay_larger_than_a_turn_goes_in_turns_with_other_actors_between() {
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = Ticker(ticks.clone()).start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (listener, stats, mut synced) = inline_listener(
        {
            let (seen, ticks) = (seen.clone(), ticks.clone());
            move |e| {
                let mut seen = seen.lock().unwrap();
                if seen.is_empty() {
                    ticker.do_send(Tick);
                }
                seen.push((e.key().to_string(), e.cause(), ticks.load(Ordering::SeqCst)));
            }
        },
        8,
    );
    let n = INLINE_TURN * 5 / 2;
    let names: Vec<String> = (0..n).map(|i| format!("r{i:05}")).collect();
    let objects: Vec<(ObjectKey, Arc<u32>)> = names
        .iter()
        .map(|name| (name.as_str().into(), Arc::new(1)))
        .collect();
    listener.send(replay_of(objects)).await.unwrap();
    listener.send(CacheSynced).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), synced.wait_for(|s| *s))
        .await
        .expect("synced once the replay was handled")
        .unwrap();
    let seen = seen.lock().unwrap();
    let keys: Vec<&str> = seen.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys, names.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(seen.iter().all(|(_, cause, _)| *cause == Cause::Initial));
    let first_after_tick = seen.iter().position(|(_, _, t)| *t == 1);
    assert_eq!(
        first_after_tick,
        Some(INLINE_TURN),
        "the other actor ran between the first two turns, not during one"
    );
    assert_eq!(stats.delivered.load(Ordering::SeqCst), n as u64);
    assert_eq!(stats.pending.load(Ordering::SeqCst), 0);
    assert_eq!(stats.in_flight.load(Ordering::SeqCst), 0);
}

/// Deliveries larger than the `Block` queue's room are handled whole, in
/// order, each answered once its events were handled.
#[actix::test]
async fn deliveries_larger_than_the_queue_are_handled_in_order_before_their_answer() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (listener, stats, _) = inline_listener(
        {
            let seen = seen.clone();
            move |e| seen.lock().unwrap().push(e.key().to_string())
        },
        2,
    );
    let mut names = Vec::new();
    for round in 0..4 {
        let batch: Vec<String> = (0..7).map(|i| format!("d{round}-{i}")).collect();
        let events: Vec<_> = batch.iter().map(|k| added(k, Cause::Watch)).collect();
        names.extend(batch);
        listener
            .send(Deliver(events.into()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*seen.lock().unwrap(), names, "answered before handled");
    }
    assert_eq!(stats.delivered.load(Ordering::SeqCst), 28);
}

/// A panicking handler ends the subscription: the listener marks it gone
/// and stops, and takes nothing more.
#[actix::test]
async fn a_panicking_inline_handler_removes_its_listener() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (listener, stats, mut synced) = inline_listener(
        {
            let calls = calls.clone();
            move |_| {
                if calls.fetch_add(1, Ordering::SeqCst) == 2 {
                    panic!("user-code bug (expected by the test)");
                }
            }
        },
        8,
    );
    let events: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| added(k, Cause::Watch))
        .collect();
    let _ = listener.send(Deliver(events.into())).await;
    // The sync channel closes as the stopped listener is dropped.
    tokio::time::timeout(Duration::from_secs(5), async {
        while synced.changed().await.is_ok() {}
    })
    .await
    .expect("the listener stops");
    assert!(!listener.connected());
    assert!(stats.gone.load(Ordering::SeqCst));
    assert_eq!(calls.load(Ordering::SeqCst), 3, "no call after the panic");
    assert!(
        listener
            .send(Deliver(vec![added("e", Cause::Watch)].into()))
            .await
            .is_err()
    );
}

/// A turn that holds the thread `SLOW_INLINE_TURN` or longer is counted;
/// fast turns are not.
#[actix::test]
async fn a_slow_inline_turn_is_counted() {
    let (listener, stats, _) = inline_listener(
        |e| {
            if e.key().name() == "slow" {
                // The handler under test blocks its thread: that is what is measured.
                std::thread::sleep(SLOW_INLINE_TURN + Duration::from_millis(20));
            }
        },
        8,
    );
    let deliver = |keys: &[&str]| {
        let events: Vec<_> = keys.iter().map(|k| added(k, Cause::Watch)).collect();
        listener.send(Deliver(events.into()))
    };
    deliver(&["a", "b"]).await.unwrap().unwrap();
    assert_eq!(stats.slow_inline_turns.load(Ordering::SeqCst), 0);
    deliver(&["c", "slow", "d"]).await.unwrap().unwrap();
    assert_eq!(stats.slow_inline_turns.load(Ordering::SeqCst), 1);
    assert_eq!(stats.delivered.load(Ordering::SeqCst), 5);
}

/// Deliveries that arrive while a turn is queued wait for it, and no turn
/// takes more than `INLINE_TURN` events, whatever the runs it reads: the
/// thread's other actors run at least every `INLINE_TURN` events.
#[actix::test]
async fn no_turn_takes_more_than_inline_turn_events() {
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = Ticker(ticks.clone()).start();
    // The tick each event was handled at: the ticker handles a `Tick` sent
    // during a turn only once the listener yields, so events of one turn
    // share a tick.
    let at_tick = Arc::new(Mutex::new(Vec::new()));
    let (listener, stats, _) = inline_listener(
        {
            let (at_tick, ticks) = (at_tick.clone(), ticks.clone());
            let mut sent_at = None;
            move |_| {
                let now = ticks.load(Ordering::SeqCst);
                if sent_at != Some(now) {
                    sent_at = Some(now);
                    ticker.do_send(Tick);
                }
                at_tick.lock().unwrap().push(now);
            }
        },
        4096,
    );
    let replayed = INLINE_TURN + 1;
    let objects: Vec<(ObjectKey, Arc<u32>)> = (0..replayed)
        .map(|i| (format!("r{i}").as_str().into(), Arc::new(1)))
        .collect();
    // All in the mailbox before the listener runs: the replay's first turn
    // queues the next, and the deliveries wait for it.
    listener.do_send(replay_of(objects));
    let mut deliveries = Vec::new();
    for round in 0..4 {
        let events: Vec<_> = (0..300)
            .map(|i| added(&format!("d{round}-{i}"), Cause::Watch))
            .collect();
        deliveries.push(listener.send(Deliver(events.into())));
    }
    for delivery in deliveries {
        tokio::time::timeout(Duration::from_secs(5), delivery)
            .await
            .expect("answered")
            .unwrap()
            .unwrap();
    }
    let total = replayed + 4 * 300;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while stats.delivered.load(Ordering::SeqCst) < total as u64 {
        assert!(tokio::time::Instant::now() < deadline, "not all handled");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let at_tick = at_tick.lock().unwrap();
    let mut turns = Vec::new();
    for tick in at_tick.iter() {
        match turns.last_mut() {
            Some((t, n)) if t == tick => *n += 1,
            _ => turns.push((*tick, 1)),
        }
    }
    let sizes: Vec<usize> = turns.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        sizes,
        vec![INLINE_TURN, INLINE_TURN, total - 2 * INLINE_TURN]
    );
}
