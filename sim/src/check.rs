//! The model checks, as pure functions over what subscribers recorded and
//! what the server holds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Cause, Informer};

use crate::subscriber::{Kind, Log, Seen};

/// An informer's cache as a view: key to resourceVersion.
pub fn cache_view(informer: &Informer<ConfigMap>) -> BTreeMap<String, String> {
    informer
        .store()
        .snapshot()
        .iter()
        .map(|(k, o)| {
            (
                k.to_string(),
                o.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// How a view differs from the truth: one line per key, at most `most`.
pub fn view_diff(
    view: &BTreeMap<String, String>,
    truth: &BTreeMap<String, String>,
    most: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, rv) in truth {
        match view.get(k) {
            None => out.push(format!("{k}: server rv {rv}, never seen (a missed add)")),
            Some(seen) if seen != rv => out.push(format!("{k}: server rv {rv}, seen rv {seen}")),
            Some(_) => {}
        }
    }
    for (k, rv) in view {
        if !truth.contains_key(k) {
            out.push(format!(
                "{k}: seen rv {rv}, gone from the server (a missed delete)"
            ));
        }
    }
    out.truncate(most);
    out
}

fn numeric(rv: &Option<String>) -> Option<u64> {
    rv.as_deref().and_then(|r| r.parse().ok())
}

/// The notifications that break the rules of a subscriber's stream:
/// - an add for a key the subscriber already holds, or an update or delete
///   of a key it does not hold;
/// - a notification of a resourceVersion older than one already seen for
///   its key, except for relist and resync replays.
pub fn stream_violations(log: &Log, most: usize) -> Vec<String> {
    let mut held: BTreeMap<&str, ()> = BTreeMap::new();
    let mut newest: BTreeMap<&str, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, s) in log.events.iter().enumerate() {
        let Seen {
            kind,
            key,
            rv,
            cause,
            ..
        } = s;
        let present = held.contains_key(key.as_str());
        match kind {
            Kind::Added if present => out.push(format!("#{i} {s:?}: an add of a key it holds")),
            Kind::Updated | Kind::Deleted if !present => {
                out.push(format!("#{i} {s:?}: a change of a key it does not hold"))
            }
            _ => {}
        }
        match kind {
            Kind::Deleted => {
                held.remove(key.as_str());
            }
            _ => {
                held.insert(key, ());
            }
        }
        if let Some(v) = numeric(rv) {
            let before = newest.get(key.as_str()).copied().unwrap_or(0);
            if v < before && !matches!(cause, Cause::Relist | Cause::Resync) {
                out.push(format!(
                    "#{i} {s:?}: resourceVersion {v} after {before} for the same key"
                ));
            }
            newest.insert(key, v.max(before));
        }
        if out.len() >= most {
            break;
        }
    }
    out
}

/// The notifications of `log` for the keys named in `lines` (each line
/// starts with its key), for a divergence report.
pub fn history_of(log: &Log, lines: &[String], most: usize) -> Vec<String> {
    let keys: Vec<&str> = lines.iter().filter_map(|l| l.split(':').next()).collect();
    log.events
        .iter()
        .filter(|s| keys.contains(&s.key.as_str()))
        .take(most)
        .map(|s| format!("{:?} {} rv {:?} {:?}", s.kind, s.key, s.rv, s.cause))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(kind: Kind, key: &str, rv: u64, cause: Cause) -> Seen {
        Seen {
            kind,
            key: key.into(),
            rv: Some(rv.to_string()),
            cause,
            tombstone: false,
        }
    }

    fn log(events: Vec<Seen>) -> Log {
        Log {
            events,
            ..Log::default()
        }
    }

    #[test]
    fn a_valid_stream_has_no_violation() {
        let l = log(vec![
            seen(Kind::Added, "a/x", 1, Cause::Initial),
            seen(Kind::Updated, "a/x", 3, Cause::Watch),
            seen(Kind::Updated, "a/x", 3, Cause::Resync),
            seen(Kind::Deleted, "a/x", 4, Cause::Watch),
            seen(Kind::Added, "a/x", 9, Cause::Watch),
        ]);
        assert_eq!(stream_violations(&l, 10), Vec::<String>::new());
    }

    #[test]
    fn an_older_version_from_the_watch_is_a_violation_but_not_from_a_relist() {
        let l = log(vec![
            seen(Kind::Added, "a/x", 5, Cause::Initial),
            seen(Kind::Updated, "a/x", 4, Cause::Relist),
            seen(Kind::Updated, "a/x", 3, Cause::Watch),
        ]);
        let v = stream_violations(&l, 10);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("resourceVersion 3 after 5"), "{v:?}");
    }

    #[test]
    fn adds_of_held_keys_and_changes_of_unknown_keys_are_violations() {
        let l = log(vec![
            seen(Kind::Added, "a/x", 1, Cause::Initial),
            seen(Kind::Added, "a/x", 2, Cause::Watch),
            seen(Kind::Deleted, "a/y", 3, Cause::Watch),
        ]);
        assert_eq!(stream_violations(&l, 10).len(), 2);
    }

    #[test]
    fn view_diff_names_missed_adds_updates_and_deletes() {
        let truth: BTreeMap<String, String> =
            [("a/x".into(), "2".into()), ("a/y".into(), "3".into())].into();
        let view: BTreeMap<String, String> =
            [("a/x".into(), "1".into()), ("a/z".into(), "4".into())].into();
        let d = view_diff(&view, &truth, 10);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(view_diff(&truth, &truth, 10).is_empty());
    }
}
