//! Reading the server's discovery documents into [`Discovered`], for
//! [`resolve`]: aggregated discovery (`apidiscovery.k8s.io/v2`: one document
//! for `/api`, one for `/apis`) when the server answers with it, else the
//! plain documents (`APIVersions`, `APIGroupList`, then one `APIResourceList`
//! per group version), fetched only for the groups a name can live in.
//!
//! Which style the server speaks is decided from the `kind` of its answer,
//! not assumed: kube's aggregated decoder reads a plain `APIGroupList` (what
//! Kubernetes 1.24 and the embedded server send) as an empty list, and every
//! name outside the core group then looked unknown.

use futures::future::join_all;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions};
use kube::Client;
use kube::core::discovery::v2::{ACCEPT_AGGREGATED_DISCOVERY_V2, APIGroupDiscoveryList};

use super::resource::{
    Discovered, GroupDoc, ResolveError, Resolved, ResourceDoc, ResourceSpec, Unreadable,
    VersionDoc, resolve,
};

/// The discovery documents could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The request failed.
    #[error("GET {path}: {source}")]
    Request {
        /// `/api` or `/apis`.
        path: &'static str,
        /// What kube-client said.
        #[source]
        source: kube::Error,
    },
    /// The answer is not a discovery document.
    #[error("GET {path}: {message}")]
    Document {
        /// `/api` or `/apis`.
        path: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

/// A group known by name and versions only (plain discovery), its
/// resources still to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainGroup {
    /// `""` for the core group.
    pub name: String,
    /// Versions, the preferred one first.
    pub versions: Vec<String>,
}

/// The answer to `/api` or `/apis`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// Aggregated: every group with its resources.
    Aggregated(Discovered),
    /// Plain: group names and versions.
    Plain(Vec<PlainGroup>),
}

/// Reads the answer to `/api` or `/apis` by its `kind`.
pub fn parse_root(path: &'static str, body: &str) -> Result<Root, DiscoveryError> {
    let bad = |message: String| DiscoveryError::Document { path, message };
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(|e| bad(format!("not JSON: {e}")))?;
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    match kind {
        "APIGroupDiscoveryList" => {
            let list: APIGroupDiscoveryList =
                serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
            Ok(Root::Aggregated(from_aggregated(list)))
        }
        "APIGroupList" => {
            let list: APIGroupList =
                serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
            Ok(Root::Plain(
                list.groups
                    .into_iter()
                    .map(|g| {
                        let preferred = g.preferred_version.map(|p| p.version);
                        let mut versions: Vec<String> =
                            g.versions.into_iter().map(|v| v.version).collect();
                        if let Some(p) = preferred
                            && let Some(i) = versions.iter().position(|v| *v == p)
                        {
                            let p = versions.remove(i);
                            versions.insert(0, p);
                        }
                        PlainGroup {
                            name: g.name,
                            versions,
                        }
                    })
                    .collect(),
            ))
        }
        "APIVersions" => {
            let list: APIVersions =
                serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
            Ok(Root::Plain(vec![PlainGroup {
                name: String::new(),
                versions: list.versions,
            }]))
        }
        other => Err(bad(format!(
            "expected APIGroupDiscoveryList, APIGroupList or APIVersions, got kind {other:?}"
        ))),
    }
}

/// The groups of an aggregated document, in its order; stale versions (an
/// aggregated API that did not answer) are left out as unreadable, as
/// client-go does.
pub fn from_aggregated(list: APIGroupDiscoveryList) -> Discovered {
    let mut out = Discovered::default();
    for g in list.items {
        let name = g.metadata.and_then(|m| m.name).unwrap_or_default();
        let mut doc = GroupDoc {
            name: name.clone(),
            versions: Vec::new(),
        };
        for v in g.versions {
            let version = v.version.unwrap_or_default();
            if v.freshness.as_deref() == Some("Stale") {
                out.unreadable.push(Unreadable {
                    group_version: group_version(&name, &version),
                    reason: "the server marks its document stale".into(),
                });
                continue;
            }
            let resources = v
                .resources
                .into_iter()
                .filter_map(|r| {
                    Some(ResourceDoc {
                        plural: r.resource.filter(|p| !p.is_empty())?,
                        singular: r.singular_resource.unwrap_or_default(),
                        kind: r.response_kind.and_then(|k| k.kind).unwrap_or_default(),
                        short_names: r.short_names,
                        namespaced: r.scope.as_deref() == Some("Namespaced"),
                        verbs: r.verbs,
                    })
                })
                .collect();
            doc.versions.push(VersionDoc { version, resources });
        }
        out.groups.push(doc);
    }
    out
}

/// The resources of a plain `APIResourceList`, subresources (`pods/log`) left out.
pub fn from_resource_list(list: APIResourceList) -> Vec<ResourceDoc> {
    list.resources
        .into_iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| ResourceDoc {
            plural: r.name,
            singular: r.singular_name,
            kind: r.kind,
            short_names: r.short_names.unwrap_or_default(),
            namespaced: r.namespaced,
            verbs: r.verbs,
        })
        .collect()
}

/// `v1` for core, `group/version` otherwise.
fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// What a failed request is, in a few words (a `Status`'s code and message).
fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message),
        other => other.to_string(),
    }
}

async fn get(client: &Client, path: &str, accept: &str) -> Result<String, kube::Error> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await
}

/// `/api` or `/apis`, asking for the aggregated form; a 404 is an empty
/// plain answer (a server without groups).
async fn root(client: &Client, path: &'static str) -> Result<Root, DiscoveryError> {
    match get(client, path, ACCEPT_AGGREGATED_DISCOVERY_V2).await {
        Ok(body) => parse_root(path, &body),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Root::Plain(Vec::new())),
        Err(source) => Err(DiscoveryError::Request { path, source }),
    }
}

/// What is known so far: the documents read, and the plain groups whose
/// resources are still to fetch.
struct Catalog {
    found: Discovered,
    pending: Vec<PlainGroup>,
    /// Every group name in the server's order (core first), to keep
    /// `found.groups` in that order however they were fetched.
    order: Vec<String>,
}

impl Catalog {
    fn new(roots: [Root; 2]) -> Self {
        let mut catalog = Catalog {
            found: Discovered::default(),
            pending: Vec::new(),
            order: Vec::new(),
        };
        for root in roots {
            match root {
                Root::Aggregated(d) => {
                    catalog
                        .order
                        .extend(d.groups.iter().map(|g| g.name.clone()));
                    catalog.found.groups.extend(d.groups);
                    catalog.found.unreadable.extend(d.unreadable);
                }
                Root::Plain(groups) => {
                    catalog.order.extend(groups.iter().map(|g| g.name.clone()));
                    catalog.pending.extend(groups);
                }
            }
        }
        catalog
    }

    /// Fetches the resources of every pending group `wanted` accepts, all at once.
    async fn load(&mut self, client: &Client, wanted: impl Fn(&str) -> bool) {
        let (todo, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|g| wanted(&g.name));
        self.pending = rest;
        let fetches = todo.iter().flat_map(|g| {
            g.versions.iter().map(move |v| async move {
                let path = if g.name.is_empty() {
                    format!("/api/{v}")
                } else {
                    format!("/apis/{}/{v}", g.name)
                };
                let read = match get(client, &path, "application/json").await {
                    Ok(body) => serde_json::from_str::<APIResourceList>(&body)
                        .map_err(|e| format!("not an APIResourceList: {e}")),
                    Err(e) => Err(reason(&e)),
                };
                (g, v, read)
            })
        });
        for (g, v, read) in join_all(fetches).await {
            match read {
                Ok(list) => {
                    let version = VersionDoc {
                        version: v.clone(),
                        resources: from_resource_list(list),
                    };
                    match self.found.groups.iter_mut().find(|d| d.name == g.name) {
                        Some(doc) => doc.versions.push(version),
                        None => self.found.groups.push(GroupDoc {
                            name: g.name.clone(),
                            versions: vec![version],
                        }),
                    }
                }
                Err(reason) => {
                    tracing::debug!(group = %g.name, version = %v, %reason, "discovery document unreadable");
                    self.found.unreadable.push(Unreadable {
                        group_version: group_version(&g.name, v),
                        reason,
                    });
                }
            }
        }
        let order = &self.order;
        let rank = |name: &str| order.iter().position(|n| n == name).unwrap_or(usize::MAX);
        self.found.groups.sort_by_key(|g| rank(&g.name));
        // `join_all` keeps the order of its futures: versions stay preferred first.
    }
}

/// Resolves every spec, asking the server as little as possible: the two
/// root documents (which, aggregated, hold everything), then only the
/// groups a qualified name can live in and the core group, and every other
/// group only for an unqualified name the core group does not settle (a
/// core resource found by its full name wins over any other group's). A
/// broken aggregated API elsewhere thus does not stop an informer over
/// core resources, and is named if the resource is not found.
pub async fn resolve_all(
    client: &Client,
    specs: &[ResourceSpec],
) -> Result<Vec<Result<Resolved, ResolveError>>, DiscoveryError> {
    let (api, apis) = tokio::join!(root(client, "/api"), root(client, "/apis"));
    let mut catalog = Catalog::new([api?, apis?]);
    catalog
        .load(client, |g| {
            g.is_empty() || specs.iter().any(|s| s.may_live_in(g) == Some(true))
        })
        .await;
    let mut out: Vec<_> = specs.iter().map(|s| resolve(s, &catalog.found)).collect();
    let settled = |spec: &ResourceSpec, result: &Result<Resolved, ResolveError>| {
        spec.may_live_in("").is_some()
            || matches!(result, Ok(r) if r.api_resource.group.is_empty() && r.by_full_name)
    };
    if specs.iter().zip(&out).any(|(s, r)| !settled(s, r)) {
        catalog.load(client, |_| true).await;
        for (spec, result) in specs.iter().zip(out.iter_mut()) {
            if !settled(spec, result) {
                *result = resolve(spec, &catalog.found);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// (group, version, plural, kind, short names, namespaced).
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
        bool,
    );

    /// One cluster's resources.
    const CLUSTER: &[Row] = &[
        ("", "v1", "configmaps", "ConfigMap", &["cm"], true),
        ("", "v1", "namespaces", "Namespace", &["ns"], false),
        ("", "v1", "events", "Event", &["ev"], true),
        ("apps", "v1", "deployments", "Deployment", &["deploy"], true),
        ("events.k8s.io", "v1", "events", "Event", &["ev"], true),
        (
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            &["crd", "crds"],
            false,
        ),
        ("example.com", "v1", "widgets", "Widget", &["wd"], true),
        ("demo.example.org", "v2", "widgets", "Widget", &["wd"], true),
        ("demo.example.org", "v1", "widgets", "Widget", &["wd"], true),
    ];

    fn groups() -> Vec<&'static str> {
        let mut out: Vec<&str> = Vec::new();
        for (g, ..) in CLUSTER {
            if !out.contains(g) {
                out.push(g);
            }
        }
        out
    }

    fn versions(group: &str) -> Vec<&'static str> {
        let mut out: Vec<&str> = Vec::new();
        for (g, v, ..) in CLUSTER {
            if *g == group && !out.contains(v) {
                out.push(v);
            }
        }
        out
    }

    /// The cluster as plain documents: `/api`, `/apis`, and each group version's list.
    fn plain() -> Discovered {
        let api = json!({"kind": "APIVersions", "versions": ["v1"]});
        let apis = json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": groups().iter().filter(|g| !g.is_empty()).map(|g| {
                let vs = versions(g);
                json!({
                    "name": g,
                    "versions": vs.iter().rev().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect::<Vec<_>>(),
                    "preferredVersion": {"groupVersion": format!("{g}/{}", vs[0]), "version": vs[0]},
                })
            }).collect::<Vec<_>>(),
        });
        let mut catalog = Catalog::new([
            parse_root("/api", &api.to_string()).unwrap(),
            parse_root("/apis", &apis.to_string()).unwrap(),
        ]);
        // What `load` does, without a server.
        for g in std::mem::take(&mut catalog.pending) {
            let mut doc = GroupDoc {
                name: g.name.clone(),
                versions: vec![],
            };
            for v in &g.versions {
                let list = json!({
                    "kind": "APIResourceList",
                    "groupVersion": group_version(&g.name, v),
                    "resources": CLUSTER.iter().filter(|r| r.0 == g.name && r.1 == v).flat_map(|(_, _, plural, kind, short, ns)| [
                        json!({"name": plural, "singularName": kind.to_lowercase(), "kind": kind, "namespaced": ns, "shortNames": short, "verbs": ["get", "list", "watch"]}),
                        json!({"name": format!("{plural}/status"), "singularName": "", "kind": kind, "namespaced": ns, "verbs": ["get"]}),
                    ]).collect::<Vec<_>>(),
                });
                doc.versions.push(VersionDoc {
                    version: v.clone(),
                    resources: from_resource_list(serde_json::from_value(list).unwrap()),
                });
            }
            catalog.found.groups.push(doc);
        }
        catalog.found
    }

    fn aggregated_doc(only_core: bool) -> serde_json::Value {
        json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "items": groups().iter().filter(|g| g.is_empty() == only_core).map(|g| json!({
                "metadata": {"name": g},
                "versions": versions(g).iter().map(|v| json!({
                    "version": v,
                    "freshness": "Current",
                    "resources": CLUSTER.iter().filter(|r| r.0 == *g && r.1 == *v).map(|(_, _, plural, kind, short, ns)| json!({
                        "resource": plural,
                        "singularResource": kind.to_lowercase(),
                        "responseKind": {"group": g, "version": v, "kind": kind},
                        "scope": if *ns { "Namespaced" } else { "Cluster" },
                        "shortNames": short,
                        "verbs": ["get", "list", "watch"],
                        "subresources": [{"subresource": "status", "verbs": ["get"]}],
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    fn aggregated() -> Discovered {
        Catalog::new([
            parse_root("/api", &aggregated_doc(true).to_string()).unwrap(),
            parse_root("/apis", &aggregated_doc(false).to_string()).unwrap(),
        ])
        .found
    }

    /// The same cluster read through either discovery style resolves every
    /// name the same way.
    #[test]
    fn both_discovery_styles_resolve_the_same_table() {
        let plain = plain();
        let aggregated = aggregated();
        assert_eq!(plain, aggregated, "both styles describe the same cluster");
        for (name, want) in [
            ("configmaps", Ok("v1/configmaps")),
            ("cm", Ok("v1/configmaps")),
            ("Namespace", Ok("v1/namespaces")),
            ("events", Ok("v1/events")),
            ("deploy", Ok("apps/v1/deployments")),
            ("Deployment", Ok("apps/v1/deployments")),
            ("deployments.v1.apps", Ok("apps/v1/deployments")),
            (
                "crd",
                Ok("apiextensions.k8s.io/v1/customresourcedefinitions"),
            ),
            (
                "customresourcedefinitions",
                Ok("apiextensions.k8s.io/v1/customresourcedefinitions"),
            ),
            (
                "widgets.demo.example.org",
                Ok("demo.example.org/v2/widgets"),
            ),
            ("widgets.example.com", Ok("example.com/v1/widgets")),
            ("widgets", Err("ambiguous")),
            ("frobnicators", Err("unknown resource")),
        ] {
            for (style, found) in [("plain", &plain), ("aggregated", &aggregated)] {
                let spec = ResourceSpec {
                    resource: Some(name.into()),
                    ..ResourceSpec::default()
                };
                let got = resolve(&spec, found)
                    .map(|r| r.describe())
                    .map_err(|e| e.to_string());
                match (&got, want) {
                    (Ok(g), Ok(w)) => assert_eq!(g, w, "{style}: {name}"),
                    (Err(e), Err(w)) => assert!(e.contains(w), "{style}: {name}: {e}"),
                    _ => panic!("{style}: {name}: got {got:?}, want {want:?}"),
                }
            }
        }
    }

    /// The bug of issue 28: a plain `APIGroupList` must not read as an
    /// empty aggregated list, and an aggregated one is recognised.
    #[test]
    fn the_root_document_style_is_read_from_its_kind() {
        let plain = r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"example.com/v1","version":"v1"}}]}"#;
        assert_eq!(
            parse_root("/apis", plain).unwrap(),
            Root::Plain(vec![PlainGroup {
                name: "example.com".into(),
                versions: vec!["v1".into()]
            }])
        );
        assert!(matches!(
            parse_root("/apis", &aggregated_doc(false).to_string()).unwrap(),
            Root::Aggregated(d) if d.groups.len() == 5
        ));
        for bad in [
            "",
            "[]",
            r#"{"kind":"Status"}"#,
            r#"{"kind":"APIGroupList","groups":7}"#,
        ] {
            let e = parse_root("/apis", bad).unwrap_err();
            assert!(e.to_string().starts_with("GET /apis: "), "{e}");
        }
    }

    /// The preferred version comes first whatever order the plain list gives.
    #[test]
    fn plain_groups_put_the_preferred_version_first() {
        let doc = r#"{"kind":"APIGroupList","groups":[{"name":"g","versions":[{"groupVersion":"g/v1beta1","version":"v1beta1"},{"groupVersion":"g/v1","version":"v1"}],"preferredVersion":{"groupVersion":"g/v1","version":"v1"}}]}"#;
        let Root::Plain(groups) = parse_root("/apis", doc).unwrap() else {
            panic!("plain")
        };
        assert_eq!(groups[0].versions, ["v1", "v1beta1"]);
    }

    #[test]
    fn stale_aggregated_versions_are_unreadable_not_used() {
        let mut doc = aggregated_doc(false);
        doc["items"][0]["versions"][0]["freshness"] = json!("Stale");
        let Root::Aggregated(d) = parse_root("/apis", &doc.to_string()).unwrap() else {
            panic!("aggregated")
        };
        assert_eq!(d.unreadable.len(), 1);
        assert_eq!(d.unreadable[0].group_version, "apps/v1");
        let spec = ResourceSpec {
            resource: Some("deploy".into()),
            ..ResourceSpec::default()
        };
        let e = resolve(&spec, &d).unwrap_err().to_string();
        assert!(
            e.contains("apps/v1 (the server marks its document stale)"),
            "{e}"
        );
    }
}
