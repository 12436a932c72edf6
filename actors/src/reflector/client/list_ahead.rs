//! A list's pages fetched and decoded ahead of the Reflector, on more
//! than one core (`ListWatch::list_decoders`).
//!
//! One task chains the page requests: as soon as a page's body is read, its
//! `metadata.continue` (servers send `metadata` before `items`) starts the
//! next request, and the body is decoded on tokio's blocking threads, at
//! most `n` pages at once. The Reflector takes the pages in order; at most
//! `n + 1` fetched pages wait for it, so a Reflector that stops taking pages
//! (its DeltaFIFO above the high watermark) stops the fetching. With two
//! cores or more, pages decode while the informer's thread caches the pages
//! before them; decoding is most of a list's time (BENCHMARKS.md, "List
//! pages decoded on more than one core").
//!
//! Blocking threads, not threads of the list's own: tokio does not advance
//! a paused clock while a blocking task runs, so tests under paused time see
//! a page's decoding as work, not idleness. simd-json's scratch space
//! travels with the pages (a pool of decoders), and each blocking thread
//! grows its glibc arena ahead of the pages it decodes ([`HeapReserve`],
//! kept while the thread lives: tokio ends idle blocking threads after 10 s;
//! only block headers are resident). When the list is over, fails, or is
//! asked for from another point (a new list, a retry), its [`ListAhead`] is
//! dropped, which aborts the fetching; pages already decoding finish and are
//! dropped.

use std::cell::RefCell;
use std::future::Future;

use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::decode_pool::{DecodePool, Pending, Spares};
use crate::heap_reserve::HeapReserve;
use crate::reflector::decode::{self, DecodeOptions, Page, PageDecoder, PageError};
use crate::reflector::source::PageRequest;

/// Pages of one list decoding at once at most: past two the informer's own
/// thread, which caches every page, sets the pace.
pub const MAX_LIST_DECODERS: usize = 4;

/// The default of `ListWatch::list_decoders`: two, or none on one core (a
/// page handed to another thread would only add the hand-off).
pub fn default_list_decoders() -> usize {
    match std::thread::available_parallelism().map_or(1, usize::from) {
        1 => 0,
        _ => 2,
    }
}

/// Body buffers kept for reuse between the fetching and the decoding (a
/// page's body is up to a few MiB: allocating each afresh would map and
/// fault it in again).
const SPARE_BODIES: usize = 2 * MAX_LIST_DECODERS + 2;

thread_local! {
    /// The arena space kept ahead on this (blocking) thread.
    static RESERVE: RefCell<HeapReserve> = RefCell::new(HeapReserve::default());
}

/// Grows this (blocking) thread's arena ahead of what decoding
/// `json_bytes` more will allocate.
pub(super) fn reserve_ahead(json_bytes: usize) {
    RESERVE.with(|r| r.borrow_mut().reserve_for(json_bytes));
}

/// How a list page ended up.
type Decoded<K> = Result<Page<K>, PageError>;

/// What the fetching hands the Reflector per page, in order.
enum Fetched<K> {
    /// Its body was read and is being decoded; `next` is the request for
    /// the page after it, when its `continue` came before its items.
    Decoding {
        decoded: Pending<Decoded<K>>,
        next: Option<PageRequest>,
    },
    /// Fetching it failed; nothing follows.
    Failed(kube::Error),
}

/// Why [`ListAhead::next_page`] has no page.
#[derive(Debug)]
pub(super) enum Miss {
    /// The request failed.
    Fetch(kube::Error),
    /// simd-json refused the page (its bytes are scrambled): start again
    /// from it without the tape.
    Refused(serde_json::Error),
    /// serde_json refused it: malformed.
    Malformed(serde_json::Error),
    /// Nothing more was fetched: asked past the last page, or the fetching
    /// stopped (it panicked).
    Ended,
    /// The page's decoding panicked.
    Lost,
}

/// One list from a given page on, fetched and decoded ahead.
pub(super) struct ListAhead<K> {
    /// The request the next page answers: `None` once a page was asked
    /// for, until it came with the request for the page after it (`None`
    /// after the last page, or when its `continue` came after its items:
    /// the caller then starts again from the request it makes).
    expected: Option<PageRequest>,
    pages: mpsc::Receiver<Fetched<K>>,
    fetching: JoinHandle<()>,
}

impl<K> Drop for ListAhead<K> {
    fn drop(&mut self) {
        self.fetching.abort();
    }
}

impl<K: DeserializeOwned + Send + 'static> ListAhead<K> {
    /// Starts fetching `first` and the pages after it with `fetch` (a
    /// request and a buffer for its body), `at_once` pages decoding at once
    /// (1 to [`MAX_LIST_DECODERS`]), parsed by serde_json alone unless
    /// `tape`. Needs a tokio runtime.
    pub(super) fn start<F, Fut>(
        fetch: F,
        first: PageRequest,
        at_once: usize,
        tape: bool,
        options: DecodeOptions,
    ) -> Self
    where
        F: FnMut(PageRequest, Vec<u8>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<u8>, kube::Error>> + Send + 'static,
    {
        let decoders = Decoders::new(at_once, tape, options);
        let (tx, pages) = mpsc::channel(decoders.pool.threads());
        let fetching = tokio::spawn(fetch_ahead(fetch, first.clone(), decoders, tx));
        ListAhead {
            expected: Some(first),
            pages,
            fetching,
        }
    }

    /// Whether the next page it has is the answer to `req`.
    pub(super) fn answers(&self, req: &PageRequest) -> bool {
        self.expected.as_ref() == Some(req)
    }

    /// The next page, in order. A page asked for is not offered again,
    /// even if this call is dropped before its answer.
    pub(super) async fn next_page(&mut self) -> Result<Page<K>, Miss> {
        self.expected = None;
        let (decoding, next) = match self.pages.recv().await {
            None => return Err(Miss::Ended),
            Some(Fetched::Failed(err)) => return Err(Miss::Fetch(err)),
            Some(Fetched::Decoding { decoded, next }) => (decoded, next),
        };
        let page = match decoding.result().await {
            Err(_) => return Err(Miss::Lost),
            Ok(Err(PageError::Tape(e))) => return Err(Miss::Refused(e)),
            Ok(Err(PageError::Json(e))) => return Err(Miss::Malformed(e)),
            Ok(Ok(page)) => page,
        };
        self.expected = next;
        Ok(page)
    }
}

/// Fetches `req` and the pages after it, one at a time, handing each body
/// to be decoded as soon as it is read (once fewer than `at_once` decode);
/// stops after the last page, a failed request, a page whose `continue`
/// came after its items, or when nobody takes the pages any more.
async fn fetch_ahead<K, F, Fut>(
    mut fetch: F,
    mut req: PageRequest,
    mut decoders: Decoders<K>,
    out: mpsc::Sender<Fetched<K>>,
) where
    K: DeserializeOwned + Send + 'static,
    F: FnMut(PageRequest, Vec<u8>) -> Fut,
    Fut: Future<Output = Result<Vec<u8>, kube::Error>>,
{
    loop {
        let (fetched, next) = match fetch(req.clone(), decoders.spare_body()).await {
            Err(err) => (Fetched::Failed(err), None),
            Ok(body) => {
                let next = decode::peek_continue(&body).map(|token| req.after(token));
                let decoded = decoders.decode(body).await;
                let fetched = Fetched::Decoding {
                    decoded,
                    next: next.clone(),
                };
                (fetched, next)
            }
        };
        if out.send(fetched).await.is_err() {
            return;
        }
        match next {
            Some(next) => req = next,
            None => return,
        }
    }
}

/// Decodes one list's pages on its decode pool (a few blocking threads).
struct Decoders<K> {
    /// The threads the pages decode on, at most its `threads` at once.
    pool: DecodePool,
    tape: bool,
    options: DecodeOptions,
    /// simd-json's scratch space of the pages not decoding now.
    idle: Spares<PageDecoder>,
    spare: Spares<Vec<u8>>,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K: DeserializeOwned + Send + 'static> Decoders<K> {
    fn new(at_once: usize, tape: bool, options: DecodeOptions) -> Self {
        let at_once = at_once.clamp(1, MAX_LIST_DECODERS);
        Decoders {
            pool: DecodePool::new(at_once),
            tape,
            options,
            // One per page decoding at once; a refusing one is not kept.
            idle: Spares::new(MAX_LIST_DECODERS),
            spare: Spares::new(SPARE_BODIES),
            _k: std::marker::PhantomData,
        }
    }

    /// A buffer for the next page's body.
    fn spare_body(&self) -> Vec<u8> {
        self.spare
            .take()
            .unwrap_or_else(|| Vec::with_capacity(1 << 20))
    }

    /// Queues `body` for the list's decode pool, once fewer than its
    /// threads' worth of pages are queued or decoding.
    async fn decode(&mut self, body: Vec<u8>) -> Pending<Decoded<K>> {
        let job = Job {
            body,
            tape: self.tape,
            options: self.options,
            idle: self.idle.clone(),
            spare: self.spare.clone(),
        };
        self.pool.run(move || job.run()).await
    }
}

/// One page to decode, with what it gives back.
struct Job {
    body: Vec<u8>,
    /// Whether a fresh decoder parses with simd-json's tape.
    tape: bool,
    options: DecodeOptions,
    idle: Spares<PageDecoder>,
    spare: Spares<Vec<u8>>,
}

impl Job {
    /// Decodes the page, grows this thread's arena ahead of the next ones,
    /// and gives back the body's buffer and the decoder (not one simd-json
    /// refused a page with: it would parse the rest without the tape, which
    /// the list decides).
    fn run<K: DeserializeOwned>(self) -> Decoded<K> {
        let Job {
            mut body,
            tape,
            options,
            idle,
            spare,
        } = self;
        let mut decoder = match idle.take() {
            Some(decoder) => decoder,
            None if tape => PageDecoder::default(),
            None => PageDecoder::without_tape(),
        };
        let decoded = decoder.decode(&mut body, options);
        if decoded.is_ok() {
            reserve_ahead(body.len());
        }
        if !matches!(decoded, Err(PageError::Tape(_))) {
            idle.put(decoder);
        }
        spare.put(body);
        decoded
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::reflector::state::ListVersion;

    /// A list page of three ConfigMaps named `p-i`, with `extra` in each,
    /// `continue` set to `next` (before the items unless `items_first`).
    fn page(p: usize, extra: &str, next: Option<usize>, items_first: bool) -> Vec<u8> {
        let items: Vec<String> = (0..3)
            .map(|i| format!(r#"{{"metadata":{{"name":"{p}-{i}"}}{extra}}}"#))
            .collect();
        let token = next.map_or(String::new(), |n| format!(r#","continue":"{n}""#));
        let meta = format!(r#""metadata":{{"resourceVersion":"9"{token}}}"#);
        let items = format!(r#""items":[{}]"#, items.join(","));
        let (a, b) = if items_first {
            (items, meta)
        } else {
            (meta, items)
        };
        format!("{{{a},{b}}}").into_bytes()
    }

    fn names(page: &Page<ConfigMap>) -> Vec<String> {
        page.items
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    fn first() -> PageRequest {
        PageRequest {
            version: ListVersion::Any,
            limit: Some(3),
            continue_token: None,
        }
    }

    /// A list of `pages` pages served by continue token, counting requests.
    fn serve(
        pages: usize,
        items_first: bool,
        fetches: Arc<AtomicUsize>,
    ) -> impl FnMut(PageRequest, Vec<u8>) -> std::future::Ready<Result<Vec<u8>, kube::Error>> {
        move |req, mut body| {
            fetches.fetch_add(1, Ordering::SeqCst);
            let p: usize = req.continue_token.map_or(0, |t| t.parse().unwrap());
            let next = (p + 1 < pages).then_some(p + 1);
            body.clear();
            body.extend(page(p, "", next, items_first));
            std::future::ready(Ok(body))
        }
    }

    fn start<F, Fut>(fetch: F, at_once: usize) -> ListAhead<ConfigMap>
    where
        F: FnMut(PageRequest, Vec<u8>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<u8>, kube::Error>> + Send + 'static,
    {
        ListAhead::start(fetch, first(), at_once, true, DecodeOptions::default())
    }

    /// Pages handed out come back whole, each to its own handle; every
    /// permit is let go, and decoders and body buffers come back for the
    /// next pages.
    #[tokio::test]
    async fn pages_come_back_whole_with_their_buffers() {
        let mut decoders = Decoders::<ConfigMap>::new(2, true, DecodeOptions::default());
        let mut pending = Vec::new();
        for p in 0..6 {
            pending.push(decoders.decode(page(p, "", None, false)).await);
        }
        for (p, decoding) in pending.into_iter().enumerate() {
            let page = decoding.result().await.unwrap().unwrap();
            assert_eq!(names(&page), [0, 1, 2].map(|i| format!("{p}-{i}")));
        }
        assert_eq!(decoders.pool.available_permits(), 2, "every permit let go");
        let idle = decoders.idle.len();
        assert!(
            (1..=2).contains(&idle),
            "one decoder per page decoding at once: {idle}"
        );
        assert!(decoders.spare_body().capacity() > 0, "bodies come back");
    }

    /// simd-json refuses an integer past 64 bits (serde_json reads it as a
    /// float): with the tape the page is `Tape`-refused and its decoder not
    /// kept; without the tape it decodes; malformed JSON is `Json`.
    #[tokio::test]
    async fn a_page_the_tape_refuses_decodes_without_it() {
        let huge = r#","x":18446744073709551616"#;
        let mut tape = Decoders::<ConfigMap>::new(1, true, DecodeOptions::default());
        let refused = tape.decode(page(0, huge, None, false)).await.result().await;
        assert!(
            matches!(refused, Ok(Err(PageError::Tape(_)))),
            "{refused:?}"
        );
        assert!(tape.idle.len() == 0, "a refusing decoder is dropped");
        let mut plain = Decoders::<ConfigMap>::new(1, false, DecodeOptions::default());
        let decoded = plain
            .decode(page(0, huge, None, false))
            .await
            .result()
            .await;
        assert_eq!(names(&decoded.unwrap().unwrap()), ["0-0", "0-1", "0-2"]);
        let malformed = plain.decode(b"{\"items\":[".to_vec()).await.result().await;
        assert!(
            matches!(malformed, Ok(Err(PageError::Json(_)))),
            "{malformed:?}"
        );
    }

    /// A list fetched ahead hands its pages in order, each answering the
    /// request the previous page's `continue` makes, with one request per
    /// page; after the last page it answers nothing.
    #[tokio::test]
    async fn a_list_ahead_answers_each_page_in_order_once() {
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut list = start(serve(5, false, fetches.clone()), 2);
        let mut req = first();
        for p in 0..5 {
            assert!(list.answers(&req), "page {p}");
            let page = list.next_page().await.unwrap();
            assert_eq!(names(&page)[0], format!("{p}-0"));
            if let Some(token) = page.continue_token {
                req = req.after(token);
            }
        }
        assert!(!list.answers(&req), "nothing after the last page");
        assert!(matches!(list.next_page().await, Err(Miss::Ended)));
        assert_eq!(fetches.load(Ordering::SeqCst), 5);
    }

    /// With `continue` after the items, nothing is fetched ahead: the list
    /// answers only the page it was started for (the caller starts again).
    #[tokio::test]
    async fn without_continue_first_a_list_ahead_fetches_one_page() {
        let fetches = Arc::new(AtomicUsize::new(0));
        let mut list = start(serve(3, true, fetches.clone()), 2);
        let page = list.next_page().await.unwrap();
        assert_eq!(page.continue_token.as_deref(), Some("1"));
        assert!(!list.answers(&first().after("1".into())));
        assert!(matches!(list.next_page().await, Err(Miss::Ended)));
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    /// A failed request is handed on in its page's place, and ends the list.
    #[tokio::test]
    async fn a_failed_request_is_the_pages_answer() {
        let fetch = |req: PageRequest, _body: Vec<u8>| {
            std::future::ready(match req.continue_token {
                None => Ok(page(0, "", Some(1), false)),
                Some(_) => Err(kube::Error::LinesCodecMaxLineLengthExceeded),
            })
        };
        let mut list = start(fetch, 1);
        list.next_page().await.unwrap();
        assert!(matches!(list.next_page().await, Err(Miss::Fetch(_))));
        assert!(matches!(list.next_page().await, Err(Miss::Ended)));
    }

    /// A page asked for is not offered again when the call that asked is
    /// dropped before its answer: the caller starts the list again for it.
    #[tokio::test]
    async fn a_page_asked_for_is_not_offered_again() {
        let fetch = |_: PageRequest, _: Vec<u8>| std::future::pending();
        let mut list = start(fetch, 1);
        assert!(list.answers(&first()));
        let asked = tokio::time::timeout(Duration::ZERO, list.next_page()).await;
        assert!(asked.is_err(), "no answer yet");
        assert!(!list.answers(&first()), "asked once");
    }
}
