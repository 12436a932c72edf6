//! Resource types the server serves: names, scope, versions and the per-kind rules a real
//! server's registry applies (subresources, generation, what a delete answers).

use std::sync::Arc;

use serde_json::Value;

use crate::key::ObjKey;

/// How a type's `status` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusRule {
    /// No `status` subresource: `status` is an ordinary field.
    None,
    /// A real `status` subresource: the main endpoint ignores `status` (a create drops it),
    /// the `/status` endpoint changes nothing else. Built-in workload types, CRDs, and
    /// custom resources whose CRD enables it.
    Separate,
    /// A `/status` endpoint that changes only `status`, while the main endpoint keeps
    /// writing `status` too. The embedded server's core types (Pods, Services, Namespaces)
    /// keep this so tests and benchmarks can create objects with a status in one request; a
    /// real server resets `status` on the main endpoint.
    Shared,
}

impl StatusRule {
    /// Whether `/status` is served.
    pub fn has_endpoint(self) -> bool {
        self != StatusRule::None
    }
}

/// Where the `scale` subresource reads and writes, as JSON pointers into the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replica count, e.g. `/spec/replicas`.
    pub spec_replicas: String,
    /// The observed replica count, e.g. `/status/replicas`.
    pub status_replicas: String,
    /// Where `status.selector` of the Scale comes from.
    pub selector: ScaleSelector,
}

/// The source of a Scale's `status.selector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleSelector {
    /// A `LabelSelector` object (built-in workloads: `/spec/selector`), rendered as a string.
    LabelSelector(String),
    /// A string field (a CRD's `labelSelectorPath`).
    Text(String),
    /// None.
    Absent,
}

impl ScalePaths {
    /// The paths of the built-in workloads (`spec.replicas`, `status.replicas`, `spec.selector`).
    pub fn workload() -> Self {
        ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            selector: ScaleSelector::LabelSelector("/spec/selector".into()),
        }
    }
}

/// One served resource type (e.g. core/v1 `ConfigMap`, plural `configmaps`).
///
/// Multi-version custom resources are one type: objects are stored at `version` and served
/// under every entry of `versions`, only `apiVersion` rewritten (no conversion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; `""` for core.
    pub group: String,
    /// The storage version, e.g. `v1`: objects are stored with this `apiVersion`.
    pub version: String,
    /// Served versions, preferred first; always contains `version`.
    pub versions: Vec<String>,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// The list kind, e.g. `ConfigMapList`.
    pub list_kind: String,
    /// Plural resource name used in paths, e.g. `configmaps`.
    pub plural: String,
    /// Singular resource name, e.g. `configmap`.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// kubectl short names (`cm`, `deploy`, ...).
    pub short_names: Vec<String>,
    /// Categories (`all`, ...).
    pub categories: Vec<String>,
    /// A custom resource (CRD-defined, or configured as one): list items keep `apiVersion`
    /// and `kind`, a delete answers the object, strategic merge patches are refused.
    pub custom: bool,
    /// The `status` subresource.
    pub status: StatusRule,
    /// The `scale` subresource, if any.
    pub scale: Option<ScalePaths>,
    /// Whether `metadata.generation` is kept (kinds with a spec); it counts changes outside
    /// `metadata` (and outside `status` when `status` is a subresource).
    pub generation: bool,
    /// Whether a delete answers the deleted object (the registry's `ReturnDeletedObject`)
    /// instead of a `Status`. Deletes held by finalizers or grace periods always answer the object.
    pub returns_deleted_object: bool,
    /// Pods: a delete of a scheduled, running Pod waits for its grace period (no kubelet
    /// ends it here: it stays until deleted with `gracePeriodSeconds=0`).
    pub graceful_deletion: bool,
    /// batch/v1 Jobs: without a `propagationPolicy`, dependents are orphaned.
    pub orphans_by_default: bool,
    /// OpenAPI v3 schemas by served version (custom resources), for the minimal validation.
    pub schemas: Vec<(String, Arc<Value>)>,
}

/// Verbs of a resource.
pub const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Verbs of the `status` and `scale` subresources.
pub const SUBRESOURCE_VERBS: [&str; 3] = ["get", "patch", "update"];

impl ResourceType {
    /// A resource type from its parts. A type in the core group is a plain built-in type
    /// (no generation, a delete answers a `Status`); one in another group behaves as a custom
    /// resource without subresources. The builder methods below refine either.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        let custom = !group.is_empty();
        ResourceType {
            group: group.into(),
            version: version.into(),
            versions: vec![version.into()],
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            custom,
            status: StatusRule::None,
            scale: None,
            generation: custom,
            returns_deleted_object: custom,
            graceful_deletion: false,
            orphans_by_default: false,
            schemas: Vec::new(),
        }
    }

    /// A built-in type (list items without `apiVersion`/`kind`, strategic merge accepted).
    pub fn builtin(mut self) -> Self {
        self.custom = false;
        self.generation = false;
        self.returns_deleted_object = false;
        self
    }

    /// Short names.
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Categories.
    pub fn with_categories(mut self, categories: &[&str]) -> Self {
        self.categories = categories.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The `status` rule.
    pub fn with_status(mut self, rule: StatusRule) -> Self {
        self.status = rule;
        self
    }

    /// A `scale` subresource.
    pub fn with_scale(mut self, paths: ScalePaths) -> Self {
        self.scale = Some(paths);
        self
    }

    /// Whether `metadata.generation` is kept.
    pub fn with_generation(mut self, on: bool) -> Self {
        self.generation = on;
        self
    }

    /// Whether a delete answers the deleted object.
    pub fn returning_deleted_object(mut self, on: bool) -> Self {
        self.returns_deleted_object = on;
        self
    }

    /// The store key of `name`: namespaced types default to the `default`
    /// namespace (as requests without one do), cluster-scoped ones have none.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> ObjKey {
        if self.namespaced {
            ObjKey::new(namespace.unwrap_or("default"), name)
        } else {
            ObjKey::new("", name)
        }
    }

    /// The default set: core/v1 namespaces, configmaps, secrets, pods, services, events,
    /// serviceaccounts; apps/v1 deployments, replicasets, statefulsets, daemonsets; batch/v1
    /// jobs and cronjobs; coordination.k8s.io/v1 leases; apiextensions.k8s.io/v1
    /// customresourcedefinitions; and the custom `example.com/v1 Widget` (namespaced).
    pub fn defaults() -> Vec<ResourceType> {
        let core = |kind: &str, plural: &str, namespaced: bool| {
            Self::new("", "v1", kind, plural, namespaced).builtin()
        };
        let workload = |group: &str, kind: &str, plural: &str| {
            Self::new(group, "v1", kind, plural, true)
                .builtin()
                .with_status(StatusRule::Separate)
                .with_generation(true)
                .with_categories(&["all"])
        };
        vec![
            core("Namespace", "namespaces", false)
                .with_short_names(&["ns"])
                .with_status(StatusRule::Shared)
                .returning_deleted_object(true),
            core("ConfigMap", "configmaps", true).with_short_names(&["cm"]),
            core("Secret", "secrets", true),
            Self {
                graceful_deletion: true,
                ..core("Pod", "pods", true)
                    .with_short_names(&["po"])
                    .with_categories(&["all"])
                    .with_status(StatusRule::Shared)
                    .returning_deleted_object(true)
            },
            core("Service", "services", true)
                .with_short_names(&["svc"])
                .with_categories(&["all"])
                .with_status(StatusRule::Shared)
                .returning_deleted_object(true),
            core("Event", "events", true).with_short_names(&["ev"]),
            core("ServiceAccount", "serviceaccounts", true)
                .with_short_names(&["sa"])
                .returning_deleted_object(true),
            workload("apps", "Deployment", "deployments")
                .with_short_names(&["deploy"])
                .with_scale(ScalePaths::workload()),
            workload("apps", "ReplicaSet", "replicasets")
                .with_short_names(&["rs"])
                .with_scale(ScalePaths::workload()),
            workload("apps", "StatefulSet", "statefulsets")
                .with_short_names(&["sts"])
                .with_scale(ScalePaths::workload()),
            workload("apps", "DaemonSet", "daemonsets").with_short_names(&["ds"]),
            Self {
                orphans_by_default: true,
                ..workload("batch", "Job", "jobs")
            },
            workload("batch", "CronJob", "cronjobs").with_short_names(&["cj"]),
            Self::new("coordination.k8s.io", "v1", "Lease", "leases", true).builtin(),
            Self::new(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
            )
            .builtin()
            .with_short_names(&["crd", "crds"])
            .with_status(StatusRule::Separate)
            .with_generation(true),
            Self::new("example.com", "v1", "Widget", "widgets", true),
        ]
    }

    /// `v1` for core, `group/version` otherwise (of the storage version).
    pub fn api_version(&self) -> String {
        self.api_version_of(&self.version)
    }

    /// `apiVersion` of one served version.
    pub fn api_version_of(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The list kind, e.g. `ConfigMapList`.
    pub fn list_kind(&self) -> String {
        self.list_kind.clone()
    }

    /// Singular resource name.
    pub fn singular(&self) -> String {
        self.singular.clone()
    }

    /// kubectl short names.
    pub fn short_names(&self) -> &[String] {
        &self.short_names
    }

    /// Whether `version` is served.
    pub fn serves_version(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// Whether strategic-merge patches are accepted (built-in types only, like the real server).
    pub fn accepts_strategic_merge(&self) -> bool {
        !self.custom
    }

    /// Whether list items keep `apiVersion` and `kind` (custom resources) or drop them
    /// (built-in types, as a real server's typed lists do).
    pub fn list_items_typed(&self) -> bool {
        self.custom
    }

    /// The schema of a served version, if the type has one.
    pub fn schema(&self, version: &str) -> Option<&Value> {
        self.schemas
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, s)| s.as_ref())
    }
}

/// Kubernetes' version order (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1` > `foo`),
/// as a sort key: higher sorts first when reversed.
pub fn version_priority(version: &str) -> (u8, u32, u32) {
    let Some(rest) = version.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    let (stage, n) = if tail.is_empty() {
        return (3, major, 0);
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match n.parse::<u32>() {
        Ok(n) => (stage, major, n),
        Err(_) => (0, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_version_order() {
        let mut vs = vec![
            "v1alpha1", "v1", "foo", "v2beta1", "v1beta2", "v2", "v1beta1",
        ];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(
            vs,
            [
                "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "foo"
            ]
        );
    }

    #[test]
    fn builtin_rules_by_kind() {
        let all = ResourceType::defaults();
        let find = |p: &str| all.iter().find(|t| t.plural == p).unwrap();
        assert!(!find("configmaps").generation && !find("configmaps").returns_deleted_object);
        assert!(find("deployments").generation && find("deployments").scale.is_some());
        assert!(find("pods").returns_deleted_object && find("pods").graceful_deletion);
        assert!(find("widgets").custom && find("widgets").list_items_typed());
        assert!(find("jobs").orphans_by_default);
        assert_eq!(
            find("customresourcedefinitions").short_names,
            ["crd", "crds"]
        );
    }
}
