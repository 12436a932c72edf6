//! Decoding of the Kubernetes protobuf envelope for the few built-in kinds kubectl's
//! generators (`kubectl create configmap|secret|namespace`) send as protobuf.
//!
//! Answers are always JSON (kubectl accepts both); other kinds sent as protobuf get 415.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::status::{ApiError, Reason};

/// The content type kubectl uses for protobuf bodies.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Secret {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    r#type: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
    #[prost(bool, optional, tag = "5")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

fn put_str(map: &mut Map<String, Value>, key: &str, value: &Option<String>) {
    if let Some(v) = non_empty(value) {
        map.insert(key.into(), Value::String(v.to_string()));
    }
}

fn string_map(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn bytes_map(m: &BTreeMap<String, Vec<u8>>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(STANDARD.encode(v))))
            .collect(),
    )
}

fn meta_json(meta: Option<&ObjectMeta>) -> Value {
    let mut m = Map::new();
    if let Some(meta) = meta {
        put_str(&mut m, "name", &meta.name);
        put_str(&mut m, "generateName", &meta.generate_name);
        put_str(&mut m, "namespace", &meta.namespace);
        put_str(&mut m, "uid", &meta.uid);
        put_str(&mut m, "resourceVersion", &meta.resource_version);
        if !meta.labels.is_empty() {
            m.insert("labels".into(), string_map(&meta.labels));
        }
        if !meta.annotations.is_empty() {
            m.insert("annotations".into(), string_map(&meta.annotations));
        }
        if !meta.finalizers.is_empty() {
            m.insert("finalizers".into(), json!(meta.finalizers));
        }
        if !meta.owner_references.is_empty() {
            let refs: Vec<Value> = meta
                .owner_references
                .iter()
                .map(|r| {
                    let mut o = Map::new();
                    put_str(&mut o, "apiVersion", &r.api_version);
                    put_str(&mut o, "kind", &r.kind);
                    put_str(&mut o, "name", &r.name);
                    put_str(&mut o, "uid", &r.uid);
                    if let Some(c) = r.controller {
                        o.insert("controller".into(), Value::Bool(c));
                    }
                    if let Some(b) = r.block_owner_deletion {
                        o.insert("blockOwnerDeletion".into(), Value::Bool(b));
                    }
                    Value::Object(o)
                })
                .collect();
            m.insert("ownerReferences".into(), Value::Array(refs));
        }
    }
    Value::Object(m)
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "the body of the request could not be decoded as protobuf: {e}"
    ))
}

/// Decode a protobuf request body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let raw = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s protobuf prefix"))?;
    let unknown = Unknown::decode(raw).map_err(bad)?;
    let tm = unknown.type_meta.unwrap_or_default();
    let kind = non_empty(&tm.kind).unwrap_or_default().to_string();
    let api_version = non_empty(&tm.api_version).unwrap_or_default().to_string();
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => {
            let cm = ConfigMap::decode(unknown.raw.as_slice()).map_err(bad)?;
            let mut o = json!({"metadata": meta_json(cm.metadata.as_ref())});
            if !cm.data.is_empty() {
                o["data"] = string_map(&cm.data);
            }
            if !cm.binary_data.is_empty() {
                o["binaryData"] = bytes_map(&cm.binary_data);
            }
            if let Some(i) = cm.immutable {
                o["immutable"] = json!(i);
            }
            o
        }
        ("v1", "Secret") => {
            let s = Secret::decode(unknown.raw.as_slice()).map_err(bad)?;
            let mut o = json!({"metadata": meta_json(s.metadata.as_ref())});
            if !s.data.is_empty() {
                o["data"] = bytes_map(&s.data);
            }
            if !s.string_data.is_empty() {
                o["stringData"] = string_map(&s.string_data);
            }
            if let Some(t) = non_empty(&s.r#type) {
                o["type"] = json!(t);
            }
            if let Some(i) = s.immutable {
                o["immutable"] = json!(i);
            }
            o
        }
        ("v1", "Namespace") => {
            let ns = Namespace::decode(unknown.raw.as_slice()).map_err(bad)?;
            let mut o = json!({"metadata": meta_json(ns.metadata.as_ref())});
            if let Some(spec) = ns.spec.filter(|s| !s.finalizers.is_empty()) {
                o["spec"] = json!({"finalizers": spec.finalizers});
            }
            o
        }
        _ => {
            return Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "protobuf bodies are supported for v1 ConfigMap, Secret and Namespace only (got {api_version} {kind}); send application/json"
                ),
            ));
        }
    };
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw,
        };
        let mut out = MAGIC.to_vec();
        out.extend(u.encode_to_vec());
        out
    }

    #[test]
    fn decodes_a_configmap_like_kubectl_sends_it() {
        let cm = ConfigMap {
            metadata: Some(ObjectMeta {
                name: Some("cap".into()),
                namespace: Some("default".into()),
                generate_name: Some(String::new()),
                labels: BTreeMap::from([("a".into(), "b".into())]),
                ..Default::default()
            }),
            data: BTreeMap::from([("k".into(), "v".into())]),
            ..Default::default()
        };
        let v = decode(&envelope("ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["metadata"]["name"], "cap");
        assert!(v["metadata"].get("generateName").is_none());
        assert_eq!(v["metadata"]["labels"]["a"], "b");
        assert_eq!(v["data"]["k"], "v");
    }

    #[test]
    fn secrets_are_base64_and_other_kinds_are_415() {
        let s = Secret {
            metadata: Some(ObjectMeta {
                name: Some("s".into()),
                ..Default::default()
            }),
            data: BTreeMap::from([("p".into(), b"q".to_vec())]),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let v = decode(&envelope("Secret", s.encode_to_vec())).unwrap();
        assert_eq!(v["data"]["p"], "cQ==");
        assert_eq!(v["type"], "Opaque");
        assert_eq!(decode(&envelope("Pod", vec![])).unwrap_err().code, 415);
        assert_eq!(decode(b"garbage").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff\xff").unwrap_err().code, 400);
    }
}
