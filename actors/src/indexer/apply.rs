//! How popped deltas become cache writes and [`Event`]s with their [`Cause`]
//! (C-4, SI-8), and which subscribers get each event (SI-9, SI-10).
//!
//! - Each delta is one cache write and then one event, oldest first (C-4);
//!   the cache, not the delta type, tells an add from an update.
//! - A delete is `Watch`, or `Relist` for a tombstone (final state unknown).
//! - An add is `Initial` while the initial list is delivered (`Restored`
//!   when that list is a snapshot read from disk), `Watch` from a watch
//!   event, else `Relist`.
//! - An update whose resourceVersion changed is a real change: `Watch`, or
//!   `Relist` for a relist item (a `Sync` delta of a changed object
//!   included), never a resync the resync lane may merge away.
//! - An update whose resourceVersion did not change is *sync-only* (SI-8):
//!   it goes only to the subscribers whose resync sweep is in progress
//!   (client-go: flagged at the last check, SI-10), so a relist is no
//!   update storm. From a relist or a `Sync` delta it is a `Resync`.

use std::sync::atomic::Ordering;

use kube::Resource;

use super::cache::Cache;
use super::stats::IndexerStats;
use crate::delta::{Delta, Popped};
use crate::event::{Cause, Event};

/// One event of an applied batch.
pub(super) struct Applied<K> {
    pub(super) event: Event<K>,
    /// The update left the resourceVersion unchanged: only for the
    /// subscribers whose sweep is in progress (SI-10).
    pub(super) sync_only: bool,
}

/// Applies a batch to `cache`, oldest first, and publishes the result once;
/// returns its events in order. `initial` is the cause of the initial
/// list's adds: `Initial`, or `Restored` for a snapshot's.
pub(super) fn apply_batch<K: Resource + Send + Sync + 'static>(
    cache: &mut Cache<K>,
    stats: &IndexerStats,
    batch: Vec<Popped<K>>,
    initial: Cause,
) -> Vec<Applied<K>> {
    let mut events = Vec::with_capacity(batch.len());
    for popped in batch {
        apply(cache, stats, popped, initial, &mut events);
    }
    cache.publish();
    stats.objects.store(cache.len(), Ordering::Relaxed);
    events
}

/// The events of `applied` for one subscriber (SI-9): all but the sync-only
/// ones, which only a `syncing` subscriber gets.
pub(super) fn events_for<K>(applied: &[Applied<K>], syncing: bool) -> Vec<Event<K>> {
    applied
        .iter()
        .filter(|a| !a.sync_only || syncing)
        .map(|a| a.event.clone())
        .collect()
}

/// Applies one popped key's deltas, oldest first (C-4), appending their events.
fn apply<K: Resource + Send + Sync + 'static>(
    cache: &mut Cache<K>,
    stats: &IndexerStats,
    popped: Popped<K>,
    initial: Cause,
    out: &mut Vec<Applied<K>>,
) {
    let Popped {
        key,
        deltas,
        is_in_initial_list,
        ..
    } = popped;
    for delta in deltas {
        let (obj, delta_cause) = match delta {
            Delta::Deleted(object) => {
                cache.discard(&key);
                let cause = if object.is_final_state_unknown() {
                    stats.tombstones.fetch_add(1, Ordering::Relaxed);
                    Cause::Relist
                } else {
                    Cause::Watch
                };
                stats.deleted.fetch_add(1, Ordering::Relaxed);
                let event = Event::Deleted {
                    key: key.clone(),
                    object,
                    cause,
                };
                out.push(Applied {
                    event,
                    sync_only: false,
                });
                continue;
            }
            Delta::Added(o) | Delta::Updated(o) => (o, Cause::Watch),
            Delta::Replaced(o) => (o, Cause::Relist),
            Delta::Sync(o) => (o, Cause::Resync),
        };
        let upserted = cache.upsert(key.clone(), obj.clone());
        if !upserted.index_errors.is_empty() {
            stats
                .index_errors
                .fetch_add(upserted.index_errors.len() as u64, Ordering::Relaxed);
            for e in &upserted.index_errors {
                tracing::warn!(%e, "index function failed; object cached without that index value");
            }
        }
        let applied = match upserted.previous {
            Some(old) => {
                let unchanged = same_version(old.resource_version(), obj.as_ref());
                let cause = match delta_cause {
                    Cause::Watch => Cause::Watch,
                    _ if unchanged => Cause::Resync,
                    Cause::Resync => Cause::Relist,
                    other => other,
                };
                if !unchanged {
                    stats.updated.fetch_add(1, Ordering::Relaxed);
                }
                Applied {
                    event: Event::Updated {
                        key: key.clone(),
                        old,
                        new: obj,
                        cause,
                    },
                    sync_only: unchanged,
                }
            }
            None => {
                let cause = if is_in_initial_list {
                    initial
                } else if delta_cause == Cause::Watch {
                    Cause::Watch
                } else {
                    Cause::Relist
                };
                stats.added.fetch_add(1, Ordering::Relaxed);
                Applied {
                    event: Event::Added {
                        key: key.clone(),
                        object: obj,
                        cause,
                    },
                    sync_only: false,
                }
            }
        };
        out.push(applied);
    }
}

/// Both carry the same non-empty resourceVersion (SI-8's `isSync`); the
/// old state's is read without decoding it.
fn same_version<K: Resource>(old: Option<&str>, new: &K) -> bool {
    match (old, new.meta().resource_version.as_deref()) {
        (Some(x), Some(y)) => !x.is_empty() && x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta_fifo::{DeltaQueue, DeltaQueueOptions};
    use crate::key::ObjectKey;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::Arc;

    fn cm(name: &str) -> Arc<ConfigMap> {
        cm_at(name, "1")
    }

    fn cm_at(name: &str, rv: &str) -> Arc<ConfigMap> {
        crate::testing::configmap(name, rv)
    }

    /// (key, cause, sync-only) of each event.
    fn summary(applied: &[Applied<ConfigMap>]) -> Vec<(String, Cause, bool)> {
        applied
            .iter()
            .map(|a| (a.event.key().to_string(), cause(&a.event), a.sync_only))
            .collect()
    }

    fn cause(e: &Event<ConfigMap>) -> Cause {
        match e {
            Event::Added { cause, .. }
            | Event::Updated { cause, .. }
            | Event::Deleted { cause, .. } => *cause,
        }
    }

    fn pop_all(queue: &mut DeltaQueue<ConfigMap>) -> Vec<Popped<ConfigMap>> {
        let batch = queue.pop_batch(usize::MAX);
        for popped in &batch {
            queue.done(&popped.receipt);
        }
        batch
    }

    /// A `Sync` delta (DeltaFIFO without `emit_replaced`) of a changed object
    /// is a real change (`Relist`), never a resync that the resync lane may
    /// merge away; an unchanged one is a resync, for due subscribers only.
    #[test]
    fn a_sync_delta_of_a_changed_object_is_a_relist_change() {
        let (mut cache, stats) = (Cache::new(), IndexerStats::default());
        let mut queue = DeltaQueue::new(DeltaQueueOptions {
            emit_replaced: false,
        });
        queue.replace(vec![cm("a"), cm("b")], &cache).unwrap();
        let first = apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        assert_eq!(first.len(), 2);
        queue
            .replace(vec![cm_at("a", "2"), cm("b")], &cache)
            .unwrap();
        let second = apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        assert_eq!(
            summary(&second),
            [
                ("ns/a".to_string(), Cause::Relist, false),
                ("ns/b".to_string(), Cause::Resync, true),
            ]
        );
        // b is unchanged: only for subscribers due for a resync.
        let keys = |evs: Vec<Event<ConfigMap>>| -> Vec<String> {
            evs.iter().map(|e| e.key().to_string()).collect()
        };
        assert_eq!(keys(events_for(&second, false)), ["ns/a"]);
        assert_eq!(keys(events_for(&second, true)), ["ns/a", "ns/b"]);
    }

    /// C-4: each delta is one write and one event, oldest first; the cache,
    /// not the delta type, tells an add from an update.
    #[test]
    fn c4_each_delta_is_one_event_oldest_first() {
        let (mut cache, stats) = (Cache::new(), IndexerStats::default());
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        queue.add(cm("a"), &()).unwrap();
        queue.update(cm_at("a", "2"), &()).unwrap();
        queue.delete(cm_at("a", "3"), &()).unwrap();
        queue.update(cm("b"), &()).unwrap();
        let applied = apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        assert_eq!(
            summary(&applied),
            [
                ("ns/a".to_string(), Cause::Watch, false),
                ("ns/a".to_string(), Cause::Watch, false),
                ("ns/a".to_string(), Cause::Watch, false),
                ("ns/b".to_string(), Cause::Watch, false),
            ]
        );
        assert!(matches!(applied[0].event, Event::Added { .. }));
        assert!(matches!(applied[1].event, Event::Updated { .. }));
        assert!(matches!(applied[2].event, Event::Deleted { .. }));
        // An update of an object the cache does not hold is an add.
        assert!(matches!(applied[3].event, Event::Added { .. }));
        assert_eq!(cache.keys(), [ObjectKey::of(cm("b").as_ref()).unwrap()]);
        assert_eq!(stats.objects.load(Ordering::Relaxed), 1, "published");
        assert_eq!(cache.reader().snapshot().len(), 1, "published");
        let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(
            [
                &stats.added,
                &stats.updated,
                &stats.deleted,
                &stats.tombstones
            ]
            .map(count),
            [2, 1, 1, 0]
        );
    }

    /// Adds are `Initial` while the initial list is delivered, `Relist` from
    /// a later relist; a relist's tombstone is a `Relist` delete.
    #[test]
    fn adds_and_deletes_of_a_relist_are_relist_after_the_initial_list() {
        let (mut cache, stats) = (Cache::new(), IndexerStats::default());
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        queue.replace(vec![cm("a")], &cache).unwrap();
        let initial = apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        assert_eq!(
            summary(&initial),
            [("ns/a".to_string(), Cause::Initial, false)]
        );
        queue.replace(vec![cm("b")], &cache).unwrap();
        let relist = apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        let mut got = summary(&relist);
        got.sort();
        assert_eq!(
            got,
            [
                ("ns/a".to_string(), Cause::Relist, false),
                ("ns/b".to_string(), Cause::Relist, false),
            ]
        );
        let deleted = relist
            .iter()
            .find(|a| matches!(a.event, Event::Deleted { .. }))
            .expect("a's tombstone");
        assert_eq!(deleted.event.key().to_string(), "ns/a");
        assert_eq!(stats.tombstones.load(Ordering::Relaxed), 1);
        assert_eq!(stats.deleted.load(Ordering::Relaxed), 1);
    }

    /// SI-8: a watch update that leaves the resourceVersion unchanged keeps
    /// its `Watch` cause but is sync-only, and is not counted as an update.
    #[test]
    fn si8_an_update_with_an_unchanged_version_is_sync_only() {
        let (mut cache, stats) = (Cache::new(), IndexerStats::default());
        let mut queue = DeltaQueue::new(DeltaQueueOptions::default());
        queue.add(cm("a"), &()).unwrap();
        apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        queue.update(cm("a"), &()).unwrap();
        let applied = apply_batch(&mut cache, &stats, pop_all(&mut queue), Cause::Initial);
        assert_eq!(
            summary(&applied),
            [("ns/a".to_string(), Cause::Watch, true)]
        );
        assert_eq!(stats.updated.load(Ordering::Relaxed), 0);
        assert!(events_for(&applied, false).is_empty());
        assert_eq!(events_for(&applied, true).len(), 1);
    }

    /// An empty resourceVersion is never "unchanged": the update is a real one.
    #[test]
    fn an_empty_version_is_never_unchanged() {
        assert!(!same_version(Some(""), cm_at("a", "").as_ref()));
        assert!(same_version(Some("1"), cm("a").as_ref()));
        assert!(!same_version(Some("1"), cm_at("a", "2").as_ref()));
        assert!(!same_version(None, cm("a").as_ref()));
    }
}
