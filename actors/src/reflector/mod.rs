//! The Reflector: lists and watches the API server and feeds the DeltaFIFO.
//!
//! - [`state`]: the pure rules of the list/watch loop ([`ReflectorState`]).
//! - [`backoff`]: the retry delays ([`Backoff`]); [`recovery`]: re-watching
//!   and probing a server that does not answer ([`Outage`]).
//! - [`list_and_watch`]: the loop that follows those rules ([`ListAndWatch`]),
//!   over any [`ListerWatcher`] ([`source`]) and any [`Sink`] ([`sink`]);
//!   [`pager`] makes its lists page by page, [`sharing`] turns decoded
//!   objects into shared ones, `streaming_list` collects a streaming list.
//! - [`client`]: the list and watch requests through kube-client
//!   ([`KubeSource`]) and the classification of their failures.
//! - [`decode`]: list pages and watch lines decoded from their bytes.
//! - [`event`]: what a watch yields ([`SourceEvent`]); [`failure`]: how a
//!   request failed ([`Failure`]).
//! - [`actor`]: the supervised actor that runs the loop ([`Reflector`]).
//! - [`messages`]: what the actor takes ([`StopReflector`]).
//! - [`stats`], [`last_failure`]: what it reports while it runs.
//! - [`warm_start`]: starting from a snapshot read from disk ([`Restored`],
//!   [`WarmStart`]).

pub mod actor;
pub mod backoff;
pub mod client;
pub mod decode;
pub mod event;
pub mod failure;
#[cfg(test)]
mod fake;
pub mod last_failure;
pub mod list_and_watch;
pub mod messages;
pub mod pager;
pub mod recovery;
pub mod sharing;
pub mod sink;
pub mod source;
pub mod state;
pub mod stats;
mod streaming_list;
pub mod warm_start;

pub use actor::{Reflector, ResourceVersionWatch};
pub use backoff::Backoff;
pub use client::{
    KubeSource, ListWatch, MAX_LIST_DECODERS, MAX_WATCH_LINE, PROBE_TIMEOUT, classify,
    default_list_decoders,
};
pub use event::{INITIAL_EVENTS_END, SourceEvent};
pub use failure::Failure;
pub use last_failure::{LastFailure, RequestFailure};
pub use list_and_watch::{CUT_SHORT_RETRIES, Exit, ListAndWatch};
pub use messages::StopReflector;
pub use pager::{Listed, list_all, list_pages};
pub use recovery::{
    MAX_UNREACHABLE_REWATCHES, Outage, PROBE_INTERVAL_MAX, PROBE_INTERVAL_MIN, ProbeVerdict,
};
pub use sharing::{Sharing, Transform};
pub use sink::Sink;
pub use source::{ListerWatcher, PageRequest, WatchStream};
pub use state::{
    DEFAULT_PAGE_SIZE, ListRequest, ListVersion, MIN_WATCH_TIMEOUT, MIN_WATCH_TIMEOUT_FLOOR, Next,
    ReflectorOptions, ReflectorState, VERY_SHORT_WATCH, WatchEnd, WatchRequest,
};
pub use stats::{ReflectorStats, WatchEndReason};
pub use warm_start::{
    RestoreFn, Restored, RestoredPage, RestoredPages, Taken, WarmStart, WarmStartCell,
};
