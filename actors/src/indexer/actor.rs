//! The Indexer actor: applies batches of deltas to the [`Cache`] (C-4),
//! publishes the new snapshot, turns the deltas into [`Event`]s with their
//! [`Cause`], and distributes them to the listeners (SI-8, SI-9).
//!
//! - A batch is answered (acknowledged to the DeltaFIFO) only when every
//!   listener has accepted its events: sent on credit (they fit in the room
//!   the listener published, [`DeliveryCredit`](crate::listener::DeliveryCredit)), or answered once queued. A
//!   `Block` listener that is full holds the pipeline back; a `Coalesce`
//!   listener never does.
//! - Updates whose resourceVersion did not change (a relist of an unchanged
//!   object) go only to the subscribers that are due for resync, i.e. whose
//!   resync sweep is in progress (client-go: flagged at the last check,
//!   SI-10), so a relist is no update storm.
//! - A subscriber added at any time first receives the current cache as
//!   `Initial` adds (SI-5): its listener is handed the cache state whole
//!   ([`Replay`], O(1)) and reads it as its subscriber takes it, so deltas
//!   never wait for a late subscriber's replay. Its sync state follows HS-2.
//! - A resync replays the current cache, in chunks, to the subscribers that
//!   are due, and only to them. Chunks go to the listeners' resync lanes
//!   ([`DeliverResync`]) beside the batches, one chunk in flight per subscriber.
//!   One sweep at a time makes progress (`SWEEPS_AT_ONCE`), at the pace its
//!   subscriber takes it; the others wait their turn, oldest first. A
//!   stalled subscriber holds that turn for `SWEEP_SLOT_MAX` at most, then
//!   its sweep goes on beside the others, slowed only by its own subscriber
//!   (up to [`RESYNC_HOLD_MAX`](crate::listener::RESYNC_HOLD_MAX) per chunk).
//!   A sweep never puts a real change behind a queued resync, and is never
//!   stopped. Its keys are listed a slice at a time, and each step runs real
//!   work first and builds one sweep chunk at most. It pauses only
//!   while a batch is partly handed out (a full `Block` listener holds the
//!   rest, which holds every listener anyway): a resync read from the cache
//!   then could reach a subscriber before the change it shows.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use futures::channel::oneshot;
use kube::Resource;

use super::cache::{Cache, CacheView, LazyKeys};
use super::messages::{FifoSynced, ListenerStopped, Process, ResyncDue, Subscribe, Unsubscribe};
use crate::answer::Answer;
use crate::delta::{Delta, Popped};
use crate::event::{Cause, Event};
use crate::key::ObjectKey;
use crate::listener::{
    CacheSynced, CreditLine, Deliver, DeliverResync, Listener, ListenerGone, Replay,
};
use crate::subscriber::SubscriberId;

/// The events one listener receives from one step of work.
type Delivery<K> = (SubscriberId, Vec<Event<K>>);

/// A subscribed listener: its address and the credit its deliveries go on.
struct Outlet<K: Send + Sync + 'static> {
    addr: Addr<Listener<K>>,
    credit: CreditLine,
}

/// Most events per `Deliver` or `DeliverResync`: resync sweeps and large
/// batches (the initial list) go to the listeners in chunks of this many,
/// so a full `Block` listener parks at most one chunk.
const CHUNK: usize = 256;

/// Most sweeps making progress at once. Each sweep in progress keeps its
/// listener and its subscriber busy, and a real change waits for every busy
/// task's turn at each hop. With all sweeps at once, the p99 of real
/// changes during sweeps was 2.7–6.5× its baseline over five runs (median
/// 3.2×); with one at a time, median 2.1× over three (BENCHMARKS.md,
/// workload 5). The others wait their turn, oldest first.
const SWEEPS_AT_ONCE: usize = 1;

/// A sweep whose chunk is not taken within this long stops holding its
/// place among the [`SWEEPS_AT_ONCE`], and goes on at its subscriber's pace
/// beside them until it takes a chunk in time again: a stalled subscriber
/// holds the others' sweeps back by this much at most.
const SWEEP_SLOT_MAX: std::time::Duration = std::time::Duration::from_millis(10);

/// Live counters of the Indexer.
#[derive(Debug, Default)]
pub struct IndexerStats {
    /// Objects in the cache.
    pub objects: AtomicUsize,
    /// Adds applied.
    pub added: AtomicU64,
    /// Updates applied (resyncs excluded).
    pub updated: AtomicU64,
    /// Deletes applied.
    pub deleted: AtomicU64,
    /// Tombstone deletes (final state unknown).
    pub tombstones: AtomicU64,
    /// Index functions that failed.
    pub index_errors: AtomicU64,
    /// Live listeners.
    pub listeners: AtomicUsize,
    /// Listeners removed because their subscriber was gone.
    pub listeners_lost: AtomicU64,
}

/// Keys listed from the lazy list per slice (and freed per slice once a
/// list is done with): about 40 µs of work at a time.
const KEY_SLICE: usize = CHUNK;

/// The keys of the cache at the moment a sweep started, listed a
/// slice at a time as chunks reach them, and one slice ahead at every step
/// (so the cache state it drains is released soon). Listing 100k keys at
/// once held the Indexer's thread for 7–14 ms at every sweep start, and real
/// events waited behind it: the p99 of deliveries during sweeps was 34× the
/// baseline (BENCHMARKS.md, workload 5).
struct KeyList<K>(Arc<Mutex<KeyListState<K>>>);

struct KeyListState<K> {
    keys: Vec<ObjectKey>,
    /// What is not listed yet; `None` once every key is.
    rest: Option<LazyKeys<K>>,
}

impl<K> Clone for KeyList<K> {
    fn clone(&self) -> Self {
        KeyList(self.0.clone())
    }
}

impl<K> KeyList<K> {
    fn of(cache: &CacheView<K>) -> Self {
        KeyList(Arc::new(Mutex::new(KeyListState {
            keys: Vec::with_capacity(cache.len()),
            rest: Some(cache.keys_lazily()),
        })))
    }

    /// The listed keys, if this was the last handle on the list, to be
    /// freed a slice at a time (freeing 100k keys at once takes ~1 ms).
    fn release(self) -> Option<Vec<ObjectKey>> {
        Arc::try_unwrap(self.0)
            .ok()
            .map(|state| state.into_inner().unwrap_or_else(|p| p.into_inner()).keys)
    }

    fn same(&self, other: &KeyList<K>) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, KeyListState<K>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lists one more slice; false when every key was listed already.
    fn advance(&self) -> bool {
        let mut state = self.state();
        if state.rest.is_none() {
            return false;
        }
        let upto = state.keys.len() + KEY_SLICE;
        state.fill(upto);
        true
    }

    /// `f` of the keys `[pos, pos + n)` (fewer at the end), the position
    /// after them, and whether that is the end of the list.
    fn chunk<R>(
        &self,
        pos: usize,
        n: usize,
        f: impl FnOnce(&[ObjectKey]) -> R,
    ) -> (R, usize, bool) {
        let mut state = self.state();
        // One more than asked for: whether anything follows is then known.
        state.fill(pos + n + 1);
        let end = (pos + n).min(state.keys.len());
        let out = f(&state.keys[pos.min(end)..end]);
        (out, end, end >= state.keys.len() && state.rest.is_none())
    }
}

impl<K> KeyListState<K> {
    fn fill(&mut self, upto: usize) {
        while self.keys.len() < upto {
            let Some(rest) = self.rest.as_mut() else {
                return;
            };
            let before = self.keys.len();
            self.keys.extend(rest.by_ref().take(KEY_SLICE));
            if self.keys.len() - before < KEY_SLICE {
                self.rest = None;
            }
        }
    }
}

/// One subscriber's resync sweep of the cache (SI-11), in progress, at its
/// subscriber's pace once its turn came ([`SWEEPS_AT_ONCE`]). Sweeps
/// started together share their key list, and those still at the same
/// position share the chunk they are sent.
struct Sweep<K> {
    id: SubscriberId,
    keys: KeyList<K>,
    pos: usize,
    /// Its last chunk was not taken within [`SWEEP_SLOT_MAX`].
    slow: bool,
}

/// The Indexer actor.
pub struct Indexer<K: Resource + Send + Sync + 'static> {
    cache: Cache<K>,
    listeners: BTreeMap<SubscriberId, Outlet<K>>,
    syncing: BTreeSet<SubscriberId>,
    upstream_synced: bool,
    busy: bool,
    batches: VecDeque<(Vec<Popped<K>>, oneshot::Sender<()>)>,
    /// Sweeps with no chunk in flight (one in flight is taken out until answered).
    sweeps: VecDeque<Sweep<K>>,
    /// A batch's events are only partly handed out (a full `Block` listener
    /// holds the next chunk). Sweeps wait: the cache already holds the rest,
    /// and a resync built from it would reach a subscriber before the change.
    handing_out: bool,
    /// Key lists no sweep uses any more, freed a slice per step.
    released: Vec<Vec<ObjectKey>>,
    /// A step is scheduled after a yield (sweeps were left ready).
    sweeps_resuming: bool,
    /// Sweeps holding a place among the [`SWEEPS_AT_ONCE`].
    sweeps_at_once: usize,
    /// The places held, oldest first, each with when it is given back at
    /// the latest (some may be given back already).
    places: VecDeque<(tokio::time::Instant, Rc<Cell<bool>>)>,
    /// A timer for `places` is pending. One at most: the context polls every
    /// pending timer at each wake-up.
    place_timer: bool,
    stats: Arc<IndexerStats>,
    span: tracing::Span,
}

impl<K: Resource + Send + Sync + 'static> Indexer<K> {
    /// An Indexer owning `cache` (indexes already added).
    pub fn new(cache: Cache<K>, stats: Arc<IndexerStats>) -> Self {
        Indexer {
            cache,
            listeners: BTreeMap::new(),
            syncing: BTreeSet::new(),
            upstream_synced: false,
            busy: false,
            batches: VecDeque::new(),
            sweeps: VecDeque::new(),
            handing_out: false,
            released: Vec::new(),
            sweeps_resuming: false,
            sweeps_at_once: 0,
            places: VecDeque::new(),
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

    /// Applies one popped item's deltas, oldest first (C-4); returns the events
    /// and, for each, whether it is a sync-only update (unchanged resourceVersion).
    fn apply(&mut self, popped: Popped<K>, out: &mut Vec<(Event<K>, bool)>) {
        let Popped {
            key,
            deltas,
            is_in_initial_list,
            ..
        } = popped;
        for delta in deltas {
            let (obj, watch_cause) = match delta {
                Delta::Deleted(object) => {
                    self.cache.remove(&key);
                    let cause = if object.is_final_state_unknown() {
                        self.stats.tombstones.fetch_add(1, Ordering::Relaxed);
                        Cause::Relist
                    } else {
                        Cause::Watch
                    };
                    self.stats.deleted.fetch_add(1, Ordering::Relaxed);
                    out.push((
                        Event::Deleted {
                            key: key.clone(),
                            object,
                            cause,
                        },
                        false,
                    ));
                    continue;
                }
                Delta::Added(o) | Delta::Updated(o) => (o, Cause::Watch),
                Delta::Replaced(o) => (o, Cause::Relist),
                Delta::Sync(o) => (o, Cause::Resync),
            };
            let upserted = self.cache.upsert(key.clone(), obj.clone());
            if !upserted.index_errors.is_empty() {
                self.stats
                    .index_errors
                    .fetch_add(upserted.index_errors.len() as u64, Ordering::Relaxed);
                for e in &upserted.index_errors {
                    tracing::warn!(%e, "index function failed; object cached without that index value");
                }
            }
            match upserted.previous {
                Some(old) => {
                    let unchanged = same_version(old.as_ref(), obj.as_ref());
                    // A changed object is a real change, whatever the delta
                    // (a `Sync` of a changed object counts as a relist): only
                    // unchanged ones may take the resync lane.
                    let cause = match watch_cause {
                        Cause::Watch => Cause::Watch,
                        _ if unchanged => Cause::Resync,
                        Cause::Resync => Cause::Relist,
                        other => other,
                    };
                    if !unchanged {
                        self.stats.updated.fetch_add(1, Ordering::Relaxed);
                    }
                    out.push((
                        Event::Updated {
                            key: key.clone(),
                            old,
                            new: obj,
                            cause,
                        },
                        unchanged,
                    ));
                }
                None => {
                    let cause = if is_in_initial_list {
                        Cause::Initial
                    } else if watch_cause == Cause::Watch {
                        Cause::Watch
                    } else {
                        Cause::Relist
                    };
                    self.stats.added.fetch_add(1, Ordering::Relaxed);
                    out.push((
                        Event::Added {
                            key: key.clone(),
                            object: obj,
                            cause,
                        },
                        false,
                    ));
                }
            }
        }
    }

    /// Sends each listener its events and runs `then` once all accepted
    /// them: at once when every listener had the credit to take them
    /// unanswered, else once the answered ones answered.
    fn distribute(
        &mut self,
        per_listener: Vec<Delivery<K>>,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Self, &mut Context<Self>) + 'static,
    ) {
        let mut answered = Vec::new();
        let mut gone = Vec::new();
        for (id, evs) in per_listener {
            let Some(outlet) = self.listeners.get_mut(&id) else {
                continue;
            };
            if evs.is_empty() {
                continue;
            }
            if !outlet.addr.connected() {
                gone.push(id);
            } else if outlet.credit.try_unanswered(evs.len()) {
                outlet.addr.do_send(Deliver(evs));
            } else {
                outlet.credit.sent(evs.len());
                answered.push((id, outlet.addr.clone(), Deliver(evs)));
            }
        }
        for id in gone {
            self.lose(id);
        }
        if answered.is_empty() {
            then(self, ctx);
            return;
        }
        self.busy = true;
        send_each(answered)
            .into_actor(self)
            .map(move |gone, act, ctx| {
                for id in gone {
                    act.lose(id);
                }
                act.busy = false;
                then(act, ctx);
                act.step(ctx);
            })
            .spawn(ctx);
    }

    fn lose(&mut self, id: SubscriberId) {
        if self.listeners.remove(&id).is_some() {
            tracing::warn!(subscriber = %id, "listener is gone; removed");
            self.stats.listeners_lost.fetch_add(1, Ordering::Relaxed);
        }
        self.syncing.remove(&id);
        self.stats
            .listeners
            .store(self.listeners.len(), Ordering::Relaxed);
    }

    /// Runs the next batch unless one is waiting for listeners.
    /// Resync sweeps run beside them, a chunk at a time, into the listeners'
    /// resync lanes: a sweep never holds back a real change.
    fn step(&mut self, ctx: &mut Context<Self>) {
        self.list_ahead();
        self.free_a_slice();
        // Real work first: a batch applied now also reaches each listener
        // before any resync chunk read from the cache after it. Batches its
        // listeners took on credit leave the Indexer free for the next one.
        while !self.busy
            && let Some((batch, reply)) = self.batches.pop_front()
        {
            self.run_batch(batch, reply, ctx);
        }
        self.step_sweep(ctx);
    }

    /// Steps again once the other tasks on this thread had a turn.
    fn resume_sweeps(&mut self, ctx: &mut Context<Self>) {
        if self.sweeps_resuming {
            return;
        }
        self.sweeps_resuming = true;
        tokio::task::yield_now()
            .into_actor(self)
            .map(|_, act, ctx| {
                act.sweeps_resuming = false;
                act.step(ctx);
            })
            .spawn(ctx);
    }

    fn run_batch(
        &mut self,
        batch: Vec<Popped<K>>,
        reply: oneshot::Sender<()>,
        ctx: &mut Context<Self>,
    ) {
        let mut events = Vec::with_capacity(batch.len());
        for popped in batch {
            self.apply(popped, &mut events);
        }
        self.cache.publish();
        self.stats
            .objects
            .store(self.cache.len(), Ordering::Relaxed);
        // Who receives this batch is fixed when it is applied.
        let targets = self
            .listeners
            .keys()
            .map(|id| (*id, self.syncing.contains(id)))
            .collect();
        self.deliver_chunks(events, targets, 0, reply, ctx);
    }

    /// Hands a batch's events to its listeners [`CHUNK`] at a time, each
    /// chunk once the previous one was accepted, then answers the DeltaFIFO.
    fn deliver_chunks(
        &mut self,
        events: Vec<(Event<K>, bool)>,
        targets: Vec<(SubscriberId, bool)>,
        pos: usize,
        reply: oneshot::Sender<()>,
        ctx: &mut Context<Self>,
    ) {
        let end = (pos + CHUNK).min(events.len());
        self.handing_out = end < events.len();
        let per_listener = targets
            .iter()
            .filter(|(id, _)| self.listeners.contains_key(id))
            .map(|(id, syncing)| {
                let evs = events[pos..end]
                    .iter()
                    .filter(|(_, sync_only)| !sync_only || *syncing)
                    .map(|(e, _)| e.clone())
                    .collect();
                (*id, evs)
            })
            .collect();
        self.distribute(per_listener, ctx, move |act, ctx| {
            if end < events.len() {
                act.deliver_chunks(events, targets, end, reply, ctx);
            } else {
                let _ = reply.send(());
            }
        });
    }

    /// The events of the next [`CHUNK`] keys of `keys` from `pos`, from the
    /// cache as it is now (keys no longer cached are skipped), the position
    /// after them, and whether that is the end of the list.
    fn read_chunk(
        &self,
        keys: &KeyList<K>,
        pos: usize,
        event: impl Fn(ObjectKey, Arc<K>) -> Event<K>,
    ) -> (Vec<Event<K>>, usize, bool) {
        keys.chunk(pos, CHUNK, |chunk| {
            chunk
                .iter()
                .filter_map(|k| self.cache.get(k).map(|o| event(k.clone(), o)))
                .collect()
        })
    }

    /// Frees one slice of a key list no longer in use.
    fn free_a_slice(&mut self) {
        if let Some(keys) = self.released.last_mut() {
            keys.truncate(keys.len().saturating_sub(KEY_SLICE));
            if keys.is_empty() {
                self.released.pop();
            }
        }
    }

    /// Takes a finished sweep's key list, if it was the last user, to free
    /// it a slice per step.
    fn release(&mut self, keys: KeyList<K>) {
        if let Some(keys) = keys.release().filter(|k| !k.is_empty()) {
            self.released.push(keys);
        }
    }

    /// Lists one slice more of one key list in use that is not complete,
    /// so each finishes soon whatever the pace of its sweeps and releases
    /// its cache state, at a bounded cost per step.
    fn list_ahead(&mut self) {
        self.sweeps.iter().any(|s| s.keys.advance());
    }

    /// Sends the next chunk of the oldest sweep with none in flight that may
    /// go ([`SWEEPS_AT_ONCE`]; slow ones always may), unless a batch is
    /// partly handed out. Sweeps at the same place in the same key list get
    /// one chunk, read from the cache once.
    fn step_sweep(&mut self, ctx: &mut Context<Self>) {
        if self.handing_out {
            return;
        }
        let mut at_once = self.sweeps_at_once;
        let may_go = |s: &Sweep<K>, at_once: usize| s.slow || at_once < SWEEPS_AT_ONCE;
        // One chunk (for every sweep at its place) per step, then a yield:
        // a chunk reads 256 objects, tens of µs, and a real event arriving
        // meanwhile must not wait for every sweep's chunk at once.
        let first = self
            .sweeps
            .iter()
            .position(|s| may_go(s, at_once))
            .and_then(|i| self.sweeps.remove(i));
        if let Some(first) = first {
            at_once += usize::from(!first.slow);
            let (keys, pos) = (first.keys.clone(), first.pos);
            let mut group = vec![first];
            let mut i = 0;
            while i < self.sweeps.len() {
                let s = &self.sweeps[i];
                if s.pos == pos && s.keys.same(&keys) && may_go(s, at_once) {
                    at_once += usize::from(!s.slow);
                    group.extend(self.sweeps.remove(i));
                } else {
                    i += 1;
                }
            }
            let (evs, end, done) = self.read_chunk(&keys, pos, |key, o| Event::Updated {
                key,
                old: o.clone(),
                new: o,
                cause: Cause::Resync,
            });
            for sweep in group {
                let Some(addr) = self.listeners.get(&sweep.id).map(|o| o.addr.clone()) else {
                    self.syncing.remove(&sweep.id);
                    continue;
                };
                let place = (!sweep.slow).then(|| self.take_place(ctx));
                let sent = tokio::time::Instant::now();
                send_each([(sweep.id, addr, DeliverResync(evs.clone()))])
                    .into_actor(self)
                    .map(move |gone, act, ctx| {
                        if let Some(place) = place {
                            act.give_back(&place);
                        }
                        for id in gone {
                            act.lose(id);
                        }
                        if done || !act.listeners.contains_key(&sweep.id) {
                            // Done (SI-10): no longer syncing.
                            act.syncing.remove(&sweep.id);
                            act.release(sweep.keys);
                        } else {
                            // At the front: the sweeps in progress go on first.
                            act.sweeps.push_front(Sweep {
                                pos: end,
                                slow: sent.elapsed() >= SWEEP_SLOT_MAX,
                                ..sweep
                            });
                        }
                        act.step(ctx);
                    })
                    .spawn(ctx);
            }
        }
        if self.sweeps.iter().any(|s| may_go(s, self.sweeps_at_once)) {
            self.resume_sweeps(ctx);
        }
    }

    /// Takes a place among the [`SWEEPS_AT_ONCE`] for one chunk; it is given
    /// back when the chunk is taken or after [`SWEEP_SLOT_MAX`].
    fn take_place(&mut self, ctx: &mut Context<Self>) -> Rc<Cell<bool>> {
        self.sweeps_at_once += 1;
        let place = Rc::new(Cell::new(true));
        let until = tokio::time::Instant::now() + SWEEP_SLOT_MAX;
        self.places.push_back((until, Rc::clone(&place)));
        if !self.place_timer {
            self.arm_place_timer(SWEEP_SLOT_MAX, ctx);
        }
        place
    }

    /// Gives back the places held past [`SWEEP_SLOT_MAX`], waking in `after`.
    fn arm_place_timer(&mut self, after: std::time::Duration, ctx: &mut Context<Self>) {
        self.place_timer = true;
        ctx.run_later(after, |act, ctx| {
            act.place_timer = false;
            let now = tokio::time::Instant::now();
            let mut freed = false;
            while let Some((until, place)) = act.places.front() {
                if !place.get() {
                    act.places.pop_front();
                } else if *until <= now {
                    let place = Rc::clone(place);
                    act.places.pop_front();
                    freed |= act.give_back(&place);
                } else {
                    let after = *until - now;
                    act.arm_place_timer(after, ctx);
                    break;
                }
            }
            if freed {
                act.step(ctx);
            }
        });
    }

    /// Gives a place back, once; true if it was still held.
    fn give_back(&mut self, place: &Cell<bool>) -> bool {
        let held = place.replace(false);
        if held {
            self.sweeps_at_once -= 1;
        }
        held
    }

    /// Queues a sweep of the whole cache for each of these subscribers (SI-10).
    fn start_sweep(&mut self, ids: Vec<SubscriberId>) {
        let keys = KeyList::of(&self.cache);
        for id in ids {
            self.syncing.insert(id);
            self.sweeps.push_back(Sweep {
                id,
                keys: keys.clone(),
                pos: 0,
                slow: false,
            });
        }
    }
}

/// Sends each listener its message, all at once; resolves, once every one
/// answered, to the ids whose listener is gone.
fn send_each<K, M>(
    sends: impl IntoIterator<Item = (SubscriberId, Addr<Listener<K>>, M)>,
) -> impl std::future::Future<Output = Vec<SubscriberId>> + 'static
where
    K: Send + Sync + 'static,
    M: Message<Result = Result<(), ListenerGone>> + Send + 'static,
    Listener<K>: Handler<M>,
    <Listener<K> as Actor>::Context: actix::dev::ToEnvelope<Listener<K>, M>,
{
    let answers = sends.into_iter().map(|(id, addr, msg)| {
        let answer = addr.send(msg);
        async move { (id, matches!(answer.await, Ok(Ok(())))) }
    });
    futures::FutureExt::map(futures::future::join_all(answers), |answers| {
        answers
            .into_iter()
            .filter_map(|(id, ok)| (!ok).then_some(id))
            .collect()
    })
}

fn same_version<K: Resource>(a: &K, b: &K) -> bool {
    match (&a.meta().resource_version, &b.meta().resource_version) {
        (Some(x), Some(y)) => !x.is_empty() && x == y,
        _ => false,
    }
}

impl<K: Resource + Send + Sync + 'static> Actor for Indexer<K> {
    type Context = Context<Self>;
}

impl<K: Resource + Send + Sync + 'static> Handler<Process<K>> for Indexer<K> {
    type Result = Answer<()>;

    fn handle(&mut self, Process(batch): Process<K>, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let (tx, rx) = oneshot::channel();
        self.batches.push_back((batch, tx));
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
        for outlet in self.listeners.values() {
            outlet.addr.do_send(CacheSynced);
        }
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Subscribe<K>> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, msg: Subscribe<K>, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // The cache as of now: every batch applied so far is in it, and the
        // listener gets every later one (those being handed out excepted:
        // their targets were fixed before).
        if !self.cache.is_empty() {
            msg.listener.do_send(Replay {
                len: self.cache.len(),
                objects: Box::new(self.cache.entries_lazily()),
            });
        }
        if self.upstream_synced {
            msg.listener.do_send(CacheSynced);
        }
        self.listeners.insert(
            msg.id,
            Outlet {
                addr: msg.listener,
                credit: CreditLine::new(msg.credit),
            },
        );
        self.stats
            .listeners
            .store(self.listeners.len(), Ordering::Relaxed);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<Unsubscribe> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, Unsubscribe(id): Unsubscribe, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.listeners.remove(&id);
        self.syncing.remove(&id);
        self.stats
            .listeners
            .store(self.listeners.len(), Ordering::Relaxed);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<ListenerStopped> for Indexer<K> {
    type Result = ();

    fn handle(&mut self, ListenerStopped(id): ListenerStopped, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.lose(id);
    }
}

impl<K: Resource + Send + Sync + 'static> Handler<ResyncDue> for Indexer<K> {
    type Result = MessageResult<ResyncDue>;

    fn handle(&mut self, ResyncDue(due): ResyncDue, ctx: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        let (known, gone): (Vec<_>, Vec<_>) = due
            .into_iter()
            .partition(|id| self.listeners.contains_key(id));
        // A subscriber whose previous sweep is still running is not swept twice:
        // sweeps never pile up, however slow a subscriber or the Indexer is.
        // One still taking its replay is swept now: its lane comes after the
        // replay, so it never gets the resync of an object before its add.
        let ids: Vec<_> = known
            .into_iter()
            .filter(|id| !self.syncing.contains(id))
            .collect();
        if !ids.is_empty() {
            self.start_sweep(ids);
        }
        self.step(ctx);
        MessageResult(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta_fifo::{DeltaQueue, DeltaQueueOptions};
    use crate::listener::{ListenerOptions, ListenerStats, OverflowPolicy};
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Mutex;
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
        cm_at(name, "1")
    }

    fn cm_at(name: &str, rv: &str) -> Arc<ConfigMap> {
        crate::testing::configmap(name, rv)
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
        let processed = indexer.send(Process(queue.pop_batch(300)));
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
            let processed = indexer.send(Process(queue.pop_batch(1)));
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

    /// A `Sync` delta (DeltaFIFO without `emit_replaced`) of a changed object
    /// is a real change (`Relist`), never a resync that the resync lane may
    /// merge away; an unchanged one is a resync, for due subscribers only.
    #[actix::test]
    async fn a_sync_delta_of_a_changed_object_is_a_relist_change() {
        let indexer = Indexer::new(Cache::new(), Arc::new(IndexerStats::default())).start();
        let (listener, seen) = listener(16, watch::channel(true).1);
        subscribe(&indexer, [(1, listener)]).await;
        let mut queue = DeltaQueue::new(DeltaQueueOptions {
            emit_replaced: false,
        });
        let known = Cache::new();
        queue.replace(vec![cm("a"), cm("b")], &known).unwrap();
        indexer.send(Process(queue.pop_batch(10))).await.unwrap();
        queue
            .replace(vec![cm_at("a", "2"), cm("b")], &known)
            .unwrap();
        indexer.send(Process(queue.pop_batch(10))).await.unwrap();
        until("the change of a", || seen.lock().unwrap().len() == 3).await;
        // b is unchanged: a resync, only for subscribers due for one (none).
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen[2], ("ns/a".to_string(), Cause::Relist), "{seen:?}");
        assert_eq!(seen.len(), 3, "{seen:?}");
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
            indexer.send(Process(queue.pop_batch(1))),
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

    /// A key list hands out every key of the cache state it was taken
    /// from, once, chunk by chunk, says when it is at its end, and is not
    /// changed by later writes to the cache.
    #[test]
    fn a_key_list_lists_its_cache_state_chunk_by_chunk() {
        let mut cache = Cache::new();
        let n = 3 * KEY_SLICE + 7;
        for i in 0..n {
            let obj = cm(&format!("o{i:05}"));
            cache.upsert(ObjectKey::of(obj.as_ref()).unwrap(), obj);
        }
        let list = KeyList::of(&cache);
        // Written after the list was taken: not in it.
        let late = cm("late");
        cache.upsert(ObjectKey::of(late.as_ref()).unwrap(), late);
        assert!(list.state().keys.is_empty(), "nothing is listed up front");
        assert!(list.advance());
        assert_eq!(list.state().keys.len(), KEY_SLICE, "one slice ahead");
        let shared = list.clone();
        assert!(shared.same(&list) && !KeyList::of(&cache).same(&list));
        let mut seen = BTreeSet::new();
        let mut pos = 0;
        loop {
            let (keys, end, done) = shared.chunk(pos, CHUNK, |c| c.to_vec());
            assert!(keys.len() <= CHUNK);
            assert_eq!(end, pos + keys.len());
            for k in keys {
                assert!(seen.insert(k.to_string()), "{k} listed twice");
            }
            pos = end;
            if done {
                break;
            }
        }
        assert_eq!(seen.len(), n);
        assert!(!seen.contains("ns/late"));
        assert!(list.state().rest.is_none(), "the cache state is released");
        assert!(!list.advance(), "nothing left to list");
        let (rest, end, done) = list.chunk(pos, CHUNK, |c| c.len());
        assert_eq!((rest, end, done), (0, n, true));
        // Only the last handle gets the keys, to free them a slice at a time.
        assert!(shared.release().is_none());
        assert_eq!(list.release().map(|k| k.len()), Some(n));
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
    /// A stalled sweep now holds the others back for `SWEEP_SLOT_MAX` once,
    /// then goes on beside them: on a paused clock, the fast subscriber's
    /// whole resync ends before a single hold expired.
    #[actix::test]
    async fn a_stalled_subscriber_slows_only_its_own_resyncs() {
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

    /// Records which subscriber handled each resync, in one shared log.
    struct Tagged {
        tag: u64,
        log: Arc<Mutex<Vec<u64>>>,
    }

    impl Actor for Tagged {
        type Context = Context<Self>;
    }

    impl Handler<Event<ConfigMap>> for Tagged {
        type Result = ();

        fn handle(&mut self, e: Event<ConfigMap>, _: &mut Context<Self>) {
            if e.is_resync() {
                self.log.lock().unwrap().push(self.tag);
            }
        }
    }

    /// Sweeps due together run one after the other, the first due first:
    /// one subscriber pair at a time competes with real changes for the thread.
    #[actix::test]
    async fn sweeps_due_together_run_one_at_a_time() {
        let n = 4 * CHUNK;
        let mut cache = Cache::new();
        for i in 0..n {
            let obj = cm(&format!("o{i:04}"));
            cache.upsert(ObjectKey::of(obj.as_ref()).unwrap(), obj);
        }
        let indexer = Indexer::new(cache, Arc::new(IndexerStats::default())).start();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stats: Vec<_> = (0..3).map(|_| Arc::new(ListenerStats::default())).collect();
        let listeners = [1, 2, 3].map(|tag| {
            let sink = Tagged {
                tag,
                log: log.clone(),
            }
            .start();
            let listener = Listener::new(
                SubscriberId(tag),
                sink.recipient(),
                ListenerOptions {
                    policy: OverflowPolicy::Block,
                    capacity: 2 * n,
                },
                watch::channel(false).0,
                stats[tag as usize - 1].clone(),
            );
            (tag, listener)
        });
        subscribe(&indexer, listeners).await;
        until("the replays", || {
            stats
                .iter()
                .all(|s| s.delivered.load(Ordering::Relaxed) == n as u64)
        })
        .await;
        let due = vec![SubscriberId(2), SubscriberId(1), SubscriberId(3)];
        assert!(indexer.send(ResyncDue(due)).await.unwrap().is_empty());
        until("every sweep", || log.lock().unwrap().len() == 3 * n).await;
        // The next sweep starts once the last chunk of the one before was
        // taken: it overlaps that subscriber's last lane-full of resyncs.
        let log = log.lock().unwrap();
        let first = |tag| log.iter().position(|&t| t == tag).unwrap();
        let overlap = crate::listener::RESYNC_LANE_LOW;
        assert!(first(2) == 0, "{log:?}");
        assert!(first(1) >= n - overlap, "{log:?}");
        assert!(first(3) >= 2 * n - overlap, "{log:?}");
    }
}
