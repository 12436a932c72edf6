//! The workqueue of a controller: client-go's `util/workqueue` (spec 1.10) as
//! pure state machines, time passed in, owned by one actor.
//!
//! A controller does not act on events; it acts on *keys*. Events name the
//! keys that may need work, the queue makes sure each key is worked on by one
//! worker at a time, as few times as possible, and again later when the work
//! failed. Layered as client-go's, each layer embedding the one below (and
//! reachable from it through `Deref`, for reads only):
//!
//! * [`Queue`] (`queue.rs`, WQ-1..WQ-7): the dirty set (a key added while it
//!   waits is queued once), the processing set (a key handed out is handed out
//!   again only after `done`; one added meanwhile is handed out once more
//!   afterwards), `len`, the two shutdown modes and the base metrics, with
//!   [`Priority`] lanes (below).
//! * [`DelayingQueue`] (`delaying.rs`, DQ-1..DQ-3): keys that become ready at a
//!   given time; a key waiting twice keeps its earliest time; keys are
//!   released in ready-time order.
//! * [`RateLimitingQueue`] (`rate_limiting.rs`, RL-8) over a [`RateLimiter`]
//!   (`rate_limiter.rs`, RL-1..RL-7: per-item exponential, token bucket,
//!   fast-slow, max-of, with-max-wait, the default controller limiter), and
//!   the [`Outcome`] a worker reports.
//! * [`WorkQueue`] (`actor.rs`, messages in `messages.rs`): the actor that owns
//!   a [`RateLimitingQueue`], answers a worker's [`Next`] when a key is ready
//!   (no polling), and arms one timer for the next ready time.
//! * [`parallelize_until`] (`parallelize.rs`, WQ-8): a piece of work split in
//!   chunks over a bounded number of concurrent workers.
//!
//! # Rules beyond client-go (PQ-n)
//!
//! * **PQ-1** Priority by cause: a key enters at the [`Priority`] of the
//!   [`Cause`](crate::Cause) of the event that named it: `Initial` and `Resync`
//!   at `Low`, `Watch` and `Relist` (real changes) at `Normal` (controller-
//!   runtime's priority queue, default since v0.23). After a restart, real
//!   changes are not stuck behind the whole initial list.
//! * **PQ-2** Ready keys are handed out highest priority first, first come
//!   first served within a priority.
//! * **PQ-3** Re-adding a key never lowers its priority; at a higher priority
//!   it is promoted (a ready key moves to the back of the higher lane, a key
//!   waiting or re-added while processing keeps the higher priority). Retries
//!   and requeues keep the priority of the attempt they follow.
//! * **PQ-4** One place per key: a key is ready, *or* waiting, *or* processing
//!   (with at most one pending re-run). A plain add of a waiting key makes it
//!   ready and ends the wait, so it is never processed twice for one add
//!   (client-go keeps both: kubernetes#126027).
//! * **PQ-5** A plain add never cuts a failure backoff short: the add of a
//!   key waiting out a backoff ([`RateLimitingQueue::add_rate_limited`], a
//!   failed attempt) merges into that wait, and the key is processed once,
//!   when the backoff ends, with the state of then (nothing is lost: workers
//!   read the current state). client-go's `Add` bypasses the backoff, so a
//!   key whose failures are retriggered by unrelated events reaches the
//!   maximum backoff within seconds (kubernetes#132805). A plain delay
//!   (`add_after`, a requeue-after) is ended by an add.
//! * **PQ-6** Failure counters exist only for keys in the queue: forgotten
//!   when an attempt succeeds and when the key leaves the queue (done with
//!   nothing pending, dropped at shutdown), so they never grow without bound
//!   when `forget` is never called.
//! * **PQ-7** A drain ([`Queue::shut_down_with_drain`]) is complete only when
//!   nothing is processing *and* nothing is ready (client-go returns as soon as
//!   nothing is processing, even with keys still queued).
//! * **PQ-8** [`RateLimitingQueue::close`]: shut down and hand nothing more
//!   out; the keys still ready, pending or waiting are returned (what a
//!   graceful stop reports as left), processing ones may finish.
//!
//! # Metrics
//!
//! Each queue has a name and computes client-go's metrics (WQ-7) from the
//! times passed in; [`QueueMetrics`] is a snapshot with the Prometheus names
//! on its fields. The library registers no metrics: the program exports them.
//! The unfinished-work gauges are computed when the snapshot is taken, not
//! every 500 ms.

pub mod actor;
pub mod delaying;
mod hasher;
pub mod messages;
pub mod metrics;
pub mod parallelize;
pub mod priority;
pub mod queue;
pub mod rate_limiter;
pub mod rate_limiting;
mod waiters;

#[cfg(test)]
mod properties;

pub use actor::WorkQueue;
pub use delaying::DelayingQueue;
pub use messages::{
    Add, AddAfter, AddRateLimited, Close, DrainReport, Finish, Forget, GetMetrics, Lease, Next,
    NumRequeues, Release, ShutDown, ShutDownWithDrain,
};
pub use metrics::{DURATION_BUCKETS, Histogram, QueueMetrics};
pub use parallelize::parallelize_until;
pub use priority::Priority;
pub use queue::{Added, Get, Queue, Ticket};
pub use rate_limiter::{
    FastSlow, ItemExponential, MaxOf, RateLimiter, TokenBucket, WithMaxWait,
    default_controller_rate_limiter, default_item_based_rate_limiter,
};
pub use rate_limiting::{Leftovers, Outcome, RateLimitingQueue};
