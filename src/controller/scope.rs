//! Which keys this replica's controller may reconcile now (CTL-10..CTL-12):
//! every key (alone, or while it leads), none (standing by), or a shard's.
//!
//! The controller keeps two views of the scope, both moved by
//! `govern` through [`change`]: the *feed* scope, which the feeders use to
//! drop keys that are not ours, and the *work* scope, which the workers check
//! when a key is handed out and while it is reconciled. On a change the work
//! scope moves first (reconciles of lost keys are cancelled at once), then
//! the feeders', then the keys newly owned are queued from the caches: an
//! event a feeder dropped under the old scope is already in the cache read
//! after (the Indexer publishes a batch before delivering it), and a delete
//! it dropped is remembered for a while and handed over (CTL-11).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use actix::Addr;
use kinformer_actors::workqueue::{Add, Priority, WorkQueue};
use kinformer_actors::{Object, ObjectKey};
use tokio::sync::watch;

use super::last_known::{LastKnown, now};
use crate::store::Store;

/// Whether a shard owns a key (by its shard key: the key itself, or what
/// [`Controller::shard_key`](super::Controller::shard_key) maps it to).
pub(crate) type KeyFilter = Arc<dyn Fn(&ObjectKey) -> bool + Send + Sync>;

/// The keys a controller may reconcile.
#[derive(Clone)]
pub(crate) enum Scope {
    /// Every key: a controller alone, or the leader.
    All,
    /// None: a standby (not leading), or a shard member not yet admitted.
    Nothing,
    /// The keys a shard assignment gives this replica now.
    Keys(KeyFilter),
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => f.write_str("All"),
            Scope::Nothing => f.write_str("Nothing"),
            Scope::Keys(_) => f.write_str("Keys"),
        }
    }
}

impl Scope {
    /// Whether a key whose shard key is `shard_key` is in scope.
    pub(crate) fn owns(&self, shard_key: &ObjectKey) -> bool {
        match self {
            Scope::All => true,
            Scope::Nothing => false,
            Scope::Keys(filter) => filter(shard_key),
        }
    }

    /// True when every key is in scope (no shard key needs computing).
    pub(crate) fn is_all(&self) -> bool {
        matches!(self, Scope::All)
    }
}

/// Maps a primary object to the key it is sharded by (its owner's, say).
pub(crate) type ShardKeyFn<K> = Arc<dyn Fn(&K) -> Option<ObjectKey> + Send + Sync>;

/// Decides whether a key is in a scope, reading the object (for its shard
/// key) from the cache or, for a deleted one, its last known state.
pub(crate) struct Ownership<K> {
    pub(crate) store: Store<K>,
    pub(crate) last_known: Arc<LastKnown<K>>,
    pub(crate) shard_key: Option<ShardKeyFn<K>>,
}

impl<K> Clone for Ownership<K> {
    fn clone(&self) -> Self {
        Ownership {
            store: self.store.clone(),
            last_known: self.last_known.clone(),
            shard_key: self.shard_key.clone(),
        }
    }
}

impl<K: Object> Ownership<K> {
    /// The key `key` is sharded by: the mapped key of its object (cached,
    /// else last known), else `key` itself.
    pub(crate) fn shard_key_of(&self, key: &ObjectKey) -> ObjectKey {
        let Some(map) = &self.shard_key else {
            return key.clone();
        };
        let object = self
            .store
            .snapshot()
            .get(key)
            .or_else(|| self.last_known.get(key));
        object
            .and_then(|o| {
                // A panicking mapper shards the key by itself.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| map(&o)))
                    .ok()
                    .flatten()
            })
            .unwrap_or_else(|| key.clone())
    }

    /// Whether `key` is in `scope`.
    pub(crate) fn owns(&self, scope: &Scope, key: &ObjectKey) -> bool {
        scope.is_all() || scope.owns(&self.shard_key_of(key))
    }

    /// A filter over the current feed scope, for the feeders.
    pub(crate) fn admit(&self, feed: watch::Receiver<Scope>) -> KeyFilter {
        let ownership = self.clone();
        Arc::new(move |key| ownership.owns(&feed.borrow(), key))
    }
}

/// The scope's channels: the source's (elector, shard member), and the two
/// the controller derives from it.
pub(crate) struct ScopeChannels {
    /// Where the scope comes from; a closed channel keeps its last value.
    pub(crate) source: watch::Receiver<Scope>,
    pub(crate) feed: watch::Sender<Scope>,
    pub(crate) work: watch::Sender<Scope>,
}

impl ScopeChannels {
    /// Channels starting from `source`'s scope for the feeders, and nothing
    /// for the workers until the first [`change`].
    pub(crate) fn new(source: watch::Receiver<Scope>) -> Self {
        let initial = source.borrow().clone();
        ScopeChannels {
            source,
            feed: watch::channel(initial).0,
            work: watch::channel(Scope::Nothing).0,
        }
    }
}

/// Moves the scope from `old` to `new` (see the module docs): the workers',
/// then the feeders', then queues the keys newly owned: the remembered
/// deletes handed over (CTL-11) as real changes, the cached objects at
/// `Low`, as an initial list's (real changes go first, PQ-1). A key gained
/// is reconciled once, or twice if it changes while this runs. Answers how
/// many it queued.
pub(crate) async fn change<K: Object>(
    channels: &ScopeChannels,
    ownership: &Ownership<K>,
    queue: &Addr<WorkQueue<ObjectKey>>,
    old: &Scope,
    new: Scope,
) -> usize {
    channels.work.send_replace(new.clone());
    channels.feed.send_replace(new.clone());
    // After the feed scope moved: a delete the feeders judged under the old
    // scope is remembered by now, and handed over here if it became ours.
    let deletes = ownership
        .last_known
        .rescope(|key| ownership.owns(&new, key), now());
    let snapshot = ownership.store.snapshot();
    let gained: HashSet<ObjectKey> = snapshot
        .keys()
        .into_iter()
        .filter(|key| ownership.owns(&new, key) && !ownership.owns(old, key))
        .collect();
    let queued = gained.len() + deletes.len();
    // Handed-over deletes are real changes: ahead of the cached objects (PQ-1).
    let gained: Vec<_> = deletes
        .into_iter()
        .map(|k| (k, Priority::Normal))
        .chain(gained.into_iter().map(|k| (k, Priority::Low)))
        .collect();
    if !gained.is_empty() {
        // Answered at once (a fresh sender, see `Workers::queue`).
        let _ = queue.clone().send(Add(gained)).await;
    }
    queued
}
