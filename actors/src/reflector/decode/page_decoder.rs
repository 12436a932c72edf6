//! [`PageDecoder`]: list pages parsed in place through simd-json's tape.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, Deserializer};

use super::options::DecodeOptions;
use super::page::{Page, PageVisitor, decode_page};
use super::tape::TapeParser;

/// Bodies up to this size are parsed through simd-json's tape, which
/// takes about three times the body while the page decodes; a larger
/// body (an unpaginated list of a big collection) goes through
/// serde_json, whose scratch space does not grow with the body.
pub const MAX_TAPE_BODY: usize = 32 << 20;

/// Why a list page did not decode.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// simd-json refused it. Its bytes are scrambled, and the decoder
    /// now hands every page to serde_json: fetch the page again and
    /// decode it once more, so that serde_json decides (a page only
    /// simd-json refuses must not stop an informer from syncing).
    #[error("simd-json refused the page: {0}")]
    Tape(serde_json::Error),
    /// serde_json refused it: malformed.
    #[error(transparent)]
    Json(serde_json::Error),
}

/// Decodes the pages of one list, keeping simd-json's scratch space from
/// page to page.
pub struct PageDecoder {
    parser: Option<TapeParser>,
    tape_limit: usize,
    /// False once simd-json refused a page: serde_json decodes the rest.
    tape: bool,
}

impl Default for PageDecoder {
    fn default() -> Self {
        PageDecoder::with_tape_limit(MAX_TAPE_BODY)
    }
}

impl fmt::Debug for PageDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageDecoder")
            .field("tape_limit", &self.tape_limit)
            .finish_non_exhaustive()
    }
}

impl PageDecoder {
    /// A decoder that hands bodies past `limit` bytes to serde_json.
    pub fn with_tape_limit(limit: usize) -> Self {
        PageDecoder {
            parser: None,
            tape_limit: limit,
            tape: true,
        }
    }

    /// A decoder that hands every body to serde_json.
    pub fn without_tape() -> Self {
        PageDecoder {
            tape: false,
            ..PageDecoder::default()
        }
    }

    /// Decodes one list page like [`decode_page`], parsing `json` in
    /// place: its bytes are scrambled afterwards. A cached Pod takes 51.4 KB
    /// this way against 56.4 KB through serde_json (BENCHMARKS.md,
    /// "simd-json decoding").
    pub fn decode<K: DeserializeOwned>(
        &mut self,
        json: &mut Vec<u8>,
        options: DecodeOptions,
    ) -> Result<Page<K>, PageError> {
        if !self.tape || json.len() > self.tape_limit {
            return decode_page(json, options).map_err(PageError::Json);
        }
        let parsed = self
            .parser
            .get_or_insert_with(TapeParser::new)
            .parse(json, |de| {
                de.deserialize_map(PageVisitor::<K> {
                    options,
                    _k: PhantomData,
                })
            });
        parsed.map_err(|e| {
            self.tape = false;
            self.parser = None;
            PageError::Tape(de::Error::custom(e))
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::reflector::decode::testdata::{POD, RICH_POD, containers_capacity, page_of};

    /// The page decoder gives the objects serde_json gives, with every
    /// `Vec` at its exact capacity, and falls back to serde_json past its
    /// size limit.
    #[test]
    fn page_decoder_matches_serde_json_with_exact_capacities() {
        let expected: Pod = serde_json::from_str(RICH_POD).unwrap();
        let page = page_of(&[RICH_POD, POD, RICH_POD]);
        for skip in [false, true] {
            let options = DecodeOptions {
                skip_managed_fields: skip,
            };
            let reference: Page<Pod> = decode_page(&page, options).unwrap();
            let mut decoder = PageDecoder::default();
            for _ in 0..2 {
                // Twice: the second page reuses the decoder's buffers.
                let mut body = page.clone();
                let decoded: Page<Pod> = decoder.decode(&mut body, options).unwrap();
                assert_eq!(body.len(), page.len(), "padding left behind");
                assert_eq!(decoded.items, reference.items);
                assert_eq!(decoded.items.capacity(), 3);
                assert_eq!(decoded.resource_version.as_deref(), Some("42"));
                assert_eq!(decoded.continue_token.as_deref(), Some("c1"));
                let rich = &decoded.items[0];
                assert_eq!(containers_capacity(rich), 3);
                let spec = rich.spec.as_ref().unwrap();
                assert_eq!(spec.containers[0].env.as_ref().unwrap().capacity(), 3);
                assert_eq!(rich.metadata.finalizers.as_ref().unwrap().capacity(), 3);
                match skip {
                    false => {
                        assert_eq!(rich, &expected);
                        assert_eq!(rich.metadata.managed_fields.as_ref().unwrap().capacity(), 3);
                    }
                    true => assert!(rich.metadata.managed_fields.is_none()),
                }
            }
        }
        // A page simd-json refuses switches the decoder to serde_json: here
        // an integer past 64 bits, which serde_json reads as a float.
        let mut decoder = PageDecoder::default();
        let mut broken = page_of(&[r#"{"metadata":{"name":"n"},"x":18446744073709551616}"#]);
        assert!(matches!(
            decoder.decode::<Pod>(&mut broken.clone(), DecodeOptions::default()),
            Err(PageError::Tape(_))
        ));
        let decoded: Page<Pod> = decoder
            .decode(&mut broken, DecodeOptions::default())
            .unwrap();
        assert_eq!(decoded.items[0].metadata.name.as_deref(), Some("n"));
        let mut decoder = PageDecoder::default();
        let mut broken = page.clone();
        broken.truncate(page.len() - 1);
        assert!(matches!(
            decoder.decode::<Pod>(&mut broken, DecodeOptions::default()),
            Err(PageError::Tape(_))
        ));
        let decoded: Page<Pod> = decoder
            .decode(&mut page.clone(), DecodeOptions::default())
            .unwrap();
        assert_eq!(decoded.items[0], expected);
        assert_eq!(containers_capacity(&decoded.items[0]), 4);
        assert!(matches!(
            decoder.decode::<Pod>(&mut broken, DecodeOptions::default()),
            Err(PageError::Json(_))
        ));
        // Past the limit, serde_json: the same objects, capacities by doubling.
        let mut decoder = PageDecoder::with_tape_limit(page.len() - 1);
        let decoded: Page<Pod> = decoder
            .decode(&mut page.clone(), DecodeOptions::default())
            .unwrap();
        assert_eq!(decoded.items[0], expected);
        assert_eq!(containers_capacity(&decoded.items[0]), 4);
    }

    /// Malformed pages are errors, never panics, through either parser.
    #[test]
    fn page_decoder_refuses_malformed_pages() {
        let good = page_of(&[POD]);
        let mut bad_utf8 = good.clone();
        let at = bad_utf8.windows(3).position(|w| w == b"\"p\"").unwrap();
        bad_utf8[at + 1] = 0xff;
        let cases: Vec<Vec<u8>> = vec![
            good[..good.len() - 1].to_vec(),
            good[..good.len() / 2].to_vec(),
            bad_utf8,
            br#"{"metadata":{},"items":{}}"#.to_vec(),
            br#"{"metadata":{},"items":[{"metadata":{"name":7}}]}"#.to_vec(),
            br#"{"metadata":{},"items":[]} trailing"#.to_vec(),
            br#"[1,2,3]"#.to_vec(),
            b"".to_vec(),
            b"\x00\x01".to_vec(),
        ];
        for case in cases {
            let what = String::from_utf8_lossy(&case).into_owned();
            // simd-json refuses it, and the decoder switches to serde_json,
            // which refuses it too (the empty body included: no refetch loop).
            let mut decoder = PageDecoder::default();
            let result = decoder.decode::<Pod>(&mut case.clone(), DecodeOptions::default());
            assert!(matches!(result, Err(PageError::Tape(_))), "{what}");
            let result = decoder.decode::<Pod>(&mut case.clone(), DecodeOptions::default());
            assert!(matches!(result, Err(PageError::Json(_))), "{what}");
            let mut decoder = PageDecoder::without_tape();
            let result = decoder.decode::<Pod>(&mut case.clone(), DecodeOptions::default());
            assert!(matches!(result, Err(PageError::Json(_))), "{what}");
        }
        // Nesting past 128 levels: refused by simd-json, and serde_json
        // decides (here it skips the unknown field, as it always did).
        let deep = format!(
            r#"{{"metadata":{{}},"items":[{{"metadata":{{"name":"n"}},"x":{}{}}}]}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let mut decoder = PageDecoder::default();
        let result =
            decoder.decode::<Pod>(&mut deep.clone().into_bytes(), DecodeOptions::default());
        assert!(matches!(result, Err(PageError::Tape(_))));
        let result = decoder.decode::<Pod>(&mut deep.into_bytes(), DecodeOptions::default());
        assert_eq!(result.unwrap().items.len(), 1);
    }
}
