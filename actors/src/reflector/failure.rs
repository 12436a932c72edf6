//! How a list or watch request failed, as the Reflector's rules see it.

use std::time::Duration;

/// How a request failed, as far as the Reflector's rules care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 410 Gone / reason Expired: the resourceVersion is no longer available.
    Expired,
    /// The server's "Too large resource version" answer.
    TooLargeResourceVersion,
    /// 429 Too Many Requests, with the server's Retry-After if any.
    TooManyRequests {
        /// The server's Retry-After, if any.
        retry_after: Option<Duration>,
    },
    /// The connection was refused (server down or restarting).
    ConnectionRefused,
    /// No answer: the connection was reset or closed before an answer, or
    /// the request timed out (server restarting, network trouble).
    Transport,
    /// The server does not support the request (e.g. streaming lists): 400, 404, 405, 422, 501.
    Unsupported,
    /// 406 Not Acceptable: the server cannot answer in the representation
    /// asked for, e.g. a metadata-only informer's `PartialObjectMetadata`
    /// from a server (or an aggregated API) that does not serve it. Retried
    /// with backoff, like any list failure, and recorded (status 406).
    NotAcceptable,
    /// A line of the watch stream could not be decoded: the event is lost, so relist.
    Malformed,
    /// Anything else (500s, errors building the request, authentication).
    Other,
}

impl Failure {
    /// The server gave no answer: refused, or a transport failure.
    pub fn unreachable(&self) -> bool {
        matches!(self, Failure::ConnectionRefused | Failure::Transport)
    }
}
