//! One object, decoded with the [`DecodeOptions`]: by serde_json
//! ([`decode_object`]), or through simd-json's tape ([`ObjectDecoder`]).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer};

use super::managed_fields::WithoutManagedFields;
use super::options::DecodeOptions;
use super::tape::CopyingTape;

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

/// Decodes objects one by one like [`decode_object`], through simd-json's
/// tape (exact `Vec` capacities, as [`PageDecoder`](super::PageDecoder)),
/// keeping its scratch space from object to object; an object simd-json
/// refuses gets serde_json's verdict.
pub struct ObjectDecoder {
    tape: CopyingTape,
}

impl Default for ObjectDecoder {
    fn default() -> Self {
        ObjectDecoder {
            tape: CopyingTape::new(),
        }
    }
}

impl fmt::Debug for ObjectDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectDecoder").finish_non_exhaustive()
    }
}

impl ObjectDecoder {
    /// Decodes one object; `json` is left intact.
    pub fn decode<K: DeserializeOwned>(
        &mut self,
        json: &[u8],
        options: DecodeOptions,
    ) -> Result<K, serde_json::Error> {
        self.tape.decode(
            json,
            |de| ObjectSeed::<K>::new(options).deserialize(de),
            |json| decode_object(json, options),
        )
    }
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
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    use super::*;
    use crate::reflector::decode::testdata::{POD, RICH_POD, containers_capacity};

    /// The object decoder gives serde_json's objects, with exact
    /// capacities, and serde_json's errors for what it refuses.
    #[test]
    fn the_object_decoder_matches_serde_json_with_exact_capacities() {
        let mut decoder = ObjectDecoder::default();
        let expected: Pod = serde_json::from_str(RICH_POD).unwrap();
        for _ in 0..2 {
            let pod: Pod = decoder
                .decode(RICH_POD.as_bytes(), DecodeOptions::default())
                .unwrap();
            assert_eq!(pod, expected);
            assert_eq!(containers_capacity(&pod), 3);
        }
        let slim: Pod = decoder
            .decode(
                POD.as_bytes(),
                DecodeOptions {
                    skip_managed_fields: true,
                },
            )
            .unwrap();
        assert_eq!(slim.metadata.managed_fields, None);
        // simd-json refuses integers past 64 bits; serde_json reads them as floats.
        let big = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":18446744073709551616}"#;
        let cm: ConfigMap = decoder.decode(big, DecodeOptions::default()).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some("n"));
        let cases: [&[u8]; 5] = [
            &POD.as_bytes()[..POD.len() / 2],
            b"",
            b"[]",
            br#"{"metadata":{"name":7}}"#,
            b"\xff\xfe",
        ];
        for case in cases {
            let ours = decoder.decode::<Pod>(case, DecodeOptions::default());
            let theirs = decode_object::<Pod>(case, DecodeOptions::default());
            let what = String::from_utf8_lossy(case);
            match (ours, theirs) {
                (Err(a), Err(b)) => {
                    assert_eq!(a.classify(), b.classify(), "{what}");
                    assert_eq!(a.to_string(), b.to_string(), "{what}");
                }
                (a, b) => panic!("{what}: {a:?} against {b:?}"),
            }
        }
    }

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
