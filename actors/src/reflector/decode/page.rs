//! List pages: only `metadata` and `items` are kept.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
    Visitor,
};

use super::key::Key;
use super::object::ObjectSeed;
use super::options::DecodeOptions;

/// One decoded list page.
#[derive(Debug)]
pub struct Page<K> {
    /// The page's objects.
    pub items: Vec<K>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.continue`.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`.
    pub remaining_item_count: Option<i64>,
}

/// Decodes one list page (`{"metadata": {...}, "items": [...]}`).
pub fn decode_page<K: DeserializeOwned>(
    json: &[u8],
    options: DecodeOptions,
) -> Result<Page<K>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(super::utf8::utf8(json)?);
    let page = de.deserialize_map(PageVisitor::<K> {
        options,
        _k: PhantomData,
    })?;
    de.end()?;
    Ok(page)
}

/// The `metadata.continue` of a list page, read without decoding its
/// items: only when `metadata` comes before `items`, as servers send it
/// (otherwise `None`, and the caller waits for the full decode).
pub fn peek_continue(json: &[u8]) -> Option<String> {
    struct Peek<'a>(&'a std::cell::Cell<Option<String>>);
    impl<'de> Visitor<'de> for Peek<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<Key<'de>>()? {
                match key.as_str() {
                    "metadata" => {
                        let meta = map.next_value::<Option<ListMeta>>()?.unwrap_or_default();
                        self.0.set(meta.continue_token.filter(|c| !c.is_empty()));
                        // Stop here: the items are not needed.
                        return Err(de::Error::custom(PEEK_DONE));
                    }
                    "items" => return Err(de::Error::custom(PEEK_DONE)),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    const PEEK_DONE: &str = "peek done";
    let found = std::cell::Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(json);
    let _ = de.deserialize_map(Peek(&found));
    found.take()
}

/// The visitor of a list page.
pub(super) struct PageVisitor<K> {
    pub(super) options: DecodeOptions,
    pub(super) _k: PhantomData<fn() -> K>,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    #[serde(rename = "remainingItemCount")]
    remaining_item_count: Option<i64>,
}

impl<'de, K: DeserializeOwned> Visitor<'de> for PageVisitor<K> {
    type Value = Page<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Page<K>, A::Error> {
        let mut meta = ListMeta::default();
        let mut items = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match key.as_str() {
                "metadata" => meta = map.next_value::<Option<ListMeta>>()?.unwrap_or_default(),
                "items" => {
                    items = map.next_value_seed(ItemsSeed::<K> {
                        options: self.options,
                        _k: PhantomData,
                    })?
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Page {
            items,
            resource_version: meta.resource_version,
            continue_token: meta.continue_token,
            remaining_item_count: meta.remaining_item_count,
        })
    }
}

/// `items`: an array of objects, or null.
struct ItemsSeed<K> {
    options: DecodeOptions,
    _k: PhantomData<fn() -> K>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<K> {
    type Value = Vec<K>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<K>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ItemsSeed<K> {
    type Value = Vec<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of objects")
    }

    fn visit_none<E: de::Error>(self) -> Result<Vec<K>, E> {
        Ok(Vec::new())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Vec<K>, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<K>, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<K>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(ObjectSeed::<K>::new(self.options))? {
            items.push(item);
        }
        Ok(items)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::reflector::decode::testdata::POD;

    #[test]
    fn peek_continue_reads_metadata_before_items_only() {
        let page = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"broken"#;
        assert_eq!(peek_continue(page).as_deref(), Some("abc"));
        let last = br#"{"metadata":{"resourceVersion":"7","continue":""},"items":[]}"#;
        assert_eq!(peek_continue(last), None);
        let items_first = br#"{"items":[],"metadata":{"continue":"abc"}}"#;
        assert_eq!(peek_continue(items_first), None);
        assert_eq!(peek_continue(b"not json"), None);
    }

    #[test]
    fn pages_keep_metadata_and_items() {
        let json = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"42","continue":"c1",
            "remainingItemCount":3}},"items":[{POD},{POD}]}}"#
        );
        let page: Page<Pod> = decode_page(json.as_bytes(), DecodeOptions::default()).unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.resource_version.as_deref(), Some("42"));
        assert_eq!(page.continue_token.as_deref(), Some("c1"));
        assert_eq!(page.remaining_item_count, Some(3));
        let empty: Page<Pod> = decode_page(
            br#"{"metadata":{"resourceVersion":"1"},"items":null}"#,
            DecodeOptions::default(),
        )
        .unwrap();
        assert!(empty.items.is_empty());
    }
}
