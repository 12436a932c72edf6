//! `meta.k8s.io/v1 Table` answers for kubectl's human-readable output (`Accept: ...;as=Table`).

use serde_json::{Value, json};

use crate::object::ObjectRecord;
use crate::resource::ResourceType;

/// Human age (`45s`, `3m`, `2h`, `5d`) of an RFC 3339 timestamp.
fn age(created: Option<&str>) -> String {
    let Some(ts) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - ts.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn columns(rt: &ResourceType) -> Vec<Value> {
    let mut cols = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    if rt.group.is_empty() && rt.plural == "configmaps" {
        cols.push(json!({"name": "Data", "type": "string", "format": "", "description": "Number of data entries.", "priority": 0}));
    }
    cols.push(json!({"name": "Age", "type": "string", "format": "", "description": "Time since creation.", "priority": 0}));
    cols
}

fn row(rt: &ResourceType, rec: &ObjectRecord) -> Value {
    row_of_value(rt, &rec.to_value())
}

fn row_of_value(rt: &ResourceType, obj: &Value) -> Value {
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let meta = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let created = meta.get("creationTimestamp").and_then(Value::as_str);
    let mut cells = vec![json!(name)];
    if rt.group.is_empty() && rt.plural == "configmaps" {
        let n = obj
            .get("data")
            .and_then(Value::as_object)
            .map_or(0, |m| m.len())
            + obj
                .get("binaryData")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
        cells.push(json!(n));
    }
    cells.push(json!(age(created)));
    json!({
        "cells": cells,
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta},
    })
}

/// A Table of a list page.
pub fn list_table(
    rt: &ResourceType,
    items: &[std::sync::Arc<ObjectRecord>],
    rv: u64,
    continue_token: Option<&str>,
    remaining: Option<u64>,
) -> Value {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        metadata["remainingItemCount"] = json!(r);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(rt),
        "rows": items.iter().map(|r| row(rt, r)).collect::<Vec<_>>(),
    })
}

/// A Table with one object.
pub fn object_table(rt: &ResourceType, rec: &ObjectRecord) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rec.rv.to_string()},
        "columnDefinitions": columns(rt),
        "rows": [row(rt, rec)],
    })
}

/// The object of a watch event as a one-row Table (kubectl `get -w` asks for tables).
pub fn event_table(rt: &ResourceType, object_json: &[u8]) -> Vec<u8> {
    let obj: Value = serde_json::from_slice(object_json).unwrap_or(Value::Null);
    let rv = obj
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns(rt),
        "rows": [row_of_value(rt, &obj)],
    })
    .to_string()
    .into_bytes()
}
