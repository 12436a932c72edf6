//! What `watch` and `get` print: notifications as JSON lines, YAML
//! documents or text lines, objects as JSON or YAML, the cache as a table.
//!
//! Every object printed goes through [`ObjectView::render`]: it gets the
//! `apiVersion` and `kind` of the resolved resource (a real server's list
//! items carry neither, its watch events both; printing them the same way
//! either way), and a Secret's values are redacted unless asked for.

use std::time::{Duration, SystemTime};

use kinformer::Event;
use kube::core::{DynamicObject, TypeMeta};
use serde_json::{Value, json};

use super::resource::Resolved;

/// The annotation `kubectl apply` writes: it holds the whole object, a
/// Secret's data included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How objects of one resource are printed.
#[derive(Debug, Clone)]
pub struct ObjectView {
    types: TypeMeta,
    /// Redact `data`/`stringData` values (a Secret, without `--show-secrets`).
    redact: bool,
}

impl ObjectView {
    /// For objects of `resource`; `show_secrets` prints a Secret's values.
    pub fn new(resource: &Resolved, show_secrets: bool) -> Self {
        let ar = &resource.api_resource;
        ObjectView {
            types: TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            },
            redact: !show_secrets && ar.group.is_empty() && ar.kind == "Secret",
        }
    }

    /// The object as printed.
    pub fn render(&self, object: &DynamicObject) -> Value {
        let mut object = object.clone();
        object.types = Some(self.types.clone());
        if self.redact {
            redact_secret(&mut object);
        }
        serde_json::to_value(&object).unwrap_or(Value::Null)
    }
}

/// Replaces every value of a Secret's `data` and `stringData` by its size,
/// and the `kubectl apply` annotation (which repeats them) by a marker.
pub fn redact_secret(object: &mut DynamicObject) {
    for (field, encoded) in [("data", true), ("stringData", false)] {
        if let Some(Value::Object(values)) = object.data.get_mut(field) {
            for value in values.values_mut() {
                let bytes = match value.as_str() {
                    Some(s) if encoded => decoded_len(s),
                    Some(s) => s.len(),
                    None => 0,
                };
                *value = Value::String(format!("<redacted: {bytes} bytes>"));
            }
        }
    }
    if let Some(annotations) = object.metadata.annotations.as_mut()
        && let Some(v) = annotations.get_mut(LAST_APPLIED)
    {
        *v = "<redacted>".into();
    }
}

/// The length of what a base64 string decodes to.
fn decoded_len(s: &str) -> usize {
    let s = s.trim_end_matches('=');
    s.len() * 3 / 4
}

/// One notification (`-o json` line, `-o yaml` document): type, key,
/// resourceVersion, cause, finalStateUnknown, and the object with `objects`.
pub fn notification(event: &Event<DynamicObject>, objects: Option<&ObjectView>) -> Value {
    let (ty, object, unknown) = match event {
        Event::Added { object, .. } => ("Added", Some(object), false),
        Event::Updated { new, .. } => ("Updated", Some(new), false),
        Event::Deleted { object, .. } => {
            ("Deleted", object.object(), object.is_final_state_unknown())
        }
    };
    let rv = object
        .and_then(|o| o.metadata.resource_version.clone())
        .unwrap_or_default();
    let mut line = json!({
        "type": ty,
        "key": event.key().as_str(),
        "resourceVersion": rv,
        "cause": event.cause(),
        "finalStateUnknown": unknown,
    });
    if let Some(view) = objects {
        line["object"] = object.map_or(Value::Null, |o| view.render(o));
    }
    line
}

/// One aligned text line: `ADDED    initial  ns/name rv=42`.
pub fn text_line(event: &Event<DynamicObject>) -> String {
    let line = notification(event, None);
    let field = |k: &str| line[k].as_str().unwrap_or_default().to_owned();
    format!(
        "{:<8} {:<8} {} rv={}{}",
        field("type").to_uppercase(),
        field("cause"),
        field("key"),
        field("resourceVersion"),
        if line["finalStateUnknown"].as_bool() == Some(true) {
            " (final state unknown)"
        } else {
            ""
        }
    )
}

/// `value` as one YAML document, starting with `---` (as `kubectl get -w -o yaml`).
pub fn yaml_document(value: &Value) -> anyhow::Result<String> {
    let body = serde_saphyr::to_string(value)?;
    Ok(format!("---\n{}", body.trim_end()))
}

/// kubectl's `List` of `items`, at `resource_version`.
pub fn list(items: Vec<Value>, resource_version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": resource_version},
        "items": items,
    })
}

/// `kubectl get`'s table: NAMESPACE (when `with_namespace`), NAME, AGE,
/// columns padded by three spaces as kubectl's tabwriter does.
pub fn table<'a>(
    objects: impl IntoIterator<Item = &'a DynamicObject>,
    with_namespace: bool,
    now: SystemTime,
) -> String {
    let mut rows = vec![];
    let header: Vec<String> = if with_namespace {
        vec!["NAMESPACE".into(), "NAME".into(), "AGE".into()]
    } else {
        vec!["NAME".into(), "AGE".into()]
    };
    rows.push(header);
    for o in objects {
        let age = o
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or("<unknown>".to_owned(), |t| {
                let created = t.0.as_millisecond();
                let now_ms = now
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                human_age(now_ms.saturating_sub(created))
            });
        let name = o.metadata.name.clone().unwrap_or_default();
        let mut row = vec![];
        if with_namespace {
            row.push(o.metadata.namespace.clone().unwrap_or_default());
        }
        row.extend([name, age]);
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}", w = widths[c] + 3));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// kubectl's AGE (apimachinery's `HumanDuration`) of `millis` milliseconds:
/// `45s`, `2m30s`, `15m`, `5h12m`, `20h`, `3d4h`, `40d`, `2y30d`, `9y`.
pub fn human_age(millis: i64) -> String {
    // Truncated toward zero, as Go converts seconds to an int.
    let seconds = millis / 1000;
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    let d = Duration::from_secs(seconds.unsigned_abs());
    let s = d.as_secs();
    if s < 120 {
        return format!("{s}s");
    }
    let minutes = s / 60;
    let with = |big: u64, unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{small}{small_unit}")
        }
    };
    if minutes < 10 {
        return with(minutes, "m", s % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = s / 3600;
    if hours < 8 {
        return with(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return with(hours / 24, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return with(hours / 24 / 365, "y", (hours / 24) % 365, "d");
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kinformer::{Cause, ObjectKey};
    use kube::discovery::ApiResource;
    use std::sync::Arc;

    fn resolved(group: &str, version: &str, kind: &str, plural: &str) -> Resolved {
        Resolved {
            api_resource: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: if group.is_empty() {
                    version.into()
                } else {
                    format!("{group}/{version}")
                },
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            by_full_name: true,
        }
    }

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    /// A list item without apiVersion/kind (a real server's) and a watch
    /// object with them print the same.
    #[test]
    fn objects_print_with_the_resources_type_either_way() {
        let view = ObjectView::new(&resolved("", "v1", "ConfigMap", "configmaps"), false);
        let bare = object(json!({"metadata": {"name": "a", "namespace": "d"}, "data": {"k": "v"}}));
        let typed = object(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}, "data": {"k": "v"}}),
        );
        assert_eq!(view.render(&bare), view.render(&typed));
        let v = view.render(&bare);
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("v1"), Some("ConfigMap"))
        );
        assert_eq!(v["data"]["k"], "v", "a ConfigMap's data is not redacted");
    }

    #[test]
    fn secret_values_are_redacted_unless_asked_for() {
        let secret = object(json!({
            "metadata": {"name": "s", "namespace": "d", "resourceVersion": "7",
                "annotations": {LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}", "team": "a"}},
            "type": "Opaque",
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "plain-text"},
        }));
        let view = ObjectView::new(&resolved("", "v1", "Secret", "secrets"), false);
        let v = view.render(&secret);
        let text = v.to_string();
        assert!(
            !text.contains("aHVudGVyMg") && !text.contains("plain-text"),
            "{text}"
        );
        assert_eq!(v["data"]["password"], "<redacted: 7 bytes>");
        assert_eq!(v["stringData"]["token"], "<redacted: 10 bytes>");
        assert_eq!(v["metadata"]["annotations"][LAST_APPLIED], "<redacted>");
        assert_eq!(v["metadata"]["annotations"]["team"], "a");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["type"], "Opaque");
        let shown = ObjectView::new(&resolved("", "v1", "Secret", "secrets"), true).render(&secret);
        assert_eq!(shown["data"]["password"], "aHVudGVyMg==");
        // Another group's `Secret` kind is not a core Secret.
        let other = ObjectView::new(&resolved("example.com", "v1", "Secret", "secrets"), false);
        assert_eq!(other.render(&secret)["data"]["password"], "aHVudGVyMg==");
    }

    #[test]
    fn notifications_as_json_yaml_and_text() {
        let view = ObjectView::new(&resolved("", "v1", "ConfigMap", "configmaps"), false);
        let obj = Arc::new(object(
            json!({"metadata": {"name": "a", "namespace": "d", "resourceVersion": "5"}}),
        ));
        let event = Event::Added {
            key: ObjectKey::new(Some("d"), "a"),
            object: obj,
            cause: Cause::Watch,
        };
        let line = notification(&event, None);
        assert_eq!(
            line,
            json!({"type": "Added", "key": "d/a", "resourceVersion": "5", "cause": "watch", "finalStateUnknown": false})
        );
        let full = notification(&event, Some(&view));
        assert_eq!(full["object"]["kind"], "ConfigMap");
        let yaml = yaml_document(&full).unwrap();
        assert!(yaml.starts_with("---\n"), "{yaml}");
        let back: Value = serde_saphyr::from_str(yaml.trim_start_matches("---\n")).unwrap();
        assert_eq!(back, full);
        assert_eq!(text_line(&event), "ADDED    watch    d/a rv=5");
    }

    #[test]
    fn ages_read_as_kubectls() {
        let s = 1000;
        let m = 60 * s;
        let h = 60 * m;
        let d = 24 * h;
        for (millis, want) in [
            (-5 * s, "<invalid>"),
            (-1500, "0s"),
            (0, "0s"),
            (45 * s, "45s"),
            (119 * s, "119s"),
            (150 * s, "2m30s"),
            (5 * m, "5m"),
            (15 * m, "15m"),
            (179 * m, "179m"),
            (5 * h + 12 * m, "5h12m"),
            (20 * h, "20h"),
            (3 * d + 4 * h, "3d4h"),
            (40 * d, "40d"),
            (2 * 365 * d + 30 * d, "2y30d"),
            (9 * 365 * d, "9y"),
        ] {
            assert_eq!(human_age(millis), want, "{millis}");
        }
    }

    #[test]
    fn tables_align_like_kubectls() {
        // 1 000 000 000 s after the epoch is 2001-09-09T01:46:40Z.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let created = |name: &str, at: &str| {
            object(
                json!({"metadata": {"name": name, "namespace": "default", "creationTimestamp": at}}),
            )
        };
        let objects = [
            created("n5", "2001-09-09T01:46:35Z"),
            created("n4000", "2001-09-09T00:40:00Z"),
        ];
        assert_eq!(
            table(&objects, true, now),
            "NAMESPACE   NAME    AGE\ndefault     n5      5s\ndefault     n4000   66m\n"
        );
        assert_eq!(table(&objects[..1], false, now), "NAME   AGE\nn5     5s\n");
        let no_time = object(json!({"metadata": {"name": "x"}}));
        assert_eq!(
            table([&no_time], false, now),
            "NAME   AGE\nx      <unknown>\n"
        );
    }
}
