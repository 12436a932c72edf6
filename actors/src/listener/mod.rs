//! One listener per subscriber: its pending notifications and its sync state.

pub mod actor;
pub mod credit;
pub mod lane;
pub mod queue;
pub mod sync;

pub use actor::*;
pub use credit::{CreditLine, DeliveryCredit};
pub use lane::ResyncLane;
pub use queue::*;
pub use sync::*;
