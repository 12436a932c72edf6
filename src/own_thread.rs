//! An informer on a thread of its own: an actix `System` the informer owns,
//! so tokio code without a `LocalSet` can start it and subscribe to it
//! ([`InformerBuilder::start_on_own_thread`](crate::InformerBuilder::start_on_own_thread)).

use actix::System;
use futures::channel::oneshot;

use crate::error::InformerError;

/// Runs `start` (which starts an informer's actors, and is handed the
/// System they run in) on a new thread running an actix `System`, and
/// answers its outcome once it returned. The informer stops that System
/// once its last handle is dropped.
pub(crate) fn start<T: Send + 'static>(
    start: impl FnOnce(System) -> Result<T, InformerError> + Send + 'static,
) -> Result<T, InformerError> {
    let (started_tx, started) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("kinformer".into())
        .spawn(move || {
            let runner = System::new();
            let started = runner.block_on(async { start(System::current()) });
            let run = started.is_ok();
            // The caller waits for this answer, so it is received.
            let _ = started_tx.send(started);
            if run && let Err(err) = runner.run() {
                tracing::error!(%err, "the informer's actix System ended with an error");
            }
        })
        .map_err(InformerError::Thread)?;
    started.recv().map_err(|_| InformerError::Stopped)?
}

/// Runs `task` on `home` (the informer's own System) and answers its output.
/// If the caller stops waiting first, `unclaimed` gets the output there.
/// `Stopped` when that System is gone.
pub(crate) async fn run_at_home<T, F>(
    home: &System,
    task: impl FnOnce() -> F + Send + 'static,
    unclaimed: impl FnOnce(T) + Send + 'static,
) -> Result<T, InformerError>
where
    T: Send + 'static,
    F: Future<Output = T> + 'static,
{
    let (tx, rx) = oneshot::channel();
    let spawned = home.arbiter().spawn_fn(move || {
        actix::spawn(async move {
            if let Err(output) = tx.send(task().await) {
                unclaimed(output);
            }
        });
    });
    if !spawned {
        return Err(InformerError::Stopped);
    }
    rx.await.map_err(|_| InformerError::Stopped)
}
