//! Authentication (bearer tokens, client certificates, optionally anonymous) and a simple
//! RBAC-like authorizer, answering 401 and 403 `Status` objects worded as kube-apiserver's.
//!
//! Authentication tries the client certificate first, then the bearer token, as the real
//! server's union authenticator does: a presented but unknown token is a 401 even when
//! anonymous requests are allowed. Authenticated users get the `system:authenticated`
//! group. With rules, the real server's bootstrap policy is added: `system:masters` may do
//! anything, authenticated users may read discovery (`system:discovery`), everyone may read
//! `/version` and the health endpoints (`system:public-info-viewer`).

use std::collections::HashMap;

use http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::request_info::RequestInfo;
use crate::status::{ApiError, Reason};

/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The name of the anonymous user.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group the bootstrap policy lets do anything.
pub const MASTERS: &str = "system:masters";

/// A user as authentication found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user name.
    pub name: String,
    /// The groups (without the implied `system:authenticated`).
    #[serde(default)]
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user in `groups`.
    pub fn new(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.into_iter().map(Into::into).collect(),
        }
    }
}

/// A bearer token and the user it authenticates. The token never appears in `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUser {
    /// The token.
    pub token: String,
    /// Its user.
    #[serde(flatten)]
    pub user: UserInfo,
}

impl std::fmt::Debug for TokenUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenUser")
            .field("token", &"<redacted>")
            .field("user", &self.user)
            .finish()
    }
}

/// One rule of the authorizer: who may do which verbs on what.
///
/// As in RBAC, `verbs`, `api_groups`, `resources` and `non_resource_urls` match nothing
/// when empty and everything with `"*"`; `resources` entries are `plural` or
/// `plural/subresource` (`"*/status"` for any resource's status). Unlike RBAC, one rule
/// carries its subjects (`users`, `groups`; a user matches by name or by any group) and
/// its scope: `namespaces` empty means every namespace and the cluster scope, otherwise
/// only those namespaces; `names` empty means every object. A `non_resource_urls` entry is
/// a path or a prefix ending in `*`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    /// User names this rule applies to.
    pub users: Vec<String>,
    /// Groups this rule applies to.
    pub groups: Vec<String>,
    /// Verbs allowed.
    pub verbs: Vec<String>,
    /// API groups (`""` for the core group).
    pub api_groups: Vec<String>,
    /// Resources.
    pub resources: Vec<String>,
    /// Namespaces (empty: all, and cluster scope).
    pub namespaces: Vec<String>,
    /// Object names (empty: all).
    pub names: Vec<String>,
    /// Non-resource paths.
    #[serde(rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

fn strings(items: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    items.into_iter().map(Into::into).collect()
}

impl Rule {
    /// A rule for one user (add what it allows with the other builders).
    pub fn user(name: impl Into<String>) -> Self {
        Rule {
            users: vec![name.into()],
            ..Default::default()
        }
    }

    /// A rule for one group.
    pub fn group(name: impl Into<String>) -> Self {
        Rule {
            groups: vec![name.into()],
            ..Default::default()
        }
    }

    /// Allow these verbs.
    pub fn verbs(mut self, verbs: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.verbs = strings(verbs);
        self
    }

    /// On resources of these API groups.
    pub fn api_groups(mut self, groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.api_groups = strings(groups);
        self
    }

    /// On these resources.
    pub fn resources(mut self, resources: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.resources = strings(resources);
        self
    }

    /// Only in these namespaces.
    pub fn namespaces(mut self, namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.namespaces = strings(namespaces);
        self
    }

    /// Only on these object names.
    pub fn names(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.names = strings(names);
        self
    }

    /// On these non-resource paths.
    pub fn non_resource_urls(mut self, urls: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.non_resource_urls = strings(urls);
        self
    }

    fn applies_to(&self, user: &UserInfo) -> bool {
        self.users.iter().any(|u| *u == user.name || u == "*")
            || self.groups.iter().any(|g| user.groups.contains(g))
    }

    /// Whether this rule allows `info` for `user`.
    pub fn allows(&self, user: &UserInfo, info: &RequestInfo) -> bool {
        let any = |list: &[String], value: &str| list.iter().any(|v| v == "*" || v == value);
        if !self.applies_to(user) || !any(&self.verbs, &info.verb) {
            return false;
        }
        if !info.is_resource_request {
            return self
                .non_resource_urls
                .iter()
                .any(|u| match u.strip_suffix('*') {
                    Some(prefix) => info.path.starts_with(prefix),
                    None => *u == info.path,
                });
        }
        let resource_ok = if info.subresource.is_empty() {
            any(&self.resources, &info.resource)
        } else {
            let combined = format!("{}/{}", info.resource, info.subresource);
            let any_sub = format!("*/{}", info.subresource);
            self.resources
                .iter()
                .any(|r| *r == "*" || *r == combined || *r == any_sub)
        };
        any(&self.api_groups, &info.api_group)
            && resource_ok
            && (self.namespaces.is_empty()
                || (!info.namespace.is_empty() && self.namespaces.contains(&info.namespace)))
            && (self.names.is_empty() || self.names.contains(&info.name))
    }
}

/// Who may do what, once authenticated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Authorization {
    /// Every authenticated request is allowed (kube-apiserver's `AlwaysAllow`).
    #[default]
    AlwaysAllow,
    /// These rules plus the bootstrap policy; anything they do not allow is a 403.
    Rules(Vec<Rule>),
}

/// Authentication and authorization, on request ([`ServerConfig::auth`](crate::ServerConfig::auth)).
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Bearer tokens and their users.
    pub tokens: Vec<TokenUser>,
    /// Let requests without credentials through as `system:anonymous` (group
    /// `system:unauthenticated`) instead of answering 401. Default false.
    pub anonymous: bool,
    /// Who may do what.
    pub authorization: Authorization,
}

impl AuthConfig {
    /// Authentication with one token for `user` in `system:masters` (may do anything),
    /// and `AlwaysAllow`.
    pub fn admin_token(token: impl Into<String>) -> Self {
        AuthConfig {
            tokens: vec![TokenUser {
                token: token.into(),
                user: UserInfo::new("admin", [MASTERS]),
            }],
            ..Default::default()
        }
    }

    /// The user of a token, if configured.
    pub fn token_user(&self, user: &str) -> Option<&TokenUser> {
        self.tokens.iter().find(|t| t.user.name == user)
    }
}

/// A line of a token file that does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token file line {line}: {detail}")]
pub struct TokenFileError {
    /// The line number (from 1).
    pub line: usize,
    /// What is wrong.
    pub detail: String,
}

/// Read kube-apiserver's `--token-auth-file` format: `token,user,uid[,"group1,group2"]` per
/// line (`#` comments and blank lines skipped; the uid is read and ignored).
pub fn parse_token_file(text: &str) -> Result<Vec<TokenUser>, TokenFileError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |detail: &str| TokenFileError {
            line: i + 1,
            detail: detail.to_string(),
        };
        let mut fields = line.splitn(4, ',');
        let token = fields.next().unwrap_or_default().trim();
        let user = fields.next().map(str::trim).unwrap_or_default();
        let _uid = fields.next();
        if token.is_empty() || user.is_empty() {
            return Err(err("expected token,user,uid[,\"group1,group2\"]"));
        }
        let groups = match fields.next().map(str::trim) {
            None | Some("") => Vec::new(),
            Some(g) => {
                let unquoted = match g.strip_prefix('"') {
                    Some(rest) => rest
                        .strip_suffix('"')
                        .ok_or_else(|| err("unterminated quoted groups"))?,
                    None => g,
                };
                unquoted
                    .split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            }
        };
        out.push(TokenUser {
            token: token.to_string(),
            user: UserInfo {
                name: user.to_string(),
                groups,
            },
        });
    }
    Ok(out)
}

/// The bootstrap rules the real server's default RBAC policy grants.
pub fn bootstrap_rules() -> Vec<Rule> {
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery: Vec<&str> = vec![
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/openapi",
        "/openapi/*",
    ];
    discovery.extend(health);
    vec![
        Rule::group(MASTERS)
            .verbs(["*"])
            .api_groups(["*"])
            .resources(["*"])
            .non_resource_urls(["*"]),
        Rule::group(AUTHENTICATED)
            .verbs(["get"])
            .non_resource_urls(discovery),
        Rule {
            groups: vec![AUTHENTICATED.into(), UNAUTHENTICATED.into()],
            ..Rule::default()
        }
        .verbs(["get"])
        .non_resource_urls(health),
    ]
}

/// The server's authenticator and authorizer.
#[derive(Debug)]
pub(crate) struct Auth {
    tokens: HashMap<String, UserInfo>,
    anonymous: bool,
    rules: Option<Vec<Rule>>,
}

impl Auth {
    pub(crate) fn new(config: &AuthConfig) -> Self {
        Auth {
            tokens: config
                .tokens
                .iter()
                .map(|t| (t.token.clone(), t.user.clone()))
                .collect(),
            anonymous: config.anonymous,
            rules: match &config.authorization {
                Authorization::AlwaysAllow => None,
                Authorization::Rules(rules) => {
                    let mut all = bootstrap_rules();
                    all.extend(rules.iter().cloned());
                    Some(all)
                }
            },
        }
    }

    /// Who sent the request: the client certificate's user, else the bearer token's, else
    /// anonymous if allowed; otherwise 401.
    pub(crate) fn authenticate(
        &self,
        headers: &HeaderMap,
        peer: Option<&UserInfo>,
    ) -> Result<UserInfo, ApiError> {
        if let Some(user) = peer {
            return Ok(with_authenticated(user.clone()));
        }
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| token.trim().to_string())
            });
        match bearer {
            Some(token) => match self.tokens.get(&token) {
                Some(user) => Ok(with_authenticated(user.clone())),
                None => Err(unauthorized()),
            },
            None if self.anonymous => Ok(UserInfo::new(ANONYMOUS, [UNAUTHENTICATED])),
            None => Err(unauthorized()),
        }
    }

    /// Whether `user` may make this request; 403 otherwise.
    pub(crate) fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Result<(), ApiError> {
        match &self.rules {
            None => Ok(()),
            Some(rules) => rules
                .iter()
                .any(|r| r.allows(user, info))
                .then_some(())
                .ok_or_else(|| forbidden(user, info)),
        }
    }
}

fn with_authenticated(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.into());
    }
    user
}

/// The real server's 401: `Status` with message and reason `Unauthorized`, no details.
pub fn unauthorized() -> ApiError {
    ApiError::new(Reason::Unauthorized, "Unauthorized")
}

/// The real server's 403 for `user` making `info`.
pub fn forbidden(user: &UserInfo, info: &RequestInfo) -> ApiError {
    let who = &user.name;
    let verb = &info.verb;
    if !info.is_resource_request {
        return ApiError::new(
            Reason::Forbidden,
            format!("forbidden: User {who:?} cannot {verb} path {:?}", info.path),
        )
        .with_details(json!({}));
    }
    let mut resource = info.resource.clone();
    if !info.subresource.is_empty() {
        resource = format!("{resource}/{}", info.subresource);
    }
    let group = &info.api_group;
    let why = if info.namespace.is_empty() {
        format!(
            "User {who:?} cannot {verb} resource {resource:?} in API group {group:?} at the cluster scope"
        )
    } else {
        format!(
            "User {who:?} cannot {verb} resource {resource:?} in API group {group:?} in the namespace {:?}",
            info.namespace
        )
    };
    let qualified = crate::status::qualified(group, &info.resource);
    let message = if info.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", info.name)
    };
    let mut details = serde_json::Map::new();
    if !info.name.is_empty() {
        details.insert("name".into(), Value::String(info.name.clone()));
    }
    if !group.is_empty() {
        details.insert("group".into(), Value::String(group.clone()));
    }
    details.insert("kind".into(), Value::String(info.resource.clone()));
    ApiError::new(Reason::Forbidden, message).with_details(Value::Object(details))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, path: &str) -> RequestInfo {
        RequestInfo::resolve(method, path, None)
    }

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    fn auth(anonymous: bool, rules: Vec<Rule>) -> Auth {
        Auth::new(&AuthConfig {
            tokens: vec![TokenUser {
                token: "t-alice".into(),
                user: UserInfo::new("alice", ["dev"]),
            }],
            anonymous,
            authorization: Authorization::Rules(rules),
        })
    }

    #[test]
    fn tokens_certificates_and_anonymous() {
        let a = auth(false, vec![]);
        let alice = a.authenticate(&headers("t-alice"), None).unwrap();
        assert_eq!(alice.groups, vec!["dev", AUTHENTICATED]);
        assert_eq!(a.authenticate(&headers("wrong"), None), Err(unauthorized()));
        assert_eq!(a.authenticate(&HeaderMap::new(), None), Err(unauthorized()));
        let cert_user = UserInfo::new("bob", ["ops"]);
        assert_eq!(
            a.authenticate(&headers("wrong"), Some(&cert_user))
                .unwrap()
                .name,
            "bob"
        );
        let a = auth(true, vec![]);
        assert_eq!(
            a.authenticate(&HeaderMap::new(), None).unwrap().name,
            ANONYMOUS
        );
        // A presented token that is unknown is refused even with anonymous allowed.
        assert_eq!(a.authenticate(&headers("wrong"), None), Err(unauthorized()));
        let s = unauthorized().to_status();
        assert_eq!(
            s,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }

    #[test]
    fn rules_scope_verbs_resources_namespaces_and_names() {
        let a = auth(
            false,
            vec![
                Rule::user("alice")
                    .verbs(["get", "list", "watch"])
                    .api_groups([""])
                    .resources(["configmaps"])
                    .namespaces(["default"]),
                Rule::group("dev")
                    .verbs(["update"])
                    .api_groups(["apps"])
                    .resources(["deployments/status"])
                    .names(["web"]),
            ],
        );
        let alice = a.authenticate(&headers("t-alice"), None).unwrap();
        let ok = |m, p| a.authorize(&alice, &info(m, p)).is_ok();
        assert!(ok("GET", "/api/v1/namespaces/default/configmaps"));
        assert!(ok("GET", "/api/v1/namespaces/default/configmaps/x"));
        assert!(!ok("GET", "/api/v1/namespaces/other/configmaps"));
        assert!(!ok("GET", "/api/v1/configmaps"), "cluster-wide list");
        assert!(!ok("DELETE", "/api/v1/namespaces/default/configmaps/x"));
        assert!(ok(
            "PUT",
            "/apis/apps/v1/namespaces/a/deployments/web/status"
        ));
        assert!(!ok("PUT", "/apis/apps/v1/namespaces/a/deployments/web"));
        assert!(!ok(
            "PUT",
            "/apis/apps/v1/namespaces/a/deployments/db/status"
        ));
        // Bootstrap policy: discovery and health for authenticated users, nothing else.
        assert!(ok("GET", "/api"));
        assert!(ok("GET", "/apis/apps/v1"));
        assert!(ok("GET", "/version"));
        assert!(!ok("POST", "/admin/faults/compact"));
        let anon = UserInfo::new(ANONYMOUS, [UNAUTHENTICATED]);
        assert!(a.authorize(&anon, &info("GET", "/healthz")).is_ok());
        assert!(a.authorize(&anon, &info("GET", "/api")).is_err());
        let root = a
            .authenticate(&HeaderMap::new(), Some(&UserInfo::new("root", [MASTERS])))
            .unwrap();
        assert!(
            a.authorize(&root, &info("DELETE", "/api/v1/namespaces/x"))
                .is_ok()
        );
    }

    #[test]
    fn token_files_read_as_kube_apiserver_reads_them() {
        let users = parse_token_file(
            "# comment\n\nt1,alice,1\nt2,bob,2,\"dev,ops\"\nt3, carol ,3,admins\n",
        )
        .unwrap();
        assert_eq!(users.len(), 3);
        assert_eq!(users[0].user, UserInfo::new("alice", Vec::<String>::new()));
        assert_eq!(users[1].user, UserInfo::new("bob", ["dev", "ops"]));
        assert_eq!(users[2].user, UserInfo::new("carol", ["admins"]));
        assert!(!format!("{users:?}").contains("t1"));
        let e = parse_token_file("ok,user,1\nonly-a-token\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse_token_file("t,u,1,\"open").is_err());
    }

    #[test]
    fn forbidden_messages_are_the_real_servers() {
        let x = UserInfo::new("x", ["g"]);
        let cases = [
            (
                info("GET", "/api/v1/namespaces/default/configmaps"),
                "configmaps is forbidden: User \"x\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
                json!({"kind": "configmaps"}),
            ),
            (
                info("GET", "/api/v1/nodes/n1"),
                "nodes \"n1\" is forbidden: User \"x\" cannot get resource \"nodes\" in API group \"\" at the cluster scope",
                json!({"name": "n1", "kind": "nodes"}),
            ),
            (
                info("PATCH", "/apis/apps/v1/namespaces/a/deployments/d/scale"),
                "deployments.apps \"d\" is forbidden: User \"x\" cannot patch resource \"deployments/scale\" in API group \"apps\" in the namespace \"a\"",
                json!({"name": "d", "group": "apps", "kind": "deployments"}),
            ),
            (
                info("POST", "/admin/faults/restart"),
                "forbidden: User \"x\" cannot post path \"/admin/faults/restart\"",
                json!({}),
            ),
        ];
        for (i, message, details) in cases {
            let s = forbidden(&x, &i).to_status();
            assert_eq!(s["code"], 403);
            assert_eq!(s["reason"], "Forbidden");
            assert_eq!(s["message"], message);
            assert_eq!(s["details"], details);
        }
    }
}
