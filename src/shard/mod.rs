//! Sharding a controller's keys across replicas over `coordination.k8s.io/v1`
//! Leases (rules SH-1..SH-9 in `docs/semantics.md`).
//!
//! Each replica is a [`ShardMember`] of a group: it holds its own shard
//! Lease `<group>-<identity>` (a heartbeat every retry period) and lists the
//! group's Leases to see who is live. Keys are assigned by rendezvous
//! hashing over the live members ([`rendezvous`]); every member writes into
//! its Lease the member set it acts on, and takes a key only once no other
//! live member's published set still gives that member the key, so a key
//! moves only after its previous owner gave it up or its Lease expired.
//!
//! - [`rendezvous`]: who owns a key among a set of members.
//! - [`assignment`]: which keys one member may reconcile now ([`Assignment`]).
//! - [`membership`]: the rules as a pure state machine, time passed in ([`Membership`]).
//! - [`member`]: the task and the handle a service holds ([`ShardMember`]).
//!
//! Filtering is client-side: every replica's informers list and watch every
//! object, and each controller reconciles only its keys (the API server's
//! shard selectors, KEP-5866, are not used; the embedded server has none).
//!
//! ```no_run
//! use k8s_openapi::api::coordination::v1::Lease;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kinformer::Informer;
//! use kinformer::controller::{Action, Controller, Request};
//! use kinformer::shard::ShardMember;
//!
//! # async fn run(client: kube::Client) -> anyhow::Result<()> {
//! let member = ShardMember::builder(kube::Api::<Lease>::namespaced(client.clone(), "default"), "mirror")
//!     .start()?; // identity: POD_NAME, else the host name
//! let informer = Informer::builder(kube::Api::<ConfigMap>::all(client)).start()?;
//! let controller = Controller::new(informer)
//!     .sharded(&member)
//!     .start(|_req: Request<ConfigMap>| async { Ok::<_, kube::Error>(Action::Done) })
//!     .await?;
//! // ... until it is time to go:
//! controller.stop(std::time::Duration::from_secs(10)).await;
//! member.stop().await?; // the others take this member's keys at once
//! # Ok(()) }
//! ```

pub mod assignment;
pub mod member;
pub mod membership;
pub mod rendezvous;

#[cfg(test)]
mod tests;

pub use assignment::Assignment;
pub use member::{ShardMember, ShardMemberBuilder};
pub use membership::{GROUP_LABEL, Membership, VIEW_ANNOTATION, Write, Written};
