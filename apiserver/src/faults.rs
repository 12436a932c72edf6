//! Fault injection: the knobs tests (from Rust) and demos (over `/admin/faults/...`) turn
//! to make the server misbehave the way real servers and networks do.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::status::ApiError;
use crate::store::Store;

/// The verb a request performs (for `fail_next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// List a collection.
    List,
    /// Start a watch.
    Watch,
    /// Get one object.
    Get,
    /// Create (POST).
    Create,
    /// Replace (PUT).
    Update,
    /// Patch.
    Patch,
    /// Delete one object or a collection.
    Delete,
}

/// How an injected failure answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Failure {
    /// 429 TooManyRequests with `Retry-After`.
    TooManyRequests {
        /// Seconds in the `Retry-After` header.
        retry_after_secs: u32,
    },
    /// 500 InternalError.
    Internal,
}

impl Failure {
    /// The error a failed request answers with.
    pub fn to_error(self) -> ApiError {
        match self {
            Failure::TooManyRequests { retry_after_secs } => {
                ApiError::too_many_requests(retry_after_secs)
            }
            Failure::Internal => ApiError::internal("injected fault"),
        }
    }
}

/// Watch-stream faults, broadcast to every open watch stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchFaultState {
    /// Bumped by `close_all_watches`: streams that started before end now.
    pub close_all_generation: u64,
    /// End each watch after this many events.
    pub close_after_events: Option<u64>,
    /// Keep connections open but send nothing.
    pub stalled: bool,
    /// Bumped by `inject_malformed_line`: every open stream writes one bad line.
    pub malformed_generation: u64,
    /// Send no periodic or pre-timeout BOOKMARKs.
    pub suppress_bookmarks: bool,
}

struct FaultsInner {
    watch_tx: watch::Sender<WatchFaultState>,
    failures: Mutex<HashMap<Verb, VecDeque<(Failure, u32)>>>,
    latency: Mutex<Duration>,
    /// Answer 406 to metadata-only requests (`refuse_metadata`).
    refuse_metadata: AtomicBool,
    store: Arc<Store>,
}

/// Cloneable handle to the server's fault switches.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<FaultsInner>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("watch", &*self.inner.watch_tx.borrow())
            .field("latency", &*self.inner.latency.lock())
            .finish_non_exhaustive()
    }
}

/// The line written by `inject_malformed_line`: not valid JSON.
pub const MALFORMED_LINE: &[u8] = b"{\"type\":\"MODIFIED\",\"object\":{this is not json\n";

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        let (watch_tx, _) = watch::channel(WatchFaultState::default());
        Faults {
            inner: Arc::new(FaultsInner {
                watch_tx,
                failures: Mutex::new(HashMap::new()),
                latency: Mutex::new(Duration::ZERO),
                refuse_metadata: AtomicBool::new(false),
                store,
            }),
        }
    }

    /// End every open watch stream now (cleanly, like a server-side timeout).
    pub fn close_all_watches(&self) {
        self.inner
            .watch_tx
            .send_modify(|s| s.close_all_generation += 1);
    }

    /// End each watch after `n` events (`None` turns this off).
    pub fn close_watches_after(&self, n: Option<u64>) {
        self.inner
            .watch_tx
            .send_modify(|s| s.close_after_events = n);
    }

    /// Compact history up to the current RV: older RVs then get 410.
    pub fn compact(&self) {
        self.inner.store.compact();
    }

    /// Fail the next `count` requests of `verb` with `failure`.
    pub fn fail_next(&self, verb: Verb, count: u32, failure: Failure) {
        if count == 0 {
            return;
        }
        let mut f = self.inner.failures.lock();
        f.entry(verb).or_default().push_back((failure, count));
    }

    /// Delay every API request by `latency` (zero turns it off; capped at one hour).
    pub fn set_latency(&self, latency: Duration) {
        *self.inner.latency.lock() = latency.min(Duration::from_secs(3600));
    }

    /// Answer (or stop answering) 406 Not Acceptable to every request for
    /// `PartialObjectMetadata` or `PartialObjectMetadataList`, as a server
    /// or an aggregated API without metadata-only representations does.
    pub fn refuse_metadata(&self, refuse: bool) {
        self.inner.refuse_metadata.store(refuse, Ordering::Relaxed);
    }

    /// True while metadata-only requests are refused (`refuse_metadata`).
    pub fn refuses_metadata(&self) -> bool {
        self.inner.refuse_metadata.load(Ordering::Relaxed)
    }

    /// Stall (or resume) every watch stream: the connection stays open but nothing is sent.
    pub fn stall_watches(&self, stalled: bool) {
        self.inner.watch_tx.send_modify(|s| s.stalled = stalled);
    }

    /// Write one malformed line into each open watch stream.
    pub fn inject_malformed_line(&self) {
        self.inner
            .watch_tx
            .send_modify(|s| s.malformed_generation += 1);
    }

    /// Stop (or resume) periodic and pre-timeout BOOKMARKs.
    pub fn suppress_bookmarks(&self, suppress: bool) {
        self.inner
            .watch_tx
            .send_modify(|s| s.suppress_bookmarks = suppress);
    }

    /// Turn every persistent fault off (latency, stalls, bookmark suppression, close-after, queued failures, refused metadata).
    pub fn clear(&self) {
        self.inner.failures.lock().clear();
        self.refuse_metadata(false);
        *self.inner.latency.lock() = Duration::ZERO;
        self.inner.watch_tx.send_modify(|s| {
            s.close_after_events = None;
            s.stalled = false;
            s.suppress_bookmarks = false;
        });
    }

    /// The next injected failure for `verb`, if one is queued (consumes it).
    pub fn take_failure(&self, verb: Verb) -> Option<Failure> {
        let mut failures = self.inner.failures.lock();
        let queue = failures.get_mut(&verb)?;
        let (failure, left) = queue.front_mut()?;
        let failure = *failure;
        *left -= 1;
        if *left == 0 {
            queue.pop_front();
        }
        Some(failure)
    }

    /// Current injected latency.
    pub fn latency(&self) -> Duration {
        *self.inner.latency.lock()
    }

    /// Current watch fault state.
    pub fn watch_state(&self) -> WatchFaultState {
        self.inner.watch_tx.borrow().clone()
    }

    /// Queued failures per verb (for the admin endpoint).
    pub fn pending_failures(&self) -> HashMap<Verb, usize> {
        self.inner
            .failures
            .lock()
            .iter()
            .map(|(v, q)| (*v, q.iter().map(|(_, n)| *n as usize).sum()))
            .collect()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<WatchFaultState> {
        self.inner.watch_tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::resource::ResourceType;

    #[test]
    fn fail_next_is_consumed_in_order() {
        let store = Arc::new(Store::new(Registry::new(ResourceType::defaults()), 10, 10));
        let f = Faults::new(store);
        f.fail_next(Verb::List, 2, Failure::Internal);
        f.fail_next(
            Verb::List,
            1,
            Failure::TooManyRequests {
                retry_after_secs: 2,
            },
        );
        assert_eq!(f.take_failure(Verb::Get), None);
        assert_eq!(f.take_failure(Verb::List), Some(Failure::Internal));
        assert_eq!(f.take_failure(Verb::List), Some(Failure::Internal));
        let e = f.take_failure(Verb::List).unwrap().to_error();
        assert_eq!((e.code, e.retry_after_secs), (429, Some(2)));
        assert_eq!(f.take_failure(Verb::List), None);
    }
}
