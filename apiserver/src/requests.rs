//! The request log: every HTTP request the server answered, and every connection it
//! accepted or reset, so tests can bound what a client did during an outage or after it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

/// One answered request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Position in the log since the server started (never reused, survives `clear`).
    pub seq: u64,
    /// When the answer's head was ready (tokio's clock: paused time in paused tests).
    pub at: Instant,
    /// How many restarts the server had been through when it answered (0 before the first).
    pub epoch: u64,
    /// The HTTP method.
    pub method: String,
    /// The URL path, without the query.
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The Kubernetes verb (`list`, `watch`, `get`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`) of a resource request, or the lowercase HTTP method of any other path.
    pub verb: String,
    /// The authenticated user, when authentication is on.
    pub user: Option<String>,
    /// The HTTP status code answered.
    pub status: u16,
}

/// Totals since the server started (or since [`Requests::clear`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Requests answered, by verb.
    pub by_verb: BTreeMap<String, u64>,
    /// Requests answered in all.
    pub total: u64,
    /// TCP connections accepted while serving.
    pub connections: u64,
    /// Connection attempts reset while the server was down in [`DownMode::Reset`](crate::DownMode::Reset).
    pub reset_while_down: u64,
}

impl RequestCounts {
    /// Requests of one verb.
    pub fn verb(&self, verb: &str) -> u64 {
        self.by_verb.get(verb).copied().unwrap_or(0)
    }
}

#[derive(Debug)]
struct Log {
    records: VecDeque<RequestRecord>,
    capacity: usize,
    next_seq: u64,
    counts: RequestCounts,
}

/// Cloneable handle to the server's request log.
///
/// The log keeps the last [`DEFAULT_CAPACITY`] records (older ones are dropped, the
/// counts keep counting); a record costs about 150 bytes.
#[derive(Debug, Clone)]
pub struct Requests {
    inner: Arc<Mutex<Log>>,
}

/// Records retained by default.
pub const DEFAULT_CAPACITY: usize = 10_000;

impl Default for Requests {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }
}

impl Requests {
    /// A log keeping at most `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Requests {
            inner: Arc::new(Mutex::new(Log {
                records: VecDeque::new(),
                capacity,
                next_seq: 0,
                counts: RequestCounts::default(),
            })),
        }
    }

    pub(crate) fn record(&self, mut record: RequestRecord) {
        let mut log = self.inner.lock();
        record.seq = log.next_seq;
        log.next_seq += 1;
        log.counts.total += 1;
        *log.counts.by_verb.entry(record.verb.clone()).or_default() += 1;
        if log.capacity == 0 {
            return;
        }
        while log.records.len() >= log.capacity {
            log.records.pop_front();
        }
        log.records.push_back(record);
    }

    pub(crate) fn connection_accepted(&self) {
        self.inner.lock().counts.connections += 1;
    }

    pub(crate) fn reset_while_down(&self) {
        self.inner.lock().counts.reset_while_down += 1;
    }

    /// The totals.
    pub fn counts(&self) -> RequestCounts {
        self.inner.lock().counts.clone()
    }

    /// The retained records, oldest first.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.inner.lock().records.iter().cloned().collect()
    }

    /// The retained records after `seq` (use the `seq` of the last record seen, or
    /// [`Requests::mark`] taken before the part of the test to examine).
    pub fn since(&self, mark: u64) -> Vec<RequestRecord> {
        self.inner
            .lock()
            .records
            .iter()
            .filter(|r| r.seq >= mark)
            .cloned()
            .collect()
    }

    /// The `seq` the next record will get: `since(mark())` later returns what came after.
    pub fn mark(&self) -> u64 {
        self.inner.lock().next_seq
    }

    /// Retained records that satisfy `f`.
    pub fn count(&self, f: impl Fn(&RequestRecord) -> bool) -> usize {
        self.inner.lock().records.iter().filter(|r| f(r)).count()
    }

    /// Forget the records and reset the counts (sequence numbers go on).
    pub fn clear(&self) {
        let mut log = self.inner.lock();
        log.records.clear();
        log.counts = RequestCounts::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(verb: &str) -> RequestRecord {
        RequestRecord {
            seq: 0,
            at: Instant::now(),
            epoch: 0,
            method: "GET".into(),
            path: "/api/v1/configmaps".into(),
            query: None,
            verb: verb.into(),
            user: None,
            status: 200,
        }
    }

    #[test]
    fn log_is_bounded_but_counts_keep_counting() {
        let log = Requests::with_capacity(2);
        log.record(rec("list"));
        let mark = log.mark();
        log.record(rec("watch"));
        log.record(rec("watch"));
        let counts = log.counts();
        assert_eq!(
            (counts.total, counts.verb("watch"), counts.verb("list")),
            (3, 2, 1)
        );
        assert_eq!(log.records().len(), 2);
        assert_eq!(log.since(mark).len(), 2);
        assert_eq!(log.since(mark + 1).len(), 1);
        assert_eq!(log.count(|r| r.verb == "watch"), 2);
        log.clear();
        assert_eq!(log.counts().total, 0);
        assert_eq!(log.mark(), 3);
    }
}
