//! The list/watch client through kube-client, and the classification of its
//! failures.
//!
//! Requests go through kube-client (its `Client`, auth, TLS and retries);
//! responses are decoded here straight from their bytes
//! (`decode`): a list page in place, each watch line from a
//! reused buffer (`watch_body`).
//!
//! - [`KubeSource`]: the [`ListerWatcher`] of an informer.
//! - [`classify`](mod@classify): kube errors and `Status` answers as [`Failure`]s.

pub mod classify;
mod decode_pool;
mod events_ahead;
mod list_ahead;
mod request;
mod watch_body;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::io::AsyncBufReadExt;
use kube::api::{ListParams, WatchParams};
use kube::core::Request;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

pub use classify::classify;
pub use list_ahead::{MAX_LIST_DECODERS, default_list_decoders};
pub use watch_body::MAX_WATCH_LINE;

use super::decode::{self, DecodeOptions, Page, PageDecoder, PageError};
use super::failure::Failure;
use super::last_failure::LastFailure;
use super::source::{ListerWatcher, PageRequest, WatchStream};
use super::state::WatchRequest;
use crate::heap_reserve::HeapReserve;
use list_ahead::{ListAhead, Miss};
use request::{list_request, page_params};
use watch_body::{LineReader, watch_stream};

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
    /// See [`ReflectorOptions::read_timeout`](crate::reflector::ReflectorOptions::read_timeout).
    pub read_timeout: Duration,
    /// Where failed requests are recorded.
    pub failures: Arc<LastFailure>,
    /// Pages of a list, or runs of a streaming list's initial events,
    /// decoding at once (up to [`MAX_LIST_DECODERS`]) on tokio's blocking
    /// threads while the informer's thread caches the ones before; 0: they
    /// decode on the Reflector's thread. Watch events always do.
    pub list_decoders: usize,
}

/// kube-client's [`ListerWatcher`]: a [`ListWatch`] and the state of the list
/// in progress. A clone starts with no list in progress.
///
/// Pages are pipelined: as soon as a page's `metadata.continue` is read
/// (servers send `metadata` before `items`), the next page is requested, and
/// the server produces it while this one decodes (fetching a page of
/// ConfigMaps costs about as much as decoding it). With
/// [`ListWatch::list_decoders`], pages are decoded ahead on tokio's
/// blocking threads (`list_ahead`), and so are a streaming list's initial
/// events (`events_ahead`).
pub struct KubeSource<K: Resource> {
    config: ListWatch<K>,
    /// The list being fetched and decoded ahead (with `list_decoders`).
    list_ahead: Option<ListAhead<K>>,
    /// False once simd-json refused a page of the list in progress.
    tape: bool,
    /// The next page, being fetched; dropped (aborted) when not asked for.
    ahead: Option<Prefetch>,
    /// simd-json's scratch space, kept from page to page of one list.
    decoder: PageDecoder,
    /// A body buffer reused from page to page of one list.
    spare: Vec<u8>,
    /// Arena space kept ahead of one list's decoded pages (on a thread of its own).
    reserve: HeapReserve,
}

impl<K: Resource + Clone> Clone for KubeSource<K> {
    fn clone(&self) -> Self {
        KubeSource::new(self.config.clone())
    }
}

impl<K: Resource> KubeSource<K> {
    /// A source listing and watching what `config` says.
    pub fn new(config: ListWatch<K>) -> Self {
        KubeSource {
            config,
            list_ahead: None,
            tape: true,
            ahead: None,
            decoder: PageDecoder::default(),
            spare: Vec::new(),
            reserve: HeapReserve::default(),
        }
    }

    /// What it lists and watches.
    pub fn config(&self) -> &ListWatch<K> {
        &self.config
    }
}

/// How long a probe may wait for its answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

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

impl<K> ListWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
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

    /// Starts fetching `next` in a task of its own, so the server works on
    /// it while the current page decodes. The task is polled a few times
    /// first, for the request to leave before decoding takes the thread.
    async fn prefetch(&self, next: PageRequest, body: Vec<u8>) -> Prefetch {
        let this = self.clone();
        let lp = self.params(&next);
        // Built before yielding: if the list is dropped meanwhile, the fetch is aborted.
        let prefetch = Prefetch {
            request: next,
            task: tokio::spawn(async move { this.fetch_page(&lp, body).await }),
        };
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        prefetch
    }

    fn params(&self, req: &PageRequest) -> ListParams {
        page_params(
            req,
            self.label_selector.as_deref(),
            self.field_selector.as_deref(),
        )
    }

    /// A failed request's error, recorded (the loop logs it with its retry
    /// delay), as a [`Failure`].
    fn failed(&self, request: &'static str, err: &kube::Error) -> Failure {
        self.failures.record_error(request, err);
        let failure = classify(err);
        if failure == Failure::NotAcceptable && K::metadata_api() {
            tracing::warn!(
                "the server does not serve this resource as PartialObjectMetadata: a metadata-only informer cannot list it"
            );
        }
        failure
    }
}

impl<K> KubeSource<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    /// Fetches `req` (or joins its prefetch), starts fetching the next page,
    /// and decodes this one. A page simd-json refuses is fetched again for
    /// serde_json (its bytes were scrambled).
    async fn fetch_and_decode(&mut self, req: &PageRequest) -> Result<Page<K>, Failure> {
        loop {
            let fetched = match self.ahead.take() {
                Some(ahead) if ahead.request == *req => ahead.join().await,
                _ => {
                    let lp = self.config.params(req);
                    let body = std::mem::take(&mut self.spare);
                    self.config.fetch_page(&lp, body).await
                }
            };
            let mut body = fetched.map_err(|err| self.config.failed("list", &err))?;
            if let Some(token) = decode::peek_continue(&body) {
                let next = req.after(token);
                let buffer = std::mem::take(&mut self.spare);
                self.ahead = Some(self.config.prefetch(next, buffer).await);
            }
            let decoded = self.decoder.decode(&mut body, self.config.decode);
            let json_bytes = body.len();
            self.spare = body;
            return match decoded {
                Ok(page) => {
                    self.reserve.reserve_for(json_bytes);
                    Ok(page)
                }
                Err(PageError::Tape(e)) => {
                    // The decoder has switched to serde_json: fetch this page again.
                    tracing::warn!(%e, "simd-json refused a list page; fetching it again for serde_json");
                    self.ahead = None;
                    continue;
                }
                Err(PageError::Json(e)) => {
                    Err(self.config.failed("list", &kube::Error::SerdeError(e)))
                }
            };
        }
    }
}

impl<K> KubeSource<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    /// The page answering `req` from the list fetched and decoded ahead,
    /// which starts (again) from `req` unless its next page answers it. A
    /// page simd-json refuses is fetched again, with the rest of the list,
    /// for serde_json.
    async fn decode_ahead(&mut self, req: &PageRequest) -> Result<Page<K>, Failure> {
        let mut fresh = false;
        loop {
            let list = match &mut self.list_ahead {
                Some(list) if list.answers(req) => list,
                slot => {
                    fresh = true;
                    let config = self.config.clone();
                    let fetch = move |req: PageRequest, body| {
                        let config = config.clone();
                        async move { config.fetch_page(&config.params(&req), body).await }
                    };
                    let (n, options) = (self.config.list_decoders, self.config.decode);
                    slot.insert(ListAhead::start(fetch, req.clone(), n, self.tape, options))
                }
            };
            let miss = match list.next_page().await {
                Ok(page) => return Ok(page),
                Err(miss) => miss,
            };
            self.list_ahead = None;
            match miss {
                Miss::Fetch(err) => return Err(self.config.failed("list", &err)),
                Miss::Malformed(e) => {
                    return Err(self.config.failed("list", &kube::Error::SerdeError(e)));
                }
                Miss::Refused(e) if self.tape => {
                    tracing::warn!(%e, "simd-json refused a list page; fetching it again for serde_json");
                    self.tape = false;
                }
                // Refused without the tape cannot happen: serde_json decides those.
                Miss::Refused(e) => {
                    return Err(self.config.failed("list", &kube::Error::SerdeError(e)));
                }
                // Its fetching stopped early: once more, from here.
                Miss::Ended if !fresh => {}
                Miss::Ended | Miss::Lost => {
                    let what = match miss {
                        Miss::Lost => "decoding a list page panicked",
                        _ => "fetching a list's pages stopped",
                    };
                    tracing::error!("{what}; the list is retried");
                    let err = std::io::Error::other(what);
                    self.config
                        .failures
                        .record_error("list", &kube::Error::ReadEvents(err));
                    return Err(Failure::Other);
                }
            }
        }
    }
}

impl<K> ListerWatcher<K> for KubeSource<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    async fn list_page(&mut self, req: &PageRequest) -> Result<Page<K>, Failure> {
        let ahead = self.config.list_decoders > 0;
        if req.continue_token.is_none() {
            // A new list: nothing fetched ahead is wanted, and a page simd-json
            // refused in an earlier list does not keep this one off the tape.
            self.ahead = None;
            self.list_ahead = None;
            self.tape = true;
            self.decoder = PageDecoder::default();
            if !ahead {
                self.spare = Vec::with_capacity(1 << 20);
            }
        }
        let result = if ahead {
            self.decode_ahead(req).await
        } else {
            self.fetch_and_decode(req).await
        };
        let last = result.as_ref().map_or(true, |page| {
            page.continue_token.as_deref().is_none_or(str::is_empty)
        });
        if last {
            // The list is over (or failed): its buffers, fetching and arena space go.
            self.ahead = None;
            self.list_ahead = None;
            self.decoder = PageDecoder::default();
            self.spare = Vec::new();
            self.reserve = HeapReserve::default();
        }
        result
    }

    async fn watch(
        &mut self,
        req: &WatchRequest,
        streaming: bool,
    ) -> Result<WatchStream<K>, Failure> {
        let config = &self.config;
        let mut wp = WatchParams {
            label_selector: config.label_selector.clone(),
            field_selector: config.field_selector.clone(),
            timeout: Some(req.timeout_secs),
            bookmarks: true,
            ..WatchParams::default()
        };
        if streaming {
            wp = wp.initial_events();
        }
        let opened = async {
            let request = Request::new(config.api.resource_url());
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
            let client = config.api.clone().into_client();
            within(config.read_timeout, "watch", client.request_stream(http)).await
        };
        // A healthy server ends the watch at the timeout asked for: one that
        // has not by then (a half-open connection) is given up.
        let now = tokio::time::Instant::now();
        let far = now + Duration::from_secs(30 * 365 * 86_400);
        let deadline = Duration::from_secs(u64::from(req.timeout_secs))
            .checked_add(config.read_timeout)
            .and_then(|d| now.checked_add(d))
            .filter(|_| !config.read_timeout.is_zero())
            .unwrap_or(far);
        let body = opened.await.map_err(|err| {
            config
                .failures
                .record_error(if streaming { "list" } else { "watch" }, &err);
            classify(&err)
        })?;
        let body = Box::pin(body);
        Ok(if streaming && config.list_decoders > 0 {
            let reader = LineReader::new(body, deadline);
            events_ahead::initial_events_ahead::<K>(reader, config.decode, config.list_decoders)
        } else {
            watch_stream::<K>(body, config.decode, deadline)
        })
    }

    /// `GET /version`: answered by the API server itself, without etcd.
    async fn probe(&mut self) -> Result<(), Failure> {
        let client = self.config.api.clone().into_client();
        let answer = within(PROBE_TIMEOUT, "probe", client.apiserver_version()).await;
        answer.map(drop).map_err(|err| {
            tracing::debug!(%err, "probe failed");
            classify(&err)
        })
    }
}

/// A page being fetched ahead; the fetch is aborted if the list stops
/// needing it (dropped).
struct Prefetch {
    request: PageRequest,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
