//! Resync sweeps (SI-10, SI-11): each subscriber due for a resync gets the
//! whole cache as `Resync` updates, a chunk at a time, at its own pace.
//!
//! - One sweep at a time makes progress ([`SWEEPS_AT_ONCE`]); the others wait
//!   their turn, oldest first. A sweep whose chunk is not taken within
//!   [`SWEEP_SLOT_MAX`] gives its place up and goes on beside the others,
//!   slowed only by its own subscriber, until it takes a chunk in time.
//! - Sweeps started together share one [`KeyList`]; those at the same
//!   position share one chunk, read from the cache once, as it is then.
//! - A sweep is never stopped, and a subscriber is never swept twice at once.
//! - No chunk is read while a batch is partly handed out ([`Sweeps::pause`]):
//!   the cache already holds the rest of the batch, and a resync read from
//!   it could reach a subscriber before the change it shows.
//!
//! Pure, time passed in: the owner sends each [`SweepChunk`], hands every
//! [`InFlight`] back to [`Sweeps::taken`] when its listener answers, and
//! calls [`Sweeps::expire`] at [`Sweeps::next_expiry`].

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::cache::CacheView;
use super::distribution::CHUNK;
use super::key_list::{KeyList, free_a_slice};
use crate::event::{Cause, Event};
use crate::key::ObjectKey;
use crate::subscriber::SubscriberId;

/// The time sweeps are scheduled in (paused in tests like tokio's).
pub(super) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Most sweeps making progress at once. Each keeps its listener and its
/// subscriber busy, and a real change waits for every busy task's turn at
/// each hop: the p99 of real changes during sweeps fell from a median 3.2×
/// its baseline (all at once) to 2.1× (BENCHMARKS.md, workload 5).
pub(super) const SWEEPS_AT_ONCE: usize = 1;

/// A sweep whose chunk is not taken within this long gives its place up:
/// a stalled subscriber holds the others' sweeps back by this much at most.
pub(super) const SWEEP_SLOT_MAX: Duration = Duration::from_millis(10);

/// One subscriber's sweep in progress.
struct Sweep<K> {
    id: SubscriberId,
    keys: KeyList<K>,
    /// Where its next chunk starts in `keys`.
    pos: usize,
    /// Its last chunk was not taken within [`SWEEP_SLOT_MAX`]: it holds no
    /// place, and goes whatever the places held.
    slow: bool,
}

impl<K> Sweep<K> {
    fn may_go(&self, places_held: usize) -> bool {
        self.slow || places_held < SWEEPS_AT_ONCE
    }
}

/// A sweep whose chunk is with its listener; back to [`Sweeps::taken`] once
/// the listener answers.
pub(super) struct InFlight<K> {
    sweep: Sweep<K>,
    /// The place it holds, if it holds one.
    place: Option<u64>,
    sent: Instant,
    /// The position after the chunk, and whether that is the end of the list.
    end: usize,
    done: bool,
}

impl<K> InFlight<K> {
    /// The subscriber the chunk is for.
    pub(super) fn subscriber(&self) -> SubscriberId {
        self.sweep.id
    }
}

/// The next chunk of resyncs, for every sweep in `to`.
pub(super) struct SweepChunk<K> {
    pub(super) events: Vec<Event<K>>,
    pub(super) to: Vec<InFlight<K>>,
}

/// The sweeps of one Indexer (see the module doc).
pub(super) struct Sweeps<K> {
    /// Sweeps with no chunk in flight, those in progress first. A sweep
    /// with a chunk in flight is in its [`InFlight`] until taken.
    idle: VecDeque<Sweep<K>>,
    /// Subscribers whose sweep is in progress (idle or in flight): they get
    /// the sync-only updates (SI-10), and are not swept again until done.
    syncing: BTreeSet<SubscriberId>,
    /// The places held, at most [`SWEEPS_AT_ONCE`], oldest first, each with
    /// when it is given back at the latest (so in that order too).
    places: VecDeque<(u64, Instant)>,
    /// The id of the next place taken.
    next_place: u64,
    /// Subscribers due again while their sweep was in progress: swept once
    /// more as soon as it ends (at most one pending each), so a resync is
    /// late under load, never skipped. Only ids in `syncing`, or in `again`.
    due_again: BTreeSet<SubscriberId>,
    /// Of those, the ones whose sweep ended: started at the next `next`.
    again: Vec<SubscriberId>,
    /// A batch is partly handed out: no chunk is read.
    paused: bool,
    /// Key lists no sweep uses any more, freed a slice per [`Sweeps::tidy`].
    released: Vec<Vec<ObjectKey>>,
}

impl<K> Default for Sweeps<K> {
    fn default() -> Self {
        Sweeps {
            idle: VecDeque::new(),
            syncing: BTreeSet::new(),
            due_again: BTreeSet::new(),
            again: Vec::new(),
            places: VecDeque::new(),
            next_place: 0,
            paused: false,
            released: Vec::new(),
        }
    }
}

impl<K> Sweeps<K> {
    /// Whether `id`'s sweep is in progress.
    pub(super) fn is_syncing(&self, id: SubscriberId) -> bool {
        self.syncing.contains(&id)
    }

    /// Queues a sweep of `cache` as it is now for each of `due` whose
    /// previous sweep is done; one still in progress is swept once more
    /// when it ends. Sweeps never pile up, however slow a subscriber or the
    /// Indexer, and no period is skipped.
    pub(super) fn start(
        &mut self,
        due: impl IntoIterator<Item = SubscriberId>,
        cache: &CacheView<K>,
    ) {
        let mut keys = None;
        for id in due {
            if self.syncing.contains(&id) {
                self.due_again.insert(id);
            } else if self.syncing.insert(id) {
                let keys = keys.get_or_insert_with(|| KeyList::of(cache)).clone();
                self.idle.push_back(Sweep {
                    id,
                    keys,
                    pos: 0,
                    slow: false,
                });
            }
        }
    }

    /// Forgets `id`'s sweep (its listener is gone); an idle one ends when
    /// it would next go.
    pub(super) fn forget(&mut self, id: SubscriberId) {
        self.syncing.remove(&id);
        self.due_again.remove(&id);
        self.again.retain(|a| *a != id);
        // Its idle sweep goes now: not listed on, nor read when it would go.
        if let Some(i) = self.idle.iter().position(|s| s.id == id)
            && let Some(sweep) = self.idle.remove(i)
            && let Some(keys) = sweep.keys.release().filter(|k| !k.is_empty())
        {
            self.released.push(keys);
        }
    }

    /// Pauses (or resumes) reading chunks, while a batch is partly handed out.
    pub(super) fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Bounded housekeeping for each step: lists one slice more of one key
    /// list in use (so each list soon releases the cache state it holds,
    /// whatever its sweeps' pace) and frees one slice of a released one.
    pub(super) fn tidy(&mut self) {
        self.idle.iter().any(|s| s.keys.advance());
        free_a_slice(&mut self.released);
    }

    /// The next chunk of the oldest idle sweep that may go, for it and every
    /// sweep at the same place that may go too, at `now`; sweeps of
    /// subscribers no longer `subscribed` end. `None` when paused or none
    /// may go. One chunk per call: the owner lets real work run in between.
    pub(super) fn next(
        &mut self,
        cache: &CacheView<K>,
        now: Instant,
        subscribed: impl Fn(SubscriberId) -> bool,
    ) -> Option<SweepChunk<K>> {
        if self.paused {
            return None;
        }
        if !self.again.is_empty() {
            let again = std::mem::take(&mut self.again);
            self.start(again.into_iter().filter(|id| subscribed(*id)), cache);
        }
        let mut held = self.places.len();
        let first = self.idle.iter().position(|s| s.may_go(held))?;
        let first = self.idle.remove(first)?;
        held += usize::from(!first.slow);
        let (keys, pos) = (first.keys.clone(), first.pos);
        let mut group = vec![first];
        let mut i = 0;
        while i < self.idle.len() {
            let s = &self.idle[i];
            if s.pos == pos && s.keys.same(&keys) && s.may_go(held) {
                held += usize::from(!s.slow);
                group.extend(self.idle.remove(i));
            } else {
                i += 1;
            }
        }
        let (events, end, done) = keys.chunk(pos, CHUNK, |chunk| {
            chunk
                .iter()
                .filter_map(|k| {
                    let o = cache.get(k)?;
                    Some(Event::Updated {
                        key: k.clone(),
                        old: o.clone().into(),
                        new: o,
                        cause: Cause::Resync,
                    })
                })
                .collect()
        });
        let mut to = Vec::with_capacity(group.len());
        for sweep in group {
            if !subscribed(sweep.id) {
                self.syncing.remove(&sweep.id);
                continue;
            }
            let place = (!sweep.slow).then(|| self.take_place(now));
            to.push(InFlight {
                sweep,
                place,
                sent: now,
                end,
                done,
            });
        }
        Some(SweepChunk { events, to })
    }

    /// `chunk` was taken at `now` (its listener answered); `subscribed`:
    /// whether its subscriber still is. The sweep goes on first among the
    /// idle ones, or ends (SI-10: no longer syncing).
    pub(super) fn taken(&mut self, chunk: InFlight<K>, now: Instant, subscribed: bool) {
        let InFlight {
            sweep,
            place,
            sent,
            end,
            done,
        } = chunk;
        if let Some(place) = place {
            self.places.retain(|(p, _)| *p != place);
        }
        if done || !subscribed {
            self.syncing.remove(&sweep.id);
            if self.due_again.remove(&sweep.id) && subscribed {
                self.again.push(sweep.id);
            }
            if let Some(keys) = sweep.keys.release().filter(|k| !k.is_empty()) {
                self.released.push(keys);
            }
        } else {
            self.idle.push_front(Sweep {
                pos: end,
                slow: now.saturating_duration_since(sent) >= SWEEP_SLOT_MAX,
                ..sweep
            });
        }
    }

    /// Gives back the places held past [`SWEEP_SLOT_MAX`] at `now`; true if
    /// any was, so a waiting sweep may now go.
    pub(super) fn expire(&mut self, now: Instant) -> bool {
        let before = self.places.len();
        while self.places.front().is_some_and(|&(_, until)| until <= now) {
            self.places.pop_front();
        }
        self.places.len() < before
    }

    /// When [`Sweeps::expire`] next has a place to give back.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.places.front().map(|&(_, until)| until)
    }

    /// Whether [`Sweeps::next`] would give a chunk now (or start a sweep
    /// due again).
    pub(super) fn ready(&self) -> bool {
        !self.paused
            && (!self.again.is_empty() || self.idle.iter().any(|s| s.may_go(self.places.len())))
    }

    fn take_place(&mut self, now: Instant) -> u64 {
        let place = self.next_place;
        self.next_place += 1;
        self.places.push_back((place, now + SWEEP_SLOT_MAX));
        place
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::cache::Cache;
    use crate::listener::RESYNC_HOLD_MAX;
    use k8s_openapi::api::core::v1::ConfigMap;

    const MS: Duration = Duration::from_millis(1);

    fn cache_of(n: usize) -> Cache<ConfigMap> {
        let mut cache = Cache::new();
        for i in 0..n {
            let obj = crate::testing::configmap(&format!("o{i:04}"), "1");
            cache.upsert(ObjectKey::of(obj.as_ref()).unwrap(), obj);
        }
        cache
    }

    fn ids<K>(chunk: &SweepChunk<K>) -> Vec<u64> {
        chunk.to.iter().map(|f| f.subscriber().0).collect()
    }

    /// Steps like the Indexer, every chunk taken at once at `now`, until no
    /// sweep may go; the subscribers of each chunk, in order.
    fn run(
        sweeps: &mut Sweeps<ConfigMap>,
        cache: &Cache<ConfigMap>,
        now: Instant,
    ) -> Vec<Vec<u64>> {
        let mut log = Vec::new();
        while let Some(chunk) = sweeps.next(cache, now, |_| true) {
            log.push(ids(&chunk));
            for f in chunk.to {
                sweeps.taken(f, now, true);
            }
        }
        log
    }

    /// A subscriber due again while its sweep runs (sweeps waited their
    /// turn) is swept once more right after, however often it came due:
    /// late, never skipped, never piled up.
    #[test]
    fn a_subscriber_due_during_its_sweep_is_swept_again_after_it() {
        let cache = cache_of(2 * CHUNK);
        let mut sweeps = Sweeps::default();
        let t0 = Instant::now();
        sweeps.start([SubscriberId(1)], &cache);
        let first = sweeps.next(&cache, t0, |_| true).unwrap();
        sweeps.start([SubscriberId(1)], &cache);
        sweeps.start([SubscriberId(1)], &cache);
        for f in first.to {
            sweeps.taken(f, t0, true);
        }
        assert_eq!(run(&mut sweeps, &cache, t0), vec![vec![1]; 3]);
        assert!(!sweeps.is_syncing(SubscriberId(1)) && !sweeps.ready());
        // Forgotten meanwhile: not swept again.
        sweeps.start([SubscriberId(2)], &cache);
        let first = sweeps.next(&cache, t0, |_| true).unwrap();
        sweeps.start([SubscriberId(2)], &cache);
        sweeps.forget(SubscriberId(2));
        for f in first.to {
            sweeps.taken(f, t0, false);
        }
        assert!(run(&mut sweeps, &cache, t0).is_empty());
    }

    /// Sweeps due together run one after the other, the first due first;
    /// the next starts only once the last chunk of the one before is taken.
    #[test]
    fn sweeps_due_together_run_one_at_a_time() {
        let cache = cache_of(4 * CHUNK);
        let mut sweeps = Sweeps::default();
        let t0 = Instant::now();
        sweeps.start([2, 1, 3].map(SubscriberId), &cache);
        let mut log = Vec::new();
        for _ in 0..3 {
            let mut last = None;
            while let Some(chunk) = sweeps.next(&cache, t0, |_| true) {
                assert_eq!(chunk.to.len(), 1, "one sweep at a time");
                let id = chunk.to[0].subscriber().0;
                log.push(id);
                let f = chunk.to.into_iter().next().unwrap();
                if f.done {
                    last = Some(f);
                    break;
                }
                sweeps.taken(f, t0, true);
            }
            let last = last.expect("a sweep's last chunk");
            assert!(
                sweeps.next(&cache, t0, |_| true).is_none(),
                "while it is out"
            );
            sweeps.taken(last, t0, true);
        }
        let want: Vec<u64> = [2, 1, 3].iter().flat_map(|&id| [id; 4]).collect();
        assert_eq!(log, want);
        assert!((1..=3).all(|id| !sweeps.is_syncing(SubscriberId(id))));
    }

    /// A stalled subscriber holds the others' sweeps back for
    /// `SWEEP_SLOT_MAX` once: the fast one's whole resync then ends before
    /// the stalled listener's hold (`RESYNC_HOLD_MAX`) on its first chunk.
    /// A slow sweep then goes beside the others, until it takes a chunk in
    /// time again.
    #[test]
    fn a_stalled_subscriber_slows_only_its_own_resyncs() {
        let n = 10 * CHUNK;
        let cache = cache_of(n);
        let mut sweeps = Sweeps::default();
        let t0 = Instant::now();
        // The stalled subscriber is due first: its sweep goes first.
        sweeps.start([1, 2].map(SubscriberId), &cache);
        let stalled = sweeps.next(&cache, t0, |_| true).unwrap();
        assert_eq!(ids(&stalled), [1]);
        assert!(sweeps.next(&cache, t0, |_| true).is_none() && !sweeps.ready());
        assert_eq!(sweeps.next_expiry(), Some(t0 + SWEEP_SLOT_MAX));
        assert!(!sweeps.expire(t0 + SWEEP_SLOT_MAX - MS));
        let t1 = t0 + SWEEP_SLOT_MAX;
        assert!(sweeps.expire(t1) && sweeps.ready());
        let fast = run(&mut sweeps, &cache, t1);
        assert_eq!(fast, vec![vec![2]; n / CHUNK], "the fast one's whole sweep");
        assert!(!sweeps.is_syncing(SubscriberId(2)));
        assert!(t1 - t0 < RESYNC_HOLD_MAX);
        // The stalled listener answers at last: its sweep is slow, and goes
        // on whatever the places held.
        let t2 = t0 + RESYNC_HOLD_MAX;
        sweeps.taken(stalled.to.into_iter().next().unwrap(), t2, true);
        sweeps.start([SubscriberId(3)], &cache);
        let slow = sweeps.next(&cache, t2, |_| true).unwrap();
        assert_eq!(ids(&slow), [1]);
        assert!(slow.to[0].place.is_none(), "a slow sweep holds no place");
        let other = sweeps.next(&cache, t2, |_| true).unwrap();
        assert_eq!(ids(&other), [3]);
        assert!(other.to[0].place.is_some());
        // Taken in time: no longer slow, it waits for a place again.
        sweeps.taken(slow.to.into_iter().next().unwrap(), t2 + MS, true);
        assert!(sweeps.next(&cache, t2 + MS, |_| true).is_none());
    }

    /// Sweeps of one key list at the same place share one chunk; only those
    /// not slow take a place.
    #[test]
    fn sweeps_at_the_same_place_share_one_chunk() {
        let cache = cache_of(3 * CHUNK);
        let mut sweeps = Sweeps::default();
        let t0 = Instant::now();
        sweeps.start([1, 2].map(SubscriberId), &cache);
        let one = sweeps.next(&cache, t0, |_| true).unwrap();
        assert!(sweeps.expire(t0 + SWEEP_SLOT_MAX));
        let two = sweeps.next(&cache, t0 + SWEEP_SLOT_MAX, |_| true).unwrap();
        assert_eq!((ids(&one), ids(&two)), (vec![1], vec![2]));
        sweeps.taken(one.to.into_iter().next().unwrap(), t0 + 20 * MS, true);
        sweeps.taken(two.to.into_iter().next().unwrap(), t0 + 15 * MS, true);
        let both = sweeps.next(&cache, t0 + 20 * MS, |_| true).unwrap();
        assert_eq!(ids(&both), [2, 1]);
        assert_eq!(both.events.len(), CHUNK);
        assert!(both.to[0].place.is_some() && both.to[1].place.is_none());
    }

    /// No chunk is read while a batch is partly handed out.
    #[test]
    fn a_paused_scheduler_reads_no_chunk() {
        let cache = cache_of(3);
        let mut sweeps = Sweeps::default();
        let now = Instant::now();
        sweeps.start([SubscriberId(1)], &cache);
        sweeps.pause(true);
        assert!(!sweeps.ready());
        assert!(sweeps.next(&cache, now, |_| true).is_none());
        sweeps.pause(false);
        assert!(sweeps.ready());
        assert_eq!(run(&mut sweeps, &cache, now), [[1]]);
    }

    /// SI-10: a subscriber is syncing from its sweep's start to its last
    /// chunk taken, and due again meanwhile it is not swept twice at once:
    /// once more after.
    #[test]
    fn si10_a_subscriber_is_syncing_until_its_sweep_is_done_and_never_swept_twice() {
        let cache = cache_of(CHUNK + 1);
        let mut sweeps = Sweeps::default();
        let now = Instant::now();
        let one = SubscriberId(1);
        sweeps.start([one], &cache);
        assert!(sweeps.is_syncing(one));
        let first = sweeps.next(&cache, now, |_| true).unwrap();
        sweeps.start([one], &cache);
        sweeps.taken(first.to.into_iter().next().unwrap(), now, true);
        assert!(sweeps.is_syncing(one));
        assert_eq!(
            run(&mut sweeps, &cache, now),
            [[1], [1], [1]],
            "the rest, then the sweep it was due again for"
        );
        assert!(!sweeps.is_syncing(one));
        sweeps.start([one], &cache);
        assert_eq!(run(&mut sweeps, &cache, now).len(), 2, "a new sweep");
    }

    /// A sweep ends when its subscriber is gone, idle or in flight.
    #[test]
    fn a_sweep_ends_when_its_subscriber_is_gone() {
        let cache = cache_of(2 * CHUNK);
        let mut sweeps = Sweeps::default();
        let now = Instant::now();
        sweeps.start([1, 2].map(SubscriberId), &cache);
        sweeps.forget(SubscriberId(1));
        // The forgotten idle sweep is gone at once: no chunk read for it.
        let two = sweeps
            .next(&cache, now, |id| id != SubscriberId(1))
            .unwrap();
        assert_eq!(ids(&two), [2]);
        sweeps.taken(two.to.into_iter().next().unwrap(), now, false);
        assert!(!sweeps.is_syncing(SubscriberId(2)));
        assert!(sweeps.next(&cache, now, |_| true).is_none(), "ended");
    }

    /// A chunk shows the cache as it is when the chunk is read: keys
    /// removed since the sweep started are skipped, updates show.
    #[test]
    fn a_chunk_reads_the_cache_as_it_is_then() {
        let mut cache = cache_of(3);
        let mut sweeps = Sweeps::default();
        sweeps.start([SubscriberId(1)], &cache);
        let key = |i: usize| {
            ObjectKey::of(crate::testing::configmap(&format!("o{i:04}"), "1").as_ref()).unwrap()
        };
        cache.remove(&key(1));
        cache.upsert(key(2), crate::testing::configmap("o0002", "2"));
        let chunk = sweeps.next(&cache, Instant::now(), |_| true).unwrap();
        let mut got: Vec<_> = chunk
            .events
            .iter()
            .map(|e| match e {
                Event::Updated {
                    key,
                    old,
                    new,
                    cause,
                } => {
                    assert!(old.is(new));
                    assert_eq!(*cause, Cause::Resync);
                    (
                        key.to_string(),
                        new.metadata.resource_version.clone().unwrap(),
                    )
                }
                other => panic!("not a resync: {other:?}"),
            })
            .collect();
        got.sort();
        let want =
            [("ns/o0000", "1"), ("ns/o0002", "2")].map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(got, want);
        assert!(chunk.to[0].done);
    }

    /// A finished sweep's key list is freed a slice per step.
    #[test]
    fn a_finished_sweeps_keys_are_freed_a_slice_per_step() {
        let cache = cache_of(2 * CHUNK + 1);
        let mut sweeps = Sweeps::default();
        sweeps.start([SubscriberId(1)], &cache);
        assert_eq!(run(&mut sweeps, &cache, Instant::now()).len(), 3);
        assert_eq!(
            sweeps.released.iter().map(Vec::len).sum::<usize>(),
            2 * CHUNK + 1
        );
        for _ in 0..3 {
            sweeps.tidy();
        }
        assert!(sweeps.released.is_empty());
    }
}
