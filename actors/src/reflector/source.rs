//! The Reflector's I/O: paginated lists and watches through kube-client, and
//! the mapping of kube errors onto the [`Failure`]s the state machine knows.
//!
//! Requests go through kube-client (its `Client`, auth, TLS and retries), but
//! responses are decoded here (see [`decode`]): a list page straight from its
//! bytes, and each watch line through a tag-first `{type, object}` envelope
//! decoded from a reused line buffer, instead of kube's `LinesCodec` (one new
//! `String` per line) and `WatchEvent<K>`. [`DecodeOptions`] can also drop
//! `metadata.managedFields` while decoding, so it is never allocated.

use std::fmt::Debug;
use std::pin::Pin;
use std::time::Duration;

use futures::io::{AsyncBufRead, AsyncBufReadExt};
use futures::{Stream, StreamExt};
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::core::Request;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::state::{Failure, ListRequest, ListVersion, WatchRequest};
pub use decode::DecodeOptions;

/// The annotation that marks the end of a streaming list's initial events (R-26).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// What to list and watch: the API (resource and namespace) plus selectors.
#[derive(Clone)]
pub struct ListWatch<K: Resource> {
    /// The resource and namespace (or all namespaces).
    pub api: Api<K>,
    /// A label selector (`app=web,tier!=db`), if any.
    pub label_selector: Option<String>,
    /// A field selector (`metadata.name=x`), if any.
    pub field_selector: Option<String>,
    /// How list pages and watch events are decoded (e.g. skip `managedFields`).
    pub decode: DecodeOptions,
    /// See [`ReflectorOptions::read_timeout`](super::ReflectorOptions::read_timeout).
    pub read_timeout: Duration,
    /// Where failed requests are recorded.
    pub failures: std::sync::Arc<LastFailure>,
}

/// A failed list or watch request, kept for whoever asks why an informer
/// does not sync (a bad selector, a missing permission, an unreachable server).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestFailure {
    /// `"list"` or `"watch"`.
    pub request: &'static str,
    /// The HTTP status code when the server answered with an error `Status`
    /// (403: a missing permission, 400: a bad selector, 410: expired); `None`
    /// when no answer came (refused or cut connection, timeout), it could not
    /// be read, the error came inside a watch or streaming-list stream, or the
    /// loop panicked.
    pub status: Option<u16>,
    /// What failed, as kube-client or the server said it.
    pub message: String,
    /// When.
    pub at: std::time::SystemTime,
}

impl std::fmt::Display for RequestFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.request, self.message)
    }
}

/// The last [`RequestFailure`] of a [`ListWatch`], shared with whoever reads it.
#[derive(Debug, Default)]
pub struct LastFailure(std::sync::Mutex<Option<RequestFailure>>);

impl LastFailure {
    /// Records a failure (replacing the previous one).
    pub fn record(&self, request: &'static str, error: &dyn std::fmt::Display) {
        self.record_status(request, None, error);
    }

    fn record_status(
        &self,
        request: &'static str,
        status: Option<u16>,
        error: &dyn std::fmt::Display,
    ) {
        let failure = RequestFailure {
            request,
            status,
            message: error.to_string(),
            at: std::time::SystemTime::now(),
        };
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(failure);
    }

    /// Records a failed request's kube error: an API answer as `code reason:
    /// message` (kube's own `Display` appends a debug dump of the `Status`).
    pub fn record_error(&self, request: &'static str, error: &kube::Error) {
        match error {
            kube::Error::Api(status) => self.record_status(
                request,
                Some(status.code),
                &format_args!("{} {}: {}", status.code, status.reason, status.message),
            ),
            other => self.record(request, other),
        }
    }

    /// The last failure since the last [`clear`](Self::clear), if any.
    pub fn get(&self) -> Option<RequestFailure> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forgets the last failure (a list succeeded).
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// `fut`, or a `TimedOut` read error once `limit` passed without an answer
/// (`ZERO`: no limit).
async fn within<T>(
    limit: Duration,
    what: &'static str,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    if limit.is_zero() {
        return fut.await;
    }
    tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
        Err(kube::Error::ReadEvents(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what}: no answer within {limit:?}"),
        )))
    })
}

/// One event of a watch stream, decoded.
#[derive(Debug)]
pub enum SourceEvent<K> {
    /// `ADDED`.
    Added(K),
    /// `MODIFIED`.
    Modified(K),
    /// `DELETED`, with the final state.
    Deleted(K),
    /// `BOOKMARK`: only a resourceVersion; `initial_events_end` per R-26.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
        /// True when annotated `k8s.io/initial-events-end: "true"` exactly.
        initial_events_end: bool,
    },
}

/// A list result: items, the list's resourceVersion, and whether it was paginated.
pub struct Listed<K> {
    /// Every item of every page.
    pub items: Vec<K>,
    /// The list's resourceVersion (from the first page, R-11).
    pub resource_version: String,
    /// More than one page was needed.
    pub paginated: bool,
    /// The server's `remainingItemCount` on the first page plus its items, when known.
    pub total_hint: Option<u64>,
}

impl<K> ListWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    fn list_params(&self, req: &ListRequest) -> ListParams {
        let mut lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            limit: req.page_size,
            ..ListParams::default()
        };
        match &req.version {
            ListVersion::MostRecent => {}
            ListVersion::Any => {
                lp.resource_version = Some("0".into());
                lp.version_match = Some(VersionMatch::NotOlderThan);
            }
            ListVersion::NotOlderThan(rv) => {
                lp.resource_version = Some(rv.clone());
                lp.version_match = Some(VersionMatch::NotOlderThan);
            }
        }
        lp
    }

    fn decode_options(&self) -> DecodeOptions {
        self.decode
    }

    /// The bytes of one list response, read into `body` (a buffer reused
    /// from page to page).
    async fn fetch_page(&self, lp: &ListParams, mut body: Vec<u8>) -> Result<Vec<u8>, kube::Error> {
        let mut req = list_request(self.api.resource_url(), lp, K::metadata_api())?;
        req.extensions_mut().insert("list");
        let limit = self.read_timeout;
        let client = self.api.clone().into_client();
        let mut response = within(limit, "list", client.request_stream(req)).await?;
        body.clear();
        // Chunk by chunk (`read_to_end` would zero the buffer's spare capacity on every read).
        loop {
            let chunk = within(limit, "list body", async {
                response.fill_buf().await.map_err(kube::Error::ReadEvents)
            })
            .await?;
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            body.extend_from_slice(chunk);
            response.consume_unpin(n);
        }
        Ok(body)
    }

    /// Starts fetching the page after `token` in a task of its own, so the
    /// server works on it while this page decodes. The task is polled a few
    /// times first, for the request to leave before decoding takes the thread.
    async fn prefetch(&self, first: &ListParams, token: String, body: Vec<u8>) -> Prefetch {
        let this = self.clone();
        let lp = continue_params(first, token.clone());
        // Built before yielding: if the list is dropped meanwhile, the fetch is aborted.
        let prefetch = Prefetch {
            token,
            task: tokio::spawn(async move { this.fetch_page(&lp, body).await }),
        };
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        prefetch
    }

    /// A paginated list (R-10, R-11), calling `progress(items_so_far, total_hint)` after each page.
    /// A 410 on a continuation page falls back to one unpaginated list (R-11).
    pub async fn list(
        &self,
        req: &ListRequest,
        progress: impl FnMut(u64, Option<u64>),
    ) -> Result<Listed<K>, Failure> {
        self.list_with(req, progress, |object| object).await
    }

    /// [`ListWatch::list`], applying `map` to each object as soon as its page
    /// is decoded: with `map` sharing (`Arc::new`) and transforming objects,
    /// a list never holds the decoded objects and their shared form at once,
    /// and a transform that drops fields frees them page by page.
    ///
    /// Pages are pipelined: as soon as a page's `metadata.continue` is read
    /// (servers send `metadata` before `items`), the next page is requested,
    /// and the server produces it while this one decodes (measured: a list
    /// of ConfigMaps costs about as much to fetch as to decode).
    pub async fn list_with<T>(
        &self,
        req: &ListRequest,
        mut progress: impl FnMut(u64, Option<u64>),
        mut map: impl FnMut(K) -> T,
    ) -> Result<Listed<T>, Failure> {
        let first = self.list_params(req);
        let mut lp = first.clone();
        let mut spare = Vec::with_capacity(1 << 20);
        let mut decoder = decode::PageDecoder::default();
        let mut ahead: Option<Prefetch> = None;
        let mut items = Vec::new();
        let mut resource_version = None;
        let mut pages = 0u32;
        let mut total_hint = None;
        loop {
            let fetched = match ahead.take() {
                Some(prefetch) => prefetch.join().await,
                None => self.fetch_page(&lp, std::mem::take(&mut spare)).await,
            };
            let mut body = match fetched {
                Ok(body) => body,
                Err(err) => {
                    let failure = classify(&err);
                    if pages > 0 && failure == Failure::Expired {
                        tracing::info!(
                            "continue token expired; falling back to one unpaginated list"
                        );
                        let full = ListParams {
                            limit: None,
                            continue_token: None,
                            ..first.clone()
                        };
                        let body = self
                            .fetch_page(&full, std::mem::take(&mut spare))
                            .await
                            .map_err(|e| {
                                self.failures.record_error("list", &e);
                                classify(&e)
                            })?;
                        // serde_json: the whole collection in one body is
                        // usually past the tape's limit anyway.
                        let list: decode::Page<K> =
                            decode::decode_page(&body, self.decode_options()).map_err(|e| {
                                let e = kube::Error::SerdeError(e);
                                self.failures.record_error("list", &e);
                                classify(&e)
                            })?;
                        progress(list.items.len() as u64, None);
                        return Ok(Listed {
                            items: list.items.into_iter().map(map).collect(),
                            resource_version: list.resource_version.unwrap_or_default(),
                            paginated: true,
                            total_hint: None,
                        });
                    }
                    tracing::warn!(%err, "list failed");
                    self.failures.record_error("list", &err);
                    return Err(failure);
                }
            };
            if let Some(token) = decode::peek_continue(&body) {
                ahead = Some(
                    self.prefetch(&first, token, std::mem::take(&mut spare))
                        .await,
                );
            }
            let page: decode::Page<K> = match decoder.decode(&mut body, self.decode_options()) {
                Ok(page) => page,
                Err(decode::PageError::Tape(e)) => {
                    // The decoder has switched to serde_json: fetch this page again.
                    tracing::warn!(%e, "simd-json refused a list page; fetching it again for serde_json");
                    ahead = None;
                    spare = body;
                    continue;
                }
                Err(decode::PageError::Json(e)) => {
                    let err = kube::Error::SerdeError(e);
                    tracing::warn!(%err, "list page could not be decoded");
                    self.failures.record_error("list", &err);
                    return Err(classify(&err));
                }
            };
            spare = body;
            pages += 1;
            if resource_version.is_none() {
                resource_version = Some(page.resource_version.clone().unwrap_or_default());
                total_hint = page
                    .remaining_item_count
                    .map(|r| r.max(0) as u64 + page.items.len() as u64);
                // The hint comes from the server: capped, so a wild value
                // cannot abort the process on allocation.
                if let Some(total) = total_hint {
                    items.reserve(usize::try_from(total).unwrap_or(0).min(1 << 20));
                }
            }
            let next = page.continue_token.clone().filter(|c| !c.is_empty());
            items.extend(page.items.into_iter().map(&mut map));
            progress(items.len() as u64, total_hint);
            match next {
                Some(token) => {
                    // The page read in full disagrees with the peek: fetch what it says.
                    if ahead.as_ref().is_some_and(|a| a.token != token) {
                        ahead = None;
                    }
                    lp = continue_params(&first, token);
                }
                None => break,
            }
        }
        Ok(Listed {
            items,
            resource_version: resource_version.unwrap_or_default(),
            paginated: pages > 1,
            total_hint,
        })
    }

    /// Opens a watch (R-15), or a streaming list when `streaming` (R-24).
    pub async fn watch(
        &self,
        req: &WatchRequest,
        streaming: bool,
    ) -> Result<impl Stream<Item = Result<SourceEvent<K>, Failure>> + Send + Unpin + use<K>, Failure>
    {
        let mut wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(req.timeout_secs),
            bookmarks: true,
            ..WatchParams::default()
        };
        if streaming {
            wp = wp.initial_events();
        }
        let opened = async {
            let request = Request::new(self.api.resource_url());
            let mut http = if K::metadata_api() {
                request.watch_metadata(&wp, &req.resource_version)
            } else {
                request.watch(&wp, &req.resource_version)
            }
            .map_err(kube::Error::BuildRequest)?;
            http.extensions_mut().insert("watch");
            // As kube-client does: a gzipped watch stream would need multi-member decoding.
            if let Ok(identity) = "identity".parse() {
                http.headers_mut().insert("accept-encoding", identity);
            }
            let client = self.api.clone().into_client();
            within(self.read_timeout, "watch", client.request_stream(http)).await
        };
        // A healthy server ends the watch at the timeout asked for: one that
        // has not by then (a half-open connection) is given up.
        let now = tokio::time::Instant::now();
        let far = now + Duration::from_secs(30 * 365 * 86_400);
        let deadline = Duration::from_secs(u64::from(req.timeout_secs))
            .checked_add(self.read_timeout)
            .and_then(|d| now.checked_add(d))
            .filter(|_| !self.read_timeout.is_zero())
            .unwrap_or(far);
        let body = opened.await.map_err(|err| {
            tracing::warn!(%err, "opening the watch failed");
            self.failures
                .record_error(if streaming { "list" } else { "watch" }, &err);
            classify(&err)
        })?;
        Ok(watch_stream::<K>(
            Box::pin(body),
            self.decode_options(),
            deadline,
        ))
    }
}

/// The HTTP request of one list page. kube-core leaves out
/// `resourceVersion=0` when a limit is set (a paginated read from etcd);
/// client-go sends `resourceVersion=0&limit=500` for its first list (R-10,
/// R-T13), which the watch cache serves, so it is put back.
fn list_request(
    url: &str,
    lp: &ListParams,
    metadata: bool,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    let request = Request::new(url);
    let mut req = if metadata {
        request.list_metadata(lp)
    } else {
        request.list(lp)
    }
    .map_err(kube::Error::BuildRequest)?;
    let any_version = lp.resource_version.as_deref() == Some("0");
    if any_version && lp.limit.is_some() && lp.continue_token.is_none() {
        let uri = format!("{}&resourceVersion=0", req.uri());
        match uri.parse() {
            Ok(uri) => *req.uri_mut() = uri,
            Err(err) => tracing::warn!(%err, "list without resourceVersion=0"),
        }
    }
    Ok(req)
}

/// Continuation pages carry no resourceVersion or match (R-11).
fn continue_params(first: &ListParams, token: String) -> ListParams {
    ListParams {
        continue_token: Some(token),
        resource_version: None,
        version_match: None,
        ..first.clone()
    }
}

/// A page being fetched ahead; the fetch is aborted if the list stops
/// needing it (dropped).
struct Prefetch {
    token: String,
    task: tokio::task::JoinHandle<Result<Vec<u8>, kube::Error>>,
}

impl Prefetch {
    async fn join(mut self) -> Result<Vec<u8>, kube::Error> {
        match (&mut self.task).await {
            Ok(result) => result,
            // Only a panic in the request path gets here (the task is never aborted while joined).
            Err(e) => Err(kube::Error::Service(Box::new(e))),
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The state of a watch body being read line by line.
struct WatchBody {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    line: Vec<u8>,
    decoder: decode::LineDecoder,
    options: DecodeOptions,
    done: bool,
    /// Past this, the watch is over whatever the connection says.
    deadline: tokio::time::Instant,
}

/// Decodes a watch body, one event per line, ending at the first failure.
fn watch_stream<K: DeserializeOwned + Send + 'static>(
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    options: DecodeOptions,
    deadline: tokio::time::Instant,
) -> futures::stream::BoxStream<'static, Result<SourceEvent<K>, Failure>> {
    let state = WatchBody {
        body,
        line: Vec::with_capacity(16 * 1024),
        decoder: decode::LineDecoder::default(),
        options,
        done: false,
        deadline,
    };
    futures::stream::unfold(state, |mut st| async move {
        let item = next_event::<K>(&mut st).await?;
        if item.is_err() {
            st.done = true;
        }
        Some((item, st))
    })
    .boxed()
}

/// The longest watch line accepted (one event). Objects are limited to about
/// 1.5 MiB by etcd; a line past this is a broken or hostile stream, failed
/// as malformed rather than buffered without end.
pub const MAX_WATCH_LINE: usize = 64 << 20;

/// A line buffer that grew past this (a very large object) is given back
/// once that line is decoded.
const KEEP_LINE_CAPACITY: usize = 4 << 20;

/// Reads up to and including the next `\n` into `line`, like `read_until`,
/// but fails with `InvalidData` once the line passes `max` bytes.
async fn read_line_capped(
    body: &mut Pin<Box<dyn AsyncBufRead + Send>>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let buf = body.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read);
        }
        let (n, end) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..n]);
        body.as_mut().consume(n);
        read += n;
        if end {
            return Ok(read);
        }
        if line.len() > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("watch event longer than {max} bytes"),
            ));
        }
    }
}

/// The next event of a watch body; `None` at its end.
async fn next_event<K: DeserializeOwned>(
    st: &mut WatchBody,
) -> Option<Result<SourceEvent<K>, Failure>> {
    loop {
        if st.done {
            return None;
        }
        if st.line.capacity() > KEEP_LINE_CAPACITY {
            st.line = Vec::with_capacity(16 * 1024);
        }
        st.line.clear();
        // A fixed deadline: no clock read per line, and no timer is
        // registered while lines are already buffered.
        let read = tokio::time::timeout_at(
            st.deadline,
            read_line_capped(&mut st.body, &mut st.line, MAX_WATCH_LINE),
        );
        let Ok(read) = read.await else {
            tracing::warn!("the watch outlived its timeout without being closed; re-watching");
            return None;
        };
        match read {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) if ends_watch_cleanly(&e) => {
                tracing::debug!(%e, "watch body ended");
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                tracing::warn!(%e, "watch event too large");
                return Some(Err(Failure::Malformed));
            }
            Err(e) => {
                tracing::warn!(%e, "watch stream error");
                return Some(Err(classify(&kube::Error::ReadEvents(e))));
            }
        }
        // Without its newline, the line is the last bytes of a body cut short.
        let cut = st.line.last() != Some(&b'\n');
        let line = st.line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        return match st.decoder.decode::<K>(line, st.options) {
            Ok(decode::WatchLine::Event(event)) => Some(Ok(event)),
            Ok(decode::WatchLine::Error(status)) => {
                tracing::info!(code = status.code, reason = %status.reason, message = %status.message, "watch ERROR event");
                Some(Err(classify_status(
                    status.code,
                    &status.reason,
                    &status.message,
                    None,
                )))
            }
            // An incomplete last line: the body was cut; resume like a clean close.
            Err(e) if e.is_eof() => None,
            // The same, cut inside a multi-byte character.
            Err(_) if cut && std::str::from_utf8(line).is_err_and(|u| u.error_len().is_none()) => {
                None
            }
            Err(e) => {
                if let Some(why) = decode::skippable_watch_line::<K>(line) {
                    // R-17 steps 2–3: logged and skipped; the resourceVersion stays.
                    tracing::warn!(%e, why, "watch event skipped");
                    continue;
                }
                match decode::bare_status(line) {
                    Some(status) => Some(Err(classify(&kube::Error::Api(Box::new(status))))),
                    None => {
                        tracing::warn!(%e, "malformed watch event");
                        Some(Err(classify(&kube::Error::SerdeError(e))))
                    }
                }
            }
        };
    }
}

/// A read error that ends a watch like a clean close, re-watched at once
/// from the last resourceVersion: a read timeout, an EOF inside a chunk, or
/// a connection reset or aborted by the peer (client-go's "probable EOF",
/// R-19: a proxy or a restarting apiserver, not a reason to relist).
fn ends_watch_cleanly(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let resumable = |kind| {
        matches!(
            kind,
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
        )
    };
    if resumable(e.kind()) || e.kind() == std::io::ErrorKind::TimedOut {
        return true;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && resumable(io.kind())
        {
            return true;
        }
        if err.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        cur = next_in_chain(err);
    }
    false
}

/// The error under `err`. An `io::Error` wrapping another error (as kube
/// wraps hyper's) reports the wrapped one's *source* as its own, skipping the
/// wrapped error itself: step into it instead.
fn next_in_chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    match err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        Some(inner) => Some(inner),
        None => err.source(),
    }
}

/// Maps a kube error onto the Reflector's failure kinds.
pub fn classify(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) => {
            let retry_after = status.details.as_ref().and_then(|d| {
                (d.retry_after_seconds > 0)
                    .then(|| Duration::from_secs(u64::from(d.retry_after_seconds)))
            });
            let too_large = status.details.as_ref().is_some_and(|d| {
                d.causes.iter().any(|c| {
                    c.reason == "ResourceVersionTooLarge"
                        || c.message.contains("Too large resource version")
                })
            });
            if too_large {
                return Failure::TooLargeResourceVersion;
            }
            classify_status(status.code, &status.reason, &status.message, retry_after)
        }
        kube::Error::SerdeError(_)
        | kube::Error::FromUtf8(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded => Failure::Malformed,
        other => {
            if error_chain_has(other, std::io::ErrorKind::ConnectionRefused) {
                Failure::ConnectionRefused
            } else {
                Failure::Other
            }
        }
    }
}

fn classify_status(
    code: u16,
    reason: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> Failure {
    match (code, reason) {
        (410, _) | (_, "Expired") | (_, "Gone") => Failure::Expired,
        (_, "Timeout") | (504, _) if message.contains("Too large resource version") => {
            Failure::TooLargeResourceVersion
        }
        (429, _) | (_, "TooManyRequests") => Failure::TooManyRequests { retry_after },
        (400 | 404 | 405 | 422 | 501, _) => Failure::Unsupported,
        _ => Failure::Other,
    }
}

fn error_chain_has(err: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == kind
        {
            return true;
        }
        if e.to_string().contains("Connection refused") {
            return true;
        }
        cur = next_in_chain(e);
    }
    false
}

pub mod decode {
    //! Decoding list pages and watch lines straight from bytes.
    //!
    //! * A watch line is an envelope `{"type": ..., "object": ...}`. Servers
    //!   send `type` first, so the object is decoded directly into `K`, a
    //!   bookmark into its resourceVersion and annotations, an `ERROR` into a
    //!   `Status`. An envelope with `object` first still decodes (through a
    //!   buffered `serde_json::Value`).
    //! * A list page keeps only its `metadata` and `items`. [`PageDecoder`]
    //!   parses it in place with simd-json, whose tape knows each array's
    //!   length before it is decoded: every `Vec` of an object gets its
    //!   exact capacity (serde_json grows them by doubling, which left a
    //!   decoded Pod 10 % larger; serde still caps the hint of a huge array
    //!   at 1 MiB of elements). [`LineDecoder`] does the same for watch
    //!   lines, on a copy: a line simd-json refuses goes to serde_json
    //!   intact, whose verdict (and error kinds: a line cut short is an EOF)
    //!   then stands.
    //! * With [`DecodeOptions::skip_managed_fields`], `metadata.managedFields`
    //!   is skipped by the parser: never allocated, unlike a transform applied
    //!   after decoding.

    use std::collections::BTreeMap;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::Deserialize;
    use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
    use serde::de::{
        self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
        Visitor,
    };

    use super::{INITIAL_EVENTS_END, SourceEvent};

    /// How objects are decoded.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct DecodeOptions {
        /// Skip `metadata.managedFields` while parsing (it stays `None`). Off by default.
        pub skip_managed_fields: bool,
    }

    /// One decoded list page.
    #[derive(Debug)]
    pub struct Page<K> {
        /// The page's objects.
        pub items: Vec<K>,
        /// `metadata.resourceVersion`.
        pub resource_version: Option<String>,
        /// `metadata.continue`.
        pub continue_token: Option<String>,
        /// `metadata.remainingItemCount`.
        pub remaining_item_count: Option<i64>,
    }

    /// One decoded watch line.
    #[derive(Debug)]
    pub enum WatchLine<K> {
        /// An object event or a bookmark.
        Event(SourceEvent<K>),
        /// An `ERROR` event's `Status`.
        Error(Box<kube::core::Status>),
    }

    /// Checks UTF-8 once for the whole input: much cheaper than the check per
    /// string that decoding from bytes does.
    fn utf8(bytes: &[u8]) -> Result<&str, serde_json::Error> {
        std::str::from_utf8(bytes).map_err(|e| de::Error::custom(format!("invalid UTF-8: {e}")))
    }

    /// Why a watch line that did not decode as a `K` event is one client-go
    /// skips rather than fails on (R-17 step 2), if it is: an object event
    /// whose object is of another kind (it decodes as a `K` once its `kind`
    /// and `apiVersion` are taken out: k8s-openapi's types refuse a different
    /// one). Anything else is malformed. (An object without metadata decodes,
    /// has no key, and is skipped by the DeltaFIFO: R-17 step 3.) Only called
    /// for a line that failed, so the second parse costs nothing otherwise.
    pub fn skippable_watch_line<K: DeserializeOwned>(line: &[u8]) -> Option<&'static str> {
        #[derive(Deserialize)]
        struct Envelope {
            #[serde(rename = "type")]
            event: String,
            object: serde_json::Map<String, serde_json::Value>,
        }
        let Envelope { event, mut object } = serde_json::from_slice(line).ok()?;
        if !matches!(event.as_str(), "ADDED" | "MODIFIED" | "DELETED") {
            return None;
        }
        let typed = object.remove("kind").is_some() | object.remove("apiVersion").is_some();
        (typed && serde_json::from_value::<K>(serde_json::Value::Object(object)).is_ok())
            .then_some("object of another kind")
    }

    /// A line that is a `Status` of its own (`"kind": "Status"`), not an
    /// event: some servers and proxies end a watch that way. (kube's
    /// `Status` decodes from any JSON object, so the kind is checked first.)
    pub fn bare_status(line: &[u8]) -> Option<kube::core::Status> {
        #[derive(Deserialize)]
        struct Kind {
            kind: Option<String>,
        }
        let Kind { kind } = serde_json::from_slice(line).ok()?;
        if kind.as_deref() != Some("Status") {
            return None;
        }
        serde_json::from_slice(line).ok()
    }

    /// Decodes one object.
    pub fn decode_object<K: DeserializeOwned>(
        json: &[u8],
        options: DecodeOptions,
    ) -> Result<K, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(utf8(json)?);
        let value = ObjectSeed::<K>::new(options).deserialize(&mut de)?;
        de.end()?;
        Ok(value)
    }

    /// The `metadata.continue` of a list page, read without decoding its
    /// items: only when `metadata` comes before `items`, as servers send it
    /// (otherwise `None`, and the caller waits for the full decode).
    pub fn peek_continue(json: &[u8]) -> Option<String> {
        struct Peek<'a>(&'a std::cell::Cell<Option<String>>);
        impl<'de> Visitor<'de> for Peek<'_> {
            type Value = ();

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "metadata" => {
                            let meta = map.next_value::<Option<ListMeta>>()?.unwrap_or_default();
                            self.0.set(meta.continue_token.filter(|c| !c.is_empty()));
                            // Stop here: the items are not needed.
                            return Err(de::Error::custom(PEEK_DONE));
                        }
                        "items" => return Err(de::Error::custom(PEEK_DONE)),
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(())
            }
        }
        const PEEK_DONE: &str = "peek done";
        let found = std::cell::Cell::new(None);
        let mut de = serde_json::Deserializer::from_slice(json);
        let _ = de.deserialize_map(Peek(&found));
        found.take()
    }

    /// Decodes one list page (`{"metadata": {...}, "items": [...]}`).
    pub fn decode_page<K: DeserializeOwned>(
        json: &[u8],
        options: DecodeOptions,
    ) -> Result<Page<K>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(utf8(json)?);
        let page = de.deserialize_map(PageVisitor::<K> {
            options,
            _k: PhantomData,
        })?;
        de.end()?;
        Ok(page)
    }

    /// Bodies up to this size are parsed through simd-json's tape, which
    /// takes about three times the body while the page decodes; a larger
    /// body (an unpaginated list of a big collection) goes through
    /// serde_json, whose scratch space does not grow with the body.
    pub const MAX_TAPE_BODY: usize = 32 << 20;

    /// simd-json's scratch space, its buffers and its tape, kept from input
    /// to input: a tape allocated per list page came from fresh memory each
    /// time and tripled the page faults of decoding.
    struct TapeParser {
        buffers: simd_json::Buffers,
        tape: simd_json::Tape<'static>,
    }

    /// serde_json's recursion limit: simd-json's own (1024) would let
    /// serde's visitors recurse eight times deeper than before. Deeper input
    /// is refused here, and serde_json decides, as it always did.
    const MAX_DEPTH: usize = 128;

    impl TapeParser {
        fn new() -> Self {
            TapeParser {
                // Parsing padded input in place, simd-json never uses the
                // input buffer a length hint would reserve.
                buffers: simd_json::Buffers::with_max_depth(0, MAX_DEPTH),
                tape: simd_json::Tape(Vec::new()),
            }
        }

        /// Parses `json` in place (padded for the parser meanwhile: its length
        /// is restored, its bytes are scrambled) and hands it to `visit`.
        fn parse<T>(
            &mut self,
            json: &mut Vec<u8>,
            visit: impl for<'de> FnOnce(&mut simd_json::Deserializer<'de>) -> simd_json::Result<T>,
        ) -> simd_json::Result<T> {
            let len = json.len();
            json.resize(len + simd_json::INPUT_PADDING, 0);
            // Empty (it was reset when put back), so any lifetime will do.
            let mut tape: simd_json::Tape<'_> = simd_json::Tape(std::mem::take(&mut self.tape.0));
            let result = match simd_json::fill_tape_padded(json, len, &mut self.buffers, &mut tape)
            {
                Ok(()) => {
                    let mut de = simd_json::Deserializer::from_tape(tape);
                    let result = visit(&mut de);
                    tape = de.into_tape();
                    result
                }
                Err(e) => Err(e),
            };
            self.tape = tape.reset();
            json.truncate(len);
            result
        }
    }

    /// Why a list page did not decode.
    #[derive(Debug, thiserror::Error)]
    pub enum PageError {
        /// simd-json refused it. Its bytes are scrambled, and the decoder
        /// now hands every page to serde_json: fetch the page again and
        /// decode it once more, so that serde_json decides (a page only
        /// simd-json refuses must not stop an informer from syncing).
        #[error("simd-json refused the page: {0}")]
        Tape(serde_json::Error),
        /// serde_json refused it: malformed.
        #[error(transparent)]
        Json(serde_json::Error),
    }

    /// Decodes the pages of one list, keeping simd-json's scratch space from
    /// page to page.
    pub struct PageDecoder {
        parser: Option<TapeParser>,
        tape_limit: usize,
        /// False once simd-json refused a page: serde_json decodes the rest.
        tape: bool,
    }

    impl Default for PageDecoder {
        fn default() -> Self {
            PageDecoder::with_tape_limit(MAX_TAPE_BODY)
        }
    }

    impl fmt::Debug for PageDecoder {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("PageDecoder")
                .field("tape_limit", &self.tape_limit)
                .finish_non_exhaustive()
        }
    }

    impl PageDecoder {
        /// A decoder that hands bodies past `limit` bytes to serde_json.
        pub fn with_tape_limit(limit: usize) -> Self {
            PageDecoder {
                parser: None,
                tape_limit: limit,
                tape: true,
            }
        }

        /// A decoder that hands every body to serde_json.
        pub fn without_tape() -> Self {
            PageDecoder {
                tape: false,
                ..PageDecoder::default()
            }
        }

        /// Decodes one list page like [`decode_page`], parsing `json` in
        /// place: its bytes are scrambled afterwards.
        ///
        /// Measured on the benchmark's objects (callgrind, instructions per
        /// object, 2026-12-01): ConfigMaps 22.6k with serde_json and here;
        /// Pods 389k and 343k, cached in 56.4 KB each against 51.4 KB
        /// (BENCHMARKS.md, "simd-json decoding").
        pub fn decode<K: DeserializeOwned>(
            &mut self,
            json: &mut Vec<u8>,
            options: DecodeOptions,
        ) -> Result<Page<K>, PageError> {
            if !self.tape || json.len() > self.tape_limit {
                return decode_page(json, options).map_err(PageError::Json);
            }
            let parsed = self
                .parser
                .get_or_insert_with(TapeParser::new)
                .parse(json, |de| {
                    de.deserialize_map(PageVisitor::<K> {
                        options,
                        _k: PhantomData,
                    })
                });
            parsed.map_err(|e| {
                self.tape = false;
                self.parser = None;
                PageError::Tape(de::Error::custom(e))
            })
        }
    }

    /// Watch lines longer than this go straight to serde_json, so that the
    /// scratch space a [`LineDecoder`] keeps stays small.
    const MAX_TAPE_LINE: usize = 2 << 20;

    /// After a line longer than this, a [`LineDecoder`] lets its scratch
    /// space go.
    const KEEP_TAPE_SCRATCH: usize = 256 << 10;

    /// Decodes the lines of one watch, keeping a scratch copy of the line
    /// and simd-json's scratch space from line to line.
    pub struct LineDecoder {
        scratch: Vec<u8>,
        parser: TapeParser,
    }

    impl Default for LineDecoder {
        fn default() -> Self {
            LineDecoder {
                scratch: Vec::new(),
                parser: TapeParser::new(),
            }
        }
    }

    impl fmt::Debug for LineDecoder {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("LineDecoder").finish_non_exhaustive()
        }
    }

    impl LineDecoder {
        /// Decodes one watch line like [`decode_watch_line`], with the
        /// exact `Vec` capacities of [`PageDecoder`]. `line` is left intact.
        pub fn decode<K: DeserializeOwned>(
            &mut self,
            line: &[u8],
            options: DecodeOptions,
        ) -> Result<WatchLine<K>, serde_json::Error> {
            if line.len() > MAX_TAPE_LINE {
                return decode_watch_line(line, options);
            }
            self.scratch.clear();
            self.scratch.extend_from_slice(line);
            let decoded = self.parser.parse(&mut self.scratch, |de| {
                de.deserialize_map(EnvelopeVisitor::<K> {
                    options,
                    _k: PhantomData,
                })
            });
            if line.len() > KEEP_TAPE_SCRATCH {
                *self = LineDecoder::default();
            }
            // A line simd-json refuses goes to serde_json, whose verdict stands.
            decoded.or_else(|_| decode_watch_line(line, options))
        }
    }

    /// Decodes one watch line (without its newline).
    pub fn decode_watch_line<K: DeserializeOwned>(
        line: &[u8],
        options: DecodeOptions,
    ) -> Result<WatchLine<K>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(utf8(line)?);
        let event = de.deserialize_map(EnvelopeVisitor::<K> {
            options,
            _k: PhantomData,
        })?;
        de.end()?;
        Ok(event)
    }

    /// Decodes a `K`, skipping managedFields when asked.
    struct ObjectSeed<K> {
        options: DecodeOptions,
        _k: PhantomData<fn() -> K>,
    }

    impl<K> ObjectSeed<K> {
        fn new(options: DecodeOptions) -> Self {
            ObjectSeed {
                options,
                _k: PhantomData,
            }
        }
    }

    impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ObjectSeed<K> {
        type Value = K;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
            if self.options.skip_managed_fields {
                K::deserialize(Filter {
                    inner: d,
                    level: Level::Object,
                })
            } else {
                K::deserialize(d)
            }
        }
    }

    struct PageVisitor<K> {
        options: DecodeOptions,
        _k: PhantomData<fn() -> K>,
    }

    #[derive(Deserialize, Default)]
    struct ListMeta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
        #[serde(rename = "continue")]
        continue_token: Option<String>,
        #[serde(rename = "remainingItemCount")]
        remaining_item_count: Option<i64>,
    }

    impl<'de, K: DeserializeOwned> Visitor<'de> for PageVisitor<K> {
        type Value = Page<K>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Page<K>, A::Error> {
            let mut meta = ListMeta::default();
            let mut items = Vec::new();
            while let Some(key) = map.next_key::<Key<'de>>()? {
                match key.as_str() {
                    "metadata" => meta = map.next_value::<Option<ListMeta>>()?.unwrap_or_default(),
                    "items" => {
                        items = map.next_value_seed(ItemsSeed::<K> {
                            options: self.options,
                            _k: PhantomData,
                        })?
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Page {
                items,
                resource_version: meta.resource_version,
                continue_token: meta.continue_token,
                remaining_item_count: meta.remaining_item_count,
            })
        }
    }

    /// `items`: an array of objects, or null.
    struct ItemsSeed<K> {
        options: DecodeOptions,
        _k: PhantomData<fn() -> K>,
    }

    impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<K> {
        type Value = Vec<K>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<K>, D::Error> {
            d.deserialize_option(self)
        }
    }

    impl<'de, K: DeserializeOwned> Visitor<'de> for ItemsSeed<K> {
        type Value = Vec<K>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array of objects")
        }

        fn visit_none<E: de::Error>(self) -> Result<Vec<K>, E> {
            Ok(Vec::new())
        }

        fn visit_unit<E: de::Error>(self) -> Result<Vec<K>, E> {
            Ok(Vec::new())
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<K>, D::Error> {
            d.deserialize_seq(self)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<K>, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(item) = seq.next_element_seed(ObjectSeed::<K>::new(self.options))? {
                items.push(item);
            }
            Ok(items)
        }
    }

    #[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
    #[serde(rename_all = "UPPERCASE")]
    enum EventType {
        Added,
        Modified,
        Deleted,
        Bookmark,
        Error,
    }

    #[derive(Deserialize)]
    struct BookmarkObject {
        metadata: BookmarkMeta,
    }

    #[derive(Deserialize)]
    struct BookmarkMeta {
        #[serde(rename = "resourceVersion")]
        resource_version: String,
        #[serde(default)]
        annotations: Option<BTreeMap<String, String>>,
    }

    struct EnvelopeVisitor<K> {
        options: DecodeOptions,
        _k: PhantomData<fn() -> K>,
    }

    impl<'de, K: DeserializeOwned> Visitor<'de> for EnvelopeVisitor<K> {
        type Value = WatchLine<K>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a watch event")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WatchLine<K>, A::Error> {
            let mut event_type = None;
            let mut decoded = None;
            let mut buffered: Option<serde_json::Value> = None;
            while let Some(key) = map.next_key::<Key<'de>>()? {
                match key.as_str() {
                    "type" => event_type = Some(map.next_value::<EventType>()?),
                    "object" => match event_type {
                        Some(t) => {
                            decoded = Some(map.next_value_seed(PayloadSeed::<K> {
                                event_type: t,
                                options: self.options,
                                _k: PhantomData,
                            })?)
                        }
                        None => buffered = Some(map.next_value()?),
                    },
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            let event_type = event_type.ok_or_else(|| de::Error::missing_field("type"))?;
            match (decoded, buffered) {
                (Some(line), _) => Ok(line),
                (None, Some(value)) => PayloadSeed::<K> {
                    event_type,
                    options: self.options,
                    _k: PhantomData,
                }
                .deserialize(value)
                .map_err(de::Error::custom),
                (None, None) => Err(de::Error::missing_field("object")),
            }
        }
    }

    /// The `object` of an envelope whose `type` is known.
    struct PayloadSeed<K> {
        event_type: EventType,
        options: DecodeOptions,
        _k: PhantomData<fn() -> K>,
    }

    impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for PayloadSeed<K> {
        type Value = WatchLine<K>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<WatchLine<K>, D::Error> {
            let object = ObjectSeed::<K>::new(self.options);
            Ok(match self.event_type {
                EventType::Added => WatchLine::Event(SourceEvent::Added(object.deserialize(d)?)),
                EventType::Modified => {
                    WatchLine::Event(SourceEvent::Modified(object.deserialize(d)?))
                }
                EventType::Deleted => {
                    WatchLine::Event(SourceEvent::Deleted(object.deserialize(d)?))
                }
                EventType::Bookmark => {
                    let b = BookmarkObject::deserialize(d)?;
                    let end = b
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(INITIAL_EVENTS_END))
                        .map(String::as_str)
                        == Some("true");
                    WatchLine::Event(SourceEvent::Bookmark {
                        resource_version: b.metadata.resource_version,
                        initial_events_end: end,
                    })
                }
                EventType::Error => WatchLine::Error(Box::new(kube::core::Status::deserialize(d)?)),
            })
        }
    }

    /// A map key, borrowed from the input when it has no escapes.
    enum Key<'de> {
        Borrowed(&'de str),
        Owned(String),
    }

    impl Key<'_> {
        fn as_str(&self) -> &str {
            match self {
                Key::Borrowed(s) => s,
                Key::Owned(s) => s,
            }
        }
    }

    impl<'de> Deserialize<'de> for Key<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct KeyVisitor;
            impl<'de> Visitor<'de> for KeyVisitor {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string key")
                }
                fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key::Borrowed(s))
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                    Ok(Key::Owned(s.to_owned()))
                }
                fn visit_string<E: de::Error>(self, s: String) -> Result<Key<'de>, E> {
                    Ok(Key::Owned(s))
                }
            }
            d.deserialize_str(KeyVisitor)
        }
    }

    /// Where a [`Filter`] is in the object: at its top, or inside its `metadata`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Level {
        Object,
        Metadata,
    }

    /// A deserializer that hands `K` every field except
    /// `metadata.managedFields`, which the parser skips.
    struct Filter<D> {
        inner: D,
        level: Level,
    }

    macro_rules! forward_plain {
        ($($method:ident),* $(,)?) => {
            $(
                fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                    self.inner.$method(visitor)
                }
            )*
        };
    }

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filter<D> {
        type Error = D::Error;

        forward_plain!(
            deserialize_bool,
            deserialize_i8,
            deserialize_i16,
            deserialize_i32,
            deserialize_i64,
            deserialize_i128,
            deserialize_u8,
            deserialize_u16,
            deserialize_u32,
            deserialize_u64,
            deserialize_u128,
            deserialize_f32,
            deserialize_f64,
            deserialize_char,
            deserialize_str,
            deserialize_string,
            deserialize_bytes,
            deserialize_byte_buf,
            deserialize_unit,
            deserialize_seq,
            deserialize_identifier,
            deserialize_ignored_any,
        );

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let level = self.level;
            self.inner.deserialize_any(FilterVisitor {
                inner: visitor,
                level,
            })
        }

        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let level = self.level;
            self.inner.deserialize_option(FilterVisitor {
                inner: visitor,
                level,
            })
        }

        fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let level = self.level;
            self.inner.deserialize_map(FilterVisitor {
                inner: visitor,
                level,
            })
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            let level = self.level;
            self.inner.deserialize_struct(
                name,
                fields,
                FilterVisitor {
                    inner: visitor,
                    level,
                },
            )
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            let level = self.level;
            self.inner.deserialize_newtype_struct(
                name,
                FilterVisitor {
                    inner: visitor,
                    level,
                },
            )
        }

        fn deserialize_unit_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_unit_struct(name, visitor)
        }

        fn deserialize_tuple<V: Visitor<'de>>(
            self,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_tuple(len, visitor)
        }

        fn deserialize_tuple_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_tuple_struct(name, len, visitor)
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            name: &'static str,
            variants: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.inner.deserialize_enum(name, variants, visitor)
        }

        fn is_human_readable(&self) -> bool {
            self.inner.is_human_readable()
        }
    }

    /// The visitor of a [`Filter`]: maps get their keys filtered; options and
    /// newtypes pass the filter on.
    struct FilterVisitor<V> {
        inner: V,
        level: Level,
    }

    macro_rules! forward_visit {
        ($($method:ident($ty:ty)),* $(,)?) => {
            $(
                fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                    self.inner.$method(v)
                }
            )*
        };
    }

    impl<'de, V: Visitor<'de>> Visitor<'de> for FilterVisitor<V> {
        type Value = V::Value;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            self.inner.expecting(f)
        }

        forward_visit!(
            visit_bool(bool),
            visit_i8(i8),
            visit_i16(i16),
            visit_i32(i32),
            visit_i64(i64),
            visit_i128(i128),
            visit_u8(u8),
            visit_u16(u16),
            visit_u32(u32),
            visit_u64(u64),
            visit_u128(u128),
            visit_f32(f32),
            visit_f64(f64),
            visit_char(char),
            visit_str(&str),
            visit_borrowed_str(&'de str),
            visit_string(String),
            visit_bytes(&[u8]),
            visit_borrowed_bytes(&'de [u8]),
            visit_byte_buf(Vec<u8>),
        );

        fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
            self.inner.visit_none()
        }

        fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
            self.inner.visit_unit()
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
            self.inner.visit_some(Filter {
                inner: d,
                level: self.level,
            })
        }

        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
            self.inner.visit_newtype_struct(Filter {
                inner: d,
                level: self.level,
            })
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
            self.inner.visit_seq(seq)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
            self.inner.visit_map(FilterMap {
                inner: map,
                level: self.level,
                metadata_next: false,
            })
        }

        fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
            self.inner.visit_enum(data)
        }
    }

    /// The entries of a filtered map: at the object level, `metadata`'s value
    /// is filtered again; at the metadata level, `managedFields` is skipped.
    struct FilterMap<A> {
        inner: A,
        level: Level,
        metadata_next: bool,
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilterMap<A> {
        type Error = A::Error;

        fn next_key_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<Option<S::Value>, A::Error> {
            loop {
                let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                    return Ok(None);
                };
                if self.level == Level::Metadata && key.as_str() == "managedFields" {
                    self.inner.next_value::<IgnoredAny>()?;
                    continue;
                }
                self.metadata_next = self.level == Level::Object && key.as_str() == "metadata";
                return match key {
                    Key::Borrowed(s) => seed
                        .deserialize(BorrowedStrDeserializer::<A::Error>::new(s))
                        .map(Some),
                    Key::Owned(s) => seed
                        .deserialize(StringDeserializer::<A::Error>::new(s))
                        .map(Some),
                };
            }
        }

        fn next_value_seed<S: DeserializeSeed<'de>>(
            &mut self,
            seed: S,
        ) -> Result<S::Value, A::Error> {
            if std::mem::take(&mut self.metadata_next) {
                self.inner.next_value_seed(MetadataSeed(seed))
            } else {
                self.inner.next_value_seed(seed)
            }
        }

        fn size_hint(&self) -> Option<usize> {
            self.inner.size_hint()
        }
    }

    /// Decodes `metadata` through a metadata-level [`Filter`].
    struct MetadataSeed<S>(S);

    impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
        type Value = S::Value;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
            self.0.deserialize(Filter {
                inner: d,
                level: Level::Metadata,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decode::*;
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns",
        "resourceVersion":"7","labels":{"a":"b"},"managedFields":[{"manager":"kubelet","operation":"Update",
        "fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:phase":{}}}}],"uid":"u"},
        "spec":{"containers":[{"name":"c","image":"i"}]},"status":{"phase":"Running"}}"#;

    fn query(req: &http::Request<Vec<u8>>) -> String {
        req.uri().query().unwrap_or_default().to_owned()
    }

    /// R-T13: the first list asks for any version with a page size, as
    /// client-go's does; later relists at N are unpaginated (R-T22), and
    /// continuation pages carry neither.
    #[test]
    fn the_first_list_asks_for_resource_version_0_with_a_limit() {
        let any = ListParams {
            limit: Some(500),
            resource_version: Some("0".into()),
            version_match: Some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        };
        let q = query(&list_request("/api/v1/configmaps", &any, false).unwrap());
        assert!(q.contains("limit=500"), "{q}");
        assert!(q.contains("resourceVersion=0"), "{q}");
        let at_10 = ListParams {
            resource_version: Some("10".into()),
            version_match: Some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        };
        let q = query(&list_request("/api/v1/configmaps", &at_10, false).unwrap());
        assert!(
            q.contains("resourceVersion=10") && !q.contains("limit"),
            "{q}"
        );
        let next = continue_params(&any, "tok".into());
        let q = query(&list_request("/api/v1/configmaps", &next, false).unwrap());
        assert!(!q.contains("resourceVersion"), "{q}");
    }

    #[tokio::test]
    async fn a_watch_line_past_the_cap_fails_and_shorter_ones_read_whole() {
        let data = b"{\"a\":1}\n0123456789abcdef\nlast".to_vec();
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> = Box::pin(
            futures::io::BufReader::with_capacity(4, futures::io::Cursor::new(data)),
        );
        let mut line = Vec::new();
        assert_eq!(read_line_capped(&mut body, &mut line, 12).await.unwrap(), 8);
        assert_eq!(line, b"{\"a\":1}\n");
        line.clear();
        let err = read_line_capped(&mut body, &mut line, 12)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        // A last line without its newline is returned as read (EOF).
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::io::Cursor::new(b"last".to_vec()));
        line.clear();
        assert_eq!(read_line_capped(&mut body, &mut line, 12).await.unwrap(), 4);
        assert_eq!(read_line_capped(&mut body, &mut line, 12).await.unwrap(), 0);
    }

    /// Reads a watch body to its end: the events, then the failure that ended it, if any.
    async fn read_watch(body: &[u8]) -> (Vec<String>, Option<Failure>) {
        let body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::io::Cursor::new(body.to_vec()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut stream = watch_stream::<ConfigMap>(body, DecodeOptions::default(), deadline);
        let mut names = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(SourceEvent::Added(o) | SourceEvent::Modified(o) | SourceEvent::Deleted(o)) => {
                    names.push(o.metadata.name.unwrap_or_default())
                }
                Ok(SourceEvent::Bookmark { .. }) => names.push("bookmark".into()),
                Err(f) => return (names, Some(f)),
            }
        }
        (names, None)
    }

    fn added(object: &str) -> String {
        format!("{{\"type\":\"ADDED\",\"object\":{object}}}\n")
    }

    /// R-17 step 2 (review note M4): an event whose object is of another
    /// kind is skipped; the watch goes on. A line that is not a decodable
    /// event of our kind (broken metadata included) still fails the watch as
    /// malformed: skipping it would lose the change without a relist.
    #[tokio::test]
    async fn a_watch_skips_objects_of_another_kind() {
        let cm = |name: &str| {
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","resourceVersion":"5"}},"data":{{"a":"b"}}}}"#
            )
        };
        let secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","resourceVersion":"6"},"type":"Opaque","data":{"a":"Yg=="}}"#;
        let body = [added(&cm("one")), added(secret), added(&cm("two"))].concat();
        assert_eq!(
            read_watch(body.as_bytes()).await,
            (vec!["one".to_owned(), "two".to_owned()], None)
        );

        for bad in [
            r#"{"kind":"ConfigMap","metadata":{"name":"x"},"data":[1]}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"a":"b"},"metadata":7}"#,
        ] {
            let broken = [added(&cm("one")), added(bad), added(&cm("two"))].concat();
            assert_eq!(
                read_watch(broken.as_bytes()).await,
                (vec!["one".to_owned()], Some(Failure::Malformed)),
                "{bad}"
            );
        }
        // A Status line of its own is the server's answer, not a malformed event.
        let gone = [
            added(&cm("one")),
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}"#.to_owned(),
        ]
        .concat();
        assert_eq!(
            read_watch(gone.as_bytes()).await,
            (vec!["one".to_owned()], Some(Failure::Expired))
        );
    }

    /// A body cut inside a multi-byte character ends the watch like a clean
    /// close (re-watch from the last resourceVersion), as a cut anywhere else
    /// does; the same bytes followed by a newline are a malformed line.
    #[tokio::test]
    async fn a_body_cut_inside_a_character_ends_the_watch_cleanly() {
        let first = added(r#"{"metadata":{"name":"one","resourceVersion":"5"}}"#);
        let mut cut = first.clone().into_bytes();
        cut.extend_from_slice(
            "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"é".as_bytes(),
        );
        cut.pop();
        assert_eq!(read_watch(&cut).await, (vec!["one".to_owned()], None));
        cut.push(b'\n');
        assert_eq!(
            read_watch(&cut).await,
            (vec!["one".to_owned()], Some(Failure::Malformed))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_deadline_fails_a_silent_request_and_zero_means_none() {
        let slow = || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, kube::Error>(7)
        };
        let err = within(Duration::from_secs(1), "list", slow())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::ReadEvents(e) if e.kind() == std::io::ErrorKind::TimedOut)
        );
        assert_eq!(within(Duration::ZERO, "list", slow()).await.unwrap(), 7);
    }

    #[test]
    fn a_reset_connection_ends_a_watch_like_a_clean_close() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            // As hyper's body error reaches us through kube: wrapped.
            assert!(
                ends_watch_cleanly(&Error::other(Error::from(kind))),
                "{kind:?}"
            );
        }
        assert!(!ends_watch_cleanly(&Error::other("some other failure")));
    }

    #[test]
    fn statuses_map_to_failures() {
        assert_eq!(
            classify_status(410, "Expired", "too old resource version: 1 (5)", None),
            Failure::Expired
        );
        assert_eq!(
            classify_status(
                504,
                "Timeout",
                "Timeout: Too large resource version: 99, current: 5",
                None
            ),
            Failure::TooLargeResourceVersion
        );
        assert_eq!(
            classify_status(429, "TooManyRequests", "", Some(Duration::from_secs(2))),
            Failure::TooManyRequests {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            classify_status(500, "InternalError", "", None),
            Failure::Other
        );
        assert_eq!(
            classify_status(422, "Invalid", "", None),
            Failure::Unsupported
        );
    }

    #[test]
    fn peek_continue_reads_metadata_before_items_only() {
        let page = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"broken"#;
        assert_eq!(peek_continue(page).as_deref(), Some("abc"));
        let last = br#"{"metadata":{"resourceVersion":"7","continue":""},"items":[]}"#;
        assert_eq!(peek_continue(last), None);
        let items_first = br#"{"items":[],"metadata":{"continue":"abc"}}"#;
        assert_eq!(peek_continue(items_first), None);
        assert_eq!(peek_continue(b"not json"), None);
    }

    #[test]
    fn objects_decode_like_serde_json_and_can_skip_managed_fields() {
        let plain: Pod = serde_json::from_str(POD).unwrap();
        let same: Pod = decode_object(POD.as_bytes(), DecodeOptions::default()).unwrap();
        assert_eq!(plain, same);
        assert_eq!(
            plain.metadata.managed_fields.as_ref().map(Vec::len),
            Some(1)
        );
        let slim: Pod = decode_object(
            POD.as_bytes(),
            DecodeOptions {
                skip_managed_fields: true,
            },
        )
        .unwrap();
        assert_eq!(slim.metadata.managed_fields, None);
        let mut expected = plain.clone();
        expected.metadata.managed_fields = None;
        assert_eq!(slim, expected);
        // Only metadata.managedFields goes: a field of that name elsewhere stays.
        let dynamic: kube::core::DynamicObject = decode_object(
            br#"{"apiVersion":"x/v1","kind":"W","metadata":{"name":"w","managedFields":[{"manager":"m"}]},
                "spec":{"managedFields":1}}"#,
            DecodeOptions {
                skip_managed_fields: true,
            },
        )
        .unwrap();
        assert_eq!(dynamic.metadata.managed_fields, None);
        assert_eq!(dynamic.data["spec"]["managedFields"], 1);
        assert_eq!(dynamic.metadata.name.as_deref(), Some("w"));
    }

    #[test]
    fn watch_lines_decode_with_type_first_or_last() {
        let line = format!(r#"{{"type":"MODIFIED","object":{POD}}}"#);
        let skip = DecodeOptions {
            skip_managed_fields: true,
        };
        match decode_watch_line::<Pod>(line.as_bytes(), skip).unwrap() {
            WatchLine::Event(SourceEvent::Modified(p)) => {
                assert_eq!(p.metadata.name.as_deref(), Some("p"));
                assert_eq!(p.metadata.managed_fields, None);
            }
            other => panic!("{other:?}"),
        }
        let reversed = format!(r#"{{"object":{POD},"type":"DELETED"}}"#);
        match decode_watch_line::<Pod>(reversed.as_bytes(), skip).unwrap() {
            WatchLine::Event(SourceEvent::Deleted(p)) => {
                assert_eq!(p.metadata.managed_fields, None);
                assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Running"));
            }
            other => panic!("{other:?}"),
        }
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1",
            "metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        match decode_watch_line::<ConfigMap>(bookmark, DecodeOptions::default()).unwrap() {
            WatchLine::Event(SourceEvent::Bookmark {
                resource_version,
                initial_events_end,
            }) => {
                assert_eq!(resource_version, "12");
                assert!(initial_events_end);
            }
            other => panic!("{other:?}"),
        }
        let error =
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        match decode_watch_line::<ConfigMap>(error, DecodeOptions::default()).unwrap() {
            WatchLine::Error(status) => assert_eq!(
                classify_status(status.code, &status.reason, &status.message, None),
                Failure::Expired
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            decode_watch_line::<ConfigMap>(
                b"{\"type\":\"MODIFIED\",\"object\":{this is not json",
                DecodeOptions::default()
            )
            .is_err()
        );
        assert!(
            decode_watch_line::<ConfigMap>(
                br#"{"type":"SOMETHING","object":{}}"#,
                DecodeOptions::default()
            )
            .is_err()
        );
    }

    /// A Pod with arrays of three (serde_json would give them capacity 4),
    /// int-or-string ports, quantities, times, escapes and nulls.
    const RICH_POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"rich","namespace":"ns",
        "resourceVersion":"9","creationTimestamp":"2024-05-01T10:00:00Z","uid":"u",
        "labels":{"app":"w\"e\u00e9b"},"annotations":null,"finalizers":["a","b","c"],
        "managedFields":[{"manager":"m1","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}},
        {"manager":"m2","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{}},
        {"manager":"m3","operation":"Update","time":"2024-05-01T10:00:01Z","fieldsType":"FieldsV1","fieldsV1":{}}]},
        "spec":{"containers":[
        {"name":"a","image":"i","env":[{"name":"E1","value":"1"},{"name":"E2","value":"2"},{"name":"E3"}],
         "ports":[{"containerPort":8080,"protocol":"TCP"}],"readinessProbe":{"httpGet":{"port":8080,"path":"/"}},
         "resources":{"limits":{"cpu":"500m","memory":"1Gi"}}},
        {"name":"b","image":"i","livenessProbe":{"tcpSocket":{"port":"http"}},"unknownField":[1,{"x":null}]},
        {"name":"c","image":"i","securityContext":{"runAsUser":1000,"privileged":false}}],
        "terminationGracePeriodSeconds":30,"activeDeadlineSeconds":9007199254740993},
        "status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#;

    fn page_of(items: &[&str]) -> Vec<u8> {
        format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"42","continue":"c1"}},"items":[{}]}}"#,
            items.join(",")
        )
        .into_bytes()
    }

    fn containers_capacity(pod: &Pod) -> usize {
        pod.spec
            .as_ref()
            .map_or(0, |spec| spec.containers.capacity())
    }

    /// The page decoder gives the objects serde_json gives, with every
    /// `Vec` at its exact capacity, and falls back to serde_json past its
    /// size limit.
    #[test]
    fn page_decoder_matches_serde_json_with_exact_capacities() {
        let expected: Pod = serde_json::from_str(RICH_POD).unwrap();
        let page = page_of(&[RICH_POD, POD, RICH_POD]);
        for skip in [false, true] {
            let options = DecodeOptions {
                skip_managed_fields: skip,
            };
            let reference: Page<Pod> = decode_page(&page, options).unwrap();
            let mut decoder = decode::PageDecoder::default();
            for _ in 0..2 {
                // Twice: the second page reuses the decoder's buffers.
                let mut body = page.clone();
                let decoded: Page<Pod> = decoder.decode(&mut body, options).unwrap();
                assert_eq!(body.len(), page.len(), "padding left behind");
                assert_eq!(decoded.items, reference.items);
                assert_eq!(decoded.items.capacity(), 3);
                assert_eq!(decoded.resource_version.as_deref(), Some("42"));
                assert_eq!(decoded.continue_token.as_deref(), Some("c1"));
                let rich = &decoded.items[0];
                assert_eq!(containers_capacity(rich), 3);
                let spec = rich.spec.as_ref().unwrap();
                assert_eq!(spec.containers[0].env.as_ref().unwrap().capacity(), 3);
                assert_eq!(rich.metadata.finalizers.as_ref().unwrap().capacity(), 3);
                match skip {
                    false => {
                        assert_eq!(rich, &expected);
                        assert_eq!(rich.metadata.managed_fields.as_ref().unwrap().capacity(), 3);
                    }
                    true => assert!(rich.metadata.managed_fields.is_none()),
                }
            }
        }
        // A page simd-json refuses switches the decoder to serde_json: here
        // an integer past 64 bits, which serde_json reads as a float.
        let mut decoder = decode::PageDecoder::default();
        let mut broken = page_of(&[r#"{"metadata":{"name":"n"},"x":18446744073709551616}"#]);
        assert!(matches!(
            decoder.decode::<Pod>(&mut broken.clone(), DecodeOptions::default()),
            Err(decode::PageError::Tape(_))
        ));
        let decoded: Page<Pod> = decoder
            .decode(&mut broken, DecodeOptions::default())
            .unwrap();
        assert_eq!(decoded.items[0].metadata.name.as_deref(), Some("n"));
        let mut decoder = decode::PageDecoder::default();
        let mut broken = page.clone();
        broken.truncate(page.len() - 1);
        assert!(matches!(
            decoder.decode::<Pod>(&mut broken, DecodeOptions::default()),
            Err(decode::PageError::Tape(_))
        ));
        let decoded: Page<Pod> = decoder
            .decode(&mut page.clone(), DecodeOptions::default())
            .unwrap();
        assert_eq!(decoded.items[0], expected);
        assert_eq!(containers_capacity(&decoded.items[0]), 4);
        assert!(matches!(
            decoder.decode::<Pod>(&mut broken, DecodeOptions::default()),
            Err(decode::PageError::Json(_))
        ));
        // Past the limit, serde_json: the same objects, capacities by doubling.
        let mut decoder = decode::PageDecoder::with_tape_limit(page.len() - 1);
        let decoded: Page<Pod> = decoder
            .decode(&mut page.clone(), DecodeOptions::default())
            .unwrap();
        assert_eq!(decoded.items[0], expected);
        assert_eq!(containers_capacity(&decoded.items[0]), 4);
    }

    fn watch_line(event: &str, object: &str) -> Vec<u8> {
        format!(r#"{{"type":"{event}","object":{object}}}"#).into_bytes()
    }

    /// The line decoder gives the events serde_json gives, with exact
    /// capacities, and serde_json's errors for the lines it refuses.
    #[test]
    fn line_decoder_matches_serde_json_with_exact_capacities() {
        let expected: Pod = serde_json::from_str(RICH_POD).unwrap();
        let mut decoder = decode::LineDecoder::default();
        for round in 0..2 {
            let line = watch_line("MODIFIED", RICH_POD);
            let Ok(WatchLine::Event(SourceEvent::Modified(pod))) =
                decoder.decode::<Pod>(&line, DecodeOptions::default())
            else {
                panic!("round {round}: not a MODIFIED event");
            };
            assert_eq!(pod, expected);
            assert_eq!(containers_capacity(&pod), 3);
            assert_eq!(pod.metadata.managed_fields.as_ref().unwrap().capacity(), 3);
        }
        // Object first: buffered, still decoded.
        let swapped = format!(r#"{{"object":{RICH_POD},"type":"ADDED"}}"#);
        assert!(matches!(
            decoder.decode::<Pod>(swapped.as_bytes(), DecodeOptions::default()),
            Ok(WatchLine::Event(SourceEvent::Added(pod))) if pod == expected
        ));
        // A line past the scratch limit, then an ordinary one again.
        let big_value = "x".repeat(300 << 10);
        let big = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"k":"{big_value}"}}}}"#
        );
        let Ok(WatchLine::Event(SourceEvent::Added(cm))) =
            decoder.decode::<ConfigMap>(&watch_line("ADDED", &big), DecodeOptions::default())
        else {
            panic!("the big line did not decode");
        };
        assert_eq!(cm.data.unwrap()["k"].len(), 300 << 10);
        assert!(matches!(
            decoder.decode::<Pod>(&watch_line("DELETED", POD), DecodeOptions::default()),
            Ok(WatchLine::Event(SourceEvent::Deleted(_)))
        ));
        // simd-json refuses integers past 64 bits; serde_json reads them as floats.
        let big = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":18446744073709551616}"#;
        assert!(matches!(
            decoder.decode::<ConfigMap>(&watch_line("ADDED", big), DecodeOptions::default()),
            Ok(WatchLine::Event(SourceEvent::Added(cm))) if cm.metadata.name.as_deref() == Some("n")
        ));
        // Refused lines: the same verdict and error kind as serde_json's.
        let full = watch_line("MODIFIED", POD);
        let cases: Vec<Vec<u8>> = vec![
            full[..full.len() - 1].to_vec(),
            full[..full.len() / 2].to_vec(),
            watch_line("SOMETHING", "{}"),
            watch_line(
                "ADDED",
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#,
            ),
            watch_line("ADDED", r#"{"metadata":{"name":7}}"#),
            br#"{"type":"ADDED"}"#.to_vec(),
            br#"{"kind":"Status","status":"Failure","code":500}"#.to_vec(),
            br#"[]"#.to_vec(),
        ];
        for case in cases {
            let ours = decoder.decode::<Pod>(&case, DecodeOptions::default());
            let theirs = decode_watch_line::<Pod>(&case, DecodeOptions::default());
            let what = String::from_utf8_lossy(&case);
            match (ours, theirs) {
                (Err(a), Err(b)) => {
                    assert_eq!(a.classify(), b.classify(), "{what}");
                    assert_eq!(a.to_string(), b.to_string(), "{what}");
                }
                (a, b) => panic!("{what}: {a:?} against {b:?}"),
            }
        }
    }

    /// Malformed pages are errors, never panics, through either parser.
    #[test]
    fn page_decoder_refuses_malformed_pages() {
        let good = page_of(&[POD]);
        let mut bad_utf8 = good.clone();
        let at = bad_utf8.windows(3).position(|w| w == b"\"p\"").unwrap();
        bad_utf8[at + 1] = 0xff;
        let cases: Vec<Vec<u8>> = vec![
            good[..good.len() - 1].to_vec(),
            good[..good.len() / 2].to_vec(),
            bad_utf8,
            br#"{"metadata":{},"items":{}}"#.to_vec(),
            br#"{"metadata":{},"items":[{"metadata":{"name":7}}]}"#.to_vec(),
            br#"{"metadata":{},"items":[]} trailing"#.to_vec(),
            br#"[1,2,3]"#.to_vec(),
            b"".to_vec(),
            b"\x00\x01".to_vec(),
        ];
        for case in cases {
            let what = String::from_utf8_lossy(&case).into_owned();
            // simd-json refuses it, and the decoder switches to serde_json,
            // which refuses it too (the empty body included: no refetch loop).
            let mut decoder = decode::PageDecoder::default();
            let result = decoder.decode::<Pod>(&mut case.clone(), DecodeOptions::default());
            assert!(matches!(result, Err(decode::PageError::Tape(_))), "{what}");
            let result = decoder.decode::<Pod>(&mut case.clone(), DecodeOptions::default());
            assert!(matches!(result, Err(decode::PageError::Json(_))), "{what}");
            let mut decoder = decode::PageDecoder::without_tape();
            let result = decoder.decode::<Pod>(&mut case.clone(), DecodeOptions::default());
            assert!(matches!(result, Err(decode::PageError::Json(_))), "{what}");
        }
        // Nesting past 128 levels: refused by simd-json, and serde_json
        // decides (here it skips the unknown field, as it always did).
        let deep = format!(
            r#"{{"metadata":{{}},"items":[{{"metadata":{{"name":"n"}},"x":{}{}}}]}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let mut decoder = decode::PageDecoder::default();
        let result =
            decoder.decode::<Pod>(&mut deep.clone().into_bytes(), DecodeOptions::default());
        assert!(matches!(result, Err(decode::PageError::Tape(_))));
        let result = decoder.decode::<Pod>(&mut deep.into_bytes(), DecodeOptions::default());
        assert_eq!(result.unwrap().items.len(), 1);
    }

    #[test]
    fn pages_keep_metadata_and_items() {
        let json = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"42","continue":"c1",
            "remainingItemCount":3}},"items":[{POD},{POD}]}}"#
        );
        let page: Page<Pod> = decode_page(json.as_bytes(), DecodeOptions::default()).unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.resource_version.as_deref(), Some("42"));
        assert_eq!(page.continue_token.as_deref(), Some("c1"));
        assert_eq!(page.remaining_item_count, Some(3));
        let empty: Page<Pod> = decode_page(
            br#"{"metadata":{"resourceVersion":"1"},"items":null}"#,
            DecodeOptions::default(),
        )
        .unwrap();
        assert!(empty.items.is_empty());
    }
}
