//! The store's side of the data directory: committed writes go to the writer thread
//! of [`persist`](crate::persist) through a channel, never blocking the store's lock.

use std::sync::Arc;
use std::sync::mpsc;

use parking_lot::Mutex;

use crate::history::Event;

/// What the store's side sends the data dir's writer thread.
pub(crate) enum Message {
    Event {
        group: String,
        resource: String,
        event: Arc<Event>,
    },
    /// Flush and fsync, then answer.
    Sync(mpsc::Sender<()>),
    /// Flush, fsync, release the directory and end.
    Close(mpsc::Sender<()>),
}

/// The store's side of the log writer: commits send their events here.
#[derive(Debug)]
pub struct Journal {
    tx: Mutex<Option<mpsc::Sender<Message>>>,
}

impl Journal {
    /// The store's side of a writer thread reading `tx`'s other end.
    pub(crate) fn new(tx: mpsc::Sender<Message>) -> Self {
        Journal {
            tx: Mutex::new(Some(tx)),
        }
    }

    /// Queue a committed write (called under the store's lock: never blocks).
    pub(crate) fn append(&self, group: &str, resource: &str, event: &Arc<Event>) {
        if let Some(tx) = self.tx.lock().as_ref() {
            let sent = tx.send(Message::Event {
                group: group.to_string(),
                resource: resource.to_string(),
                event: event.clone(),
            });
            if sent.is_err() {
                tracing::error!("the data dir writer has stopped; this write is not persisted");
            }
        }
    }

    fn call(&self, make: impl FnOnce(mpsc::Sender<()>) -> Message, close: bool) {
        let tx = if close {
            self.tx.lock().take()
        } else {
            self.tx.lock().clone()
        };
        if let Some(tx) = tx {
            let (ack_tx, ack_rx) = mpsc::channel();
            if tx.send(make(ack_tx)).is_ok() {
                let _ = ack_rx.recv();
            }
        }
    }

    /// Wait until every write queued so far is on disk.
    pub fn sync(&self) {
        self.call(Message::Sync, false);
    }

    /// Write what is queued, release the directory and stop persisting.
    pub fn close(&self) {
        self.call(Message::Close, true);
    }
}
