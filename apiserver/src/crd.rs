//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): the checks a CRD gets, the
//! resource type it defines, and the status the real server's CRD controllers write
//! (`acceptedNames`, `NamesAccepted`, `Established`, `Terminating`, `storedVersions`).
//!
//! Versions: every served version is served from one storage (the `storage: true`
//! version); objects are returned with `apiVersion` rewritten to the version asked for and
//! nothing else converted (as `conversion.strategy: None`). Subresources and schemas are
//! taken per version for schemas, from the storage version for `status`/`scale`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::names::{valid_dns_label, valid_object_name};
use crate::resource::{ResourceType, ScalePaths, ScaleSelector, StatusRule, version_priority};
use crate::status::{ApiError, invalid_with_causes};

/// The CRD API group.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";
/// The CRD resource.
pub const CRD_PLURAL: &str = "customresourcedefinitions";
/// The finalizer that makes the server delete a CRD's objects before the CRD goes.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Whether a type is the CRD type itself.
pub fn is_crd_type(rt: &ResourceType) -> bool {
    rt.group == CRD_GROUP && rt.plural == CRD_PLURAL
}

struct Causes {
    name: String,
    causes: Vec<(String, &'static str, String)>,
}

impl Causes {
    fn push(&mut self, field: &str, reason: &'static str, detail: String) {
        self.causes.push((field.to_string(), reason, detail));
    }

    fn into_result(self) -> Result<(), ApiError> {
        invalid_with_causes(
            "CustomResourceDefinition.apiextensions.k8s.io",
            "CustomResourceDefinition",
            Some(CRD_GROUP),
            &self.name,
            &self.causes,
        )
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn json_path_to_pointer(path: &str) -> Option<String> {
    let rest = path.strip_prefix('.')?;
    if rest.is_empty() || rest.contains('[') {
        return None;
    }
    Some(format!("/{}", rest.replace('.', "/")))
}

/// Check a CRD and build the type it defines; 422 Invalid with every cause otherwise.
pub fn resource_type(crd: &Value) -> Result<ResourceType, ApiError> {
    let name = str_at(crd, "/metadata/name").unwrap_or("").to_string();
    let mut causes = Causes {
        name: name.clone(),
        causes: Vec::new(),
    };
    let group = str_at(crd, "/spec/group").unwrap_or("");
    if group.is_empty() {
        causes.push("spec.group", "FieldValueRequired", "Required value".into());
    } else if !valid_object_name(group) || !group.contains('.') {
        causes.push(
            "spec.group",
            "FieldValueInvalid",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        );
    }
    let plural = str_at(crd, "/spec/names/plural").unwrap_or("");
    if plural.is_empty() {
        causes.push(
            "spec.names.plural",
            "FieldValueRequired",
            "Required value".into(),
        );
    } else if !valid_dns_label(plural) {
        causes.push(
            "spec.names.plural",
            "FieldValueInvalid",
            format!("Invalid value: \"{plural}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
        );
    }
    let kind = str_at(crd, "/spec/names/kind").unwrap_or("");
    if kind.is_empty() {
        causes.push(
            "spec.names.kind",
            "FieldValueRequired",
            "Required value".into(),
        );
    }
    let singular = str_at(crd, "/spec/names/singular")
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = str_at(crd, "/spec/names/listKind")
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        );
    }
    let list_of = |pointer: &str, field: &str, causes: &mut Causes| -> Vec<String> {
        let mut out = Vec::new();
        for (i, v) in crd
            .pointer(pointer)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            match v.as_str() {
                Some(s) if valid_dns_label(s) => out.push(s.to_string()),
                _ => causes.push(
                    &format!("{field}[{i}]"),
                    "FieldValueInvalid",
                    format!("Invalid value: {v}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
                ),
            }
        }
        out
    };
    let short_names = list_of(
        "/spec/names/shortNames",
        "spec.names.shortNames",
        &mut causes,
    );
    let categories = list_of(
        "/spec/names/categories",
        "spec.names.categories",
        &mut causes,
    );
    let namespaced = match str_at(crd, "/spec/scope") {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            causes.push(
                "spec.scope",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: \"{}\": supported values: \"Cluster\", \"Namespaced\"",
                    other.unwrap_or("")
                ),
            );
            true
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(
            "spec.versions",
            "FieldValueInvalid",
            "Invalid value: null: must have exactly one version marked as storage version".into(),
        );
    }
    let mut served = Vec::new();
    let mut storage: Vec<&Value> = Vec::new();
    let mut schemas = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v.get("name").and_then(Value::as_str).unwrap_or("");
        if !valid_dns_label(vname) {
            causes.push(
                &format!("spec.versions[{i}].name"),
                "FieldValueInvalid",
                format!("Invalid value: \"{vname}\": a DNS-1035 label must consist of lower case alphanumeric characters or '-'"),
            );
        }
        match v.pointer("/schema/openAPIV3Schema") {
            Some(s) if s.is_object() => schemas.push((vname.to_string(), Arc::new(s.clone()))),
            _ => causes.push(
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "FieldValueRequired",
                "Required value: schemas are required".into(),
            ),
        }
        if v.get("served").and_then(Value::as_bool).unwrap_or(false) {
            served.push(vname.to_string());
        }
        if v.get("storage").and_then(Value::as_bool).unwrap_or(false) {
            storage.push(v);
        }
    }
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(
            "spec.versions",
            "FieldValueInvalid",
            "Invalid value: \"...\": must have exactly one version marked as storage version"
                .into(),
        );
    }
    let mut scale = None;
    let mut status = StatusRule::None;
    if let Some(sv) = storage.first() {
        if sv
            .pointer("/subresources/status")
            .is_some_and(Value::is_object)
        {
            status = StatusRule::Separate;
        }
        if let Some(sc) = sv.pointer("/subresources/scale").filter(|s| s.is_object()) {
            let path = |k: &str| {
                sc.get(k)
                    .and_then(Value::as_str)
                    .and_then(json_path_to_pointer)
            };
            match (path("specReplicasPath"), path("statusReplicasPath")) {
                (Some(spec_replicas), Some(status_replicas)) => {
                    scale = Some(ScalePaths {
                        spec_replicas,
                        status_replicas,
                        selector: path("labelSelectorPath")
                            .map(ScaleSelector::Text)
                            .unwrap_or(ScaleSelector::Absent),
                    });
                }
                _ => causes.push(
                    "spec.versions[0].subresources.scale",
                    "FieldValueInvalid",
                    "Invalid value: \"\": specReplicasPath and statusReplicasPath must be JSON paths starting with '.'"
                        .into(),
                ),
            }
        }
    }
    causes.into_result()?;
    served.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    let storage_version = storage
        .first()
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut rt = ResourceType::new(group, &storage_version, kind, plural, namespaced)
        .with_status(status)
        .with_generation(true)
        .returning_deleted_object(true);
    rt.versions = served;
    rt.singular = singular;
    rt.list_kind = list_kind;
    rt.short_names = short_names;
    rt.categories = categories;
    rt.scale = scale;
    rt.schemas = schemas;
    Ok(rt)
}

/// Whether a CRD change would move its type (group, plural or scope cannot change).
pub fn immutable_change(old: &ResourceType, new: &ResourceType) -> Option<&'static str> {
    if old.group != new.group {
        Some("spec.group")
    } else if old.plural != new.plural {
        Some("spec.names.plural")
    } else if old.namespaced != new.namespaced {
        Some("spec.scope")
    } else {
        None
    }
}

/// The status the CRD controllers maintain. `conflict`: why the names were not accepted.
pub fn status(
    crd: &Value,
    rt: &ResourceType,
    conflict: Option<&str>,
    terminating: bool,
    now: &str,
) -> Value {
    let old = crd.get("status");
    let old_condition = |t: &str| {
        old.and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .cloned()
    };
    let condition = |t: &str, ok: bool, reason: &str, message: &str| {
        let status = if ok { "True" } else { "False" };
        let since = old_condition(t)
            .filter(|c| c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        json!({"type": t, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
    };
    let mut conditions = match conflict {
        None => vec![
            condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
            condition(
                "Established",
                true,
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ],
        Some(why) => vec![
            condition("NamesAccepted", false, "NameConflict", why),
            condition(
                "Established",
                false,
                "NotAccepted",
                "not all names are accepted",
            ),
        ],
    };
    if terminating {
        conditions.push(condition(
            "Terminating",
            true,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ));
    }
    let mut stored: Vec<String> = old
        .and_then(|s| s.get("storedVersions"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if !stored.contains(&rt.version) {
        stored.push(rt.version.clone());
    }
    let mut accepted = json!({
        "plural": rt.plural,
        "singular": rt.singular,
        "kind": rt.kind,
        "listKind": rt.list_kind,
    });
    if let Some(o) = accepted.as_object_mut() {
        if !rt.short_names.is_empty() {
            o.insert("shortNames".into(), json!(rt.short_names));
        }
        if !rt.categories.is_empty() {
            o.insert("categories".into(), json!(rt.categories));
        }
    }
    if conflict.is_some() {
        accepted = json!({"plural": "", "kind": ""});
    }
    json!({"acceptedNames": accepted, "conditions": conditions, "storedVersions": stored})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.org"},
            "spec": {
                "group": "example.org", "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "shortNames": ["gd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}},
                    {"name": "v2beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]
            }
        })
    }

    #[test]
    fn a_crd_defines_its_type() {
        let rt = resource_type(&crd()).unwrap();
        assert_eq!(
            (rt.group.as_str(), rt.plural.as_str(), rt.kind.as_str()),
            ("example.org", "gadgets", "Gadget")
        );
        assert_eq!(rt.version, "v1");
        assert_eq!(rt.versions, ["v1", "v2beta1"]);
        assert_eq!(rt.short_names, ["gd"]);
        assert_eq!(rt.status, StatusRule::Separate);
        assert_eq!(rt.scale.as_ref().unwrap().spec_replicas, "/spec/replicas");
        assert!(rt.custom && rt.generation && rt.list_items_typed());
        let st = status(&crd(), &rt, None, false, "t");
        assert_eq!(st["conditions"][1]["type"], "Established");
        assert_eq!(st["conditions"][1]["status"], "True");
        assert_eq!(st["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn invalid_crds_get_every_cause() {
        let mut bad = crd();
        bad["metadata"]["name"] = json!("wrong");
        bad["spec"]["scope"] = json!("Galaxy");
        bad["spec"]["versions"][1]["storage"] = json!(true);
        bad["spec"]["versions"][0]["schema"] = json!(null);
        let e = resource_type(&bad).unwrap_err();
        assert_eq!(e.code, 422);
        let fields: Vec<&str> = e.details.as_ref().unwrap()["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.scope",
                "spec.versions[0].schema.openAPIV3Schema",
                "spec.versions"
            ]
        );
        assert!(
            e.message.starts_with(
                "CustomResourceDefinition.apiextensions.k8s.io \"wrong\" is invalid: ["
            )
        );
    }
}
