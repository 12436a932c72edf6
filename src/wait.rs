//! Waiting for a sync state, bounded by a timeout and by the informer's stop.

use std::time::Duration;

use kinformer_actors::reflector::RequestFailure;
use tokio::sync::watch;

use crate::error::InformerError;

/// Waits until `synced` holds, at most `timeout`; `Stopped` once the informer
/// stopped first, `gone` when `synced` closed (its owner ended).
pub(crate) async fn wait_synced(
    mut synced: watch::Receiver<bool>,
    mut stopped: watch::Receiver<bool>,
    timeout: Duration,
    gone: InformerError,
    last_failure: impl FnOnce() -> Option<RequestFailure>,
) -> Result<(), InformerError> {
    let wait = async {
        tokio::select! {
            biased;
            r = synced.wait_for(|s| *s) => r.map(|_| ()).map_err(|_| gone),
            _ = stopped.wait_for(|s| *s) => Err(InformerError::Stopped),
        }
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| InformerError::SyncTimeout {
            waited: timeout,
            last_failure: last_failure(),
        })?
}
