//! The HTTP requests of a list: kube's `ListParams` from a [`PageRequest`],
//! with client-go's first-list parameters.

use kube::api::{ListParams, VersionMatch};
use kube::core::Request;

use crate::reflector::source::PageRequest;
use crate::reflector::state::ListVersion;

/// The HTTP request of one list page. kube-core leaves out
/// `resourceVersion=0` when a limit is set (a paginated read from etcd);
/// client-go sends `resourceVersion=0&limit=500` for its first list (R-10,
/// R-T13), which the watch cache serves, so it is put back.
pub(crate) fn list_request(
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

/// The `ListParams` of one page. The first page asks for the request's
/// resourceVersion; continuation pages carry no resourceVersion or match.
pub(crate) fn page_params(
    req: &PageRequest,
    label_selector: Option<&str>,
    field_selector: Option<&str>,
) -> ListParams {
    let mut lp = ListParams {
        label_selector: label_selector.map(str::to_owned),
        field_selector: field_selector.map(str::to_owned),
        limit: req.limit,
        continue_token: req.continue_token.clone(),
        ..ListParams::default()
    };
    if req.continue_token.is_none() {
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
    }
    lp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(req: &http::Request<Vec<u8>>) -> String {
        req.uri().query().unwrap_or_default().to_owned()
    }

    /// R-T13: the first list asks for any version with a page size, as
    /// client-go's does; later relists at N are unpaginated (R-T22), and
    /// continuation pages carry neither.
    #[test]
    fn the_first_list_asks_for_resource_version_0_with_a_limit() {
        let page = |version, limit, continue_token: Option<&str>| {
            let req = PageRequest {
                version,
                limit,
                continue_token: continue_token.map(str::to_owned),
            };
            page_params(&req, None, None)
        };
        let any = page(ListVersion::Any, Some(500), None);
        let q = query(&list_request("/api/v1/configmaps", &any, false).unwrap());
        assert!(q.contains("limit=500"), "{q}");
        assert!(q.contains("resourceVersion=0"), "{q}");
        let at_10 = page(ListVersion::NotOlderThan("10".into()), None, None);
        let q = query(&list_request("/api/v1/configmaps", &at_10, false).unwrap());
        assert!(
            q.contains("resourceVersion=10") && !q.contains("limit"),
            "{q}"
        );
        let next = page(ListVersion::Any, Some(500), Some("tok"));
        let q = query(&list_request("/api/v1/configmaps", &next, false).unwrap());
        assert!(!q.contains("resourceVersion"), "{q}");
        assert!(q.contains("continue=tok") && q.contains("limit=500"), "{q}");
    }

    /// A metadata-only informer's lists ask for `PartialObjectMetadataList`
    /// (kube's `list_metadata`); full ones name no representation.
    #[test]
    fn metadata_lists_ask_for_partial_object_metadata() {
        let req = PageRequest {
            version: ListVersion::Any,
            limit: Some(500),
            continue_token: None,
        };
        let lp = page_params(&req, None, None);
        let accept = |metadata| {
            let req = list_request("/api/v1/pods", &lp, metadata).unwrap();
            req.headers()
                .get(http::header::ACCEPT)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(
            accept(true).as_deref(),
            Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
        );
        assert!(accept(false).is_none_or(|a| !a.contains("PartialObjectMetadata")));
    }
}
