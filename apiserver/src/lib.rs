//! An embedded Kubernetes-compatible API server for tests, demos and benchmarks.
//!
//! It speaks the real HTTP/1.1 JSON wire protocol (discovery, legacy and aggregated;
//! list/get/create/update/patch/delete/deletecollection; watch with bookmarks and streaming
//! lists; `Status` errors; Tables and metadata-only answers), so kube-client, kube-runtime's
//! `watcher()` and `kubectl` work against it unchanged. Besides the core types it serves the
//! workload types and Leases (with `status` and `scale` subresources, stored without
//! controllers), RBAC's Roles, ClusterRoles and their bindings (stored only: the server's own
//! authorizer is [`ServerConfig::auth`]), CustomResourceDefinitions (which make their types served at run time), and
//! optionally an ownerReferences garbage collector: an envtest for Rust. Objects are kept as
//! pre-serialised JSON and shared between the object map, a bounded history ring and every
//! watcher, so large lists and many watchers stay cheap.
//!
//! ```no_run
//! use kinformer_apiserver::{ApiServer, ServerConfig};
//! let server = ApiServer::start_in_thread(ServerConfig::default()).unwrap();
//! server.seed_configmaps("default", 1000).unwrap();
//! println!("kubectl --server {} get configmaps -A", server.url());
//! server.shutdown();
//! ```
//!
//! Fault injection is available from Rust ([`ServerHandle::faults`]) and over HTTP:
//! `POST /admin/faults/{name}` with a JSON body, `GET /admin/faults` for the current state.
//! Names: `close-watches`, `close-watches-after` (`{"events": N}` or `{"events": null}`),
//! `compact`, `fail-next` (`{"verb": "list", "count": 2, "failure": "too-many-requests"|"internal",
//! "retryAfterSeconds": 1}`), `latency` (`{"millis": 200}`), `stall-watches` (`{"enabled": true}`),
//! `malformed-line`, `suppress-bookmarks` (`{"enabled": true}`), `clear`, and `restart`
//! ([`RestartOptions`] as JSON). `GET /admin/requests` gives the request counts.
//!
//! On request, like a real server: restarts with state kept ([`ServerHandle::restart`],
//! [`ServerHandle::stop_serving`]), a request log ([`ServerHandle::requests`]),
//! persistence to a data directory ([`ServerConfig::data_dir`]), HTTPS with a generated CA
//! ([`ServerConfig::tls`]), token and client-certificate authentication with an RBAC-like
//! authorizer ([`ServerConfig::auth`]), and kubeconfigs and kube clients for the server
//! ([`ServerHandle::kubeconfig`], [`ServerHandle::kube_client`]).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod answers;
pub mod auth;
pub mod config;
pub mod crd;
pub mod delete;
pub mod discovery;
pub mod encode;
pub mod error;
pub mod faults;
pub mod gc;
pub mod handle;
pub mod handle_ext;
pub mod handle_restart;
pub mod history;
pub mod journal;
pub mod key;
pub mod kubeconfig;
pub mod load;
pub mod managed_fields;
pub mod names;
pub mod namespace;
pub mod negotiate;
pub mod object;
pub mod openapi;
pub mod patch;
pub mod persist;
pub mod protobuf;
pub mod query;
pub mod registry;
pub mod request_info;
pub mod requests;
pub mod resource;
pub mod restart;
pub mod scale;
pub mod schema;
pub mod selector;
pub mod server;
pub mod serving;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
pub mod validation;
pub mod watch;
pub mod write;

pub use auth::{AuthConfig, Authorization, Rule, TokenUser, UserInfo};
pub use config::ServerConfig;
pub use delete::{DeleteOptions, DeletePreconditions, Propagation};
pub use error::ServerError;
pub use faults::{Failure, Faults, Verb, WatchFaultState};
pub use handle::{ApiServer, ServerHandle};
pub use handle_ext::Deleted;
pub use kubeconfig::{Credentials, KubeconfigError};
pub use load::{ChurnHandle, ChurnSpec, ChurnStats};
pub use persist::PersistError;
pub use requests::{RequestCounts, RequestRecord, Requests};
pub use resource::{ResourceType, ScalePaths, ScaleSelector, StatusRule};
pub use restart::{CloseMode, DownMode, RestartOptions};
pub use serving::{Phase, ServingState};
pub use status::{ApiError, Reason};
pub use tls::{CertificateAuthority, CertifiedKey, TlsConfig, TlsError};
