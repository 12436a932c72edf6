//! What a request asks for, read from its method, path and query alone, as kube-apiserver's
//! request-info resolver reads it before authorization: verb, API group, resource,
//! subresource, namespace and name of a resource request, or a plain path otherwise.
//!
//! Pure: no registry lookup, so it answers the same for served and unknown resources.

/// The attributes authorization and the request log look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the path is under `/api/{v}/...` or `/apis/{g}/{v}/...` and names a resource.
    pub is_resource_request: bool,
    /// The URL path.
    pub path: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection` for
    /// resource requests; the lowercase HTTP method otherwise.
    pub verb: String,
    /// The API group (`""` for the core group).
    pub api_group: String,
    /// The API version.
    pub api_version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource (`status`, `scale`, ...), if any.
    pub subresource: String,
    /// The namespace (`""` for cluster scope).
    pub namespace: String,
    /// The object name (`""` for collections; a `metadata.name=` field selector of a
    /// list or watch counts as the name, as in kube-apiserver).
    pub name: String,
}

impl RequestInfo {
    /// Resolve a request. `query` is the raw query string.
    pub fn resolve(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
        let mut info = RequestInfo {
            path: path.to_string(),
            verb: method.to_ascii_lowercase(),
            ..Default::default()
        };
        let mut parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if parts.len() < 3 {
            return info;
        }
        match parts[0] {
            "api" => {
                parts.remove(0);
            }
            "apis" => {
                if parts.len() < 4 {
                    return info;
                }
                info.api_group = parts[1].to_string();
                parts.drain(..2);
            }
            _ => return info,
        }
        info.is_resource_request = true;
        info.api_version = parts.remove(0).to_string();
        if parts.first() == Some(&"watch") {
            if parts.len() < 2 {
                info.is_resource_request = false;
                return info;
            }
            info.verb = "watch".into();
            parts.remove(0);
        } else {
            info.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .into();
        }
        if parts.first() == Some(&"namespaces") && parts.len() > 1 {
            info.namespace = parts[1].to_string();
            // `/namespaces/{ns}/{resource}/...`, unless what follows the namespace is
            // one of the namespace's own subresources.
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts.drain(..2);
            }
        }
        if let Some(resource) = parts.first() {
            info.resource = resource.to_string();
        }
        if let Some(name) = parts.get(1) {
            info.name = name.to_string();
        }
        if let Some(sub) = parts.get(2) {
            info.subresource = sub.to_string();
        }
        if info.name.is_empty() && info.verb == "get" {
            let watch = query_param(query, "watch").is_some_and(|v| v == "1" || v == "true");
            info.verb = if watch { "watch" } else { "list" }.into();
        }
        if info.name.is_empty()
            && matches!(info.verb.as_str(), "list" | "watch")
            && let Some(selector) = query_param(query, "fieldSelector")
            && let Some(name) = exact_name(&selector)
        {
            info.name = name;
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".into();
        }
        info
    }
}

fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// The name a field selector requires exactly (`metadata.name=x` or `==x`, alone or among
/// other terms), if it is a valid path segment.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
        let value = value.trim();
        (field.trim() == "metadata.name"
            && !field.ends_with('!')
            && !value.is_empty()
            && value != "."
            && value != ".."
            && !value.contains(['/', '%']))
        .then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::resolve(method, path, query)
    }

    #[test]
    fn resource_requests_are_read_as_kube_apiserver_reads_them() {
        let i = r("GET", "/api/v1/namespaces/default/configmaps", None);
        assert!(i.is_resource_request);
        assert_eq!(
            (
                i.verb.as_str(),
                i.api_group.as_str(),
                i.resource.as_str(),
                i.namespace.as_str()
            ),
            ("list", "", "configmaps", "default")
        );
        let i = r("GET", "/api/v1/configmaps", Some("watch=true"));
        assert_eq!((i.verb.as_str(), i.namespace.as_str()), ("watch", ""));
        let i = r("GET", "/api/v1/watch/namespaces/ns/configmaps", None);
        assert_eq!((i.verb.as_str(), i.namespace.as_str()), ("watch", "ns"));
        let i = r(
            "GET",
            "/api/v1/namespaces/ns/configmaps",
            Some("watch=1&fieldSelector=metadata.name%3Dx"),
        );
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("watch", "x"));
        let i = r(
            "PUT",
            "/apis/apps/v1/namespaces/ns/deployments/d/status",
            None,
        );
        assert_eq!(
            (
                i.verb.as_str(),
                i.api_group.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.subresource.as_str()
            ),
            ("update", "apps", "deployments", "d", "status")
        );
        let i = r("DELETE", "/api/v1/namespaces/ns/configmaps", None);
        assert_eq!(i.verb, "deletecollection");
        // A namespace is both the resource and its own namespace.
        let i = r("GET", "/api/v1/namespaces/ns", None);
        assert_eq!(
            (i.resource.as_str(), i.name.as_str(), i.namespace.as_str()),
            ("namespaces", "ns", "ns")
        );
        let i = r("PUT", "/api/v1/namespaces/ns/finalize", None);
        assert_eq!(
            (i.resource.as_str(), i.subresource.as_str()),
            ("namespaces", "finalize")
        );
    }

    #[test]
    fn other_paths_are_non_resource_requests() {
        for (method, path) in [
            ("GET", "/version"),
            ("GET", "/api"),
            ("GET", "/api/v1"),
            ("GET", "/apis/apps"),
            ("GET", "/apis/apps/v1"),
            ("POST", "/admin/faults/restart"),
        ] {
            let i = r(method, path, None);
            assert!(!i.is_resource_request, "{path}");
            assert_eq!(i.verb, method.to_ascii_lowercase());
        }
    }
}
