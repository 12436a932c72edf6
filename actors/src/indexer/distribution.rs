//! A batch's hand-out: its events go to the listeners it was applied for,
//! [`CHUNK`] at a time, each chunk once every listener accepted the one
//! before (on credit, or answered), so a full `Block` listener parks one
//! chunk at most. The batch is answered once its last chunk is accepted.

use std::sync::Arc;

use super::apply::{Applied, events_for};
use crate::event::Event;
use crate::subscriber::SubscriberId;

/// Most events per `Deliver` or `DeliverResync`: large batches (the initial
/// list) and resync sweeps go to the listeners in chunks of this many.
pub(super) const CHUNK: usize = 256;

/// The events one listener receives from one step of work, shared with the
/// other listeners that receive the same.
pub(super) type Delivery<K> = (SubscriberId, Arc<[Event<K>]>);

/// One applied batch, being handed out a chunk at a time.
pub(super) struct HandOut<K> {
    /// The batch's events, in order.
    events: Vec<Applied<K>>,
    /// Its listeners, fixed when it was applied (a listener subscribed
    /// later has it in its replay), each with whether its resync sweep was
    /// in progress then (it gets the sync-only events, SI-10).
    targets: Vec<(SubscriberId, bool)>,
    /// The first event not handed out yet: `pos <= events.len()`.
    pos: usize,
}

impl<K> HandOut<K> {
    /// A hand-out of `events` to `targets`.
    pub(super) fn new(events: Vec<Applied<K>>, targets: Vec<(SubscriberId, bool)>) -> Self {
        HandOut {
            events,
            targets,
            pos: 0,
        }
    }

    /// The next chunk for each target still `subscribed` (possibly empty;
    /// an empty batch has one empty chunk).
    pub(super) fn next_chunk(
        &mut self,
        subscribed: impl Fn(SubscriberId) -> bool,
    ) -> Vec<Delivery<K>> {
        let end = (self.pos + CHUNK).min(self.events.len());
        let chunk = &self.events[self.pos..end];
        self.pos = end;
        // One copy of the chunk for every listener, a second only when a
        // sync-only event makes syncing listeners' differ (SI-10).
        let all: Arc<[Event<K>]> = chunk.iter().map(|a| a.event.clone()).collect();
        let without_sync_only = chunk.iter().any(|a| a.sync_only).then(|| {
            let events: Arc<[Event<K>]> = events_for(chunk, false).into();
            events
        });
        self.targets
            .iter()
            .filter(|(id, _)| subscribed(*id))
            .map(|&(id, syncing)| match (&without_sync_only, syncing) {
                (Some(events), false) => (id, events.clone()),
                _ => (id, all.clone()),
            })
            .collect()
    }

    /// Every chunk was handed out.
    pub(super) fn is_done(&self) -> bool {
        self.pos == self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Cause;
    use crate::key::ObjectKey;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn added(i: usize, sync_only: bool) -> Applied<ConfigMap> {
        let object = crate::testing::configmap(&format!("o{i:03}"), "1");
        Applied {
            event: Event::Added {
                key: ObjectKey::of(object.as_ref()).unwrap(),
                object,
                cause: Cause::Watch,
            },
            sync_only,
        }
    }

    fn sizes(chunk: &[Delivery<ConfigMap>]) -> Vec<(u64, usize)> {
        chunk.iter().map(|(id, evs)| (id.0, evs.len())).collect()
    }

    /// A batch goes out a chunk at a time, in order, to the same targets.
    #[test]
    fn a_batch_is_handed_out_a_chunk_at_a_time() {
        let events = (0..CHUNK + 44).map(|i| added(i, false)).collect();
        let mut out = HandOut::new(
            events,
            vec![(SubscriberId(1), false), (SubscriberId(2), true)],
        );
        let first = out.next_chunk(|_| true);
        assert_eq!(sizes(&first), [(1, CHUNK), (2, CHUNK)]);
        assert_eq!(first[0].1[0].key().to_string(), "ns/o000");
        assert!(!out.is_done(), "the rest is still to hand out");
        let second = out.next_chunk(|_| true);
        assert_eq!(sizes(&second), [(1, 44), (2, 44)]);
        assert_eq!(second[0].1[0].key().to_string(), format!("ns/o{CHUNK:03}"));
        assert!(out.is_done());
    }

    /// An empty batch is one empty step, after which it is done.
    #[test]
    fn an_empty_batch_is_handed_out_in_one_empty_chunk() {
        let mut out = HandOut::<ConfigMap>::new(Vec::new(), vec![(SubscriberId(1), false)]);
        assert_eq!(sizes(&out.next_chunk(|_| true)), [(1, 0)]);
        assert!(out.is_done());
    }

    /// A listener gone during a hand-out gets none of the later chunks; the
    /// sync-only events go to syncing targets only (SI-10).
    #[test]
    fn later_chunks_skip_gone_listeners_and_sync_only_events_skip_idle_ones() {
        let events = (0..CHUNK + 2).map(|i| added(i, i % 2 == 1)).collect();
        let mut out = HandOut::new(
            events,
            vec![(SubscriberId(1), false), (SubscriberId(2), true)],
        );
        assert_eq!(
            sizes(&out.next_chunk(|_| true)),
            [(1, CHUNK / 2), (2, CHUNK)]
        );
        assert_eq!(sizes(&out.next_chunk(|id| id != SubscriberId(2))), [(1, 1)]);
    }
}
