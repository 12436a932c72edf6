//! List and watch query parameters: parsing, validation and continue tokens.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::object::ObjKey;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, invalid_with_causes};

/// The `resourceVersion` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RvParam {
    /// Absent or empty: most recent.
    Unset,
    /// `"0"`: any version.
    Any,
    /// A specific version.
    At(u64),
}

/// The `resourceVersionMatch` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RvMatch {
    /// At least this version.
    NotOlderThan,
    /// Exactly this version.
    Exact,
}

/// Where a list page is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListAt {
    /// The current state; the caller first waits for the RV to reach the bound.
    Current {
        /// Lower bound the state must have reached.
        not_older_than: u64,
    },
    /// The state at exactly this resourceVersion (reconstructed from history).
    Exact(u64),
}

/// A parsed continue token: resume after `start` at resourceVersion `rv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// RV of the first page; later pages are served at the same RV.
    pub rv: u64,
    /// Last key returned.
    pub start_after: ObjKey,
    /// Objects in the list's scope after `start_after` at `rv`, when the
    /// page before counted them (no selector), with the scope they were
    /// counted in ([`ContinueToken::scope`]): the next page of the same
    /// scope's `remainingItemCount` is then this minus its items, where
    /// counting the keys again cost O(objects) per page (3 ms at 100k
    /// objects). Tokens are not bound to a scope, so another scope counts.
    pub remaining: Option<(u64, String)>,
}

#[derive(Serialize, Deserialize)]
struct TokenWire {
    v: String,
    rv: u64,
    start: String,
    /// Ours; the real server's tokens have no such field (tokens are opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    left: Option<u64>,
    /// The scope `left` was counted in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
}

impl ContinueToken {
    /// How a list's scope is named in a token: its resource's index in
    /// this server and its namespace (empty: every namespace).
    pub fn scope(resource: usize, namespace: Option<&str>) -> String {
        format!("{resource}/{}", namespace.unwrap_or_default())
    }

    /// Encode like the real server (base64 of a small JSON document).
    pub fn encode(&self) -> String {
        let wire = TokenWire {
            v: "meta.k8s.io/v1".into(),
            rv: self.rv,
            start: format!(
                "{}/{}\u{0}",
                self.start_after.namespace, self.start_after.name
            ),
            left: self.remaining.as_ref().map(|(n, _)| *n),
            scope: self.remaining.as_ref().map(|(_, s)| s.clone()),
        };
        let json = serde_json::to_vec(&wire).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Decode; any garbage is a 400 BadRequest.
    pub fn decode(token: &str) -> Result<Self, ApiError> {
        let bad = |why: &str| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let raw = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
        let wire: TokenWire =
            serde_json::from_slice(&raw).map_err(|_| bad("invalid continue token"))?;
        if wire.v != "meta.k8s.io/v1" {
            return Err(bad("server does not recognize this encoded key"));
        }
        if wire.rv == 0 {
            return Err(bad(
                "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
            ));
        }
        let start = wire.start.trim_end_matches('\u{0}');
        let (ns, name) = start
            .split_once('/')
            .ok_or_else(|| bad("invalid start key"))?;
        Ok(ContinueToken {
            rv: wire.rv,
            start_after: ObjKey::new(ns, name),
            remaining: wire.left.zip(wire.scope),
        })
    }
}

/// All query parameters of a collection or object request that the server honours.
#[derive(Debug, Clone)]
pub struct Query {
    /// `watch=1|true`, or a legacy `/watch/` path.
    pub watch: bool,
    /// `resourceVersion`.
    pub rv: RvParam,
    /// `resourceVersionMatch`.
    pub rv_match: Option<RvMatch>,
    /// `limit` (0 or absent: no limit).
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<ContinueToken>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// `dryRun` present (writes are validated but not stored).
    pub dry_run: bool,
}

fn parse_bool(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "1" | "true" | "True" | "TRUE" | "t" => Ok(true),
        "0" | "false" | "False" | "FALSE" | "f" | "" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "invalid value for {name}: \"{v}\": must be a boolean"
        ))),
    }
}

/// The cause's reason, as the real server's field errors have it.
fn cause_reason(detail: &str) -> &'static str {
    if detail.starts_with("Unsupported value") {
        "FieldValueNotSupported"
    } else {
        "FieldValueForbidden"
    }
}

/// One 422 naming every broken rule (field, detail), as the real server's
/// `ValidateListOptions` answers.
fn list_options_invalid(broken: &[(&str, &str)]) -> ApiError {
    let causes: Vec<(String, &'static str, String)> = broken
        .iter()
        .map(|(field, detail)| (field.to_string(), cause_reason(detail), detail.to_string()))
        .collect();
    match invalid_with_causes(
        "ListOptions.meta.k8s.io",
        "ListOptions",
        Some("meta.k8s.io"),
        "",
        &causes,
    ) {
        Err(e) => e,
        // No cause: still an answer saying so rather than a panic.
        Ok(()) => ApiError::bad_request("invalid list options"),
    }
}

impl Query {
    /// Parse a raw query string (`a=b&c=d`; empty pairs as kube-client sends are fine).
    pub fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        let params: HashMap<String, String> = form_urlencoded::parse(raw.unwrap_or("").as_bytes())
            .into_owned()
            .collect();
        let get = |k: &str| params.get(k).map(String::as_str);

        let watch = match get("watch") {
            Some(v) => parse_bool("watch", v)?,
            None => false,
        };
        let rv = match get("resourceVersion") {
            None | Some("") => RvParam::Unset,
            Some(s) => match s.parse::<u64>() {
                // "0", "00"...: any version, as the real server parses them.
                Ok(0) => RvParam::Any,
                Ok(n) => RvParam::At(n),
                Err(_) => {
                    return Err(ApiError::bad_request(format!(
                        "resourceVersion: Invalid value: \"{s}\": invalid resource version"
                    )));
                }
            },
        };
        let rv_match = match get("resourceVersionMatch") {
            None | Some("") => None,
            Some("NotOlderThan") => Some(RvMatch::NotOlderThan),
            Some("Exact") => Some(RvMatch::Exact),
            Some(other) => {
                let detail = format!(
                    "Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                );
                return Err(list_options_invalid(&[("resourceVersionMatch", &detail)]));
            }
        };
        let limit = match get("limit") {
            None | Some("") => None,
            Some(s) => {
                let n: i64 = s.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "limit: Invalid value: \"{s}\": must be an integer"
                    ))
                })?;
                (n > 0).then_some(n as usize)
            }
        };
        let continue_token = match get("continue") {
            None | Some("") => None,
            Some(s) => Some(ContinueToken::decode(s)?),
        };
        let labels = LabelSelector::parse(get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let fields = FieldSelector::parse(get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let timeout_seconds = match get("timeoutSeconds") {
            None | Some("") => None,
            // 0 means "no timeout requested", like the real server.
            Some(s) => Some(s.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "timeoutSeconds: Invalid value: \"{s}\": must be a non-negative integer"
                ))
            })?)
            .filter(|t| *t > 0),
        };
        let allow_bookmarks = match get("allowWatchBookmarks") {
            Some(v) => parse_bool("allowWatchBookmarks", v)?,
            None => false,
        };
        let send_initial_events = match get("sendInitialEvents") {
            Some(v) => Some(parse_bool("sendInitialEvents", v)?),
            None => None,
        };
        let dry_run = get("dryRun").is_some_and(|v| !v.is_empty());
        let q = Query {
            watch,
            rv,
            rv_match,
            limit,
            continue_token,
            labels,
            fields,
            timeout_seconds,
            allow_bookmarks,
            send_initial_events,
            dry_run,
        };
        q.validate()?;
        Ok(q)
    }

    /// The real server's `ValidateListOptions`: a watch and a list have
    /// rules of their own; every broken one is a cause of one 422.
    fn validate(&self) -> Result<(), ApiError> {
        let broken = if self.watch {
            self.broken_watch_rules()
        } else {
            self.broken_list_rules()
        };
        if !broken.is_empty() {
            return Err(list_options_invalid(&broken));
        }
        if self.continue_token.is_some() && matches!(self.rv, RvParam::At(_)) {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Ok(())
    }

    /// The list rules this query breaks, as (field, detail), in the real
    /// server's order.
    fn broken_list_rules(&self) -> Vec<(&'static str, &'static str)> {
        let mut broken = Vec::new();
        if self.rv_match.is_some() {
            if self.rv == RvParam::Unset {
                broken.push((
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if self.continue_token.is_some() {
                broken.push((
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if self.rv_match == Some(RvMatch::Exact) && self.rv == RvParam::Any {
                broken.push((
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        // Either value: the parameter belongs to watches.
        if self.send_initial_events.is_some() {
            broken.push((
                "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for list",
            ));
        }
        broken
    }

    /// The watch rules this query breaks, as (field, detail), in the real
    /// server's order.
    fn broken_watch_rules(&self) -> Vec<(&'static str, &'static str)> {
        let mut broken = Vec::new();
        // `sendInitialEvents=false` too: a watch list, only without its
        // initial events.
        if self.send_initial_events.is_some() && self.rv_match != Some(RvMatch::NotOlderThan) {
            broken.push((
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if let Some(rv_match) = self.rv_match {
            if self.send_initial_events.is_none() {
                broken.push((
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if rv_match != RvMatch::NotOlderThan {
                broken.push((
                    "resourceVersionMatch",
                    "Unsupported value: \"Exact\": supported values: \"NotOlderThan\"",
                ));
            }
            if self.continue_token.is_some() {
                broken.push((
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        if self.send_initial_events == Some(true) && !self.allow_bookmarks {
            broken.push((
                "allowWatchBookmarks",
                "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
        broken
    }

    /// Where a list request reads, per the real server's rules.
    pub fn list_at(&self) -> ListAt {
        if let Some(tok) = &self.continue_token {
            return ListAt::Exact(tok.rv);
        }
        match (self.rv, self.rv_match) {
            (RvParam::At(n), Some(RvMatch::Exact)) => ListAt::Exact(n),
            // A paginated list at N without a match reads exactly N (the
            // legacy rule; 410 once N is compacted), as client-go's sticky
            // paginated relists expect.
            (RvParam::At(n), None) if n > 0 && self.limit.is_some() => ListAt::Exact(n),
            (RvParam::At(n), _) => ListAt::Current { not_older_than: n },
            _ => ListAt::Current { not_older_than: 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_token_round_trip_and_garbage() {
        let t = ContinueToken {
            rv: 42,
            start_after: ObjKey::new("ns", "cm-1"),
            remaining: Some((7, ContinueToken::scope(3, Some("ns")))),
        };
        let enc = t.encode();
        assert_eq!(ContinueToken::decode(&enc).unwrap(), t);
        for garbage in ["!!!", "abc", "eyJ2IjoieCJ9"] {
            let e = ContinueToken::decode(garbage).unwrap_err();
            assert_eq!(e.code, 400, "{garbage}");
        }
        let cluster = ContinueToken {
            rv: 1,
            start_after: ObjKey::new("", "n"),
            remaining: None,
        };
        assert_eq!(ContinueToken::decode(&cluster.encode()).unwrap(), cluster);
    }

    #[test]
    fn parses_kube_client_watch_query() {
        let q = Query::parse(Some(
            "&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
        ))
        .unwrap();
        assert!(q.watch && q.allow_bookmarks);
        assert_eq!(q.rv, RvParam::Any);
        assert_eq!(q.send_initial_events, Some(true));
        assert_eq!(q.timeout_seconds, Some(290));
        // a consistent streaming list may leave resourceVersion unset
        let q = Query::parse(Some(
            "watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
        ))
        .unwrap();
        assert_eq!(q.rv, RvParam::Unset);
    }

    #[test]
    fn rv_semantics() {
        let q = Query::parse(Some("resourceVersion=5&resourceVersionMatch=Exact")).unwrap();
        assert_eq!(q.list_at(), ListAt::Exact(5));
        let q = Query::parse(Some("resourceVersion=5")).unwrap();
        assert_eq!(q.list_at(), ListAt::Current { not_older_than: 5 });
        let q = Query::parse(Some("resourceVersion=0")).unwrap();
        assert_eq!(q.list_at(), ListAt::Current { not_older_than: 0 });
        // Other spellings of zero are zero too (the real server parses them).
        for zero in ["00", "000"] {
            let q = Query::parse(Some(&format!("resourceVersion={zero}"))).unwrap();
            assert_eq!(q.rv, RvParam::Any, "{zero}");
        }
        assert_eq!(
            Query::parse(Some("resourceVersionMatch=Exact"))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            Query::parse(Some("resourceVersion=0&resourceVersionMatch=Exact"))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            Query::parse(Some("resourceVersion=abc")).unwrap_err().code,
            400
        );
        assert_eq!(Query::parse(Some("limit=x")).unwrap_err().code, 400);
        assert_eq!(
            Query::parse(Some("labelSelector=a%20b")).unwrap_err().code,
            400
        );
        let tok = ContinueToken {
            rv: 9,
            start_after: ObjKey::new("a", "b"),
            remaining: None,
        }
        .encode();
        let q = Query::parse(Some(&format!("continue={tok}&limit=2"))).unwrap();
        assert_eq!(q.list_at(), ListAt::Exact(9));
        assert_eq!(
            Query::parse(Some(&format!("continue={tok}&resourceVersion=3")))
                .unwrap_err()
                .code,
            400
        );
    }

    /// A watch's and a list's option rules, as the real server's
    /// `ValidateListOptions` words them (here the first broken rule answers;
    /// the real server lists them all). The allowWatchBookmarks rule is not
    /// in `ValidateListOptions`: it is this server's answer to a watch list
    /// it could not end with its bookmark.
    #[test]
    fn watch_and_list_options_are_validated_like_the_real_servers() {
        let invalid = |q: &str| {
            let e = Query::parse(Some(q)).expect_err(q);
            assert_eq!(e.code, 422, "{q}");
            e.message
        };
        let watch_list = "watch=1&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
        for ok in [
            format!("{watch_list}&sendInitialEvents=true"),
            // Without initial events: a watch from a resourceVersion not older than N.
            format!("{watch_list}&sendInitialEvents=false&resourceVersion=5"),
            "watch=1&resourceVersion=5".to_owned(),
            "watch=1".to_owned(),
        ] {
            Query::parse(Some(&ok)).expect(&ok);
        }
        assert!(
            invalid("watch=1&allowWatchBookmarks=true&sendInitialEvents=false").ends_with(
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            )
        );
        assert!(
            invalid("watch=1&resourceVersion=5&resourceVersionMatch=NotOlderThan").ends_with(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            )
        );
        // Every broken rule is named, in brackets when there are several,
        // each a cause of its own (as `field.ErrorList` answers).
        assert_eq!(
            invalid("watch=1&resourceVersionMatch=Exact&sendInitialEvents=true"),
            "ListOptions.meta.k8s.io \"\" is invalid: [\
             resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, \
             resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\", \
             allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true]"
        );
        let e =
            Query::parse(Some("watch=1&resourceVersion=5&resourceVersionMatch=Exact")).unwrap_err();
        let causes = e.details.unwrap()["causes"].clone();
        assert_eq!(causes.as_array().map(Vec::len), Some(2), "{causes}");
        assert_eq!(causes[0]["reason"], "FieldValueForbidden");
        assert_eq!(causes[1]["reason"], "FieldValueNotSupported");
        assert_eq!(causes[1]["field"], "resourceVersionMatch");
        let cause = |q: &str| {
            let e = Query::parse(Some(q)).expect_err(q);
            e.details.unwrap()["causes"][0]["reason"].clone()
        };
        assert_eq!(
            cause(
                "watch=1&resourceVersionMatch=Exact&sendInitialEvents=true&allowWatchBookmarks=true"
            ),
            "FieldValueForbidden"
        );
        assert_eq!(
            cause("resourceVersion=5&resourceVersionMatch=Newest"),
            "FieldValueNotSupported"
        );
        assert!(
            invalid("watch=1&resourceVersionMatch=NotOlderThan&sendInitialEvents=true")
                .ends_with("sendInitialEvents requires setting allowWatchBookmarks to true")
        );
        for list in ["sendInitialEvents=false", "sendInitialEvents=true"] {
            assert!(invalid(list).ends_with("sendInitialEvents is forbidden for list"));
        }
    }
}
