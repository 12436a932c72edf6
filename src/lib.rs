//! kinformer: an actor-based Kubernetes informer engine.
//!
//! The engine lives in [`kinformer_actors`]; this crate is what users import.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub use kinformer_actors as actors;
