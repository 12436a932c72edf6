//! Metadata-only answers (`as=PartialObjectMetadataList` pages,
//! `as=PartialObjectMetadata` watch lines) decoded into kube's
//! `PartialObjectMeta<K>`, through serde_json and through the tape, with
//! and without managedFields.

use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;

use super::{DecodeOptions, LineDecoder, PageDecoder, WatchLine, decode_page, decode_watch_line};
use crate::reflector::event::SourceEvent;

/// One item as a server sends it in a metadata-only answer.
const META: &str = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p",
    "namespace":"ns","resourceVersion":"7","uid":"u","labels":{"a":"b"},"annotations":{"n":"v"},
    "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"r","controller":true}],
    "managedFields":[{"manager":"kubelet","operation":"Update","fieldsType":"FieldsV1",
    "fieldsV1":{"f:status":{"f:phase":{}}}}]}}"#;

fn page() -> String {
    format!(
        r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1",
        "metadata":{{"resourceVersion":"42","continue":"c1","remainingItemCount":1}},"items":[{META},{META}]}}"#
    )
}

fn check(object: &PartialObjectMeta<Pod>, skip: bool) {
    let types = object.types.as_ref().expect("kind and apiVersion");
    assert_eq!(
        (types.kind.as_str(), types.api_version.as_str()),
        ("PartialObjectMetadata", "meta.k8s.io/v1")
    );
    let meta = &object.metadata;
    assert_eq!(meta.name.as_deref(), Some("p"));
    assert_eq!(meta.namespace.as_deref(), Some("ns"));
    assert_eq!(meta.resource_version.as_deref(), Some("7"));
    assert_eq!(meta.labels.as_ref().unwrap()["a"], "b");
    assert_eq!(meta.annotations.as_ref().unwrap()["n"], "v");
    assert_eq!(meta.owner_references.as_ref().unwrap()[0].name, "rs");
    assert_eq!(
        meta.managed_fields.as_ref().map(Vec::len),
        (!skip).then_some(1)
    );
}

#[test]
fn a_partial_object_metadata_list_page_decodes_with_or_without_managed_fields() {
    for skip in [false, true] {
        let options = DecodeOptions {
            skip_managed_fields: skip,
        };
        let plain: super::Page<PartialObjectMeta<Pod>> =
            decode_page(page().as_bytes(), options).unwrap();
        let mut bytes = page().into_bytes();
        let taped: super::Page<PartialObjectMeta<Pod>> =
            PageDecoder::default().decode(&mut bytes, options).unwrap();
        for page in [&plain, &taped] {
            assert_eq!(page.items.len(), 2);
            assert_eq!(page.resource_version.as_deref(), Some("42"));
            assert_eq!(page.continue_token.as_deref(), Some("c1"));
            assert_eq!(page.remaining_item_count, Some(1));
            page.items.iter().for_each(|o| check(o, skip));
        }
    }
}

#[test]
fn a_partial_object_metadata_watch_line_decodes_and_a_bookmark_keeps_its_version() {
    let line = format!(r#"{{"type":"MODIFIED","object":{META}}}"#);
    let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1",
        "metadata":{"resourceVersion":"12"}}}"#;
    for skip in [false, true] {
        let options = DecodeOptions {
            skip_managed_fields: skip,
        };
        let plain = decode_watch_line::<PartialObjectMeta<Pod>>(line.as_bytes(), options).unwrap();
        let taped = LineDecoder::default()
            .decode::<PartialObjectMeta<Pod>>(line.as_bytes(), options)
            .unwrap();
        for decoded in [plain, taped] {
            match decoded {
                WatchLine::Event(SourceEvent::Modified(o)) => check(&o, skip),
                other => panic!("{other:?}"),
            }
        }
        match decode_watch_line::<PartialObjectMeta<Pod>>(bookmark, options).unwrap() {
            WatchLine::Event(SourceEvent::Bookmark {
                resource_version, ..
            }) => assert_eq!(resource_version, "12"),
            other => panic!("{other:?}"),
        }
    }
}
