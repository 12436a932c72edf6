//! Write-behind compaction for a compact cache: the cache stores each new
//! object decoded ("fresh") and hands it here to be encoded and compressed,
//! on a thread of its own by default, so the Indexer's thread neither
//! serializes nor compresses. The cache installs each result only if the
//! entry is still the one the job was made for (its write number).
//!
//! Jobs in flight are counted here; the cache waits for results when too
//! many are (its back-pressure, `cache::MAX_IN_FLIGHT`). A panicking encoder
//! is an encoding error, never a dead thread.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use super::compact::{CompactError, CompactOptions, Compactor, Compressed};
use crate::key::ObjectKey;

/// Work for the compactor.
pub(crate) enum Job<K> {
    /// Encode and compress `obj`, stored under `key` as write number `seq`.
    Encode {
        key: ObjectKey,
        seq: u64,
        obj: Arc<K>,
    },
    /// Compress `data` (made before the dictionary) again with the dictionary.
    Recompress { key: ObjectKey, data: Compressed },
}

/// A job's result.
pub(crate) enum Done {
    /// `key`'s write number `seq`, compressed (or why not).
    Encoded {
        key: ObjectKey,
        seq: u64,
        data: Result<Compressed, CompactError>,
    },
    /// `key`'s entry `old`, compressed again as `new`.
    Recompressed {
        key: ObjectKey,
        old: Compressed,
        new: Compressed,
    },
}

/// Where the dictionary is, as seen from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DictionaryState {
    /// Still to come: entries compressed now are compressed again later.
    Learning,
    /// Learned: new entries use it.
    Learned,
    /// Given up or not wanted: entries are compressed alone.
    Off,
}

impl DictionaryState {
    fn of(c: &Compactor) -> Self {
        if c.has_dictionary() {
            DictionaryState::Learned
        } else if c.may_learn() {
            DictionaryState::Learning
        } else {
            DictionaryState::Off
        }
    }
}

/// How often an idle compactor thread looks for a dictionary being learned.
const LEARNING_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A callback run when results are ready while the cache is idle.
type Waker = Box<dyn Fn() + Send>;

/// What the compactor's thread shares with the cache.
struct Shared {
    /// A [`DictionaryState`] as `u8`.
    dictionary: AtomicU8,
    /// Set once the waker ran, cleared when the cache takes the results:
    /// one wake per batch of results at most.
    woken: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Shared {
    fn set_dictionary(&self, state: DictionaryState) {
        self.dictionary.store(state as u8, Ordering::Relaxed);
    }

    fn wake(&self) {
        if !self.woken.swap(true, Ordering::AcqRel)
            && let Ok(waker) = self.waker.lock()
            && let Some(w) = waker.as_ref()
        {
            w();
        }
    }
}

enum Runner<K> {
    /// Jobs run in place when submitted; results wait in `done`.
    Inline {
        encode: fn(&K) -> Result<Vec<u8>, String>,
        compactor: Box<Compactor>,
        done: Vec<Done>,
    },
    /// Jobs run on the compactor's thread.
    Thread {
        jobs: mpsc::Sender<Vec<Job<K>>>,
        done: mpsc::Receiver<Vec<Done>>,
    },
}

/// The cache's side of the compactor.
pub(crate) struct Compaction<K> {
    runner: Runner<K>,
    encode: fn(&K) -> Result<Vec<u8>, String>,
    options: CompactOptions,
    shared: Arc<Shared>,
    /// Jobs submitted whose results were not taken yet.
    in_flight: usize,
}

impl<K: Send + Sync + 'static> Compaction<K> {
    /// A compactor encoding with `encode`, on its own thread when
    /// `options.background`, else in place.
    pub(crate) fn new(
        encode: fn(&K) -> Result<Vec<u8>, String>,
        options: CompactOptions,
    ) -> Result<Self, CompactError> {
        let mut compactor = Box::new(Compactor::new(options)?);
        let shared = Arc::new(Shared {
            dictionary: AtomicU8::new(DictionaryState::of(&compactor) as u8),
            woken: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let runner = if options.background {
            let (jobs, job_rx) = mpsc::channel::<Vec<Job<K>>>();
            let (done_tx, done) = mpsc::channel();
            let thread_shared = shared.clone();
            std::thread::Builder::new()
                .name("kinformer-compactor".into())
                .spawn(move || {
                    // Ends when the cache (the jobs' sender) is dropped.
                    loop {
                        // While a dictionary is learned, wake up to take it
                        // even with no job: the entries compressed without it
                        // are compressed again once the cache hears of it.
                        let batch = if compactor.is_learning() {
                            match job_rx.recv_timeout(LEARNING_POLL) {
                                Ok(batch) => batch,
                                Err(mpsc::RecvTimeoutError::Timeout) => {
                                    compactor.poll_learning();
                                    if !compactor.is_learning() {
                                        thread_shared
                                            .set_dictionary(DictionaryState::of(&compactor));
                                        thread_shared.wake();
                                    }
                                    continue;
                                }
                                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                            }
                        } else {
                            match job_rx.recv() {
                                Ok(batch) => batch,
                                Err(_) => break,
                            }
                        };
                        let out: Vec<Done> = batch
                            .into_iter()
                            .map(|job| run(encode, &mut compactor, job))
                            .collect();
                        thread_shared.set_dictionary(DictionaryState::of(&compactor));
                        if done_tx.send(out).is_err() {
                            break;
                        }
                        thread_shared.wake();
                    }
                })
                .map_err(|e| CompactError::Thread(e.to_string()))?;
            Runner::Thread { jobs, done }
        } else {
            Runner::Inline {
                encode,
                compactor,
                done: Vec::new(),
            }
        };
        Ok(Compaction {
            runner,
            encode,
            options,
            shared,
            in_flight: 0,
        })
    }

    /// Whether jobs run in place (results ready at once).
    pub(crate) fn is_inline(&self) -> bool {
        matches!(self.runner, Runner::Inline { .. })
    }

    /// Jobs submitted whose results were not taken yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Takes a dictionary learned meanwhile, for jobs run in place (the
    /// compactor's thread does it itself).
    pub(crate) fn poll(&mut self) {
        if let Runner::Inline { compactor, .. } = &mut self.runner
            && compactor.is_learning()
        {
            compactor.poll_learning();
            self.shared.set_dictionary(DictionaryState::of(compactor));
        }
    }

    /// The dictionary's state as of the last job run.
    pub(crate) fn dictionary(&self) -> DictionaryState {
        match self.shared.dictionary.load(Ordering::Relaxed) {
            0 => DictionaryState::Learning,
            1 => DictionaryState::Learned,
            _ => DictionaryState::Off,
        }
    }

    /// Runs `waker` whenever results become ready on the compactor's thread
    /// after the cache last took them (not for inline jobs).
    pub(crate) fn on_results(&self, waker: impl Fn() + Send + 'static) {
        if let Ok(mut w) = self.shared.waker.lock() {
            *w = Some(Box::new(waker));
        }
    }

    /// Hands `jobs` to the compactor.
    pub(crate) fn submit(&mut self, jobs: Vec<Job<K>>) {
        if jobs.is_empty() {
            return;
        }
        self.in_flight += jobs.len();
        match &mut self.runner {
            Runner::Inline {
                encode,
                compactor,
                done,
            } => {
                done.extend(jobs.into_iter().map(|job| run(*encode, compactor, job)));
                self.shared.set_dictionary(DictionaryState::of(compactor));
            }
            Runner::Thread { jobs: tx, .. } => {
                if let Err(mpsc::SendError(jobs)) = tx.send(jobs) {
                    // The thread is gone (it does not end while the cache
                    // lives): run in place from now on.
                    self.fall_back_inline(jobs);
                }
            }
        }
    }

    /// The results ready; with `wait`, blocks for at least one batch while
    /// any job is in flight. Without `wait`, re-arms the wake-up: a swap,
    /// so that either this call sees a result sent before it, or the thread
    /// sees the flag cleared and wakes the cache (a waiting call is always
    /// followed by one without).
    pub(crate) fn take(&mut self, wait: bool) -> Vec<Done> {
        if !wait {
            self.shared.woken.swap(false, Ordering::AcqRel);
        }
        let out = match &mut self.runner {
            Runner::Inline { done, .. } => std::mem::take(done),
            Runner::Thread { done, .. } => {
                let mut out = Vec::new();
                if wait && self.in_flight > 0 {
                    match done.recv() {
                        Ok(batch) => out = batch,
                        Err(_) => {
                            self.fall_back_inline(Vec::new());
                            return Vec::new();
                        }
                    }
                }
                // Most takes find one batch: it is handed on as it came.
                while let Ok(batch) = done.try_recv() {
                    if out.is_empty() {
                        out = batch;
                    } else {
                        out.extend(batch);
                    }
                }
                out
            }
        };
        self.in_flight -= out.len().min(self.in_flight);
        out
    }

    /// The compactor's thread is gone: jobs lost with it leave their
    /// entries fresh (decoded, still correct); `jobs` and later ones run in
    /// place.
    fn fall_back_inline(&mut self, jobs: Vec<Job<K>>) {
        tracing::error!("compact cache: the compactor thread is gone; compressing in place");
        // Results it sent before it ended are kept.
        let mut sent = Vec::new();
        if let Runner::Thread { done, .. } = &self.runner {
            while let Ok(batch) = done.try_recv() {
                sent.extend(batch);
            }
        }
        self.in_flight = sent.len();
        match Compactor::new(self.options) {
            Ok(c) => {
                self.runner = Runner::Inline {
                    encode: self.encode,
                    compactor: Box::new(c),
                    done: sent,
                };
                self.submit(jobs);
            }
            Err(e) => {
                // No compactor at all: the objects stay decoded (correct,
                // larger); later jobs are dropped the same way, unlogged.
                tracing::error!(error = %e, "compact cache: objects stay decoded");
                self.runner = Runner::Inline {
                    encode: self.encode,
                    compactor: Box::new(Compactor::disabled(self.options)),
                    done: sent,
                };
            }
        }
    }
}

/// Runs one job; a panicking encoder is an encoding error.
fn run<K>(encode: fn(&K) -> Result<Vec<u8>, String>, c: &mut Compactor, job: Job<K>) -> Done {
    match job {
        Job::Encode { key, seq, obj } => {
            let json = std::panic::catch_unwind(AssertUnwindSafe(|| encode(&obj)))
                .unwrap_or_else(|_| Err("the encoder panicked".to_owned()));
            let data = json
                .map_err(CompactError::Encode)
                .and_then(|json| c.compress(&json));
            Done::Encoded { key, seq, data }
        }
        Job::Recompress { key, data } => {
            match data.decompress().and_then(|json| c.compress(&json)) {
                Ok(new) => Done::Recompressed {
                    key,
                    old: data,
                    new,
                },
                // Kept as it is: it still decodes.
                Err(_) => Done::Recompressed {
                    key,
                    new: data.clone(),
                    old: data,
                },
            }
        }
    }
}
