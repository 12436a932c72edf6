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

/// Most operations in one JSON patch (the real server's limit).
pub const MAX_JSON_PATCH_OPS: usize = 10_000;

/// Deepest nesting of a patched object: it must read back with serde_json's
/// 128-level recursion limit (and never overflow a stack on the way).
pub const MAX_DEPTH: usize = 100;

/// Nesting depth of `v` (a scalar is 0), without recursion.
fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Object(m) => stack.extend(m.values().map(|c| (c, d + 1))),
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    deepest
}

fn too_large(what: String) -> ApiError {
    ApiError::new(Reason::RequestEntityTooLarge, what)
}

/// Levels below the root at which a JSON pointer points (`""` is the root).
fn pointer_depth(pointer: &str) -> usize {
    pointer.matches('/').count()
}

fn too_deep(ceiling: usize) -> ApiError {
    ApiError::new(
        Reason::Invalid,
        format!("the patched object would be nested deeper than {ceiling} levels"),
    )
}

/// Applies a JSON patch one operation at a time, so that no request can grow
/// the object without bound while the store is locked (CVE-2019-1002100:
/// each `copy` of the whole document doubles it). Limits, as the real
/// server's: 10 000 operations (413), `limit` bytes copied in all (422); and
/// no deeper nesting than [`MAX_DEPTH`] or the object's own depth, checked
/// per operation against a bound that costs no scan of the document.
fn apply_json_patch(
    doc: &mut Value,
    patch: json_patch::Patch,
    limit: usize,
) -> Result<(), ApiError> {
    use json_patch::PatchOperation;
    if patch.0.len() > MAX_JSON_PATCH_OPS {
        return Err(too_large(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPS}, got {}",
            patch.0.len()
        )));
    }
    let mut copied = 0usize;
    // An upper bound of the document's depth: it only grows.
    let mut deepest = depth(doc);
    let ceiling = MAX_DEPTH.max(deepest);
    for op in patch.0 {
        // Depth of what this operation puts where, bounded before it runs.
        let inserted = match &op {
            PatchOperation::Add(a) => Some(depth(&a.value)),
            PatchOperation::Replace(r) => Some(depth(&r.value)),
            PatchOperation::Copy(c) => {
                let source = doc.pointer(c.from.as_str());
                copied += source.map_or(0, |v| serde_json::to_vec(v).map_or(0, |b| b.len()));
                if copied > limit {
                    return Err(ApiError::new(
                        Reason::Invalid,
                        format!(
                            "the accumulated size of copied values in the JSON patch exceeds {limit} bytes"
                        ),
                    ));
                }
                source.map(depth)
            }
            // What moves was already in the document: at most as deep as the
            // document below where it was. No scan (a move costs nothing to bound).
            PatchOperation::Move(m) => Some(deepest.saturating_sub(pointer_depth(m.from.as_str()))),
            _ => None,
        };
        if let Some(d) = inserted {
            deepest = deepest.max(pointer_depth(op.path().as_str()) + d);
            if deepest > ceiling {
                return Err(too_deep(ceiling));
            }
        }
        json_patch::patch(doc, std::slice::from_ref(&op)).map_err(|e| {
            ApiError::new(
                Reason::Invalid,
                format!("the server rejected our request due to an error in our request: {e}"),
            )
        })?;
    }
    Ok(())
}

/// Apply a patch body to `doc`; the result is at most `limit` bytes, and no
/// deeper than [`MAX_DEPTH`] (or than `doc` already was).
pub fn apply(kind: PatchKind, doc: Value, body: &[u8], limit: usize) -> Result<Value, ApiError> {
    let ceiling = MAX_DEPTH.max(depth(&doc));
    let patched = apply_unchecked(kind, doc, body, limit)?;
    if depth(&patched) > ceiling {
        return Err(too_deep(ceiling));
    }
    let size = serde_json::to_vec(&patched).map_or(usize::MAX, |b| b.len());
    if size > limit {
        return Err(too_large(format!(
            "the patched object would be {size} bytes, more than the {limit} allowed"
        )));
    }
    Ok(patched)
}

fn apply_unchecked(
    kind: PatchKind,
    mut doc: Value,
    body: &[u8],
    limit: usize,
) -> Result<Value, ApiError> {
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
            apply_json_patch(&mut doc, patch, limit)?;
            Ok(doc)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(kind: PatchKind, doc: Value, body: &[u8]) -> Result<Value, ApiError> {
        super::apply(kind, doc, body, 1 << 20)
    }

    /// CVE-2019-1002100: `copy` of the whole document, 40 times, would need
    /// 2^40 times its size; too many operations, a result past the size
    /// limit, and one nested past what reads back are refused too.
    #[test]
    fn a_json_patch_cannot_grow_an_object_without_bound() {
        let doc = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let doubling: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/a{i}")}))
            .collect();
        let json_patch = |ops: &Value| serde_json::to_vec(ops).unwrap();
        let err = apply(PatchKind::Json, doc.clone(), &json_patch(&json!(doubling))).unwrap_err();
        assert_eq!(err.code, 422, "{err:?}");

        let many: Vec<Value> = (0..=MAX_JSON_PATCH_OPS)
            .map(|_| json!({"op": "test", "path": "/data/k", "value": "v"}))
            .collect();
        let err = apply(PatchKind::Json, doc.clone(), &json_patch(&json!(many))).unwrap_err();
        assert_eq!(err.code, 413, "{err:?}");

        let big = json!({"data": {"x": "y".repeat(2 << 20)}});
        let err = apply(PatchKind::Merge, doc.clone(), &json_patch(&big)).unwrap_err();
        assert_eq!(err.code, 413, "{err:?}");

        // Two adds of 60 levels, the second inside the first, then the whole
        // removed: the result is shallow, but the object was 120 deep on the
        // way (the per-operation bound refuses it).
        let mut nested = json!("leaf");
        for _ in 0..60 {
            nested = json!({ "a": nested });
        }
        let inner_path = format!("/deep{}", "/a".repeat(59));
        let deep = json!([
            {"op": "add", "path": "/deep", "value": nested.clone()},
            {"op": "add", "path": inner_path, "value": nested},
            {"op": "remove", "path": "/deep"},
        ]);
        let err = apply(PatchKind::Json, doc.clone(), &json_patch(&deep)).unwrap_err();
        assert_eq!(err.code, 422, "{err:?}");

        // Moves cost no scan, and an object deeper than the limit can still
        // be patched as long as it gets no deeper.
        let mut deep_doc = doc.clone();
        let mut nested = json!("leaf");
        for _ in 0..(MAX_DEPTH + 10) {
            nested = json!({ "a": nested });
        }
        deep_doc["deep"] = nested;
        let moves = json!([
            {"op": "move", "from": "/deep", "path": "/moved"},
            {"op": "add", "path": "/data/more", "value": "x"},
        ]);
        let out = apply(PatchKind::Json, deep_doc, &json_patch(&moves)).unwrap();
        assert!(out.get("deep").is_none() && out["moved"]["a"].is_object());

        // A modest patch still applies.
        let ok = json!([{"op": "copy", "from": "/data", "path": "/copy"}]);
        let out = apply(PatchKind::Json, doc, &json_patch(&ok)).unwrap();
        assert_eq!(out["copy"]["k"], "v");
    }

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
