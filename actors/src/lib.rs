//! kinformer's actors and the pure state machines they own.
//!
//! Data flows one way: API server → [`reflector`] → [`delta_fifo`] →
//! [`indexer`] → [`listener`]s, with the [`resync`] timer replaying the cache
//! to due subscribers. Each actor module holds a plain state machine (tested
//! without actix) beside the thin actor shell that owns it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod answer;
pub mod delta;
pub mod event;
#[doc(hidden)] // for kinformer's snapshot restore, not an API
pub mod heap_reserve;
pub mod key;
pub mod old;
pub mod panic;
pub mod subscriber;

pub use delta::{Delta, DeltaType, KnownObjects, PopReceipt, Popped};
pub use event::{Cause, Event, EventBatch};
pub use key::{DeletedObject, KeyError, ObjectKey, Tombstone};
pub use old::{OldObject, UndecodableObject};
pub use subscriber::SubscriberId;

pub mod delta_fifo;
pub mod indexer;
pub mod listener;
pub mod reflector;
pub mod resync;
pub mod workqueue;

#[cfg(test)]
mod testing;

/// What an informer can watch and cache: a Kubernetes object that decodes
/// from JSON and can be shared across threads (typed k8s-openapi objects,
/// `DynamicObject`, custom resources).
pub trait Object:
    kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<T> Object for T where
    T: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}
