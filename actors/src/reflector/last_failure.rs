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
        write!(f, "{} failed: {}", self.request, self.message)
    }
}

/// The last [`RequestFailure`] of a Reflector, shared with whoever reads it.
#[derive(Debug, Default)]
pub struct LastFailure(std::sync::Mutex<Option<RequestFailure>>);

impl LastFailure {
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
            status,
            message: error.to_string(),
            at: std::time::SystemTime::now(),
        };
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(failure);
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
            other => self.record(request, other),
        }
    }

    /// The last failure since the last [`clear`](Self::clear), if any.
    pub fn get(&self) -> Option<RequestFailure> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forgets the last failure (a list succeeded).
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
