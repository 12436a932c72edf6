//! Discovery documents: the legacy ones (`APIVersions`, `APIGroupList`, `APIGroup`,
//! `APIResourceList`, as 1.24 serves them) and the aggregated `APIGroupDiscoveryList`
//! (`apidiscovery.k8s.io/v2` and `v2beta1`) that 1.26+ serves on `/api` and `/apis` to
//! clients that ask for it in `Accept`.

use serde_json::{Value, json};

use crate::registry::Registry;
use crate::resource::{ResourceType, SUBRESOURCE_VERBS, VERBS};

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": vs, "preferredVersion": preferred})
}

/// `GET /apis`.
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .into_iter()
        .map(|(g, versions)| group_doc(&g, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let (g, versions) = reg.groups().into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_doc(&g, &versions);
    if let Some(o) = doc.as_object_mut() {
        o.insert("kind".into(), json!("APIGroup"));
        o.insert("apiVersion".into(), json!("v1"));
    }
    Some(doc)
}

/// Served types of one group/version.
fn types_of<'a>(
    reg: &'a Registry,
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'a ResourceType> + 'a {
    reg.served()
        .map(|(_, t)| t)
        .filter(move |t| t.group == group && t.serves_version(version))
}

fn insert_names(entry: &mut Value, t: &ResourceType) {
    if let Some(o) = entry.as_object_mut() {
        if !t.short_names.is_empty() {
            o.insert("shortNames".into(), json!(t.short_names));
        }
        if !t.categories.is_empty() {
            o.insert("categories".into(), json!(t.categories));
        }
    }
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`.
pub fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.has_group_version(group, version) {
        return None;
    }
    let mut resources = Vec::new();
    for t in types_of(reg, group, version) {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        insert_names(&mut r, t);
        resources.push(r);
        if t.status.has_endpoint() {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": SUBRESOURCE_VERBS,
            }));
        }
        if t.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": SUBRESOURCE_VERBS,
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": if group.is_empty() { version.to_string() } else { format!("{group}/{version}") },
        "resources": resources,
    }))
}

/// The aggregated discovery versions a client may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregatedVersion {
    /// `apidiscovery.k8s.io/v2` (1.30+).
    V2,
    /// `apidiscovery.k8s.io/v2beta1` (1.26-1.29).
    V2Beta1,
}

impl AggregatedVersion {
    /// The version segment (`v2`, `v2beta1`).
    pub fn as_str(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => "v2",
            AggregatedVersion::V2Beta1 => "v2beta1",
        }
    }

    /// The response's `Content-Type`, which tells client-go the body is aggregated.
    pub fn content_type(self) -> String {
        format!(
            "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
            self.as_str()
        )
    }
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn aggregated_resource(t: &ResourceType, version: &str) -> Value {
    let mut subresources = Vec::new();
    if t.status.has_endpoint() {
        subresources.push(json!({
            "subresource": "status",
            "responseKind": gvk(&t.group, version, &t.kind),
            "verbs": SUBRESOURCE_VERBS,
        }));
    }
    if t.scale.is_some() {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": gvk("autoscaling", "v1", "Scale"),
            "verbs": SUBRESOURCE_VERBS,
        }));
    }
    let mut r = json!({
        "resource": t.plural,
        "responseKind": gvk(&t.group, version, &t.kind),
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": t.singular,
        "verbs": VERBS,
    });
    insert_names(&mut r, t);
    if !subresources.is_empty()
        && let Some(o) = r.as_object_mut()
    {
        o.insert("subresources".into(), Value::Array(subresources));
    }
    r
}

fn aggregated_group(reg: &Registry, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = types_of(reg, group, v)
                .map(|t| aggregated_resource(t, v))
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() {
        json!({"creationTimestamp": null})
    } else {
        json!({"name": group, "creationTimestamp": null})
    };
    json!({"metadata": metadata, "versions": versions})
}

/// `GET /api` (`core`) or `GET /apis` as an `APIGroupDiscoveryList`.
pub fn aggregated(reg: &Registry, core: bool, version: AggregatedVersion) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(reg, "", &["v1".to_string()])]
    } else {
        reg.groups()
            .into_iter()
            .map(|(g, versions)| aggregated_group(reg, &g, &versions))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{}", version.as_str()),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_lists_default_types() {
        let r = Registry::new(ResourceType::defaults());
        let core = api_resource_list(&r, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"configmaps"));
        assert!(names.contains(&"namespaces"));
        assert!(names.contains(&"pods/status"));
        assert!(!names.contains(&"widgets"));
        let groups = api_group_list(&r);
        let example = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "example.com")
            .unwrap();
        assert_eq!(
            example["preferredVersion"]["groupVersion"],
            "example.com/v1"
        );
        assert!(api_resource_list(&r, "example.com", "v2").is_none());
        let apps = api_resource_list(&r, "apps", "v1").unwrap();
        let scale = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(
            (&scale["group"], &scale["kind"]),
            (&json!("autoscaling"), &json!("Scale"))
        );
    }

    #[test]
    fn aggregated_lists_every_group_with_its_resources() {
        let r = Registry::new(ResourceType::defaults());
        let apis = aggregated(&r, false, AggregatedVersion::V2);
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2");
        let apps = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apps")
            .unwrap();
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["subresources"].as_array().unwrap().len(), 2);
        let core = aggregated(&r, true, AggregatedVersion::V2Beta1);
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert!(core["items"][0]["metadata"].get("name").is_none());
    }
}
