//! Stopping a background task that owns a Lease (an elector's, a shard
//! member's): send it how to stop, wait for how it finished, and say what a
//! graceful stop did. Shared by `LeaderElector` and `ShardMember`.

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::error::LeaderError;
use super::messages::{Finished, StopMode, StopOutcome};

/// The stop channel and the task of a running Lease holder.
pub(crate) struct Stopper {
    stop: Option<oneshot::Sender<StopMode>>,
    task: Option<JoinHandle<Finished>>,
}

impl Stopper {
    pub(crate) fn new(stop: oneshot::Sender<StopMode>, task: JoinHandle<Finished>) -> Self {
        Stopper {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Asks the task to stop as `mode` says and waits for it.
    pub(crate) async fn finish(&mut self, mode: StopMode) -> Result<Finished, LeaderError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(mode);
        }
        let Some(task) = self.task.take() else {
            return Ok(Finished::NotHolding);
        };
        task.await.map_err(|e| LeaderError::Task(e.to_string()))
    }

    /// A graceful stop ([`StopMode::Release`]) and what it did.
    pub(crate) async fn release(&mut self) -> Result<StopOutcome, LeaderError> {
        match self.finish(StopMode::Release).await? {
            Finished::Released => Ok(StopOutcome::Released),
            Finished::NotHolding | Finished::Abandoned => Ok(StopOutcome::NotHolding),
            Finished::ReleaseFailed { reason } => Err(LeaderError::ReleaseFailed { reason }),
        }
    }
}
