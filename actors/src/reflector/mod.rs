//! The Reflector: lists and watches the API server and feeds the DeltaFIFO.
//!
//! - [`state`]: the pure rules of the list/watch loop ([`ReflectorState`]).
//! - [`source`]: the list and watch requests through kube-client, and the
//!   classification of their failures ([`ListWatch`]).
//! - [`backoff`]: the retry delays ([`Backoff`]).
//! - [`actor`]: the supervised actor that runs the loop ([`Reflector`]).
//! - [`messages`]: what the actor takes ([`StopReflector`]).

pub mod actor;
pub mod backoff;
pub mod messages;
pub mod source;
pub mod state;

pub use actor::{Reflector, ReflectorStats, ResourceVersionWatch, Transform, WatchEndReason};
pub use backoff::Backoff;
pub use messages::StopReflector;
pub use source::{
    INITIAL_EVENTS_END, LastFailure, ListWatch, Listed, MAX_WATCH_LINE, RequestFailure,
    SourceEvent, classify, decode,
};
pub use state::{
    Failure, ListRequest, ListVersion, MIN_WATCH_TIMEOUT, MIN_WATCH_TIMEOUT_FLOOR, Next,
    ReflectorOptions, ReflectorState, VERY_SHORT_WATCH, WatchEnd, WatchRequest,
};
