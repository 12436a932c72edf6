//! Controllers: reconcile keys, one worker per key at a time, with per-key
//! backoff, on top of informers.
//!
//! A [`Controller`] is built from a primary [`Informer<K>`] (the objects it
//! reconciles) and any number of secondary ones: [`Controller::owns`] maps a
//! child to its controller owner (ownerReferences with `controller: true`),
//! [`Controller::watches`] maps any object to the keys to reconcile. Events
//! name keys; the keys go to a workqueue ([`WorkQueue`], client-go's
//! `util/workqueue` semantics) at the priority of their cause, and N workers
//! take them and call your async reconcile with the key and the cached object
//! now. The reconcile is level-based: it gets the current state, not the
//! event, so a key changed ten times while queued is reconciled once.
//!
//! ```no_run
//! use std::time::Duration;
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//! use kinformer::Informer;
//! use kinformer::controller::{Action, Controller, Request};
//!
//! # async fn run(client: kube::Client) -> anyhow::Result<()> {
//! let secrets = Informer::builder(kube::Api::<Secret>::all(client.clone())).start()?;
//! let mirrors = Informer::builder(kube::Api::<ConfigMap>::all(client)).start()?;
//! let controller = Controller::new(secrets)
//!     .owns(mirrors)
//!     .reconcile_timeout(Duration::from_secs(30))
//!     .start(|req: Request<Secret>| async move {
//!         match &req.object {
//!             Some(_secret) => { /* create or update the mirror */ }
//!             None => { /* deleted: remove the mirror */ }
//!         }
//!         Ok::<_, kube::Error>(Action::Done)
//!     })
//!     .await?;
//! controller.wait_for_sync(Duration::from_secs(60)).await?;
//! // ... until it is time to go:
//! let report = controller.stop(Duration::from_secs(10)).await;
//! assert!(report.cancelled.is_empty());
//! # Ok(()) }
//! ```
//!
//! # Guarantees (CTL-n)
//!
//! * **CTL-1** No reconcile before every informer the controller uses has
//!   synced *and* its feeder has queued the initial keys (HS-2 per
//!   subscription; kube-runtime waits only for the main store, kube#1226).
//! * **CTL-2** One reconcile per key at a time (the queue's processing set,
//!   WQ-4); a change made while its key is reconciled is reconciled again
//!   afterwards; changes to a queued key are deduplicated (WQ-2).
//! * **CTL-3** A reconcile that succeeds ([`Action::Done`] or
//!   [`Action::RequeueAfter`]) forgets the key's failures, so its backoff
//!   starts over (kube#1916); an error requeues it after the rate limiter's
//!   backoff (default: 5 ms doubling to 1000 s per key, 10/s overall, RL-7).
//!   Changes during a backoff do not cut it short (PQ-5).
//! * **CTL-4** A reconcile that panics, or runs past the optional
//!   [`reconcile_timeout`](Controller::reconcile_timeout) (it is then
//!   cancelled), is logged, counted and requeued with backoff; the worker
//!   goes on.
//! * **CTL-5** [`ControllerHandle::stop`]: no key is handed out any more,
//!   reconciles in progress run until the deadline and are cancelled past
//!   it; the report names the keys left queued or waiting, and those cancelled.
//! * **CTL-6** Feeders subscribe with `subscribe_batches` and `Block`: no
//!   event is lost or merged away, and a slow reconcile never stalls an
//!   informer for its other subscribers (a feeder waits only for the queue
//!   to take its keys, never for a reconcile; see `feed.rs`).
//! * **CTL-7** `owns` maps a child to the controller ownerReference of the
//!   primary's kind and group (any version), in the child's namespace (by
//!   name alone for a cluster-scoped primary); an update maps its old and
//!   new state, so a change of owner reconciles both.
//! * **CTL-8** Workers: 2 × the available cores by default, at least one,
//!   never unlimited (kube#1473).
//! * **CTL-9** A deleted object's reconcile gets `object: None` and its last
//!   known state, kept until a reconcile of the deletion succeeds. (A
//!   reconcile that starts between the cache's delete and the feeder's note
//!   of it sees neither; the note queues the key again, with the state.)
//! * **CTL-10** Warm standby: under an elector
//!   ([`leader_elected`](Controller::leader_elected)) the controller has a
//!   scope, the keys it may reconcile now (all while leading, none
//!   otherwise); every replica's informers run and sync, a standby's workers
//!   stay idle.
//! * **CTL-11** A key that leaves the scope is taken no more and its
//!   reconcile in progress is cancelled at once (at its next await point),
//!   before a successor can start (LE-7); no fencing: reconciles must be
//!   idempotent. Deletes of keys outside the scope are remembered for a
//!   while ([`remember_deletes`](Controller::remember_deletes)), so a delete
//!   during a failover or a shard move is reconciled by the new owner.
//! * **CTL-12** Keys that enter the scope are all queued from the synced
//!   caches, with the deletes remembered for them: a new leader reconciles
//!   every object once.
//! * Priority by cause (PQ-1): keys from the initial list and resyncs are
//!   reconciled after those of real changes, so after a restart a change is
//!   not stuck behind every object.
//!
//! # Where it runs
//!
//! The queue and feeders are actix actors, started where
//! [`start`](Controller::start) is called: inside an actix System or a tokio
//! `LocalSet` (elsewhere: [`InformerError::NoActorRuntime`]). Workers are
//! `tokio::spawn`ed tasks, so reconcile futures must be `Send`: in an actix
//! System they share its thread; under `#[tokio::main]` (with the informers in
//! a `LocalSet`) they run on the runtime's worker threads. Blocking work
//! belongs in `spawn_blocking`, as for subscribers.
//!
//! Metrics: [`ControllerHandle::metrics`] (reconciles, errors, panics,
//! timeouts, durations, and the queue's client-go metrics); the library
//! registers none.

mod error;
mod feed;
mod govern;
mod handle;
mod last_known;
mod metrics;
mod request;
mod scope;
mod worker;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use kinformer_actors::workqueue::WorkQueue;
use kinformer_actors::{Object, ObjectKey};
use tokio::sync::watch;

pub use error::ControllerError;
pub use handle::{ControllerHandle, StopReport};
/// The workqueue types a controller's API uses (limiters for
/// [`Controller::rate_limiter`], [`Priority`] in each [`Request`], the
/// queue's [`QueueMetrics`]).
pub use kinformer_actors::workqueue::{
    FastSlow, Histogram, ItemExponential, MaxOf, Priority, QueueMetrics, RateLimiter, TokenBucket,
    WithMaxWait, default_controller_rate_limiter,
};
pub use metrics::{ControllerMetrics, RECONCILE_BUCKETS, ReconcileMetrics};
pub use request::{Action, Request};

use crate::error::InformerError;
use crate::informer::{Informer, can_start_actors};
use crate::leader::{ElectionTimings, LeaderElector};
use crate::shard::ShardMember;
use crate::subscription::Subscription;
use feed::{Feeder, Keys, Mapper, OwnerKind, feeder_options};
use govern::{Governed, govern, leader_scope, shard_scope};
use handle::{Leadership, Source};
use last_known::{LastKnown, Retention};
use metrics::ReconcileStats;
use scope::{KeyFilter, Ownership, Scope, ScopeChannels, ShardKeyFn};
use worker::{Phase, Workers};

/// Subscribes one secondary informer's feeder, once the queue exists.
type Subscribe = Box<
    dyn FnOnce(
        Addr<WorkQueue<ObjectKey>>,
        FeederShared,
    )
        -> std::pin::Pin<Box<dyn Future<Output = Result<Box<dyn Source>, InformerError>>>>,
>;

/// What every feeder of one controller shares.
#[derive(Clone)]
struct FeederShared {
    closed: Arc<AtomicBool>,
    mapper_panics: Arc<AtomicU64>,
    name: Arc<str>,
    admit: KeyFilter,
}

/// Builds and starts a controller; see the [module docs](self).
pub struct Controller<K: Object> {
    primary: Informer<K>,
    owner: OwnerKind,
    name: String,
    secondaries: Vec<Subscribe>,
    workers: usize,
    timeout: Option<Duration>,
    limiter: Option<Box<dyn RateLimiter<ObjectKey>>>,
    /// Where the scope comes from (CTL-10); `None`: every key, always.
    scope: Option<watch::Receiver<Scope>>,
    shard_key: Option<ShardKeyFn<K>>,
    leadership: Option<Leadership>,
    /// How long deletes outside the scope are remembered (CTL-11): as set,
    /// else from the scope source's timings.
    retention: Option<Retention>,
    scope_timings: Option<ElectionTimings>,
}

impl<K: Object> std::fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("secondaries", &self.secondaries.len())
            .field("workers", &self.workers)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<K> Controller<K>
where
    K: Object,
    K::DynamicType: Default,
    K::Scope: 'static,
{
    /// A controller of the objects of `primary` (typed objects; see
    /// [`Controller::new_with`] for dynamic ones).
    pub fn new(primary: Informer<K>) -> Self {
        let cluster_scoped = std::any::TypeId::of::<K::Scope>()
            == std::any::TypeId::of::<k8s_openapi::ClusterResourceScope>();
        Self::with_owner(primary, &K::DynamicType::default(), cluster_scoped)
    }
}

impl<K: Object> Controller<K> {
    /// A controller of objects whose type is known at run time (e.g.
    /// `DynamicObject` with its `ApiResource`); `owns` then keys owners in
    /// their child's namespace (for a cluster-scoped primary, use `watches`).
    pub fn new_with(primary: Informer<K>, dyntype: &K::DynamicType) -> Self {
        Self::with_owner(primary, dyntype, false)
    }

    fn with_owner(primary: Informer<K>, dyntype: &K::DynamicType, cluster_scoped: bool) -> Self {
        let kind = K::kind(dyntype);
        let owner = OwnerKind::new(&kind, &K::api_version(dyntype), cluster_scoped);
        Controller {
            primary,
            name: kind.to_lowercase(),
            owner,
            secondaries: Vec::new(),
            workers: default_workers(),
            timeout: None,
            limiter: None,
            scope: None,
            shard_key: None,
            leadership: None,
            retention: None,
            scope_timings: None,
        }
    }

    /// Reconcile only while `elector` leads (warm standby, CTL-10..CTL-12):
    /// the informers of every replica run and sync, but only the leader's
    /// workers take keys. On becoming leader the controller queues every
    /// cached object (and the deletes it remembers, CTL-11) once; on losing
    /// leadership its workers take no more keys and the reconciles in
    /// progress are cancelled at once (at their next await point), before
    /// the Lease can expire for a successor (LE-7). There is no fencing:
    /// reconciles must be idempotent. The handle then exposes the elector's
    /// events ([`ControllerHandle::leader_events`]).
    pub fn leader_elected(mut self, elector: &LeaderElector) -> Self {
        self.scope = Some(leader_scope(elector.leadership()));
        self.scope_timings = Some(elector.timings());
        self.leadership = Some(Leadership {
            leading: elector.leadership(),
            events: elector.event_sender(),
        });
        self
    }

    /// Also reconcile the controller owner (of the primary's kind) of every
    /// object of `informer` that changes (CTL-7).
    pub fn owns<S: Object>(self, informer: Informer<S>) -> Self {
        let owner = self.owner.clone();
        self.watches(informer, move |child: &S| {
            owner.owner_key(child).into_iter().collect()
        })
    }

    /// Also reconcile the keys `mapper` names for every object of `informer`
    /// that changes (both states of an update). A mapper that panics maps to
    /// no key (logged, counted in [`ReconcileMetrics::mapper_panics`]).
    pub fn watches<S: Object>(
        mut self,
        informer: Informer<S>,
        mapper: impl Fn(&S) -> Vec<ObjectKey> + Send + Sync + 'static,
    ) -> Self {
        let mapper: Mapper<S> = Arc::new(mapper);
        self.secondaries.push(Box::new(move |queue, shared| {
            Box::pin(async move {
                let source = subscribe(&informer, queue, Keys::Mapped(mapper), shared).await?;
                Ok(Box::new(source) as Box<dyn Source>)
            })
        }));
        self
    }

    /// Reconcile only the keys `member`'s shard assignment gives this
    /// replica (CTL-10..CTL-12, SH-1..SH-9): every replica's informers run
    /// and sync; a key is taken only while it is ours, its reconcile is
    /// cancelled at once when it is handed over, and the keys gained on a
    /// membership change are all queued once. Keys are sharded by
    /// `namespace/name`, or by what [`shard_key`](Self::shard_key) maps an
    /// object to. There is no fencing: reconciles must be idempotent.
    pub fn sharded(mut self, member: &ShardMember) -> Self {
        self.scope = Some(shard_scope(member.assignment()));
        self.scope_timings = Some(member.timings());
        self
    }

    /// How long, and how many, deletes of keys outside this replica's scope
    /// are remembered (CTL-11): a standby or another shard's member keeps
    /// them, and if a key comes to it within `max_age` (a failover, a shard
    /// move) its delete is reconciled here, with its last known state.
    /// `max_age` counts from when the delete was seen or the key left this
    /// replica, whichever is later; beyond `max_count` the oldest are
    /// forgotten (counted in [`ReconcileMetrics::forgotten_deletes`]).
    /// Default: `max_age` twice the elector's or shard member's lease
    /// duration plus three retry periods (36 s with the default timings),
    /// `max_count` 10 000. Each remembered delete holds the object's last
    /// state (shared with the event that brought it).
    pub fn remember_deletes(mut self, max_age: Duration, max_count: usize) -> Self {
        self.retention = Some(Retention { max_age, max_count });
        self
    }

    /// Shard an object by another key than its own, e.g. its controller
    /// owner's, so dependents land on their owner's replica: `map` answers
    /// the key to shard by (`None`: the object's own). Read from the cached
    /// object, or a deleted one's last known state. Keep it stable for an
    /// object's life: a change of it (a new owner) moves the key to another
    /// replica without the hand-over of a shard move (SH-4), so the old
    /// replica may still be reconciling it when the new one starts.
    pub fn shard_key(
        mut self,
        map: impl Fn(&K) -> Option<ObjectKey> + Send + Sync + 'static,
    ) -> Self {
        self.shard_key = Some(Arc::new(map));
        self
    }

    /// The name in logs, metrics and the queue's metrics (default: the
    /// primary kind, lowercase).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How many reconciles may run at once (default 2 × the available cores; at least 1).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Cancel a reconcile that runs longer than `limit` and requeue its key
    /// with backoff (CTL-4). Default: none.
    pub fn reconcile_timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// How failed keys back off (default: client-go's default controller
    /// limiter, RL-7).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<ObjectKey> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Starts the queue, subscribes a feeder to every informer and starts the
    /// workers, which reconcile once every subscription synced (CTL-1).
    /// Must run inside an actix System or a tokio `LocalSet`.
    pub async fn start<F, Fut, E>(
        self,
        reconcile: F,
    ) -> Result<ControllerHandle<K>, ControllerError>
    where
        F: Fn(Request<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        if !can_start_actors() {
            return Err(InformerError::NoActorRuntime.into());
        }
        let limiter = self
            .limiter
            .unwrap_or_else(|| Box::new(default_controller_rate_limiter()));
        let queue = WorkQueue::new(self.name.clone(), limiter).start();
        let name: Arc<str> = self.name.into();
        let retention = self.retention.unwrap_or_else(|| {
            self.scope_timings
                .map_or_else(Retention::default, Retention::for_timings)
        });
        let last_known = Arc::new(LastKnown::new(retention));
        let ownership = Ownership {
            store: self.primary.store(),
            last_known: last_known.clone(),
            shard_key: self.shard_key,
        };
        let channels =
            ScopeChannels::new(self.scope.unwrap_or_else(|| watch::channel(Scope::All).1));
        let shared = FeederShared {
            closed: Arc::new(AtomicBool::new(false)),
            mapper_panics: Arc::new(AtomicU64::new(0)),
            name: name.clone(),
            admit: ownership.admit(channels.feed.subscribe()),
        };
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        let primary = subscribe(
            &self.primary,
            queue.clone(),
            Keys::Own(last_known.clone()),
            shared.clone(),
        );
        let started = async {
            sources.push(Box::new(primary.await?));
            for secondary in self.secondaries {
                sources.push(secondary(queue.clone(), shared.clone()).await?);
            }
            Ok::<_, InformerError>(())
        };
        if let Err(e) = started.await {
            shared
                .closed
                .store(true, std::sync::atomic::Ordering::SeqCst);
            for source in sources {
                source.unsubscribe().await;
            }
            return Err(e.into());
        }
        let workers = Arc::new(Workers {
            name: name.clone(),
            queue: queue.clone(),
            store: self.primary.store(),
            last_known,
            reconcile: worker::erase(reconcile),
            timeout: self.timeout,
            scope: channels.work.subscribe(),
            ownership: ownership.clone(),
            stats: ReconcileStats::new(&name, self.workers),
            in_progress: Mutex::new(HashSet::new()),
            cancelled: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            left_after_close: Mutex::new(Vec::new()),
        });
        let (phase, _) = watch::channel(Phase::Syncing);
        let synced: Vec<_> = sources.iter().map(|s| s.synced()).collect();
        tokio::spawn(govern(Governed {
            synced,
            phase: phase.clone(),
            name: name.clone(),
            channels,
            ownership,
            queue: queue.clone(),
        }));
        let tasks = (0..self.workers)
            .map(|_| tokio::spawn(workers.clone().run(phase.subscribe())))
            .collect();
        tracing::info!(controller = %name, workers = self.workers, informers = sources.len(), "controller started");
        Ok(ControllerHandle {
            workers,
            phase,
            sources,
            tasks,
            feeders_closed: shared.closed,
            mapper_panics: shared.mapper_panics,
            leadership: self.leadership,
            stopped: false,
        })
    }
}

/// 2 × the available cores (CTL-8).
fn default_workers() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Starts a feeder and subscribes it to `informer`.
async fn subscribe<S: Object>(
    informer: &Informer<S>,
    queue: Addr<WorkQueue<ObjectKey>>,
    keys: Keys<S>,
    shared: FeederShared,
) -> Result<Subscription<S>, InformerError> {
    let feeder = Feeder {
        queue,
        keys,
        closed: shared.closed,
        mapper_panics: shared.mapper_panics,
        controller: shared.name,
        admit: shared.admit,
    }
    .start();
    informer
        .subscribe_batches(feeder.recipient(), feeder_options())
        .await
}
