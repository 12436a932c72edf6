//! A streaming list's initial events (R-24 .. R-26), handed on a page at a
//! time as they arrive (DF-9; for a compact cache) or all at the
//! initial-events-end bookmark, whose stream then goes on as the watch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use kube::Resource;
use tokio::time::Instant;

use super::event::SourceEvent;
use super::failure::Failure;
use super::sharing::Sharing;
use super::source::{ListerWatcher, WatchStream};
use super::state::{VERY_SHORT_WATCH, WatchRequest};
use super::stats::ReflectorStats;
use crate::key::ObjectKey;

/// Per key deleted during a streaming list, the number of items received
/// before its latest delete.
type DeletedAt = HashMap<ObjectKey, usize, foldhash::fast::RandomState>;

/// The items not deleted after they arrived.
fn without_deleted<K: Resource>(items: Vec<Arc<K>>, deleted_at: &DeletedAt) -> Vec<Arc<K>> {
    items
        .into_iter()
        .enumerate()
        .filter(|(pos, o)| {
            ObjectKey::of(&**o)
                .ok()
                .and_then(|k| deleted_at.get(&k))
                .is_none_or(|&at| *pos >= at)
        })
        .map(|(_, o)| o)
        .collect()
}

/// How one streaming-list request ended.
pub(super) enum Initial<K> {
    /// The initial-events-end bookmark came: the items not handed on yet,
    /// its resourceVersion, the stream (it goes on as the watch), and how
    /// many items went on before as pages.
    Complete {
        items: Vec<Arc<K>>,
        resource_version: String,
        stream: WatchStream<K>,
        handed_out: usize,
    },
    /// The stream closed before that bookmark, after some events or a second.
    CutShort,
    /// `page_out` refused a page: the sink is closed.
    Stopped,
}

/// Streams the initial events of one request until the end bookmark
/// . Every `page` items go to `page_out` as they come, as a paginated
/// list's pages do (its first page voids the pages of an attempt before),
/// so a long list is cached while it streams and never held whole.
pub(super) async fn initial_events<K, S>(
    source: &mut S,
    req: &WatchRequest,
    sharing: &Sharing<K>,
    stats: &ReflectorStats,
    page: usize,
    mut page_out: impl AsyncFnMut(Vec<Arc<K>>) -> bool,
) -> Result<Initial<K>, Failure>
where
    K: crate::Object,
    S: ListerWatcher<K>,
{
    let started = Instant::now();
    let mut events = 0u64;
    let mut stream = source.watch(req, true).await?;
    // Objects in arrival order (the server's key order, as in a paginated
    // list), in a plain Vec: a map of every key cost much more. A key
    // seen twice is left to the Replace, which queues both states under
    // the key, as client-go's does (DF-T19); a delete before the end
    // bookmark, which real servers do not send, is applied at the end to
    // what was not handed on yet (nothing more is handed on after one).
    let mut items: Vec<Arc<K>> = Vec::new();
    let mut handed_out = 0usize;
    let mut deleted_at = DeletedAt::default();
    let cached = sharing.reusable();
    while let Some(event) = stream.next().await {
        events += 1;
        let event = event.inspect_err(|failure| {
            stats.last_failure.record(
                "list",
                &format_args!("the streaming list ended with {failure:?}"),
            );
        })?;
        match event {
            SourceEvent::Added(o) | SourceEvent::Modified(o) => {
                items.extend(sharing.share_listed(o, cached.as_ref()));
                stats
                    .list_progress
                    .store((handed_out + items.len()) as u64, Ordering::Relaxed);
                if items.len() >= page && deleted_at.is_empty() {
                    handed_out += items.len();
                    if !page_out(std::mem::take(&mut items)).await {
                        return Ok(Initial::Stopped);
                    }
                }
            }
            SourceEvent::Deleted(o) => {
                if handed_out > 0 {
                    // A page handed on cannot take an object back: this
                    // server's streaming lists are not used any more, and
                    // the paginated list that follows voids those pages.
                    stats.last_failure.record(
                        "list",
                        &"the streaming list sent a delete before its initial-events-end bookmark",
                    );
                    return Err(Failure::Unsupported);
                }
                if let Ok(k) = ObjectKey::of(&o) {
                    deleted_at.insert(k, items.len());
                }
            }
            SourceEvent::Bookmark {
                resource_version,
                initial_events_end: true,
            } => {
                if !deleted_at.is_empty() {
                    items = without_deleted(items, &deleted_at);
                }
                return Ok(Initial::Complete {
                    items,
                    resource_version,
                    stream,
                    handed_out,
                });
            }
            SourceEvent::Bookmark { .. } => {}
        }
    }
    // A server without streaming lists closes at once with nothing
    // then fall back to lists).
    if events == 0 && started.elapsed() < VERY_SHORT_WATCH {
        return Err(Failure::Unsupported);
    }
    stats.last_failure.record(
        "list",
        &"the streaming list was closed before its initial-events-end bookmark",
    );
    Ok(Initial::CutShort)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        crate::testing::configmap(name, rv)
    }

    #[test]
    fn a_streaming_list_drops_what_was_deleted_after_it_arrived() {
        // a1 b1 [delete a] c1 a2 [delete c] b2
        let items = vec![
            cm("a", "1"),
            cm("b", "1"),
            cm("c", "1"),
            cm("a", "2"),
            cm("b", "2"),
        ];
        let mut deleted_at = DeletedAt::default();
        deleted_at.insert(ObjectKey::new(Some("ns"), "a"), 2);
        deleted_at.insert(ObjectKey::new(Some("ns"), "c"), 4);
        let kept: Vec<(String, String)> = without_deleted(items, &deleted_at)
            .iter()
            .map(|o| {
                (
                    o.metadata.name.clone().unwrap(),
                    o.metadata.resource_version.clone().unwrap(),
                )
            })
            .collect();
        let want = [("b", "1"), ("a", "2"), ("b", "2")];
        assert_eq!(kept, want.map(|(n, v)| (n.to_string(), v.to_string())));
    }
}
