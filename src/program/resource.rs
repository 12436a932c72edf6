//! Resolving a resource named by the user (plural, singular, kind, optionally
//! `.group` qualified, or group/version/kind) through the server's discovery
//! documents into a `kube::discovery::ApiResource`, so any resource works as a
//! `DynamicObject`.

use kube::Client;
use kube::core::DynamicObject;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};

/// How the user named a resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSpec {
    /// Plural, singular or kind, optionally `.group` qualified (`deployments.apps`).
    pub resource: Option<String>,
    /// The kind (`Deployment`).
    pub kind: Option<String>,
    /// The group (`""` = core); qualifies `resource` or `kind`.
    pub group: Option<String>,
    /// The version (default: the server's preferred one).
    pub version: Option<String>,
}

/// A resolved resource.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// For `Api::all_with` / `Api::namespaced_with`.
    pub api_resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl Resolved {
    /// `group/version/plural` for messages.
    pub fn describe(&self) -> String {
        let ar = &self.api_resource;
        if ar.group.is_empty() {
            format!("{}/{}", ar.version, ar.plural)
        } else {
            format!("{}/{}/{}", ar.group, ar.version, ar.plural)
        }
    }

    /// An `Api` over this resource, in `namespace` or all namespaces.
    pub fn api(&self, client: kube::Client, namespace: Option<&str>) -> kube::Api<DynamicObject> {
        match namespace {
            Some(ns) if self.namespaced => {
                kube::Api::namespaced_with(client, ns, &self.api_resource)
            }
            _ => kube::Api::all_with(client, &self.api_resource),
        }
    }
}

/// The server's resources, fetched once and shared by every lookup.
pub struct Catalog {
    discovery: Discovery,
}

/// Resolves every spec, asking the server as little as possible: first only
/// the groups the specs name (the core group for unqualified names), then,
/// for names still unknown, every group (one aggregated request where the
/// server supports it). A broken aggregated API elsewhere in the cluster thus
/// does not stop an informer over core resources.
pub async fn resolve_all(
    client: &Client,
    specs: &[ResourceSpec],
) -> Result<Vec<Result<Resolved, String>>, kube::Error> {
    let mut groups: Vec<String> = specs.iter().map(ResourceSpec::group_hint).collect();
    groups.sort();
    groups.dedup();
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let narrow = Catalog {
        discovery: Discovery::new(client.clone()).filter(&names).run().await?,
    };
    let mut out: Vec<_> = specs.iter().map(|s| narrow.resolve(s)).collect();
    let retry = specs
        .iter()
        .zip(&out)
        .any(|(s, r)| r.is_err() && s.is_unqualified());
    if retry {
        let wide = match Discovery::new(client.clone()).run_aggregated().await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(error = %e, "aggregated discovery unavailable; querying each group");
                Discovery::new(client.clone()).run().await?
            }
        };
        let wide = Catalog { discovery: wide };
        for (spec, result) in specs.iter().zip(out.iter_mut()) {
            if result.is_err() && spec.is_unqualified() {
                *result = wide.resolve(spec);
            }
        }
    }
    Ok(out)
}

impl ResourceSpec {
    /// The group to look in first: the named one, else the core group.
    fn group_hint(&self) -> String {
        self.qualifier()
            .or_else(|| self.group.clone())
            .unwrap_or_default()
    }

    /// `deployments.apps` → `apps`.
    fn qualifier(&self) -> Option<String> {
        self.resource
            .as_deref()
            .and_then(|r| r.split_once('.'))
            .map(|(_, g)| g.to_owned())
    }

    /// Named without a group: it may live in any group.
    fn is_unqualified(&self) -> bool {
        self.group.is_none() && self.qualifier().is_none()
    }
}

impl Catalog {
    /// Finds the resource `spec` names; the error says why not.
    pub fn resolve(&self, spec: &ResourceSpec) -> Result<Resolved, String> {
        let (name, qualified_group) = match (&spec.resource, &spec.kind) {
            (Some(r), _) => match r.split_once('.') {
                Some((n, g)) => (n.to_owned(), Some(g.to_owned())),
                None => (r.clone(), None),
            },
            (None, Some(k)) => (k.clone(), None),
            (None, None) => return Err("no resource named".into()),
        };
        let group = match (&qualified_group, &spec.group) {
            (Some(q), Some(g)) if q != g => {
                return Err(format!(
                    "{name:?} is qualified with group {q:?} but `group` is {g:?}"
                ));
            }
            (Some(q), _) => Some(q.clone()),
            (None, g) => g.clone(),
        };
        let by_kind = spec.resource.is_none();
        let lower = name.to_lowercase();
        let matches = |ar: &ApiResource| {
            if by_kind {
                ar.kind == name
            } else {
                ar.plural == lower || ar.kind.to_lowercase() == lower
            }
        };
        let mut groups: Vec<_> = self.discovery.groups().collect();
        // Core first (as kubectl prefers it), then alphabetical.
        groups.sort_by_key(|g| (!g.name().is_empty(), g.name().to_owned()));
        let mut found: Option<(ApiResource, ApiCapabilities)> = None;
        for g in groups {
            if group.as_deref().is_some_and(|want| want != g.name()) {
                continue;
            }
            let candidates = match &spec.version {
                Some(v) => g.versioned_resources(v),
                None => g.recommended_resources(),
            };
            if let Some(hit) = candidates.into_iter().find(|(ar, _)| matches(ar)) {
                found = Some(hit);
                break;
            }
        }
        let Some((api_resource, caps)) = found else {
            let mut what = format!("unknown resource {name:?}");
            if let Some(g) = &group {
                what.push_str(&format!(" in group {g:?}"));
            }
            if let Some(v) = &spec.version {
                what.push_str(&format!(" at version {v:?}"));
            }
            return Err(format!(
                "{what}: the server's discovery documents do not list it"
            ));
        };
        for verb in [verbs::LIST, verbs::WATCH] {
            if !caps.operations.is_empty() && !caps.supports_operation(verb) {
                return Err(format!(
                    "resource {:?} does not support {verb}",
                    api_resource.plural
                ));
            }
        }
        Ok(Resolved {
            api_resource,
            namespaced: caps.scope == Scope::Namespaced,
        })
    }
}
