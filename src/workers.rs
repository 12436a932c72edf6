//! A pool of threads for subscriber actors, so handlers use more than one
//! core ([`Workers`]).
//!
//! Each worker is a thread running an actix `System` of its own (so the pool
//! works from `#[tokio::main]` as well as from inside an actix System).
//! Actors are placed on them in turn. A subscriber on a worker reads its
//! [`EventStream`](crate::EventStream) in its own context
//! ([`Workers::start_reading`]): the listener pushes into the stream's
//! channel, so an event crosses threads without an actix message and its
//! answer per event, and a worker's actors run beside the informer's thread
//! rather than on it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use actix::prelude::*;
use futures::Stream;

use crate::error::InformerError;

/// Threads for subscriber actors, each an actix `System` of its own;
/// [`Workers::start`] places actors on them round-robin. Dropping the pool
/// (or [`Workers::stop`]) stops its threads: their actors stop, and a
/// stream an actor was reading is dropped, which unsubscribes it, so keep
/// the pool as long as its actors should run. An actor that stops its
/// `System::current()` stops its own worker's thread only.
///
/// ```no_run
/// # use actix::prelude::*;
/// # use k8s_openapi::api::core::v1::ConfigMap;
/// # use kinformer::{Event, Informer, SubscribeOptions, Workers};
/// struct Counter(u64);
/// impl Actor for Counter { type Context = Context<Self>; }
/// impl StreamHandler<Event<ConfigMap>> for Counter {
///     fn handle(&mut self, _: Event<ConfigMap>, _: &mut Context<Self>) { self.0 += 1; }
/// }
///
/// # async fn run(informer: Informer<ConfigMap>) -> anyhow::Result<Workers> {
/// let workers = Workers::new(0)?; // one thread per core
/// for _ in 0..10 {
///     let events = informer.stream(SubscribeOptions::default()).await?;
///     workers.start_reading(events, |_| Counter(0));
/// }
/// Ok(workers) // keep the pool while they run: dropping it stops them
/// # }
/// ```
#[derive(Debug)]
pub struct Workers {
    /// One per thread, in the order actors are placed on them.
    threads: Vec<Worker>,
    /// The index (modulo the threads) of the next placement.
    next: AtomicUsize,
}

/// One worker thread: its System (to stop it) and its arbiter (to place
/// actors on it).
#[derive(Debug)]
struct Worker {
    system: System,
    arbiter: ArbiterHandle,
    thread: Option<JoinHandle<()>>,
}

impl Workers {
    /// Starts `threads` worker threads; `0` starts one per core
    /// (`std::thread::available_parallelism`, 1 when unknown).
    pub fn new(threads: usize) -> Result<Self, InformerError> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let mut pool = Workers {
            threads: Vec::with_capacity(threads),
            next: AtomicUsize::new(0),
        };
        for i in 0..threads {
            // On failure, the threads already started stop with `pool`.
            pool.threads.push(Worker::start(i)?);
        }
        Ok(pool)
    }

    /// How many threads the pool has.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// The arbiter of the next thread in turn (round-robin), for
    /// `Actor::start_in_arbiter` and `ArbiterHandle::spawn`.
    pub fn arbiter(&self) -> ArbiterHandle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len();
        self.threads[i].arbiter.clone()
    }

    /// Starts an actor on the next thread in turn, made there by `make`.
    /// After [`Workers::stop`], the address is disconnected.
    pub fn start<A>(&self, make: impl FnOnce(&mut Context<A>) -> A + Send + 'static) -> Addr<A>
    where
        A: Actor<Context = Context<A>>,
    {
        A::start_in_arbiter(&self.arbiter(), make)
    }

    /// Starts an actor on the next thread in turn that reads `stream` in its
    /// own context: its [`StreamHandler::handle`] is called with each item,
    /// the next once it returned. With an [`EventStream`](crate::EventStream)
    /// an item counts as handled once `handle` returned; the actor stops
    /// when the stream ends (`StreamHandler::finished`), and when the actor
    /// stops (or panics) the stream is dropped, which ends the subscription.
    pub fn start_reading<A, S>(
        &self,
        stream: S,
        make: impl FnOnce(&mut Context<A>) -> A + Send + 'static,
    ) -> Addr<A>
    where
        A: Actor<Context = Context<A>> + StreamHandler<S::Item>,
        S: Stream + Send + 'static,
    {
        self.start(move |ctx| {
            let actor = make(ctx);
            ctx.add_stream(stream);
            actor
        })
    }

    /// Stops every thread's System: their actors stop once their current
    /// handler returned. Does not wait for the threads to end.
    pub fn stop(&self) {
        for worker in &self.threads {
            worker.system.stop();
        }
    }

    /// Stops every thread and waits until each has ended. Blocks the caller:
    /// call it outside async code, or in `spawn_blocking`.
    pub fn stop_and_join(mut self) {
        self.stop();
        for worker in &mut self.threads {
            if let Some(thread) = worker.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Worker {
    /// Starts the thread numbered `i` and waits until its System runs.
    fn start(i: usize) -> Result<Self, InformerError> {
        let (started_tx, started) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("kinformer-worker-{i}"))
            .spawn(move || {
                let runner = System::new();
                // The starting thread waits for this answer.
                let _ = started_tx.send((System::current(), System::current().arbiter().clone()));
                if let Err(err) = runner.run() {
                    tracing::error!(%err, worker = i, "a worker's actix System ended with an error");
                }
            })
            .map_err(InformerError::Thread)?;
        let (system, arbiter) = started.recv().map_err(|_| InformerError::Stopped)?;
        Ok(Worker {
            system,
            arbiter,
            thread: Some(thread),
        })
    }
}
