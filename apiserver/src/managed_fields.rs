//! `metadata.managedFields`, written roughly as a real server writes them: one entry per
//! (manager, operation, subresource) with the `FieldsV1` set of the fields it last set.
//!
//! Approximations (no schemas here): every map below the top level records `"."` (a real
//! server does so only for maps and pointer structs); a list of objects that all have a
//! string `name` is keyed by it (`k:{"name":"x"}`), every other list is atomic; an update
//! takes over the fields it adds or changes from other managers and removes the fields it
//! deletes from everyone (as a real server's update does); an apply owns exactly what it
//! applied, taking fields from others without a conflict (a real server answers 409 unless
//! `force`); managedFields a create sends are kept as sent.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// The `operation` of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// create, update, patch.
    Update,
    /// server-side apply.
    Apply,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Update => "Update",
            Operation::Apply => "Apply",
        }
    }
}

/// Who wrote what: the entry a write records.
#[derive(Debug, Clone, Copy)]
pub struct FieldWrite<'a> {
    /// `fieldManager`, or the User-Agent up to its first `/`.
    pub manager: &'a str,
    /// The operation.
    pub operation: Operation,
    /// The `apiVersion` of the request.
    pub api_version: &'a str,
    /// `status` or `scale` for a subresource write.
    pub subresource: Option<&'a str>,
    /// For an apply: the applied configuration.
    pub applied: Option<&'a Value>,
    /// The write's time, formatted like `creationTimestamp`.
    pub time: &'a str,
}

/// The manager name of a request: `fieldManager` if given, else the User-Agent up to its
/// first `/` (as the real server derives it), else `unknown`.
pub fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    let name = match field_manager.filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => user_agent
            .and_then(|ua| ua.split('/').next())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    };
    name.chars().take(128).collect()
}

/// A write body without `metadata.managedFields` keeps the stored ones (clients that do not
/// know about them must not erase them), so only real changes count.
pub fn carry(old: &Value, new: &mut Value) {
    let live = old.pointer("/metadata/managedFields").cloned();
    if let (Some(live), Some(meta)) = (live, new.get_mut("metadata").and_then(Value::as_object_mut))
        && !meta.contains_key("managedFields")
    {
        meta.insert("managedFields".into(), live);
    }
}

/// A set of field paths, as `fieldsV1` encodes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fields {
    /// This path itself is in the set (a leaf, or `"."` of a map or list item).
    owned: bool,
    children: BTreeMap<String, Fields>,
}

/// Where a value sits: what the walk leaves out, and which maps record `"."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Metadata,
    Inner,
}

/// Server-owned fields no manager owns.
fn skipped(level: Level, key: &str) -> bool {
    match level {
        Level::Top => matches!(key, "apiVersion" | "kind"),
        Level::Metadata => matches!(
            key,
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "managedFields"
                | "selfLink"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
        ),
        Level::Inner => false,
    }
}

fn child_level(level: Level, key: &str) -> Level {
    if level == Level::Top && key == "metadata" {
        Level::Metadata
    } else {
        Level::Inner
    }
}

/// The key of a list item when the list is keyed by `name`.
fn item_keys(items: &[Value]) -> Option<Vec<String>> {
    if items.is_empty() {
        return None;
    }
    items
        .iter()
        .map(|i| {
            i.get("name")
                .and_then(Value::as_str)
                .map(|n| format!("k:{}", json!({ "name": n })))
        })
        .collect()
}

impl Fields {
    fn leaf() -> Self {
        Fields {
            owned: true,
            children: BTreeMap::new(),
        }
    }

    fn is_empty(&self) -> bool {
        !self.owned && self.children.is_empty()
    }

    /// Every path set in `value` (a field at `level` with key `key`).
    fn of(value: &Value, level: Level, key: &str) -> Fields {
        match value {
            Value::Object(map) if !map.is_empty() => {
                // Top-level structs (metadata, spec, status) record no "."; maps below do.
                let owned = level != Level::Top || !is_struct(key);
                let mut f = Fields {
                    owned,
                    children: BTreeMap::new(),
                };
                f.children = Self::of_map(map, level_inside(level, key));
                f
            }
            Value::Array(items) => match item_keys(items) {
                Some(keys) => Fields {
                    owned: true,
                    children: keys
                        .into_iter()
                        .zip(items)
                        .map(|(k, item)| (k, Self::of(item, Level::Inner, "")))
                        .collect(),
                },
                None => Fields::leaf(),
            },
            _ => Fields::leaf(),
        }
    }

    fn of_map(map: &Map<String, Value>, level: Level) -> BTreeMap<String, Fields> {
        map.iter()
            .filter(|(k, _)| !skipped(level, k))
            .map(|(k, v)| (format!("f:{k}"), Self::of(v, level, k)))
            .filter(|(_, f)| !f.is_empty())
            .collect()
    }

    /// The paths of `new` that `old` lacks or has with another value.
    fn changed(old: Option<&Value>, new: &Value, level: Level, key: &str) -> Fields {
        match (old, new) {
            (Some(Value::Object(o)), Value::Object(n)) if !n.is_empty() && !o.is_empty() => {
                let inner = level_inside(level, key);
                let children = n
                    .iter()
                    .filter(|(k, _)| !skipped(inner, k))
                    .map(|(k, v)| (format!("f:{k}"), Self::changed(o.get(k), v, inner, k)))
                    .filter(|(_, f)| !f.is_empty())
                    .collect();
                Fields {
                    owned: false,
                    children,
                }
            }
            (Some(Value::Array(o)), Value::Array(n)) => match (item_keys(o), item_keys(n)) {
                (Some(ok), Some(nk)) => {
                    let children = nk
                        .into_iter()
                        .zip(n)
                        .map(|(k, item)| {
                            let before = ok.iter().position(|x| *x == k).map(|i| &o[i]);
                            let f = match before {
                                Some(b) => Self::changed(Some(b), item, Level::Inner, ""),
                                None => Self::of(item, Level::Inner, ""),
                            };
                            (k, f)
                        })
                        .filter(|(_, f)| !f.is_empty())
                        .collect();
                    Fields {
                        owned: false,
                        children,
                    }
                }
                _ if o == n => Fields::default(),
                _ => Self::of(new, level, key),
            },
            (Some(o), n) if o == n => Fields::default(),
            _ => Self::of(new, level, key),
        }
    }

    fn union(&mut self, other: &Fields) {
        self.owned |= other.owned;
        for (k, f) in &other.children {
            self.children.entry(k.clone()).or_default().union(f);
        }
    }

    fn subtract(&mut self, other: &Fields) {
        if other.owned {
            self.owned = false;
        }
        for (k, f) in &other.children {
            if let Some(mine) = self.children.get_mut(k) {
                mine.subtract(f);
            }
        }
        // Everything under a removed path goes with it.
        if other.owned && other.children.is_empty() {
            self.children.clear();
        }
        self.children.retain(|_, f| !f.is_empty());
    }

    fn to_json(&self) -> Value {
        let mut map: Map<String, Value> = self
            .children
            .iter()
            .map(|(k, f)| (k.clone(), f.to_json()))
            .collect();
        if self.owned && !self.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        Value::Object(map)
    }

    fn from_json(v: &Value) -> Fields {
        let Some(map) = v.as_object() else {
            return Fields::default();
        };
        if map.is_empty() {
            return Fields::leaf();
        }
        Fields {
            owned: map.contains_key("."),
            children: map
                .iter()
                .filter(|(k, _)| k.as_str() != ".")
                .map(|(k, v)| (k.clone(), Fields::from_json(v)))
                .collect(),
        }
    }
}

fn is_struct(key: &str) -> bool {
    matches!(key, "metadata" | "spec" | "status")
}

fn level_inside(level: Level, key: &str) -> Level {
    child_level(level, key)
}

/// The fields of a whole object (what a create sets).
fn object_fields(v: &Value) -> Fields {
    match v.as_object() {
        Some(map) => Fields {
            owned: false,
            children: Fields::of_map(map, Level::Top),
        },
        None => Fields::default(),
    }
}

fn diff(old: Option<&Value>, new: &Value) -> Fields {
    match old {
        None => object_fields(new),
        Some(o) => {
            let (Some(om), Some(nm)) = (o.as_object(), new.as_object()) else {
                return object_fields(new);
            };
            let children = nm
                .iter()
                .filter(|(k, _)| !skipped(Level::Top, k))
                .map(|(k, v)| {
                    (
                        format!("f:{k}"),
                        Fields::changed(om.get(k), v, Level::Top, k),
                    )
                })
                .filter(|(_, f)| !f.is_empty())
                .collect();
            Fields {
                owned: false,
                children,
            }
        }
    }
}

struct Entry {
    manager: String,
    operation: String,
    subresource: Option<String>,
    api_version: String,
    time: Option<String>,
    fields: Fields,
}

fn entries_of(v: &Value) -> Vec<Entry> {
    let Some(list) = v
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
    list.iter()
        .filter_map(|e| {
            Some(Entry {
                manager: s(e, "manager")?,
                operation: s(e, "operation").unwrap_or_else(|| "Update".into()),
                subresource: s(e, "subresource"),
                api_version: s(e, "apiVersion").unwrap_or_default(),
                time: s(e, "time"),
                fields: Fields::from_json(e.get("fieldsV1").unwrap_or(&Value::Null)),
            })
        })
        .collect()
}

fn entry_json(e: &Entry) -> Value {
    let mut m = json!({
        "manager": e.manager,
        "operation": e.operation,
        "apiVersion": e.api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": e.fields.to_json(),
    });
    if let Some(obj) = m.as_object_mut() {
        if let Some(t) = &e.time {
            obj.insert("time".into(), json!(t));
        }
        if let Some(s) = &e.subresource {
            obj.insert("subresource".into(), json!(s));
        }
    }
    m
}

/// Record a write in `new.metadata.managedFields`; `old` is the stored object (`None` for
/// a create). Call after [`carry`] and after deciding the write is not a no-op.
pub fn record(old: Option<&Value>, new: &mut Value, w: &FieldWrite<'_>) {
    let supplied_on_create = old.is_none()
        && new
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
    if supplied_on_create {
        return;
    }
    let mut entries = entries_of(new);
    let removed = match old {
        Some(o) => diff(Some(new), o),
        None => Fields::default(),
    };
    let taken = match (w.operation, w.applied) {
        (Operation::Apply, Some(applied)) => object_fields(applied),
        _ => diff(old, new),
    };
    let subresource = w.subresource.map(str::to_string);
    let mine = |e: &Entry| {
        e.manager == w.manager
            && e.operation == w.operation.as_str()
            && e.subresource == subresource
    };
    for e in entries.iter_mut().filter(|e| !mine(e)) {
        e.fields.subtract(&taken);
        e.fields.subtract(&removed);
    }
    let position = entries.iter().position(mine);
    let mut fields = match (w.operation, position) {
        (Operation::Update, Some(i)) => entries[i].fields.clone(),
        _ => Fields::default(),
    };
    fields.subtract(&removed);
    fields.union(&taken);
    let entry = Entry {
        manager: w.manager.to_string(),
        operation: w.operation.as_str().to_string(),
        subresource,
        api_version: w.api_version.to_string(),
        time: Some(w.time.to_string()),
        fields,
    };
    match position {
        Some(i) if taken.is_empty() && w.operation == Operation::Update => {
            // Took nothing: the entry keeps its time (what is left of it stays).
            entries[i].fields = entry.fields;
        }
        Some(i) => entries[i] = entry,
        None if !taken.is_empty() => entries.push(entry),
        None => {}
    }
    entries.retain(|e| !e.fields.is_empty());
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert(
                "managedFields".into(),
                Value::Array(entries.iter().map(entry_json).collect()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write<'a>(manager: &'a str, op: Operation, applied: Option<&'a Value>) -> FieldWrite<'a> {
        FieldWrite {
            manager,
            operation: op,
            api_version: "v1",
            subresource: None,
            applied,
            time: "2025-01-01T00:00:00Z",
        }
    }

    #[test]
    fn a_create_owns_every_field_it_set() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "uid": "u", "labels": {"app": "x"}}, "data": {"k": "v"}});
        record(
            None,
            &mut cm,
            &write("kubectl-create", Operation::Update, None),
        );
        let mf = &cm["metadata"]["managedFields"];
        assert_eq!(mf.as_array().unwrap().len(), 1);
        assert_eq!(mf[0]["manager"], "kubectl-create");
        assert_eq!(mf[0]["operation"], "Update");
        assert_eq!(mf[0]["fieldsType"], "FieldsV1");
        assert_eq!(
            mf[0]["fieldsV1"],
            json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
    }

    #[test]
    fn an_update_takes_what_it_changes_and_keeps_the_rest_with_its_owner() {
        let mut old = json!({"metadata": {"name": "a"}, "data": {"k": "v", "j": "w"}});
        record(None, &mut old, &write("creator", Operation::Update, None));
        let mut new = old.clone();
        new["data"]["k"] = json!("changed");
        new["data"]["n"] = json!("new");
        carry(&old, &mut new);
        record(
            Some(&old),
            &mut new,
            &write("editor", Operation::Update, None),
        );
        let mf = new["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 2);
        assert_eq!(mf[0]["fieldsV1"], json!({"f:data": {".": {}, "f:j": {}}}));
        assert_eq!(mf[1]["manager"], "editor");
        assert_eq!(mf[1]["fieldsV1"], json!({"f:data": {"f:k": {}, "f:n": {}}}));
        // A removal takes the field from everyone (the creator still owns the map).
        let mut next = new.clone();
        next["data"] = json!({"k": "changed", "n": "new"});
        record(
            Some(&new),
            &mut next,
            &write("editor", Operation::Update, None),
        );
        let mf = next["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf[0]["fieldsV1"], json!({"f:data": {}}), "{mf:?}");
        assert_eq!(mf[1]["fieldsV1"], json!({"f:data": {"f:k": {}, "f:n": {}}}));
        // An owner left with nothing goes.
        let mut other = next.clone();
        other["data"] = json!({"k": "changed", "n": "new", "z": "1"});
        let mut wiped = json!({"metadata": {"name": "a"}});
        carry(&other, &mut wiped);
        record(
            Some(&other),
            &mut wiped,
            &write("editor", Operation::Update, None),
        );
        assert!(wiped["metadata"].get("managedFields").is_none(), "{wiped}");
    }

    #[test]
    fn keyed_lists_apply_and_names() {
        let applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut pod = applied.clone();
        record(
            None,
            &mut pod,
            &write("kubectl", Operation::Apply, Some(&applied)),
        );
        assert_eq!(
            pod["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:containers": {".": {}, "k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(pod["metadata"]["managedFields"][0]["operation"], "Apply");
        assert_eq!(
            manager_name(None, Some("kubectl/v1.32.4 (linux/amd64)")),
            "kubectl"
        );
        assert_eq!(manager_name(Some("mine"), Some("kube-rs/5")), "mine");
        assert_eq!(manager_name(None, None), "unknown");
    }

    #[test]
    fn a_body_without_managed_fields_keeps_them() {
        let mut old = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        record(None, &mut old, &write("creator", Operation::Update, None));
        let mut new = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        carry(&old, &mut new);
        assert_eq!(old, new);
    }
}
