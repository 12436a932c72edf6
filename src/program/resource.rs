//! Resolving a resource named by the user into one served resource, as
//! kubectl does, by a pure function over the server's discovery documents
//! ([`resolve`]; fetching them is `discovery`'s job).
//!
//! Accepted names, matched case-insensitively: the plural (`deployments`),
//! the singular (`deployment`), the kind (`Deployment`) or a short name the
//! server lists (`deploy`, `cm`, a CRD's own), each optionally qualified by
//! its group (`deployments.apps`) or by version and group
//! (`deployments.v1.apps`). The rules follow client-go's `restmapper` and
//! cli-runtime's `mappingFor`:
//! - `a.b.c` is first read as resource `a`, version `b`, group `c`, then as
//!   resource `a` in group `b.c`;
//! - a group qualifier matches its group exactly, else as a prefix
//!   (`deployments.app` finds `apps`, as `storageclass.storage` finds
//!   `storage.k8s.io`);
//! - a full name (plural, singular, kind) wins over a short name, whatever
//!   the groups (kubectl does not expand a short name that is some
//!   resource's full name);
//! - within a group, the preferred version first, then the others in the
//!   server's order (a resource only served at an older version is found);
//! - the core group wins over every other ("/v1 is special", client-go).
//!
//! One deliberate difference: where a name matches resources in several
//! non-core groups, kubectl silently takes the first group in the server's
//! discovery order (for CRD groups, alphabetical); we refuse with
//! [`ResolveError::Ambiguous`], listing the candidates, because an informer
//! that watches the wrong group by accident misleads quietly.

use kube::core::DynamicObject;
use kube::discovery::ApiResource;

/// One API group as the server's discovery documents describe it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupDoc {
    /// `""` for the core group.
    pub name: String,
    /// The versions served, the preferred one first.
    pub versions: Vec<VersionDoc>,
}

/// One version of a group and its resources.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VersionDoc {
    /// `v1`, `v1beta1`, ...
    pub version: String,
    /// Its resources (subresources such as `pods/log` left out).
    pub resources: Vec<ResourceDoc>,
}

/// One resource of a group version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceDoc {
    /// `deployments`.
    pub plural: String,
    /// `deployment` (empty when the server lists none: the lower-case kind stands in).
    pub singular: String,
    /// `Deployment`.
    pub kind: String,
    /// `deploy`, as listed by the server.
    pub short_names: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `list`, `watch`, ... (empty: not said, not checked).
    pub verbs: Vec<String>,
}

/// A group version whose document could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// `metrics.k8s.io/v1beta1`.
    pub group_version: String,
    /// Why.
    pub reason: String,
}

/// What discovery found: the groups in the server's order (which carries
/// its priorities), and what could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Discovered {
    /// The groups read, in the server's order.
    pub groups: Vec<GroupDoc>,
    /// Group versions whose documents failed (a broken aggregated API).
    pub unreadable: Vec<Unreadable>,
}

/// How the user named a resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSpec {
    /// Plural, singular, kind or short name, optionally `.group` or
    /// `.version.group` qualified (`deployments.apps`, `deploy.v1.apps`).
    pub resource: Option<String>,
    /// The kind (`Deployment`), without qualifier.
    pub kind: Option<String>,
    /// The group (`""` = core); qualifies `resource` or `kind`.
    pub group: Option<String>,
    /// The version (default: the group's preferred one).
    pub version: Option<String>,
}

/// Why a name does not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Neither `resource` nor `kind`.
    #[error("no resource named")]
    Unnamed,
    /// The name's qualifier and `group`/`version` disagree.
    #[error("{name:?} is qualified as {qualifier:?}, which contradicts {setting}")]
    Contradiction {
        /// The name as given.
        name: String,
        /// What follows its first dot.
        qualifier: String,
        /// `group = "apps"` or the like.
        setting: String,
    },
    /// Nothing the server lists matches.
    #[error(
        "unknown resource {name:?}{}: the server's discovery documents do not list it \
         (names accepted: plural, singular, kind or short name, optionally qualified \
         as NAME.GROUP or NAME.VERSION.GROUP){}",
        where_(group, version),
        unread(unreadable)
    )]
    Unknown {
        /// The name as given.
        name: String,
        /// The group asked for.
        group: Option<String>,
        /// The version asked for.
        version: Option<String>,
        /// Group versions that could not be read (it may be one of them).
        unreadable: Vec<String>,
    },
    /// Several resources match and the rules do not choose.
    #[error(
        "resource {name:?} is ambiguous: it names {}; qualify it with its group",
        candidates.join(", ")
    )]
    Ambiguous {
        /// The name as given.
        name: String,
        /// `plural.group` of each, in the server's order.
        candidates: Vec<String>,
    },
    /// The resource cannot be listed or watched.
    #[error("resource {resource} does not support {verb} (verbs: {})", verbs.join(", "))]
    NotWatchable {
        /// `group/version/plural`.
        resource: String,
        /// `list` or `watch`.
        verb: &'static str,
        /// What it supports.
        verbs: Vec<String>,
    },
}

fn where_(group: &Option<String>, version: &Option<String>) -> String {
    let mut out = String::new();
    if let Some(g) = group {
        out.push_str(&format!(" in group {g:?}"));
    }
    if let Some(v) = version {
        out.push_str(&format!(" at version {v:?}"));
    }
    out
}

fn unread(unreadable: &[String]) -> String {
    if unreadable.is_empty() {
        String::new()
    } else {
        format!(
            "; these group versions could not be read: {}",
            unreadable.join("; ")
        )
    }
}

/// A resolved resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// For `Api::all_with` / `Api::namespaced_with`, and the objects' `apiVersion`/`kind`.
    pub api_resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Found by plural, singular or kind (not by a short name): no other
    /// group's resource can take precedence over a core one found so.
    pub by_full_name: bool,
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

/// One reading of the name: `a.b.c` may mean version `b` of group `c`, or group `b.c`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Query {
    /// Lower case.
    name: String,
    group: Option<String>,
    version: Option<String>,
    /// Only kinds match (`kind = "..."` in the configuration).
    by_kind: bool,
}

/// How strongly a resource matches a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// Plural, singular or kind.
    FullName,
    /// One of its short names.
    ShortName,
}

/// How a group qualifier is compared with a group's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupMatch {
    Exact,
    Prefix,
}

impl ResourceSpec {
    /// The readings of this spec, in the order kubectl tries them.
    fn queries(&self) -> Result<Vec<Query>, ResolveError> {
        let (name, by_kind) = match (&self.resource, &self.kind) {
            (Some(r), _) => (r.trim(), false),
            (None, Some(k)) => (k.trim(), true),
            (None, None) => return Err(ResolveError::Unnamed),
        };
        if name.is_empty() {
            return Err(ResolveError::Unnamed);
        }
        let query = |n: &str, group: Option<String>, version: Option<String>| Query {
            name: n.to_lowercase(),
            group,
            version,
            by_kind,
        };
        let Some((head, qualifier)) = name.split_once('.').filter(|_| !by_kind) else {
            return Ok(vec![query(name, self.group.clone(), self.version.clone())]);
        };
        let agrees = |have: &Option<String>, want: &str| have.as_deref().is_none_or(|h| h == want);
        let mut out = Vec::new();
        if let Some((version, group)) = qualifier.split_once('.')
            && agrees(&self.group, group)
            && agrees(&self.version, version)
        {
            out.push(query(head, Some(group.into()), Some(version.into())));
        }
        if agrees(&self.group, qualifier) {
            out.push(query(head, Some(qualifier.into()), self.version.clone()));
        }
        if out.is_empty() {
            let setting = match (&self.group, &self.version) {
                (Some(g), Some(v)) => format!("group = {g:?}, version = {v:?}"),
                (Some(g), None) => format!("group = {g:?}"),
                (None, v) => format!("version = {:?}", v.clone().unwrap_or_default()),
            };
            return Err(ResolveError::Contradiction {
                name: name.into(),
                qualifier: qualifier.into(),
                setting,
            });
        }
        Ok(out)
    }

    /// Whether a group of this name may hold the resource (for fetching
    /// only the documents that can matter). `None`: any group may.
    pub fn may_live_in(&self, group: &str) -> Option<bool> {
        let queries = self.queries().ok()?;
        if queries.iter().any(|q| q.group.is_none()) {
            return None;
        }
        Some(queries.iter().any(|q| {
            let want = q.group.as_deref().unwrap_or_default();
            group == want || (!want.is_empty() && group.starts_with(want))
        }))
    }
}

impl ResourceDoc {
    fn matches(&self, q: &Query, tier: Tier) -> bool {
        let kind = self.kind.to_lowercase();
        match tier {
            Tier::FullName if q.by_kind => kind == q.name,
            Tier::FullName => {
                self.plural.to_lowercase() == q.name
                    || self.singular.to_lowercase() == q.name
                    || kind == q.name
            }
            Tier::ShortName => {
                !q.by_kind && self.short_names.iter().any(|s| s.to_lowercase() == q.name)
            }
        }
    }
}

/// A resource that matches, and where.
#[derive(Debug, Clone, Copy)]
struct Candidate<'d> {
    group: &'d str,
    version: &'d str,
    resource: &'d ResourceDoc,
}

/// The groups in priority order: the core group first, then the server's order.
fn by_priority(found: &Discovered) -> impl Iterator<Item = &GroupDoc> {
    let core = found.groups.iter().filter(|g| g.name.is_empty());
    core.chain(found.groups.iter().filter(|g| !g.name.is_empty()))
}

/// Every group's matching resources at its first version that has any.
fn candidates<'d>(
    q: &Query,
    found: &'d Discovered,
    group_match: GroupMatch,
    tier: Tier,
) -> Vec<Candidate<'d>> {
    let mut out = Vec::new();
    for g in by_priority(found) {
        let group_ok = match (&q.group, group_match) {
            (None, _) => true,
            (Some(want), GroupMatch::Exact) => g.name == *want,
            (Some(want), GroupMatch::Prefix) => !want.is_empty() && g.name.starts_with(want),
        };
        if !group_ok {
            continue;
        }
        let versions = g
            .versions
            .iter()
            .filter(|v| q.version.as_ref().is_none_or(|want| v.version == *want));
        for v in versions {
            let hits: Vec<_> = v
                .resources
                .iter()
                .filter(|r| r.matches(q, tier))
                .map(|resource| Candidate {
                    group: &g.name,
                    version: &v.version,
                    resource,
                })
                .collect();
            if !hits.is_empty() {
                out.extend(hits);
                break;
            }
        }
    }
    out
}

/// `plural.group`, what the user can type to pick this one.
fn qualified(c: &Candidate<'_>) -> String {
    if c.group.is_empty() {
        c.resource.plural.clone()
    } else {
        format!("{}.{}", c.resource.plural, c.group)
    }
}

/// The one candidate the rules pick: the core group's, else the only one.
fn choose<'d>(name: &str, found: Vec<Candidate<'d>>) -> Result<Candidate<'d>, ResolveError> {
    let core: Vec<_> = found
        .iter()
        .filter(|c| c.group.is_empty())
        .copied()
        .collect();
    let pool = if core.is_empty() { found } else { core };
    match pool.as_slice() {
        [one] => Ok(*one),
        _ => Err(ResolveError::Ambiguous {
            name: name.into(),
            candidates: pool.iter().map(qualified).collect(),
        }),
    }
}

/// Finds the resource `spec` names in `found`, by the rules in the module docs.
pub fn resolve(spec: &ResourceSpec, found: &Discovered) -> Result<Resolved, ResolveError> {
    let queries = spec.queries()?;
    let given = spec
        .resource
        .clone()
        .or_else(|| spec.kind.clone())
        .unwrap_or_default();
    for q in &queries {
        for group_match in [GroupMatch::Exact, GroupMatch::Prefix] {
            if group_match == GroupMatch::Prefix && q.group.is_none() {
                continue;
            }
            for tier in [Tier::FullName, Tier::ShortName] {
                let hits = candidates(q, found, group_match, tier);
                if hits.is_empty() {
                    continue;
                }
                let c = choose(&given, hits)?;
                return accept(c, tier);
            }
        }
    }
    // The reading the user most likely meant: the last (`a.b.c` as group `b.c`).
    let q = queries.last().cloned();
    Err(ResolveError::Unknown {
        name: given,
        group: q.as_ref().and_then(|q| q.group.clone()),
        version: q.and_then(|q| q.version),
        unreadable: found
            .unreadable
            .iter()
            .map(|u| format!("{} ({})", u.group_version, u.reason))
            .collect(),
    })
}

/// The candidate as a [`Resolved`], if it can be listed and watched.
fn accept(c: Candidate<'_>, tier: Tier) -> Result<Resolved, ResolveError> {
    let api_version = if c.group.is_empty() {
        c.version.to_owned()
    } else {
        format!("{}/{}", c.group, c.version)
    };
    let api_resource = ApiResource {
        group: c.group.into(),
        version: c.version.into(),
        api_version,
        kind: c.resource.kind.clone(),
        plural: c.resource.plural.clone(),
    };
    let resolved = Resolved {
        api_resource,
        namespaced: c.resource.namespaced,
        by_full_name: tier == Tier::FullName,
    };
    let verbs = &c.resource.verbs;
    for verb in ["list", "watch"] {
        if !verbs.is_empty() && !verbs.iter().any(|v| v == verb) {
            return Err(ResolveError::NotWatchable {
                resource: resolved.describe(),
                verb,
                verbs: verbs.clone(),
            });
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(plural: &str, kind: &str, short: &[&str], namespaced: bool) -> ResourceDoc {
        ResourceDoc {
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            namespaced,
            verbs: ["get", "list", "watch"].map(String::from).to_vec(),
        }
    }

    fn group(name: &str, versions: &[(&str, Vec<ResourceDoc>)]) -> GroupDoc {
        GroupDoc {
            name: name.into(),
            versions: versions
                .iter()
                .map(|(v, r)| VersionDoc {
                    version: v.to_string(),
                    resources: r.clone(),
                })
                .collect(),
        }
    }

    /// A cluster like a real one: core, apps, events.k8s.io (`events` again),
    /// apiextensions, two CRD groups that both serve `widgets`, and a group
    /// whose resource is only served at its older version.
    fn cluster() -> Discovered {
        Discovered {
            groups: vec![
                group(
                    "",
                    &[(
                        "v1",
                        vec![
                            res("configmaps", "ConfigMap", &["cm"], true),
                            res("namespaces", "Namespace", &["ns"], false),
                            res("events", "Event", &["ev"], true),
                            res("secrets", "Secret", &[], true),
                        ],
                    )],
                ),
                group(
                    "apps",
                    &[(
                        "v1",
                        vec![res("deployments", "Deployment", &["deploy"], true)],
                    )],
                ),
                group(
                    "events.k8s.io",
                    &[("v1", vec![res("events", "Event", &["ev"], true)])],
                ),
                group(
                    "apiextensions.k8s.io",
                    &[(
                        "v1",
                        vec![res(
                            "customresourcedefinitions",
                            "CustomResourceDefinition",
                            &["crd", "crds"],
                            false,
                        )],
                    )],
                ),
                group(
                    "example.com",
                    &[("v1", vec![res("widgets", "Widget", &["wd"], true)])],
                ),
                group(
                    "demo.example.org",
                    &[
                        ("v2", vec![res("widgets", "Widget", &["wd"], true)]),
                        ("v1", vec![res("widgets", "Widget", &["wd"], true)]),
                    ],
                ),
                group(
                    "legacy.example.org",
                    &[
                        ("v2", vec![res("gadgets", "Gadget", &[], true)]),
                        ("v1", vec![res("oldthings", "OldThing", &["ot"], false)]),
                    ],
                ),
                group(
                    "cm.example.org",
                    &[("v1", vec![res("cms", "Cms", &[], true)])],
                ),
            ],
            unreadable: vec![],
        }
    }

    fn named(resource: &str) -> ResourceSpec {
        ResourceSpec {
            resource: Some(resource.into()),
            ..ResourceSpec::default()
        }
    }

    /// `group/version/plural` or the error's text.
    fn outcome(spec: &ResourceSpec, found: &Discovered) -> String {
        match resolve(spec, found) {
            Ok(r) => r.describe(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn names_resolve_as_kubectl_resolves_them() {
        let found = cluster();
        for (name, want) in [
            // Plural, singular, kind in any case.
            ("configmaps", "v1/configmaps"),
            ("configmap", "v1/configmaps"),
            ("ConfigMap", "v1/configmaps"),
            ("CONFIGMAPS", "v1/configmaps"),
            ("deployments", "apps/v1/deployments"),
            ("Deployment", "apps/v1/deployments"),
            ("deployment", "apps/v1/deployments"),
            // Short names, the server's own.
            ("cm", "v1/configmaps"),
            ("deploy", "apps/v1/deployments"),
            ("crd", "apiextensions.k8s.io/v1/customresourcedefinitions"),
            (
                "customresourcedefinitions",
                "apiextensions.k8s.io/v1/customresourcedefinitions",
            ),
            // Group-qualified, by version and group, by group prefix.
            ("deployments.apps", "apps/v1/deployments"),
            ("deployments.v1.apps", "apps/v1/deployments"),
            ("deploy.apps", "apps/v1/deployments"),
            ("Deployment.apps", "apps/v1/deployments"),
            ("deployments.app", "apps/v1/deployments"),
            ("widgets.example.com", "example.com/v1/widgets"),
            ("widgets.demo.example.org", "demo.example.org/v2/widgets"),
            ("widgets.v1.demo.example.org", "demo.example.org/v1/widgets"),
            ("events.events.k8s.io", "events.k8s.io/v1/events"),
            // The core group wins over another group's resource of the same name.
            ("events", "v1/events"),
            ("ev", "v1/events"),
            ("configmaps.", "v1/configmaps"),
            // A resource only served at a non-preferred version is found.
            ("oldthings", "legacy.example.org/v1/oldthings"),
            ("ot", "legacy.example.org/v1/oldthings"),
            // A full name beats a short name: `cms` is cm.example.org's plural.
            ("cms", "cm.example.org/v1/cms"),
        ] {
            assert_eq!(outcome(&named(name), &found), want, "{name}");
        }
    }

    #[test]
    fn a_name_in_several_non_core_groups_is_ambiguous_and_lists_them() {
        let found = cluster();
        for name in ["widgets", "widget", "Widget", "wd"] {
            let e = resolve(&named(name), &found).unwrap_err();
            assert_eq!(
                e,
                ResolveError::Ambiguous {
                    name: name.into(),
                    candidates: vec![
                        "widgets.example.com".into(),
                        "widgets.demo.example.org".into()
                    ],
                },
                "{name}"
            );
            assert!(e.to_string().contains("qualify it with its group"), "{e}");
        }
        // A group prefix that two groups share is ambiguous too.
        let mut found = found;
        found.groups.push(group(
            "example.net",
            &[("v1", vec![res("widgets", "Widget", &[], true)])],
        ));
        let e = resolve(&named("widgets.example"), &found).unwrap_err();
        assert_eq!(
            e,
            ResolveError::Ambiguous {
                name: "widgets.example".into(),
                candidates: vec!["widgets.example.com".into(), "widgets.example.net".into()],
            }
        );
    }

    #[test]
    fn unknown_names_say_what_is_accepted_and_what_could_not_be_read() {
        let mut found = cluster();
        found.unreadable.push(Unreadable {
            group_version: "metrics.k8s.io/v1beta1".into(),
            reason: "503 service unavailable".into(),
        });
        let e = resolve(&named("frobnicators"), &found).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("unknown resource \"frobnicators\""),
            "{text}"
        );
        assert!(
            text.contains("short name") && text.contains("metrics.k8s.io/v1beta1"),
            "{text}"
        );
        // The version asked for exists for another resource only.
        let e = resolve(&named("deployments.v2.apps"), &found).unwrap_err();
        assert!(matches!(e, ResolveError::Unknown { .. }), "{e}");
        // A subresource is no resource.
        assert!(resolve(&named("pods/log"), &found).is_err());
        assert_eq!(resolve(&named("  "), &found), Err(ResolveError::Unnamed));
    }

    #[test]
    fn configuration_fields_qualify_or_contradict_the_name() {
        let found = cluster();
        let spec = |resource: Option<&str>,
                    kind: Option<&str>,
                    group: Option<&str>,
                    version: Option<&str>| {
            ResourceSpec {
                resource: resource.map(String::from),
                kind: kind.map(String::from),
                group: group.map(String::from),
                version: version.map(String::from),
            }
        };
        for (s, want) in [
            (
                spec(None, Some("Deployment"), Some("apps"), None),
                "apps/v1/deployments",
            ),
            (
                spec(None, Some("deployment"), None, None),
                "apps/v1/deployments",
            ),
            (
                spec(None, Some("Widget"), Some("demo.example.org"), Some("v1")),
                "demo.example.org/v1/widgets",
            ),
            (
                spec(Some("deployments.apps"), None, Some("apps"), None),
                "apps/v1/deployments",
            ),
            (
                spec(Some("events"), None, Some("events.k8s.io"), None),
                "events.k8s.io/v1/events",
            ),
            (spec(Some("events"), None, Some(""), None), "v1/events"),
        ] {
            assert_eq!(outcome(&s, &found), want, "{s:?}");
        }
        // A kind is matched as a kind only, never as a short name or plural.
        assert!(resolve(&spec(None, Some("deploy"), None, None), &found).is_err());
        let e = resolve(
            &spec(Some("deployments.apps"), None, Some("batch"), None),
            &found,
        )
        .unwrap_err();
        assert!(matches!(e, ResolveError::Contradiction { .. }), "{e}");
        assert_eq!(
            resolve(&ResourceSpec::default(), &found),
            Err(ResolveError::Unnamed)
        );
    }

    #[test]
    fn scope_and_verbs_come_from_discovery() {
        let mut found = cluster();
        let ns = resolve(&named("ns"), &found).unwrap();
        assert!(!ns.namespaced);
        assert_eq!(ns.api_resource.api_version, "v1");
        assert_eq!(ns.api_resource.kind, "Namespace");
        let w = resolve(&named("widgets.demo.example.org"), &found).unwrap();
        assert!(w.namespaced && w.by_full_name);
        assert_eq!(w.api_resource.api_version, "demo.example.org/v2");
        assert!(!resolve(&named("cm"), &found).unwrap().by_full_name);
        // A resource that cannot be watched is refused, naming the verb.
        found.groups[0].versions[0].resources[3].verbs = vec!["get".into(), "list".into()];
        let e = resolve(&named("secrets"), &found).unwrap_err();
        assert!(
            matches!(e, ResolveError::NotWatchable { verb: "watch", .. }),
            "{e}"
        );
    }

    #[test]
    fn which_groups_a_name_may_live_in() {
        assert_eq!(named("configmaps").may_live_in("apps"), None);
        assert_eq!(named("deployments.apps").may_live_in("apps"), Some(true));
        assert_eq!(named("deployments.app").may_live_in("apps"), Some(true));
        assert_eq!(named("deployments.apps").may_live_in(""), Some(false));
        let w = named("widgets.v1.demo.example.org");
        assert_eq!(w.may_live_in("demo.example.org"), Some(true));
        assert_eq!(w.may_live_in("v1.demo.example.org"), Some(true));
        assert_eq!(w.may_live_in("example.com"), Some(false));
    }
}
