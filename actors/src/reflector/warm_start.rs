//! A warm start: the Reflector's first run hands a snapshot restored from
//! disk to the sink in place of its first list, then watches from the
//! snapshot's resourceVersion. The path it took is reported ([`WarmStart`]).
//!
//! - The server still has the history (the resourceVersion is inside its
//!   watch-cache window): the watch resumes and delivers exactly what
//!   changed meanwhile, with no list request (`resumed`).
//! - It answers 410: the Reflector relists at once (no backoff: an old
//!   snapshot is expected, not a fault), not older than the snapshot, and
//!   the DeltaFIFO's replace diffs the list against the restored cache
//!   (DF-9), so subscribers get only the real changes and tombstones
//!   (`relisted`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// A snapshot being read from disk: the resourceVersion it is the server's
/// state at, and its objects a page at a time as they are read and decoded
/// (a long snapshot is cached while it is read, as a paginated list is).
pub struct Restored<K> {
    /// The resourceVersion the snapshot is consistent at.
    pub resource_version: String,
    /// Its pages, in order, then [`RestoredPage::Complete`].
    pub pages: RestoredPages<K>,
}

/// What a snapshot being read hands on.
#[derive(Debug)]
pub enum RestoredPage<K> {
    /// Its next objects, in order.
    Objects(Vec<Arc<K>>),
    /// The whole snapshot was read: the objects before are its state at
    /// its resourceVersion. The [`Taken`] is answered once the sink took
    /// every page: a reader that is not answered (the Reflector stopped or
    /// restarted first) knows the cache may lack some of them.
    Complete(Taken),
    /// It could not be read on (damaged after its first pages), with why:
    /// what was restored stays, like the pages of a list cut short, and the
    /// Reflector lists. So are pages that end without `Complete`.
    Damaged(String),
}

/// Answers a snapshot's reader that every page reached the sink.
#[derive(Debug, Default)]
pub struct Taken(Option<tokio::sync::oneshot::Sender<()>>);

impl Taken {
    /// A `Taken` and where its answer arrives (an error: not every page
    /// was taken).
    pub fn new() -> (Self, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Taken(Some(tx)), rx)
    }

    /// A `Taken` nobody waits for.
    pub fn unheard() -> Self {
        Taken(None)
    }

    /// Every page reached the sink.
    pub(crate) fn answer(self) {
        if let Some(tx) = self.0 {
            let _ = tx.send(());
        }
    }
}

/// The pages of a [`Restored`] snapshot.
pub type RestoredPages<K> = tokio::sync::mpsc::Receiver<RestoredPage<K>>;

impl<K> Restored<K> {
    /// A snapshot already in memory, as one page (tests and fakes).
    pub fn whole(resource_version: String, objects: Vec<Arc<K>>) -> Self {
        let (tx, pages) = tokio::sync::mpsc::channel(2);
        if !objects.is_empty() {
            let _ = tx.try_send(RestoredPage::Objects(objects));
        }
        let _ = tx.try_send(RestoredPage::Complete(Taken::unheard()));
        Restored {
            resource_version,
            pages,
        }
    }
}

/// Reads the snapshot when the Reflector's first run starts (`None`: there
/// is none, or it was discarded, and the run lists as usual).
pub type RestoreFn<K> =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = Option<Restored<K>>>>> + Send>;

/// How an informer started, as far as a snapshot is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum WarmStart {
    /// No snapshot was used: listed from scratch.
    #[default]
    Cold = 0,
    /// A snapshot was restored; the server has not confirmed it yet.
    Restored = 1,
    /// The watch from the snapshot's resourceVersion delivered an event or a
    /// bookmark: the server had the history, no list was made.
    Resumed = 2,
    /// The server no longer had the history (410): one list, diffed against
    /// the restored cache.
    Relisted = 3,
}

impl WarmStart {
    /// The label value (`cold`, `restored`, `resumed`, `relisted`).
    pub fn as_str(self) -> &'static str {
        match self {
            WarmStart::Cold => "cold",
            WarmStart::Restored => "restored",
            WarmStart::Resumed => "resumed",
            WarmStart::Relisted => "relisted",
        }
    }

    fn of(v: u8) -> Self {
        match v {
            1 => WarmStart::Restored,
            2 => WarmStart::Resumed,
            3 => WarmStart::Relisted,
            _ => WarmStart::Cold,
        }
    }
}

/// The [`WarmStart`] path, readable from any thread.
#[derive(Debug, Default)]
pub struct WarmStartCell(AtomicU8);

impl WarmStartCell {
    /// The path taken so far.
    pub fn get(&self) -> WarmStart {
        WarmStart::of(self.0.load(Ordering::Relaxed))
    }

    pub(crate) fn set(&self, path: WarmStart) {
        self.0.store(path as u8, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Taken` dropped unanswered (the Reflector stopped or restarted
    /// before the sink took every page) tells its reader so.
    #[test]
    fn a_taken_dropped_unanswered_is_heard_as_not_taken() {
        let (taken, mut answered) = Taken::new();
        drop(taken);
        assert!(answered.try_recv().is_err());
        let (taken, mut answered) = Taken::new();
        taken.answer();
        assert_eq!(answered.try_recv(), Ok(()));
        Taken::unheard().answer();
    }

    #[test]
    fn the_path_reads_back_as_set() {
        let cell = WarmStartCell::default();
        assert_eq!(cell.get(), WarmStart::Cold);
        for path in [
            WarmStart::Restored,
            WarmStart::Resumed,
            WarmStart::Relisted,
            WarmStart::Cold,
        ] {
            cell.set(path);
            assert_eq!(cell.get(), path);
            assert!(!path.as_str().is_empty());
        }
    }
}
