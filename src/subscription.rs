//! Subscribing an actor to an informer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use kinformer_actors::Object;
use kinformer_actors::SubscriberId;
use kinformer_actors::indexer::{Indexer, Unsubscribe};
use kinformer_actors::listener::{Listener, ListenerStats, OverflowPolicy, StopListener};
use kinformer_actors::resync::{CancelResync, ResyncTimer, ScheduleResync};
use tokio::sync::watch;

use kinformer_actors::reflector::RequestFailure;

use crate::error::InformerError;
use crate::wait::wait_synced;

/// How one subscriber wants to be served.
///
/// ```
/// use std::time::Duration;
/// use kinformer::{OverflowPolicy, SubscribeOptions};
///
/// // A slow consumer that only needs the latest state of each object,
/// // replayed every 5 minutes.
/// let options = SubscribeOptions::default()
///     .policy(OverflowPolicy::Coalesce)
///     .resync(Duration::from_secs(300))
///     .capacity(4096);
/// assert_eq!(options.capacity, 4096);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct SubscribeOptions {
    /// Resync period; `None` takes the informer's default, `Some(ZERO)` never resyncs.
    pub resync: Option<Duration>,
    /// What happens when the subscriber falls behind.
    pub policy: OverflowPolicy,
    /// Bound of a `Block` queue (notifications); allocation hint for `Coalesce`.
    pub capacity: usize,
    /// Most events per [`EventBatch`](crate::EventBatch) ([`Informer::subscribe_batches`](crate::Informer::subscribe_batches) only).
    pub batch_size: usize,
    /// Most events in the subscriber's mailbox at once
    /// ([`Informer::subscribe_pipelined`](crate::Informer::subscribe_pipelined)),
    /// or in a stream's channel ([`Informer::stream`](crate::Informer::stream)).
    pub pipeline: usize,
}

impl SubscribeOptions {
    /// The listener queue's capacity unless set.
    pub const DEFAULT_CAPACITY: usize = 1024;
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            resync: None,
            policy: OverflowPolicy::Block,
            capacity: Self::DEFAULT_CAPACITY,
            batch_size: 256,
            pipeline: 8,
        }
    }
}

impl SubscribeOptions {
    /// Resync every `period` (`ZERO` = never; below one second is raised to one second).
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }

    /// The overflow policy.
    pub fn policy(mut self, policy: OverflowPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The queue capacity in notifications (at least 1: 0 is raised to 1).
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// Most events per batch for batched subscriptions (at least 1).
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size.max(1);
        self
    }

    /// Most events sent to a pipelined subscriber, an event stream or a
    /// closure (`subscribe_fn`) and not yet handled (at least 1). Deeper means fewer wake-ups per event; events already sent
    /// are no longer merged by `Coalesce` nor dropped by an unsubscribe.
    pub fn pipeline(mut self, depth: usize) -> Self {
        self.pipeline = depth.max(1);
        self
    }
}

/// What a subscription asks of its informer. Holding it keeps the informer
/// (and its Reflector's supervisor) alive while subscribed.
pub(crate) trait InformerLink: Send + Sync {
    /// Turns `true` once the informer is stopped.
    fn stopped(&self) -> watch::Receiver<bool>;
    /// The informer's last failed request, if any since its last list.
    fn last_failure(&self) -> Option<RequestFailure>;
}

/// Everything a [`Subscription`] is made of, as the informer set it up.
pub(crate) struct SubscriptionParts<K: Object> {
    pub(crate) id: SubscriberId,
    pub(crate) listener: Addr<Listener<K>>,
    pub(crate) indexer: Addr<Indexer<K>>,
    pub(crate) resync: Addr<ResyncTimer>,
    pub(crate) resync_period: Duration,
    pub(crate) synced: watch::Receiver<bool>,
    pub(crate) stats: Arc<ListenerStats>,
    pub(crate) informer: Arc<dyn InformerLink>,
}

/// A live subscription: its sync state, counters, and how to end it.
///
/// Clones are handles to the same subscription: [`Subscription::unsubscribe`]
/// through any of them ends it.
pub struct Subscription<K: Object> {
    id: SubscriberId,
    listener: Addr<Listener<K>>,
    indexer: Addr<Indexer<K>>,
    resync: Addr<ResyncTimer>,
    /// The period in force, in nanoseconds, shared by the clones.
    resync_period: Arc<AtomicU64>,
    synced: watch::Receiver<bool>,
    /// Shared by the clones; its `unsubscribed` is set by an unsubscribe
    /// through any of them.
    stats: Arc<ListenerStats>,
    informer: Arc<dyn InformerLink>,
}

/// A snapshot of one subscription's counters ([`Subscription::stats`]),
/// each read on its own (a notification in transit may show in neither
/// `pending` nor `in_flight`, or in both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriptionStats {
    /// Notifications waiting in the subscription's queue.
    pub pending: usize,
    /// Notifications sent to the subscriber whose handler call has not
    /// returned yet (at most the pipeline depth, or one batch).
    pub in_flight: usize,
    /// Notifications handled by the subscriber.
    pub delivered: u64,
    /// Of which resync notifications.
    pub resyncs: u64,
    /// Notifications merged away (`Coalesce`).
    pub coalesced: u64,
    /// The subscriber's actor stopped; the subscription ended.
    pub gone: bool,
    /// Turns of an inline handler ([`Informer::subscribe_inline`](crate::Informer::subscribe_inline))
    /// that took 100 ms or longer, holding back every actor of their thread
    /// (logged, at most once per 10 s per subscription).
    pub slow_inline_turns: u64,
}

impl<K: Object> Clone for Subscription<K> {
    fn clone(&self) -> Self {
        Subscription {
            id: self.id,
            listener: self.listener.clone(),
            indexer: self.indexer.clone(),
            resync: self.resync.clone(),
            resync_period: self.resync_period.clone(),
            synced: self.synced.clone(),
            stats: self.stats.clone(),
            informer: self.informer.clone(),
        }
    }
}

/// `period` in nanoseconds, saturated (585 years).
fn nanos(period: Duration) -> u64 {
    u64::try_from(period.as_nanos()).unwrap_or(u64::MAX)
}

impl<K: Object> std::fmt::Debug for Subscription<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("resync_period", &self.resync_period())
            .field("synced", &self.has_synced())
            .field("gone", &self.is_gone())
            .finish_non_exhaustive()
    }
}

impl<K: Object> Subscription<K> {
    pub(crate) fn new(parts: SubscriptionParts<K>) -> Self {
        let SubscriptionParts {
            id,
            listener,
            indexer,
            resync,
            resync_period,
            synced,
            stats,
            informer,
        } = parts;
        Subscription {
            id,
            listener,
            indexer,
            resync,
            resync_period: Arc::new(AtomicU64::new(nanos(resync_period))),
            synced,
            stats,
            informer,
        }
    }

    /// This subscription's id.
    pub fn id(&self) -> SubscriberId {
        self.id
    }

    /// The resync period in force (`ZERO` = never).
    pub fn resync_period(&self) -> Duration {
        Duration::from_nanos(self.resync_period.load(Ordering::Relaxed))
    }

    /// Changes the resync period (`ZERO` = never; below
    /// [`MINIMUM_RESYNC_PERIOD`](crate::MINIMUM_RESYNC_PERIOD) is raised to
    /// it) and answers the period now in force. The next resync comes one new
    /// period from now (the period in force asked for again changes nothing);
    /// a sweep already under way finishes.
    /// `SubscriberGone` when the subscriber's actor stopped or the
    /// subscription was ended (through any clone), `Stopped` when the
    /// informer did.
    pub async fn set_resync_period(&mut self, period: Duration) -> Result<Duration, InformerError> {
        if self.is_gone() || self.stats.unsubscribed.load(Ordering::SeqCst) {
            return Err(InformerError::SubscriberGone);
        }
        let period = self
            .resync
            .send(ScheduleResync {
                id: self.id,
                period,
            })
            .await
            .map_err(|_| InformerError::Stopped)?;
        self.resync_period.store(nanos(period), Ordering::Relaxed);
        Ok(period)
    }

    /// True once the informer synced and this subscriber handled its initial adds (HS-2).
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// The channel behind [`Subscription::has_synced`], for the controller's feeders.
    pub(crate) fn synced_channel(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }

    /// Waits until [`Subscription::has_synced`], at most `timeout`;
    /// `Stopped` when the informer is stopped first, `SubscriberGone` when
    /// the subscriber's actor stopped.
    pub async fn wait_for_sync(&self, timeout: Duration) -> Result<(), InformerError> {
        wait_synced(
            self.synced.clone(),
            self.informer.stopped(),
            timeout,
            InformerError::SubscriberGone,
            || self.informer.last_failure(),
        )
        .await
    }

    /// A snapshot of this subscription's counters.
    pub fn stats(&self) -> SubscriptionStats {
        let s = &self.stats;
        let r = Ordering::Relaxed;
        SubscriptionStats {
            pending: s.pending.load(r),
            in_flight: s.in_flight.load(r),
            delivered: s.delivered.load(r),
            resyncs: s.resyncs.load(r),
            coalesced: s.coalesced.load(r),
            gone: s.gone.load(r),
            slow_inline_turns: s.slow_inline_turns.load(r),
        }
    }

    /// True when the subscriber's actor stopped and the listener removed itself.
    pub fn is_gone(&self) -> bool {
        self.stats.gone.load(Ordering::Relaxed)
    }

    /// Ends the subscription and waits for the handler call in progress to
    /// return; pending notifications are dropped (SI-12, SI-13). A pipelined
    /// subscriber first handles the events already in its mailbox. Not from
    /// inside this subscription's own handler (an actor's `handle`, a
    /// `subscribe_fn` future): the call in flight would wait for itself.
    /// Use [`cancel`](Self::cancel) there.
    pub async fn unsubscribe(self) {
        self.forget();
        let _ = self.listener.send(StopListener).await;
    }

    /// Ends the subscription without waiting for the handler call in
    /// progress: what [`unsubscribe`](Self::unsubscribe) does, callable from
    /// the subscription's own handler.
    pub fn cancel(&self) {
        self.unsubscribe_now();
    }

    /// Ends the subscription without waiting (a dropped [`EventStream`](crate::EventStream)).
    pub(crate) fn unsubscribe_now(&self) {
        self.forget();
        self.listener.do_send(StopListener);
    }

    /// The Indexer and the resync timer forget this subscriber.
    fn forget(&self) {
        self.stats.unsubscribed.store(true, Ordering::SeqCst);
        self.indexer.do_send(Unsubscribe(self.id));
        self.resync.do_send(CancelResync(self.id));
    }
}
