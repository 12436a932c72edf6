//! The bodies of the fuzz targets: each takes arbitrary bytes and must
//! answer a value or a typed error, never panic. The cargo-fuzz targets
//! (`fuzz/fuzz_targets/*.rs`, nightly) call these, and so do the stable
//! property tests over generated inputs and the checked-in corpus
//! (`sim/tests/fuzz.rs`).

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer_actors::reflector::decode::{
    DecodeOptions, LineDecoder, ObjectDecoder, PageDecoder, WatchLine, decode_object, decode_page,
    decode_watch_line,
};
use kinformer_apiserver::query::{ContinueToken, Query};
use kinformer_apiserver::selector::{FieldSelector, LabelSelector};
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;

const OPTIONS: [DecodeOptions; 2] = [
    DecodeOptions {
        skip_managed_fields: false,
    },
    DecodeOptions {
        skip_managed_fields: true,
    },
];

fn line_as<K: DeserializeOwned>(data: &[u8]) {
    for options in OPTIONS {
        // simd-json first (falling back to serde_json), then serde_json alone.
        let tape = LineDecoder::default().decode::<K>(data, options);
        let plain = decode_watch_line::<K>(data, options);
        // serde_json's verdict stands: what it refuses, the tape path refuses too.
        if plain.is_err() {
            assert!(
                tape.is_err(),
                "simd-json accepted a watch line serde_json refuses ({:?})",
                plain.err()
            );
        }
        if let Ok(WatchLine::Error(status)) = &tape {
            let _ = status.code;
        }
    }
}

/// The same bytes as one bare object (what a snapshot stores), through
/// simd-json's tape and serde_json: the same verdict.
fn object_as<K: DeserializeOwned>(data: &[u8]) {
    for options in OPTIONS {
        let tape = ObjectDecoder::default().decode::<K>(data, options);
        let plain = decode_object::<K>(data, options);
        assert_eq!(
            tape.is_ok(),
            plain.is_ok(),
            "the object decoders disagree ({:?})",
            plain.err()
        );
    }
}

/// A watch line (without its newline) through both decoders, for three
/// types; and the same bytes as a bare object (a snapshot's).
pub fn watch_line(data: &[u8]) {
    line_as::<ConfigMap>(data);
    line_as::<Pod>(data);
    line_as::<DynamicObject>(data);
    object_as::<ConfigMap>(data);
    object_as::<Pod>(data);
    object_as::<DynamicObject>(data);
}

fn page_as<K: DeserializeOwned>(data: &[u8]) {
    for options in OPTIONS {
        let mut buf = data.to_vec();
        let tape = PageDecoder::default().decode::<K>(&mut buf, options);
        let mut buf = data.to_vec();
        let plain = PageDecoder::without_tape().decode::<K>(&mut buf, options);
        let direct = decode_page::<K>(data, options);
        assert_eq!(
            plain.is_ok(),
            direct.is_ok(),
            "PageDecoder::without_tape and decode_page disagree"
        );
        if let (Ok(t), Ok(p)) = (&tape, &plain) {
            assert_eq!(
                t.items.len(),
                p.items.len(),
                "both decoders, other item counts"
            );
            assert_eq!(t.resource_version, p.resource_version);
            assert_eq!(t.continue_token, p.continue_token);
        }
    }
}

/// A list page through the simd-json and serde_json decoders, for three types.
pub fn list_page(data: &[u8]) {
    page_as::<ConfigMap>(data);
    page_as::<Pod>(data);
    page_as::<DynamicObject>(data);
}

/// A label selector: parsed, and when it parses, matched against a few label sets.
pub fn label_selector(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = LabelSelector::parse(&text) {
        let mut labels = std::collections::BTreeMap::new();
        let _ = s.matches(&labels);
        labels.insert("app".to_owned(), "web".to_owned());
        labels.insert("tier".to_owned(), "10".to_owned());
        let _ = s.matches(&labels);
        let _ = s.is_empty();
    }
}

/// A field selector: parsed, and when it parses, matched against an object.
pub fn field_selector(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = FieldSelector::parse(&text) {
        let _ = s.matches("default", "web");
        let _ = s.matches_with("default", "web", || {
            Some(serde_json::json!({"metadata": {"name": "web"}, "spec": {"a": [1, {"b": null}]}}))
        });
        let _ = s.clone().with_name("other").matches("default", "other");
    }
}

/// A request's query string, and a continue token.
pub fn query(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(q) = Query::parse(Some(&text)) {
        let _ = q.list_at();
    }
    let _ = ContinueToken::decode(&text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_inputs_decode() {
        watch_line(br#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}"#);
        list_page(br#"{"metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a"}}]}"#);
        label_selector(b"app in (a,b),!x");
        field_selector(b"metadata.name=web,spec.a!=1");
        query(b"watch=1&resourceVersion=5&limit=3");
    }
}
