//! The restore's blocking side: it checks the snapshot file (discarding a
//! bad one), reads and decodes it page by page while the informer caches
//! the pages, then starts the writer on the file.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kinformer_actors::Object;
use kinformer_actors::indexer::SnapshotFeed;
use kinformer_actors::reflector::{RestoredPage, Taken};
use tokio::sync::watch;

use super::compression::ValueWriter;
use super::error::SnapshotError;
use super::identity::SnapshotIdentity;
use super::snapshot_file::{self, Decode, Encode};
use super::stats::PersistStats;
use super::writer::{self, WriterFile};

/// What `InformerBuilder::persist` configured.
pub(crate) struct PersistConfig<K> {
    pub dir: PathBuf,
    pub cluster: String,
    pub encode: Encode<K>,
    pub decode: Decode<K>,
}

/// One restore: the file it reads, where its pages go, and what the writer
/// it starts afterwards (on a fresh file after a discard) takes.
pub(super) struct Restore<K> {
    pub(super) path: PathBuf,
    pub(super) identity: SnapshotIdentity,
    pub(super) config: PersistConfig<K>,
    pub(super) feed: Arc<SnapshotFeed<K>>,
    pub(super) stats: Arc<PersistStats>,
    /// The snapshot's resourceVersion once it is checked, `None`: no usable
    /// snapshot (the Reflector lists).
    pub(super) head: tokio::sync::oneshot::Sender<Option<String>>,
    pub(super) pages: tokio::sync::mpsc::Sender<RestoredPage<K>>,
}

impl<K: Object> Restore<K> {
    /// Restores, then starts the writer. A panic (of the database on a
    /// damaged file outside the checks, say) is reported like a failure:
    /// persistence stops, the informer goes on in memory.
    pub(super) fn run(self, done: watch::Sender<bool>) {
        let (feed, stats) = (self.feed.clone(), self.stats.clone());
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.restore(done)));
        if let Err(panic) = ran {
            let failure = format!(
                "the snapshot restore panicked: {}",
                kinformer_actors::panic::panic_message(panic.as_ref())
            );
            tracing::error!(error = %failure, "persistence off: the informer goes on in memory");
            stats.set_error(failure);
            feed.abandon();
        }
    }

    fn restore(self, done: watch::Sender<bool>) {
        let Restore {
            path,
            identity,
            config,
            feed,
            stats,
            head,
            pages,
        } = self;
        let discard = |e: &SnapshotError| {
            tracing::warn!(file = %path.display(), reason = e.reason(), error = %e, "snapshot discarded; listing");
            stats.discarded.fetch_add(1, Ordering::Relaxed);
            stats.set_discarded(e.to_string());
        };
        let fresh = || snapshot_file::create(&path, &identity);
        let file = match snapshot_file::open(&path, &identity) {
            Ok(Some(opened)) => {
                let _ = head.send(Some(opened.resource_version.clone()));
                let started = std::time::Instant::now();
                // The informer stopped taking pages (the Reflector restarted
                // and lists): the cache lacks the rest, which the file keeps.
                let mut cut_short = false;
                let read = snapshot_file::read_pages(&opened, config.decode, |page| {
                    let taken = pages.blocking_send(RestoredPage::Objects(page)).is_ok();
                    cut_short |= !taken;
                    taken
                });
                match read {
                    // Cut short, the cache lacks some of the file's objects:
                    // the first commit rewrites the file from the cache.
                    Ok(objects) => {
                        // A page sent is only queued: the informer may stop
                        // taking them before the last (its Reflector
                        // restarted), which only its answer tells.
                        let (taken, answered) = Taken::new();
                        let sent = pages.blocking_send(RestoredPage::Complete(taken)).is_ok();
                        cut_short |= !sent || answered.blocking_recv().is_err();
                        tracing::debug!(objects, cut_short, took = ?started.elapsed(), "snapshot read and decoded");
                        Ok((opened.db, opened.dictionary, cut_short))
                    }
                    // Pages may have been handed on: the informer keeps
                    // them, lists, and the new file is written whole.
                    // Counted before the informer hears of it: once it
                    // lists, the discard is in the stats.
                    Err(e) => {
                        discard(&e);
                        let _ = pages.blocking_send(RestoredPage::Damaged(e.to_string()));
                        drop(opened);
                        fresh().map(|db| (db, None, true))
                    }
                }
            }
            Ok(None) => {
                let _ = head.send(None);
                fresh().map(|db| (db, None, true))
            }
            // Never committed (the last process stopped before its first
            // consistent state): no snapshot yet, nothing damaged or discarded.
            Err(SnapshotError::Empty) => {
                let _ = head.send(None);
                tracing::info!(file = %path.display(), "the snapshot was never committed; listing");
                fresh().map(|db| (db, None, true))
            }
            // Someone else has the file: it is theirs, not damaged.
            Err(e @ SnapshotError::Unavailable(_)) => {
                let _ = head.send(None);
                Err(e)
            }
            Err(e) => {
                discard(&e);
                let _ = head.send(None);
                fresh().map(|db| (db, None, true))
            }
        };
        drop(pages);
        if feed.is_closed() {
            return;
        }
        let file = file.and_then(|(db, dictionary, fresh)| {
            Ok(WriterFile {
                db,
                values: ValueWriter::new(dictionary.as_deref())?,
                fresh,
            })
        });
        match file {
            Ok(file) => {
                let encode = config.encode;
                let (writer_feed, writer_stats) = (feed.clone(), stats.clone());
                let spawned = std::thread::Builder::new()
                    .name("kinformer-snapshot".into())
                    .spawn(move || writer::run(file, writer_feed, writer_stats, encode, done));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start the snapshot writer; the informer goes on in memory");
                    stats.set_error(format!("cannot start the snapshot writer: {e}"));
                    feed.abandon();
                }
            }
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "persistence off: the informer goes on in memory");
                stats.set_error(e.to_string());
                feed.abandon();
            }
        }
    }
}
