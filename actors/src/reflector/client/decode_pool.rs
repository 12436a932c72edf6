//! The blocking threads one list decodes its pages (or a streaming list its
//! runs of lines) on: at most `threads` of tokio's blocking threads, each
//! running the list's decoding jobs one after another.
//!
//! A `spawn_blocking` per page let tokio start a fresh thread whenever the
//! page before had not quite handed its thread back yet: a 100k-object list
//! decoded on 8 threads for 2 decoders, each with a glibc arena and arena
//! space kept ahead of its own (BENCHMARKS.md, "A streaming list's events
//! decoded ahead"). Here a worker takes the next job as soon as it is
//! queued, and waits [`LINGER`] for one before giving its thread back, so a
//! list keeps its threads. Still tokio's blocking threads (not threads of
//! our own): tokio does not advance a paused clock while a blocking task
//! runs, so tests under paused time see decoding as work; a worker waiting
//! for its next job holds the clock for at most [`LINGER`] of real time.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};

/// How long a worker waits for the next job before its thread goes back to
/// tokio's pool: longer than the gap between two pages of a list that is
/// decoded as fast as it arrives.
pub const LINGER: Duration = Duration::from_millis(2);

type Job = Box<dyn FnOnce() + Send>;

/// Jobs waiting, and the workers running them.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Workers started and not ended; at most the pool's `threads`.
    workers: usize,
    /// Of those, the ones waiting for a job.
    idle: usize,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued for a worker that waits.
    queued: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs jobs on at most `threads` blocking threads, at most `threads`
/// queued or running at once. Needs a tokio runtime.
pub(super) struct DecodePool {
    shared: Arc<Shared>,
    threads: usize,
    /// A permit per job queued or running: [`run`](Self::run) waits for one.
    permits: Arc<Semaphore>,
}

/// Why a job gave no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lost {
    /// It panicked.
    Panicked,
    /// It never ran (the runtime is shutting down).
    Dropped,
}

/// A job's result, once it ran.
pub(super) struct Pending<T>(oneshot::Receiver<std::thread::Result<T>>);

impl<T> Pending<T> {
    /// Waits for the job's result.
    pub(super) async fn result(self) -> Result<T, Lost> {
        match self.0.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_panic)) => Err(Lost::Panicked),
            Err(_) => Err(Lost::Dropped),
        }
    }
}

impl DecodePool {
    /// A pool of at most `threads` (at least 1) workers.
    pub(super) fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        DecodePool {
            shared: Arc::default(),
            threads,
            permits: Arc::new(Semaphore::new(threads)),
        }
    }

    /// Its number of threads.
    pub(super) fn threads(&self) -> usize {
        self.threads
    }

    /// Jobs that may be queued now without waiting.
    #[cfg(test)]
    pub(super) fn available_permits(&self) -> usize {
        self.permits.available_permits()
    }

    /// Queues `f` once fewer than `threads` jobs are queued or running; a
    /// worker runs it (one is started if fewer than `threads` run). A panic
    /// in `f` is its result, not the worker's end.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Pending<T> {
        // Never closed: `None` cannot happen.
        let permit = self.permits.clone().acquire_owned().await.ok();
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            // Nobody waits any more (the list is over): not worth decoding.
            if tx.is_closed() {
                return;
            }
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            drop(permit);
            // Dropping a result nobody took may panic (a `Drop` impl): caught too.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = tx.send(result);
            }));
        });
        let mut queue = self.shared.lock();
        queue.jobs.push_back(job);
        // Idle workers take the queued jobs, one each; past them, another
        // worker if the pool has room.
        if queue.jobs.len() > queue.idle && queue.workers < self.threads {
            queue.workers += 1;
            drop(queue);
            let worker = Worker {
                shared: self.shared.clone(),
                counted: true,
            };
            tokio::task::spawn_blocking(move || worker.work());
        } else {
            // An idle worker takes it, or a busy one after its job.
            drop(queue);
            self.shared.queued.notify_one();
        }
        Pending(rx)
    }
}

/// One worker, counted in the pool's `workers` until it ends, however it
/// ends: a worker tokio never ran (the runtime shutting down) is dropped
/// uncounted, and the last one to go drops the jobs nobody will run (their
/// results read as [`Lost::Dropped`]).
struct Worker {
    shared: Arc<Shared>,
    /// Still counted in `workers` (a worker that ends normally uncounts
    /// itself under the same lock as it sees the queue empty).
    counted: bool,
}

impl Worker {
    /// Runs queued jobs until none comes for [`LINGER`].
    fn work(mut self) {
        let shared = self.shared.clone();
        let mut queue = shared.lock();
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                drop(queue);
                job();
                queue = shared.lock();
                continue;
            }
            queue.idle += 1;
            let (guard, _) = shared
                .queued
                .wait_timeout_while(queue, LINGER, |q| q.jobs.is_empty())
                .unwrap_or_else(|p| p.into_inner());
            queue = guard;
            queue.idle -= 1;
            if queue.jobs.is_empty() {
                queue.workers -= 1;
                self.counted = false;
                return;
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut queue = self.shared.lock();
        queue.workers -= 1;
        let stranded: Vec<Job> = if queue.workers == 0 {
            queue.jobs.drain(..).collect()
        } else {
            Vec::new()
        };
        drop(queue);
        drop(stranded);
    }
}

/// Things kept for reuse from job to job (scratch decoders, buffers): at
/// most `keep`, shared by the jobs of one list.
pub(super) struct Spares<T> {
    items: Arc<Mutex<Vec<T>>>,
    keep: usize,
}

impl<T> Clone for Spares<T> {
    fn clone(&self) -> Self {
        Spares {
            items: self.items.clone(),
            keep: self.keep,
        }
    }
}

impl<T> Spares<T> {
    /// Keeping at most `keep`.
    pub(super) fn new(keep: usize) -> Self {
        Spares {
            items: Arc::default(),
            keep,
        }
    }

    /// One kept, if any.
    pub(super) fn take(&self) -> Option<T> {
        self.items.lock().ok().and_then(|mut items| items.pop())
    }

    /// Keeps `item`, unless `keep` are kept already.
    pub(super) fn put(&self, item: T) {
        if let Ok(mut items) = self.items.lock()
            && items.len() < self.keep
        {
            items.push(item);
        }
    }

    /// How many are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.items.lock().map_or(0, |items| items.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// At most `threads` jobs run at once (`run` waits for a permit), and
    /// every result comes back, in the order asked for, on a few threads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_share_at_most_the_pools_threads() {
        let pool = DecodePool::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut pending = std::collections::VecDeque::new();
        let mut threads = HashSet::new();
        let mut next = 0;
        for i in 0..200usize {
            let (running, most) = (running.clone(), most.clone());
            // Waits for a permit while two jobs are queued or running: the
            // results are collected as they come, in order.
            let job = pool.run(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(50));
                running.fetch_sub(1, Ordering::SeqCst);
                (i, std::thread::current().id())
            });
            pending.push_back(job.await);
            if pending.len() == 2 {
                let (j, thread) = pending.pop_front().unwrap().result().await.unwrap();
                assert_eq!(j, next);
                next += 1;
                threads.insert(thread);
            }
        }
        for p in pending {
            let (j, thread) = p.result().await.unwrap();
            assert_eq!(j, next);
            next += 1;
            threads.insert(thread);
        }
        assert_eq!(next, 200, "every result came back");
        assert!(most.load(Ordering::SeqCst) <= 2);
        // Which threads is tokio's to say (a worker idle for `LINGER` gives
        // its thread back); jobs queued back to back keep their workers.
        assert!(threads.len() <= 20, "{} threads", threads.len());
    }

    /// Jobs queued about [`LINGER`] apart, as a worker decides whether to
    /// give its thread back: each one runs (none is left queued with no
    /// worker), one at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_queued_as_its_worker_leaves_still_runs() {
        let pool = DecodePool::new(1);
        for i in 0..60u64 {
            let job = pool.run(move || i).await;
            let waited = tokio::time::timeout(Duration::from_secs(10), job.result()).await;
            assert_eq!(waited.expect("the job ran"), Ok(i));
            // 1.5–2.5 ms: around the moment the worker gives up waiting.
            let micros = 1500 + (i % 11) * 100;
            std::thread::sleep(Duration::from_micros(micros));
        }
    }

    /// A panicking job is its own result; the worker goes on with the next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_is_lost_and_the_next_runs() {
        let pool = DecodePool::new(1);
        let bad = pool.run(|| -> u32 { panic!("bad page") }).await;
        let good = pool.run(|| 7u32).await;
        assert_eq!(bad.result().await, Err(Lost::Panicked));
        assert_eq!(good.result().await, Ok(7));
    }
}
