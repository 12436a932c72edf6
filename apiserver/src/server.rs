//! HTTP routes: discovery, the resource verbs, watch streams and the admin fault endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::ServerConfig;
use crate::encode::list_body;
use crate::faults::{Failure, Faults, Verb};
use crate::object::{ObjKey, ObjectRecord};
use crate::patch::{self, PatchKind};
use crate::query::{ListAt, Query, RvParam};
use crate::resource::ResourceType;
use crate::selector::ObjectFilter;
use crate::status::{ApiError, Reason};
use crate::store::{DeletePreconditions, Store, WatchRegisterError, WatchStart};
use crate::table;
use crate::watch::{WatchSpec, WatchStream, single_error_stream};

/// Shared state of the HTTP layer.
pub struct AppState {
    /// Objects, history, watchers.
    pub store: Arc<Store>,
    /// Fault switches.
    pub faults: Faults,
    /// The configuration the server started with.
    pub config: ServerConfig,
    /// The bound address (for `/api`'s serverAddressByClientCIDRs).
    pub addr: SocketAddr,
}

/// Build the router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(ok_text))
        .route("/readyz", get(ok_text))
        .route("/livez", get(ok_text))
        .route("/admin/faults", get(admin_state))
        .route("/admin/faults/{name}", post(admin_fault))
        .fallback(api)
        .with_state(state)
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(value.to_string()),
    )
        .into_response()
}

fn bytes_response(code: StatusCode, bytes: Bytes) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(bytes),
    )
        .into_response()
}

/// A `Status` answer for an error, with `Retry-After` when set.
pub fn error_response(err: &ApiError) -> Response {
    let code = StatusCode::from_u16(err.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, &err.to_status());
    if let Some(secs) = err.retry_after_secs {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "major": "1",
            "minor": "32",
            "gitVersion": "v1.32.0-kinformer",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-01-01T00:00:00Z",
            "goVersion": "go1.23.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
    )
}

async fn ok_text() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response()
}

/// What a path addresses.
#[derive(Debug)]
enum Target {
    /// A discovery document.
    Doc(Value),
    /// A resource collection or object.
    Resource {
        res: usize,
        namespace: Option<String>,
        name: Option<String>,
        subresource: Option<String>,
        watch_path: bool,
    },
}

fn not_found_path() -> ApiError {
    ApiError::new(
        Reason::NotFound,
        "the server could not find the requested resource",
    )
    .with_details(json!({}))
}

fn parse_target(state: &AppState, path: &str) -> Result<Target, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let reg = state.store.registry();
    match segs.as_slice() {
        ["api"] => Ok(Target::Doc(reg.api_versions(&state.addr.to_string()))),
        ["api", v] => reg
            .api_resource_list("", v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["apis"] => Ok(Target::Doc(reg.api_group_list())),
        ["apis", g] => reg.api_group(g).map(Target::Doc).ok_or_else(not_found_path),
        ["apis", g, v] => reg
            .api_resource_list(g, v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["openapi", "v3"] => Ok(Target::Doc(reg.openapi_v3_root())),
        ["openapi", "v3", "api", v] => reg
            .openapi_v3_doc("", v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["openapi", "v3", "apis", g, v] => reg
            .openapi_v3_doc(g, v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["api", v, rest @ ..] => resource_target(state, "", v, rest),
        ["apis", g, v, rest @ ..] => resource_target(state, g, v, rest),
        _ => Err(not_found_path()),
    }
}

fn resource_target(
    state: &AppState,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Target, ApiError> {
    let reg = state.store.registry();
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let lookup = |plural: &str| reg.get_versioned(group, version, plural);
    let build = |res: usize, namespace: Option<&str>, tail: &[&str]| -> Result<Target, ApiError> {
        if tail.len() > 2 {
            return Err(not_found_path());
        }
        Ok(Target::Resource {
            res,
            namespace: namespace.map(str::to_string),
            name: tail.first().map(|s| s.to_string()),
            subresource: tail.get(1).map(|s| s.to_string()),
            watch_path,
        })
    };
    if let ["namespaces", ns, plural, tail @ ..] = rest
        && let Some((res, rt)) = lookup(plural)
        && rt.namespaced
    {
        return build(res, Some(ns), tail);
    }
    match rest {
        [plural, tail @ ..] => {
            let (res, rt) = lookup(plural).ok_or_else(not_found_path)?;
            if rt.namespaced && !tail.is_empty() {
                return Err(not_found_path());
            }
            build(res, None, tail)
        }
        [] => Err(not_found_path()),
    }
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

async fn api(State(state): State<Arc<AppState>>, req: Request) -> Response {
    match api_inner(&state, req).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    }
}

fn verb_for(method: &Method, has_name: bool, watch: bool) -> Option<Verb> {
    Some(match *method {
        Method::GET if watch => Verb::Watch,
        Method::GET if has_name => Verb::Get,
        Method::GET => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE => Verb::Delete,
        _ => return None,
    })
}

async fn api_inner(state: &Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let target = parse_target(state, &path)?;
    let (res, namespace, name, subresource, watch_path) = match target {
        Target::Doc(doc) => {
            if method != Method::GET {
                return Err(ApiError::new(
                    Reason::MethodNotAllowed,
                    format!(
                        "the server does not allow this method on the requested resource ({method})"
                    ),
                ));
            }
            return Ok(json_response(StatusCode::OK, &doc));
        }
        Target::Resource {
            res,
            namespace,
            name,
            subresource,
            watch_path,
        } => (res, namespace, name, subresource, watch_path),
    };
    if let Some(sub) = &subresource
        && sub != "status"
    {
        return Err(not_found_path());
    }
    let rt = state
        .store
        .registry()
        .types()
        .get(res)
        .cloned()
        .ok_or_else(not_found_path)?;
    let mut query = Query::parse(req.uri().query())?;
    query.watch |= watch_path;
    if watch_path && method != Method::GET {
        return Err(ApiError::new(
            Reason::MethodNotAllowed,
            "watch paths only accept GET",
        ));
    }
    let verb = verb_for(&method, name.is_some(), query.watch).ok_or_else(|| {
        ApiError::new(
            Reason::MethodNotAllowed,
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    })?;
    tracing::debug!(%method, %path, ?verb, "request");

    let latency = state.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(failure) = state.faults.take_failure(verb) {
        tracing::debug!(?verb, ?failure, "injected failure");
        return Err(failure.to_error());
    }

    let table = wants_table(req.headers());
    let ns = namespace.as_deref();
    match (verb, name) {
        (Verb::Watch, name) => watch(state, res, &rt, namespace, name, &query, table).await,
        (Verb::List, _) => list(state, res, &rt, namespace, &query, table).await,
        (Verb::Get, Some(name)) => {
            let rec = state.store.get(res, &key(&rt, ns, &name))?;
            Ok(object_response(StatusCode::OK, &rt, &rec, table))
        }
        (Verb::Create, None) => {
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::new(
                    Reason::MethodNotAllowed,
                    "create requires a namespace in the path for namespaced resources",
                ));
            }
            let body = read_json(state, req).await?;
            let rec = state.store.create(res, ns, body, query.dry_run)?;
            Ok(bytes_response(StatusCode::CREATED, rec.json.clone()))
        }
        (Verb::Update, Some(name)) => {
            let body = read_json(state, req).await?;
            let rec = state
                .store
                .update(res, ns, Some(&name), body, query.dry_run)?;
            Ok(bytes_response(StatusCode::OK, rec.json.clone()))
        }
        (Verb::Patch, Some(name)) => {
            let ct = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let kind = PatchKind::from_content_type(ct.as_deref())?;
            if kind == PatchKind::StrategicMerge && !rt.accepts_strategic_merge() {
                return Err(ApiError::new(
                    Reason::UnsupportedMediaType,
                    format!("strategic merge patch is not supported for {}", rt.kind),
                ));
            }
            let body = read_body(state, req).await?;
            let k = key(&rt, ns, &name);
            match state.store.modify(res, &k, query.dry_run, |doc| {
                patch::apply(kind, doc, &body, state.config.max_body_bytes)
            }) {
                Err(e) if e.reason == Reason::NotFound && kind == PatchKind::Apply => {
                    let mut obj: Value = serde_json::from_slice(&body).map_err(|e| {
                        ApiError::bad_request(format!(
                            "error decoding apply patch (only JSON is supported): {e}"
                        ))
                    })?;
                    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.insert("name".into(), Value::String(name.clone()));
                    }
                    let rec = state.store.create(res, ns, obj, query.dry_run)?;
                    Ok(bytes_response(StatusCode::CREATED, rec.json.clone()))
                }
                Err(e) => Err(e),
                Ok(rec) => Ok(bytes_response(StatusCode::OK, rec.json.clone())),
            }
        }
        (Verb::Delete, Some(name)) => {
            let body = read_body(state, req).await?;
            let (pre, dry) = delete_options(&body)?;
            let rec = state
                .store
                .delete(res, &key(&rt, ns, &name), &pre, query.dry_run || dry)?;
            Ok(bytes_response(StatusCode::OK, rec.json.clone()))
        }
        (Verb::Delete, None) => {
            // deletecollection exists only on a namespaced type's namespaced
            // path: `DELETE /api/v1/configmaps` must not empty every namespace.
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::new(
                    Reason::MethodNotAllowed,
                    format!(
                        "the server does not allow this method on the requested resource ({method})"
                    ),
                ));
            }
            let body = read_body(state, req).await?;
            let (_, dry) = delete_options(&body)?;
            let filter = ObjectFilter {
                namespace: namespace.clone(),
                labels: query.labels.clone(),
                fields: query.fields.clone(),
            };
            let deleted = state
                .store
                .delete_collection(res, &filter, query.dry_run || dry)?;
            let rv = state.store.current_rv();
            Ok(with_json_type(Response::new(Body::from_stream(list_body(
                &rt.list_kind(),
                &rt.api_version(),
                rv,
                None,
                None,
                deleted,
            )))))
        }
        _ => Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!("the server does not allow this method on the requested resource ({method})"),
        )),
    }
}

fn with_json_type(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn key(rt: &ResourceType, ns: Option<&str>, name: &str) -> ObjKey {
    rt.key(ns, name)
}

fn object_response(
    code: StatusCode,
    rt: &ResourceType,
    rec: &ObjectRecord,
    table: bool,
) -> Response {
    if table {
        return json_response(code, &table::object_table(rt, rec));
    }
    bytes_response(code, rec.json.clone())
}

async fn read_body(state: &AppState, req: Request) -> Result<Bytes, ApiError> {
    let limit = state.config.max_body_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|_| ApiError::too_large(limit))
}

async fn read_json(state: &AppState, req: Request) -> Result<Value, ApiError> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    if ct.starts_with(crate::protobuf::PROTOBUF) {
        let body = read_body(state, req).await?;
        return crate::protobuf::decode(&body);
    }
    if ct.contains("yaml") || ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::new(
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json (got \"{ct}\")"
            ),
        ));
    }
    let body = read_body(state, req).await?;
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format: couldn't get version/kind; json parse error: {e}"
        ))
    })
}

fn delete_options(body: &[u8]) -> Result<(DeletePreconditions, bool), ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((DeletePreconditions::default(), false));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
    let pre = v.get("preconditions");
    let uid = pre
        .and_then(|p| p.get("uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let resource_version = match pre
        .and_then(|p| p.get("resourceVersion"))
        .and_then(Value::as_str)
    {
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("invalid resourceVersion precondition: {s}"))
        })?),
        None => None,
    };
    let dry = v
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    Ok((
        DeletePreconditions {
            uid,
            resource_version,
        },
        dry,
    ))
}

/// Wait (bounded by the configured too-large-RV wait) for the RV to reach `rv`.
async fn ensure_rv(state: &AppState, rv: u64) -> Result<(), ApiError> {
    if rv <= state.store.current_rv() {
        return Ok(());
    }
    if state
        .store
        .wait_for_rv(rv, state.config.too_large_rv_wait)
        .await
    {
        Ok(())
    } else {
        Err(ApiError::too_large_resource_version(
            rv,
            state.store.current_rv(),
        ))
    }
}

async fn list(
    state: &AppState,
    res: usize,
    rt: &ResourceType,
    namespace: Option<String>,
    query: &Query,
    table: bool,
) -> Result<Response, ApiError> {
    let exact = match query.list_at() {
        ListAt::Current { not_older_than } => {
            ensure_rv(state, not_older_than).await?;
            None
        }
        ListAt::Exact(rv) => {
            ensure_rv(state, rv).await?;
            Some(rv)
        }
    };
    let filter = ObjectFilter {
        namespace,
        labels: query.labels.clone(),
        fields: query.fields.clone(),
    };
    let start_after = query.continue_token.as_ref().map(|t| &t.start_after);
    let page = state
        .store
        .list(res, &filter, exact, query.limit, start_after)?;
    if table {
        return Ok(json_response(
            StatusCode::OK,
            &table::list_table(
                rt,
                &page.items,
                page.rv,
                page.continue_token.as_deref(),
                page.remaining,
            ),
        ));
    }
    let body = list_body(
        &rt.list_kind(),
        &rt.api_version(),
        page.rv,
        page.continue_token.as_deref(),
        page.remaining,
        page.items,
    );
    Ok(with_json_type(Response::new(Body::from_stream(body))))
}

async fn watch(
    state: &Arc<AppState>,
    res: usize,
    rt: &ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    query: &Query,
    table: bool,
) -> Result<Response, ApiError> {
    let (start, initial_end) = match (query.send_initial_events, query.rv) {
        (Some(true), RvParam::At(n)) => {
            ensure_rv(state, n).await?;
            (WatchStart::InitialState, true)
        }
        (Some(true), _) => (WatchStart::InitialState, true),
        (Some(false), RvParam::Unset | RvParam::Any) => (WatchStart::Now, false),
        (_, RvParam::Unset | RvParam::Any) => (WatchStart::InitialState, false),
        (_, RvParam::At(n)) => {
            ensure_rv(state, n).await?;
            (WatchStart::After(n), false)
        }
    };
    let mut fields = query.fields.clone();
    if let Some(n) = &name {
        fields = fields.with_name(n);
    }
    let filter = ObjectFilter {
        namespace: namespace.clone(),
        labels: query.labels.clone(),
        fields,
    };
    let reg = match state.store.register_watch(res, namespace.as_deref(), start) {
        Ok(reg) => reg,
        Err(WatchRegisterError::TooOld(t)) => {
            let requested = match query.rv {
                RvParam::At(n) => n,
                _ => 0,
            };
            let err = ApiError::too_old_resource_version(requested, t.oldest);
            return Ok(with_json_type(Response::new(Body::from_stream(
                single_error_stream(&err),
            ))));
        }
        Err(WatchRegisterError::TooLarge { current }) => {
            let requested = match query.rv {
                RvParam::At(n) => n,
                _ => 0,
            };
            return Err(ApiError::too_large_resource_version(requested, current));
        }
    };
    let timeout = query
        .timeout_seconds
        .map(Duration::from_secs)
        .unwrap_or(state.config.max_watch_timeout);
    let spec = WatchSpec {
        resource: res,
        kind: rt.kind.clone(),
        api_version: rt.api_version(),
        filter,
        bookmarks: query.allow_bookmarks,
        initial_events_end: initial_end,
        deadline: {
            let now = tokio::time::Instant::now();
            now.checked_add(timeout.min(Duration::from_secs(7 * 24 * 3600)))
                .unwrap_or(now)
        },
        // A zero interval would wake the stream in a busy loop; a huge one
        // would overflow the next due time (a day is "never" for a watch).
        bookmark_interval: state
            .config
            .bookmark_interval
            .clamp(Duration::from_millis(10), Duration::from_secs(86_400)),
        table: table.then(|| rt.clone()),
    };
    let stream = WatchStream::new(state.store.clone(), spec, reg, state.faults.subscribe());
    Ok(with_json_type(Response::new(Body::from_stream(
        stream.into_body_stream(),
    ))))
}

async fn admin_state(State(state): State<Arc<AppState>>) -> Response {
    let pending: serde_json::Map<String, Value> = state
        .faults
        .pending_failures()
        .into_iter()
        .map(|(v, n)| {
            (
                serde_json::to_value(v)
                    .ok()
                    .and_then(|s| s.as_str().map(str::to_string))
                    .unwrap_or_default(),
                json!(n),
            )
        })
        .collect();
    let (history_len, compacted) = state.store.history_stats();
    json_response(
        StatusCode::OK,
        &json!({
            "watch": state.faults.watch_state(),
            "latencyMillis": state.faults.latency().as_millis() as u64,
            "pendingFailures": pending,
            "resourceVersion": state.store.current_rv().to_string(),
            "historyLength": history_len,
            "compactedResourceVersion": compacted.to_string(),
            "watchers": state.store.watcher_count(),
        }),
    )
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct FaultBody {
    events: Option<u64>,
    verb: Option<Verb>,
    count: Option<u32>,
    failure: Option<String>,
    retry_after_seconds: Option<u32>,
    millis: Option<u64>,
    enabled: Option<bool>,
}

async fn admin_fault(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let parsed: Result<FaultBody, _> = if body.iter().all(u8::is_ascii_whitespace) {
        Ok(FaultBody::default())
    } else {
        serde_json::from_slice(&body)
    };
    let fb = match parsed {
        Ok(fb) => fb,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!("invalid fault body: {e}")));
        }
    };
    let f = &state.faults;
    match name.as_str() {
        "close-watches" => f.close_all_watches(),
        "close-watches-after" => f.close_watches_after(fb.events),
        "compact" => f.compact(),
        "fail-next" => {
            let Some(verb) = fb.verb else {
                return error_response(&ApiError::bad_request("fail-next needs \"verb\""));
            };
            let failure = match fb.failure.as_deref().unwrap_or("too-many-requests") {
                "too-many-requests" | "429" => Failure::TooManyRequests {
                    retry_after_secs: fb.retry_after_seconds.unwrap_or(1),
                },
                "internal" | "500" => Failure::Internal,
                other => {
                    return error_response(&ApiError::bad_request(format!(
                        "unknown failure \"{other}\" (use too-many-requests or internal)"
                    )));
                }
            };
            f.fail_next(verb, fb.count.unwrap_or(1), failure);
        }
        "latency" => f.set_latency(Duration::from_millis(fb.millis.unwrap_or(0))),
        "stall-watches" => f.stall_watches(fb.enabled.unwrap_or(true)),
        "malformed-line" => f.inject_malformed_line(),
        "suppress-bookmarks" => f.suppress_bookmarks(fb.enabled.unwrap_or(true)),
        "clear" => f.clear(),
        other => {
            return error_response(
                &ApiError::new(Reason::NotFound, format!("unknown fault \"{other}\""))
                    .with_details(json!({"name": other})),
            );
        }
    }
    admin_state(State(state)).await
}
