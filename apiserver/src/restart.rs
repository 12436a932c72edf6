//! Restarts with state kept: the server stops serving, every connection drops, and it
//! serves again on the same address with the same objects and resourceVersions.
//!
//! What survives is an option: a real apiserver's watch cache does not survive its restart
//! (it starts again at etcd's current revision, so a watch from an older resourceVersion
//! answers 410), which is the default here; `keep_history` keeps the history so old
//! resourceVersions resume. An outage can be held for a duration (driven by tokio's clock,
//! so paused tests skip it) or until [`ServerHandle::start_serving`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::handle::{ServerError, ServerHandle};
use crate::requests::Requests;
use crate::serving::{Command, Phase, ServingState};

/// How open connections end when the server goes down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloseMode {
    /// A TCP reset: the client reads `ECONNRESET` (a process killed, a node lost).
    #[default]
    Reset,
    /// A plain close in the middle of the answer: the client reads an unexpected EOF
    /// (no chunked-encoding terminator, so not a clean end of a watch).
    Eof,
}

/// How connection attempts are answered while the server is down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DownMode {
    /// Nothing listens: connections are refused (the attempts cannot be counted).
    #[default]
    Refuse,
    /// The port accepts and resets each connection at once (counted in
    /// [`RequestCounts::reset_while_down`](crate::RequestCounts::reset_while_down)).
    Reset,
}

/// What a restart does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RestartOptions {
    /// Keep the watch history, so watches and Exact lists from older resourceVersions
    /// still resume. Default false, as a real apiserver: they get 410 after the restart.
    pub keep_history: bool,
    /// How long to stay down before serving again ([`ServerHandle::restart`] only).
    #[serde(with = "millis", rename = "downForMillis")]
    pub down_for: Duration,
    /// How open connections end.
    pub close: CloseMode,
    /// How connection attempts are answered while down.
    pub while_down: DownMode,
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis().min(u128::from(u64::MAX)) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

impl RestartOptions {
    /// Keep the watch history (watches from old resourceVersions resume).
    pub fn keep_history(mut self) -> Self {
        self.keep_history = true;
        self
    }

    /// Stay down this long.
    pub fn down_for(mut self, down_for: Duration) -> Self {
        self.down_for = down_for;
        self
    }

    /// End open connections this way.
    pub fn close(mut self, close: CloseMode) -> Self {
        self.close = close;
        self
    }

    /// Answer connection attempts this way while down.
    pub fn while_down(mut self, while_down: DownMode) -> Self {
        self.while_down = while_down;
        self
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_from_the_admin_body() {
        let o: RestartOptions = serde_json::from_str(
            r#"{"keepHistory": true, "downForMillis": 30000, "close": "eof", "whileDown": "reset"}"#,
        )
        .unwrap();
        assert_eq!(
            o,
            RestartOptions::default()
                .keep_history()
                .down_for(Duration::from_secs(30))
                .close(CloseMode::Eof)
                .while_down(DownMode::Reset)
        );
        let o: RestartOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(o, RestartOptions::default());
        assert!(serde_json::from_str::<RestartOptions>(r#"{"close": "sometimes"}"#).is_err());
    }
}
