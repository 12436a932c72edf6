//! kinformer: an actor-based Kubernetes informer engine.
//!
//! A service builds an [`Informer`] for any `kube::Resource` that is also
//! `Clone + DeserializeOwned + Debug + Send + Sync` (the [`Object`] bound:
//! every k8s-openapi type, and `kube::core::DynamicObject`) from a
//! `kube::Api<K>`, subscribes its own actix actor with
//! [`Informer::subscribe`], and from then on receives every add, update and
//! delete as an [`Event`], plus resync replays at the period *it* chose.
//!
//! ```no_run
//! use std::time::Duration;
//! use actix::prelude::*;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kinformer::{Event, Informer, SubscribeOptions};
//!
//! struct Printer;
//! impl Actor for Printer { type Context = Context<Self>; }
//! impl Handler<Event<ConfigMap>> for Printer {
//!     type Result = ();
//!     fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) {
//!         println!("{:?} {}", event.cause(), event.key());
//!     }
//! }
//!
//! #[actix::main]
//! async fn main() -> anyhow::Result<()> {
//!     let client = kube::Client::try_default().await?;
//!     let informer = Informer::builder(kube::Api::<ConfigMap>::all(client)).start()?;
//!     let printer = Printer.start();
//!     let options = SubscribeOptions::default().resync(Duration::from_secs(30));
//!     let _subscription = informer.subscribe(printer.recipient(), options).await?;
//!     informer.wait_for_sync(Duration::from_secs(60)).await?;
//!     tokio::signal::ctrl_c().await?;
//!     informer.stop().await;
//!     Ok(())
//! }
//! ```
//!
//! Actors must be started inside an actix system (`#[actix::main]`,
//! `actix::System`) or, in a `#[tokio::main]` service, inside a
//! `tokio::task::LocalSet`; see `examples/`.
//!
//! Without actors: [`InformerBuilder::start_on_own_thread`] runs the
//! informer's actors on a thread it owns, and [`Informer::stream`] (an
//! [`EventStream`], `Send`) or [`Informer::subscribe_fn`] (a closure)
//! receive the events, with the same guarantees, from any tokio task:
//!
//! ```no_run
//! use futures::StreamExt;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kinformer::{Informer, SubscribeOptions};
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     let api = kube::Api::<ConfigMap>::all(kube::Client::try_default().await?);
//!     let informer = Informer::builder(api).start_on_own_thread()?;
//!     let mut events = informer.stream(SubscribeOptions::default()).await?;
//!     while let Some(event) = events.next().await {
//!         println!("{:?} {}", event.cause(), event.key());
//!     }
//!     Ok(())
//! }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod callback;
pub mod controller;
/// The guide's code (docs/guide.md), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct GuideDoctests;
mod error;
mod factory;
mod informer;
pub mod leader;
mod metadata;
mod own_thread;
mod panic;
pub mod persist;
pub mod shard;
mod store;
mod stream;
mod subscription;
mod wait;
mod workers;

pub use error::InformerError;
pub use factory::InformerFactory;
pub use informer::{Informer, InformerBuilder, InformerStats, WatchEnds};
/// The engine's internals (actors, messages, state machines). The names
/// re-exported at this crate's root are the supported API; what is only
/// reachable through `actors` may change between minor versions.
pub use kinformer_actors as actors;
pub use kinformer_actors::Object;
pub use kinformer_actors::delta_fifo::{FifoOptions, FifoOrdering};
pub use kinformer_actors::indexer::{
    CacheError, CacheView, CompactError, CompactOptions, CompactStats, IndexError, IndexFn,
    Snapshot,
};
pub use kinformer_actors::listener::OverflowPolicy;
pub use kinformer_actors::reflector::WarmStart;
pub use kinformer_actors::reflector::{
    Backoff, DEFAULT_PAGE_SIZE, MAX_LIST_DECODERS, MIN_WATCH_TIMEOUT_FLOOR, ReflectorOptions,
    RequestFailure, WatchEndReason, default_list_decoders,
};
pub use kinformer_actors::resync::MINIMUM_RESYNC_PERIOD;
pub use kinformer_actors::{
    Cause, DeletedObject, Event, EventBatch, KeyError, ObjectKey, OldObject, SubscriberId,
    Tombstone, UndecodableObject,
};
/// kube's metadata-only object: what a [`Informer::metadata`] informer caches.
pub use kube::core::PartialObjectMeta;
pub use leader::{
    ElectionTimings, LeaderElector, LeaderElectorBuilder, LeaderError, LeaderEvent, StepDownReason,
    StopOutcome,
};
pub use metadata::{MetadataScope, metadata_api};
pub use persist::{ClusterIdentityError, PersistStatus, SnapshotError, cluster_identity};
pub use store::Store;
pub use stream::EventStream;
pub use subscription::{SubscribeOptions, Subscription, SubscriptionStats};
pub use workers::Workers;
