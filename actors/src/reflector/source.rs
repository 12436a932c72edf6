//! The Reflector's I/O behind a small trait, as kube-runtime's watcher has
//! it: one list page per request, one watch stream per request. The
//! Reflector loop ([`list_and_watch`](super::list_and_watch)) runs over any
//! [`ListerWatcher`]: kube-client's ([`KubeSource`](super::client::KubeSource))
//! in an informer, a scripted fake in tests.

use std::future::Future;

use futures::stream::BoxStream;

use super::decode::Page;
use super::event::SourceEvent;
use super::failure::Failure;
use super::state::{ListVersion, WatchRequest};

/// One list page to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// The list's resourceVersion semantics (continuation pages send none, R-11).
    pub version: ListVersion,
    /// `limit`: the page size; `None` for an unpaginated list.
    pub limit: Option<u32>,
    /// The previous page's `metadata.continue`; `None` for the first page.
    pub continue_token: Option<String>,
}

impl PageRequest {
    /// The request for the page after this one's, whose `metadata.continue`
    /// is `token`: the one request the pager makes, and what pages fetched
    /// ahead are matched against.
    pub fn after(&self, token: String) -> PageRequest {
        PageRequest {
            continue_token: Some(token),
            ..self.clone()
        }
    }
}

/// A watch stream: events until the server closes it (`None`) or the first
/// failure, which ends it.
pub type WatchStream<K> = BoxStream<'static, Result<SourceEvent<K>, Failure>>;

/// Lists and watches one resource. Each method is one request to the server.
pub trait ListerWatcher<K> {
    /// Fetches one list page.
    fn list_page(&mut self, req: &PageRequest) -> impl Future<Output = Result<Page<K>, Failure>>;

    /// Opens a watch, or a streaming list when `streaming`.
    fn watch(
        &mut self,
        req: &WatchRequest,
        streaming: bool,
    ) -> impl Future<Output = Result<WatchStream<K>, Failure>>;

    /// Asks the server something cheap, to learn whether it answers again
    /// after a failure without an answer (see
    /// [`recovery`](super::recovery)). Without a probe (the default) waits
    /// run their course.
    fn probe(&mut self) -> impl Future<Output = Result<(), Failure>> {
        std::future::ready(Err(Failure::Unsupported))
    }
}
