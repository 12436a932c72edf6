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

use crate::answers::{Answering, apply_needs_manager, path_version, write_options};
use crate::config::ServerConfig;
use crate::delete::DeleteOptions;
use crate::discovery;
use crate::encode::list_body;
use crate::faults::{Failure, Faults, Verb};
use crate::key::ObjKey;
use crate::negotiate::{self, DiscoveryForm, Representation};
use crate::openapi;
use crate::patch::{self, PatchKind};
use crate::query::{ListAt, Query, RvParam};
use crate::resource::ResourceType;
use crate::scale;
use crate::selector::ObjectFilter;
use crate::status::{ApiError, Reason};
use crate::store::{Store, WatchRegisterError, WatchStart};
use crate::table;
use crate::watch::{EventForm, WatchSpec, WatchStream, single_error_stream};
use crate::write::Subresource;

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
        ["api"] => Ok(Target::Doc(discovery::api_versions(
            &state.addr.to_string(),
        ))),
        ["api", v] => discovery::api_resource_list(&reg, "", v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["apis"] => Ok(Target::Doc(discovery::api_group_list(&reg))),
        ["apis", g] => discovery::api_group(&reg, g)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["apis", g, v] => discovery::api_resource_list(&reg, g, v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["openapi", "v3"] => Ok(Target::Doc(openapi::root(&reg))),
        ["openapi", "v3", "api", v] => openapi::group_version_doc(&reg, "", v)
            .map(Target::Doc)
            .ok_or_else(not_found_path),
        ["openapi", "v3", "apis", g, v] => openapi::group_version_doc(&reg, g, v)
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

fn accept(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())
}

/// `/api` and `/apis` in the aggregated form, when the client asks first for it and the
/// server offers it (`ServerConfig::aggregated_discovery`).
fn aggregated_discovery(state: &AppState, path: &str, headers: &HeaderMap) -> Option<Response> {
    let core = match path.trim_matches('/') {
        "api" => true,
        "apis" => false,
        _ => return None,
    };
    let DiscoveryForm::Aggregated(version) =
        negotiate::discovery(accept(headers), state.config.aggregated_discovery)
    else {
        return None;
    };
    let doc = discovery::aggregated(&state.store.registry(), core, version);
    let mut resp = json_response(StatusCode::OK, &doc);
    if let Ok(ct) = HeaderValue::from_str(&version.content_type()) {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    resp.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    Some(resp)
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
    if method == Method::GET
        && let Some(resp) = aggregated_discovery(state, &path, req.headers())
    {
        return Ok(resp);
    }
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
    let rt = state.store.rt(res)?;
    let subresource = match subresource.as_deref() {
        None => None,
        Some("status") if rt.status.has_endpoint() => Some(Subresource::Status),
        Some("scale") if rt.scale.is_some() => Some(Subresource::Scale),
        Some(_) => return Err(not_found_path()),
    };
    let version = path_version(&path).unwrap_or(&rt.version).to_string();
    let raw_query = req.uri().query().map(str::to_string);
    let mut query = Query::parse(raw_query.as_deref())?;
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

    let representation = negotiate::representation(
        accept(req.headers()),
        verb == Verb::List,
        !state.faults.refuses_metadata(),
    )?;
    let answering = Answering {
        rt: &rt,
        version: &version,
        representation,
    };
    let opts = write_options(
        req.headers(),
        raw_query.as_deref(),
        &version,
        subresource,
        query.dry_run,
    );
    let ns = namespace.as_deref();
    let scale_paths = rt
        .scale
        .clone()
        .filter(|_| subresource == Some(Subresource::Scale));
    if subresource.is_some() && !matches!(verb, Verb::Get | Verb::Update | Verb::Patch) {
        return Err(ApiError::new(
            Reason::MethodNotAllowed,
            format!("the server does not allow this method on the requested resource ({method})"),
        ));
    }
    match (verb, name) {
        (Verb::Watch, name) => watch(state, res, &answering, namespace, name, &query).await,
        (Verb::List, _) => list(state, res, &answering, namespace, &query).await,
        (Verb::Get, Some(name)) => {
            let rec = state.store.get(res, &key(&rt, ns, &name))?;
            if let Some(paths) = &scale_paths {
                return Ok(json_response(
                    StatusCode::OK,
                    &scale::to_scale(paths, &rec.parsed()?),
                ));
            }
            Ok(answering.object(StatusCode::OK, &rec))
        }
        (Verb::Create, None) => {
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::new(
                    Reason::MethodNotAllowed,
                    "create requires a namespace in the path for namespaced resources",
                ));
            }
            let mut body = read_json(state, req).await?;
            scale::default_replicas(&rt, &mut body);
            let rec = state.store.create_with(res, ns, body, &opts)?;
            Ok(answering.object(StatusCode::CREATED, &rec))
        }
        (Verb::Update, Some(name)) => {
            let body = read_json(state, req).await?;
            if let Some(paths) = &scale_paths {
                let rec = state
                    .store
                    .modify_with(res, &key(&rt, ns, &name), &opts, |old| {
                        scale::apply_scale(paths, old, &body)
                    })?;
                return Ok(json_response(
                    StatusCode::OK,
                    &scale::to_scale(paths, &rec.parsed()?),
                ));
            }
            let rec = state.store.update_with(res, ns, Some(&name), body, &opts)?;
            Ok(answering.object(StatusCode::OK, &rec))
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
            let mut opts = opts;
            let body = read_body(state, req).await?;
            if kind == PatchKind::Apply {
                apply_needs_manager(raw_query.as_deref())?;
                opts.applied = serde_json::from_slice(&body).ok();
            }
            let k = key(&rt, ns, &name);
            let limit = state.config.max_body_bytes;
            if let Some(paths) = &scale_paths {
                let rec = state.store.modify_with(res, &k, &opts, |old| {
                    let patched = patch::apply(kind, scale::to_scale(paths, &old), &body, limit)?;
                    scale::apply_scale(paths, old, &patched)
                })?;
                return Ok(json_response(
                    StatusCode::OK,
                    &scale::to_scale(paths, &rec.parsed()?),
                ));
            }
            match state
                .store
                .modify_with(res, &k, &opts, |doc| patch::apply(kind, doc, &body, limit))
            {
                Err(e) if e.reason == Reason::NotFound && kind == PatchKind::Apply => {
                    let mut obj: Value = serde_json::from_slice(&body).map_err(|e| {
                        ApiError::bad_request(format!(
                            "error decoding apply patch (only JSON is supported): {e}"
                        ))
                    })?;
                    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.insert("name".into(), Value::String(name.clone()));
                    }
                    let rec = state.store.create_with(res, ns, obj, &opts)?;
                    Ok(answering.object(StatusCode::CREATED, &rec))
                }
                Err(e) => Err(e),
                Ok(rec) => Ok(answering.object(StatusCode::OK, &rec)),
            }
        }
        (Verb::Delete, Some(name)) => {
            let body = read_body(state, req).await?;
            let mut del = DeleteOptions::parse(&body, raw_query.as_deref())?;
            del.dry_run |= query.dry_run;
            let d = state.store.delete_with(res, &key(&rt, ns, &name), &del)?;
            Ok(answering.deletion(&d, &del))
        }
        (Verb::Delete, None) => {
            // deletecollection exists only on a namespaced type's namespaced
            // path: `DELETE /api/v1/configmaps` must not empty every namespace.
            // Namespaces offer none either.
            if (rt.namespaced && ns.is_none()) || crate::namespace::is_namespace_type(&rt) {
                return Err(ApiError::new(
                    Reason::MethodNotAllowed,
                    format!(
                        "the server does not allow this method on the requested resource ({method})"
                    ),
                ));
            }
            let body = read_body(state, req).await?;
            let mut del = DeleteOptions::parse(&body, raw_query.as_deref())?;
            del.dry_run |= query.dry_run;
            let filter = ObjectFilter {
                namespace: namespace.clone(),
                labels: query.labels.clone(),
                fields: query.fields.clone(),
            };
            let deleted = state.store.delete_collection_with(res, &filter, &del)?;
            let rv = state.store.current_rv();
            let (list_kind, list_api_version) = answering.list_type();
            Ok(with_json_type(Response::new(Body::from_stream(list_body(
                &list_kind,
                &list_api_version,
                rv,
                None,
                None,
                deleted,
                answering.item_form(),
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
    answering: &Answering<'_>,
    namespace: Option<String>,
    query: &Query,
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
    let page = state.store.list(
        res,
        &filter,
        exact,
        query.limit,
        query.continue_token.as_ref(),
    )?;
    if answering.representation == Representation::Table {
        return Ok(json_response(
            StatusCode::OK,
            &table::list_table(
                answering.rt,
                &page.items,
                page.rv,
                page.continue_token.as_deref(),
                page.remaining,
            ),
        ));
    }
    let (list_kind, list_api_version) = answering.list_type();
    let body = list_body(
        &list_kind,
        &list_api_version,
        page.rv,
        page.continue_token.as_deref(),
        page.remaining,
        page.items,
        answering.item_form(),
    );
    Ok(with_json_type(Response::new(Body::from_stream(body))))
}

async fn watch(
    state: &Arc<AppState>,
    res: usize,
    answering: &Answering<'_>,
    namespace: Option<String>,
    name: Option<String>,
    query: &Query,
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
    let (kind, api_version) = answering.bookmark_type();
    let spec = WatchSpec {
        resource: res,
        kind,
        api_version,
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
        form: match answering.representation {
            Representation::Table => EventForm::Table(Arc::new(answering.rt.clone())),
            _ => EventForm::Object(answering.object_form()),
        },
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
        "refuse-metadata" => f.refuse_metadata(fb.enabled.unwrap_or(true)),
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
