//! The Reflector's decisions as a pure state machine (spec 1.6).
//!
//! The actor shell performs the requests; this struct says which request to
//! make next and with which resourceVersion, and how to react to each outcome.
//! Time and randomness are inputs.
//!
//! Rules implemented:
//! - R-9 relist resourceVersion: `""` after an expired/too-large list, `"0"`
//!   before the first sync, otherwise the last synced RV ("not older than").
//! - page size: an explicitly configured size for every list; by
//!   default 500 for `""`/`"0"`, and unpaginated for a specific RV unless an
//!   earlier list at `"0"` came back paginated.
//! - R-12 a list failing with 410 or "too large resource version" retries at
//!   once with `""`; other list errors back off and relist.
//! - R-13 a successful list records its RV and clears the unavailable flag.
//! - R-15 watch from the last RV, bookmarks on, timeout uniform in [5, 10) min.
//! - on opening or during a watch: 429 and connection refused back
//!   off and re-watch without a relist; a clean close re-watches at once; 410
//!   and other errors back off and relist at the last RV (not `""`).
//!   Transport failures re-watch too, and waits after a server that does
//!   not answer are cut when it comes back ([`recovery`](super::recovery)).
//! - R-17 a watch shorter than 1 s with no event is an error (relist).
//! - R-18 the RV recorded is the last processed event's, bookmarks included.
//! - R-24..R-28 streaming lists (`sendInitialEvents`), falling back to a
//!   plain list when the server refuses them.
//!
//! Deliberate differences from client-go and kube-runtime:
//! - The backoff is not reset when a relist starts (kube-runtime's defect),
//!   when it succeeds, nor by the watch's first event: only two quiet minutes
//!   without a step reset it, so a server whose list works but whose
//!   watch fails, even after an event or a bookmark, is not hammered.
//! - A 410 when opening a watch relists (kube-runtime retries the stale RV forever).
//! - Transport failures on a watch re-watch, and a server's return is noticed
//!   by probes: see [`recovery`](super::recovery).
//! - After a server refuses a streaming list (400/422/404/405/501 or a very
//!   short watch), we stop asking it for streaming lists.

use std::time::{Duration, Instant};

use super::backoff::Backoff;
use super::failure::Failure;
use super::recovery::{Outage, ProbeVerdict};

/// The page size of lists when none is configured.
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// A watch shorter than this with no event is an error.
pub const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);
/// Minimum server-side watch timeout.
pub const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// The smallest `min_watch_timeout` accepted; a smaller one is raised to it
/// (the server's `timeoutSeconds` counts whole seconds).
pub const MIN_WATCH_TIMEOUT_FLOOR: Duration = Duration::from_secs(1);

/// What the shell should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// List now with [`ReflectorState::list_request`].
    List,
    /// Wait, then list (a relist after an error).
    ListAfter(Duration),
    /// Open a watch now with [`ReflectorState::watch_request`].
    Watch,
    /// Wait, then open a watch (no relist).
    WatchAfter(Duration),
}

/// The resourceVersion semantics of a list request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListVersion {
    /// `resourceVersion=""`: a consistent, most recent read.
    MostRecent,
    /// `resourceVersion="0"`: any version (served from the watch cache).
    Any,
    /// `resourceVersion=N`, `resourceVersionMatch=NotOlderThan`.
    NotOlderThan(String),
}

/// One list request to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Which resourceVersion to ask for.
    pub version: ListVersion,
    /// `limit` for pagination; `None` for an unpaginated list.
    pub page_size: Option<u32>,
    /// Ask for a streaming list (`sendInitialEvents=true` watch) instead of a LIST.
    pub streaming: bool,
}

/// One watch request to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// Start after this resourceVersion.
    pub resource_version: String,
    /// Server-side timeout, uniform in `[5, 10)` minutes.
    pub timeout_secs: u32,
}

/// How a watch stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEnd {
    /// The server closed the stream cleanly (timeout, or a watch closed on purpose).
    Closed,
    /// An `ERROR` event, a decode failure or a transport error.
    Failed(Failure),
}

/// Configuration of the rules that users may tune.
#[derive(Debug, Clone)]
pub struct ReflectorOptions {
    /// Page size of lists: `None` for the default (500, and relists at
    /// a resourceVersion unpaginated so that the watch cache serves them);
    /// `Some(n)` for `n` on every list; `Some(0)` for no pagination.
    pub page_size: Option<u32>,
    /// Try streaming lists before plain lists.
    pub streaming_lists: bool,
    /// Hand a streaming list's initial events on a page (`page_size`
    /// objects) at a time while it streams (DF-9), rather than all at its
    /// end bookmark. For a compact cache, which must never hold a list
    /// decoded; off by default: a decoded cache holds those objects anyway,
    /// and one hand-over at the end costs 15–20 % less CPU (BENCHMARKS.md).
    pub stream_in_pages: bool,
    /// The backoff used between failed attempts.
    pub backoff: Backoff,
    /// The shortest watch timeout asked of the server; each watch asks for a
    /// jittered `[min, 2·min)`. Default: 5 minutes.
    pub min_watch_timeout: Duration,
    /// How long a list page, or the opening of a watch, may go without a byte
    /// before it is given up (then backed off and retried); a watch is given
    /// up this long after the timeout it asked the server for. kube-client
    /// sets no read timeout, so without this a half-open connection or a
    /// frozen server would hang the informer silently. Default: 60 s;
    /// `ZERO` turns these deadlines off.
    pub read_timeout: Duration,
    /// Probe a server that does not answer while a backoff waits, and end
    /// the wait when it is back ([`recovery`](super::recovery)). Default: on.
    pub probe: bool,
}

impl Default for ReflectorOptions {
    fn default() -> Self {
        ReflectorOptions {
            page_size: None,
            streaming_lists: false,
            stream_in_pages: false,
            backoff: Backoff::default(),
            min_watch_timeout: MIN_WATCH_TIMEOUT,
            read_timeout: Duration::from_secs(60),
            probe: true,
        }
    }
}

/// The Reflector's memory across lists, watches and actor restarts.
#[derive(Debug, Clone)]
pub struct ReflectorState {
    page_size: Option<u32>,
    streaming_lists: bool,
    stream_in_pages: bool,
    backoff: Backoff,
    min_watch_timeout: Duration,
    last_sync_rv: String,
    rv_unavailable: bool,
    /// The next list is a plain one: the streaming list failed.
    plain_list_once: bool,
    paginated_result: bool,
    watch_started: Option<Instant>,
    watch_events: u64,
    listed_once: bool,
    relists: u64,
    watch_restarts: u64,
    /// What is known of the server's absence, if it is away.
    outage: Outage,
    probe: bool,
    /// A snapshot was restored and the server has not answered the watch
    /// from its resourceVersion yet: a 410 then relists at once.
    resuming: bool,
    /// The list (or restore) under way has handed pages to the sink: if it
    /// fails, however (a panic of the loop included), the next list must
    /// not be older than those pages.
    pages_handed: bool,
}

impl ReflectorState {
    /// A fresh Reflector that has never listed.
    pub fn new(options: ReflectorOptions) -> Self {
        ReflectorState {
            page_size: options.page_size,
            streaming_lists: options.streaming_lists,
            stream_in_pages: options.stream_in_pages,
            backoff: options.backoff,
            min_watch_timeout: options.min_watch_timeout.max(MIN_WATCH_TIMEOUT_FLOOR),
            last_sync_rv: String::new(),
            rv_unavailable: false,
            plain_list_once: false,
            paginated_result: false,
            watch_started: None,
            watch_events: 0,
            listed_once: false,
            relists: 0,
            watch_restarts: 0,
            outage: Outage::default(),
            probe: options.probe,
            pages_handed: false,
            resuming: false,
        }
    }

    /// A snapshot consistent at `resource_version` was restored in place of
    /// the first list: the next watch starts from it. Until the server
    /// answers that watch with an event or a bookmark, a 410 (or a
    /// resourceVersion the server does not have yet) relists at once, not
    /// older than the snapshot ([`warm_start`](super::warm_start)).
    pub fn restored(&mut self, resource_version: &str) {
        self.last_sync_rv = resource_version.to_owned();
        self.resuming = true;
        self.pages_handed = false;
    }

    /// True between [`restored`](Self::restored) and the server's first
    /// event, bookmark or successful list.
    pub fn resuming(&self) -> bool {
        self.resuming
    }

    /// The resourceVersion of the last list or processed watch event.
    pub fn last_sync_resource_version(&self) -> &str {
        &self.last_sync_rv
    }

    /// How many lists were made after the first one.
    pub fn relists(&self) -> u64 {
        self.relists
    }

    /// How many watches were opened again after the first one.
    pub fn watch_restarts(&self) -> u64 {
        self.watch_restarts
    }

    /// The backoff state (for metrics).
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// The next list to make.
    pub fn list_request(&self) -> ListRequest {
        let version = if self.rv_unavailable {
            ListVersion::MostRecent
        } else if self.last_sync_rv.is_empty() {
            ListVersion::Any
        } else {
            ListVersion::NotOlderThan(self.last_sync_rv.clone())
        };
        let page_size = match (self.page_size, &version) {
            (Some(0), _) => None,
            (Some(size), _) => Some(size),
            // A specific RV is served from the watch cache only unpaginated (k8s#86430).
            (None, ListVersion::NotOlderThan(_)) if !self.paginated_result => None,
            (None, _) => Some(DEFAULT_PAGE_SIZE),
        };
        // A streaming list starts at "" or at the last RV; it needs no pages.
        let streaming = self.streaming_lists && !self.plain_list_once;
        ListRequest {
            version,
            page_size: if streaming { None } else { page_size },
            streaming,
        }
    }

    /// How many of a streaming list's initial events are handed on as one
    /// page while it goes on (DF-9): the list page size when streaming in
    /// pages; otherwise (or with `Some(0)`, unpaginated lists) all of them,
    /// at the end bookmark.
    pub fn streamed_page(&self) -> usize {
        match self.page_size {
            _ if !self.stream_in_pages => usize::MAX,
            Some(0) => usize::MAX,
            Some(size) => size as usize,
            None => DEFAULT_PAGE_SIZE as usize,
        }
    }

    /// A list (or a restore) failed after handing pages on: the next list
    /// asks for the most recent state. One older than the pages
    /// would take their objects back in time and tombstone those created
    /// since.
    pub fn failed_after_pages(&mut self) {
        self.rv_unavailable = true;
    }

    /// The list (or restore) under way handed a page to the sink: should it
    /// end in any failure, [`list_failed`](Self::list_failed) treats it as
    /// [`failed_after_pages`](Self::failed_after_pages), so a panic of the
    /// list-watch loop cannot lose the caller's note of it.
    pub fn pages_handed(&mut self) {
        self.pages_handed = true;
    }

    /// Whether the list (or restore) under way handed a page to the sink.
    pub fn has_handed_pages(&self) -> bool {
        self.pages_handed
    }

    /// A list (or streaming list) succeeded with this resourceVersion.
    pub fn list_succeeded(&mut self, resource_version: &str, paginated: bool) {
        self.plain_list_once = false;
        if paginated && self.list_request().version == ListVersion::Any {
            self.paginated_result = true;
        }
        if self.listed_once {
            self.relists += 1;
        }
        self.listed_once = true;
        self.resuming = false;
        self.rv_unavailable = false;
        self.pages_handed = false;
        self.last_sync_rv = resource_version.to_owned();
        self.outage.healthy();
    }

    /// A list failed. `jitter` is uniform in `[0, 1)`.
    pub fn list_failed(
        &mut self,
        failure: &Failure,
        streaming: bool,
        now: Instant,
        jitter: f64,
    ) -> Next {
        self.outage.failed(failure, now);
        self.plain_list_once = false;
        let next = self.next_after_list_failure(failure, streaming, now, jitter);
        if std::mem::take(&mut self.pages_handed) {
            self.failed_after_pages();
        }
        next
    }

    fn next_after_list_failure(
        &mut self,
        failure: &Failure,
        streaming: bool,
        now: Instant,
        jitter: f64,
    ) -> Next {
        match failure {
            // Retry at once with ""; if "" itself failed, back off.
            Failure::Expired | Failure::TooLargeResourceVersion if !self.rv_unavailable => {
                self.rv_unavailable = true;
                Next::List
            }
            Failure::Unsupported if streaming => {
                tracing::info!("server refused a streaming list; falling back to paginated lists");
                self.streaming_lists = false;
                Next::List
            }
            // Any other streaming failure: this attempt falls back to a
            // plain list at once, the next relist streams again.
            Failure::TooManyRequests { .. } | Failure::ConnectionRefused => {
                Next::ListAfter(self.delay(failure, now, jitter))
            }
            _ if streaming && !failure.unreachable() => {
                tracing::info!(?failure, "streaming list failed; listing instead");
                self.plain_list_once = true;
                Next::List
            }
            _ => Next::ListAfter(self.delay(failure, now, jitter)),
        }
    }

    /// The next watch to open. `jitter` is uniform in `[0, 1)`.
    pub fn watch_request(&mut self, now: Instant, jitter: f64) -> WatchRequest {
        if self.watch_started.is_some() {
            self.watch_restarts += 1;
        }
        self.watch_started = Some(now);
        self.watch_events = 0;
        let secs = self.min_watch_timeout.as_secs_f64() * (1.0 + jitter.clamp(0.0, 0.999_999));
        WatchRequest {
            resource_version: self.last_sync_rv.clone(),
            timeout_secs: secs.min(f64::from(u32::MAX)) as u32,
        }
    }

    /// The request that starts a streaming list: from `""` when the last
    /// RV is unavailable (or none yet), otherwise not older than the last RV.
    pub fn streaming_request(&mut self, now: Instant, jitter: f64) -> WatchRequest {
        let mut req = self.watch_request(now, jitter);
        if self.rv_unavailable {
            req.resource_version.clear();
        }
        req
    }

    /// Opening a watch failed.
    pub fn watch_open_failed(&mut self, failure: &Failure, now: Instant, jitter: f64) -> Next {
        self.watch_failed(failure, now, jitter)
    }

    /// A watch failed to open or in its stream (R-16, R-19, [`recovery`](super::recovery)).
    fn watch_failed(&mut self, failure: &Failure, now: Instant, jitter: f64) -> Next {
        let back = self.outage.failed(failure, now);
        match failure {
            Failure::TooManyRequests { .. } => Next::WatchAfter(self.delay(failure, now, jitter)),
            f if f.unreachable() => {
                let d = self.delay(failure, now, jitter);
                if self.outage.rewatch() {
                    Next::WatchAfter(d)
                } else {
                    tracing::info!("the watch keeps failing without an answer; relisting");
                    Next::ListAfter(d)
                }
            }
            // The server's first answer after it was away (recovery), or
            // a restored snapshot the server no longer (or not yet) has.
            Failure::Expired if back || self.resuming => Next::List,
            Failure::TooLargeResourceVersion if self.resuming => Next::List,
            _ => Next::ListAfter(self.delay(failure, now, jitter)),
        }
    }

    /// A watch event with this resourceVersion was processed. Bookmarks count.
    pub fn event_processed(&mut self, resource_version: &str) {
        self.watch_events += 1;
        self.resuming = false;
        self.outage.healthy();
        if !resource_version.is_empty() {
            self.last_sync_rv.clear();
            self.last_sync_rv.push_str(resource_version);
        }
    }

    /// The watch ended.
    pub fn watch_ended(&mut self, end: &WatchEnd, now: Instant, jitter: f64) -> Next {
        let lasted = self
            .watch_started
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        if *end == WatchEnd::Closed {
            self.outage.answered();
        }
        match end {
            WatchEnd::Closed if lasted < VERY_SHORT_WATCH && self.watch_events == 0 => {
                tracing::warn!(
                    ?lasted,
                    "very short watch: closed in under a second with no event"
                );
                Next::ListAfter(self.delay(&Failure::Other, now, jitter))
            }
            WatchEnd::Closed => Next::Watch,
            WatchEnd::Failed(failure) => self.watch_failed(failure, now, jitter),
        }
    }

    /// How long until the next probe of a server that does not answer, during
    /// a wait of which `remaining` is left, or `None` when it is not to be
    /// probed. `jitter` is uniform in `[0, 1)`.
    pub fn probe_interval(
        &self,
        now: Instant,
        remaining: Duration,
        jitter: f64,
    ) -> Option<Duration> {
        self.outage
            .probe_interval(now, remaining, jitter)
            .filter(|_| self.probe)
    }

    /// A probe ended with `result`.
    pub fn probed(&mut self, result: &Result<(), Failure>) -> ProbeVerdict {
        self.outage.probed(result)
    }

    fn delay(&mut self, failure: &Failure, now: Instant, jitter: f64) -> Duration {
        let d = self.backoff.next_delay(now, jitter);
        match failure {
            // Honour the server's Retry-After, but never beyond the backoff cap.
            Failure::TooManyRequests {
                retry_after: Some(r),
            } => d.max((*r).min(self.backoff.cap())),
            _ => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ReflectorState {
        ReflectorState::new(ReflectorOptions::default())
    }

    #[test]
    fn r_9_r_10_first_list_is_any_paginated() {
        let s = state();
        assert_eq!(
            s.list_request(),
            ListRequest {
                version: ListVersion::Any,
                page_size: Some(500),
                streaming: false
            }
        );
    }

    #[test]
    fn r_10_relist_at_specific_rv_is_unpaginated_unless_rv0_was_paginated() {
        let mut s = state();
        s.list_succeeded("10", false);
        assert_eq!(
            s.list_request(),
            ListRequest {
                version: ListVersion::NotOlderThan("10".into()),
                page_size: None,
                streaming: false
            }
        );
        let mut s = state();
        s.list_succeeded("10", true);
        assert_eq!(s.list_request().page_size, Some(500));
    }

    #[test]
    fn r_10_an_explicit_page_size_applies_to_every_list() {
        let t = Instant::now();
        let mut s = ReflectorState::new(ReflectorOptions {
            page_size: Some(4),
            ..Default::default()
        });
        assert_eq!(s.list_request().page_size, Some(4));
        s.list_succeeded("10", false);
        assert_eq!(
            s.list_request(),
            ListRequest {
                version: ListVersion::NotOlderThan("10".into()),
                page_size: Some(4),
                streaming: false
            }
        );
        assert_eq!(s.list_failed(&Failure::Expired, false, t, 0.0), Next::List);
        assert_eq!(s.list_request().page_size, Some(4));
        let mut unpaginated = ReflectorState::new(ReflectorOptions {
            page_size: Some(0),
            ..Default::default()
        });
        assert_eq!(unpaginated.list_request().page_size, None);
        unpaginated.list_succeeded("10", true);
        assert_eq!(unpaginated.list_request().page_size, None);
    }

    #[test]
    fn r_12_expired_or_too_large_list_retries_at_once_with_most_recent() {
        let t = Instant::now();
        for f in [Failure::Expired, Failure::TooLargeResourceVersion] {
            let mut s = state();
            s.list_succeeded("10", false);
            assert_eq!(s.list_failed(&f, false, t, 0.0), Next::List);
            assert_eq!(s.list_request().version, ListVersion::MostRecent);
            assert_eq!(s.list_request().page_size, Some(500));
            s.list_succeeded("20", false);
            assert_eq!(
                s.list_request().version,
                ListVersion::NotOlderThan("20".into())
            );
        }
    }

    /// A list (or restore) that handed pages on and then failed in any way,
    /// a panic of the loop included (which reports a plain failure), lists
    /// the most recent state next, never one older than its pages; one
    /// that completes forgets them.
    #[test]
    fn r_12_any_failure_after_pages_lists_the_most_recent_state() {
        let t = Instant::now();
        let mut s = state();
        s.pages_handed();
        assert!(matches!(
            s.list_failed(&Failure::Other, false, t, 0.0),
            Next::ListAfter(_)
        ));
        assert_eq!(s.list_request().version, ListVersion::MostRecent);
        s.pages_handed();
        s.list_succeeded("20", false);
        assert!(matches!(
            s.list_failed(&Failure::Other, false, t, 0.0),
            Next::ListAfter(_)
        ));
        assert_eq!(
            s.list_request().version,
            ListVersion::NotOlderThan("20".into())
        );
        // An expired continue token after pages still retries at once.
        let mut s = state();
        s.list_succeeded("10", false);
        s.pages_handed();
        assert_eq!(s.list_failed(&Failure::Expired, false, t, 0.0), Next::List);
        assert_eq!(s.list_request().version, ListVersion::MostRecent);
        // A restore that completed: its pages are the state at its RV.
        let mut s = state();
        s.pages_handed();
        s.restored("30");
        assert!(matches!(
            s.list_failed(&Failure::Other, false, t, 0.0),
            Next::ListAfter(_)
        ));
        assert_eq!(
            s.list_request().version,
            ListVersion::NotOlderThan("30".into())
        );
    }

    #[test]
    fn r_12_a_failing_most_recent_list_backs_off_instead_of_looping() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("10", false);
        assert_eq!(s.list_failed(&Failure::Expired, false, t, 0.0), Next::List);
        assert!(matches!(
            s.list_failed(&Failure::TooLargeResourceVersion, false, t, 0.0),
            Next::ListAfter(_)
        ));
        assert_eq!(s.list_request().version, ListVersion::MostRecent);
    }

    #[test]
    fn r_24_streaming_list_starts_from_empty_rv_when_unavailable() {
        let t = Instant::now();
        let mut s = ReflectorState::new(ReflectorOptions {
            streaming_lists: true,
            ..Default::default()
        });
        assert_eq!(s.streaming_request(t, 0.0).resource_version, "");
        s.list_succeeded("10", false);
        assert_eq!(s.streaming_request(t, 0.0).resource_version, "10");
        assert_eq!(s.list_failed(&Failure::Expired, true, t, 0.0), Next::List);
        assert_eq!(s.streaming_request(t, 0.0).resource_version, "");
    }

    #[test]
    fn retry_after_is_capped_by_the_backoff_cap() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("1", false);
        let huge = Failure::TooManyRequests {
            retry_after: Some(Duration::from_secs(86_400)),
        };
        assert_eq!(
            s.watch_open_failed(&huge, t, 0.0),
            Next::WatchAfter(Duration::from_secs(30))
        );
    }

    #[test]
    fn r_23_other_list_errors_back_off_and_keep_the_rv() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("10", false);
        assert_eq!(
            s.list_failed(&Failure::ConnectionRefused, false, t, 0.0),
            Next::ListAfter(Duration::from_millis(800))
        );
        assert_eq!(
            s.list_failed(&Failure::Other, false, t, 0.0),
            Next::ListAfter(Duration::from_millis(1600))
        );
        assert_eq!(
            s.list_request().version,
            ListVersion::NotOlderThan("10".into())
        );
    }

    #[test]
    fn r_15_watch_from_last_rv_with_timeout_in_5_to_10_minutes() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("42", false);
        let w = s.watch_request(t, 0.0);
        assert_eq!(
            w,
            WatchRequest {
                resource_version: "42".into(),
                timeout_secs: 300
            }
        );
        assert_eq!(s.watch_request(t, 0.999_999_9).timeout_secs, 599);
        assert_eq!(s.watch_restarts(), 1);
    }

    #[test]
    fn r_16_watch_open_429_and_refused_rewatch_others_relist() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("1", false);
        assert_eq!(
            s.watch_open_failed(
                &Failure::TooManyRequests {
                    retry_after: Some(Duration::from_secs(5))
                },
                t,
                0.0
            ),
            Next::WatchAfter(Duration::from_secs(5))
        );
        assert_eq!(
            s.watch_open_failed(&Failure::ConnectionRefused, t, 0.0),
            Next::WatchAfter(Duration::from_millis(1600))
        );
        // Unlike kube-runtime, a 410 when opening a watch relists (at the last RV).
        assert!(matches!(
            s.watch_open_failed(&Failure::Expired, t, 0.0),
            Next::ListAfter(_)
        ));
        assert_eq!(
            s.list_request().version,
            ListVersion::NotOlderThan("1".into())
        );
    }

    #[test]
    fn r_18_rv_is_the_last_processed_event_not_the_maximum() {
        let mut s = state();
        s.list_succeeded("10", false);
        s.event_processed("55");
        s.event_processed("32");
        assert_eq!(s.last_sync_resource_version(), "32");
    }

    #[test]
    fn r_19_clean_close_rewatches_at_once_without_backoff() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("10", false);
        s.watch_request(t, 0.0);
        s.event_processed("11");
        assert_eq!(
            s.watch_ended(&WatchEnd::Closed, t + Duration::from_millis(10), 0.0),
            Next::Watch
        );
        assert_eq!(s.backoff().steps(), 0);
    }

    #[test]
    fn r_19_watch_410_relists_at_last_rv_and_other_errors_relist() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("10", false);
        s.watch_request(t, 0.0);
        s.event_processed("12");
        assert!(matches!(
            s.watch_ended(&WatchEnd::Failed(Failure::Expired), t, 0.0),
            Next::ListAfter(_)
        ));
        assert_eq!(
            s.list_request().version,
            ListVersion::NotOlderThan("12".into())
        );
        assert!(matches!(
            s.watch_ended(&WatchEnd::Failed(Failure::Malformed), t, 0.0),
            Next::ListAfter(_)
        ));
        assert!(matches!(
            s.watch_ended(
                &WatchEnd::Failed(Failure::TooManyRequests { retry_after: None }),
                t,
                0.0
            ),
            Next::WatchAfter(_)
        ));
    }

    #[test]
    fn r_17_very_short_watch_is_an_error() {
        let t = Instant::now();
        let mut s = state();
        s.list_succeeded("10", false);
        s.watch_request(t, 0.0);
        assert!(matches!(
            s.watch_ended(&WatchEnd::Closed, t + Duration::from_millis(100), 0.0),
            Next::ListAfter(_)
        ));
        s.watch_request(t, 0.0);
        assert_eq!(
            s.watch_ended(&WatchEnd::Closed, t + Duration::from_secs(2), 0.0),
            Next::Watch
        );
    }

    #[test]
    fn backoff_survives_relists_and_events_until_two_quiet_minutes() {
        let t = Instant::now();
        let mut s = state();
        // The list works; each watch gets an event (or a bookmark), then
        // fails: the delays keep growing.
        let mut delays = vec![];
        for i in 0..4 {
            s.list_succeeded("10", false);
            s.watch_request(t, 0.0);
            if i % 2 == 1 {
                s.event_processed("11");
            }
            match s.watch_ended(&WatchEnd::Failed(Failure::Other), t, 0.0) {
                Next::ListAfter(d) => delays.push(d.as_millis()),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(delays, vec![800, 1600, 3200, 6400]);
        // Two quiet minutes later, the next failure starts over.
        let later = t + Duration::from_secs(121);
        s.list_succeeded("10", false);
        s.watch_request(later, 0.0);
        match s.watch_ended(&WatchEnd::Failed(Failure::Other), later, 0.0) {
            Next::ListAfter(d) => assert_eq!(d.as_millis(), 800),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn r_25_streaming_list_falls_back_to_list_when_unsupported() {
        let t = Instant::now();
        let mut s = ReflectorState::new(ReflectorOptions {
            streaming_lists: true,
            ..Default::default()
        });
        assert!(s.list_request().streaming);
        assert_eq!(s.list_request().page_size, None);
        assert_eq!(
            s.list_failed(&Failure::Unsupported, true, t, 0.0),
            Next::List
        );
        assert_eq!(
            s.list_request(),
            ListRequest {
                version: ListVersion::Any,
                page_size: Some(500),
                streaming: false
            }
        );
    }

    /// Warm start: the watch starts at the restored resourceVersion; a 410
    /// before the server's first answer relists at once (no backoff), not
    /// older than the snapshot; after an event, a 410 backs off as usual.
    #[test]
    fn a_restored_snapshot_watches_from_its_rv_and_a_410_relists_at_once() {
        let t = Instant::now();
        let mut s = state();
        s.restored("42");
        assert!(s.resuming());
        assert_eq!(s.watch_request(t, 0.0).resource_version, "42");
        assert_eq!(
            s.watch_ended(&WatchEnd::Failed(Failure::Expired), t, 0.0),
            Next::List
        );
        assert_eq!(
            s.list_request().version,
            ListVersion::NotOlderThan("42".into())
        );
        assert_eq!(s.backoff().steps(), 0);
        s.list_succeeded("50", false);
        assert!(!s.resuming());
        assert_eq!(s.relists(), 0, "the first list of this process");
        let mut resumed = state();
        resumed.restored("42");
        resumed.watch_request(t, 0.0);
        resumed.event_processed("43");
        assert!(!resumed.resuming());
        assert!(matches!(
            resumed.watch_ended(&WatchEnd::Failed(Failure::Expired), t, 0.0),
            Next::ListAfter(_)
        ));
    }

    #[test]
    fn relists_are_counted_after_the_first_list() {
        let mut s = state();
        s.list_succeeded("1", false);
        assert_eq!(s.relists(), 0);
        s.list_succeeded("2", false);
        assert_eq!(s.relists(), 1);
    }
}
