//! The Indexer's feed for a snapshot writer (`InformerBuilder::persist`):
//! consistent cache states with the resourceVersion they are the server's
//! state at, and the keys changed since the last state the writer took.
//!
//! Why not a subscriber: a subscriber cannot know which resourceVersion the
//! events it has seen cover. The merged DeltaFIFO reorders changes across
//! keys (a key's deltas go at the place of its oldest), so after `A@7` a
//! subscriber may not have `B@6` yet; and the informer's last synced
//! resourceVersion is published when the DeltaFIFO *accepted* a batch, ahead
//! of the cache. The Indexer knows better: a batch that empties the DeltaFIFO
//! ([`Process::consistent_at`](super::Process)) leaves the cache exactly at
//! the server's state at that resourceVersion. At such a point the Indexer
//! hands over an O(1) copy of the cache (persistent maps), the
//! resourceVersion and the keys changed since the previous point; the writer
//! writes those keys' states from that copy and the resourceVersion in one
//! transaction, so what it commits is never ahead of, nor behind, its
//! resourceVersion.
//!
//! Off the hot path: the Indexer pays one set insert per change and a short
//! lock per consistent point; it never waits for the writer. A writer that
//! falls behind finds the points merged (the newest copy, the union of the
//! changed keys), and catches up in one transaction. Changed keys beyond
//! the cache's size (deleted ones count: churn over generated names while
//! the writer is stuck) become "every key", a rewrite of the whole file:
//! what is noted never outgrows the cache ([`MIN_KEYS_NOTED`]).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::apply::{Applied, apply_batch};
use super::cache::{Cache, Snapshot};
use super::messages::Process;
use super::stats::IndexerStats;
use crate::event::{Cause, Event};
use crate::key::ObjectKey;

/// One consistent state for the writer.
pub struct ConsistentPoint<K> {
    /// The cache at `resource_version`.
    pub snapshot: Snapshot<K>,
    /// The server's resourceVersion the cache is the state at.
    pub resource_version: String,
    /// Keys added, changed or deleted since the previous point taken (their
    /// state is `snapshot`'s: present or absent). Empty when `whole`.
    pub changed: HashSet<ObjectKey>,
    /// More keys changed than are noted one by one: every key may have,
    /// the writer rewrites the file whole.
    pub whole: bool,
}

/// Changed keys noted one by one up to the cache's size, or this many in a
/// small cache; more become a rewrite of every key.
pub const MIN_KEYS_NOTED: usize = 4096;

/// Whether `changed` outnumbers what is noted key by key for a cache of
/// `cached` objects.
fn too_many(changed: &HashSet<ObjectKey>, cached: usize) -> bool {
    changed.len() > cached.max(MIN_KEYS_NOTED)
}

/// Shared between the Indexer (which offers points) and one writer thread
/// (which takes them). See the module documentation.
pub struct SnapshotFeed<K> {
    /// The point offered and not taken yet.
    pending: Mutex<Option<ConsistentPoint<K>>>,
    ready: Condvar,
    /// Set (under the lock) by [`close`](Self::close): no more points are
    /// offered, and the Indexer stops noting changes.
    closed: AtomicBool,
}

impl<K> SnapshotFeed<K> {
    /// A feed with nothing offered yet.
    pub fn new() -> Arc<Self> {
        Arc::new(SnapshotFeed {
            pending: Mutex::new(None),
            ready: Condvar::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// Offers a point, merged into one not taken yet (`changed` is drained;
    /// `whole`: every key may have changed). The Indexer offers each
    /// consistent point; nothing once closed.
    pub fn offer(
        &self,
        snapshot: Snapshot<K>,
        rv: String,
        changed: &mut HashSet<ObjectKey>,
        whole: bool,
    ) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_closed() {
            changed.clear();
            return;
        }
        let point = match &mut *pending {
            Some(point) => {
                point.snapshot = snapshot;
                point.resource_version = rv;
                point.whole |= whole;
                if point.whole {
                    changed.clear();
                } else {
                    point.changed.extend(changed.drain());
                }
                point
            }
            None => pending.insert(ConsistentPoint {
                snapshot,
                resource_version: rv,
                changed: std::mem::take(changed),
                whole,
            }),
        };
        if point.whole || too_many(&point.changed, point.snapshot.len()) {
            point.whole = true;
            point.changed = HashSet::new();
        }
        drop(pending);
        self.ready.notify_one();
    }

    /// Waits at most `timeout` for a point and takes it. `Err(Closed)` once
    /// the Indexer is gone and everything offered was taken.
    pub fn take(&self, timeout: Duration) -> Result<Option<ConsistentPoint<K>>, FeedClosed> {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut pending, _) = self
            .ready
            .wait_timeout_while(pending, timeout, |p| p.is_none() && !self.is_closed())
            .unwrap_or_else(PoisonError::into_inner);
        match pending.take() {
            Some(point) => Ok(Some(point)),
            None if self.is_closed() => Err(FeedClosed),
            None => Ok(None),
        }
    }

    /// No more points: the Indexer stopped, the informer was stopped, or
    /// the writer gave up. A point offered before is still taken; wakes the
    /// writer.
    pub fn close(&self) {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, Ordering::Relaxed);
        drop(pending);
        self.ready.notify_all();
    }

    /// No more points, and the one offered and not taken is dropped: the
    /// writer failed or never started, so nothing will take it (kept, it
    /// would hold a copy of the cache as the cache moves on).
    pub fn abandon(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, Ordering::Relaxed);
        let dropped = pending.take();
        drop(pending);
        drop(dropped);
        self.ready.notify_all();
    }

    /// True once [`close`](Self::close)d or [`abandon`](Self::abandon)ed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

/// The Indexer is gone and every point was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the indexer feeding the snapshot writer stopped")]
pub struct FeedClosed;

/// Applies `process` to `cache` ([`apply_batch`]) and tells `outlet`, if
/// the informer persists, what it changed and where the cache stands.
pub(super) fn apply_noted<K: kube::Resource + Send + Sync + 'static>(
    cache: &mut Cache<K>,
    stats: &IndexerStats,
    process: Process<K>,
    outlet: Option<&mut FeedOutlet<K>>,
) -> Vec<Applied<K>> {
    let initial = process.initial_cause();
    let events = apply_batch(cache, stats, process.batch, initial);
    if let Some(outlet) = outlet {
        outlet.applied(&events, process.consistent_at, cache);
    }
    events
}

/// The Indexer's side: the keys changed since the last point offered.
pub(super) struct FeedOutlet<K> {
    feed: Arc<SnapshotFeed<K>>,
    changed: HashSet<ObjectKey>,
    /// More keys changed since the last point than the cache holds (a
    /// DeltaFIFO that never empties under churn): every key may have.
    whole: bool,
}

impl<K: kube::Resource + Send + Sync + 'static> FeedOutlet<K> {
    pub(super) fn new(feed: Arc<SnapshotFeed<K>>) -> Self {
        FeedOutlet {
            feed,
            changed: HashSet::new(),
            whole: false,
        }
    }

    /// A batch was applied: notes the keys it changed (restored adds are on
    /// disk already, unchanged relist items changed nothing), and offers a
    /// point when the batch left the cache consistent at a resourceVersion.
    pub(super) fn applied(
        &mut self,
        applied: &[Applied<K>],
        consistent_at: Option<String>,
        cache: &Cache<K>,
    ) {
        // A closed feed takes no more points: noting changes would only grow.
        if self.feed.is_closed() {
            self.changed.clear();
            return;
        }
        for a in applied {
            let restored = matches!(
                a.event,
                Event::Added {
                    cause: Cause::Restored,
                    ..
                }
            );
            if !a.sync_only && !restored && !self.whole {
                self.changed.insert(a.event.key().clone());
            }
        }
        if too_many(&self.changed, cache.len()) {
            self.whole = true;
            self.changed = HashSet::new();
        }
        if let Some(rv) = consistent_at.filter(|rv| !rv.is_empty()) {
            let whole = std::mem::take(&mut self.whole);
            self.feed
                .offer(cache.snapshot(), rv, &mut self.changed, whole);
        }
    }
}

impl<K> Drop for FeedOutlet<K> {
    fn drop(&mut self) {
        self.feed.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::configmap;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn applied(name: &str, cause: Cause, sync_only: bool) -> Applied<ConfigMap> {
        let object = configmap(name, "1");
        Applied {
            event: Event::Added {
                key: ObjectKey::of(object.as_ref()).unwrap(),
                object,
                cause,
            },
            sync_only,
        }
    }

    fn names(point: &ConsistentPoint<ConfigMap>) -> Vec<String> {
        let mut v: Vec<String> = point.changed.iter().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    /// A writer that failed abandons the feed: the point it did not take is
    /// dropped at once (it would hold a copy of the cache), and none is
    /// offered after.
    #[test]
    fn an_abandoned_feed_drops_its_point_and_takes_no_more() {
        let feed = SnapshotFeed::new();
        let mut cache = Cache::<ConfigMap>::new();
        let object = configmap("a", "1");
        cache.upsert(ObjectKey::of(object.as_ref()).unwrap(), object.clone());
        cache.publish();
        feed.offer(cache.snapshot(), "5".into(), &mut HashSet::new(), false);
        feed.abandon();
        assert!(
            matches!(feed.take(Duration::ZERO), Err(FeedClosed)),
            "the point offered before is gone"
        );
        let mut changed = HashSet::from([ObjectKey::of(object.as_ref()).unwrap()]);
        feed.offer(cache.snapshot(), "6".into(), &mut changed, false);
        assert!(changed.is_empty(), "changes are no longer kept");
        assert!(matches!(feed.take(Duration::ZERO), Err(FeedClosed)));
        // Nor noted by the Indexer's side between consistent points.
        let mut outlet = FeedOutlet::new(feed.clone());
        outlet.applied(&[applied("b", Cause::Watch, false)], None, &cache);
        assert!(outlet.changed.is_empty());
    }

    /// More changed keys than the cache holds (or than [`MIN_KEYS_NOTED`])
    /// are not kept one by one, on either side of the feed: the point says
    /// "every key" and the writer rewrites the file whole, so a stuck
    /// writer under churn over generated names holds no growing set.
    #[test]
    fn changes_beyond_the_cache_size_become_a_whole_rewrite() {
        let feed = SnapshotFeed::new();
        let mut outlet = FeedOutlet::new(feed.clone());
        let cache = Cache::<ConfigMap>::new();
        let many: Vec<_> = (0..=MIN_KEYS_NOTED)
            .map(|i| applied(&format!("gen-{i}"), Cause::Watch, false))
            .collect();
        outlet.applied(&many, None, &cache);
        assert!(outlet.whole && outlet.changed.is_empty());
        outlet.applied(&[applied("a", Cause::Watch, false)], None, &cache);
        assert!(outlet.changed.is_empty(), "nothing noted while whole");
        outlet.applied(&[], Some("5".into()), &cache);
        assert!(!outlet.whole, "handed on with the point");
        outlet.applied(
            &[applied("b", Cause::Watch, false)],
            Some("6".into()),
            &cache,
        );
        let point = feed.take(Duration::ZERO).unwrap().unwrap();
        assert_eq!(point.resource_version, "6");
        assert!(point.whole, "a merged point stays whole");
        assert!(point.changed.is_empty());
        // The writer's side alone: points merged past the bound.
        let mut changed: HashSet<ObjectKey> = (0..MIN_KEYS_NOTED)
            .map(|i| ObjectKey::from(format!("ns/k-{i}").as_str()))
            .collect();
        feed.offer(cache.snapshot(), "7".into(), &mut changed, false);
        assert!(changed.is_empty());
        let mut more = HashSet::from([ObjectKey::from("ns/one-more")]);
        feed.offer(cache.snapshot(), "8".into(), &mut more, false);
        let point = feed.take(Duration::ZERO).unwrap().unwrap();
        assert!(point.whole && point.changed.is_empty());
        outlet.applied(
            &[applied("c", Cause::Watch, false)],
            Some("9".into()),
            &cache,
        );
        let point = feed.take(Duration::ZERO).unwrap().unwrap();
        assert!(!point.whole);
        assert_eq!(names(&point), ["ns/c"]);
    }

    /// Points not taken yet merge: the newest resourceVersion, the union of
    /// the changed keys; restored adds and unchanged items are not changes;
    /// nothing is offered between consistent points.
    #[test]
    fn points_merge_until_taken_and_only_real_changes_count() {
        let feed = SnapshotFeed::new();
        let mut outlet = FeedOutlet::new(feed.clone());
        let cache = Cache::<ConfigMap>::new();
        outlet.applied(
            &[applied("r", Cause::Restored, false)],
            Some("5".into()),
            &cache,
        );
        outlet.applied(&[applied("a", Cause::Watch, false)], None, &cache);
        assert_eq!(
            feed.take(Duration::ZERO)
                .unwrap()
                .map(|p| p.resource_version),
            Some("5".into())
        );
        assert!(
            feed.take(Duration::ZERO).unwrap().is_none(),
            "a is not at a consistent point yet"
        );
        outlet.applied(
            &[
                applied("b", Cause::Relist, false),
                applied("c", Cause::Resync, true),
            ],
            Some("7".into()),
            &cache,
        );
        outlet.applied(
            &[applied("d", Cause::Watch, false)],
            Some("9".into()),
            &cache,
        );
        let point = feed.take(Duration::ZERO).unwrap().unwrap();
        assert_eq!(point.resource_version, "9");
        assert_eq!(names(&point), ["ns/a", "ns/b", "ns/d"]);
        outlet.applied(
            &[applied("e", Cause::Watch, false)],
            Some("11".into()),
            &cache,
        );
        drop(outlet);
        let last = feed.take(Duration::from_secs(5)).unwrap().unwrap();
        assert_eq!(
            last.resource_version, "11",
            "offered before the close: still taken"
        );
        assert_eq!(feed.take(Duration::from_secs(5)).err(), Some(FeedClosed));
    }
}
