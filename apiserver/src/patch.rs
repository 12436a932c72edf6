//! Patch application: JSON merge patch, strategic merge patch (applied as a merge patch,
//! with `$`-directives dropped) and JSON patch (RFC 6902).

use serde_json::Value;

use crate::status::{ApiError, Reason};

/// The patch flavour, from the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    StrategicMerge,
    /// `application/json-patch+json`
    Json,
    /// `application/apply-patch+yaml` (server-side apply, approximated as a merge that may create).
    Apply,
}

impl PatchKind {
    /// Map a content type to a patch kind; anything else is 415.
    pub fn from_content_type(ct: Option<&str>) -> Result<Self, ApiError> {
        let ct = ct.unwrap_or("");
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchKind::StrategicMerge),
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
            other => Err(ApiError::new(
                Reason::UnsupportedMediaType,
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got \"{other}\")"
                ),
            )),
        }
    }
}

/// Remove strategic-merge directives (`$patch`, `$setElementOrder/...`, `$retainKeys`, ...).
fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !k.starts_with('$'));
            for child in map.values_mut() {
                strip_directives(child);
            }
        }
        Value::Array(items) => {
            items.retain(|i| {
                i.as_object()
                    .is_none_or(|o| o.get("$patch").and_then(Value::as_str) != Some("delete"))
            });
            for child in items {
                strip_directives(child);
            }
        }
        _ => {}
    }
}

/// Apply a patch body to `doc`.
pub fn apply(kind: PatchKind, mut doc: Value, body: &[u8]) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Merge | PatchKind::StrategicMerge | PatchKind::Apply => {
            let mut patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: patch must be a JSON object",
                ));
            }
            if kind != PatchKind::Merge {
                strip_directives(&mut patch);
            }
            json_patch::merge(&mut doc, &patch);
            Ok(doc)
        }
        PatchKind::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut doc, &patch).map_err(|e| {
                ApiError::new(
                    Reason::Invalid,
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
            Ok(doc)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_strategic_and_json_patch() {
        let doc =
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}});
        let out = apply(
            PatchKind::Merge,
            doc.clone(),
            br#"{"metadata":{"labels":{"y":null,"z":"3"}}}"#,
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"x": "1", "z": "3"}));
        let out = apply(
            PatchKind::StrategicMerge,
            doc.clone(),
            br#"{"$setElementOrder/containers":[{"name":"c"}],"data":{"k":"w"}}"#,
        )
        .unwrap();
        assert_eq!(out["data"]["k"], "w");
        assert!(out.get("$setElementOrder/containers").is_none());
        let out = apply(
            PatchKind::Json,
            doc.clone(),
            br#"[{"op":"replace","path":"/data/k","value":"j"}]"#,
        )
        .unwrap();
        assert_eq!(out["data"]["k"], "j");
        let e = apply(
            PatchKind::Json,
            doc.clone(),
            br#"[{"op":"remove","path":"/nope"}]"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(apply(PatchKind::Merge, doc, b"{bad").unwrap_err().code, 400);
        assert_eq!(
            PatchKind::from_content_type(Some("text/plain"))
                .unwrap_err()
                .code,
            415
        );
    }
}
