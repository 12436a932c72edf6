//! Starting and stopping a server, and the handle tests use to drive it in-process.

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::watch;

use crate::auth::{Auth, AuthConfig};
use crate::config::ServerConfig;
pub use crate::error::ServerError;
use crate::faults::Faults;
use crate::load::{ChurnHandle, ChurnSpec, seed_configmaps_fast, start_churn};
use crate::object::ObjKey;
use crate::persist::DataDir;
use crate::registry::Registry;
use crate::requests::Requests;
use crate::selector::ObjectFilter;
use crate::server::{AppState, router};
use crate::serving::{Control, ServeParts};
use crate::status::ApiError;
use crate::store::{DeletePreconditions, Store};
use crate::tls::TlsState;

/// Entry points that start a server.
#[derive(Debug)]
pub struct ApiServer;

struct HandleInner {
    addr: SocketAddr,
    store: Arc<Store>,
    faults: Faults,
    runtime: tokio::runtime::Handle,
    shutdown_tx: watch::Sender<bool>,
    control: Control,
    requests: Requests,
    tls: Option<Arc<TlsState>>,
    auth: Option<AuthConfig>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    served: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        // The last handle is gone: stop serving (a thread-mode server's thread then exits).
        self.faults.close_all_watches();
        self.shutdown_tx.send_replace(true);
        self.store.close_journal();
    }
}

/// Cloneable handle to a running server.
#[derive(Clone)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.inner.addr)
            .field("resource_version", &self.resource_version())
            .finish()
    }
}

struct Started {
    handle: ServerHandle,
    serve: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

async fn start_parts(config: ServerConfig) -> Result<Started, ServerError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Bind {
        addr: config.listen,
        source,
    })?;
    let store = Arc::new(Store::with_options(
        Registry::new(config.resources.clone()),
        config.history_limit,
        config.watch_buffer,
        crate::store::StoreOptions {
            managed_fields: config.managed_fields,
            garbage_collection: config.garbage_collection,
            namespace_lifecycle: true,
            auto_create_namespaces: config.auto_create_namespaces,
        },
    ));
    let mut tls_config = config.tls.clone();
    if let Some(dir) = &config.data_dir {
        let data = DataDir::open(dir)?;
        if let Some(t) = tls_config.as_mut()
            && t.ca.is_none()
        {
            t.ca = Some(data.certificate_authority()?);
        }
        data.attach(&store)?;
    }
    if config.garbage_collection {
        crate::gc::spawn(&store);
    }
    if let Ok(ns_res) = store.resolve("", "namespaces") {
        for ns in &config.initial_namespaces {
            if store.get(ns_res, &ObjKey::new("", ns)).is_ok() {
                continue;
            }
            let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            if let Err(e) = store.create(ns_res, None, body, false) {
                tracing::warn!(namespace = %ns, error = %e, "could not create initial namespace");
            }
        }
    }
    let faults = Faults::new(store.clone());
    let tls = tls_config
        .as_ref()
        .map(TlsState::new)
        .transpose()?
        .map(Arc::new);
    let auth_config = config.auth.clone();
    let requests = Requests::default();
    let state = Arc::new(AppState {
        store: store.clone(),
        faults: faults.clone(),
        config,
        addr,
    });
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (control, serve) = crate::serving::start(ServeParts {
        listener,
        addr,
        router: router(state),
        tls: tls.clone(),
        auth: auth_config.as_ref().map(|a| Arc::new(Auth::new(a))),
        requests: requests.clone(),
        store: store.clone(),
        shutdown: shutdown_rx,
    });
    let serve = Box::pin(serve);
    let handle = ServerHandle {
        inner: Arc::new(HandleInner {
            addr,
            store,
            faults,
            runtime: tokio::runtime::Handle::current(),
            shutdown_tx,
            control,
            requests,
            tls,
            auth: auth_config,
            thread: Mutex::new(None),
            served: Mutex::new(None),
        }),
    };
    tracing::info!(%addr, "api server listening");
    Ok(Started { handle, serve })
}

impl ApiServer {
    /// Start serving on the caller's tokio runtime.
    pub async fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
        let started = start_parts(config).await?;
        let task = tokio::spawn(started.serve);
        *started.handle.inner.served.lock() = Some(task);
        Ok(started.handle)
    }

    /// Start on a dedicated OS thread with its own multi-thread runtime (usable from sync code).
    pub fn start_in_thread(config: ServerConfig) -> Result<ServerHandle, ServerError> {
        let (tx, rx) = std::sync::mpsc::channel::<Result<ServerHandle, ServerError>>();
        let thread = std::thread::Builder::new()
            .name("kinformer-apiserver".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("kinformer-apiserver-worker")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(ServerError::Runtime(e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    match start_parts(config).await {
                        Ok(started) => {
                            // Hand out a handle but keep no clone here, so dropping the
                            // caller's last handle stops the server.
                            let serve = started.serve;
                            if tx.send(Ok(started.handle)).is_ok() {
                                serve.await;
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    }
                });
                rt.shutdown_timeout(std::time::Duration::from_secs(1));
            })
            .map_err(ServerError::Runtime)?;
        let handle = rx.recv().map_err(|_| ServerError::ThreadDied)??;
        *handle.inner.thread.lock() = Some(thread);
        Ok(handle)
    }
}

impl ServerHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://127.0.0.1:PORT`, or `https://` when serving TLS.
    pub fn url(&self) -> String {
        let scheme = if self.inner.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.inner.addr)
    }

    pub(crate) fn control(&self) -> &Control {
        &self.inner.control
    }

    pub(crate) fn request_log(&self) -> &Requests {
        &self.inner.requests
    }

    pub(crate) fn tls_state(&self) -> Option<&TlsState> {
        self.inner.tls.as_deref()
    }

    pub(crate) fn auth_config(&self) -> Option<&AuthConfig> {
        self.inner.auth.as_ref()
    }

    /// The fault switches.
    pub fn faults(&self) -> Faults {
        self.inner.faults.clone()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.store.current_rv()
    }

    /// Wait until every write so far is on disk (no-op without a data dir; blocks).
    pub fn sync_data(&self) {
        self.inner.store.sync_journal();
    }

    /// Number of open watch registrations (diagnostics, tests).
    pub fn watcher_count(&self) -> usize {
        self.inner.store.watcher_count()
    }

    /// Retained history length and the compacted resourceVersion (diagnostics, tests).
    pub fn history_stats(&self) -> (usize, u64) {
        self.inner.store.history_stats()
    }

    /// The store (for the in-process operations defined in other modules).
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }

    pub(crate) fn res(&self, group: &str, plural: &str) -> Result<usize, ApiError> {
        self.inner.store.resolve(group, plural)
    }

    pub(crate) fn key(&self, res: usize, namespace: Option<&str>, name: &str) -> ObjKey {
        match self.inner.store.registry().types().get(res) {
            Some(rt) => rt.key(namespace, name),
            None => ObjKey::new("", name),
        }
    }

    /// Create an object in-process (same semantics and events as `POST`).
    pub fn create(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        let res = self.res(group, plural)?;
        Ok(self
            .inner
            .store
            .create(res, namespace, object, false)?
            .to_value())
    }

    /// Replace an object in-process (unconditional when `metadata.resourceVersion` is absent).
    pub fn update(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        let res = self.res(group, plural)?;
        Ok(self
            .inner
            .store
            .update(res, namespace, None, object, false)?
            .to_value())
    }

    /// Delete an object in-process; returns its final state.
    pub fn delete(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let res = self.res(group, plural)?;
        let key = self.key(res, namespace, name);
        Ok(self
            .inner
            .store
            .delete(res, &key, &DeletePreconditions::default(), false)?
            .to_value())
    }

    /// Get an object in-process.
    pub fn get(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let res = self.res(group, plural)?;
        let key = self.key(res, namespace, name);
        Ok(self.inner.store.get(res, &key)?.to_value())
    }

    /// List objects in-process (all namespaces when `namespace` is `None`); unknown types give an empty list.
    pub fn list(&self, group: &str, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let Ok(res) = self.res(group, plural) else {
            return Vec::new();
        };
        let filter = ObjectFilter {
            namespace: namespace.map(str::to_string),
            ..Default::default()
        };
        self.inner
            .store
            .list(res, &filter, None, None, None)
            .map(|p| p.items.iter().map(|r| r.to_value()).collect())
            .unwrap_or_default()
    }

    /// Number of stored objects of a type (cheap; no serialisation).
    pub fn count(&self, group: &str, plural: &str) -> usize {
        self.res(group, plural)
            .map(|res| self.inner.store.object_count(res))
            .unwrap_or(0)
    }

    /// Create namespace `name` unless it exists (what `kubectl create namespace` does
    /// before a test's objects go in: a create in a missing namespace answers 404).
    /// Answers whether it created it.
    pub fn create_namespace(&self, name: &str) -> Result<bool, ApiError> {
        self.inner.store.ensure_namespace(name)
    }

    /// Create `count` deterministic ~1.3 KB ConfigMaps `seed-000000..` in `namespace`
    /// (created first if missing).
    pub fn seed_configmaps(&self, namespace: &str, count: usize) -> Result<(), ApiError> {
        seed_configmaps_fast(&self.inner.store, namespace, count)
    }

    /// Start a churn generator on the server's runtime.
    ///
    /// An unknown type or a non-positive rate gives a handle that is already finished.
    pub fn start_churn(&self, spec: ChurnSpec) -> ChurnHandle {
        match start_churn(self.inner.store.clone(), &self.inner.runtime, spec) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %e, "churn not started");
                ChurnHandle::finished_empty()
            }
        }
    }

    /// Try to start a churn generator, reporting an unknown type or bad rate as an error.
    pub fn try_start_churn(&self, spec: ChurnSpec) -> Result<ChurnHandle, ApiError> {
        start_churn(self.inner.store.clone(), &self.inner.runtime, spec)
    }

    /// Stop serving: open watches end, the listener closes, the data dir (if any) is
    /// written and released. A thread-mode server's thread is joined.
    pub fn shutdown(self) {
        self.inner.faults.close_all_watches();
        self.inner.shutdown_tx.send_replace(true);
        self.inner.store.close_journal();
        let thread = self.inner.thread.lock().take();
        if let Some(t) = thread {
            drop(self);
            let _ = t.join();
        }
    }

    /// Stop serving and wait until the server task has finished (tokio-mode servers).
    pub async fn shutdown_and_wait(self) {
        self.inner.faults.close_all_watches();
        self.inner.shutdown_tx.send_replace(true);
        let task = self.inner.served.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let store = self.inner.store.clone();
        let _ = tokio::task::spawn_blocking(move || store.close_journal()).await;
        let thread = self.inner.thread.lock().take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}
