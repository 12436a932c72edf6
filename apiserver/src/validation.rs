//! The checks every write body goes through, worded like the real server's answers:
//! kind and apiVersion, namespace, name (or `generateName`), labels and annotations.

use serde_json::{Map, Value};

use crate::names::{valid_dns_label, valid_label_key, valid_label_value, valid_object_name};
use crate::object::{labels_of, meta_str};
use crate::resource::ResourceType;
use crate::status::ApiError;

/// A JSON object of the right kind and apiVersion (the one of `version`, a served version
/// of `rt`), with an object `metadata`. Missing `kind`/`apiVersion` are filled in; the
/// apiVersion is then set to the storage version's (no conversion beyond that).
pub fn check_body(rt: &ResourceType, version: &str, value: &mut Value) -> Result<(), ApiError> {
    let api_version = rt.api_version_of(version);
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "the body of the request was in an unknown format: expected a JSON object for {}",
            rt.kind
        )));
    };
    let shown = |v: &Value| {
        v.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string())
    };
    match obj.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if *k == rt.kind || k.is_empty() => {}
        Some(other) => {
            let shown = shown(other);
            return Err(ApiError::bad_request(format!(
                "{shown} in version \"{version}\" cannot be handled as a {}: the kind in the data ({shown}) does not match the expected kind ({})",
                rt.kind, rt.kind
            )));
        }
    }
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if *v == api_version || v.is_empty() => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({api_version})",
                shown(other)
            )));
        }
    }
    obj.insert("kind".into(), Value::String(rt.kind.clone()));
    obj.insert("apiVersion".into(), Value::String(rt.api_version()));
    match obj.get("metadata") {
        None | Some(Value::Null) => {
            obj.insert("metadata".into(), Value::Object(Map::new()));
        }
        Some(Value::Object(_)) => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "metadata: expected an object, got {other}"
            )));
        }
    }
    Ok(())
}

/// Resolve and validate the namespace of a body against the request's namespace.
/// Returns the namespace to store under (`""` for cluster-scoped types).
pub fn resolve_namespace(
    rt: &ResourceType,
    value: &mut Value,
    request_namespace: Option<&str>,
) -> Result<String, ApiError> {
    let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(ApiError::bad_request("metadata: expected an object"));
    };
    if !rt.namespaced {
        meta.remove("namespace");
        return Ok(String::new());
    }
    let body_ns = meta_str(meta, "namespace")?.map(str::to_string);
    let ns = match (request_namespace, body_ns) {
        (Some(req), Some(body)) if req != body => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(req), _) => req.to_string(),
        (None, Some(body)) => body,
        (None, None) => "default".to_string(),
    };
    if !valid_dns_label(&ns) {
        return Err(ApiError::invalid(
            &rt.kind,
            "",
            "metadata.namespace",
            "FieldValueInvalid",
            &format!(
                "Invalid value: \"{ns}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
            ),
        ));
    }
    meta.insert("namespace".into(), Value::String(ns.clone()));
    Ok(ns)
}

/// Validate name (already resolved) and labels; 422 Invalid like the real server.
pub fn validate_metadata(rt: &ResourceType, value: &Value, name: &str) -> Result<(), ApiError> {
    if !valid_object_name(name) {
        return Err(ApiError::invalid(
            &rt.kind,
            name,
            "metadata.name",
            "FieldValueInvalid",
            &format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ));
    }
    for (k, v) in labels_of(value)? {
        if !valid_label_key(&k) {
            return Err(ApiError::invalid(
                &rt.kind,
                name,
                "metadata.labels",
                "FieldValueInvalid",
                &format!(
                    "Invalid value: \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.'"
                ),
            ));
        }
        if !valid_label_value(&v) {
            return Err(ApiError::invalid(
                &rt.kind,
                name,
                "metadata.labels",
                "FieldValueInvalid",
                &format!(
                    "Invalid value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"
                ),
            ));
        }
    }
    if let Some(ann) = value.get("metadata").and_then(|m| m.get("annotations"))
        && !ann.is_null()
        && !ann
            .as_object()
            .is_some_and(|m| m.values().all(|v| v.is_string()))
    {
        return Err(ApiError::bad_request(
            "metadata.annotations: expected map of strings",
        ));
    }
    Ok(())
}

/// The name in the body, or one derived from `generateName` (5 random characters, like the real server).
pub fn resolve_name_for_create(rt: &ResourceType, value: &mut Value) -> Result<String, ApiError> {
    let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(ApiError::bad_request("metadata: expected an object"));
    };
    if let Some(name) = meta_str(meta, "name")? {
        return Ok(name.to_string());
    }
    if let Some(prefix) = meta_str(meta, "generateName")? {
        let name = format!("{prefix}{}", random_suffix());
        meta.insert("name".into(), Value::String(name.clone()));
        return Ok(name);
    }
    Err(ApiError::invalid(
        &rt.kind,
        "",
        "metadata.name",
        "FieldValueRequired",
        "Required value: name or generateName is required",
    ))
}

/// The name in the body of an update, if any.
pub fn body_name(value: &Value) -> Result<Option<String>, ApiError> {
    match value.get("metadata").and_then(Value::as_object) {
        Some(meta) => Ok(meta_str(meta, "name")?.map(str::to_string)),
        None => Ok(None),
    }
}

fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> ResourceType {
        ResourceType::new("", "v1", "ConfigMap", "configmaps", true).builtin()
    }

    #[test]
    fn check_body_rejects_wrong_kind_and_fills_missing() {
        let rt = ResourceType::new("", "v1", "Secret", "secrets", true).builtin();
        let mut v = json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        assert_eq!(check_body(&rt, "v1", &mut v).unwrap_err().code, 400);
        let mut v = json!({"metadata": {"name": "a"}});
        check_body(&rt, "v1", &mut v).unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["apiVersion"], "v1");
        let mut v = json!([1]);
        assert_eq!(check_body(&rt, "v1", &mut v).unwrap_err().code, 400);
    }

    #[test]
    fn a_served_version_is_stored_at_the_storage_version() {
        let mut rt = ResourceType::new("example.org", "v1", "Foo", "foos", true);
        rt.versions = vec!["v2".into(), "v1".into()];
        let mut v =
            json!({"apiVersion": "example.org/v2", "kind": "Foo", "metadata": {"name": "a"}});
        check_body(&rt, "v2", &mut v).unwrap();
        assert_eq!(v["apiVersion"], "example.org/v1");
        let mut v = json!({"apiVersion": "example.org/v1", "kind": "Foo", "metadata": {}});
        assert_eq!(check_body(&rt, "v2", &mut v).unwrap_err().code, 400);
    }

    #[test]
    fn names_and_generate_name() {
        let rt = cm();
        let mut v = json!({"metadata": {"generateName": "x-"}});
        let n = resolve_name_for_create(&rt, &mut v).unwrap();
        assert!(n.starts_with("x-") && n.len() == 7);
        let mut v = json!({"metadata": {}});
        let e = resolve_name_for_create(&rt, &mut v).unwrap_err();
        assert_eq!((e.code, e.reason), (422, crate::status::Reason::Invalid));
        assert!(validate_metadata(&rt, &json!({}), "Bad_Name").is_err());
        assert!(
            validate_metadata(&rt, &json!({"metadata": {"labels": {"a": "b c"}}}), "ok").is_err()
        );
    }

    #[test]
    fn namespace_resolution() {
        let rt = cm();
        let mut v = json!({"metadata": {"namespace": "a"}});
        assert_eq!(
            resolve_namespace(&rt, &mut v, Some("b")).unwrap_err().code,
            400
        );
        let mut v = json!({"metadata": {}});
        assert_eq!(resolve_namespace(&rt, &mut v, Some("b")).unwrap(), "b");
        assert_eq!(v["metadata"]["namespace"], "b");
    }
}
