//! A whole list, page by page, as client-go's pager makes it:
//! continuation pages until the last, and one unpaginated list when a
//! continue token expires.

use super::failure::Failure;
use super::source::{ListerWatcher, PageRequest};
use super::state::ListRequest;

/// A list's result.
#[derive(Debug)]
pub struct Listed<T> {
    /// Every item of every page.
    pub items: Vec<T>,
    /// The list's resourceVersion (from the first page, R-11).
    pub resource_version: String,
    /// More than one page was needed.
    pub paginated: bool,
}

/// Lists `req` through `source`, applying `map` to each object as soon as
/// its page is decoded (with `map` sharing and transforming objects, a list
/// never holds the decoded objects and their shared form at once; an object
/// it maps to `None` is left out), and
/// calling `progress(items_so_far, total_hint)` after each page.
pub async fn list_all<K, S, T>(
    source: &mut S,
    req: &ListRequest,
    mut progress: impl FnMut(u64, Option<u64>),
    mut map: impl FnMut(K) -> Option<T>,
) -> Result<Listed<T>, Failure>
where
    S: ListerWatcher<K>,
{
    let first = PageRequest {
        version: req.version.clone(),
        limit: req.page_size,
        continue_token: None,
    };
    let mut next = first.clone();
    let mut items = Vec::new();
    let mut resource_version = None;
    let mut pages = 0u32;
    let mut total_hint = None;
    loop {
        let page = match source.list_page(&next).await {
            Ok(page) => page,
            Err(Failure::Expired) if next.continue_token.is_some() => {
                tracing::info!("continue token expired; falling back to one unpaginated list");
                let full = PageRequest {
                    limit: None,
                    ..first
                };
                let list = source.list_page(&full).await?;
                progress(list.items.len() as u64, None);
                return Ok(Listed {
                    items: list.items.into_iter().filter_map(map).collect(),
                    resource_version: list.resource_version.unwrap_or_default(),
                    paginated: true,
                });
            }
            Err(failure) => return Err(failure),
        };
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
        let token = page.continue_token.clone().filter(|c| !c.is_empty());
        items.extend(page.items.into_iter().filter_map(&mut map));
        progress(items.len() as u64, total_hint);
        match token {
            Some(token) => next.continue_token = Some(token),
            None => break,
        }
    }
    Ok(Listed {
        items,
        resource_version: resource_version.unwrap_or_default(),
        paginated: pages > 1,
    })
}
