//! The Reflector actor: a supervised shell around the loop
//! ([`ListAndWatch`]).
//!
//! `started` spawns one run of the loop. When the loop needs a relist it
//! ends, and the actor stops itself; its `Supervisor` restarts it, and the
//! next run relists after the backoff. The state (last RV, backoff) lives in
//! the actor, which the supervisor keeps across restarts. A panic in the loop
//! is caught and turned into such a restart.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use tokio::sync::watch;
use tracing::Instrument;

use super::client::KubeSource;
use super::failure::Failure;
use super::list_and_watch::{Exit, ListAndWatch};
use super::messages::StopReflector;
use super::sharing::Transform;
use super::source::ListerWatcher;
use super::state::{Next, ReflectorOptions, ReflectorState};
use super::stats::ReflectorStats;
use super::warm_start::RestoreFn;
use crate::delta_fifo::DeltaFifo;
use crate::indexer::CacheReader;

/// The Reflector's last synced resourceVersion, published for the informer handle.
pub type ResourceVersionWatch = watch::Receiver<String>;

/// The Reflector actor for objects of type `K`, listing and watching through
/// `S` (kube-client's [`KubeSource`] unless told otherwise).
pub struct Reflector<K: crate::Object, S = KubeSource<K>> {
    /// Cloned for each run of the loop (a clone has no list in progress).
    source: S,
    fifo: Addr<DeltaFifo<K>>,
    transform: Option<Transform<K>>,
    cache: Option<CacheReader<K>>,
    state: Rc<RefCell<ReflectorState>>,
    /// The delay before the next run's list, set when a run asks for a relist.
    pending_delay: Option<Duration>,
    /// Set for good by a stop or a closed DeltaFIFO: a restart starts nothing.
    shutting_down: bool,
    rv: watch::Sender<String>,
    stats: Arc<ReflectorStats>,
    span: tracing::Span,
    /// A snapshot for the first run to start from; taken by it.
    restore: Option<RestoreFn<K>>,
}

impl<K, S> Reflector<K, S>
where
    K: crate::Object,
    S: ListerWatcher<K> + Clone + Unpin + 'static,
{
    /// A Reflector listing and watching `source` into `fifo`.
    pub fn new(
        source: S,
        fifo: Addr<DeltaFifo<K>>,
        options: ReflectorOptions,
        transform: Option<Transform<K>>,
        rv: watch::Sender<String>,
        stats: Arc<ReflectorStats>,
    ) -> Self {
        Reflector {
            source,
            fifo,
            transform,
            cache: None,
            state: Rc::new(RefCell::new(ReflectorState::new(options))),
            pending_delay: None,
            shutting_down: false,
            rv,
            stats,
            span: tracing::Span::none(),
            restore: None,
        }
    }

    /// The first run starts from the snapshot `restore` reads, if any,
    /// instead of a list ([`warm_start`](super::warm_start)).
    pub fn with_restore(mut self, restore: RestoreFn<K>) -> Self {
        self.restore = Some(restore);
        self
    }

    /// Reads the informer's cache during relists: an object listed with the
    /// resourceVersion it has in the cache is not kept twice; the cached `Arc`
    /// is reused and the fresh copy freed at once. A relist then holds only
    /// what changed, not a second copy of the store (client-go and
    /// kube-runtime hold two).
    pub fn with_cache(mut self, cache: CacheReader<K>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Runs the list-watch loop inside `span` (e.g. one naming the informer).
    pub fn in_span(mut self, span: tracing::Span) -> Self {
        self.span = span;
        self
    }
}

/// After a panic in the loop: the delay before the relist, from the state
/// machine, so that a panic that repeats backs off like any other failure.
fn after_panic(stats: &ReflectorStats, state: &RefCell<ReflectorState>) -> Exit {
    stats.panics.fetch_add(1, Ordering::Relaxed);
    tracing::error!("panic in the reflector's list-watch loop; relisting after backoff");
    stats
        .last_failure
        .record("list", &"the list-watch loop panicked");
    let now = tokio::time::Instant::now().into_std();
    match state
        .borrow_mut()
        .list_failed(&Failure::Other, false, now, rand::random())
    {
        Next::ListAfter(d) | Next::WatchAfter(d) => Exit::Relist(d),
        Next::List | Next::Watch => Exit::Relist(Duration::ZERO),
    }
}

impl<K, S> Actor for Reflector<K, S>
where
    K: crate::Object,
    S: ListerWatcher<K> + Clone + Unpin + 'static,
{
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let delay = self.pending_delay.take().unwrap_or_default();
        let run = ListAndWatch::new(
            self.source.clone(),
            self.fifo.clone(),
            self.state.clone(),
            self.rv.clone(),
            self.stats.clone(),
        )
        .transform(self.transform.clone())
        .cache(self.cache.clone())
        .restore(self.restore.take());
        let stats = self.stats.clone();
        let state = self.state.clone();
        let fut = async move {
            match AssertUnwindSafe(run.run(delay)).catch_unwind().await {
                Ok(exit) => exit,
                Err(_) => after_panic(&stats, &state),
            }
        };
        fut.instrument(self.span.clone())
            .into_actor(self)
            .map(|exit, act, ctx| match exit {
                Exit::Relist(delay) => {
                    act.pending_delay = Some(delay);
                    ctx.stop();
                }
                Exit::SinkClosed => {
                    tracing::info!("delta fifo is gone; reflector stops");
                    act.shutting_down = true;
                    ctx.stop();
                }
            })
            .spawn(ctx);
    }
}

impl<K, S> Supervised for Reflector<K, S>
where
    K: crate::Object,
    S: ListerWatcher<K> + Clone + Unpin + 'static,
{
    fn restarting(&mut self, _: &mut Context<Self>) {
        if !self.shutting_down {
            tracing::debug!("supervisor restarts the reflector");
        }
    }
}

impl<K, S> Handler<StopReflector> for Reflector<K, S>
where
    K: crate::Object,
    S: ListerWatcher<K> + Clone + Unpin + 'static,
{
    type Result = ();

    fn handle(&mut self, _: StopReflector, ctx: &mut Context<Self>) {
        self.shutting_down = true;
        ctx.stop();
    }
}
