//! The Indexer's listeners: each one's address and the credit its
//! deliveries go on. A delivery goes unanswered while it fits in the room
//! the listener published ([`DeliveryCredit`]), else answered: the hand-out
//! then waits for that answer. Flow control by credit and answers, never by
//! actix mailbox capacity.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix::prelude::*;

use super::distribution::Delivery;
use super::stats::IndexerStats;
use crate::listener::{CreditLine, Deliver, DeliveryCredit, Listener, ListenerStats};
use crate::subscriber::SubscriberId;

/// A delivery sent answered.
pub(super) type Answered<K> = (SubscriberId, Addr<Listener<K>>, Deliver<K>);

/// A subscribed listener: its address and the credit its deliveries go on.
struct Outlet<K: Send + Sync + 'static> {
    addr: Addr<Listener<K>>,
    credit: CreditLine,
    /// Tells an unsubscribed listener's end from a lost one.
    stats: Arc<ListenerStats>,
}

/// The subscribed listeners.
pub(super) struct Outlets<K: Send + Sync + 'static> {
    /// By subscriber; `stats.listeners` is its length.
    outlets: BTreeMap<SubscriberId, Outlet<K>>,
    stats: Arc<IndexerStats>,
}

impl<K: Send + Sync + 'static> Outlets<K> {
    pub(super) fn new(stats: Arc<IndexerStats>) -> Self {
        Outlets {
            outlets: BTreeMap::new(),
            stats,
        }
    }

    pub(super) fn insert(
        &mut self,
        id: SubscriberId,
        addr: Addr<Listener<K>>,
        credit: Arc<DeliveryCredit>,
        stats: Arc<ListenerStats>,
    ) {
        let credit = CreditLine::new(credit);
        self.outlets.insert(
            id,
            Outlet {
                addr,
                credit,
                stats,
            },
        );
        self.count();
    }

    /// Forgets `id`'s listener; `lost`: its subscriber is gone (counted),
    /// unless its owner unsubscribed it meanwhile (the listener may stop
    /// before this actor reads the `Unsubscribe` behind a batch).
    pub(super) fn remove(&mut self, id: SubscriberId, lost: bool) {
        let removed = self.outlets.remove(&id);
        if lost && removed.is_some_and(|o| !o.stats.unsubscribed.load(Ordering::SeqCst)) {
            tracing::warn!(subscriber = %id, "listener is gone; removed");
            self.stats.listeners_lost.fetch_add(1, Ordering::Relaxed);
        }
        self.count();
    }

    fn count(&self) {
        let n = self.outlets.len();
        self.stats.listeners.store(n, Ordering::Relaxed);
    }

    pub(super) fn contains(&self, id: SubscriberId) -> bool {
        self.outlets.contains_key(&id)
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = SubscriberId> + '_ {
        self.outlets.keys().copied()
    }

    pub(super) fn addr(&self, id: SubscriberId) -> Option<&Addr<Listener<K>>> {
        self.outlets.get(&id).map(|o| &o.addr)
    }

    pub(super) fn addrs(&self) -> impl Iterator<Item = &Addr<Listener<K>>> {
        self.outlets.values().map(|o| &o.addr)
    }

    /// Sends each listener its events (none when empty), unanswered if its
    /// credit allows; returns the sends that must be answered, and the
    /// listeners found gone (still to [`remove`](Self::remove)).
    pub(super) fn send(
        &mut self,
        chunk: Vec<Delivery<K>>,
    ) -> (Vec<Answered<K>>, Vec<SubscriberId>) {
        let (mut answered, mut gone) = (Vec::new(), Vec::new());
        for (id, evs) in chunk {
            let Some(outlet) = self.outlets.get_mut(&id) else {
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
        (answered, gone)
    }
}

/// Sends each listener its delivery, all at once (now, in order with what
/// was sent before); resolves, once all answered, to the ids whose listener
/// is gone.
pub(super) fn send_answered<K: Send + Sync + 'static>(
    sends: Vec<Answered<K>>,
) -> impl Future<Output = Vec<SubscriberId>> + 'static {
    let answers = futures::future::join_all(sends.into_iter().map(|(id, addr, msg)| {
        let answer = addr.send(msg);
        async move { (id, matches!(answer.await, Ok(Ok(())))) }
    }));
    futures::FutureExt::map(answers, |answers| {
        answers
            .into_iter()
            .filter_map(|(id, ok)| (!ok).then_some(id))
            .collect()
    })
}
