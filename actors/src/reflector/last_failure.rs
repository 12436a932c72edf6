//! Why an informer does not sync: the last failed request, kept until a
//! list succeeds, for whoever asks (a bad selector, a missing permission, an
//! unreachable server).

/// A failed list or watch request, kept for whoever asks why an informer
/// does not sync (a bad selector, a missing permission, an unreachable server).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestFailure {
    /// `"list"` or `"watch"`.
    pub request: &'static str,
    /// The resource's path, which names its namespace
    /// (`/api/v1/namespaces/default/configmaps`); empty when not known.
    pub target: String,
    /// The HTTP status code when the server answered with an error `Status`
    /// (403: a missing permission, 400: a bad selector, 410: expired); `None`
    /// when no answer came (refused or cut connection, timeout), it could not
    /// be read, the error came inside a watch or streaming-list stream, or the
    /// loop panicked.
    pub status: Option<u16>,
    /// What failed, as kube-client or the server said it.
    pub message: String,
    /// When.
    pub at: std::time::SystemTime,
}

impl std::fmt::Display for RequestFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.target.is_empty() {
            write!(f, "{} failed: {}", self.request, self.message)
        } else {
            write!(
                f,
                "{} failed: {} ({})",
                self.request, self.message, self.target
            )
        }
    }
}

/// The last [`RequestFailure`] of a Reflector, shared with whoever reads it.
#[derive(Debug, Default)]
pub struct LastFailure {
    last: std::sync::Mutex<Option<RequestFailure>>,
    /// What the requests are for, set once by whoever starts the Reflector.
    target: std::sync::OnceLock<String>,
}

impl LastFailure {
    /// Names the resource every later failure is about (its path); only the
    /// first call counts.
    pub fn set_target(&self, target: String) {
        let _ = self.target.set(target);
    }

    /// Records a failure (replacing the previous one).
    pub fn record(&self, request: &'static str, error: &dyn std::fmt::Display) {
        self.record_status(request, None, error);
    }

    pub(crate) fn record_status(
        &self,
        request: &'static str,
        status: Option<u16>,
        error: &dyn std::fmt::Display,
    ) {
        let failure = RequestFailure {
            request,
            target: self.target.get().cloned().unwrap_or_default(),
            status,
            message: error.to_string(),
            at: std::time::SystemTime::now(),
        };
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(failure);
    }

    /// Records a failed request's kube error: an API answer as `code reason:
    /// message` (kube's own `Display` appends a debug dump of the `Status`).
    pub fn record_error(&self, request: &'static str, error: &kube::Error) {
        match error {
            kube::Error::Api(status) => self.record_status(
                request,
                Some(status.code),
                &format_args!("{} {}: {}", status.code, status.reason, status.message),
            ),
            other => self.record(request, &chain(other)),
        }
    }

    /// The last failure since the last [`clear`](Self::clear), if any.
    pub fn get(&self) -> Option<RequestFailure> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forgets the last failure (a list succeeded).
    pub fn clear(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// An error with its sources, `outer: inner: …`, leaving out a source whose
/// text the outer one already shows: kube's `client error (Connect)` says
/// nothing of the certificate rustls refused.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("invalid peer certificate: UnknownIssuer")]
    struct Inner;

    #[test]
    fn a_failure_names_its_target_and_the_causes_of_its_error() {
        let failures = LastFailure::default();
        failures.set_target("/api/v1/namespaces/default/configmaps".into());
        failures.record("list", &chain(&Outer(Inner)));
        let failure = failures.get().unwrap();
        assert_eq!(
            failure.to_string(),
            "list failed: client error (Connect): invalid peer certificate: UnknownIssuer \
             (/api/v1/namespaces/default/configmaps)"
        );
        failures.clear();
        assert!(failures.get().is_none());
    }

    #[test]
    fn a_source_already_in_the_message_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Shows(#[source] Inner);
        assert_eq!(
            chain(&Shows(Inner)),
            "outer: invalid peer certificate: UnknownIssuer"
        );
    }
}
