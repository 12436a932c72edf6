//! One listener per subscriber: its pending notifications, the order they
//! go out in, and its sync state.
//!
//! - [`queue`]: its bounded or coalescing queue ([`ListenerQueue`]).
//! - [`lane`]: its resync lane ([`ResyncLane`]), beside the queue.
//! - [`sync`]: its sync state (HS-2, [`SyncTracker`]).
//! - [`pending`]: all it has not sent yet, in order ([`Pending`]).
//! - [`window`]: how much goes per handler call and may be in flight ([`Window`]).
//! - [`delivery`]: its state machine over those, with the held answers ([`Delivery`]).
//! - [`credit`]: what the Indexer may send it unanswered ([`DeliveryCredit`]).
//! - [`feed`](mod@feed): a subscriber outside actix, read from a channel ([`feed()`](fn@feed)).
//! - `inline`: the turns of a function the listener calls itself ([`Target::Inline`]).
//! - [`options`], [`stats`]: what a subscription asks of it, its counters.
//! - [`actor`]: the actor that owns them ([`Listener`]).
//! - [`messages`]: what the actor takes ([`Deliver`], [`Replay`],
//!   [`DeliverResync`], [`CacheSynced`], [`StopListener`]).

pub mod actor;
pub mod credit;
pub mod delivery;
pub mod feed;
#[cfg(test)]
mod fixtures;
mod inline;
pub mod lane;
pub mod messages;
pub mod options;
pub mod pending;
pub mod queue;
mod reply;
mod sink;
pub mod stats;
pub mod sync;
pub mod window;

pub use actor::Listener;
pub use credit::{CreditLine, DeliveryCredit, UNANSWERED_MAX};
pub use delivery::{Answers, Delivery, Due, Sent, When};
pub use feed::{FeedReceiver, FeedSender, Taken, feed};
pub use lane::ResyncLane;
pub use messages::{
    CacheSynced, Deliver, DeliverResync, ListenerGone, RESYNC_HOLD_MAX, RESYNC_LANE_LOW, Replay,
    StopListener,
};
pub use options::{INLINE_TURN, InlineHandler, ListenerOptions, Target};
pub use pending::Pending;
pub use queue::{ListenerQueue, OverflowPolicy, Pushed, QueueFull};
pub use stats::ListenerStats;
pub use sync::{SyncError, SyncTracker};
pub use window::{CallShape, Window};
