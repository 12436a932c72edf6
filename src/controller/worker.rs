//! A worker: asks the queue for a key, reconciles it, reports how it ended,
//! until the queue hands out nothing more (CTL-2..CTL-5).

use std::collections::HashSet;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::Addr;
use kinformer_actors::workqueue::{Finish, Next, Outcome, Ticket, WorkQueue};
use kinformer_actors::{Object, ObjectKey};
use tokio::sync::watch;

use super::last_known::{self, LastKnown};
use super::metrics::{Ended, ReconcileStats};
use super::request::{Action, Request};
use super::scope::{Ownership, Scope};
use crate::panic::{call_caught, panic_message};
use crate::store::Store;

/// The reconcile function, its error turned into a message.
pub(crate) type ReconcileFn<K> = Arc<
    dyn Fn(Request<K>) -> Pin<Box<dyn Future<Output = Result<Action, String>> + Send>>
        + Send
        + Sync,
>;

/// Erases a user's reconcile function.
pub(crate) fn erase<K, F, Fut, E>(reconcile: F) -> ReconcileFn<K>
where
    F: Fn(Request<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    Arc::new(move |request| {
        let reconcile = reconcile(request);
        Box::pin(async move { reconcile.await.map_err(|e| e.to_string()) })
    })
}

/// Where a controller is in its life; workers start once it is `Running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for every informer to sync (CTL-1).
    Syncing,
    Running,
    Stopping,
}

/// What every worker of one controller shares.
pub(crate) struct Workers<K> {
    pub(crate) name: Arc<str>,
    pub(crate) queue: Addr<WorkQueue<ObjectKey>>,
    pub(crate) store: Store<K>,
    pub(crate) last_known: Arc<LastKnown<K>>,
    pub(crate) reconcile: ReconcileFn<K>,
    pub(crate) timeout: Option<Duration>,
    /// The keys this replica may reconcile now (CTL-10..CTL-12): checked
    /// when a key is handed out and watched while it is reconciled.
    pub(crate) scope: watch::Receiver<Scope>,
    pub(crate) ownership: Ownership<K>,
    pub(crate) stats: ReconcileStats,
    /// Keys being reconciled now (what a stop past its deadline cancels).
    pub(crate) in_progress: Mutex<HashSet<ObjectKey>>,
    /// Keys whose reconcile was dropped unfinished (a stop's abort).
    pub(crate) cancelled: Mutex<Vec<ObjectKey>>,
    /// Set when a stop closes the queue: a requeue asked for after that is
    /// reported as left instead (the closed queue ignores it).
    pub(crate) closing: AtomicBool,
    pub(crate) left_after_close: Mutex<Vec<ObjectKey>>,
}

/// A reconcile under way. Dropped unfinished (its task aborted past a
/// stop's deadline), it still leaves the in-progress set and the active
/// gauge, which would otherwise count it for the controller's life.
struct Running<'a, K> {
    workers: &'a Workers<K>,
    key: &'a ObjectKey,
    ended: bool,
}

impl<K> Drop for Running<'_, K> {
    fn drop(&mut self) {
        lock(&self.workers.in_progress).remove(self.key);
        if !self.ended {
            self.workers.stats.aborted();
            lock(&self.workers.cancelled).push(self.key.clone());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each critical section is one insert or remove: a panic cannot tear it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Object> Workers<K> {
    /// One worker's loop: waits for the controller to run, then takes keys
    /// until the queue hands out nothing more.
    pub(crate) async fn run(self: Arc<Self>, mut phase: watch::Receiver<Phase>) {
        match phase.wait_for(|p| *p != Phase::Syncing).await {
            Ok(p) if *p == Phase::Running => {}
            _ => return,
        }
        while let Ok(Some(lease)) = self.queue().send(Next::new()).await {
            let ticket = lease.into_ticket();
            let key = ticket.key.clone();
            let outcome = if self.owns(&key) {
                self.reconcile_one(ticket).await
            } else {
                // Not ours (any more): dropped; its owner reconciles it, and
                // this replica queues it again if it becomes ours (CTL-11),
                // with its delete if it was deleted.
                self.last_known.disown(&key, last_known::now());
                if self.owns(&key) {
                    // Ours again meanwhile: the scope change may have found
                    // its delete still ours, and queued nothing for it.
                    self.last_known.promote(&key);
                    self.reconcile_one(ticket).await
                } else {
                    Outcome::Success
                }
            };
            if outcome != Outcome::Success && self.closing.load(Ordering::SeqCst) {
                lock(&self.left_after_close).push(key.clone());
            }
            if self.queue().send(Finish { key, outcome }).await.is_err() {
                return;
            }
        }
    }

    /// Whether `key` is in the work scope now.
    fn owns(&self, key: &ObjectKey) -> bool {
        self.ownership.owns(&self.scope.borrow(), key)
    }

    /// The queue's address for one answered send. A fresh sender each time:
    /// actix parks a sender whose `send` found the mailbox over capacity and
    /// holds its next `send` back with no wake-up registered; the workers
    /// (and feeders) share the queue's mailbox, so a shared sender could
    /// leave a worker waiting for good (see the listener's `send_now`).
    pub(crate) fn queue(&self) -> Addr<WorkQueue<ObjectKey>> {
        self.queue.clone()
    }

    /// Keys whose reconcile asked for a requeue after the queue closed.
    pub(crate) fn left_after_close(&self) -> Vec<ObjectKey> {
        std::mem::take(&mut *lock(&self.left_after_close))
    }

    /// Keys being reconciled now.
    pub(crate) fn in_progress(&self) -> Vec<ObjectKey> {
        lock(&self.in_progress).iter().cloned().collect()
    }

    /// Keys whose reconcile was dropped unfinished, since the last call.
    pub(crate) fn take_cancelled(&self) -> Vec<ObjectKey> {
        std::mem::take(&mut *lock(&self.cancelled))
    }

    /// Reconciles one key and answers how it ended; a panic, an error or a
    /// timeout is a failure (CTL-4).
    async fn reconcile_one(&self, ticket: Ticket<ObjectKey>) -> Outcome {
        let key = ticket.key;
        let object = self.store.snapshot().get(&key);
        let delete = object
            .is_none()
            .then(|| self.last_known.delete_of(&key))
            .flatten();
        let request = Request {
            key: key.clone(),
            object,
            last_known: delete.as_ref().and_then(|(state, _)| state.clone()),
            retries: ticket.requeues,
            priority: ticket.priority,
        };
        lock(&self.in_progress).insert(key.clone());
        self.stats.started();
        let mut running = Running {
            workers: self,
            key: &key,
            ended: false,
        };
        let started = tokio::time::Instant::now();
        let (how, outcome) = self.call(request).await;
        self.stats.ended(how, started.elapsed());
        running.ended = true;
        drop(running);
        if let (Ended::Done | Ended::RequeueAfter, Some((_, seq))) = (how, delete) {
            self.last_known.settled(&key, seq);
        }
        outcome
    }

    /// Resolves once `key` is no longer in the work scope.
    async fn left_scope(&self, key: &ObjectKey) {
        let mut scope = self.scope.clone();
        if scope
            .wait_for(|s| !self.ownership.owns(s, key))
            .await
            .is_err()
        {
            // The scope can no longer change (the controller is stopping):
            // the key stays ours.
            std::future::pending::<()>().await;
        }
    }

    async fn call(&self, request: Request<K>) -> (Ended, Outcome) {
        let key = request.key.clone();
        let retries = request.retries;
        let reconcile = &self.reconcile;
        let called = async {
            match call_caught(|| reconcile(request)) {
                Err(panic) => Err(Some(panic)),
                Ok(future) => match self.timeout {
                    None => future.await.map_err(Some),
                    Some(limit) => match tokio::time::timeout(limit, future).await {
                        Ok(r) => r.map_err(Some),
                        Err(_) => Err(None),
                    },
                },
            }
        };
        // CTL-11: a key that leaves the scope (leadership lost, shard moved)
        // has its reconcile dropped at once, at its next await point.
        let result = tokio::select! {
            biased;
            () = self.left_scope(&key) => None,
            result = called => Some(result),
        };
        let name = &self.name;
        let Some(result) = result else {
            tracing::info!(controller = %name, %key, "reconcile cancelled: the key left this replica's scope");
            return (Ended::OutOfScope, Outcome::Success);
        };
        match result {
            Ok(Ok(Action::Done)) => (Ended::Done, Outcome::Success),
            Ok(Ok(Action::RequeueAfter(delay))) => {
                (Ended::RequeueAfter, Outcome::RequeueAfter(delay))
            }
            Ok(Err(error)) => {
                tracing::warn!(controller = %name, %key, retries, %error, "reconcile failed; requeued with backoff");
                (Ended::Error, Outcome::Failure)
            }
            Err(Some(panic)) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(controller = %name, %key, retries, panic = message, "reconcile panicked; requeued with backoff");
                (Ended::Panic, Outcome::Failure)
            }
            Err(None) => {
                tracing::warn!(controller = %name, %key, retries, timeout = ?self.timeout, "reconcile timed out (cancelled); requeued with backoff");
                (Ended::Timeout, Outcome::Failure)
            }
        }
    }
}
