//! One listener per subscriber: its pending notifications and its sync state.
//!
//! - [`queue`]: its bounded or coalescing queue ([`ListenerQueue`]).
//! - [`lane`]: its resync lane ([`ResyncLane`]), beside the queue.
//! - [`sync`]: its sync state (HS-2, [`SyncTracker`]).
//! - [`credit`]: what the Indexer may send it unanswered ([`DeliveryCredit`]).
//! - [`actor`]: the actor that owns them ([`Listener`]).
//! - [`messages`]: what the actor takes ([`Deliver`], [`Replay`],
//!   [`DeliverResync`], [`CacheSynced`], [`StopListener`]).

pub mod actor;
pub mod credit;
pub mod lane;
pub mod messages;
pub mod queue;
pub mod sync;

pub use actor::{Listener, ListenerOptions, ListenerStats, Target};
pub use credit::{CreditLine, DeliveryCredit, UNANSWERED_MAX};
pub use lane::ResyncLane;
pub use messages::{
    CacheSynced, Deliver, DeliverResync, ListenerGone, RESYNC_HOLD_MAX, RESYNC_LANE_LOW, Replay,
    StopListener,
};
pub use queue::{ListenerQueue, OverflowPolicy, Pushed, QueueFull};
pub use sync::{SyncError, SyncTracker};
