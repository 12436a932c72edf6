//! Resource types the server serves, and the discovery documents that describe them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// One served resource type (e.g. core/v1 `ConfigMap`, plural `configmaps`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceType {
    /// API group; `""` for core.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `configmaps`.
    pub plural: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
}

impl ResourceType {
    /// The store key of `name`: namespaced types default to the `default`
    /// namespace (as requests without one do), cluster-scoped ones have none.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> crate::object::ObjKey {
        if self.namespaced {
            crate::object::ObjKey::new(namespace.unwrap_or("default"), name)
        } else {
            crate::object::ObjKey::new("", name)
        }
    }

    /// A resource type from its parts.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    /// The default set: core/v1 namespaces, configmaps, secrets, pods, services, events,
    /// and the custom `example.com/v1 Widget` (namespaced).
    pub fn defaults() -> Vec<ResourceType> {
        vec![
            Self::new("", "v1", "Namespace", "namespaces", false),
            Self::new("", "v1", "ConfigMap", "configmaps", true),
            Self::new("", "v1", "Secret", "secrets", true),
            Self::new("", "v1", "Pod", "pods", true),
            Self::new("", "v1", "Service", "services", true),
            Self::new("", "v1", "Event", "events", true),
            Self::new("example.com", "v1", "Widget", "widgets", true),
        ]
    }

    /// `v1` for core, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The list kind, e.g. `ConfigMapList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Singular resource name (lower-case kind).
    pub fn singular(&self) -> String {
        self.kind.to_lowercase()
    }

    /// kubectl short names for the well-known core types.
    pub fn short_names(&self) -> &'static [&'static str] {
        if !self.group.is_empty() {
            return &[];
        }
        match self.plural.as_str() {
            "namespaces" => &["ns"],
            "configmaps" => &["cm"],
            "pods" => &["po"],
            "services" => &["svc"],
            "events" => &["ev"],
            _ => &[],
        }
    }

    /// Whether strategic-merge patches are accepted (built-in types only, like the real server).
    pub fn accepts_strategic_merge(&self) -> bool {
        self.group.is_empty()
    }
}

/// Index of served resource types by (group, plural), plus discovery documents.
#[derive(Debug, Clone)]
pub struct Registry {
    types: Vec<ResourceType>,
    by_key: BTreeMap<(String, String), usize>,
}

/// Verbs advertised for every resource.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl Registry {
    /// Build the registry; later duplicates of the same (group, plural) are ignored.
    pub fn new(types: Vec<ResourceType>) -> Self {
        let mut by_key = BTreeMap::new();
        let mut kept = Vec::new();
        for t in types {
            let key = (t.group.clone(), t.plural.clone());
            if by_key.contains_key(&key) {
                continue;
            }
            by_key.insert(key, kept.len());
            kept.push(t);
        }
        Registry {
            types: kept,
            by_key,
        }
    }

    /// All types in registration order.
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    /// Look a type up by group and plural.
    pub fn get(&self, group: &str, plural: &str) -> Option<(usize, &ResourceType)> {
        let idx = *self.by_key.get(&(group.to_string(), plural.to_string()))?;
        self.types.get(idx).map(|t| (idx, t))
    }

    /// Look a type up by group, version and plural (the path form).
    pub fn get_versioned(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<(usize, &ResourceType)> {
        self.get(group, plural)
            .filter(|(_, t)| t.version == version)
    }

    /// Whether a group/version pair is served.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|t| t.group == group && t.version == version)
    }

    /// Groups (non-core) with their versions, in first-seen order.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for t in self.types.iter().filter(|t| !t.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) => {
                    if !versions.contains(&t.version) {
                        versions.push(t.version.clone());
                    }
                }
                None => out.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        out
    }

    /// `GET /api`.
    pub fn api_versions(&self, server_address: &str) -> Value {
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        })
    }

    /// `GET /apis`.
    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .map(|(g, versions)| group_doc(&g, &versions))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/{group}`.
    pub fn api_group(&self, group: &str) -> Option<Value> {
        let (g, versions) = self.groups().into_iter().find(|(g, _)| g == group)?;
        let mut doc = group_doc(&g, &versions);
        if let Some(o) = doc.as_object_mut() {
            o.insert("kind".into(), json!("APIGroup"));
            o.insert("apiVersion".into(), json!("v1"));
        }
        Some(doc)
    }

    /// `GET /api/v1` or `GET /apis/{group}/{version}`.
    pub fn api_resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if !self.has_group_version(group, version) {
            return None;
        }
        let resources: Vec<Value> = self
            .types
            .iter()
            .filter(|t| t.group == group && t.version == version)
            .map(|t| {
                let mut r = json!({
                    "name": t.plural,
                    "singularName": t.singular(),
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "verbs": VERBS,
                });
                if !t.short_names().is_empty()
                    && let Some(o) = r.as_object_mut()
                {
                    o.insert("shortNames".into(), json!(t.short_names()));
                }
                r
            })
            .collect();
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": resources,
        }))
    }
    /// `GET /openapi/v3`: one entry per served group/version (kubectl reads it to learn that
    /// server-side field validation is supported, so it skips client-side schema validation).
    pub fn openapi_v3_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        let mut gvs: Vec<(String, String)> = Vec::new();
        for t in &self.types {
            let gv = (t.group.clone(), t.version.clone());
            if !gvs.contains(&gv) {
                gvs.push(gv);
            }
        }
        for (g, v) in gvs {
            let path = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=kinformer")}),
            );
        }
        json!({"paths": paths})
    }

    /// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`: a minimal OpenAPI v3
    /// document whose PATCH operations carry the GVK extension and the `fieldValidation` parameter.
    pub fn openapi_v3_doc(&self, group: &str, version: &str) -> Option<Value> {
        if !self.has_group_version(group, version) {
            return None;
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let mut paths = serde_json::Map::new();
        for t in self
            .types
            .iter()
            .filter(|t| t.group == group && t.version == version)
        {
            let path = if t.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
            } else {
                format!("{prefix}/{}/{{name}}", t.plural)
            };
            let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
            let params = json!([
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            ]);
            let op = |id: &str| {
                json!({
                    "operationId": format!("{id}{}", t.kind),
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": params,
                    "responses": {"200": {"description": "OK"}},
                })
            };
            paths.insert(
                path,
                json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
            );
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0-kinformer"},
            "paths": paths,
            "components": {"schemas": {}},
        }))
    }
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": vs, "preferredVersion": preferred})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_default_types() {
        let r = Registry::new(ResourceType::defaults());
        let core = r.api_resource_list("", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"configmaps"));
        assert!(names.contains(&"namespaces"));
        assert!(!names.contains(&"widgets"));
        let groups = r.api_group_list();
        assert_eq!(groups["groups"][0]["name"], "example.com");
        assert_eq!(
            groups["groups"][0]["preferredVersion"]["groupVersion"],
            "example.com/v1"
        );
        assert!(r.api_resource_list("example.com", "v2").is_none());
        assert_eq!(r.get("", "configmaps").unwrap().1.kind, "ConfigMap");
    }
}
