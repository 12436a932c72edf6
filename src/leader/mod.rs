//! Leader election over a `coordination.k8s.io/v1` Lease, following
//! client-go's `tools/leaderelection` (rules LE-1…LE-11).
//!
//! - [`timings`]: the three durations and their checks ([`ElectionTimings`]).
//! - [`election`]: the rules as a pure state machine, time passed in ([`Election`]).
//! - [`messages`]: what an elector publishes and how it ends ([`LeaderEvent`]).
//! - `task`: the tokio task that performs the machine's requests through kube-client.
//! - [`elector`]: the handle a service holds ([`LeaderElector`]).
//!
//! ```no_run
//! use k8s_openapi::api::coordination::v1::Lease;
//! use kinformer::leader::LeaderElector;
//!
//! # async fn run() -> anyhow::Result<()> {
//! let client = kube::Client::try_default().await?;
//! let elector = LeaderElector::builder(kube::Api::<Lease>::namespaced(client, "default"), "my-controller")
//!     .start()?; // identity: POD_NAME, else the host name + a random suffix
//! let mut leading = elector.leadership();
//! leading.wait_for(|l| *l).await?;
//! // ... work while `*leading.borrow()`; stop when it turns false ...
//! elector.stop().await?; // releases the Lease: a successor takes over at once
//! # Ok(())
//! # }
//! ```
//!
//! `examples/leader_election.rs` runs three replica processes on the embedded
//! API server (or a cluster, `-- --kubeconfig`) through a SIGKILL and a SIGTERM.
//!
//! Crates evaluated instead of writing this (checked against kube 5 and the
//! rules above): `kube-leader-election` 0.44 (kube 4; judges expiry by
//! comparing the holder's `renewTime` with the local wall clock, so clock
//! skew between machines decides who leads), `kube-lease-manager` 0.13
//! (kube 5, but expiry is likewise `renewTime + duration` against local
//! `SystemTime`, with a configured skew allowance, and writes by server-side
//! apply rather than resourceVersion preconditions), `kube-coordinate`
//! 2.0.0-rc.0 (kube 2). None judges expiry by local observation (LE-4).

pub mod election;
pub mod elector;
pub mod error;
pub mod messages;
pub(crate) mod stopper;
mod task;
pub mod timings;

#[cfg(test)]
mod tests;

pub use election::{Answer, Effects, Election, Request};
pub use elector::{LeaderElector, LeaderElectorBuilder, default_identity};
pub use error::{LeaderError, TimingsError};
pub use messages::{Finished, LeaderEvent, StepDownReason, StopMode, StopOutcome};
pub use timings::{ElectionTimings, JITTER_FACTOR};
