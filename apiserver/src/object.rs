//! Stored objects: pre-serialised JSON bytes plus the metadata selectors need,
//! and the metadata rules applied on create and update.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::resource::ResourceType;
use crate::selector::{valid_label_key, valid_label_value};
use crate::status::ApiError;

/// Key of an object inside one resource type: (namespace, name); namespace is `""` when cluster-scoped.
///
/// Ordered like the real server's etcd keys, so lists and continue tokens are deterministic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// Namespace, `""` for cluster-scoped objects.
    pub namespace: Arc<str>,
    /// Object name.
    pub name: Arc<str>,
}

impl ObjKey {
    /// Build a key.
    pub fn new(namespace: &str, name: &str) -> Self {
        ObjKey {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }
}

/// One stored object version. Immutable and shared (`Arc`) between the object map,
/// the history ring and every watcher, so fan-out never re-serialises.
#[derive(Debug)]
pub struct ObjectRecord {
    /// Namespace and name.
    pub key: ObjKey,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` of this version.
    pub rv: u64,
    /// `metadata.labels`, parsed for selectors.
    pub labels: BTreeMap<String, String>,
    /// The full object as JSON, `resourceVersion` included.
    pub json: Bytes,
}

impl ObjectRecord {
    /// Build a record from a complete object (metadata already filled in).
    pub fn from_value(key: ObjKey, value: &Value) -> Result<Self, ApiError> {
        let meta = value.get("metadata");
        let uid = meta
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let rv = meta
            .and_then(|m| m.get("resourceVersion"))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let labels = labels_of(value)?;
        let json = serde_json::to_vec(value)
            .map_err(|e| ApiError::internal(format!("serialising object: {e}")))?;
        Ok(ObjectRecord {
            key,
            uid,
            rv,
            labels,
            json: Bytes::from(json),
        })
    }

    /// Parse the stored JSON back into a value; an error (never a `null`
    /// object) if it does not read back.
    pub fn parsed(&self) -> Result<Value, ApiError> {
        serde_json::from_slice(&self.json).map_err(|e| {
            ApiError::internal(format!(
                "stored object {} does not read back: {e}",
                self.key.name
            ))
        })
    }

    /// [`parsed`](Self::parsed), for reads that have no error to report
    /// (what is stored was checked to read back when it was written).
    pub fn to_value(&self) -> Value {
        self.parsed().unwrap_or_else(|e| {
            tracing::error!(message = %e.message, "stored object does not read back");
            Value::Null
        })
    }

    /// A copy of this object stamped with another resourceVersion (used for DELETED events).
    pub fn restamped(&self, rv: u64) -> Result<Self, ApiError> {
        let mut v = self.parsed()?;
        set_resource_version(&mut v, rv);
        Self::from_value(self.key.clone(), &v)
    }
}

/// Read `metadata.labels`; non-string values are a bad request (the real decoder rejects them).
pub fn labels_of(value: &Value) -> Result<BTreeMap<String, String>, ApiError> {
    let mut out = BTreeMap::new();
    match value.get("metadata").and_then(|m| m.get("labels")) {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                match v {
                    Value::String(s) => {
                        out.insert(k.clone(), s.clone());
                    }
                    Value::Null => {}
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "metadata.labels.{k}: expected string, got {v}"
                        )));
                    }
                }
            }
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "metadata.labels: expected map of strings, got {other}"
            )));
        }
    }
    Ok(out)
}

/// Set `metadata.resourceVersion` (as a string, like the real server).
pub fn set_resource_version(value: &mut Value, rv: u64) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// `metadata.resourceVersion` as a number: `Ok(None)` when absent or empty.
pub fn resource_version_of(value: &Value) -> Result<Option<u64>, ApiError> {
    match value.get("metadata").and_then(|m| m.get("resourceVersion")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "metadata.resourceVersion: Invalid value: \"{s}\": must be a number"
            ))
        }),
        Some(other) => Err(ApiError::bad_request(format!(
            "metadata.resourceVersion: expected string, got {other}"
        ))),
    }
}

fn str_field<'a>(meta: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, ApiError> {
    match meta.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::bad_request(format!(
            "metadata.{field}: expected string, got {other}"
        ))),
    }
}

/// Whether `name` is a lowercase RFC 1123 subdomain (what most kinds require).
pub fn valid_object_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// The checks every write body goes through: a JSON object of the right kind and apiVersion,
/// with an object `metadata`. Missing `kind`/`apiVersion` are filled in.
pub fn check_body(rt: &ResourceType, value: &mut Value) -> Result<(), ApiError> {
    let api_version = rt.api_version();
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "the body of the request was in an unknown format: expected a JSON object for {}",
            rt.kind
        )));
    };
    match obj.get("kind") {
        None | Some(Value::Null) => {
            obj.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        Some(Value::String(k)) if *k == rt.kind => {}
        Some(Value::String(k)) if k.is_empty() => {
            obj.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        Some(other) => {
            let shown = other
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| other.to_string());
            return Err(ApiError::bad_request(format!(
                "{shown} in version \"{}\" cannot be handled as a {}: the kind in the data ({shown}) does not match the expected kind ({})",
                rt.version, rt.kind, rt.kind
            )));
        }
    }
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {
            obj.insert("apiVersion".into(), Value::String(api_version));
        }
        Some(Value::String(v)) if *v == api_version => {}
        Some(Value::String(v)) if v.is_empty() => {
            obj.insert("apiVersion".into(), Value::String(api_version));
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({api_version})",
                other
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string())
            )));
        }
    }
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
    let body_ns = str_field(meta, "namespace")?.map(str::to_string);
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
    if !valid_object_name(&ns) || ns.contains('.') {
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
    if let Some(name) = str_field(meta, "name")? {
        return Ok(name.to_string());
    }
    if let Some(prefix) = str_field(meta, "generateName")? {
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
        Some(meta) => Ok(str_field(meta, "name")?.map(str::to_string)),
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

/// Current time as the real server formats `creationTimestamp` (RFC 3339, seconds, UTC).
pub fn now_timestamp() -> String {
    let now = jiff::Timestamp::now();
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Fill the server-owned metadata of a new object.
pub fn stamp_new(value: &mut Value, rv: u64) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        meta.insert("creationTimestamp".into(), Value::String(now_timestamp()));
        meta.insert("generation".into(), Value::from(1u64));
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
}

/// The object has `metadata.finalizers`: a delete only marks it.
pub fn has_finalizers(value: &Value) -> bool {
    value
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// `metadata.finalizers` of `value`, as strings.
pub fn finalizers(value: &Value) -> Vec<&str> {
    value
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The object was asked to be deleted and waits for its finalizers.
pub fn deletion_requested(value: &Value) -> bool {
    value
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// Marks an object with finalizers as being deleted, as the real server
/// does instead of removing it: `deletionTimestamp` now, grace period 0.
pub fn mark_for_deletion(value: &mut Value) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("deletionTimestamp".into(), Value::String(now_timestamp()));
        meta.insert("deletionGracePeriodSeconds".into(), Value::from(0u64));
    }
}

/// Everything but `metadata` and `status`: a change here bumps `generation`.
fn spec_part(value: &Value) -> Map<String, Value> {
    value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Carry server-owned metadata from the old version into an update; returns whether
/// anything changed at all (a no-op update writes nothing, like the real server).
pub fn carry_over_for_update(old: &Value, new: &mut Value) -> bool {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let generation = old_meta
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let spec_changed = spec_part(old) != spec_part(new);
    if let (Some(old_meta), Some(meta)) = (
        old_meta,
        new.get_mut("metadata").and_then(Value::as_object_mut),
    ) {
        // Server-owned; `deletionTimestamp` cannot be set or cleared by an update.
        for field in [
            "uid",
            "creationTimestamp",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old_meta.get(field) {
                Some(v) => {
                    meta.insert(field.into(), v.clone());
                }
                None => {
                    meta.remove(field);
                }
            }
        }
        meta.insert(
            "generation".into(),
            Value::from(if spec_changed {
                generation + 1
            } else {
                generation
            }),
        );
        // Drop explicit nulls so a merge-style body does not leave `null` fields behind.
        meta.retain(|_, v| !v.is_null());
    }
    old != new
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> ResourceType {
        ResourceType::new("", "v1", "ConfigMap", "configmaps", true)
    }

    #[test]
    fn check_body_rejects_wrong_kind_and_fills_missing() {
        let rt = ResourceType::new("", "v1", "Secret", "secrets", true);
        let mut v = json!({"kind": "ConfigMap", "metadata": {"name": "a"}});
        assert_eq!(check_body(&rt, &mut v).unwrap_err().code, 400);
        let mut v = json!({"metadata": {"name": "a"}});
        check_body(&rt, &mut v).unwrap();
        assert_eq!(v["kind"], "Secret");
        assert_eq!(v["apiVersion"], "v1");
        let mut v = json!([1]);
        assert_eq!(check_body(&rt, &mut v).unwrap_err().code, 400);
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

    #[test]
    fn update_carry_over_and_generation() {
        let old = json!({"metadata": {"name": "a", "uid": "u", "generation": 3, "resourceVersion": "7", "creationTimestamp": "t"}, "data": {"k": "v"}});
        let mut same =
            json!({"metadata": {"name": "a", "resourceVersion": "7"}, "data": {"k": "v"}});
        assert!(!carry_over_for_update(&old, &mut same));
        let mut changed = json!({"metadata": {"name": "a"}, "data": {"k": "w"}});
        assert!(carry_over_for_update(&old, &mut changed));
        assert_eq!(changed["metadata"]["generation"], 4);
        assert_eq!(changed["metadata"]["uid"], "u");
    }
}
