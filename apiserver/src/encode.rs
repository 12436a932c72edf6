//! Wire encoding of watch events and list bodies, straight from pre-serialised object bytes:
//! objects as stored, without `apiVersion`/`kind` (items of built-in lists), at another
//! served version (custom resources), or as `PartialObjectMetadata`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use serde_json::{Value, json};

use crate::object::ObjectRecord;

/// Bytes per chunk when streaming lists (and the batch target for watch streams).
pub const CHUNK_BYTES: usize = 64 * 1024;

/// `apiVersion` of `PartialObjectMetadata` and `PartialObjectMetadataList`.
pub const META_API_VERSION: &str = "meta.k8s.io/v1";

/// How an object is written into an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectForm {
    /// As stored.
    Full,
    /// Without `apiVersion` and `kind` (items of a built-in type's list, as a real server's).
    NoTypeMeta,
    /// With this `{"kind":K,"apiVersion":V,` in front of the stored fields (a custom
    /// resource read at a version other than its storage version).
    Versioned(Bytes),
    /// `PartialObjectMetadata`: `metadata` only.
    Metadata,
}

impl ObjectForm {
    /// The form of an object read at `api_version` when it is stored with `kind` at
    /// `storage_api_version`.
    pub fn at_version(kind: &str, storage_api_version: &str, api_version: &str) -> ObjectForm {
        if api_version == storage_api_version {
            return ObjectForm::Full;
        }
        ObjectForm::Versioned(Bytes::from(format!(
            "{{\"kind\":{},\"apiVersion\":{},",
            Value::String(kind.to_string()),
            Value::String(api_version.to_string())
        )))
    }

    /// Append the object in this form.
    pub fn write(&self, buf: &mut BytesMut, rec: &ObjectRecord) {
        match self {
            ObjectForm::Full => buf.put_slice(&rec.json),
            ObjectForm::NoTypeMeta => match rec.body_after_type_meta() {
                Some(body) => {
                    buf.put_u8(b'{');
                    buf.put_slice(body);
                }
                None => buf.put_slice(&rec.json),
            },
            ObjectForm::Versioned(prefix) => match rec.body_after_type_meta() {
                Some(body) => {
                    buf.put_slice(prefix);
                    buf.put_slice(body);
                }
                None => buf.put_slice(&rec.json),
            },
            ObjectForm::Metadata => {
                buf.put_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":");
                match rec.metadata_json() {
                    Some(meta) => buf.put_slice(meta),
                    None => {
                        let meta = rec
                            .parsed()
                            .ok()
                            .and_then(|v| v.get("metadata").cloned())
                            .unwrap_or_else(|| json!({}));
                        buf.put_slice(meta.to_string().as_bytes());
                    }
                }
                buf.put_u8(b'}');
            }
        }
    }

    /// The object in this form, as bytes.
    pub fn bytes(&self, rec: &ObjectRecord) -> Bytes {
        if *self == ObjectForm::Full {
            return rec.json.clone();
        }
        let mut buf = BytesMut::with_capacity(rec.json.len() + 64);
        self.write(&mut buf, rec);
        buf.freeze()
    }
}

/// Append one watch event line: `{"type":"ADDED","object":{...}}\n`.
pub fn push_event(buf: &mut BytesMut, event_type: &str, object_json: &[u8]) {
    buf.reserve(object_json.len() + 32);
    buf.put_slice(b"{\"type\":\"");
    buf.put_slice(event_type.as_bytes());
    buf.put_slice(b"\",\"object\":");
    buf.put_slice(object_json);
    buf.put_slice(b"}\n");
}

/// A BOOKMARK line carrying only `metadata.resourceVersion` (and the initial-events-end
/// annotation at the end of a streaming list).
pub fn bookmark_line(kind: &str, api_version: &str, rv: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
    let mut buf = BytesMut::new();
    push_event(&mut buf, "BOOKMARK", obj.to_string().as_bytes());
    buf.freeze()
}

/// An ERROR line whose object is a `Status`.
pub fn error_line(status: &Value) -> Bytes {
    let mut buf = BytesMut::new();
    push_event(&mut buf, "ERROR", status.to_string().as_bytes());
    buf.freeze()
}

/// A list body streamed in ~64 KiB chunks: metadata first, then items (each in `form`),
/// never one giant string.
pub fn list_body(
    list_kind: &str,
    api_version: &str,
    rv: u64,
    continue_token: Option<&str>,
    remaining: Option<u64>,
    items: Vec<Arc<ObjectRecord>>,
    form: ObjectForm,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        Value::String(list_kind.to_string()),
        Value::String(api_version.to_string()),
        metadata
    );
    let state = ListChunks {
        head: Some(Bytes::from(head)),
        items,
        next: 0,
        done: false,
        form,
    };
    futures::stream::iter(state.map(Ok::<Bytes, Infallible>))
}

struct ListChunks {
    head: Option<Bytes>,
    items: Vec<Arc<ObjectRecord>>,
    next: usize,
    done: bool,
    form: ObjectForm,
}

impl Iterator for ListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut buf = BytesMut::with_capacity(CHUNK_BYTES + 4096);
        if let Some(h) = self.head.take() {
            buf.put_slice(&h);
        }
        while self.next < self.items.len() && buf.len() < CHUNK_BYTES {
            if self.next > 0 {
                buf.put_u8(b',');
            }
            self.form.write(&mut buf, &self.items[self.next]);
            self.next += 1;
        }
        if self.next >= self.items.len() {
            buf.put_slice(b"]}\n");
            self.done = true;
            self.items = Vec::new();
        }
        Some(buf.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::ObjKey;
    use futures::StreamExt;

    fn rec(name: &str) -> Arc<ObjectRecord> {
        let v = json!({"metadata": {"name": name}});
        Arc::new(ObjectRecord::from_value(ObjKey::new("ns", name), &v).unwrap())
    }

    #[tokio::test]
    async fn list_body_is_valid_json_in_several_chunks() {
        let items: Vec<_> = (0..5000)
            .map(|i| rec(&format!("object-{i:05}-{}", "x".repeat(40))))
            .collect();
        let chunks: Vec<Bytes> = list_body(
            "ConfigMapList",
            "v1",
            7,
            Some("tok"),
            Some(3),
            items,
            ObjectForm::Full,
        )
        .map(|c| c.unwrap())
        .collect()
        .await;
        assert!(chunks.len() > 2);
        let all: Vec<u8> = chunks.concat();
        let v: Value = serde_json::from_slice(&all).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 5000);
        assert_eq!(v["metadata"]["continue"], "tok");
        assert_eq!(v["metadata"]["remainingItemCount"], 3);
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        let empty: Vec<Bytes> = list_body(
            "ConfigMapList",
            "v1",
            1,
            None,
            None,
            vec![],
            ObjectForm::Full,
        )
        .map(|c| c.unwrap())
        .collect()
        .await;
        let v: Value = serde_json::from_slice(&empty.concat()).unwrap();
        assert_eq!(v["items"], json!([]));
    }

    #[test]
    fn object_forms() {
        let v = json!({"apiVersion": "example.org/v1", "kind": "Foo", "metadata": {"name": "a"}, "spec": {"x": 1}});
        let rec = ObjectRecord::from_value(ObjKey::new("ns", "a"), &v).unwrap();
        let parse = |f: ObjectForm| -> Value { serde_json::from_slice(&f.bytes(&rec)).unwrap() };
        assert_eq!(parse(ObjectForm::Full), v);
        let bare = parse(ObjectForm::NoTypeMeta);
        assert!(bare.get("kind").is_none() && bare.get("apiVersion").is_none());
        assert_eq!(bare["spec"]["x"], 1);
        let v2 = parse(ObjectForm::at_version(
            "Foo",
            "example.org/v1",
            "example.org/v2",
        ));
        assert_eq!(v2["apiVersion"], "example.org/v2");
        assert_eq!(v2["spec"], v["spec"]);
        assert_eq!(ObjectForm::at_version("Foo", "v1", "v1"), ObjectForm::Full);
        let meta = parse(ObjectForm::Metadata);
        assert_eq!(
            meta,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a"}})
        );
    }

    #[test]
    fn bookmark_shape() {
        let b = bookmark_line("ConfigMap", "v1", 12, true);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "12");
        assert_eq!(
            v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
    }
}
