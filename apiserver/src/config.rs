//! Server configuration: where to listen, how much history to keep, timings and resource types.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::AuthConfig;
use crate::resource::ResourceType;
use crate::tls::TlsConfig;

/// Everything that can be tuned when starting a server.
///
/// Tests shorten the timings (bookmark interval, too-large-RV wait) and shrink the
/// history to provoke 410s quickly; the defaults mirror a real server closely enough.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; port 0 picks a free port. Default `127.0.0.1:0`.
    pub listen: SocketAddr,
    /// Number of write events kept for watch replay, Exact lists and continue tokens. Default 10 000.
    pub history_limit: usize,
    /// Largest accepted request body in bytes; larger bodies get 413. Default 3 MiB.
    pub max_body_bytes: usize,
    /// How often a watch with `allowWatchBookmarks` gets a BOOKMARK when the RV moved. Default 1 s.
    pub bookmark_interval: Duration,
    /// How long a request for a resourceVersion from the future waits before 504. Default 3 s.
    pub too_large_rv_wait: Duration,
    /// The served resource types. Default: core/v1 types plus `example.com/v1 Widget`.
    pub resources: Vec<ResourceType>,
    /// Events a watcher may lag behind before its stream is closed (cleanly while
    /// the history covers what it missed, else with a 410). Default 10 000.
    pub watch_buffer: usize,
    /// Namespaces created at start-up (like a fresh cluster). Default: default, kube-system,
    /// kube-public, kube-node-lease.
    pub initial_namespaces: Vec<String>,
    /// As a real server, a create in a namespace that does not exist answers 404, and one
    /// in a namespace being deleted 403; a deleted namespace is `Terminating` until all
    /// its content is deleted. `true`: a create in a missing namespace creates it first
    /// (for tests that do not care). Default false.
    pub auto_create_namespaces: bool,
    /// Upper bound on a watch's lifetime when the client gives no `timeoutSeconds`. Default 30 min.
    pub max_watch_timeout: Duration,
    /// Serve HTTPS with these certificates. Default `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    /// Authenticate and authorize requests. Default `None`: everyone may do anything.
    pub auth: Option<AuthConfig>,
    /// Keep objects and the resourceVersion counter in this directory across process
    /// restarts (and the generated CA, with `tls`). Default `None`: in memory only.
    pub data_dir: Option<PathBuf>,
    /// Serve aggregated discovery (`APIGroupDiscoveryList` on `/api` and `/apis`) to clients
    /// that ask for it, as 1.26+ does. `false`: only the legacy documents, as 1.24. Default true.
    pub aggregated_discovery: bool,
    /// Write `metadata.managedFields` on create, update, patch and apply. Default true.
    pub managed_fields: bool,
    /// Run the ownerReferences garbage collector: dependents whose owners are all gone are
    /// deleted, and `propagationPolicy` (Orphan, Background, Foreground) is honoured.
    /// Default false (deletes then touch nothing but the object, as before).
    pub garbage_collection: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 10_000,
            max_body_bytes: 3 * 1024 * 1024,
            bookmark_interval: Duration::from_secs(1),
            too_large_rv_wait: Duration::from_secs(3),
            resources: ResourceType::defaults(),
            watch_buffer: 10_000,
            initial_namespaces: vec![
                "default".into(),
                "kube-system".into(),
                "kube-public".into(),
                "kube-node-lease".into(),
            ],
            auto_create_namespaces: false,
            max_watch_timeout: Duration::from_secs(30 * 60),
            tls: None,
            auth: None,
            data_dir: None,
            aggregated_discovery: true,
            managed_fields: true,
            garbage_collection: false,
        }
    }
}
