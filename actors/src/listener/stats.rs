//! What a listener publishes: live counters, readable from any thread
//! (metrics, status), and its sync state (HS-2).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use tokio::sync::watch;

use super::delivery::{Delivery, Sent};
use crate::subscriber::SubscriberId;

/// Live counters of one listener, written by the listener only.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Notifications waiting in the queue.
    pub pending: AtomicUsize,
    /// Notifications sent to the subscriber whose handler call has not
    /// returned yet (at most the pipeline depth, or one batch).
    pub in_flight: AtomicUsize,
    /// Notifications handled by the subscriber.
    pub delivered: AtomicU64,
    /// Resync notifications handled by the subscriber.
    pub resyncs: AtomicU64,
    /// Notifications merged away (Coalesce).
    pub coalesced: AtomicU64,
    /// The subscriber's actor stopped; the listener removed itself.
    pub gone: AtomicBool,
    /// Its owner ended the subscription (set before the Indexer and the
    /// listener are told): the listener's end is no loss, whichever of them
    /// notices it first.
    pub unsubscribed: AtomicBool,
    /// Turns of an inline handler that took [`SLOW_INLINE_TURN`](super::options::SLOW_INLINE_TURN)
    /// or longer, holding every actor of their thread back.
    pub slow_inline_turns: AtomicU64,
}

impl ListenerStats {
    /// What `delivery` has pending, in flight and merged away, and whether
    /// it synced on `synced`: never, for a subscriber gone before (SI-T21).
    pub(super) fn publish<K, R>(&self, delivery: &Delivery<K, R>, synced: &SyncedChannel) {
        self.pending
            .store(delivery.pending_len(), Ordering::Relaxed);
        self.in_flight
            .store(delivery.in_flight_events(), Ordering::Relaxed);
        self.coalesced
            .store(delivery.coalesced(), Ordering::Relaxed);
        synced.set_unless_gone(delivery.has_synced(), self.gone.load(Ordering::Relaxed));
    }

    /// The subscriber is gone: logged and marked, unless it `unsubscribed`.
    pub(super) fn lost(&self, id: SubscriberId, why: &dyn std::fmt::Display, unsubscribed: bool) {
        if !unsubscribed {
            tracing::warn!(subscriber = %id, %why, "subscriber is gone; removing its listener");
            self.gone.store(true, Ordering::Relaxed);
        }
    }

    /// A handler call returned: the subscriber handled what it carried.
    pub(super) fn handled(&self, sent: &Sent) {
        self.delivered
            .fetch_add(sent.events as u64, Ordering::Relaxed);
        if sent.resyncs > 0 {
            self.resyncs
                .fetch_add(sent.resyncs as u64, Ordering::Relaxed);
        }
    }
}

/// The channel a listener reports its sync state on.
pub(super) struct SyncedChannel {
    tx: watch::Sender<bool>,
    /// What `tx` was last set to: reading the channel itself takes its lock,
    /// for a value only this listener writes.
    sent: Cell<bool>,
}

impl SyncedChannel {
    pub(super) fn new(tx: watch::Sender<bool>) -> Self {
        let sent = Cell::new(*tx.borrow());
        SyncedChannel { tx, sent }
    }

    /// Reports `synced` unless it was reported already; once the subscriber
    /// is `gone`, a handle not synced yet never turns synced.
    #[inline]
    fn set_unless_gone(&self, synced: bool, gone: bool) {
        if self.sent.get() != synced && !(synced && gone) {
            self.tx.send_replace(synced);
            self.sent.set(synced);
        }
    }
}
