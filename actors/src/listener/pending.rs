//! What waits for one subscriber, and the order in which it goes out.
//!
//! The replay of the cache goes first (SI-5: everything else came after the
//! state it shows), then real changes in the order they came (the queue, then
//! what a full `Block` queue parked), then the resync lane (SI-11): a resync
//! never overtakes a real change it has not seen, and real changes never wait
//! behind a sweep. Every initial add is counted in the sync tracker (HS-2)
//! when taken and finished once handled or merged away.

use std::collections::VecDeque;
use std::sync::Arc;

use super::lane::ResyncLane;
use super::messages::Replay;
use super::queue::{ListenerQueue, OverflowPolicy};
use super::sync::SyncTracker;
use crate::event::{Cause, Event, EventBatch};

/// Parked events beyond which an emptied `parked` gives its memory back.
const PARKED_KEEP: usize = 1024;

/// The notifications one subscriber has not been sent yet (see the module doc).
pub struct Pending<K> {
    /// What is left of the replay. `len` counts what it has not yielded; if
    /// it yields fewer, the rest are finished in `sync` when it runs dry.
    replay: Option<Replay<K>>,
    /// Real changes taken, in order (the lane's resyncs are not here).
    queue: ListenerQueue<K>,
    /// What a full `Block` queue could not take, in order: taken into the
    /// queue, ahead of anything newer, as it has room. Between operations it
    /// is empty unless the queue is full.
    parked: VecDeque<Event<K>>,
    /// Resyncs. Every real change taken into `queue` was shown to it first
    /// ([`ResyncLane::observe`]), so a resync carries the newest state.
    lane: ResyncLane<K>,
    /// Initial adds taken (the replay's included) and not yet handled or dropped.
    sync: SyncTracker,
}

impl<K> Pending<K> {
    /// Nothing pending; the queue bounded by `capacity` (`Block`) or merging (`Coalesce`).
    pub fn new(policy: OverflowPolicy, capacity: usize) -> Self {
        Pending {
            replay: None,
            queue: ListenerQueue::new(policy, capacity),
            parked: VecDeque::new(),
            lane: ResyncLane::new(),
            sync: SyncTracker::new(),
        }
    }

    /// Takes `events` after anything parked: resyncs into the lane, real
    /// changes into the queue while it has room, the rest parked in order.
    pub fn accept(&mut self, events: impl IntoIterator<Item = Event<K>>) {
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
                    // Back at the front of `parked`: new events are only
                    // taken once `parked` is empty.
                    self.parked.push_front(full.into_event());
                    self.parked.extend(events);
                    return;
                }
            }
        }
    }

    /// Takes a `Deliver`'s events, shared with the other listeners of the
    /// batch: as [`accept`](Self::accept), but what a `Block` queue takes
    /// at once (nothing parked, no resync among them) is queued as a run of
    /// the chunk, not copied.
    pub fn accept_shared(&mut self, events: &Arc<[Event<K>]>) {
        let shareable = self.parked.is_empty() && !events.iter().any(Event::is_resync);
        let take = if shareable {
            self.queue.room().min(events.len())
        } else {
            0
        };
        if take > 0 && self.queue.push_shared(events, 0..take) {
            let taken = &events[..take];
            if !self.lane.is_empty() {
                taken.iter().for_each(|event| self.lane.observe(event));
            }
            self.sync
                .start_many(taken.iter().filter(|e| e.is_initial()).count());
            self.accept(events[take..].iter().cloned());
        } else {
            self.accept(events.iter().cloned());
        }
    }

    /// Moves parked events into the queue as far as it has room.
    pub fn refill(&mut self) {
        if !self.parked.is_empty() {
            self.accept(std::iter::empty());
        }
    }

    /// Adds a replay behind any replay still pending; false (and nothing
    /// changes) when it is empty.
    pub fn replay(&mut self, replay: Replay<K>) -> bool
    where
        K: 'static,
    {
        if replay.len == 0 {
            return false;
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
        true
    }

    /// Queues a resync in the lane.
    pub fn resync(&mut self, event: Event<K>) {
        self.lane.push(event);
    }

    /// The next notification for the subscriber, in the order of the module doc.
    #[inline]
    pub fn pop(&mut self) -> Option<Event<K>> {
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

    /// The next `n` notifications as a batch sharing its chunk, when they
    /// are all in one run of it (no replay left, and the queue's next `n`
    /// are one run); else `None`, and [`pop`](Self::pop) them.
    pub fn pop_shared(&mut self, n: usize) -> Option<EventBatch<K>> {
        if self.replay.is_some() {
            return None;
        }
        self.queue.pop_shared(n)
    }

    /// How many notifications [`pop_shared`](Self::pop_shared) can take
    /// now from the front run of a shared chunk (0 while a replay is left).
    pub fn front_shared_len(&self) -> usize {
        if self.replay.is_some() {
            return 0;
        }
        self.queue.front_shared_len()
    }

    /// The next object of the replay as an initial add, if any is left.
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

    /// `n` initial adds were handled by the subscriber.
    pub fn handled_initial(&mut self, n: usize) {
        if n > 0 {
            let _ = self.sync.finish_many(n);
        }
    }

    /// The informer synced (HS-2): this subscriber syncs once its initial adds are handled.
    pub fn upstream_synced(&mut self) {
        self.sync.upstream_synced();
    }

    /// True once the informer synced and every initial add was handled (latches).
    pub fn has_synced(&self) -> bool {
        self.sync.has_synced()
    }

    /// Events a `Deliver` may bring without any being parked.
    pub fn room(&self) -> usize {
        self.queue.room().saturating_sub(self.parked.len())
    }

    /// Notifications pending: the replay's, the queue's, the parked and the lane's.
    pub fn len(&self) -> usize {
        self.replay.as_ref().map_or(0, |r| r.len)
            + self.queue.len()
            + self.parked.len()
            + self.lane.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.replay.is_none()
            && self.queue.is_empty()
            && self.parked.is_empty()
            && self.lane.is_empty()
    }

    /// True while some events wait for room in a full `Block` queue.
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Resyncs waiting in the lane.
    pub fn lane_len(&self) -> usize {
        self.lane.len()
    }

    /// Notifications the queue merged away (a metric).
    pub fn coalesced(&self) -> u64 {
        self.queue.coalesced()
    }

    /// Drops everything pending (SI-12).
    pub fn clear(&mut self) {
        self.replay = None;
        self.queue.clear();
        self.parked.clear();
        self.lane.clear();
    }

    /// Once nothing is pending, gives back what a backlog grew.
    pub fn release_idle_memory(&mut self) {
        self.queue.release_idle_memory();
        self.lane.release_idle_memory();
        if self.parked.is_empty() && self.parked.capacity() > PARKED_KEEP {
            self.parked = VecDeque::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::key::ObjectKey;
    use crate::listener::fixtures::{added, updated};

    /// Key, cause and state of each event, as the subscriber would see them.
    fn drain(p: &mut Pending<u32>) -> Vec<(String, Cause, u32)> {
        std::iter::from_fn(|| p.pop())
            .map(|e| (e.key().to_string(), e.cause(), **e.object().unwrap()))
            .collect()
    }

    fn replay(keys: &[&str], len: usize) -> Replay<u32> {
        let objects: Vec<(ObjectKey, Arc<u32>)> =
            keys.iter().map(|k| ((*k).into(), Arc::new(0))).collect();
        Replay {
            len,
            objects: Box::new(objects.into_iter()),
        }
    }

    /// SI-5, HS-2: the replay goes out before what was taken after it, as
    /// initial adds, each counted towards the subscriber's sync.
    #[test]
    fn a_replay_goes_out_first_as_initial_adds_counted_towards_sync() {
        let mut p = Pending::new(OverflowPolicy::Block, 2);
        assert!(p.replay(replay(&["r0", "r1"], 2)));
        p.accept([added("w", Cause::Watch)]);
        p.upstream_synced();
        assert_eq!(p.len(), 3);
        assert_eq!(p.room(), 1, "the replay takes no room in the queue");
        let got = drain(&mut p);
        assert_eq!(
            got,
            vec![
                ("r0".into(), Cause::Initial, 0),
                ("r1".into(), Cause::Initial, 0),
                ("w".into(), Cause::Watch, 1),
            ]
        );
        assert!(!p.has_synced(), "two initial adds not handled yet");
        p.handled_initial(2);
        assert!(p.has_synced());
    }

    /// An empty replay changes nothing; one announcing more objects than it
    /// yields finishes the missing ones, which are never handled (HS-2).
    #[test]
    fn a_replay_short_of_its_len_still_lets_the_subscriber_sync() {
        let mut p = Pending::<u32>::new(OverflowPolicy::Block, 4);
        assert!(!p.replay(replay(&[], 0)));
        assert!(p.is_empty());
        assert!(p.replay(replay(&["r0"], 3)));
        p.upstream_synced();
        assert_eq!(drain(&mut p).len(), 1);
        p.handled_initial(1);
        assert!(p.has_synced());
        assert!(p.is_empty());
    }

    /// Regression: a full `Block` queue taking parked events one slot at a
    /// time put the one that did not fit behind the others.
    #[test]
    fn parked_events_keep_their_order_as_a_full_queue_drains() {
        let mut p = Pending::new(OverflowPolicy::Block, 4);
        let names: Vec<String> = (0..20).map(|i| format!("o{i}")).collect();
        p.accept(names.iter().map(|n| added(n, Cause::Watch)));
        assert!(p.has_parked());
        assert_eq!(p.room(), 0);
        let mut got = Vec::new();
        while let Some(e) = p.pop() {
            got.push(e.key().to_string());
            p.refill();
            if p.has_parked() {
                assert_eq!(p.room(), 0, "parked only while the queue is full");
            }
        }
        assert_eq!(got, names);
        assert!(!p.has_parked());
    }

    /// A shared chunk larger than the room: the queue takes what fits as a
    /// run, the rest is parked, in order, and counted towards sync as taken.
    #[test]
    fn a_shared_chunk_beyond_the_room_parks_the_rest_in_order() {
        let mut p = Pending::new(OverflowPolicy::Block, 3);
        let names: Vec<String> = (0..7).map(|i| format!("o{i}")).collect();
        let chunk: Arc<[Event<u32>]> = names.iter().map(|n| added(n, Cause::Initial)).collect();
        p.accept_shared(&chunk);
        assert!(p.has_parked());
        assert_eq!((p.len(), p.room()), (7, 0));
        p.accept_shared(&[added("late", Cause::Watch)].into());
        p.upstream_synced();
        let mut got = Vec::new();
        while let Some(e) = p.pop() {
            got.push(e.key().to_string());
            p.refill();
        }
        assert_eq!(got[..7], names[..]);
        assert_eq!(got[7], "late");
        assert!(!p.has_synced(), "seven initial adds not handled yet");
        p.handled_initial(7);
        assert!(p.has_synced());
    }

    /// A shared chunk with a resync in it, or into a `Coalesce` queue, is
    /// taken one event at a time: the resync goes to the lane, and updates
    /// of one key merge.
    #[test]
    fn a_shared_chunk_with_a_resync_or_into_a_coalesce_queue_is_taken_one_by_one() {
        let mut p = Pending::new(OverflowPolicy::Block, 8);
        p.accept_shared(&[updated("a", 1, Cause::Resync), added("b", Cause::Watch)].into());
        assert_eq!(p.lane_len(), 1);
        let keys: Vec<String> = drain(&mut p).into_iter().map(|(k, _, _)| k).collect();
        assert_eq!(keys, ["b", "a"]);
        let mut c = Pending::new(OverflowPolicy::Coalesce, 8);
        c.accept_shared(&[updated("a", 2, Cause::Watch), updated("a", 3, Cause::Watch)].into());
        assert_eq!(drain(&mut c), vec![("a".into(), Cause::Watch, 3)]);
    }

    /// A replay goes out before a shared run: none is handed out while
    /// replayed objects are left.
    #[test]
    fn no_shared_run_goes_out_before_the_replay() {
        let mut p = Pending::new(OverflowPolicy::Block, 4);
        assert!(p.replay(replay(&["r0"], 1)));
        p.accept_shared(&[added("w", Cause::Watch)].into());
        assert!(p.pop_shared(1).is_none());
        assert_eq!(p.pop().unwrap().key().as_str(), "r0");
        assert_eq!(p.pop().unwrap().key().as_str(), "w");
        assert!(p.is_empty());
        p.accept_shared(&[added("x", Cause::Watch), added("y", Cause::Watch)].into());
        let batch = p.pop_shared(2).unwrap();
        assert_eq!(
            batch.len(),
            2,
            "the replay is done: the run goes out shared"
        );
        assert!(p.is_empty());
    }

    /// A `Deliver` taken while events are parked goes behind them.
    #[test]
    fn new_events_queue_behind_parked_ones() {
        let mut p = Pending::new(OverflowPolicy::Block, 1);
        p.accept([added("a", Cause::Watch), added("b", Cause::Watch)]);
        p.accept([added("c", Cause::Watch)]);
        let keys: Vec<String> = drain(&mut p).into_iter().map(|(k, _, _)| k).collect();
        assert_eq!(keys, ["a", "b", "c"]);
    }

    /// SI-11 regression (review): real changes still parked go out before
    /// the resync lane, and a resync of a key they changed carries the newer state.
    #[test]
    fn parked_real_changes_go_before_the_resync_lane() {
        let mut p = Pending::new(OverflowPolicy::Block, 2);
        p.resync(updated("k", 1, Cause::Resync));
        p.accept([
            added("x1", Cause::Watch),
            added("x2", Cause::Watch),
            updated("k", 2, Cause::Watch),
            added("x3", Cause::Watch),
        ]);
        assert!(p.has_parked());
        let got = drain(&mut p);
        assert_eq!(
            got,
            vec![
                ("x1".into(), Cause::Watch, 1),
                ("x2".into(), Cause::Watch, 1),
                ("k".into(), Cause::Watch, 2),
                ("x3".into(), Cause::Watch, 1),
                ("k".into(), Cause::Resync, 2),
            ]
        );
    }

    /// Resyncs in a `Deliver` go to the lane, behind the real changes.
    #[test]
    fn resyncs_taken_with_real_changes_wait_in_the_lane() {
        let mut p = Pending::new(OverflowPolicy::Block, 8);
        p.accept([updated("a", 1, Cause::Resync), added("b", Cause::Watch)]);
        assert_eq!(p.lane_len(), 1);
        let keys: Vec<String> = drain(&mut p).into_iter().map(|(k, _, _)| k).collect();
        assert_eq!(keys, ["b", "a"]);
    }

    /// HS-2: an initial add merged away by a `Coalesce` queue is finished,
    /// as it will never be handled.
    #[test]
    fn an_initial_add_merged_away_is_finished() {
        let mut p = Pending::new(OverflowPolicy::Coalesce, 4);
        p.accept([
            added("a", Cause::Initial),
            Event::Deleted {
                key: "a".into(),
                object: crate::key::DeletedObject::Final(Arc::new(1)),
                cause: Cause::Watch,
            },
        ]);
        p.upstream_synced();
        assert!(p.has_synced());
        assert!(p.is_empty());
    }

    #[test]
    fn clear_drops_everything_pending() {
        let mut p = Pending::new(OverflowPolicy::Block, 1);
        assert!(p.replay(replay(&["r0"], 1)));
        p.accept([added("a", Cause::Watch), added("b", Cause::Watch)]);
        p.resync(updated("c", 1, Cause::Resync));
        p.clear();
        assert!(p.is_empty());
        assert_eq!(p.len(), 0);
        assert!(p.pop().is_none());
    }
}
