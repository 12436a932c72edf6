//! A whole list, page by page, as client-go's pager makes it:
//! continuation pages until the last, and one unpaginated list when a
//! continue token expires.

use super::failure::Failure;
use super::source::{ListerWatcher, PageRequest};
use super::state::ListRequest;

/// A list's result.
#[derive(Debug)]
pub struct Listed<T> {
    /// Every item of every page ([`list_all`]), or of the pages not handed
    /// out ([`list_pages`]: the last one).
    pub items: Vec<T>,
    /// Items handed out page by page before `items` ([`list_pages`]).
    pub handed_out: usize,
    /// The page consumer refused a page: the list stopped there.
    pub stopped: bool,
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
    progress: impl FnMut(u64, Option<u64>),
    map: impl FnMut(K) -> Option<T>,
) -> Result<Listed<T>, Failure>
where
    S: ListerWatcher<K>,
{
    let mut earlier = Vec::new();
    let mut listed = list_pages(source, req, progress, map, async |page: Vec<T>| {
        earlier.extend(page);
        true
    })
    .await?;
    // No page handed out (one page, or the fallback's whole list after an
    // expired token): the result's items are the list as they are.
    if listed.handed_out > 0 {
        earlier.append(&mut listed.items);
        listed.items = earlier;
    }
    listed.handed_out = 0;
    Ok(listed)
}

/// Lists like [`list_all`], handing each page but the last to `page_out`
/// as soon as it is mapped (so a consumer can take a long list while it is
/// read, and nothing holds it whole); the last page is the result's
/// `items`. If the continue token expires, one unpaginated list follows,
/// a whole list of its own (`handed_out` 0: the pages before are void, and
/// some objects come twice). When
/// `page_out` answers `false` the list stops (`stopped`).
pub async fn list_pages<K, S, T>(
    source: &mut S,
    req: &ListRequest,
    mut progress: impl FnMut(u64, Option<u64>),
    mut map: impl FnMut(K) -> Option<T>,
    mut page_out: impl AsyncFnMut(Vec<T>) -> bool,
) -> Result<Listed<T>, Failure>
where
    S: ListerWatcher<K>,
{
    let mut handed_out = 0usize;
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
                // A list of its own: the pages handed out are not part of it.
                return Ok(Listed {
                    items: list.items.into_iter().filter_map(map).collect(),
                    handed_out: 0,
                    stopped: false,
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
        }
        let token = page.continue_token.clone().filter(|c| !c.is_empty());
        items.extend(page.items.into_iter().filter_map(&mut map));
        progress((handed_out + items.len()) as u64, total_hint);
        match token {
            Some(token) => {
                next = next.after(token);
                handed_out += items.len();
                if !page_out(std::mem::take(&mut items)).await {
                    return Ok(Listed {
                        items,
                        handed_out,
                        stopped: true,
                        resource_version: resource_version.unwrap_or_default(),
                        paginated: true,
                    });
                }
            }
            None => break,
        }
    }
    Ok(Listed {
        items,
        handed_out,
        stopped: false,
        resource_version: resource_version.unwrap_or_default(),
        paginated: pages > 1,
    })
}
