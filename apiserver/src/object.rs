//! Stored objects: pre-serialised JSON bytes plus what selectors, lists and the garbage
//! collector need, and the metadata rules applied on create, update and delete.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Map, Value};

pub use crate::key::ObjKey;
use crate::resource::{ResourceType, StatusRule};
use crate::status::ApiError;

/// One entry of `metadata.ownerReferences`, as the garbage collector reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's name (in the dependent's namespace when the owner is namespaced).
    pub name: String,
    /// The owner's uid: an owner with this name but another uid is gone.
    pub uid: String,
    /// `blockOwnerDeletion`: a foreground delete of the owner waits for this dependent.
    pub block_owner_deletion: bool,
}

/// One stored object version. Immutable and shared (`Arc`) between the object map,
/// the history ring and every watcher, so fan-out never re-serialises.
///
/// `json` is laid out as a real server writes objects: `kind`, `apiVersion`, `metadata`
/// first. That lets a list drop `apiVersion`/`kind` from items, a multi-version custom
/// resource rewrite `apiVersion`, and a metadata-only answer take `metadata`, all by
/// slicing the bytes.
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
    /// Layout of `json`: see [`Layout`].
    pub layout: Layout,
    /// `metadata.ownerReferences` (empty for most objects).
    pub owners: Vec<OwnerRef>,
}

/// Where the parts of a record's JSON are. Invariant: when `body_start > 0`,
/// `json[..body_start]` is exactly `{"kind":K,"apiVersion":V,`; when `metadata.1 > 0`,
/// `json[metadata.0..metadata.1]` is the `metadata` object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the first field after `kind` and `apiVersion` (0: not laid out so).
    pub body_start: u32,
    /// Byte range of the `metadata` value (`(0, 0)`: not found).
    pub metadata: (u32, u32),
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
        let json = encode_ordered(value)?;
        Ok(ObjectRecord {
            key,
            uid,
            rv,
            labels,
            layout: Layout::of(&json),
            owners: owner_refs(value),
            json: Bytes::from(json),
        })
    }

    /// A record from JSON the caller rendered (the fast seeding path): `json` must be a
    /// complete object for `key` with these labels and uid.
    pub fn from_rendered(
        key: ObjKey,
        uid: String,
        rv: u64,
        labels: BTreeMap<String, String>,
        json: Vec<u8>,
    ) -> Self {
        ObjectRecord {
            key,
            uid,
            rv,
            labels,
            layout: Layout::of(&json),
            owners: Vec::new(),
            json: Bytes::from(json),
        }
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

    /// The fields after `kind` and `apiVersion` (`None` when the JSON is not laid out so).
    pub fn body_after_type_meta(&self) -> Option<&[u8]> {
        let start = self.layout.body_start as usize;
        (start > 0).then(|| self.json.get(start..)).flatten()
    }

    /// The `metadata` object's bytes, if found.
    pub fn metadata_json(&self) -> Option<&[u8]> {
        let (a, b) = self.layout.metadata;
        (b > a)
            .then(|| self.json.get(a as usize..b as usize))
            .flatten()
    }
}

impl Layout {
    /// Find `kind`/`apiVersion`/`metadata` at the front of an object's JSON.
    pub fn of(json: &[u8]) -> Layout {
        let mut layout = Layout::default();
        let mut pos = 1;
        if json.first() != Some(&b'{') {
            return layout;
        }
        for field in [&b"\"kind\":"[..], &b"\"apiVersion\":"[..]] {
            if !json[pos..].starts_with(field) {
                return layout;
            }
            pos += field.len();
            let Some(end) = string_end(json, pos) else {
                return layout;
            };
            pos = end;
            if json.get(pos) != Some(&b',') {
                return layout;
            }
            pos += 1;
        }
        layout.body_start = pos as u32;
        let field = b"\"metadata\":";
        if json[pos..].starts_with(field) {
            let start = pos + field.len();
            if let Some(end) = value_end(json, start) {
                layout.metadata = (start as u32, end as u32);
            }
        }
        layout
    }
}

/// End (exclusive) of the JSON string starting at `start` (which must be `"`).
fn string_end(json: &[u8], start: usize) -> Option<usize> {
    if json.get(start) != Some(&b'"') {
        return None;
    }
    let mut i = start + 1;
    while i < json.len() {
        match json[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// End (exclusive) of the JSON object starting at `start` (which must be `{`).
fn value_end(json: &[u8], start: usize) -> Option<usize> {
    if json.get(start) != Some(&b'{') {
        return None;
    }
    let mut depth = 0usize;
    let mut i = start;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i = string_end(json, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Serialise an object as a real server orders it: `kind`, `apiVersion`, `metadata`, then
/// the other fields.
fn encode_ordered(value: &Value) -> Result<Vec<u8>, ApiError> {
    let err = |e: serde_json::Error| ApiError::internal(format!("serialising object: {e}"));
    let Some(obj) = value.as_object() else {
        return serde_json::to_vec(value).map_err(err);
    };
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    let front = ["kind", "apiVersion", "metadata"];
    let fields = front
        .iter()
        .filter_map(|k| obj.get_key_value(*k))
        .chain(obj.iter().filter(|(k, _)| !front.contains(&k.as_str())));
    for (i, (k, v)) in fields.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, k).map_err(err)?;
        out.push(b':');
        serde_json::to_writer(&mut out, v).map_err(err)?;
    }
    out.push(b'}');
    Ok(out)
}

fn owner_refs(value: &Value) -> Vec<OwnerRef> {
    let Some(refs) = value
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let s = |r: &Value, f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    refs.iter()
        .map(|r| OwnerRef {
            api_version: s(r, "apiVersion"),
            kind: s(r, "kind"),
            name: s(r, "name"),
            uid: s(r, "uid"),
            block_owner_deletion: r
                .get("blockOwnerDeletion")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
        .collect()
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

/// Current time as the real server formats timestamps (RFC 3339, seconds, UTC).
pub fn now_timestamp() -> String {
    timestamp_after(0)
}

/// The time `secs` seconds from now, formatted like [`now_timestamp`].
pub fn timestamp_after(secs: i64) -> String {
    let now = jiff::Timestamp::now();
    let t = now
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or(now);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Fill the server-owned metadata of a new object; `generation: 1` only for kinds that
/// have one, and no `status` for kinds whose status is a separate subresource.
pub fn stamp_new(rt: &ResourceType, value: &mut Value, rv: u64) {
    if rt.status == StatusRule::Separate
        && let Some(obj) = value.as_object_mut()
    {
        obj.remove("status");
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        meta.insert("creationTimestamp".into(), Value::String(now_timestamp()));
        if rt.generation {
            meta.insert("generation".into(), Value::from(1u64));
        } else {
            meta.remove("generation");
        }
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

/// Add a finalizer if it is not there yet.
pub fn add_finalizer(value: &mut Value, finalizer: &str) {
    if finalizers(value).contains(&finalizer) {
        return;
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        let list = meta
            .entry("finalizers")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !list.is_array() {
            *list = Value::Array(Vec::new());
        }
        if let Some(a) = list.as_array_mut() {
            a.push(Value::String(finalizer.to_string()));
        }
    }
}

/// Remove a finalizer; whether it was there.
pub fn remove_finalizer(value: &mut Value, finalizer: &str) -> bool {
    let Some(list) = value
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = list.len();
    list.retain(|f| f.as_str() != Some(finalizer));
    let removed = list.len() != before;
    if list.is_empty()
        && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("finalizers");
    }
    removed
}

/// The object was asked to be deleted and waits for its finalizers.
pub fn deletion_requested(value: &Value) -> bool {
    value
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// Marks an object as being deleted, as the real server does instead of removing it when
/// finalizers or a grace period hold the delete: `deletionTimestamp` now plus the grace
/// period, `deletionGracePeriodSeconds` the grace period.
pub fn mark_for_deletion(value: &mut Value, grace_seconds: u64) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        let grace = i64::try_from(grace_seconds).unwrap_or(i64::MAX / 2);
        meta.insert(
            "deletionTimestamp".into(),
            Value::String(timestamp_after(grace)),
        );
        meta.insert(
            "deletionGracePeriodSeconds".into(),
            Value::from(grace_seconds),
        );
    }
}

/// What bumps `generation`: everything but `metadata` (and `status` when it is a subresource).
fn generation_part<'a>(rt: &ResourceType, value: &'a Value) -> Vec<(&'a String, &'a Value)> {
    let skip_status = rt.status != StatusRule::None;
    value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    k.as_str() != "metadata" && !(skip_status && k.as_str() == "status")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Carry server-owned metadata from the old version into an update; returns whether
/// anything changed at all (a no-op update writes nothing, like the real server).
pub fn carry_over_for_update(rt: &ResourceType, old: &Value, new: &mut Value) -> bool {
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let generation = old_meta
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let spec_changed = rt.generation && generation_part(rt, old) != generation_part(rt, new);
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
        if rt.generation {
            meta.insert(
                "generation".into(),
                Value::from(if spec_changed {
                    generation + 1
                } else {
                    generation
                }),
            );
        } else {
            meta.remove("generation");
        }
        // Drop explicit nulls so a merge-style body does not leave `null` fields behind.
        meta.retain(|_, v| !v.is_null());
    }
    old != new
}

/// Keep `status` as it was (the main endpoint of a type whose status is a subresource).
pub fn keep_status(old: &Value, new: &mut Value) {
    if let Some(obj) = new.as_object_mut() {
        match old.get("status") {
            Some(s) => {
                obj.insert("status".into(), s.clone());
            }
            None => {
                obj.remove("status");
            }
        }
    }
}

/// The `/status` endpoint: the old object with only `status` taken from `new`.
pub fn only_status(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    if let Some(obj) = out.as_object_mut() {
        match new.get("status") {
            Some(s) if !s.is_null() => {
                obj.insert("status".into(), s.clone());
            }
            _ => {
                obj.remove("status");
            }
        }
    }
    // The body's resourceVersion is the precondition of the write.
    if let (Some(meta), Some(rv)) = (
        out.get_mut("metadata").and_then(Value::as_object_mut),
        new.pointer("/metadata/resourceVersion"),
    ) {
        meta.insert("resourceVersion".into(), rv.clone());
    }
    out
}

/// A string field of `metadata`, `None` when absent or empty.
pub fn meta_str<'a>(
    meta: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match meta.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::bad_request(format!(
            "metadata.{field}: expected string, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> ResourceType {
        ResourceType::new("", "v1", "ConfigMap", "configmaps", true).builtin()
    }

    #[test]
    fn update_carry_over_and_generation() {
        let deploy = ResourceType::new("apps", "v1", "Deployment", "deployments", true)
            .builtin()
            .with_generation(true)
            .with_status(StatusRule::Separate);
        let old = json!({"metadata": {"name": "a", "uid": "u", "generation": 3, "resourceVersion": "7", "creationTimestamp": "t"}, "spec": {"k": "v"}});
        let mut same =
            json!({"metadata": {"name": "a", "resourceVersion": "7"}, "spec": {"k": "v"}});
        assert!(!carry_over_for_update(&deploy, &old, &mut same));
        let mut changed = json!({"metadata": {"name": "a"}, "spec": {"k": "w"}});
        assert!(carry_over_for_update(&deploy, &old, &mut changed));
        assert_eq!(changed["metadata"]["generation"], 4);
        assert_eq!(changed["metadata"]["uid"], "u");
        // a status change does not bump it
        let mut status = json!({"metadata": {"name": "a"}, "spec": {"k": "v"}, "status": {"x": 1}});
        assert!(carry_over_for_update(&deploy, &old, &mut status));
        assert_eq!(status["metadata"]["generation"], 3);
        // kinds without generation never get one
        let mut data = json!({"metadata": {"name": "a", "generation": 9}, "data": {"k": "w"}});
        assert!(carry_over_for_update(&cm(), &old, &mut data));
        assert!(data["metadata"].get("generation").is_none());
    }

    #[test]
    fn records_are_laid_out_like_a_real_servers_objects() {
        let v = json!({"data": {"k": "v"}, "metadata": {"name": "a", "labels": {"x": "}\"{"}}, "apiVersion": "v1", "kind": "ConfigMap"});
        let rec = ObjectRecord::from_value(ObjKey::new("ns", "a"), &v).unwrap();
        let text = std::str::from_utf8(&rec.json).unwrap();
        assert!(
            text.starts_with(r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":"#),
            "{text}"
        );
        let body = std::str::from_utf8(rec.body_after_type_meta().unwrap()).unwrap();
        assert!(body.starts_with(r#""metadata":"#));
        let meta: Value = serde_json::from_slice(rec.metadata_json().unwrap()).unwrap();
        assert_eq!(meta, v["metadata"]);
        assert_eq!(rec.parsed().unwrap(), v);
        // Not laid out: no slices, never a wrong one.
        let odd = Layout::of(br#"{"metadata":{},"kind":"X"}"#);
        assert_eq!(odd, Layout::default());
        assert_eq!(
            Layout::of(br#"{"kind":"X","apiVersion":"v1"}"#).body_start,
            0
        );
    }

    #[test]
    fn finalizers_add_and_remove() {
        let mut v = json!({"metadata": {"name": "a"}});
        add_finalizer(&mut v, "f");
        add_finalizer(&mut v, "f");
        assert_eq!(finalizers(&v), ["f"]);
        assert!(remove_finalizer(&mut v, "f"));
        assert!(v["metadata"].get("finalizers").is_none());
        assert!(!remove_finalizer(&mut v, "f"));
    }

    #[test]
    fn status_subresource_views() {
        let old = json!({"metadata": {"name": "a", "resourceVersion": "3"}, "spec": {"r": 1}, "status": {"s": 1}});
        let body = json!({"metadata": {"name": "a", "resourceVersion": "2", "labels": {"x": "y"}}, "spec": {"r": 5}, "status": {"s": 2}});
        let st = only_status(&old, &body);
        assert_eq!(st["spec"]["r"], 1);
        assert_eq!(st["status"]["s"], 2);
        assert!(st["metadata"].get("labels").is_none());
        assert_eq!(st["metadata"]["resourceVersion"], "2");
        let mut main = body.clone();
        keep_status(&old, &mut main);
        assert_eq!(main["status"]["s"], 1);
    }
}
