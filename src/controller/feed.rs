//! Feeders: one actor per informer the controller uses, subscribed with
//! `subscribe_batches`, turning each event into keys for the workqueue at the
//! priority of its cause (PQ-1).
//!
//! Why `Block` and not `Coalesce` (CTL-6): no event may be lost, and a
//! `Coalesce` listener that falls behind merges an add and a delete of one
//! object into nothing; for a secondary informer that is a child created and
//! deleted whose owner must still be reconciled. `Block` never merges, and it
//! cannot let a slow reconcile stall the informer: a feeder never waits for a
//! reconcile, only for the queue to take the batch's keys, which the queue
//! actor answers at once (an add is O(1), memory bounded by distinct keys).
//! The informer is held back only if the feeder cannot map keys as fast as
//! events arrive.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use actix::prelude::*;
use kinformer_actors::workqueue::{Add, Priority, WorkQueue};
use kinformer_actors::{Event, EventBatch, Object, ObjectKey};
use kube::Resource;

use super::last_known::LastKnown;
use super::scope::KeyFilter;
use crate::{OverflowPolicy, SubscribeOptions};

/// A feeder's subscription: batches, `Block` (CTL-6), the informer's resync period.
pub(crate) fn feeder_options() -> SubscribeOptions {
    SubscribeOptions::default()
        .policy(OverflowPolicy::Block)
        .capacity(4096)
        .batch_size(256)
}

/// Maps a secondary object to the keys of the primary objects to reconcile.
pub(crate) type Mapper<S> = Arc<dyn Fn(&S) -> Vec<ObjectKey> + Send + Sync>;

/// How a feeder turns events into keys.
pub(crate) enum Keys<S> {
    /// The primary informer: an event's own key; deletes are remembered (CTL-9).
    Own(Arc<LastKnown<S>>),
    /// A secondary informer: the keys its mapper names for the object's
    /// states (both of an update, so an owner that changed is reconciled too).
    Mapped(Mapper<S>),
}

/// The feeder actor of one informer.
pub(crate) struct Feeder<S> {
    pub(crate) queue: Addr<WorkQueue<ObjectKey>>,
    pub(crate) keys: Keys<S>,
    /// Set when the controller stops or its handle is dropped: the feeder
    /// stops at its next batch (its listener then forgets it).
    pub(crate) closed: Arc<AtomicBool>,
    /// Mapper calls that panicked (counted in the controller's metrics).
    pub(crate) mapper_panics: Arc<AtomicU64>,
    pub(crate) controller: Arc<str>,
    /// Whether a key is in this replica's feed scope; keys that are not
    /// are dropped (their owner reconciles them; CTL-11).
    pub(crate) admit: KeyFilter,
}

impl<S: Object> Actor for Feeder<S> {
    type Context = Context<Self>;
}

impl<S: Object> Feeder<S> {
    fn keys_of(&self, event: &Event<S>, now: Instant, out: &mut Vec<(ObjectKey, Priority)>) {
        let priority = Priority::of(event.cause());
        match &self.keys {
            Keys::Own(last_known) => {
                let key = event.key();
                let deleted = match event {
                    Event::Deleted { object, .. } => {
                        last_known.deleted(key, object.object(), now);
                        Some(object.object())
                    }
                    Event::Added { .. } | Event::Updated { .. } => {
                        last_known.exists(key);
                        None
                    }
                };
                // After recording the delete: a key sharded by its owner's
                // reads the owner from the last known state. A delete not
                // ours stays remembered for a while: if the key comes to
                // this replica, the scope change hands it over (CTL-11).
                if (self.admit)(key) {
                    if let Some(last) = deleted {
                        last_known.own(key, last);
                    }
                    out.push((key.clone(), priority));
                }
            }
            Keys::Mapped(map) => {
                // An update maps its old state too (its keys may have
                // moved); from a compact cache that decodes it here.
                let states: [Option<Arc<S>>; 2] = match event {
                    Event::Added { object, .. } => [Some(object.clone()), None],
                    Event::Updated { old, new, .. } if old.is(new) => [Some(new.clone()), None],
                    Event::Updated { old, new, .. } => [
                        Some(new.clone()),
                        old.get()
                            .inspect_err(|e| {
                                tracing::error!(
                                    controller = %self.controller,
                                    error = %e,
                                    "the old state is not mapped"
                                )
                            })
                            .ok(),
                    ],
                    Event::Deleted { object, .. } => [object.object().cloned(), None],
                };
                for state in states.iter().flatten() {
                    match std::panic::catch_unwind(AssertUnwindSafe(|| map(state))) {
                        Ok(keys) => out.extend(
                            keys.into_iter()
                                .filter(|k| (self.admit)(k))
                                .map(|k| (k, priority)),
                        ),
                        Err(_) => {
                            self.mapper_panics.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(
                                controller = %self.controller,
                                object = %event.key(),
                                "a `watches` mapper panicked; the object maps to no key"
                            );
                        }
                    }
                }
            }
        }
    }
}

impl<S: Object> Handler<EventBatch<S>> for Feeder<S> {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, batch: EventBatch<S>, ctx: &mut Context<Self>) -> Self::Result {
        if self.closed.load(Ordering::Relaxed) {
            ctx.stop();
            return Box::pin(async {});
        }
        let mut keys = Vec::with_capacity(batch.len());
        let now = super::last_known::now();
        for event in batch.iter() {
            self.keys_of(event, now, &mut keys);
        }
        // A fresh sender (see `Workers::queue`). Answered by the queue at
        // once; awaited so the listener's flow control sees this batch taken
        // only when its keys are queued.
        let queue = self.queue.clone();
        Box::pin(async move {
            let _ = queue.send(Add(keys)).await;
        })
    }
}

/// The primary kind an `owns` mapper looks for among ownerReferences.
#[derive(Debug, Clone)]
pub(crate) struct OwnerKind {
    pub(crate) kind: String,
    /// The API group (`""` for core), compared without the version.
    pub(crate) group: String,
    /// Cluster-scoped owners are keyed by name alone; namespaced ones in the
    /// child's namespace (an ownerReference cannot cross namespaces).
    pub(crate) cluster_scoped: bool,
}

impl OwnerKind {
    pub(crate) fn new(kind: &str, api_version: &str, cluster_scoped: bool) -> Self {
        OwnerKind {
            kind: kind.to_owned(),
            group: group_of(api_version).to_owned(),
            cluster_scoped,
        }
    }

    /// CTL-7: the key of `child`'s controller owner, if it is of this kind.
    pub(crate) fn owner_key<S: Resource>(&self, child: &S) -> Option<ObjectKey> {
        let meta = child.meta();
        let owner = meta.owner_references.as_ref()?.iter().find(|o| {
            o.controller == Some(true)
                && o.kind == self.kind
                && group_of(&o.api_version) == self.group
        })?;
        let namespace = (!self.cluster_scoped)
            .then_some(meta.namespace.as_deref())
            .flatten();
        Some(ObjectKey::new(namespace, &owner.name))
    }
}

/// `apps` of `apps/v1`, `""` of `v1`.
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    fn child(owners: Vec<OwnerReference>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ns".into()),
                owner_references: Some(owners),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn owner(kind: &str, api_version: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn ctl_7_owner_key_is_the_controller_owner_of_the_primary_kind() {
        let secrets = OwnerKind::new("Secret", "v1", false);
        let c = child(vec![
            owner("Secret", "v1", "not-controller", false),
            owner("Deployment", "apps/v1", "other-kind", true),
            owner("Secret", "v1", "mine", true),
        ]);
        assert_eq!(secrets.owner_key(&c), Some(ObjectKey::from("ns/mine")));
        assert_eq!(secrets.owner_key(&child(vec![])), None);

        let deployments = OwnerKind::new("Deployment", "apps/v1beta2", false);
        assert_eq!(
            deployments.owner_key(&c),
            Some(ObjectKey::from("ns/other-kind")),
            "any version"
        );
        let nodes = OwnerKind::new("Deployment", "apps/v1", true);
        assert_eq!(
            nodes.owner_key(&c),
            Some(ObjectKey::from("other-kind")),
            "cluster-scoped"
        );
        let wrong_group = OwnerKind::new("Deployment", "extensions/v1beta1", false);
        assert_eq!(wrong_group.owner_key(&c), None);
    }
}
