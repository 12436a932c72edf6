//! Shared helpers of the integration tests: an embedded API server, a kube
//! client for it, and a subscriber actor that records what it receives.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{
    Cause, Event, EventBatch, Informer, InformerBuilder, Object, PartialObjectMeta,
    SubscribeOptions, Subscription, Workers,
};
use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};
use kube::Resource;
use tokio::sync::watch;

/// The `kinformer` binary, isolated from the developer's environment: no
/// config file, no `KINFORMER__` overrides, and no cluster configuration
/// (no `KUBECONFIG`, a `HOME` without `.kube/config`, not in a cluster), so
/// it falls back to the embedded server unless told otherwise.
#[cfg(feature = "cli")]
pub fn kinformer_command() -> std::process::Command {
    // An empty directory in the target directory (nothing writes to it, so
    // every test process shares it): working directory (no stray
    // `config.toml`) and HOME (no `.kube/config`).
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("kinformer-empty-home");
    let _ = std::fs::create_dir_all(&home);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kinformer"));
    cmd.current_dir(&home)
        .env_remove("KINFORMER_CONFIG")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home)
        .env("RUST_LOG", "warn");
    for (k, _) in std::env::vars() {
        if k.starts_with("KINFORMER__") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A fresh directory for one test, removed when dropped (also when the test
/// fails); derefs to its path.
pub struct TestDir(tempfile::TempDir);

impl TestDir {
    /// A new directory in the system's temporary directory, named `prefix-…`.
    pub fn new(prefix: &str) -> TestDir {
        TestDir(
            tempfile::Builder::new()
                .prefix(&format!("{prefix}-"))
                .tempdir()
                .expect("a temporary directory"),
        )
    }
}

impl std::ops::Deref for TestDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

/// Sends `signal` (`-INT`, `-TERM`) to a running `kinformer` and checks that
/// it stops gracefully: exit 0, then "stopping (`reason`)" and a summary among
/// the rest of its stdout (`lines`, read by a thread that ends at EOF).
#[cfg(feature = "cli")]
pub fn expect_graceful_stop(
    child: std::process::Child,
    signal: &str,
    reason: &str,
    lines: &std::sync::mpsc::Receiver<String>,
) {
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill {signal} {pid}");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(child.wait_with_output());
    });
    let out = done_rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("kinformer did not stop after {signal}"))
        .expect("wait for kinformer");
    let rest: Vec<String> = lines.iter().collect();
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        rest.iter()
            .any(|l| l.contains(&format!("stopping ({reason})"))),
        "{rest:?}"
    );
    assert!(rest.iter().any(|l| l.starts_with("summary:")), "{rest:?}");
}

/// Reads a child's stdout lines on a thread (the child's stdout must be piped).
pub fn stdout_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The address in `kinformer run`'s "kinformer: metrics on http://ADDR/metrics"
/// line, and the lines before it; `Err` with those lines if none came within `limit`.
pub fn metrics_address(
    lines: &std::sync::mpsc::Receiver<String>,
    limit: Duration,
) -> Result<(std::net::SocketAddr, Vec<String>), Vec<String>> {
    let deadline = std::time::Instant::now() + limit;
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            return Err(before);
        };
        if let Some(rest) = line.strip_prefix("kinformer: metrics on http://")
            && let Some(addr) = rest.split('/').next().and_then(|a| a.parse().ok())
        {
            return Ok((addr, before));
        }
        before.push(line);
    }
}

/// A minimal HTTP/1.1 GET (test-side only, e.g. of `/metrics` or `/readyz`):
/// status code and body.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// An embedded server on its own runtime thread, with fast bookmarks.
pub fn server(history_limit: usize) -> ServerHandle {
    let config = ServerConfig {
        history_limit,
        bookmark_interval: Duration::from_millis(200),
        too_large_rv_wait: Duration::from_millis(100),
        ..ServerConfig::default()
    };
    ApiServer::start_in_thread(config).expect("start embedded API server")
}

/// A kube client for the embedded server.
pub fn client(server: &ServerHandle) -> kube::Client {
    client_at(&server.url())
}

/// A kube client for the server at `url` (namespace `default`), e.g. in a
/// child process given the parent's server URL.
pub fn client_at(url: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().expect("server url"));
    config.default_namespace = "default".into();
    // kube-client retries 429/503/504 on its own by default; the tests examine
    // the Reflector's own rules, so they see every answer.
    config.default_retry = false;
    kube::Client::try_from(config).expect("kube client")
}

/// A Reflector backoff short enough for tests (20 ms doubling to 200 ms).
pub fn fast_backoff() -> kinformer::Backoff {
    kinformer::Backoff::new(
        Duration::from_millis(20),
        Duration::from_millis(200),
        Duration::from_secs(120),
    )
}

/// One recorded notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub kind: &'static str,
    pub key: String,
    pub rv: Option<String>,
    pub cause: Cause,
    pub unknown: bool,
}

/// What a recorder has seen, and the view of the world it rebuilt from it.
#[derive(Debug, Default)]
pub struct Log {
    pub events: Vec<Seen>,
    pub view: BTreeMap<String, String>,
    /// Sizes of the batches received (batched subscriptions).
    pub batches: Vec<usize>,
}

impl Log {
    /// Records one event (see [`record`]).
    pub fn record<K: Resource>(&mut self, event: &Event<K>) -> usize {
        record_in(self, event)
    }

    pub fn count(&self, f: impl Fn(&Seen) -> bool) -> usize {
        self.events.iter().filter(|s| f(s)).count()
    }

    /// The first event whose resourceVersion is older than the one seen
    /// before it for the same key (the embedded server's are numbers), if any.
    pub fn out_of_order(&self) -> Option<&Seen> {
        let mut last: BTreeMap<&str, u64> = BTreeMap::new();
        self.events.iter().find(|s| {
            let Some(rv) = s.rv.as_deref().and_then(|rv| rv.parse::<u64>().ok()) else {
                return false;
            };
            let before = last.insert(&s.key, rv).unwrap_or(0);
            rv < before
        })
    }
}

/// A subscriber actor that records every event; optionally stalls behind a
/// gate (while the gate is `false`) or stops itself after `stop_after` events.
pub struct Recorder {
    pub log: Arc<Mutex<Log>>,
    pub gate: Option<watch::Receiver<bool>>,
    pub stop_after: Option<usize>,
}

impl Recorder {
    pub fn start() -> (Addr<Recorder>, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        (
            Recorder {
                log: log.clone(),
                gate: None,
                stop_after: None,
            }
            .start(),
            log,
        )
    }

    pub fn gated(gate: watch::Receiver<bool>) -> (Addr<Recorder>, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        (
            Recorder {
                log: log.clone(),
                gate: Some(gate),
                stop_after: None,
            }
            .start(),
            log,
        )
    }
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

fn rv<K: Resource>(o: &std::sync::Arc<K>) -> Option<String> {
    o.meta().resource_version.clone()
}

impl Recorder {
    /// Records one event; returns how many were recorded so far.
    fn record<K: Resource>(&self, event: &Event<K>) -> usize {
        record(&self.log, event)
    }
}

/// Records one event in `log`; returns how many were recorded so far.
fn record<K: Resource>(log: &Mutex<Log>, event: &Event<K>) -> usize {
    record_in(&mut log.lock().unwrap(), event)
}

/// Records one event: appends it, and applies it to the rebuilt view.
fn record_in<K: Resource>(log: &mut Log, event: &Event<K>) -> usize {
    {
        let key = event.key().to_string();
        let seen = match &event {
            Event::Added { object, cause, .. } => {
                log.view.insert(key.clone(), rv(object).unwrap_or_default());
                Seen {
                    kind: "Added",
                    key,
                    rv: rv(object),
                    cause: *cause,
                    unknown: false,
                }
            }
            Event::Updated { new, cause, .. } => {
                log.view.insert(key.clone(), rv(new).unwrap_or_default());
                Seen {
                    kind: "Updated",
                    key,
                    rv: rv(new),
                    cause: *cause,
                    unknown: false,
                }
            }
            Event::Deleted { object, cause, .. } => {
                log.view.remove(&key);
                Seen {
                    kind: "Deleted",
                    key,
                    rv: object.object().and_then(|o| rv(o)),
                    cause: *cause,
                    unknown: object.is_final_state_unknown(),
                }
            }
        };
        log.events.push(seen);
        log.events.len()
    }
}

impl Recorder {
    /// Stops when asked to; the handler's answer waits while the gate is closed.
    fn finish(&self, n: usize, ctx: &mut Context<Self>) -> ResponseFuture<()> {
        if self.stop_after.is_some_and(|limit| n >= limit) {
            ctx.stop();
        }
        Box::pin(wait_open(self.gate.clone()))
    }
}

impl<K: Object> Handler<Event<K>> for Recorder {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, event: Event<K>, ctx: &mut Context<Self>) -> Self::Result {
        let n = self.record(&event);
        self.finish(n, ctx)
    }
}

/// A batched subscriber records each event of the batch in order, and the batch size.
impl<K: Object> Handler<EventBatch<K>> for Recorder {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, batch: EventBatch<K>, ctx: &mut Context<Self>) -> Self::Result {
        self.log.lock().unwrap().batches.push(batch.len());
        let mut n = 0;
        for event in batch.iter() {
            n = self.record(event);
        }
        self.finish(n, ctx)
    }
}

/// A subscriber whose handler does all its work in `handle` (`Result = ()`,
/// as `subscribe_pipelined` requires). While the gate is closed it pauses its
/// mailbox after each event, so what is sent to it waits there.
pub struct SyncRecorder {
    pub log: Arc<Mutex<Log>>,
    pub gate: watch::Receiver<bool>,
}

impl SyncRecorder {
    pub fn gated(gate: watch::Receiver<bool>) -> (Addr<SyncRecorder>, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        (
            SyncRecorder {
                log: log.clone(),
                gate,
            }
            .start(),
            log,
        )
    }
}

impl Actor for SyncRecorder {
    type Context = Context<Self>;
}

impl<K: Object> Handler<Event<K>> for SyncRecorder {
    type Result = ();

    fn handle(&mut self, event: Event<K>, ctx: &mut Context<Self>) {
        record(&self.log, &event);
        let mut gate = self.gate.clone();
        if !*gate.borrow() {
            ctx.wait(
                async move {
                    let _ = gate.wait_for(|open| *open).await;
                }
                .into_actor(self),
            );
        }
    }
}

/// Subscribes a [`Recorder`] to `informer` and waits for its sync; returns the log.
pub async fn subscribed<K: Object>(informer: &Informer<K>) -> Arc<Mutex<Log>> {
    let (a, log) = Recorder::start();
    informer
        .subscribe(a.recipient(), kinformer::SubscribeOptions::default())
        .await
        .expect("subscribe");
    informer
        .wait_for_sync(Duration::from_secs(60))
        .await
        .expect("sync");
    log
}

/// Waits until `f` holds, polling, or panics after `deadline` naming `what`.
pub async fn eventually(deadline: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if f() {
            return;
        }
        if tokio::time::Instant::now() > end {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's ConfigMaps in `default` as key → resourceVersion.
pub fn server_view(server: &ServerHandle) -> BTreeMap<String, String> {
    server
        .list("", "configmaps", Some("default"))
        .into_iter()
        .map(|o| {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let rv = o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (format!("default/{name}"), rv)
        })
        .collect()
}

/// A ConfigMap as JSON.
pub fn configmap(name: &str, value: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "default", "labels": { "app": "test" } },
        "data": { "value": value },
    })
}

/// An informer over ConfigMaps in `default`.
pub fn informer(server: &ServerHandle) -> kinformer::InformerBuilder<ConfigMap> {
    Informer::builder(kube::Api::<ConfigMap>::namespaced(
        client(server),
        "default",
    ))
}

/// What an engine test caches: whole ConfigMaps, or only their metadata
/// (a metadata-only informer, `Informer::metadata`). The tests generic over
/// it run for both (`for_kinds!(name: actor metadata)`).
pub trait Cached: Object + serde::Serialize {
    /// An informer of these over ConfigMaps in `default`.
    fn informer(server: &ServerHandle) -> InformerBuilder<Self>;
}

impl Cached for ConfigMap {
    fn informer(server: &ServerHandle) -> InformerBuilder<Self> {
        informer(server)
    }
}

/// What a metadata-only informer over ConfigMaps caches.
pub type MetadataOnly = PartialObjectMeta<ConfigMap>;

impl Cached for MetadataOnly {
    fn informer(server: &ServerHandle) -> InformerBuilder<Self> {
        Informer::metadata(kube::Api::<ConfigMap>::namespaced(
            client(server),
            "default",
        ))
    }
}

/// Creates ConfigMap `name` in `default` with `value`.
pub fn create(server: &ServerHandle, name: &str, value: &str) {
    server
        .create("", "configmaps", Some("default"), configmap(name, value))
        .expect("create configmap");
}

/// Waits until the subscriber's rebuilt view equals the server's ConfigMaps.
pub async fn converges(server: &ServerHandle, log: &Arc<Mutex<Log>>, what: &str) {
    let truth = server_view(server);
    eventually(Duration::from_secs(30), what, || {
        log.lock().unwrap().view == truth
    })
    .await;
}

/// Waits until `sub` counts every notification `log` recorded as delivered:
/// a handler records an event before its answer reaches the listener, which
/// is where `delivered` counts it.
pub async fn counts_every_recorded_event<K: Object>(sub: &Subscription<K>, log: &Arc<Mutex<Log>>) {
    eventually(
        Duration::from_secs(30),
        "delivered counts what was handled",
        || sub.stats().delivered == log.lock().unwrap().events.len() as u64,
    )
    .await;
}

/// An outage the watch cannot see: watches stall while `delete` (if any) is
/// deleted and `update` changed, then history is compacted and the watches
/// closed, so resuming gets a 410 and the informer relists.
pub fn change_during_outage(server: &ServerHandle, delete: Option<&str>, update: &str) {
    server.faults().stall_watches(true);
    if let Some(name) = delete {
        server
            .delete("", "configmaps", Some("default"), name)
            .unwrap();
    }
    let mut changed = server
        .get("", "configmaps", Some("default"), update)
        .unwrap();
    changed["data"]["extra"] = "changed".into();
    server
        .update("", "configmaps", Some("default"), changed)
        .unwrap();
    server.faults().compact();
    server.faults().close_all_watches();
    server.faults().stall_watches(false);
}

/// A `Block` subscriber (capacity 8) of `kind` whose handling waits while its gate is closed.
pub async fn gated_block_subscriber<K: Object>(
    kind: Kind,
    informer: &kinformer::Informer<K>,
    open: bool,
) -> (watch::Sender<bool>, Subscription<K>, Arc<Mutex<Log>>) {
    let (gate_tx, gate_rx) = watch::channel(open);
    let options = SubscribeOptions::default()
        .policy(kinformer::OverflowPolicy::Block)
        .capacity(8);
    let (sub, log) = kind.subscribe(informer, options, Some(gate_rx)).await;
    (gate_tx, sub, log)
}

/// The kinds of subscribers, each passing the same tests: an actix actor
/// (the informer in the test's actix System), a `Stream` consumed in a tokio
/// task and a closure (the informer on its own thread, the test in a
/// multi-thread tokio runtime without actix). `CompactActor` and
/// `CompactClosure` are those subscribers of an informer whose cache is
/// compact (`InformerBuilder::compact_cache`, its dictionary learned after
/// 20 objects so that the tests' few objects use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Actor,
    Stream,
    Closure,
    /// An actor reading its stream in its own context on a worker thread
    /// (`Workers::start_reading`).
    Worker,
    /// A function the listener calls in place (`subscribe_inline`), the
    /// informer in the test's actix System. It cannot wait: no gate.
    Inline,
    CompactActor,
    CompactClosure,
}

/// A [`Kind`]'s subscriber, whatever its informer's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscriber {
    Actor,
    Stream,
    Closure,
    Worker,
    Inline,
}

impl Kind {
    /// Starts the informer where this kind of subscriber needs it.
    pub fn start<K: Object + serde::Serialize>(self, builder: InformerBuilder<K>) -> Informer<K> {
        let builder = match self {
            // Both write-behind: the actor kind compresses every object (none
            // kept decoded), the closure kind keeps the last 3 decoded.
            Kind::CompactActor => builder.compact_cache(
                kinformer::CompactOptions::new()
                    .dictionary(20, 4096)
                    .recent(0),
            ),
            Kind::CompactClosure => builder.compact_cache(
                kinformer::CompactOptions::new()
                    .dictionary(20, 4096)
                    .recent(3),
            ),
            _ => builder,
        };
        match self.subscriber() {
            Subscriber::Actor | Subscriber::Inline => builder.start().expect("start the informer"),
            Subscriber::Stream | Subscriber::Closure | Subscriber::Worker => builder
                .start_on_own_thread()
                .expect("start the informer on its own thread"),
        }
    }

    /// The kind of subscriber, whatever the cache.
    fn subscriber(self) -> Subscriber {
        match self {
            Kind::Actor | Kind::CompactActor => Subscriber::Actor,
            Kind::Stream => Subscriber::Stream,
            Kind::Worker => Subscriber::Worker,
            Kind::Inline => Subscriber::Inline,
            Kind::Closure | Kind::CompactClosure => Subscriber::Closure,
        }
    }

    /// Subscribes a recorder of this kind. While `gate` is closed, its
    /// handling of an event does not finish: the actor's handler call and
    /// the closure's future wait; the stream's consumer, having taken the
    /// event, waits before it takes the next.
    pub async fn subscribe<K: Object>(
        self,
        informer: &Informer<K>,
        options: SubscribeOptions,
        gate: Option<watch::Receiver<bool>>,
    ) -> (Subscription<K>, Arc<Mutex<Log>>) {
        let log = Arc::new(Mutex::new(Log::default()));
        let sub = match self.subscriber() {
            Subscriber::Actor => {
                let recorder = Recorder {
                    log: log.clone(),
                    gate,
                    stop_after: None,
                }
                .start();
                informer.subscribe(recorder.recipient(), options).await
            }
            Subscriber::Stream => {
                let mut stream = informer.stream(options).await.expect("stream");
                let sub = stream.subscription().clone();
                let log = log.clone();
                tokio::spawn(async move {
                    while let Some(event) = stream.next().await {
                        record(&log, &event);
                        wait_open(gate.clone()).await;
                    }
                });
                Ok(sub)
            }
            Subscriber::Worker => {
                let stream = informer.stream(options).await.expect("stream");
                let sub = stream.subscription().clone();
                let log = log.clone();
                workers().start_reading(stream, move |_| StreamRecorder { log, gate });
                Ok(sub)
            }
            Subscriber::Inline => {
                assert!(
                    gate.is_none(),
                    "an inline handler cannot wait behind a gate"
                );
                let log = log.clone();
                informer
                    .subscribe_inline(options, move |event| {
                        record(&log, event);
                    })
                    .await
            }
            Subscriber::Closure => {
                let log = log.clone();
                informer
                    .subscribe_fn(options, move |event| {
                        record(&log, &event);
                        wait_open(gate.clone())
                    })
                    .await
            }
        };
        (sub.expect("subscribe"), log)
    }
}

/// The worker threads of the `Worker` kind's actors, shared by the tests
/// of one test binary.
pub fn workers() -> &'static Workers {
    static WORKERS: std::sync::OnceLock<Workers> = std::sync::OnceLock::new();
    WORKERS.get_or_init(|| Workers::new(2).expect("start the worker threads"))
}

/// An actor reading its stream in its own context. While its gate is
/// closed, its context waits after each event (so the stream's next item
/// is not asked for: the event is not handled yet).
pub struct StreamRecorder {
    pub log: Arc<Mutex<Log>>,
    pub gate: Option<watch::Receiver<bool>>,
}

impl Actor for StreamRecorder {
    type Context = Context<Self>;
}

impl<K: Object> StreamHandler<Event<K>> for StreamRecorder {
    fn handle(&mut self, event: Event<K>, ctx: &mut Context<Self>) {
        record(&self.log, &event);
        if let Some(gate) = self.gate.clone()
            && !*gate.borrow()
        {
            ctx.wait(wait_open(Some(gate)).into_actor(self));
        }
    }
}

/// Waits until `gate` (if any) is open.
async fn wait_open(gate: Option<watch::Receiver<bool>>) {
    if let Some(mut gate) = gate {
        let _ = gate.wait_for(|open| *open).await;
    }
}

/// Runs an `async fn<K: Cached>(Kind)` test once per kind of subscriber,
/// each in the runtime that kind is for, on whole ConfigMaps: `name::actor`,
/// `name::stream`, `name::closure`, `name::worker`.
#[macro_export]
macro_rules! for_each_kind {
    ($($name:ident),* $(,)?) => {$(
        $crate::for_kinds!($name: actor stream closure worker);
    )*};
}

/// Runs an `async fn<K: Cached>(Kind)` test for the kinds listed:
/// `for_kinds!(name: actor closure metadata)`; `metadata`,
/// `metadata_stream` and `metadata_closure` are those subscribers of a
/// metadata-only informer; `compact`, `compact_closure` and
/// `metadata_compact` those of an informer with a compact cache.
#[macro_export]
macro_rules! for_kinds {
    ($name:ident: $($kind:ident)*) => {
        mod $name {
            use super::*;
            $($crate::kind_test!($name, $kind);)*
        }
    };
}

/// One test of `for_kinds!`: the actor in an actix System, the others in a
/// multi-thread tokio runtime.
#[macro_export]
macro_rules! kind_test {
    ($name:ident, actor) => {
        $crate::kind_test!(@actix $name, actor, k8s_openapi::api::core::v1::ConfigMap, Actor);
    };
    ($name:ident, stream) => {
        $crate::kind_test!(@tokio $name, stream, k8s_openapi::api::core::v1::ConfigMap, Stream);
    };
    ($name:ident, worker) => {
        $crate::kind_test!(@tokio $name, worker, k8s_openapi::api::core::v1::ConfigMap, Worker);
    };
    ($name:ident, closure) => {
        $crate::kind_test!(@tokio $name, closure, k8s_openapi::api::core::v1::ConfigMap, Closure);
    };
    ($name:ident, inline) => {
        $crate::kind_test!(@actix $name, inline, k8s_openapi::api::core::v1::ConfigMap, Inline);
    };
    ($name:ident, metadata) => {
        $crate::kind_test!(@actix $name, metadata, $crate::common::MetadataOnly, Actor);
    };
    ($name:ident, metadata_stream) => {
        $crate::kind_test!(@tokio $name, metadata_stream, $crate::common::MetadataOnly, Stream);
    };
    ($name:ident, metadata_closure) => {
        $crate::kind_test!(@tokio $name, metadata_closure, $crate::common::MetadataOnly, Closure);
    };
    ($name:ident, compact) => {
        $crate::kind_test!(@actix $name, compact, k8s_openapi::api::core::v1::ConfigMap, CompactActor);
    };
    ($name:ident, compact_closure) => {
        $crate::kind_test!(@tokio $name, compact_closure, k8s_openapi::api::core::v1::ConfigMap, CompactClosure);
    };
    ($name:ident, metadata_compact) => {
        $crate::kind_test!(@actix $name, metadata_compact, $crate::common::MetadataOnly, CompactActor);
    };
    (@actix $name:ident, $test:ident, $object:ty, $kind:ident) => {
        #[actix::test]
        async fn $test() {
            super::$name::<$object>(Kind::$kind).await
        }
    };
    (@tokio $name:ident, $test:ident, $object:ty, $kind:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            super::$name::<$object>(Kind::$kind).await
        }
    };
}
