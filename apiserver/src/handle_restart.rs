//! [`ServerHandle`]'s restart and outage controls and its request log; what a restart
//! does is [`RestartOptions`], how it is carried out is [`serving`](crate::serving).

use tokio::sync::oneshot;

use crate::error::ServerError;
use crate::handle::ServerHandle;
use crate::requests::Requests;
use crate::restart::RestartOptions;
use crate::serving::{Command, Phase, ServingState};

impl ServerHandle {
    async fn command(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<(), ServerError>>) -> Command,
    ) -> Result<(), ServerError> {
        let (tx, rx) = oneshot::channel();
        self.control().send(make(tx))?;
        rx.await.map_err(|_| ServerError::Stopped)?
    }

    /// Restart: close every connection, stay down for `options.down_for`, then serve again
    /// on the same address with the same objects and resourceVersions. Returns once the
    /// server serves again (or could not listen again).
    ///
    /// Runs on the server's runtime, so it can be awaited from any runtime; under paused
    /// time (a server started with [`ApiServer::start`](crate::ApiServer::start) on a paused
    /// runtime) the outage passes without waiting.
    pub async fn restart(&self, options: RestartOptions) -> Result<(), ServerError> {
        self.command(|done| Command::Down {
            options,
            exempt: None,
            auto_up: true,
            done: Some(done),
        })
        .await
    }

    /// Go down (as [`restart`](Self::restart) does) and stay down until
    /// [`start_serving`](Self::start_serving); `options.down_for` is ignored. Returns once
    /// every connection is closed.
    pub async fn stop_serving(&self, options: RestartOptions) -> Result<(), ServerError> {
        self.command(|done| Command::Down {
            options,
            exempt: None,
            auto_up: false,
            done: Some(done),
        })
        .await
    }

    /// Serve again after [`stop_serving`](Self::stop_serving) (no-op while serving).
    pub async fn start_serving(&self) -> Result<(), ServerError> {
        self.command(|done| Command::Up { done: Some(done) }).await
    }

    /// Whether the server is serving now.
    pub fn is_serving(&self) -> bool {
        self.serving_state().phase == Phase::Serving
    }

    /// The phase and the number of restarts completed.
    pub fn serving_state(&self) -> ServingState {
        self.control().state()
    }

    /// The log of answered requests and accepted or reset connections.
    pub fn requests(&self) -> Requests {
        self.request_log().clone()
    }
}
