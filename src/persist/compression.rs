//! How a snapshot stores each object: its JSON, compressed with zstd and a
//! dictionary the file keeps, learned from the first large commit's objects.
//!
//! Why: objects of one informer share most of their field names and many
//! values, which a dictionary captures and a single object is too small to
//! show a compressor. On the benchmark's objects (BENCHMARKS.md, "Warm
//! restart") a ConfigMap's 1.65 KB of JSON is stored in about 134 B and a
//! Pod's 7 KB in about 234 B, so a restore reads a tenth of the file and
//! steady writes send a tenth of the bytes to storage; decompressing costs about 1.5 µs per
//! object, on the decoding threads.
//!
//! Each stored value starts with a byte saying how the rest is encoded, so
//! values written before the dictionary existed (a snapshot that started
//! small) still read back. The dictionary of a file never changes.

use std::borrow::Cow;

use kinformer_actors::indexer::compact::{SAMPLES_PER_DICTIONARY_BYTE, dictionary_sample};
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DDict};

use super::error::SnapshotError;

/// The rest is a zstd frame, compressed without a dictionary.
const ZSTD: u8 = 1;
/// The rest is a zstd frame, compressed with the file's dictionary.
const ZSTD_DICTIONARY: u8 = 2;

/// Objects a dictionary is learned from; a commit writing fewer objects
/// (while the file has no dictionary) compresses them without one.
pub const DICTIONARY_SAMPLES: usize = 256;
/// The dictionary's size at most (on Pods: 32 KiB gives 230 B per Pod).
const DICTIONARY_SIZE: usize = 32 * 1024;
/// A dictionary is learned from at most [`DICTIONARY_SAMPLES`] objects, or
/// fewer once their JSON reaches this many bytes (large objects).
pub const SAMPLE_BYTES: usize = SAMPLES_PER_DICTIONARY_BYTE * DICTIONARY_SIZE;

/// What of one object's JSON the dictionary learns from (its head and tail
/// when it is larger than the dictionary).
pub fn sample(json: &[u8]) -> Cow<'_, [u8]> {
    dictionary_sample(json, DICTIONARY_SIZE)
}
/// zstd's level: reads are as fast at any level; 3 writes 100k ConfigMaps
/// in about 0.3 s of the writer's thread.
const LEVEL: i32 = 3;
/// A stored object decompresses to at most this many bytes (the API server
/// refuses requests over 3 MiB): a larger frame header is damage.
const MAX_OBJECT: u64 = 64 << 20;

/// The writer's side: compresses each object's JSON for storage. Every
/// frame carries zstd's checksum of its content, so a damaged value is
/// found when it is read, not decoded into a wrong object.
pub struct ValueWriter {
    cctx: CCtx<'static>,
    has_dictionary: bool,
    /// Learning failed (too few distinct samples): not tried again.
    gave_up: bool,
}

impl ValueWriter {
    /// A writer for a file whose dictionary is `dictionary` (`None`: none yet).
    pub fn new(dictionary: Option<&[u8]>) -> Result<Self, SnapshotError> {
        let mut cctx = CCtx::try_create().ok_or_else(|| zstd_error("no compression context"))?;
        for parameter in [
            CParameter::CompressionLevel(LEVEL),
            CParameter::ChecksumFlag(true),
        ] {
            cctx.set_parameter(parameter).map_err(zstd_code)?;
        }
        let mut writer = ValueWriter {
            cctx,
            has_dictionary: false,
            gave_up: false,
        };
        if let Some(d) = dictionary {
            writer.use_dictionary(d)?;
        }
        Ok(writer)
    }

    fn use_dictionary(&mut self, dictionary: &[u8]) -> Result<(), SnapshotError> {
        // Copied into the context, and used by every frame after.
        self.cctx.load_dictionary(dictionary).map_err(zstd_code)?;
        self.has_dictionary = true;
        Ok(())
    }

    /// Whether a dictionary should be learned now, from a commit writing
    /// `objects` objects.
    pub fn wants_dictionary(&self, objects: usize) -> bool {
        !self.has_dictionary && !self.gave_up && objects >= DICTIONARY_SAMPLES
    }

    /// Learns the file's dictionary from `samples` (objects' JSON) and uses
    /// it from now on; the bytes to store with the commit, or `None` if zstd
    /// could not learn one (objects are then compressed without).
    pub fn learn(&mut self, samples: &[&[u8]]) -> Option<Vec<u8>> {
        let learned = zstd::dict::from_samples(samples, DICTIONARY_SIZE)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                self.use_dictionary(&d)
                    .map(|()| d)
                    .map_err(|e| e.to_string())
            });
        match learned {
            Ok(bytes) => Some(bytes),
            Err(why) => {
                tracing::warn!(
                    why,
                    "snapshot dictionary not learned; objects compressed alone"
                );
                self.gave_up = true;
                None
            }
        }
    }

    /// The stored form of one object's JSON.
    pub fn encode(&mut self, json: &[u8]) -> Result<Vec<u8>, SnapshotError> {
        let tag = if self.has_dictionary {
            ZSTD_DICTIONARY
        } else {
            ZSTD
        };
        let mut out = Vec::with_capacity(1 + zstd_safe::compress_bound(json.len()));
        out.push(tag);
        let mut frame = std::io::Cursor::new(&mut out);
        frame.set_position(1);
        self.cctx.compress2(&mut frame, json).map_err(zstd_code)?;
        Ok(out)
    }
}

/// A decoding thread's side: the JSON of stored values, into a buffer it
/// keeps from value to value.
pub struct ValueReader {
    dctx: DCtx<'static>,
    dictionary: Option<DDict<'static>>,
    json: Vec<u8>,
}

impl ValueReader {
    /// A reader for a file whose dictionary is `dictionary`.
    pub fn new(dictionary: Option<&[u8]>) -> Result<Self, SnapshotError> {
        let dctx = DCtx::try_create().ok_or_else(|| zstd_error("no decompression context"))?;
        let dictionary = match dictionary {
            // The file's own dictionary: refused, the file is damaged.
            Some(d) => Some(DDict::try_create(d).ok_or_else(|| {
                SnapshotError::Corrupt("zstd refused the stored dictionary".into())
            })?),
            None => None,
        };
        Ok(ValueReader {
            dctx,
            dictionary,
            json: Vec::new(),
        })
    }

    /// The JSON of a stored value; damage (an unknown tag, a frame zstd
    /// refuses or of an implausible size, a dictionary the file lacks) is
    /// `Corrupt`.
    pub fn json<'a>(&'a mut self, stored: &'a [u8]) -> Result<&'a [u8], SnapshotError> {
        let (&tag, frame) = stored
            .split_first()
            .ok_or_else(|| corrupt("an empty value"))?;
        let dictionary = match tag {
            ZSTD => None,
            ZSTD_DICTIONARY => Some(
                self.dictionary
                    .as_ref()
                    .ok_or_else(|| corrupt("a value needs the dictionary the file lacks"))?,
            ),
            other => return Err(corrupt(&format!("unknown value encoding {other}"))),
        };
        let size = match zstd_safe::get_frame_content_size(frame) {
            Ok(Some(size)) if size <= MAX_OBJECT => size as usize,
            Ok(Some(size)) => return Err(corrupt(&format!("a value of {size} bytes"))),
            Ok(None) | Err(_) => return Err(corrupt("a value's zstd frame has no size")),
        };
        self.json.clear();
        self.json.reserve(size);
        let written = match dictionary {
            Some(d) => self.dctx.decompress_using_ddict(&mut self.json, frame, d),
            None => self.dctx.decompress(&mut self.json, frame),
        }
        .map_err(|code| corrupt(zstd_safe::get_error_name(code)))?;
        if written != size {
            return Err(corrupt("a value decompressed to another size"));
        }
        Ok(&self.json)
    }
}

fn corrupt(what: &str) -> SnapshotError {
    SnapshotError::Corrupt(format!("stored object: {what}"))
}

fn zstd_error(what: &str) -> SnapshotError {
    SnapshotError::Write(format!("zstd: {what}"))
}

fn zstd_code(code: usize) -> SnapshotError {
    zstd_error(zstd_safe::get_error_name(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(i: usize) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i:05}","namespace":"ns-{}","resourceVersion":"{}"}},"data":{{"key":"value number {i} of many values"}}}}"#,
            i % 7,
            1000 + i,
        )
        .into_bytes()
    }

    /// Values round-trip before and after the dictionary, and with it they
    /// are smaller; a reader of a file without the dictionary refuses the
    /// values that need it.
    #[test]
    fn values_round_trip_before_and_after_the_dictionary() {
        let mut w = ValueWriter::new(None).unwrap();
        let before = w.encode(&object(0)).unwrap();
        assert_eq!(before[0], ZSTD);
        assert!(!w.wants_dictionary(DICTIONARY_SAMPLES - 1));
        assert!(w.wants_dictionary(DICTIONARY_SAMPLES));
        let samples: Vec<Vec<u8>> = (0..DICTIONARY_SAMPLES).map(object).collect();
        let refs: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
        let dictionary = w.learn(&refs).expect("learned");
        assert!(!w.wants_dictionary(10_000));
        let after = w.encode(&object(1)).unwrap();
        assert_eq!(after[0], ZSTD_DICTIONARY);
        assert!(
            after.len() < before.len(),
            "{} vs {}",
            after.len(),
            before.len()
        );
        let mut r = ValueReader::new(Some(&dictionary)).unwrap();
        assert_eq!(r.json(&before).unwrap(), object(0).as_slice());
        assert_eq!(r.json(&after).unwrap(), object(1).as_slice());
        let mut without = ValueReader::new(None).unwrap();
        assert_eq!(without.json(&before).unwrap(), object(0).as_slice());
        assert!(matches!(
            without.json(&after),
            Err(SnapshotError::Corrupt(_))
        ));
    }

    /// Damaged values are `Corrupt`, never a panic: empty, an unknown tag,
    /// a cut or flipped frame, an implausible size.
    #[test]
    fn damaged_values_are_corrupt() {
        let mut w = ValueWriter::new(None).unwrap();
        let good = w.encode(&object(3)).unwrap();
        let mut r = ValueReader::new(None).unwrap();
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        let mut huge = vec![ZSTD];
        // A frame header claiming 2^40 bytes of content.
        huge.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 0xc0]);
        huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let damaged: [&[u8]; 5] = [&[], &[0, 1, 2], &good[..good.len() / 2], &flipped, &huge];
        for value in damaged {
            assert!(
                matches!(r.json(value), Err(SnapshotError::Corrupt(_))),
                "{value:?}"
            );
        }
        assert_eq!(r.json(&good).unwrap(), object(3).as_slice());
    }
}
