//! simd-json's tape parser, kept from input to input.
//!
//! simd-json's tape knows each array's length before it is decoded, so
//! every `Vec` of an object gets its exact capacity (serde_json grows them
//! by doubling; serde still caps the hint of a huge array at 1 MiB of
//! elements).

/// simd-json's scratch space, its buffers and its tape, kept from input
/// to input: a tape allocated per list page came from fresh memory each
/// time and tripled the page faults of decoding.
pub(super) struct TapeParser {
    buffers: simd_json::Buffers,
    tape: simd_json::Tape<'static>,
}

/// serde_json's recursion limit: simd-json's own (1024) would let
/// serde's visitors recurse eight times deeper than before. Deeper input
/// is refused here, and serde_json decides, as it always did.
const MAX_DEPTH: usize = 128;

impl TapeParser {
    pub(super) fn new() -> Self {
        TapeParser {
            // Parsing padded input in place, simd-json never uses the
            // input buffer a length hint would reserve.
            buffers: simd_json::Buffers::with_max_depth(0, MAX_DEPTH),
            tape: simd_json::Tape(Vec::new()),
        }
    }

    /// Parses `json` in place (padded for the parser meanwhile: its length
    /// is restored, its bytes are scrambled) and hands it to `visit`.
    pub(super) fn parse<T>(
        &mut self,
        json: &mut Vec<u8>,
        visit: impl for<'de> FnOnce(&mut simd_json::Deserializer<'de>) -> simd_json::Result<T>,
    ) -> simd_json::Result<T> {
        let len = json.len();
        json.resize(len + simd_json::INPUT_PADDING, 0);
        // Empty (it was reset when put back), so any lifetime will do.
        let mut tape: simd_json::Tape<'_> = simd_json::Tape(std::mem::take(&mut self.tape.0));
        let result = match simd_json::fill_tape_padded(json, len, &mut self.buffers, &mut tape) {
            Ok(()) => {
                let mut de = simd_json::Deserializer::from_tape(tape);
                let result = visit(&mut de);
                tape = de.into_tape();
                result
            }
            Err(e) => Err(e),
        };
        self.tape = tape.reset();
        json.truncate(len);
        result
    }
}

/// Inputs longer than this go straight to serde_json, so that the scratch
/// space a [`CopyingTape`] keeps stays small.
const MAX_TAPE_INPUT: usize = 2 << 20;

/// After an input longer than this, a [`CopyingTape`] lets its scratch
/// space go.
const KEEP_TAPE_SCRATCH: usize = 256 << 10;

/// A [`TapeParser`] over a scratch copy of each input, so that an input
/// simd-json refuses goes to serde_json intact, whose verdict (and error
/// kinds: an input cut short is an EOF) then stands.
pub(super) struct CopyingTape {
    scratch: Vec<u8>,
    parser: TapeParser,
}

impl CopyingTape {
    pub(super) fn new() -> Self {
        CopyingTape {
            scratch: Vec::new(),
            parser: TapeParser::new(),
        }
    }

    /// `visit` over simd-json's tape of `input`; `fallback` (serde_json,
    /// given `input`) when the input is too long for the tape or simd-json
    /// refuses it. `input` is left intact.
    pub(super) fn decode<T>(
        &mut self,
        input: &[u8],
        visit: impl for<'de> FnOnce(&mut simd_json::Deserializer<'de>) -> simd_json::Result<T>,
        fallback: impl FnOnce(&[u8]) -> Result<T, serde_json::Error>,
    ) -> Result<T, serde_json::Error> {
        if input.len() > MAX_TAPE_INPUT {
            return fallback(input);
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(input);
        let decoded = self.parser.parse(&mut self.scratch, visit);
        if input.len() > KEEP_TAPE_SCRATCH {
            *self = CopyingTape::new();
        }
        decoded.or_else(|_| fallback(input))
    }
}
