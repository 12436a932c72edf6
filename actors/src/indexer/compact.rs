//! The compact cache's encoding: each object is stored as its JSON,
//! compressed with zstd, and decoded again when it is read.
//!
//! Why zstd with a trained dictionary: objects of one informer share most of
//! their field names and many values, which a dictionary learned from the
//! first objects captures; each object alone is too small for a compressor
//! to find that. Measured on the benchmark's 6.9 KB Pods (BENCHMARKS.md,
//! "Compact cache"): lz4 2749 B per Pod, zstd-3 1863 B, zstd-3 with a 32 KiB
//! dictionary 230 B, and it compresses and decompresses faster than without.
//!
//! `Compactor` is the writer's side (it learns the dictionary);
//! `Compressed` decompresses on any thread with a per-thread context.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use crate::old::{Deferred, OldObject, UndecodableObject};

/// How a compact cache encodes its objects; see `InformerBuilder::compact_cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactOptions {
    level: i32,
    train_after: usize,
    dictionary_size: usize,
    pub(crate) recent: usize,
    pub(crate) background: bool,
}

impl Default for CompactOptions {
    /// zstd level 3, a 32 KiB dictionary learned from the first 256 objects
    /// (on the benchmark's Pods: 236 B per Pod from 100 samples, 230 B from
    /// 200 or 1000; learning takes 34, 48 and 208 ms), the last 1024 objects
    /// written kept decoded, compression on a thread of the cache's own.
    fn default() -> Self {
        CompactOptions {
            level: 3,
            train_after: 256,
            dictionary_size: 32 * 1024,
            recent: 1024,
            background: true,
        }
    }
}

impl CompactOptions {
    /// The defaults: zstd level 3 and a dictionary (see [`Default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The zstd compression level (1–19; higher is smaller and slower to
    /// write, reads are as fast).
    pub fn level(mut self, level: i32) -> Self {
        self.level = level.clamp(1, 19);
        self
    }

    /// Learns a dictionary of `size` bytes from the first `objects` objects
    /// stored (or fewer: the samples hold at most 100 × `size` bytes, each
    /// at most `size`); objects stored before it exists are compressed
    /// without one.
    pub fn dictionary(mut self, objects: usize, size: usize) -> Self {
        self.train_after = objects.max(8);
        self.dictionary_size = size.max(256);
        self
    }

    /// No dictionary: each object compressed alone (about 8× larger for Pods).
    pub fn without_dictionary(mut self) -> Self {
        self.train_after = 0;
        self
    }

    /// Keeps the last `objects` objects written decoded (default 1024):
    /// updating or reading them neither decodes nor encodes, at the memory
    /// of that many decoded objects. 0 compresses every object as soon as
    /// its job runs.
    pub fn recent(mut self, objects: usize) -> Self {
        self.recent = objects;
        self
    }

    /// The objects kept decoded ([`recent`](Self::recent)).
    pub fn recent_objects(&self) -> usize {
        self.recent
    }

    /// Where objects are compressed: on a thread of the cache's own (`true`,
    /// the default: the Indexer's thread only stores them), or on the
    /// Indexer's thread as they leave the recent objects (`false`: no extra
    /// thread, the Indexer's thread pays about 2× its CPU per update).
    pub fn background(mut self, background: bool) -> Self {
        self.background = background;
        self
    }
}

/// A compact entry could not be written or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    /// The object did not serialize.
    #[error("object does not encode: {0}")]
    Encode(String),
    /// The stored bytes did not decode into the object type.
    #[error("cached object does not decode: {0}")]
    Decode(String),
    /// zstd refused the data.
    #[error("zstd: {0}")]
    Zstd(&'static str),
    /// An object of 4 GiB or more.
    #[error("object of {0} bytes is too large for the compact cache")]
    TooLarge(usize),
    /// The compactor's thread did not start.
    #[error("compactor thread: {0}")]
    Thread(String),
}

/// How objects of type `K` become JSON and back: plain function pointers, set
/// where `K: Serialize` is known, so the cache needs no such bound.
pub struct Codec<K> {
    /// Serializes an object.
    pub encode: fn(&K) -> Result<Vec<u8>, String>,
    /// Deserializes what `encode` produced.
    pub decode: fn(&[u8]) -> Result<K, String>,
    /// Reads that found an undecodable entry (never expected: the cache
    /// encoded it itself; counted, logged, and the read sees no object).
    pub(crate) decode_errors: AtomicU64,
    pub(crate) options: CompactOptions,
}

impl<K> fmt::Debug for Codec<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<K> Codec<K> {
    /// A codec from its two functions.
    pub fn new(
        options: CompactOptions,
        encode: fn(&K) -> Result<Vec<u8>, String>,
        decode: fn(&[u8]) -> Result<K, String>,
    ) -> Self {
        Codec {
            encode,
            decode,
            decode_errors: AtomicU64::new(0),
            options,
        }
    }

    /// JSON through serde: serde_json writes, simd-json reads.
    pub fn json(options: CompactOptions) -> Self
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
    {
        Codec::new(
            options,
            |o| serde_json::to_vec(o).map_err(|e| e.to_string()),
            |b| {
                thread_local! {
                    static DECODER: RefCell<crate::reflector::decode::ObjectDecoder> =
                        RefCell::default();
                }
                DECODER.with_borrow_mut(|d| {
                    d.decode(b, Default::default())
                        .map_err(|e: serde_json::Error| e.to_string())
                })
            },
        )
    }

    /// Decodes one entry; a failure is counted and logged with its key.
    pub(crate) fn load(&self, key: &dyn fmt::Display, entry: &CompactEntry) -> Option<Arc<K>> {
        self.load_or_count(key, entry).ok()
    }

    /// [`load`](Self::load) with the reason of a failure.
    fn load_or_count(
        &self,
        key: &dyn fmt::Display,
        entry: &CompactEntry,
    ) -> Result<Arc<K>, CompactError> {
        self.try_load(entry).map(Arc::new).inspect_err(|e| {
            self.decode_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(%key, error = %e, "compact cache entry does not decode");
        })
    }

    /// Decodes one entry.
    pub(crate) fn try_load(&self, entry: &CompactEntry) -> Result<K, CompactError> {
        // The JSON goes into a buffer kept per thread: a fresh one per
        // object is an allocation of over 1 KB, and each such one makes
        // glibc consolidate its fastbins (a third of an update's cost in
        // the indexer benchmark's compact rows).
        thread_local! {
            static JSON: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        let decoded = JSON.with_borrow_mut(|json| {
            entry.data.decompress_into(json)?;
            // A decoder that panics (a user's codec, a `Deserialize` impl)
            // reads as an undecodable entry, as the encoder's panics do.
            let decode = self.decode;
            let decoded = std::panic::catch_unwind(|| decode(json))
                .unwrap_or_else(|panic| {
                    Err(format!(
                        "the decoder panicked: {}",
                        crate::panic::panic_message(panic.as_ref())
                    ))
                })
                .map_err(CompactError::Decode);
            if json.capacity() > KEEP_JSON_BUFFER {
                *json = Vec::new();
            }
            decoded
        });
        if decoded.is_err() {
            entry.undecodable.store(true, Ordering::Relaxed);
        }
        decoded
    }
}

/// An update's old state as a compact cache keeps it: the compressed entry,
/// decoded on the first read ([`OldObject::get`](crate::OldObject::get)).
pub(crate) struct CompressedOld<K> {
    key: crate::key::ObjectKey,
    entry: Arc<CompactEntry>,
    codec: Arc<Codec<K>>,
    decoded: std::sync::OnceLock<Result<Arc<K>, UndecodableObject>>,
}

impl<K: Send + Sync + 'static> CompressedOld<K> {
    /// `key`'s entry as an event's old state.
    pub(crate) fn old_object(
        key: crate::key::ObjectKey,
        entry: Arc<CompactEntry>,
        codec: Arc<Codec<K>>,
    ) -> OldObject<K> {
        OldObject::deferred(Arc::new(CompressedOld {
            key,
            entry,
            codec,
            decoded: std::sync::OnceLock::new(),
        }))
    }
}

impl<K: Send + Sync> Deferred<K> for CompressedOld<K> {
    fn get(&self) -> Result<Arc<K>, UndecodableObject> {
        self.decoded
            .get_or_init(|| {
                self.codec
                    .load_or_count(&self.key, &self.entry)
                    .map_err(|e| UndecodableObject {
                        key: self.key.to_string(),
                        reason: e.to_string(),
                    })
            })
            .clone()
    }

    fn decoded(&self) -> Option<Arc<K>> {
        self.decoded.get().and_then(|r| r.as_ref().ok().cloned())
    }

    fn resource_version(&self) -> Option<&str> {
        self.entry.resource_version.as_deref()
    }
}

/// A thread's decompression buffer is let go after an object larger than this.
const KEEP_JSON_BUFFER: usize = 256 << 10;

/// A learned dictionary, prepared for both directions.
struct Dictionary {
    compress: CDict<'static>,
    decompress: DDict<'static>,
}

/// One object's compressed JSON.
#[derive(Clone)]
pub(crate) struct Compressed {
    dictionary: Option<Arc<Dictionary>>,
    raw_len: u32,
    bytes: Box<[u8]>,
}

impl Compressed {
    /// Heap bytes it holds (the dictionary is shared, not counted).
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }

    /// Whether both hold the same bytes (so the same object).
    pub(crate) fn same_as(&self, other: &Compressed) -> bool {
        self.bytes == other.bytes
    }

    /// Whether it was compressed with a dictionary.
    pub(crate) fn has_dictionary(&self) -> bool {
        self.dictionary.is_some()
    }

    /// The JSON back.
    pub(crate) fn decompress(&self) -> Result<Vec<u8>, CompactError> {
        let mut out = Vec::new();
        self.decompress_into(&mut out)?;
        Ok(out)
    }

    /// The JSON back, into `out` (cleared first).
    pub(crate) fn decompress_into(&self, out: &mut Vec<u8>) -> Result<(), CompactError> {
        out.clear();
        thread_local! {
            static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
        }
        DCTX.with_borrow_mut(|slot| {
            if slot.is_none() {
                *slot = DCtx::try_create();
            }
            let dctx = slot
                .as_mut()
                .ok_or(CompactError::Zstd("no decompression context"))?;
            out.reserve(self.raw_len as usize);
            let written = match &self.dictionary {
                Some(d) => dctx.decompress_using_ddict(out, &self.bytes, &d.decompress),
                None => dctx.decompress(out, &self.bytes),
            }
            .map_err(|code| CompactError::Zstd(zstd_safe::get_error_name(code)))?;
            if written != self.raw_len as usize {
                return Err(CompactError::Zstd("decompressed size differs"));
            }
            Ok(())
        })
    }
}

/// One cached object in compact form, with what the cache needs without
/// decoding it: its resourceVersion (to tell a resync from a change) and
/// its values in every index, by index slot.
pub(crate) struct CompactEntry {
    pub(crate) data: Compressed,
    pub(crate) resource_version: Option<Box<str>>,
    pub(crate) index_values: Box<[Box<[String]>]>,
    /// Set by the first read that failed to decode it (any thread): such an
    /// entry is replaced by the next upsert, whatever its resourceVersion.
    pub(crate) undecodable: AtomicBool,
}

impl CompactEntry {
    /// Heap bytes of the entry, roughly (compressed data, version, index values).
    pub(crate) fn size(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.data.size()
            + self.resource_version.as_ref().map_or(0, |v| v.len())
            + self
                .index_values
                .iter()
                .flat_map(|vs| vs.iter())
                .map(|v| v.len() + std::mem::size_of::<String>())
                .sum::<usize>()
    }
}

/// The writer's side: compresses, and learns the dictionary from the first
/// objects. Invariant: `samples` is empty once learning has started
/// (`learning` is set), the dictionary is learned, or learning is off.
pub(crate) struct Compactor {
    options: CompactOptions,
    /// `None` only in a [`disabled`](Self::disabled) compactor.
    cctx: Option<CCtx<'static>>,
    dictionary: Option<Arc<Dictionary>>,
    samples: Vec<Vec<u8>>,
    /// Their bytes: learning starts at [`SAMPLES_PER_DICTIONARY_BYTE`] ×
    /// the dictionary's size, if not at `train_after` samples before.
    sample_bytes: usize,
    /// The dictionary being learned on another thread.
    learning: Option<std::sync::mpsc::Receiver<Result<Dictionary, String>>>,
}

impl fmt::Debug for Compactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compactor")
            .field("options", &self.options)
            .field("dictionary", &self.dictionary.is_some())
            .finish_non_exhaustive()
    }
}

impl Compactor {
    pub(crate) fn new(options: CompactOptions) -> Result<Self, CompactError> {
        Ok(Compactor {
            options,
            cctx: Some(CCtx::try_create().ok_or(CompactError::Zstd("no compression context"))?),
            dictionary: None,
            samples: Vec::new(),
            sample_bytes: 0,
            learning: None,
        })
    }

    /// A compactor that refuses every object (zstd gave no context): the
    /// cache then keeps them decoded, counted.
    pub(crate) fn disabled(options: CompactOptions) -> Self {
        Compactor {
            options: options.without_dictionary(),
            cctx: None,
            dictionary: None,
            samples: Vec::new(),
            sample_bytes: 0,
            learning: None,
        }
    }

    /// Whether the dictionary is learned.
    pub(crate) fn has_dictionary(&self) -> bool {
        self.dictionary.is_some()
    }

    /// Whether a dictionary is still to come (learning neither done nor off).
    pub(crate) fn may_learn(&self) -> bool {
        self.dictionary.is_none() && self.options.train_after != 0
    }

    /// Compresses one object's JSON.
    pub(crate) fn compress(&mut self, json: &[u8]) -> Result<Compressed, CompactError> {
        let raw_len = u32::try_from(json.len()).map_err(|_| CompactError::TooLarge(json.len()))?;
        self.learn(json);
        let cctx = self
            .cctx
            .as_mut()
            .ok_or(CompactError::Zstd("no compression context"))?;
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(json.len()));
        match &self.dictionary {
            Some(d) => cctx.compress_using_cdict(&mut out, json, &d.compress),
            None => cctx.compress(&mut out, json, self.options.level),
        }
        .map_err(|code| CompactError::Zstd(zstd_safe::get_error_name(code)))?;
        Ok(Compressed {
            dictionary: self.dictionary.clone(),
            raw_len,
            bytes: out.into_boxed_slice(),
        })
    }

    /// Keeps `json` as a sample until there are enough, then learns the
    /// dictionary on a thread of its own (about 180 ms for 1000 Pods: not on
    /// the Indexer's thread) and uses it from the first object after it is
    /// ready. A failure to learn (too few distinct samples) turns learning
    /// off: objects are then compressed alone.
    fn learn(&mut self, json: &[u8]) {
        if self.dictionary.is_some() || self.options.train_after == 0 {
            return;
        }
        if self.learning.is_some() {
            self.poll_learning();
            return;
        }
        let sample = dictionary_sample(json, self.options.dictionary_size).into_owned();
        self.sample_bytes += sample.len();
        self.samples.push(sample);
        let budget = SAMPLES_PER_DICTIONARY_BYTE * self.options.dictionary_size;
        if self.samples.len() < self.options.train_after && self.sample_bytes < budget {
            return;
        }
        self.sample_bytes = 0;
        let samples = std::mem::take(&mut self.samples);
        let (size, level) = (self.options.dictionary_size, self.options.level);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("kinformer-dictionary".into())
            .spawn(move || {
                let _ = tx.send(learn_dictionary(&samples, size, level));
            });
        match spawned {
            Ok(_) => self.learning = Some(rx),
            Err(e) => self.stop_learning(&e.to_string()),
        }
    }

    /// Whether a dictionary is being learned on its thread right now.
    pub(crate) fn is_learning(&self) -> bool {
        self.learning.is_some()
    }

    /// Takes the dictionary if its thread has finished (or learning failed).
    pub(crate) fn poll_learning(&mut self) {
        let Some(learning) = &self.learning else {
            return;
        };
        match learning.try_recv() {
            Ok(Ok(d)) => {
                tracing::debug!("compact cache dictionary learned");
                self.dictionary = Some(Arc::new(d));
                self.learning = None;
            }
            Ok(Err(why)) => self.stop_learning(&why),
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                self.stop_learning("the learning thread ended")
            }
        }
    }

    fn stop_learning(&mut self, why: &str) {
        tracing::warn!(
            why,
            "compact cache dictionary not learned; objects compressed alone"
        );
        self.options.train_after = 0;
        self.learning = None;
    }
}

/// The samples a dictionary of `size` bytes is learned from hold at most
/// this many times `size` bytes in all (zstd's guidance: about 100×).
pub const SAMPLES_PER_DICTIONARY_BYTE: usize = 100;

/// What of one object's JSON is kept as a dictionary sample: all of it up
/// to `cap` bytes, else its head and its tail (the field names and the
/// metadata around a large payload: a Secret's `data` comes first), so
/// 1 MB objects do not hold 1 MB each while a dictionary is learned.
pub fn dictionary_sample(json: &[u8], cap: usize) -> std::borrow::Cow<'_, [u8]> {
    if json.len() <= cap {
        return std::borrow::Cow::Borrowed(json);
    }
    let head = cap / 2;
    std::borrow::Cow::Owned([&json[..head], &json[json.len() - (cap - head)..]].concat())
}

/// Learns a dictionary of at most `size` bytes from `samples`.
fn learn_dictionary(samples: &[Vec<u8>], size: usize, level: i32) -> Result<Dictionary, String> {
    let dict = zstd::dict::from_samples(samples, size).map_err(|e| e.to_string())?;
    CDict::try_create(&dict, level)
        .zip(DDict::try_create(&dict))
        .map(|(compress, decompress)| Dictionary {
            compress,
            decompress,
        })
        .ok_or_else(|| "zstd did not load the dictionary".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(i: usize) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i:05}","namespace":"ns-{}","resourceVersion":"{}","labels":{{"app":"web-{}"}}}},"data":{{"key":"value number {i} of many values"}}}}"#,
            i % 7,
            1000 + i,
            i % 13
        )
        .into_bytes()
    }

    #[test]
    fn round_trips_before_and_after_the_dictionary() {
        let mut c = Compactor::new(CompactOptions::new().dictionary(50, 4096)).unwrap();
        let mut stored: Vec<(Vec<u8>, Compressed)> = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        // The dictionary is learned on another thread: compress until it is used.
        while stored.last().is_none_or(|(_, z)| z.dictionary.is_none()) {
            assert!(std::time::Instant::now() < deadline, "no dictionary");
            let json = object(stored.len());
            let z = c.compress(&json).unwrap();
            stored.push((json, z));
            if stored.len() > 50 {
                std::thread::yield_now();
            }
        }
        assert!(c.has_dictionary());
        assert!(stored[0].1.dictionary.is_none());
        for (json, z) in &stored {
            assert_eq!(&z.decompress().unwrap(), json);
        }
        let last = &stored.last().unwrap().1;
        assert!(
            last.size() < stored[0].1.size(),
            "the dictionary makes entries smaller: {} vs {}",
            last.size(),
            stored[0].1.size()
        );
    }

    #[test]
    fn decompresses_on_other_threads() {
        let mut c = Compactor::new(CompactOptions::new().dictionary(20, 2048)).unwrap();
        let entries: Vec<Compressed> = (0..40).map(|i| c.compress(&object(i)).unwrap()).collect();
        let back = std::thread::spawn(move || {
            entries
                .iter()
                .map(|z| z.decompress().unwrap())
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        assert_eq!(back[39], object(39));
    }

    #[test]
    fn loads_on_one_thread_share_a_buffer_whatever_their_sizes() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let codec = Codec::<ConfigMap>::json(CompactOptions::new().without_dictionary());
        let mut c = Compactor::new(CompactOptions::new().without_dictionary()).unwrap();
        let mut entry = |name: &str, value: String| {
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                data: Some([("k".to_owned(), value)].into()),
                ..Default::default()
            };
            let json = serde_json::to_vec(&cm).unwrap();
            let entry = CompactEntry {
                data: c.compress(&json).unwrap(),
                resource_version: None,
                index_values: Box::new([]),
                undecodable: AtomicBool::new(false),
            };
            (cm, entry)
        };
        // Small, larger than the kept buffer (so it is let go), small again,
        // then a corrupt one between two good ones.
        let objects = [
            entry("a", "x".repeat(10)),
            entry("b", "y".repeat(KEEP_JSON_BUFFER + 1000)),
            entry("c", "z".repeat(3)),
        ];
        for (cm, e) in &objects {
            assert_eq!(&codec.try_load(e).unwrap(), cm);
        }
        let mut broken = entry("d", "w".repeat(50)).1;
        broken.data.bytes = Box::new([1, 2, 3]);
        assert!(matches!(
            codec.try_load(&broken),
            Err(CompactError::Zstd(_))
        ));
        assert_eq!(&codec.try_load(&objects[0].1).unwrap(), &objects[0].0);
    }

    #[test]
    fn corrupt_bytes_are_an_error_not_a_panic() {
        let mut c = Compactor::new(CompactOptions::new().without_dictionary()).unwrap();
        let mut z = c.compress(&object(1)).unwrap();
        let mut bytes = z.bytes.to_vec();
        let mid = bytes.len() / 2;
        bytes.truncate(mid);
        z.bytes = bytes.into_boxed_slice();
        assert!(matches!(z.decompress(), Err(CompactError::Zstd(_))));
        z.bytes = Box::new([1, 2, 3]);
        assert!(z.decompress().is_err());
    }

    /// Large objects are sampled by head and tail, and learning starts once
    /// the samples hold 100 × the dictionary's size, not at the count: 1 MB
    /// Secrets never hold 256 MB while a dictionary is learned.
    #[test]
    fn learning_holds_a_bounded_number_of_bytes() {
        let big = |i: usize| {
            format!(
                r#"{{"data":"{}","metadata":{{"name":"s-{i}"}}}}"#,
                "A".repeat(64 * 1024)
            )
            .into_bytes()
        };
        let seventh = big(7);
        let sample = dictionary_sample(&seventh, 1024);
        assert_eq!(sample.len(), 1024);
        assert!(sample.ends_with(br#""s-7"}}"#) && sample.starts_with(br#"{"data":"A"#));
        assert!(matches!(
            dictionary_sample(b"{}", 1024),
            std::borrow::Cow::Borrowed(_)
        ));
        let mut c = Compactor::new(CompactOptions::new().dictionary(256, 1024)).unwrap();
        for i in 0..100 {
            c.compress(&big(i)).unwrap();
            assert!(c.samples.iter().all(|s| s.len() <= 1024));
            assert!(c.samples.iter().map(Vec::len).sum::<usize>() <= 100 * 1024);
        }
        assert!(c.samples.is_empty(), "learning started at the byte budget");
        assert!(c.is_learning() || c.has_dictionary() || c.options.train_after == 0);
    }

    #[test]
    fn learning_from_degenerate_samples_ends_and_round_trips() {
        for sample in [&b""[..], b"{}"] {
            let mut c = Compactor::new(CompactOptions::new().dictionary(8, 64 * 1024)).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            // Learned, or turned off when zstd refuses: never pending forever.
            while c.options.train_after != 0 && !c.has_dictionary() {
                assert!(std::time::Instant::now() < deadline, "learning never ended");
                let z = c.compress(sample).unwrap();
                assert_eq!(z.decompress().unwrap(), sample);
                std::thread::yield_now();
            }
            assert!(c.samples.is_empty() && c.learning.is_none());
            let z = c.compress(b"{\"after\":1}").unwrap();
            assert_eq!(z.decompress().unwrap(), b"{\"after\":1}");
        }
    }
}
