//! Watch lines: an envelope `{"type": ..., "object": ...}`. Servers send
//! `type` first, so the object is decoded straight into `K`, a bookmark
//! into its resourceVersion and annotations, an `ERROR` into a `Status`;
//! an envelope with `object` first still decodes (through a buffered
//! `serde_json::Value`).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor,
};

use super::key::Key;
use super::object::ObjectSeed;
use super::options::DecodeOptions;
use crate::reflector::event::{INITIAL_EVENTS_END, SourceEvent};

/// One decoded watch line.
#[derive(Debug)]
pub enum WatchLine<K> {
    /// An object event or a bookmark.
    Event(SourceEvent<K>),
    /// An `ERROR` event's `Status`.
    Error(Box<kube::core::Status>),
}

/// Decodes one watch line (without its newline).
pub fn decode_watch_line<K: DeserializeOwned>(
    line: &[u8],
    options: DecodeOptions,
) -> Result<WatchLine<K>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(super::utf8::utf8(line)?);
    let event = de.deserialize_map(EnvelopeVisitor::<K> {
        options,
        _k: PhantomData,
    })?;
    de.end()?;
    Ok(event)
}

/// Why a watch line that did not decode as a `K` event is one client-go
/// skips rather than fails on (R-17 step 2), if it is: an object event
/// whose object is of another kind (it decodes as a `K` once its `kind`
/// and `apiVersion` are taken out: k8s-openapi's types refuse a different
/// one). Anything else is malformed. (An object without metadata decodes,
/// has no key, and is skipped by the DeltaFIFO: R-17 step 3.) Only called
/// for a line that failed, so the second parse costs nothing otherwise.
pub fn skippable_watch_line<K: DeserializeOwned>(line: &[u8]) -> Option<&'static str> {
    #[derive(Deserialize)]
    struct Envelope {
        #[serde(rename = "type")]
        event: String,
        object: serde_json::Map<String, serde_json::Value>,
    }
    let Envelope { event, mut object } = serde_json::from_slice(line).ok()?;
    if !matches!(event.as_str(), "ADDED" | "MODIFIED" | "DELETED") {
        return None;
    }
    let typed = object.remove("kind").is_some() | object.remove("apiVersion").is_some();
    (typed && serde_json::from_value::<K>(serde_json::Value::Object(object)).is_ok())
        .then_some("object of another kind")
}

/// A line that is a `Status` of its own (`"kind": "Status"`), not an
/// event: some servers and proxies end a watch that way. (kube's
/// `Status` decodes from any JSON object, so the kind is checked first.)
pub fn bare_status(line: &[u8]) -> Option<kube::core::Status> {
    #[derive(Deserialize)]
    struct Kind {
        kind: Option<String>,
    }
    let Kind { kind } = serde_json::from_slice(line).ok()?;
    if kind.as_deref() != Some("Status") {
        return None;
    }
    serde_json::from_slice(line).ok()
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

#[derive(Deserialize)]
struct BookmarkObject {
    metadata: BookmarkMeta,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

/// The visitor of a watch line.
pub(super) struct EnvelopeVisitor<K> {
    pub(super) options: DecodeOptions,
    pub(super) _k: PhantomData<fn() -> K>,
}

impl<'de, K: DeserializeOwned> Visitor<'de> for EnvelopeVisitor<K> {
    type Value = WatchLine<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a watch event")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WatchLine<K>, A::Error> {
        let mut event_type = None;
        let mut decoded = None;
        let mut buffered: Option<serde_json::Value> = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "type" => event_type = Some(map.next_value::<EventType>()?),
                "object" => match event_type {
                    Some(t) => {
                        decoded = Some(map.next_value_seed(PayloadSeed::<K> {
                            event_type: t,
                            options: self.options,
                            _k: PhantomData,
                        })?)
                    }
                    None => buffered = Some(map.next_value()?),
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let event_type = event_type.ok_or_else(|| de::Error::missing_field("type"))?;
        match (decoded, buffered) {
            (Some(line), _) => Ok(line),
            (None, Some(value)) => PayloadSeed::<K> {
                event_type,
                options: self.options,
                _k: PhantomData,
            }
            .deserialize(value)
            .map_err(de::Error::custom),
            (None, None) => Err(de::Error::missing_field("object")),
        }
    }
}

/// The `object` of an envelope whose `type` is known.
struct PayloadSeed<K> {
    event_type: EventType,
    options: DecodeOptions,
    _k: PhantomData<fn() -> K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for PayloadSeed<K> {
    type Value = WatchLine<K>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<WatchLine<K>, D::Error> {
        let object = ObjectSeed::<K>::new(self.options);
        Ok(match self.event_type {
            EventType::Added => WatchLine::Event(SourceEvent::Added(object.deserialize(d)?)),
            EventType::Modified => WatchLine::Event(SourceEvent::Modified(object.deserialize(d)?)),
            EventType::Deleted => WatchLine::Event(SourceEvent::Deleted(object.deserialize(d)?)),
            EventType::Bookmark => {
                let b = BookmarkObject::deserialize(d)?;
                let end = b
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(INITIAL_EVENTS_END))
                    .map(String::as_str)
                    == Some("true");
                WatchLine::Event(SourceEvent::Bookmark {
                    resource_version: b.metadata.resource_version,
                    initial_events_end: end,
                })
            }
            EventType::Error => WatchLine::Error(Box::new(kube::core::Status::deserialize(d)?)),
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    use super::*;
    use crate::reflector::client::classify::classify_status;
    use crate::reflector::decode::testdata::POD;
    use crate::reflector::failure::Failure;

    #[test]
    fn watch_lines_decode_with_type_first_or_last() {
        let line = format!(r#"{{"type":"MODIFIED","object":{POD}}}"#);
        let skip = DecodeOptions {
            skip_managed_fields: true,
        };
        match decode_watch_line::<Pod>(line.as_bytes(), skip).unwrap() {
            WatchLine::Event(SourceEvent::Modified(p)) => {
                assert_eq!(p.metadata.name.as_deref(), Some("p"));
                assert_eq!(p.metadata.managed_fields, None);
            }
            other => panic!("{other:?}"),
        }
        let reversed = format!(r#"{{"object":{POD},"type":"DELETED"}}"#);
        match decode_watch_line::<Pod>(reversed.as_bytes(), skip).unwrap() {
            WatchLine::Event(SourceEvent::Deleted(p)) => {
                assert_eq!(p.metadata.managed_fields, None);
                assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Running"));
            }
            other => panic!("{other:?}"),
        }
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1",
            "metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        match decode_watch_line::<ConfigMap>(bookmark, DecodeOptions::default()).unwrap() {
            WatchLine::Event(SourceEvent::Bookmark {
                resource_version,
                initial_events_end,
            }) => {
                assert_eq!(resource_version, "12");
                assert!(initial_events_end);
            }
            other => panic!("{other:?}"),
        }
        let error =
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",
            "message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        match decode_watch_line::<ConfigMap>(error, DecodeOptions::default()).unwrap() {
            WatchLine::Error(status) => assert_eq!(
                classify_status(status.code, &status.reason, &status.message, None),
                Failure::Expired
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            decode_watch_line::<ConfigMap>(
                b"{\"type\":\"MODIFIED\",\"object\":{this is not json",
                DecodeOptions::default()
            )
            .is_err()
        );
        assert!(
            decode_watch_line::<ConfigMap>(
                br#"{"type":"SOMETHING","object":{}}"#,
                DecodeOptions::default()
            )
            .is_err()
        );
    }
}
