//! Where the Reflector loop puts what it lists and watches: the DeltaFIFO
//! in an informer, a recorder in tests.

use std::future::Future;
use std::sync::Arc;

use actix::Addr;

use crate::delta_fifo::{DeltaFifo, Enqueue, FifoClosed, ListPage, Progress, Replace, WatchDelta};

/// The receiving end of the Reflector loop. Each call completes once the
/// sink has room (the DeltaFIFO answers only then): while it waits, the loop
/// reads nothing more from the server, and TCP pushes back on it.
pub trait Sink<K> {
    /// One page of a list, handed over while the list goes on; a
    /// `replace` with `continues` ends the list. `first`: its first page
    /// (pages of a list that failed before are void).
    fn list_page(
        &self,
        objects: Vec<Arc<K>>,
        first: bool,
    ) -> impl Future<Output = Result<(), FifoClosed>>;

    /// A list's result: every object (after its pages when `continues`),
    /// and the list's resourceVersion.
    fn replace(
        &self,
        objects: Vec<Arc<K>>,
        resource_version: String,
        continues: bool,
    ) -> impl Future<Output = Result<(), FifoClosed>>;

    /// A batch of watch events, in order.
    fn enqueue(&self, events: Vec<WatchDelta<K>>) -> impl Future<Output = Result<(), FifoClosed>>;

    /// The watch reached `resource_version` with no change after the last
    /// batch (a bookmark). By default, nothing.
    fn progress(&self, resource_version: String) {
        let _ = resource_version;
    }

    /// One page of a snapshot restored from disk, in place of the first
    /// list's (`first`: its first page). By default, a `list_page`.
    fn restore_page(
        &self,
        objects: Vec<Arc<K>>,
        first: bool,
    ) -> impl Future<Output = Result<(), FifoClosed>> {
        self.list_page(objects, first)
    }

    /// The end of a restored snapshot (after its pages when `continues`):
    /// the cache is the state at `resource_version`. By default, a
    /// `replace`.
    fn restore_end(
        &self,
        resource_version: String,
        continues: bool,
    ) -> impl Future<Output = Result<(), FifoClosed>> {
        self.replace(Vec::new(), resource_version, continues)
    }
}

impl<K: crate::Object> Sink<K> for Addr<DeltaFifo<K>> {
    async fn list_page(&self, objects: Vec<Arc<K>>, first: bool) -> Result<(), FifoClosed> {
        let page = ListPage {
            objects,
            first,
            restored: false,
        };
        self.send(page).await.unwrap_or(Err(FifoClosed))
    }

    async fn replace(
        &self,
        objects: Vec<Arc<K>>,
        resource_version: String,
        continues: bool,
    ) -> Result<(), FifoClosed> {
        let replace = Replace {
            objects,
            resource_version,
            restored: false,
            continues,
        };
        self.send(replace).await.unwrap_or(Err(FifoClosed))
    }

    async fn restore_page(&self, objects: Vec<Arc<K>>, first: bool) -> Result<(), FifoClosed> {
        let page = ListPage {
            objects,
            first,
            restored: true,
        };
        self.send(page).await.unwrap_or(Err(FifoClosed))
    }

    async fn restore_end(
        &self,
        resource_version: String,
        continues: bool,
    ) -> Result<(), FifoClosed> {
        let replace = Replace {
            objects: Vec::new(),
            resource_version,
            restored: true,
            continues,
        };
        self.send(replace).await.unwrap_or(Err(FifoClosed))
    }

    async fn enqueue(&self, events: Vec<WatchDelta<K>>) -> Result<(), FifoClosed> {
        self.send(Enqueue(events)).await.unwrap_or(Err(FifoClosed))
    }

    /// Unanswered: after the last `enqueue`'s answer, so in order after it.
    fn progress(&self, resource_version: String) {
        self.do_send(Progress(resource_version));
    }
}
