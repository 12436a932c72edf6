//! `DeleteOptions`: preconditions, dry run, grace period and propagation policy, read from
//! a DELETE's body or query as the real server reads them.

use serde_json::Value;

use crate::status::ApiError;

/// Preconditions a delete may carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletePreconditions {
    /// Required `metadata.uid`.
    pub uid: Option<String>,
    /// Required `metadata.resourceVersion`.
    pub resource_version: Option<u64>,
}

/// What happens to an object's dependents (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents lose their reference to the owner and stay (`orphan` finalizer on the owner).
    Orphan,
    /// The owner goes at once; the garbage collector deletes the dependents afterwards.
    Background,
    /// The owner stays (`foregroundDeletion` finalizer) until its blocking dependents are gone.
    Foreground,
}

impl Propagation {
    fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "Orphan" => Ok(Propagation::Orphan),
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            other => Err(ApiError::invalid(
                "DeleteOptions",
                "",
                "propagationPolicy",
                "FieldValueNotSupported",
                &format!(
                    "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            )),
        }
    }
}

/// Everything a DELETE may ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// `preconditions`.
    pub preconditions: DeletePreconditions,
    /// `dryRun` (body or query).
    pub dry_run: bool,
    /// `gracePeriodSeconds`: `Some(0)` deletes a graceful kind (Pods) at once.
    pub grace_period_seconds: Option<u64>,
    /// `propagationPolicy` (or the deprecated `orphanDependents`).
    pub propagation: Option<Propagation>,
    /// The deprecated `orphanDependents`, as sent: `Some(false)` makes a delete that does
    /// not complete at once answer 202, as the real server does.
    pub orphan_dependents: Option<bool>,
}

impl DeleteOptions {
    /// From a DELETE's body (a `DeleteOptions` object, or empty) and its query parameters
    /// (`dryRun`, `gracePeriodSeconds`, `propagationPolicy`, `orphanDependents`).
    pub fn parse(body: &[u8], query: Option<&str>) -> Result<Self, ApiError> {
        let mut out = DeleteOptions::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "dryRun" if !v.is_empty() => out.dry_run = true,
                "gracePeriodSeconds" => out.grace_period_seconds = Some(grace(&v)?),
                "propagationPolicy" if !v.is_empty() => {
                    out.propagation = Some(Propagation::parse(&v)?);
                }
                "orphanDependents" => out.orphan_dependents = Some(v == "true" || v == "1"),
                _ => {}
            }
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return out.checked();
        }
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        let pre = v.get("preconditions");
        out.preconditions.uid = pre
            .and_then(|p| p.get("uid"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(s) = pre
            .and_then(|p| p.get("resourceVersion"))
            .and_then(Value::as_str)
        {
            out.preconditions.resource_version = Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resourceVersion precondition: {s}"))
            })?);
        }
        if v.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            out.dry_run = true;
        }
        match v.get("gracePeriodSeconds") {
            Some(Value::Number(n)) => {
                out.grace_period_seconds = Some(n.as_i64().unwrap_or(0).max(0) as u64);
            }
            Some(Value::Null) | None => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "gracePeriodSeconds: expected an integer, got {other}"
                )));
            }
        }
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            out.propagation = Some(Propagation::parse(p)?);
        }
        if let Some(o) = v.get("orphanDependents").and_then(Value::as_bool) {
            out.orphan_dependents = Some(o);
        }
        out.checked()
    }

    fn checked(mut self) -> Result<Self, ApiError> {
        match (self.orphan_dependents, self.propagation) {
            (Some(_), Some(_)) => Err(ApiError::invalid(
                "DeleteOptions",
                "",
                "propagationPolicy",
                "FieldValueInvalid",
                "Invalid value: \"propagationPolicy\": orphanDependents and deletionPropagation cannot be both set",
            )),
            (Some(true), None) => {
                self.propagation = Some(Propagation::Orphan);
                Ok(self)
            }
            (Some(false), None) => {
                self.propagation = Some(Propagation::Background);
                Ok(self)
            }
            _ => Ok(self),
        }
    }
}

fn grace(v: &str) -> Result<u64, ApiError> {
    v.parse::<i64>().map(|n| n.max(0) as u64).map_err(|_| {
        ApiError::bad_request(format!(
            "gracePeriodSeconds: Invalid value: \"{v}\": must be an integer"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_and_query_options() {
        let o = DeleteOptions::parse(
            br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground","preconditions":{"uid":"u","resourceVersion":"7"},"gracePeriodSeconds":0}"#,
            None,
        )
        .unwrap();
        assert_eq!(o.propagation, Some(Propagation::Foreground));
        assert_eq!(o.preconditions.uid.as_deref(), Some("u"));
        assert_eq!(o.preconditions.resource_version, Some(7));
        assert_eq!(o.grace_period_seconds, Some(0));
        let o = DeleteOptions::parse(b"", Some("propagationPolicy=Orphan&dryRun=All")).unwrap();
        assert_eq!(
            (o.propagation, o.dry_run),
            (Some(Propagation::Orphan), true)
        );
        let o = DeleteOptions::parse(br#"{"orphanDependents":false}"#, None).unwrap();
        assert_eq!(o.propagation, Some(Propagation::Background));
        assert_eq!(
            DeleteOptions::parse(b"", Some("propagationPolicy=Sideways"))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(DeleteOptions::parse(b"{bad", None).unwrap_err().code, 400);
    }
}
