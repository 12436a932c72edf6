//! The Reflector: lists and watches the API server and feeds the DeltaFIFO.

pub mod actor;
pub mod backoff;
pub mod source;
pub mod state;

pub use actor::*;
pub use backoff::Backoff;
pub use source::*;
pub use state::*;
