//! The messages the resync timer takes, all from the informer handle. What it
//! sends, [`ResyncDue`](crate::indexer::ResyncDue), is the Indexer's.

use std::time::Duration;

use actix::prelude::*;

use crate::subscriber::SubscriberId;

/// Add (or change) a subscriber's resync period. Answers the effective period
/// (`ZERO` = never, else at least one second).
#[derive(Message)]
#[rtype(result = "Duration")]
pub struct ScheduleResync {
    /// The subscriber.
    pub id: SubscriberId,
    /// The period it asked for (`ZERO` = never).
    pub period: Duration,
}

/// Forget a subscriber.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelResync(pub SubscriberId);

/// Stop for good (the informer stopped): no resync is sent after this.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopResync;
