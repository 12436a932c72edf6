//! The messages the Reflector takes. It is driven by its own loop (list, then
//! watch) and takes only its stop from the informer handle; what it sends, the
//! DeltaFIFO's [`Enqueue`](crate::delta_fifo::Enqueue) and
//! [`Replace`](crate::delta_fifo::Replace), is the DeltaFIFO's.

use actix::prelude::*;

/// Stop listing and watching for good (the informer is shutting down).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopReflector;
