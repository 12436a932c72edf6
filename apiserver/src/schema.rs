//! The minimal OpenAPI v3 validation of custom resources: `type`, `required`, `enum`,
//! `properties`, `items`, `additionalProperties` (as a schema), `nullable`,
//! `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields`. Not checked:
//! formats, patterns, lengths, bounds, `oneOf`/`anyOf`/`allOf`/`not`, CEL rules, defaults
//! (none are applied), and unknown fields are kept (a real server prunes them).

use serde_json::Value;

/// One failed rule: the field path and the real server's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// `spec.replicas`.
    pub field: String,
    /// `Invalid value: "x": spec.replicas in body must be of type integer: "string"`.
    pub message: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`.
    pub reason: &'static str,
}

/// Check `object` against the version's `openAPIV3Schema`; `metadata`, `apiVersion` and
/// `kind` are checked elsewhere (as the real server does).
pub fn validate(schema: &Value, object: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        object.as_object(),
    ) else {
        return out;
    };
    for (k, v) in obj {
        if matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        if let Some(s) = props.get(k) {
            check(s, v, k, &mut out);
        }
    }
    required(schema, obj, "", &mut out);
    out
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn required(
    schema: &Value,
    obj: &serde_json::Map<String, Value>,
    path: &str,
    out: &mut Vec<Violation>,
) {
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !obj.contains_key(r) {
            let field = if path.is_empty() {
                r.to_string()
            } else {
                format!("{path}.{r}")
            };
            out.push(Violation {
                message: "Required value".into(),
                field,
                reason: "FieldValueRequired",
            });
        }
    }
}

fn check(schema: &Value, v: &Value, path: &str, out: &mut Vec<Violation>) {
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool).unwrap_or(false);
    if v.is_null() && flag("nullable") {
        return;
    }
    let actual = type_name(v);
    if flag("x-kubernetes-int-or-string") {
        if !matches!(actual, "integer" | "string") {
            out.push(Violation {
                field: path.into(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type integer,string: \"{actual}\"",
                    shown(v)
                ),
                reason: "FieldValueInvalid",
            });
        }
        return;
    }
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let ok = expected == actual || (expected == "number" && actual == "integer");
        if !ok {
            out.push(Violation {
                field: path.into(),
                message: format!(
                    "Invalid value: {}: {path} in body must be of type {expected}: \"{actual}\"",
                    shown(v)
                ),
                reason: "FieldValueInvalid",
            });
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        out.push(Violation {
            field: path.into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                shown(v),
                list.join(", ")
            ),
            reason: "FieldValueNotSupported",
        });
    }
    match v {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in obj {
                let sub = props.and_then(|p| p.get(k)).or(additional);
                if let Some(s) = sub {
                    check(s, child, &format!("{path}.{k}"), out);
                }
            }
            required(schema, obj, path, out);
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(s, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_required_and_enums() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer"},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "port": {"x-kubernetes-int-or-string": true},
                "ratio": {"type": "number", "nullable": true}
            }}
        }});
        let ok = json!({"spec": {"size": 3, "mode": "a", "tags": ["x"], "labels": {"k": "v"}, "port": "http", "ratio": null, "extra": true}});
        assert_eq!(validate(&schema, &ok), vec![]);
        let bad = json!({"spec": {"size": "3", "mode": "c", "tags": [1], "labels": {"k": 1}, "port": 1.5}});
        let mut fields: Vec<String> = validate(&schema, &bad)
            .into_iter()
            .map(|v| v.field)
            .collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "spec.labels.k",
                "spec.mode",
                "spec.port",
                "spec.size",
                "spec.tags[0]"
            ]
        );
        let missing = validate(&schema, &json!({"spec": {}}));
        assert_eq!(missing[0].field, "spec.size");
        assert_eq!(missing[0].reason, "FieldValueRequired");
        let msg = &validate(&schema, &json!({"spec": {"size": "x"}}))[0].message;
        assert_eq!(
            msg,
            "Invalid value: \"x\": spec.size in body must be of type integer: \"string\""
        );
    }
}
