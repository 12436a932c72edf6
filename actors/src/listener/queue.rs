//! The pending notifications of one subscriber, with a per-subscriber
//! overflow policy.
//!
//! client-go gives every listener an unbounded ring buffer (SI-18: initial
//! capacity 1024, doubling, never shrinking), so a stalled handler grows
//! memory until the process dies (spec section 4, item 4; section 5 "listener
//! buffers are unbounded"). kinformer bounds it, and the subscriber chooses how:
//!
//! * [`OverflowPolicy::Block`]: a plain FIFO of at most `capacity`
//!   notifications, in exactly the order they were pushed, never merged. A
//!   push on a full queue hands the event back in [`QueueFull`]; the producer
//!   must wait until the subscriber pops (back-pressure). A capacity of 0 is
//!   raised to 1, since a queue that can hold nothing could never make progress.
//! * [`OverflowPolicy::Coalesce`]: never refuses. Pending notifications for the
//!   same key merge, so the queue holds at most 2 notifications per distinct
//!   key: its size is bounded by the number of objects, not by the event rate.
//!   A subscriber that catches up sees the latest state of every object and
//!   every delete; the `old` object of the first pending update is kept, so
//!   `old` is always the state the subscriber last saw. Keys keep the position
//!   of their first pending notification (FIFO by key: a busy key never jumps
//!   ahead of, nor falls behind, the others). `capacity` is only an allocation
//!   hint here.
//!
//! Per key, notifications are delivered in order, one at a time (SI-18), under
//! both policies. The event carries its key ([`Event::key`]); it is never
//! recomputed. How `Coalesce` merges: [`ListenerQueue`].

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::mem;
use std::ops::Range;
use std::sync::Arc;

use crate::event::{Cause, Event, EventBatch};
use crate::key::{DeletedObject, ObjectKey};

/// Most notifications preallocated up front, whatever the capacity.
const PREALLOCATE_MAX: usize = 1024;

/// Stale order entries tolerated before the Coalesce order is compacted.
const COMPACT_MIN_STALE: usize = 64;

/// What a listener does when its subscriber falls behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OverflowPolicy {
    /// Bounded FIFO of every notification; the producer waits when it is full.
    #[default]
    Block,
    /// Merge pending notifications per key; bounded by the number of keys, never refuses.
    Coalesce,
}

/// A push refused by a full [`OverflowPolicy::Block`] queue; the event is handed back.
pub struct QueueFull<K>(pub Event<K>);

impl<K> QueueFull<K> {
    /// The refused event, to push again once the subscriber has popped.
    pub fn into_event(self) -> Event<K> {
        self.0
    }
}

impl<K> fmt::Debug for QueueFull<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueFull")
            .field("key", self.0.key())
            .field("cause", &self.0.cause())
            .finish_non_exhaustive()
    }
}

impl<K> fmt::Display for QueueFull<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "listener queue is full; notification for {} handed back",
            self.0.key()
        )
    }
}

impl<K> std::error::Error for QueueFull<K> {}

/// The outcome of an accepted push.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pushed {
    /// Initial-list `Added`s merged away by this push (Coalesce only): the
    /// listener must `finish` them in its sync tracker, as they will never be popped.
    pub dropped_initial: usize,
}

/// The pending notifications of one subscriber (see the module doc).
///
/// # Coalesce merge table
///
/// `pending` is what the queue holds for the key, `new` the pushed notification.
///
/// | pending | + new | result |
/// |---|---|---|
/// | — | X | X |
/// | `Added(a, c)` | `Updated(_, b, c2)` | `Added(b, c)` (the cause of the add is kept) |
/// | `Added(a)` | `Deleted(d)` | nothing at all: the subscriber never saw the object. If the `Added` was initial, [`Pushed::dropped_initial`] counts it |
/// | `Updated(o1, n1, c1)` | `Updated(_, n2, c2)` | `Updated(o1, n2, c)`: `c = c2`, unless `c2` is `Resync` and `c1` is not (a real change merged with a resync stays a real change: `c = c1`) |
/// | `Updated(o1, _)` | `Deleted(d)` | `Deleted(d)` |
/// | `Deleted(d)` | `Added(a)` | `[Deleted(d), Added(a)]`: two entries, a new object under the same key |
/// | `[Deleted(d), Added(a)]` | `Updated(_, b)` | `[Deleted(d), Added(b)]` |
/// | `[Deleted(d), Added(a)]` | `Deleted(d2)` | `Deleted(d2)` |
/// | `Deleted(d)` | `Deleted(d2)` | `Deleted(d2)`, unless `d2` is a tombstone and `d` a final state: then `Deleted(d)` (the preference of DeltaFIFO DF-4) |
/// | anything impossible (`Added + Added`, `Updated + Added`, `Deleted + Updated`, `[Deleted, Added] + Added`) | | the newer notification replaces the last pending one; never a panic, a `debug` log |
///
/// Any `Added` that a merge discards and that was initial is reported in
/// [`Pushed::dropped_initial`], so the listener can finish it in its
/// [`SyncTracker`](super::SyncTracker) (HS-2): every initial add is either
/// popped or reported dropped, exactly once.
pub struct ListenerQueue<K> {
    policy: OverflowPolicy,
    capacity: usize,
    coalesced: u64,
    inner: Inner<K>,
}

enum Inner<K> {
    Block(BlockQueue<K>),
    Coalesce(CoalesceQueue<K>),
}

impl<K> fmt::Debug for ListenerQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerQueue")
            .field("policy", &self.policy)
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .field("pending_keys", &self.pending_keys())
            .field("coalesced", &self.coalesced)
            .finish()
    }
}

impl<K> ListenerQueue<K> {
    /// An empty queue. `capacity` bounds a `Block` queue (0 is raised to 1);
    /// for `Coalesce` it is only an allocation hint.
    pub fn new(policy: OverflowPolicy, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let prealloc = capacity.min(PREALLOCATE_MAX);
        let inner = match policy {
            OverflowPolicy::Block => Inner::Block(BlockQueue::with_capacity(prealloc)),
            OverflowPolicy::Coalesce => Inner::Coalesce(CoalesceQueue::with_capacity(prealloc)),
        };
        ListenerQueue {
            policy,
            capacity,
            coalesced: 0,
            inner,
        }
    }

    /// Queues a notification. Only a full `Block` queue refuses, handing the
    /// event back; a `Coalesce` queue merges it with the key's pending ones.
    pub fn push(&mut self, event: Event<K>) -> Result<Pushed, QueueFull<K>> {
        match &mut self.inner {
            Inner::Block(q) => {
                if q.len() >= self.capacity {
                    return Err(QueueFull(event));
                }
                q.push(event);
                Ok(Pushed::default())
            }
            Inner::Coalesce(q) => {
                let merged = q.push(event);
                self.coalesced += merged.coalesced;
                Ok(Pushed {
                    dropped_initial: merged.dropped_initial,
                })
            }
        }
    }

    /// Queues `events[range]` into a `Block` queue with room for them all,
    /// sharing the chunk instead of copying it; false (nothing queued) for
    /// a `Coalesce` queue or when the room is short: push them one by one.
    pub fn push_shared(&mut self, events: &Arc<[Event<K>]>, range: Range<usize>) -> bool {
        match &mut self.inner {
            Inner::Block(q) if q.len() + range.len() <= self.capacity => {
                q.push_shared(events, range);
                true
            }
            _ => false,
        }
    }

    /// The next `n` notifications as a batch sharing its chunk: only when a
    /// `Block` queue's next `n` are all in one run of a chunk (else `None`,
    /// and [`pop`](Self::pop) them).
    pub fn pop_shared(&mut self, n: usize) -> Option<EventBatch<K>> {
        match &mut self.inner {
            Inner::Block(q) => q.pop_shared(n),
            Inner::Coalesce(_) => None,
        }
    }

    /// How many notifications [`pop_shared`](Self::pop_shared) can take
    /// from the front run of a shared chunk (0 if the front is no such run).
    pub fn front_shared_len(&self) -> usize {
        match &self.inner {
            Inner::Block(q) => q.front_shared_len(),
            Inner::Coalesce(_) => 0,
        }
    }

    /// The next notification to deliver, oldest key first.
    pub fn pop(&mut self) -> Option<Event<K>> {
        match &mut self.inner {
            Inner::Block(q) => q.pop(),
            Inner::Coalesce(q) => q.pop(),
        }
    }

    /// Notifications pending.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Block(q) => q.len(),
            Inner::Coalesce(q) => q.len,
        }
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct keys with pending notifications (`Block`: counted on demand, O(len)).
    pub fn pending_keys(&self) -> usize {
        match &self.inner {
            Inner::Block(q) => q.pending_keys(),
            Inner::Coalesce(q) => q.slots.len(),
        }
    }

    /// True when a push would be refused: `Block` at capacity; `Coalesce` never.
    pub fn is_full(&self) -> bool {
        match &self.inner {
            Inner::Block(q) => q.len() >= self.capacity,
            Inner::Coalesce(_) => false,
        }
    }

    /// Pushes that would be taken now: `Block` the free slots; `Coalesce`
    /// `usize::MAX` (never refused).
    pub fn room(&self) -> usize {
        match &self.inner {
            Inner::Block(q) => self.capacity.saturating_sub(q.len()),
            Inner::Coalesce(_) => usize::MAX,
        }
    }

    /// Notifications merged away since the queue was made (a metric; `clear` keeps it).
    pub fn coalesced(&self) -> u64 {
        self.coalesced
    }

    /// The overflow policy chosen for this subscriber.
    pub fn policy(&self) -> OverflowPolicy {
        self.policy
    }

    /// The bound of a `Block` queue (the allocation hint of a `Coalesce` one).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Drops every pending notification (e.g. when the subscriber is removed, SI-12).
    pub fn clear(&mut self) {
        match &mut self.inner {
            Inner::Block(q) => q.clear(),
            Inner::Coalesce(q) => q.clear(),
        }
    }

    /// Once empty, gives back what a backlog grew beyond the first
    /// allocation: a `Coalesce` queue that held one notification per key of
    /// a 100k-object cache otherwise keeps that size for good. (A `Block`
    /// queue never grows past its bound.) A no-op while anything is pending.
    pub fn release_idle_memory(&mut self) {
        let prealloc = self.capacity.min(PREALLOCATE_MAX);
        if let Inner::Coalesce(q) = &mut self.inner
            && q.len == 0
            && (q.order.capacity() > 2 * q.first_capacity
                || q.slots.capacity() > 2 * q.first_capacity)
        {
            let next_seq = q.next_seq;
            *q = CoalesceQueue::with_capacity(prealloc);
            q.next_seq = next_seq;
        }
    }
}

/// The `Block` policy: a plain FIFO of every notification. It keeps no per-key
/// table: hashing each key on push and pop was a fifth of the fan-out cost
/// with 100 subscribers (BENCHMARKS.md), for a figure only diagnostics read
/// ([`ListenerQueue::pending_keys`] counts on demand instead).
///
/// A `Deliver`'s events are shared by every listener of the batch, so the
/// queue keeps a run of the shared chunk and clones an event only as it is
/// popped: one clone per event and subscriber, where copying the chunk in
/// cost a clone, two moves and a `Vec` per subscriber (issue 24). A run
/// keeps its whole chunk alive: besides what it holds, a queue pins at most
/// the events already popped from its front run (fewer than a chunk, 256).
struct BlockQueue<K> {
    /// Invariant: no run is empty, and `len` is the sum of their lengths.
    runs: VecDeque<Run<K>>,
    len: usize,
}

/// Events of a `Block` queue: one of its own, or `next..end` of a shared chunk.
enum Run<K> {
    One(Event<K>),
    Shared {
        events: Arc<[Event<K>]>,
        next: usize,
        end: usize,
    },
}

impl<K> BlockQueue<K> {
    fn with_capacity(n: usize) -> Self {
        BlockQueue {
            runs: VecDeque::with_capacity(n),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, event: Event<K>) {
        self.runs.push_back(Run::One(event));
        self.len += 1;
    }

    /// Queues `events[range]` without copying them (nothing for an empty range).
    fn push_shared(&mut self, events: &Arc<[Event<K>]>, range: Range<usize>) {
        debug_assert!(range.end <= events.len());
        if range.is_empty() {
            return;
        }
        self.len += range.len();
        self.runs.push_back(Run::Shared {
            events: events.clone(),
            next: range.start,
            end: range.end,
        });
    }

    fn pop(&mut self) -> Option<Event<K>> {
        if let Run::Shared { events, next, end } = self.runs.front_mut()?
            && *next + 1 < *end
        {
            let event = events[*next].clone();
            *next += 1;
            self.len -= 1;
            return Some(event);
        }
        // A single event, or the last of a shared run.
        let event = match self.runs.pop_front()? {
            Run::One(event) => event,
            Run::Shared { events, next, .. } => events[next].clone(),
        };
        self.len -= 1;
        Some(event)
    }

    /// Events left in the front run when it is a run of a shared chunk, else 0.
    fn front_shared_len(&self) -> usize {
        match self.runs.front() {
            Some(Run::Shared { next, end, .. }) => end - next,
            _ => 0,
        }
    }

    /// The next `n` events, when the front run is a shared one holding them all.
    fn pop_shared(&mut self, n: usize) -> Option<EventBatch<K>> {
        let Run::Shared { events, next, end } = self.runs.front_mut()? else {
            return None;
        };
        if n == 0 || *end - *next < n {
            return None;
        }
        let range = *next..*next + n;
        if range.end < *end {
            *next = range.end;
            self.len -= n;
            return Some(EventBatch::shared(events.clone(), range));
        }
        // The whole rest of the run: its chunk moves into the batch.
        let Some(Run::Shared { events, .. }) = self.runs.pop_front() else {
            return None;
        };
        self.len -= n;
        Some(EventBatch::shared(events, range))
    }

    fn iter(&self) -> impl Iterator<Item = &Event<K>> {
        self.runs.iter().flat_map(|run| match run {
            Run::One(event) => std::slice::from_ref(event),
            Run::Shared { events, next, end } => &events[*next..*end],
        })
    }

    fn pending_keys(&self) -> usize {
        self.iter()
            .map(Event::key)
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    fn clear(&mut self) {
        self.runs.clear();
        self.len = 0;
    }
}

/// What one key holds in a `Coalesce` queue.
#[derive(Default)]
enum Slot<K> {
    /// Transient, only while a merge runs (or when a merge annihilated everything).
    #[default]
    Empty,
    One(Event<K>),
    /// Only ever `[Deleted, Added]`: the old object is gone, a new one exists.
    Two(Event<K>, Event<K>),
}

impl<K> Slot<K> {
    fn len(&self) -> usize {
        match self {
            Slot::Empty => 0,
            Slot::One(_) => 1,
            Slot::Two(..) => 2,
        }
    }
}

/// The pending notifications of one key, and which order entry is theirs.
struct Pending<K> {
    seq: u64,
    slot: Slot<K>,
}

/// The result of one Coalesce push, for the metrics.
struct Merged {
    coalesced: u64,
    dropped_initial: usize,
}

/// The `Coalesce` policy: one slot per key, and the order of first pending
/// notifications. A key whose notifications all merged away (`Added` then
/// `Deleted`) leaves a stale order entry behind, recognised by its sequence
/// number and skipped; stale entries are compacted once they outnumber the
/// live keys, so memory stays proportional to the keys.
struct CoalesceQueue<K> {
    order: VecDeque<(ObjectKey, u64)>,
    slots: HashMap<ObjectKey, Pending<K>>,
    next_seq: u64,
    len: usize,
    stale: usize,
    /// What `with_capacity` allocated: growth beyond twice that is a backlog's.
    first_capacity: usize,
}

impl<K> CoalesceQueue<K> {
    fn with_capacity(n: usize) -> Self {
        let order = VecDeque::with_capacity(n);
        let slots = HashMap::with_capacity(n);
        let first_capacity = order.capacity().max(slots.capacity());
        CoalesceQueue {
            order,
            slots,
            next_seq: 0,
            len: 0,
            stale: 0,
            first_capacity,
        }
    }

    fn push(&mut self, event: Event<K>) -> Merged {
        // Look up by reference: a merge (the common case) needs no entry, and only
        // a new key is hashed twice.
        let Some(pending) = self.slots.get_mut(event.key()) else {
            let key = event.key().clone();
            let seq = self.next_seq;
            self.next_seq += 1;
            self.order.push_back((key.clone(), seq));
            self.slots.insert(
                key,
                Pending {
                    seq,
                    slot: Slot::One(event),
                },
            );
            self.len += 1;
            return Merged {
                coalesced: 0,
                dropped_initial: 0,
            };
        };
        let before = pending.slot.len();
        let key = event.key().clone();
        let (slot, dropped_initial) = merge(mem::take(&mut pending.slot), event);
        let after = slot.len();
        self.len = self.len + after - before;
        if after == 0 {
            self.slots.remove(&key);
            self.stale += 1;
            self.compact_if_needed();
        } else {
            pending.slot = slot;
        }
        Merged {
            coalesced: (before + 1 - after) as u64,
            dropped_initial,
        }
    }

    fn pop(&mut self) -> Option<Event<K>> {
        while let Some((key, seq)) = self.order.pop_front() {
            let Entry::Occupied(mut o) = self.slots.entry(key) else {
                self.stale = self.stale.saturating_sub(1);
                continue;
            };
            if o.get().seq != seq {
                self.stale = self.stale.saturating_sub(1);
                continue;
            }
            match mem::take(&mut o.get_mut().slot) {
                Slot::One(event) => {
                    o.remove();
                    self.len -= 1;
                    return Some(event);
                }
                Slot::Two(first, second) => {
                    o.get_mut().slot = Slot::One(second);
                    // The key keeps its place: its second notification is next.
                    let key = o.key().clone();
                    self.order.push_front((key, seq));
                    self.len -= 1;
                    return Some(first);
                }
                Slot::Empty => {
                    // Never stored (push removes emptied slots); drop it defensively.
                    o.remove();
                }
            }
        }
        None
    }

    fn compact_if_needed(&mut self) {
        if self.stale > COMPACT_MIN_STALE && self.stale > self.slots.len() {
            let slots = &self.slots;
            self.order
                .retain(|(key, seq)| slots.get(key).is_some_and(|p| p.seq == *seq));
            self.stale = 0;
        }
    }

    fn clear(&mut self) {
        self.order.clear();
        self.slots.clear();
        self.len = 0;
        self.stale = 0;
    }
}

/// The cause of two merged updates: a real change merged with a resync stays
/// a real change.
fn merge_cause(pending: Cause, new: Cause) -> Cause {
    if new == Cause::Resync && pending != Cause::Resync {
        pending
    } else {
        new
    }
}

/// 1 when `event` is an initial-list `Added`, else 0.
fn initial<K>(event: &Event<K>) -> usize {
    usize::from(event.is_initial())
}

/// Applies the merge table of the module doc; returns the new slot and how
/// many initial `Added`s were discarded.
fn merge<K>(pending: Slot<K>, new: Event<K>) -> (Slot<K>, usize) {
    use Event::{Added, Deleted, Updated};
    match (pending, new) {
        (Slot::Empty, new) => (Slot::One(new), 0),
        // Added + Updated → Added(new state), the add's cause kept.
        (Slot::One(Added { key, cause, .. }), Updated { new: object, .. }) => {
            (Slot::One(Added { key, object, cause }), 0)
        }
        // Added + Deleted → nothing: the subscriber never saw the object.
        (Slot::One(added @ Added { .. }), Deleted { .. }) => (Slot::Empty, initial(&added)),
        // Updated + Updated → the first old, the last new.
        (
            Slot::One(Updated {
                key,
                old,
                cause: c1,
                ..
            }),
            Updated { new, cause: c2, .. },
        ) => (
            Slot::One(Updated {
                key,
                old,
                new,
                cause: merge_cause(c1, c2),
            }),
            0,
        ),
        // Updated + Deleted → Deleted.
        (Slot::One(Updated { .. }), deleted @ Deleted { .. }) => (Slot::One(deleted), 0),
        // Deleted + Added → both: a new object under the same key.
        (Slot::One(deleted @ Deleted { .. }), added @ Added { .. }) => {
            (Slot::Two(deleted, added), 0)
        }
        // Deleted + Deleted → the newer, unless it would replace a final state by a tombstone (DF-4).
        (Slot::One(older @ Deleted { .. }), newer @ Deleted { .. }) => {
            (Slot::One(prefer_delete(older, newer)), 0)
        }
        // [Deleted, Added] + Updated → [Deleted, Added(new state)].
        (Slot::Two(deleted, Added { key, cause, .. }), Updated { new: object, .. }) => {
            (Slot::Two(deleted, Added { key, object, cause }), 0)
        }
        // [Deleted, Added] + Deleted → the newer Deleted.
        (Slot::Two(_, added), deleted @ Deleted { .. }) => (Slot::One(deleted), initial(&added)),
        // Impossible histories: the newer replaces the last pending one.
        (Slot::One(last), new) => {
            impossible(&last, &new);
            (Slot::One(new), initial(&last))
        }
        (Slot::Two(first, last), new) => {
            impossible(&last, &new);
            (Slot::Two(first, new), initial(&last))
        }
    }
}

/// The surviving delete of two (DF-4): a final state beats a newer tombstone.
fn prefer_delete<K>(older: Event<K>, newer: Event<K>) -> Event<K> {
    let older_final = matches!(
        older,
        Event::Deleted {
            object: DeletedObject::Final(_),
            ..
        }
    );
    let newer_tombstone = matches!(
        newer,
        Event::Deleted {
            object: DeletedObject::Unknown(_),
            ..
        }
    );
    if older_final && newer_tombstone {
        older
    } else {
        newer
    }
}

fn impossible<K>(last: &Event<K>, new: &Event<K>) {
    tracing::debug!(
        key = %new.key(),
        pending = kind(last),
        new = kind(new),
        "impossible notification history; keeping the newer notification"
    );
}

fn kind<K>(event: &Event<K>) -> &'static str {
    match event {
        Event::Added { .. } => "added",
        Event::Updated { .. } => "updated",
        Event::Deleted { .. } => "deleted",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::key::Tombstone;

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(Some("ns"), name)
    }

    fn added(name: &str, rv: &str, cause: Cause) -> Event<ConfigMap> {
        Event::Added {
            key: key(name),
            object: cm(name, rv),
            cause,
        }
    }

    fn updated(name: &str, old: &str, new: &str, cause: Cause) -> Event<ConfigMap> {
        Event::Updated {
            key: key(name),
            old: cm(name, old).into(),
            new: cm(name, new),
            cause,
        }
    }

    fn deleted(name: &str, rv: &str) -> Event<ConfigMap> {
        Event::Deleted {
            key: key(name),
            object: DeletedObject::Final(cm(name, rv)),
            cause: Cause::Watch,
        }
    }

    fn tombstone(name: &str, rv: &str) -> Event<ConfigMap> {
        Event::Deleted {
            key: key(name),
            object: DeletedObject::Unknown(Tombstone {
                key: key(name),
                last_known: Some(cm(name, rv)),
            }),
            cause: Cause::Relist,
        }
    }

    fn rv(o: &ConfigMap) -> &str {
        o.metadata.resource_version.as_deref().unwrap_or("?")
    }

    /// A compact, exact description of an event: kind, name, states, cause.
    fn describe(e: &Event<ConfigMap>) -> String {
        let name = e.key().name();
        match e {
            Event::Added { object, cause, .. } => format!("A {name} {} {cause:?}", rv(object)),
            Event::Updated {
                old, new, cause, ..
            } => {
                format!(
                    "U {name} {}->{} {cause:?}",
                    old.resource_version().unwrap_or_default(),
                    rv(new)
                )
            }
            Event::Deleted {
                object: DeletedObject::Final(o),
                cause,
                ..
            } => {
                format!("D {name} final {} {cause:?}", rv(o))
            }
            Event::Deleted {
                object: DeletedObject::Unknown(t),
                cause,
                ..
            } => {
                let last = t.last_known.as_deref().map_or("-", rv);
                format!("D {name} tomb {last} {cause:?}")
            }
        }
    }

    fn drain(q: &mut ListenerQueue<ConfigMap>) -> Vec<String> {
        std::iter::from_fn(|| q.pop())
            .map(|e| describe(&e))
            .collect()
    }

    /// Pushes every event into a fresh Coalesce queue; returns the queue and
    /// the total of `dropped_initial`.
    fn coalesce(events: Vec<Event<ConfigMap>>) -> (ListenerQueue<ConfigMap>, usize) {
        let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, 16);
        let mut dropped = 0;
        for e in events {
            dropped += q.push(e).unwrap().dropped_initial;
        }
        (q, dropped)
    }

    use Cause::{Initial, Relist, Resync, Watch};

    #[test]
    fn row_empty_plus_x_is_x() {
        for e in [
            added("a", "1", Watch),
            updated("a", "1", "2", Resync),
            tombstone("a", "3"),
        ] {
            let want = describe(&e);
            let (mut q, dropped) = coalesce(vec![e]);
            assert_eq!(
                (q.len(), q.pending_keys(), dropped, q.coalesced()),
                (1, 1, 0, 0)
            );
            assert_eq!(drain(&mut q), vec![want]);
            assert!(q.is_empty());
        }
    }

    #[test]
    fn row_added_plus_updated_is_added_with_new_state_and_add_cause() {
        let (mut q, dropped) = coalesce(vec![
            added("a", "1", Initial),
            updated("a", "1", "2", Watch),
        ]);
        assert_eq!((q.len(), dropped, q.coalesced()), (1, 0, 1));
        assert_eq!(drain(&mut q), vec!["A a 2 Initial"]);
        let (mut q, _) = coalesce(vec![
            added("a", "1", Relist),
            updated("a", "1", "1", Resync),
        ]);
        assert_eq!(drain(&mut q), vec!["A a 1 Relist"]);
    }

    #[test]
    fn row_added_plus_deleted_is_nothing() {
        let (mut q, dropped) = coalesce(vec![added("a", "1", Watch), deleted("a", "2")]);
        assert_eq!(
            (q.len(), q.pending_keys(), dropped, q.coalesced()),
            (0, 0, 0, 2)
        );
        assert!(drain(&mut q).is_empty());
        let (mut q, dropped) = coalesce(vec![added("a", "1", Initial), tombstone("a", "1")]);
        assert_eq!(
            (q.len(), dropped),
            (0, 1),
            "an initial add merged away is reported"
        );
        assert!(drain(&mut q).is_empty());
    }

    #[test]
    fn row_updated_plus_updated_keeps_first_old_and_last_new() {
        let cases = [
            (Watch, Watch, "Watch"),
            (Watch, Resync, "Watch"),
            (Relist, Resync, "Relist"),
            (Resync, Watch, "Watch"),
            (Resync, Relist, "Relist"),
            (Resync, Resync, "Resync"),
            (Watch, Relist, "Relist"),
            (Relist, Watch, "Watch"),
        ];
        for (c1, c2, want) in cases {
            let (mut q, _) = coalesce(vec![updated("a", "1", "2", c1), updated("a", "2", "3", c2)]);
            assert_eq!(q.coalesced(), 1);
            assert_eq!(
                drain(&mut q),
                vec![format!("U a 1->3 {want}")],
                "{c1:?} + {c2:?}"
            );
        }
        // Three in a row: still the first old.
        let (mut q, _) = coalesce(vec![
            updated("a", "1", "2", Watch),
            updated("a", "2", "3", Resync),
            updated("a", "3", "4", Resync),
        ]);
        assert_eq!(drain(&mut q), vec!["U a 1->4 Watch"]);
    }

    #[test]
    fn row_updated_plus_deleted_is_deleted() {
        let (mut q, _) = coalesce(vec![updated("a", "1", "2", Watch), deleted("a", "3")]);
        assert_eq!(drain(&mut q), vec!["D a final 3 Watch"]);
        let (mut q, _) = coalesce(vec![updated("a", "1", "2", Resync), tombstone("a", "2")]);
        assert_eq!(drain(&mut q), vec!["D a tomb 2 Relist"]);
    }

    #[test]
    fn row_deleted_plus_added_is_both() {
        let (mut q, _) = coalesce(vec![deleted("a", "1"), added("a", "5", Watch)]);
        assert_eq!((q.len(), q.pending_keys(), q.coalesced()), (2, 1, 0));
        assert_eq!(drain(&mut q), vec!["D a final 1 Watch", "A a 5 Watch"]);
    }

    #[test]
    fn row_deleted_added_plus_updated() {
        let (mut q, _) = coalesce(vec![
            deleted("a", "1"),
            added("a", "5", Relist),
            updated("a", "5", "6", Watch),
        ]);
        assert_eq!((q.len(), q.coalesced()), (2, 1));
        assert_eq!(drain(&mut q), vec!["D a final 1 Watch", "A a 6 Relist"]);
    }

    #[test]
    fn row_deleted_added_plus_deleted_is_the_newer_delete() {
        let (mut q, dropped) = coalesce(vec![
            deleted("a", "1"),
            added("a", "5", Watch),
            tombstone("a", "5"),
        ]);
        assert_eq!((q.len(), dropped, q.coalesced()), (1, 0, 2));
        assert_eq!(drain(&mut q), vec!["D a tomb 5 Relist"]);
        let (mut q, dropped) = coalesce(vec![
            tombstone("a", "1"),
            added("a", "5", Initial),
            deleted("a", "6"),
        ]);
        assert_eq!(dropped, 1);
        assert_eq!(drain(&mut q), vec!["D a final 6 Watch"]);
    }

    #[test]
    fn row_deleted_plus_deleted_prefers_a_final_state() {
        let cases = [
            (deleted("a", "1"), deleted("a", "2"), "D a final 2 Watch"),
            (deleted("a", "1"), tombstone("a", "2"), "D a final 1 Watch"),
            (tombstone("a", "1"), deleted("a", "2"), "D a final 2 Watch"),
            (
                tombstone("a", "1"),
                tombstone("a", "2"),
                "D a tomb 2 Relist",
            ),
        ];
        for (d, d2, want) in cases {
            let (mut q, _) = coalesce(vec![d, d2]);
            assert_eq!(q.coalesced(), 1);
            assert_eq!(drain(&mut q), vec![want]);
        }
    }

    #[test]
    fn row_impossible_keeps_the_newer_never_panics() {
        type Case = (Vec<Event<ConfigMap>>, Vec<&'static str>, usize);
        let cases: Vec<Case> = vec![
            (
                vec![added("a", "1", Watch), added("a", "2", Relist)],
                vec!["A a 2 Relist"],
                0,
            ),
            (
                vec![added("a", "1", Initial), added("a", "2", Watch)],
                vec!["A a 2 Watch"],
                1,
            ),
            (
                vec![updated("a", "1", "2", Watch), added("a", "3", Watch)],
                vec!["A a 3 Watch"],
                0,
            ),
            (
                vec![deleted("a", "1"), updated("a", "1", "2", Watch)],
                vec!["U a 1->2 Watch"],
                0,
            ),
            (
                vec![
                    deleted("a", "1"),
                    added("a", "2", Initial),
                    added("a", "3", Watch),
                ],
                vec!["D a final 1 Watch", "A a 3 Watch"],
                1,
            ),
        ];
        for (events, want, want_dropped) in cases {
            let (mut q, dropped) = coalesce(events);
            assert_eq!(dropped, want_dropped);
            assert_eq!(drain(&mut q), want);
        }
    }

    #[test]
    fn coalesce_is_fifo_by_key_without_line_jumping() {
        let (mut q, _) = coalesce(vec![
            added("a", "1", Watch),
            added("b", "1", Watch),
            updated("a", "1", "2", Watch),
            deleted("c", "1"),
            added("c", "2", Watch),
            updated("b", "1", "2", Watch),
            added("d", "1", Watch),
        ]);
        assert_eq!((q.len(), q.pending_keys()), (5, 4));
        assert_eq!(
            q.pop().map(|e| describe(&e)).as_deref(),
            Some("A a 2 Watch")
        );
        assert_eq!(
            q.pop().map(|e| describe(&e)).as_deref(),
            Some("A b 2 Watch")
        );
        assert_eq!(
            q.pop().map(|e| describe(&e)).as_deref(),
            Some("D c final 1 Watch")
        );
        // c's second notification keeps c's place, ahead of d.
        q.push(updated("d", "1", "2", Watch)).unwrap();
        assert_eq!(drain(&mut q), vec!["A c 2 Watch", "A d 2 Watch"]);
    }

    #[test]
    fn key_merged_away_rejoins_at_the_back() {
        let (mut q, _) = coalesce(vec![
            added("a", "1", Watch),
            added("b", "1", Watch),
            deleted("a", "2"),
            added("a", "3", Watch),
        ]);
        assert_eq!(drain(&mut q), vec!["A b 1 Watch", "A a 3 Watch"]);
    }

    #[test]
    fn popped_key_starts_a_new_slot() {
        let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, 4);
        q.push(updated("a", "1", "2", Watch)).unwrap();
        assert_eq!(drain(&mut q), vec!["U a 1->2 Watch"]);
        q.push(updated("a", "2", "3", Watch)).unwrap();
        assert_eq!(
            drain(&mut q),
            vec!["U a 2->3 Watch"],
            "nothing merges with a delivered event"
        );
    }

    #[test]
    fn coalesce_never_refuses_and_is_bounded_by_keys() {
        let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, 1);
        for i in 0..1000 {
            let name = format!("k{}", i % 10);
            q.push(updated(&name, &i.to_string(), &(i + 1).to_string(), Watch))
                .unwrap();
            assert!(!q.is_full());
        }
        assert_eq!((q.len(), q.pending_keys(), q.coalesced()), (10, 10, 990));
        let first = q.pop().map(|e| describe(&e));
        assert_eq!(first.as_deref(), Some("U k0 0->991 Watch"));
    }

    #[test]
    fn stale_order_entries_are_compacted() {
        let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, 4);
        q.push(added("keep", "1", Watch)).unwrap();
        for i in 0..10_000 {
            let name = format!("gone{i}");
            q.push(added(&name, "1", Watch)).unwrap();
            q.push(deleted(&name, "2")).unwrap();
            let Inner::Coalesce(c) = &q.inner else {
                unreachable!()
            };
            assert!(
                c.order.len() <= 2 * COMPACT_MIN_STALE + 2,
                "order grew to {}",
                c.order.len()
            );
        }
        for _ in 0..3 {
            q.push(added("gone7", "3", Watch)).unwrap();
            q.push(deleted("gone7", "4")).unwrap();
        }
        q.push(added("gone7", "5", Watch)).unwrap();
        assert_eq!(drain(&mut q), vec!["A keep 1 Watch", "A gone7 5 Watch"]);
        assert_eq!(q.coalesced(), 2 * 10_003);
    }

    #[test]
    fn block_keeps_every_event_in_order_and_refuses_when_full() {
        let mut q = ListenerQueue::new(OverflowPolicy::Block, 3);
        assert_eq!((q.policy(), q.capacity()), (OverflowPolicy::Block, 3));
        q.push(added("a", "1", Initial)).unwrap();
        q.push(updated("a", "1", "2", Watch)).unwrap();
        q.push(added("b", "1", Watch)).unwrap();
        assert!(q.is_full());
        assert_eq!((q.len(), q.pending_keys()), (3, 2));
        let refused = q.push(deleted("a", "3")).unwrap_err();
        assert_eq!(
            describe(&refused.0),
            "D a final 3 Watch",
            "the event is handed back"
        );
        assert!(refused.to_string().contains("ns/a"));
        assert!(format!("{refused:?}").contains("QueueFull"));
        assert_eq!(
            q.pop().map(|e| describe(&e)).as_deref(),
            Some("A a 1 Initial")
        );
        assert!(!q.is_full());
        assert_eq!(q.push(refused.into_event()).unwrap(), Pushed::default());
        assert_eq!(q.pending_keys(), 2);
        assert_eq!(
            drain(&mut q),
            vec!["U a 1->2 Watch", "A b 1 Watch", "D a final 3 Watch"]
        );
        assert_eq!((q.len(), q.pending_keys(), q.coalesced()), (0, 0, 0));
    }
}

#[cfg(test)]
mod block_tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn added(name: &str) -> Event<ConfigMap> {
        let object = Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        });
        Event::Added {
            key: ObjectKey::new(None, name),
            object,
            cause: Cause::Initial,
        }
    }

    /// A shared run is queued without copying: its events come out in order,
    /// behind and ahead of single events, each the chunk's own object, and
    /// the chunk is let go once its run is popped.
    #[test]
    fn a_shared_run_keeps_its_order_among_single_events() {
        let chunk: Arc<[Event<ConfigMap>]> = ["a", "b", "c", "d"].map(added).into();
        let mut q = ListenerQueue::new(OverflowPolicy::Block, 8);
        q.push(added("first")).unwrap();
        assert!(q.push_shared(&chunk, 1..4));
        q.push(added("last")).unwrap();
        assert_eq!((q.len(), q.room(), q.pending_keys()), (5, 3, 5));
        assert_eq!(Arc::strong_count(&chunk), 2, "queued, not copied");
        let first = q.pop().unwrap();
        assert_eq!(first.key().as_str(), "first");
        let b = q.pop().unwrap();
        assert!(Arc::ptr_eq(b.object().unwrap(), chunk[1].object().unwrap()));
        let rest: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|e| e.key().to_string())
            .collect();
        assert_eq!(rest, ["c", "d", "last"]);
        assert_eq!(Arc::strong_count(&chunk), 1, "the run let the chunk go");
        assert!(q.is_empty());
    }

    /// `pop_shared(n)` hands out the next `n` events only when the front run
    /// holds them all, and nothing while a single event (or nothing) is
    /// next; the queue's order is kept between the two kinds of pops.
    #[test]
    fn the_front_run_is_popped_shared_up_to_max() {
        let chunk: Arc<[Event<ConfigMap>]> = ["a", "b", "c"].map(added).into();
        let mut q = ListenerQueue::new(OverflowPolicy::Block, 8);
        assert!(q.pop_shared(1).is_none(), "empty");
        q.push(added("first")).unwrap();
        assert!(q.push_shared(&chunk, 0..3));
        assert!(q.pop_shared(1).is_none(), "a single event is next");
        assert_eq!(q.pop().unwrap().key().as_str(), "first");
        let events = q.pop_shared(2).unwrap();
        assert!(std::ptr::eq(&events[0], &chunk[0]), "shared, not copied");
        assert_eq!((events.len(), q.len()), (2, 1));
        assert!(q.pop_shared(0).is_none(), "no room");
        assert!(q.pop_shared(2).is_none(), "the run holds one more, not two");
        let last = q.pop_shared(1).unwrap();
        assert_eq!(last[0].key().as_str(), "c");
        assert_eq!(last.len(), 1);
        assert!(q.is_empty());
        let mut coalesce = ListenerQueue::new(OverflowPolicy::Coalesce, 8);
        coalesce.push(added("x")).unwrap();
        assert!(coalesce.pop_shared(1).is_none());
        drop((events, last));
        assert_eq!(Arc::strong_count(&chunk), 1);
    }

    /// A run is taken only whole and only into a `Block` queue with room for
    /// it; an empty run takes nothing; `clear` drops runs.
    #[test]
    fn a_shared_run_needs_a_block_queue_with_room() {
        let chunk: Arc<[Event<ConfigMap>]> = ["a", "b", "c"].map(added).into();
        let mut coalesce = ListenerQueue::new(OverflowPolicy::Coalesce, 8);
        assert!(!coalesce.push_shared(&chunk, 0..3));
        assert!(coalesce.is_empty());
        let mut q = ListenerQueue::new(OverflowPolicy::Block, 2);
        assert!(!q.push_shared(&chunk, 0..3), "no room for 3");
        assert!(q.is_empty());
        assert!(q.push_shared(&chunk, 1..1));
        assert!(q.is_empty(), "an empty run queues nothing");
        assert!(q.push_shared(&chunk, 0..2));
        assert!(q.is_full());
        q.clear();
        assert_eq!((q.len(), Arc::strong_count(&chunk)), (0, 1));
    }

    /// After a backlog of 5 000 keys drains, a `Coalesce` queue shrinks back
    /// to its first allocation, and still works.
    #[test]
    fn an_idle_coalesce_queue_releases_its_backlog() {
        let mut q = ListenerQueue::new(OverflowPolicy::Coalesce, 16);
        for i in 0..5_000 {
            q.push(added(&format!("k{i}"))).unwrap();
        }
        q.release_idle_memory();
        assert_eq!(q.len(), 5_000, "pending: kept");
        while q.pop().is_some() {}
        q.release_idle_memory();
        let Inner::Coalesce(inner) = &q.inner else {
            panic!("a coalesce queue");
        };
        assert!(inner.order.capacity() <= inner.first_capacity);
        assert!(inner.slots.capacity() <= inner.first_capacity);
        q.push(added("a")).unwrap();
        q.push(added("a")).unwrap();
        assert_eq!((q.len(), q.coalesced()), (1, 1));
        assert_eq!(q.pop().map(|e| e.key().to_string()), Some("a".into()));
    }

    #[test]
    fn zero_capacity_is_raised_to_one() {
        let mut q = ListenerQueue::new(OverflowPolicy::Block, 0);
        assert_eq!(q.capacity(), 1);
        assert!(!q.is_full());
        q.push(added("a")).unwrap();
        assert!(q.is_full());
        assert!(q.push(added("b")).is_err());
    }

    #[test]
    fn block_never_merges() {
        let mut q = ListenerQueue::new(OverflowPolicy::Block, 100);
        for _ in 0..5 {
            q.push(added("a")).unwrap();
        }
        assert_eq!((q.len(), q.pending_keys(), q.coalesced()), (5, 1, 0));
        assert!(std::iter::from_fn(|| q.pop()).all(|e| e.key().as_str() == "a"));
    }

    #[test]
    fn clear_drops_pending_and_keeps_the_metric() {
        for policy in [OverflowPolicy::Block, OverflowPolicy::Coalesce] {
            let mut q = ListenerQueue::new(policy, 8);
            q.push(added("a")).unwrap();
            q.push(added("b")).unwrap();
            q.push(added("a")).unwrap();
            let coalesced = q.coalesced();
            q.clear();
            assert_eq!(
                (q.len(), q.pending_keys(), q.is_empty()),
                (0, 0, true),
                "{policy:?}"
            );
            assert!(q.pop().is_none());
            assert_eq!(q.coalesced(), coalesced);
            q.push(added("c")).unwrap();
            assert_eq!(q.pop().map(|e| e.key().clone()), Some(ObjectKey::from("c")));
        }
    }

    #[test]
    fn policy_serde_is_lowercase() {
        assert_eq!(
            serde_json::to_string(&OverflowPolicy::Coalesce).unwrap(),
            "\"coalesce\""
        );
        let p: OverflowPolicy = serde_json::from_str("\"block\"").unwrap();
        assert_eq!(p, OverflowPolicy::Block);
        assert_eq!(OverflowPolicy::default(), OverflowPolicy::Block);
    }
}

#[cfg(test)]
mod coalesce_properties {
    //! Coalesced delivery ends in the same per-key state as exact delivery.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use proptest::prelude::*;

    use super::*;
    use crate::key::Tombstone;

    const KEYS: u8 = 6;

    #[derive(Debug, Clone)]
    enum Op {
        /// Create (or, when present, update) a key; `relist` picks the cause.
        Create(u8, bool),
        /// Update (or, when absent, create) a key.
        Update(u8, bool),
        /// Delete a present key, with a tombstone when `true`.
        Delete(u8, bool),
        /// Replay every present object unchanged.
        Resync,
        /// The subscriber pops up to n notifications.
        Pop(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..KEYS, any::<bool>()).prop_map(|(k, r)| Op::Create(k, r)),
            (0..KEYS, any::<bool>()).prop_map(|(k, r)| Op::Update(k, r)),
            (0..KEYS, any::<bool>()).prop_map(|(k, t)| Op::Delete(k, t)),
            Just(Op::Resync),
            (0u8..8).prop_map(Op::Pop),
        ]
    }

    fn rv(o: &ConfigMap) -> String {
        o.metadata.resource_version.clone().unwrap_or_default()
    }

    /// Applies an event to a per-key state map, checking it makes sense for
    /// that map (an add of an absent key, an update or delete of a present one,
    /// an update whose `old` is the state last seen).
    fn apply(state: &mut BTreeMap<ObjectKey, String>, e: &Event<ConfigMap>) -> Result<(), String> {
        match e {
            Event::Added { key, object, .. } => {
                if let Some(prev) = state.insert(key.clone(), rv(object)) {
                    return Err(format!("add of {key} already at {prev}"));
                }
            }
            Event::Updated { key, old, new, .. } => {
                let seen = state.insert(key.clone(), rv(new));
                if seen.as_deref() != old.resource_version() {
                    return Err(format!(
                        "update of {key}: old {} but seen {seen:?}",
                        old.resource_version().unwrap_or_default()
                    ));
                }
            }
            Event::Deleted { key, .. } => {
                if state.remove(key).is_none() {
                    return Err(format!("delete of absent {key}"));
                }
            }
        }
        Ok(())
    }

    struct Sim {
        server: BTreeMap<ObjectKey, Arc<ConfigMap>>,
        version: u64,
        exact: BTreeMap<ObjectKey, String>,
        seen: BTreeMap<ObjectKey, String>,
        queue: ListenerQueue<ConfigMap>,
        initial_pushed: usize,
        initial_popped: usize,
        dropped_initial: usize,
        deleted: BTreeSet<ObjectKey>,
    }

    impl Sim {
        fn object(&mut self, key: &ObjectKey) -> Arc<ConfigMap> {
            self.version += 1;
            Arc::new(ConfigMap {
                metadata: ObjectMeta {
                    name: Some(key.name().into()),
                    resource_version: Some(self.version.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            })
        }

        fn push(&mut self, e: Event<ConfigMap>) -> Result<(), TestCaseError> {
            apply(&mut self.exact, &e).map_err(TestCaseError::fail)?;
            self.initial_pushed += usize::from(e.is_initial());
            let pushed = self
                .queue
                .push(e)
                .map_err(|f| TestCaseError::fail(f.to_string()))?;
            self.dropped_initial += pushed.dropped_initial;
            prop_assert!(self.queue.len() <= 2 * self.queue.pending_keys());
            prop_assert!(self.queue.pending_keys() <= usize::from(KEYS));
            Ok(())
        }

        fn pop(&mut self) -> Result<bool, TestCaseError> {
            let Some(e) = self.queue.pop() else {
                return Ok(false);
            };
            self.initial_popped += usize::from(e.is_initial());
            apply(&mut self.seen, &e).map_err(TestCaseError::fail)?;
            Ok(true)
        }

        fn upsert(&mut self, k: u8, relist: bool, initial: bool) -> Result<(), TestCaseError> {
            let key = ObjectKey::new(None, &format!("k{k}"));
            let new = self.object(&key);
            let cause = match (initial, relist) {
                (true, _) => Cause::Initial,
                (false, true) => Cause::Relist,
                (false, false) => Cause::Watch,
            };
            let event = match self.server.insert(key.clone(), new.clone()) {
                None => Event::Added {
                    key: key.clone(),
                    object: new,
                    cause,
                },
                Some(old) => Event::Updated {
                    key: key.clone(),
                    old: old.into(),
                    new,
                    cause,
                },
            };
            self.deleted.remove(&key);
            self.push(event)
        }

        fn run(&mut self, initial: &BTreeSet<u8>, ops: &[Op]) -> Result<(), TestCaseError> {
            for &k in initial {
                self.upsert(k, false, true)?;
            }
            for op in ops {
                match *op {
                    Op::Create(k, relist) | Op::Update(k, relist) => {
                        self.upsert(k, relist, false)?
                    }
                    Op::Delete(k, tomb) => {
                        let key = ObjectKey::new(None, &format!("k{k}"));
                        if let Some(last) = self.server.remove(&key) {
                            let (object, cause) = if tomb {
                                let t = Tombstone {
                                    key: key.clone(),
                                    last_known: Some(last),
                                };
                                (DeletedObject::Unknown(t), Cause::Relist)
                            } else {
                                (DeletedObject::Final(last), Cause::Watch)
                            };
                            self.deleted.insert(key.clone());
                            self.push(Event::Deleted { key, object, cause })?;
                        }
                    }
                    Op::Resync => {
                        let all: Vec<_> = self
                            .server
                            .iter()
                            .map(|(k, o)| (k.clone(), o.clone()))
                            .collect();
                        for (key, o) in all {
                            self.push(Event::Updated {
                                key,
                                old: o.clone().into(),
                                new: o,
                                cause: Cause::Resync,
                            })?;
                        }
                    }
                    Op::Pop(n) => {
                        for _ in 0..n {
                            self.pop()?;
                        }
                    }
                }
            }
            while self.pop()? {}
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn coalesced_delivery_matches_exact_delivery(
            initial in prop::collection::btree_set(0..KEYS, 0..=usize::from(KEYS)),
            ops in prop::collection::vec(op(), 0..200),
        ) {
            let mut sim = Sim {
                server: BTreeMap::new(),
                version: 0,
                exact: BTreeMap::new(),
                seen: BTreeMap::new(),
                queue: ListenerQueue::new(OverflowPolicy::Coalesce, 4),
                initial_pushed: 0,
                initial_popped: 0,
                dropped_initial: 0,
                deleted: BTreeSet::new(),
            };
            sim.run(&initial, &ops)?;
            prop_assert!(sim.queue.is_empty());
            let server: BTreeMap<_, _> = sim.server.iter().map(|(k, o)| (k.clone(), rv(o))).collect();
            prop_assert_eq!(&sim.exact, &server);
            prop_assert_eq!(&sim.seen, &sim.exact);
            for key in &sim.deleted {
                prop_assert!(!sim.seen.contains_key(key), "lost delete of {}", key);
            }
            prop_assert_eq!(sim.initial_pushed, sim.initial_popped + sim.dropped_initial);
        }
    }
}
