//! The `scale` subresource: an `autoscaling/v1 Scale` view of an object's replica count
//! (`spec.replicas` of Deployments, ReplicaSets and StatefulSets; a CRD's paths).

use serde_json::{Map, Value, json};

use crate::resource::{ResourceType, ScalePaths, ScaleSelector};
use crate::status::ApiError;

/// A label selector object (`matchLabels`, `matchExpressions`) as its string form.
pub fn selector_string(sel: &Value) -> String {
    let mut parts: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let text = match e.get("operator").and_then(Value::as_str) {
            Some("In") => format!("{key} in ({})", values.join(",")),
            Some("NotIn") => format!("{key} notin ({})", values.join(",")),
            Some("Exists") => key.to_string(),
            Some("DoesNotExist") => format!("!{key}"),
            _ => continue,
        };
        parts.push((key.to_string(), text));
    }
    parts.sort();
    parts
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

fn replicas_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// The Scale of an object.
pub fn to_scale(paths: &ScalePaths, obj: &Value) -> Value {
    let meta = obj.get("metadata");
    let mut metadata = Map::new();
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.and_then(|m| m.get(f)) {
            metadata.insert(f.into(), v.clone());
        }
    }
    let mut status = json!({"replicas": replicas_at(obj, &paths.status_replicas)});
    let selector = match &paths.selector {
        ScaleSelector::LabelSelector(p) => obj.pointer(p).map(selector_string),
        ScaleSelector::Text(p) => obj.pointer(p).and_then(Value::as_str).map(str::to_string),
        ScaleSelector::Absent => None,
    };
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = json!(s);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas_at(obj, &paths.spec_replicas)},
        "status": status,
    })
}

fn set_at(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert(part.to_string(), value);
            return;
        }
        cur = map
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Write a Scale's `spec.replicas` into the object; its `metadata.resourceVersion`, if
/// any, becomes the write's precondition. 422 for a negative or non-integer count.
pub fn apply_scale(paths: &ScalePaths, mut obj: Value, scale: &Value) -> Result<Value, ApiError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let replicas = scale.pointer("/spec/replicas");
    let n = match replicas {
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::invalid(
                "Scale.autoscaling",
                &name,
                "spec.replicas",
                "FieldValueInvalid",
                &format!("Invalid value: {v}: must be an integer"),
            )
        })?,
        None => 0,
    };
    if n < 0 {
        return Err(ApiError::invalid(
            "Scale.autoscaling",
            &name,
            "spec.replicas",
            "FieldValueInvalid",
            &format!("Invalid value: {n}: must be greater than or equal to 0"),
        ));
    }
    set_at(&mut obj, &paths.spec_replicas, json!(n));
    match scale
        .pointer("/metadata/resourceVersion")
        .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    {
        Some(rv) => set_at(&mut obj, "/metadata/resourceVersion", rv.clone()),
        None => {
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
        }
    }
    Ok(obj)
}

/// Built-in workloads get `spec.replicas: 1` when a create leaves it out (the real
/// server's defaulting, which their Scale reads).
pub fn default_replicas(rt: &ResourceType, obj: &mut Value) {
    if rt.custom {
        return;
    }
    if let Some(paths) = &rt.scale
        && obj.pointer(&paths.spec_replicas).is_none()
        && obj.get("spec").is_some_and(Value::is_object)
    {
        set_at(obj, &paths.spec_replicas, json!(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_reads_and_writes_replicas() {
        let paths = ScalePaths::workload();
        let deploy = json!({"metadata": {"name": "d", "namespace": "ns", "resourceVersion": "4", "uid": "u"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "tier": "a"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["p", "q"]}]}},
            "status": {"replicas": 1}});
        let scale = to_scale(&paths, &deploy);
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(scale["status"]["replicas"], 1);
        assert_eq!(scale["status"]["selector"], "app=web,env in (p,q),tier=a");
        assert_eq!(scale["metadata"]["resourceVersion"], "4");
        let mut want = scale.clone();
        want["spec"]["replicas"] = json!(5);
        let out = apply_scale(&paths, deploy.clone(), &want).unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
        assert_eq!(out["metadata"]["resourceVersion"], "4");
        want["spec"]["replicas"] = json!(-1);
        assert_eq!(apply_scale(&paths, deploy, &want).unwrap_err().code, 422);
    }
}
