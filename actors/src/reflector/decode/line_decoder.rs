//! [`LineDecoder`]: watch lines through simd-json's tape, on a copy, so
//! that a line simd-json refuses goes to serde_json intact, whose verdict
//! (and error kinds: a line cut short is an EOF) then stands.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, Deserializer};

use super::options::DecodeOptions;
use super::tape::CopyingTape;
use super::watch_line::{EnvelopeVisitor, WatchLine, decode_watch_line};

/// Decodes the lines of one watch, keeping a scratch copy of the line
/// and simd-json's scratch space from line to line.
pub struct LineDecoder {
    tape: CopyingTape,
}

impl Default for LineDecoder {
    fn default() -> Self {
        LineDecoder {
            tape: CopyingTape::new(),
        }
    }
}

impl fmt::Debug for LineDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineDecoder").finish_non_exhaustive()
    }
}

impl LineDecoder {
    /// Decodes one watch line like [`decode_watch_line`], with the
    /// exact `Vec` capacities of [`PageDecoder`](super::PageDecoder). `line` is left intact.
    pub fn decode<K: DeserializeOwned>(
        &mut self,
        line: &[u8],
        options: DecodeOptions,
    ) -> Result<WatchLine<K>, serde_json::Error> {
        self.tape.decode(
            line,
            |de| {
                de.deserialize_map(EnvelopeVisitor::<K> {
                    options,
                    _k: PhantomData,
                })
            },
            |line| decode_watch_line(line, options),
        )
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    use super::*;
    use crate::reflector::decode::testdata::{POD, RICH_POD, containers_capacity, watch_line};
    use crate::reflector::event::SourceEvent;

    /// The line decoder gives the events serde_json gives, with exact
    /// capacities, and serde_json's errors for the lines it refuses.
    #[test]
    fn line_decoder_matches_serde_json_with_exact_capacities() {
        let expected: Pod = serde_json::from_str(RICH_POD).unwrap();
        let mut decoder = LineDecoder::default();
        for round in 0..2 {
            let line = watch_line("MODIFIED", RICH_POD);
            let Ok(WatchLine::Event(SourceEvent::Modified(pod))) =
                decoder.decode::<Pod>(&line, DecodeOptions::default())
            else {
                panic!("round {round}: not a MODIFIED event");
            };
            assert_eq!(pod, expected);
            assert_eq!(containers_capacity(&pod), 3);
            assert_eq!(pod.metadata.managed_fields.as_ref().unwrap().capacity(), 3);
        }
        // Object first: buffered, still decoded.
        let swapped = format!(r#"{{"object":{RICH_POD},"type":"ADDED"}}"#);
        assert!(matches!(
            decoder.decode::<Pod>(swapped.as_bytes(), DecodeOptions::default()),
            Ok(WatchLine::Event(SourceEvent::Added(pod))) if pod == expected
        ));
        // A line past the scratch limit, then an ordinary one again.
        let big_value = "x".repeat(300 << 10);
        let big = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big"}},"data":{{"k":"{big_value}"}}}}"#
        );
        let Ok(WatchLine::Event(SourceEvent::Added(cm))) =
            decoder.decode::<ConfigMap>(&watch_line("ADDED", &big), DecodeOptions::default())
        else {
            panic!("the big line did not decode");
        };
        assert_eq!(cm.data.unwrap()["k"].len(), 300 << 10);
        assert!(matches!(
            decoder.decode::<Pod>(&watch_line("DELETED", POD), DecodeOptions::default()),
            Ok(WatchLine::Event(SourceEvent::Deleted(_)))
        ));
        // simd-json refuses integers past 64 bits; serde_json reads them as floats.
        let big = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":18446744073709551616}"#;
        assert!(matches!(
            decoder.decode::<ConfigMap>(&watch_line("ADDED", big), DecodeOptions::default()),
            Ok(WatchLine::Event(SourceEvent::Added(cm))) if cm.metadata.name.as_deref() == Some("n")
        ));
        // Refused lines: the same verdict and error kind as serde_json's.
        let full = watch_line("MODIFIED", POD);
        let cases: Vec<Vec<u8>> = vec![
            full[..full.len() - 1].to_vec(),
            full[..full.len() / 2].to_vec(),
            watch_line("SOMETHING", "{}"),
            watch_line(
                "ADDED",
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#,
            ),
            watch_line("ADDED", r#"{"metadata":{"name":7}}"#),
            br#"{"type":"ADDED"}"#.to_vec(),
            br#"{"kind":"Status","status":"Failure","code":500}"#.to_vec(),
            br#"[]"#.to_vec(),
        ];
        for case in cases {
            let ours = decoder.decode::<Pod>(&case, DecodeOptions::default());
            let theirs = decode_watch_line::<Pod>(&case, DecodeOptions::default());
            let what = String::from_utf8_lossy(&case);
            match (ours, theirs) {
                (Err(a), Err(b)) => {
                    assert_eq!(a.classify(), b.classify(), "{what}");
                    assert_eq!(a.to_string(), b.to_string(), "{what}");
                }
                (a, b) => panic!("{what}: {a:?} against {b:?}"),
            }
        }
    }
}
