//! Kubernetes `Status` errors: every failure the server answers is one of these.

use serde_json::{Value, json};

/// The `reason` field of a failure `Status`, as the real API server spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// 404: the object or path does not exist.
    NotFound,
    /// 409: create of an object whose name is taken.
    AlreadyExists,
    /// 409: optimistic-concurrency failure (stale resourceVersion or precondition).
    Conflict,
    /// 422: the object fails validation.
    Invalid,
    /// 400: the request itself is malformed.
    BadRequest,
    /// 410: the requested resourceVersion or continue token is older than retained history.
    Expired,
    /// 410: the resource is gone (used by some older servers instead of `Expired`).
    Gone,
    /// 429: the client must back off (carries `Retry-After`).
    TooManyRequests,
    /// 500: an internal (or injected) failure.
    InternalError,
    /// 413: the request body exceeds the configured limit.
    RequestEntityTooLarge,
    /// 504: the server could not answer in time (e.g. a resourceVersion from the future).
    Timeout,
    /// 405: the verb is not supported on this path.
    MethodNotAllowed,
    /// 415: the request's content type is not supported.
    UnsupportedMediaType,
    /// 406: the requested response media type is not supported.
    NotAcceptable,
    /// 401: the request carries no valid credentials.
    Unauthorized,
    /// 403: the authenticated user may not do this.
    Forbidden,
}

impl Reason {
    /// The wire spelling of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotFound => "NotFound",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Invalid => "Invalid",
            Reason::BadRequest => "BadRequest",
            Reason::Expired => "Expired",
            Reason::Gone => "Gone",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::InternalError => "InternalError",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::Timeout => "Timeout",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
        }
    }

    /// The HTTP status code the real server uses for this reason.
    pub fn code(self) -> u16 {
        match self {
            Reason::NotFound => 404,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Invalid => 422,
            Reason::BadRequest => 400,
            Reason::Expired | Reason::Gone => 410,
            Reason::TooManyRequests => 429,
            Reason::InternalError => 500,
            Reason::RequestEntityTooLarge => 413,
            Reason::Timeout => 504,
            Reason::MethodNotAllowed => 405,
            Reason::UnsupportedMediaType => 415,
            Reason::NotAcceptable => 406,
            Reason::Unauthorized => 401,
            Reason::Forbidden => 403,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A failed API operation: HTTP code, `Status` reason, message and optional details.
///
/// Both the HTTP layer and the in-process methods of `ServerHandle` return it, so tests
/// can assert on the same answer a client would see.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (e.g. 404).
    pub code: u16,
    /// The `Status.reason`.
    pub reason: Reason,
    /// Human-readable message, worded like the real server's.
    pub message: String,
    /// The `Status.details` object, if any.
    pub details: Option<Value>,
    /// Seconds for the `Retry-After` header (429 and some 5xx answers).
    pub retry_after_secs: Option<u32>,
}

impl ApiError {
    /// An error with the code that belongs to `reason`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        ApiError {
            code: reason.code(),
            reason,
            message: message.into(),
            details: None,
            retry_after_secs: None,
        }
    }

    /// Attach a `details` object.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `<plural> "<name>" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            Reason::NotFound,
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .with_details(details(group, plural, name))
    }

    /// `<plural> "<name>" is forbidden: <why>` (`<plural> is forbidden: …`
    /// without a name), as the real server's admission answers.
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let what = qualified(group, plural);
        let message = if name.is_empty() {
            format!("{what} is forbidden: {why}")
        } else {
            format!("{what} \"{name}\" is forbidden: {why}")
        };
        Self::new(Reason::Forbidden, message).with_details(details(group, plural, name))
    }

    /// A create in a namespace being deleted (NamespaceLifecycle's answer).
    pub fn namespace_terminating(group: &str, plural: &str, name: &str, namespace: &str) -> Self {
        let mut e = Self::forbidden(
            group,
            plural,
            name,
            &format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        );
        if let Some(d) = e.details.as_mut().and_then(Value::as_object_mut) {
            d.insert(
                "causes".into(),
                json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {namespace} is being terminated"),
                    "field": "metadata.namespace"
                }]),
            );
        }
        e
    }

    /// `<plural> "<name>" already exists`.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            Reason::AlreadyExists,
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .with_details(details(group, plural, name))
    }

    /// The optimistic-concurrency conflict message of the real server.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, plural)
            ),
        )
        .with_details(details(group, plural, name))
    }

    /// The answer to a delete of a namespace already being deleted.
    pub fn namespace_being_deleted(name: &str) -> Self {
        Self::new(
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on namespaces \"{name}\": The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system."
            ),
        )
        .with_details(details("", "namespaces", name))
    }

    /// The conflict of an update whose body names another uid than the
    /// stored object's (the body's uid is a precondition).
    pub fn uid_conflict(group: &str, plural: &str, name: &str, given: &str, stored: &str) -> Self {
        Self::new(
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {given}, UID in object meta: {stored}",
                qualified(group, plural)
            ),
        )
        .with_details(details(group, plural, name))
    }

    /// 422 Invalid with one field cause.
    pub fn invalid(kind: &str, name: &str, field: &str, cause_reason: &str, detail: &str) -> Self {
        Self::new(
            Reason::Invalid,
            format!("{kind} \"{name}\" is invalid: {field}: {detail}"),
        )
        .with_details(json!({
            "name": name,
            "kind": kind,
            "causes": [{"reason": cause_reason, "message": detail, "field": field}],
        }))
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Reason::BadRequest, message)
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(Reason::Expired, message)
    }

    /// 429 TooManyRequests with a Retry-After.
    pub fn too_many_requests(retry_after_secs: u32) -> Self {
        let mut e = Self::new(
            Reason::TooManyRequests,
            "Too many requests, please try again later.",
        )
        .with_details(json!({"retryAfterSeconds": retry_after_secs}));
        e.retry_after_secs = Some(retry_after_secs);
        e
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            Reason::InternalError,
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            Reason::RequestEntityTooLarge,
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// The 504 "Too large resource version" answer of the real server.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut e = Self::new(
            Reason::Timeout,
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        }));
        e.retry_after_secs = Some(1);
        e
    }

    /// The message of the 410 a watch gets for a start RV older than history.
    pub fn too_old_resource_version(requested: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
            "code": self.code,
        });
        if let (Some(d), Some(obj)) = (&self.details, status.as_object_mut()) {
            obj.insert("details".into(), d.clone());
        }
        status
    }
}

/// `plural` or `plural.group`, as Status messages name resources.
pub(crate) fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn details(group: &str, plural: &str, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": plural});
    if !group.is_empty()
        && let Some(o) = d.as_object_mut()
    {
        o.insert("group".into(), Value::String(group.to_string()));
    }
    d
}

/// A 422 with every cause (field, cause reason, detail), worded like the
/// real server (`X "n" is invalid: [a, b]`); `Ok` without causes.
pub fn invalid_with_causes(
    qualified_kind: &str,
    kind: &str,
    group: Option<&str>,
    name: &str,
    causes: &[(String, &'static str, String)],
) -> Result<(), ApiError> {
    if causes.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = causes
        .iter()
        .map(|(field, _, detail)| format!("{field}: {detail}"))
        .collect();
    let joined = if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    };
    let mut details = json!({
        "kind": kind,
        "causes": causes.iter().map(|(field, reason, detail)| json!({"reason": reason, "message": detail, "field": field})).collect::<Vec<_>>(),
    });
    if let Some(o) = details.as_object_mut() {
        // As the real server's Status omits empty fields (`ListOptions` has no name).
        if !name.is_empty() {
            o.insert("name".into(), json!(name));
        }
        if let Some(g) = group {
            o.insert("group".into(), json!(g));
        }
    }
    Err(ApiError::new(
        Reason::Invalid,
        format!("{qualified_kind} \"{name}\" is invalid: {joined}"),
    )
    .with_details(details))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_carries_code_reason_and_details() {
        let s = ApiError::not_found("", "configmaps", "x").to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "configmaps \"x\" not found");
        assert_eq!(s["details"]["name"], "x");
        let s = ApiError::too_large_resource_version(99, 5).to_status();
        assert_eq!(s["code"], 504);
        assert_eq!(
            s["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert_eq!(
            s["message"],
            "Timeout: Too large resource version: 99, current: 5"
        );
        assert_eq!(
            ApiError::already_exists("example.com", "widgets", "w").message,
            "widgets.example.com \"w\" already exists"
        );
    }
}
