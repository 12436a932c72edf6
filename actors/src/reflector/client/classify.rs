//! Failures, as the Reflector's rules see them: kube-client's errors and the
//! server's `Status` answers mapped onto [`Failure`], and the read errors
//! that end a watch like a clean close.

use std::time::Duration;

use crate::reflector::failure::Failure;

/// A read error that ends a watch like a clean close, re-watched at once
/// from the last resourceVersion: a read timeout, an EOF inside a chunk, or
/// a connection reset or aborted by the peer (client-go's "probable EOF",
/// a proxy or a restarting apiserver, not a reason to relist).
pub(crate) fn ends_watch_cleanly(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    let resumable = |kind| {
        matches!(
            kind,
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
        )
    };
    if resumable(e.kind()) || e.kind() == std::io::ErrorKind::TimedOut {
        return true;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && resumable(io.kind())
        {
            return true;
        }
        if err.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        cur = next_in_chain(err);
    }
    false
}

/// The error under `err`. An `io::Error` wrapping another error (as kube
/// wraps hyper's) reports the wrapped one's *source* as its own, skipping the
/// wrapped error itself: step into it instead.
fn next_in_chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    match err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        Some(inner) => Some(inner),
        None => err.source(),
    }
}

/// Maps a kube error onto the Reflector's failure kinds.
pub fn classify(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) => {
            let retry_after = status.details.as_ref().and_then(|d| {
                (d.retry_after_seconds > 0)
                    .then(|| Duration::from_secs(u64::from(d.retry_after_seconds)))
            });
            let too_large = status.details.as_ref().is_some_and(|d| {
                d.causes.iter().any(|c| {
                    c.reason == "ResourceVersionTooLarge"
                        || c.message.contains("Too large resource version")
                })
            });
            if too_large {
                return Failure::TooLargeResourceVersion;
            }
            classify_status(status.code, &status.reason, &status.message, retry_after)
        }
        kube::Error::SerdeError(_)
        | kube::Error::FromUtf8(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded => Failure::Malformed,
        other if error_chain_has(other, std::io::ErrorKind::ConnectionRefused) => {
            Failure::ConnectionRefused
        }
        // No answer came: the connection failed, was reset or closed, or
        // the request timed out.
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            Failure::Transport
        }
        _ => Failure::Other,
    }
}

/// Maps a `Status` answer (code, reason, message) onto a failure kind.
pub(crate) fn classify_status(
    code: u16,
    reason: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> Failure {
    match (code, reason) {
        (410, _) | (_, "Expired") | (_, "Gone") => Failure::Expired,
        (_, "Timeout") | (504, _) if message.contains("Too large resource version") => {
            Failure::TooLargeResourceVersion
        }
        (429, _) | (_, "TooManyRequests") => Failure::TooManyRequests { retry_after },
        (406, _) | (_, "NotAcceptable") => Failure::NotAcceptable,
        (400 | 404 | 405 | 422 | 501, _) => Failure::Unsupported,
        _ => Failure::Other,
    }
}

fn error_chain_has(err: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == kind
        {
            return true;
        }
        if e.to_string().contains("Connection refused") {
            return true;
        }
        cur = next_in_chain(e);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_connection_ends_a_watch_like_a_clean_close() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            // As hyper's body error reaches us through kube: wrapped.
            assert!(
                ends_watch_cleanly(&Error::other(Error::from(kind))),
                "{kind:?}"
            );
        }
        assert!(!ends_watch_cleanly(&Error::other("some other failure")));
    }

    /// Issue 28 finding 2: a reset or a timeout is a transport failure (a
    /// re-watch), told apart from a refused connection and from answers.
    #[test]
    fn transport_errors_are_told_from_refused_connections_and_answers() {
        use std::io::{Error, ErrorKind};
        let service = |kind| kube::Error::Service(Box::new(Error::other(Error::from(kind))));
        let read = |kind| kube::Error::ReadEvents(Error::from(kind));
        assert_eq!(
            classify(&service(ErrorKind::ConnectionRefused)),
            Failure::ConnectionRefused
        );
        assert_eq!(
            classify(&service(ErrorKind::ConnectionReset)),
            Failure::Transport
        );
        assert_eq!(classify(&read(ErrorKind::TimedOut)), Failure::Transport);
        assert_eq!(
            classify(&read(ErrorKind::UnexpectedEof)),
            Failure::Transport
        );
        let unbuildable = http::Request::builder().uri("\0").body(()).unwrap_err();
        assert_eq!(
            classify(&kube::Error::HttpError(unbuildable)),
            Failure::Other
        );
        let gone = kube::core::Status::failure("too old", "Expired").with_code(410);
        assert_eq!(
            classify(&kube::Error::Api(Box::new(gone))),
            Failure::Expired
        );
        assert!(Failure::Transport.unreachable() && Failure::ConnectionRefused.unreachable());
        assert!(!Failure::Other.unreachable());
    }

    #[test]
    fn statuses_map_to_failures() {
        assert_eq!(
            classify_status(410, "Expired", "too old resource version: 1 (5)", None),
            Failure::Expired
        );
        assert_eq!(
            classify_status(
                504,
                "Timeout",
                "Timeout: Too large resource version: 99, current: 5",
                None
            ),
            Failure::TooLargeResourceVersion
        );
        assert_eq!(
            classify_status(429, "TooManyRequests", "", Some(Duration::from_secs(2))),
            Failure::TooManyRequests {
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            classify_status(500, "InternalError", "", None),
            Failure::Other
        );
        assert_eq!(
            classify_status(422, "Invalid", "", None),
            Failure::Unsupported
        );
        assert_eq!(
            classify_status(406, "NotAcceptable", "only the following media types", None),
            Failure::NotAcceptable
        );
    }
}
