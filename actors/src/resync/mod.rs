//! The resync timer: which subscriber is due for a resync, and when.
//!
//! - [`schedule`]: the pure schedule, time passed in ([`ResyncSchedule`]).
//! - [`actor`]: the actor that owns it ([`ResyncTimer`]).
//! - [`messages`]: what the actor takes ([`ScheduleResync`], [`CancelResync`],
//!   [`StopResync`]).

pub mod actor;
pub mod messages;
pub mod schedule;

pub use actor::ResyncTimer;
pub use messages::{CancelResync, ScheduleResync, StopResync};
pub use schedule::{MINIMUM_RESYNC_PERIOD, ResyncSchedule, effective_resync_period};
