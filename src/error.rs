//! The errors of the `kinformer` crate's API.

use std::time::Duration;

use kinformer_actors::indexer::{CacheError, CompactError};
use kinformer_actors::reflector::RequestFailure;

/// Why an informer operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// An index operation failed: adding one at start, or (through `?` on a
    /// [`CacheError`]) a query on an index that does not exist.
    #[error("index: {0}")]
    Index(#[from] CacheError),
    /// The informer did not sync in time; with the last failed request, if
    /// any since the last successful list (a bad selector, a missing
    /// permission, an unreachable server: the informer keeps retrying).
    #[error("not synced within {waited:?}{}", last_failure.as_ref().map(|f| format!("; last {f}")).unwrap_or_default())]
    SyncTimeout {
        /// How long it waited.
        waited: Duration,
        /// The last failed list or watch request.
        last_failure: Option<RequestFailure>,
    },
    /// The informer has stopped ([`Informer::stop`](crate::Informer::stop), or every handle dropped).
    #[error("the informer has stopped")]
    Stopped,
    /// The subscriber's actor has stopped, so its listener is gone.
    #[error("the subscriber has stopped")]
    SubscriberGone,
    /// [`InformerBuilder::start`](crate::InformerBuilder::start) or a `subscribe*` call made outside an
    /// actix System or a tokio `LocalSet` (e.g. from a `tokio::spawn`ed task),
    /// for an informer that does not run on its own thread
    /// ([`InformerBuilder::start_on_own_thread`](crate::InformerBuilder::start_on_own_thread));
    /// or [`Informer::subscribe_fn`](crate::Informer::subscribe_fn) outside a tokio runtime.
    #[error(
        "informers and subscriptions must be started inside an actix System or a tokio LocalSet (or use InformerBuilder::start_on_own_thread)"
    )]
    NoActorRuntime,
    /// [`InformerBuilder::start_on_own_thread`](crate::InformerBuilder::start_on_own_thread)
    /// could not start its thread.
    #[error("could not start the informer's thread")]
    Thread(#[source] std::io::Error),
    /// The compact cache could not start (zstd could not allocate a context).
    #[error("compact cache: {0}")]
    Compact(#[source] CompactError),
}
