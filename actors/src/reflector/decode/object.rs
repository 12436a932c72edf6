//! One object, decoded with the [`DecodeOptions`].

use std::marker::PhantomData;

use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer};

use super::managed_fields::WithoutManagedFields;
use super::options::DecodeOptions;

/// Decodes one object.
pub fn decode_object<K: DeserializeOwned>(
    json: &[u8],
    options: DecodeOptions,
) -> Result<K, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(super::utf8::utf8(json)?);
    let value = ObjectSeed::<K>::new(options).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Decodes a `K`, skipping managedFields when asked.
pub(super) struct ObjectSeed<K> {
    options: DecodeOptions,
    _k: PhantomData<fn() -> K>,
}

impl<K> ObjectSeed<K> {
    pub(super) fn new(options: DecodeOptions) -> Self {
        ObjectSeed {
            options,
            _k: PhantomData,
        }
    }
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ObjectSeed<K> {
    type Value = K;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        if self.options.skip_managed_fields {
            K::deserialize(WithoutManagedFields::object(d))
        } else {
            K::deserialize(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::reflector::decode::testdata::POD;

    #[test]
    fn objects_decode_like_serde_json_and_can_skip_managed_fields() {
        let plain: Pod = serde_json::from_str(POD).unwrap();
        let same: Pod = decode_object(POD.as_bytes(), DecodeOptions::default()).unwrap();
        assert_eq!(plain, same);
        assert_eq!(
            plain.metadata.managed_fields.as_ref().map(Vec::len),
            Some(1)
        );
        let slim: Pod = decode_object(
            POD.as_bytes(),
            DecodeOptions {
                skip_managed_fields: true,
            },
        )
        .unwrap();
        assert_eq!(slim.metadata.managed_fields, None);
        let mut expected = plain.clone();
        expected.metadata.managed_fields = None;
        assert_eq!(slim, expected);
        // Only metadata.managedFields goes: a field of that name elsewhere stays.
        let dynamic: kube::core::DynamicObject = decode_object(
            br#"{"apiVersion":"x/v1","kind":"W","metadata":{"name":"w","managedFields":[{"manager":"m"}]},
                "spec":{"managedFields":1}}"#,
            DecodeOptions {
                skip_managed_fields: true,
            },
        )
        .unwrap();
        assert_eq!(dynamic.metadata.managed_fields, None);
        assert_eq!(dynamic.data["spec"]["managedFields"], 1);
        assert_eq!(dynamic.metadata.name.as_deref(), Some("w"));
    }
}
