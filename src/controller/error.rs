//! Why a controller operation failed.

use std::time::Duration;

use crate::error::InformerError;

/// Why a controller could not start, sync or answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// Subscribing to one of its informers failed (stopped, or no actor runtime).
    #[error("informer: {0}")]
    Informer(#[from] InformerError),
    /// Not every informer synced within `waited`; `unsynced` counts those
    /// that had not (the primary one first in the count).
    #[error("{unsynced} of the controller's informers not synced within {waited:?}")]
    SyncTimeout {
        /// How long it waited.
        waited: Duration,
        /// How many subscriptions had not synced.
        unsynced: usize,
    },
    /// The controller has stopped (or its queue has).
    #[error("the controller has stopped")]
    Stopped,
}
