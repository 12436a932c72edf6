//! The Reflector's I/O: paginated lists and watches through kube-client, and
//! the mapping of kube errors onto the [`Failure`]s the state machine knows.

use std::fmt::Debug;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::{ListParams, VersionMatch, WatchEvent, WatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::state::{Failure, ListRequest, ListVersion, WatchRequest};

/// The annotation that marks the end of a streaming list's initial events.
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
}

/// One event of a watch stream, decoded.
pub enum SourceEvent<K> {
    /// `ADDED`.
    Added(K),
    /// `MODIFIED`.
    Modified(K),
    /// `DELETED`, with the final state.
    Deleted(K),
    /// `BOOKMARK`: only a resourceVersion; `initial_events_end`.
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

    /// A paginated list, calling `progress(items_so_far, total_hint)` after each page.
    /// A 410 on a continuation page falls back to one unpaginated list.
    pub async fn list(
        &self,
        req: &ListRequest,
        mut progress: impl FnMut(u64, Option<u64>),
    ) -> Result<Listed<K>, Failure> {
        let first = self.list_params(req);
        let mut lp = first.clone();
        let mut items = Vec::new();
        let mut resource_version = None;
        let mut pages = 0u32;
        let mut total_hint = None;
        loop {
            let page = match self.api.list(&lp).await {
                Ok(page) => page,
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
                        let list = self.api.list(&full).await.map_err(|e| classify(&e))?;
                        let rv = list.metadata.resource_version.clone().unwrap_or_default();
                        progress(list.items.len() as u64, None);
                        return Ok(Listed {
                            items: list.items,
                            resource_version: rv,
                            paginated: true,
                            total_hint: None,
                        });
                    }
                    tracing::warn!(%err, "list failed");
                    return Err(failure);
                }
            };
            pages += 1;
            if resource_version.is_none() {
                resource_version = Some(page.metadata.resource_version.clone().unwrap_or_default());
                total_hint = page
                    .metadata
                    .remaining_item_count
                    .map(|r| r.max(0) as u64 + page.items.len() as u64);
            }
            let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
            items.extend(page.items);
            progress(items.len() as u64, total_hint);
            match next {
                Some(token) => {
                    // Continuation pages carry no RV or match.
                    lp = ListParams {
                        continue_token: Some(token),
                        resource_version: None,
                        version_match: None,
                        ..first.clone()
                    };
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

    /// Opens a watch, or a streaming list when `streaming`.
    pub async fn watch(
        &self,
        req: &WatchRequest,
        streaming: bool,
    ) -> Result<impl Stream<Item = Result<SourceEvent<K>, Failure>> + Send + Unpin + use<K>, Failure>
    {
        let mut wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            // kube-client reads with a 295 s timeout and rejects watch timeouts at or above it,
            // so the R-15 range [300, 600) s is clamped to 290 s here.
            timeout: Some(req.timeout_secs.min(290)),
            bookmarks: true,
            ..WatchParams::default()
        };
        if streaming {
            wp = wp.initial_events();
        }
        let stream = self
            .api
            .watch(&wp, &req.resource_version)
            .await
            .map_err(|err| {
                tracing::warn!(%err, "opening the watch failed");
                classify(&err)
            })?;
        Ok(stream
            .map_err(|err| {
                tracing::warn!(%err, "watch stream error");
                classify(&err)
            })
            .and_then(|event| async move {
                match event {
                    WatchEvent::Added(o) => Ok(SourceEvent::Added(o)),
                    WatchEvent::Modified(o) => Ok(SourceEvent::Modified(o)),
                    WatchEvent::Deleted(o) => Ok(SourceEvent::Deleted(o)),
                    WatchEvent::Bookmark(b) => Ok(SourceEvent::Bookmark {
                        initial_events_end: b.metadata.annotations.get(INITIAL_EVENTS_END).map(String::as_str)
                            == Some("true"),
                        resource_version: b.metadata.resource_version,
                    }),
                    WatchEvent::Error(status) => {
                        tracing::info!(code = status.code, reason = %status.reason, message = %status.message, "watch ERROR event");
                        Err(classify_status(status.code, &status.reason, &status.message, None))
                    }
                }
            })
            .boxed())
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
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
