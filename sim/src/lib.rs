//! kinformer's reliability harness: a seeded schedule simulator, the soak
//! run, and the bodies of the fuzz targets.
//!
//! # The simulator
//!
//! From a seed, [`schedule::generate`] makes a [`Schedule`]: writes
//! (create, update, patch, delete with and without finalizers, delete and
//! re-create of a name, across namespaces and label sets, objects up to
//! about 1.4 MiB), faults (everything the embedded server's `Faults` offers,
//! restarts with and without history, outages with refused or reset
//! connections) and consumer actions (subscribe and unsubscribe mid-stream,
//! every subscriber kind, slow, gated and panicking subscribers, an
//! informer started and stopped). [`simulate`] runs it against a fresh
//! embedded server ([`World`]) with a [`Probe`], which drives what consumes
//! the server and checks it against the server's state:
//! [`InformerProbe`] for informers, [`ControllerProbe`] for a controller
//! (its reconciles converge on the server's state, one at a time per key,
//! failures and panics retried); a replica test writes its own probe and
//! reuses the schedules, the world and the runner.
//!
//! ```no_run
//! # async fn f() {
//! use kinformer_sim::{InformerProbe, Profile, generate, simulate};
//! let outcome = simulate(&generate(7, Profile::QUICK), &mut InformerProbe::new()).await;
//! assert!(outcome.divergences.is_empty(), "{}", outcome.reproduction());
//! # }
//! ```
//!
//! Only the schedule is deterministic: the engine runs on real time, so a
//! failing seed may need a few replays (`KINFORMER_SIM_SEED=…`).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod check;
pub mod controllers;
pub mod fuzz;
pub mod informers;
pub mod panics;
pub mod run;
pub mod schedule;
pub mod soak;
pub mod subscriber;
pub mod watchdog;
pub mod world;

pub use controllers::ControllerProbe;
pub use informers::InformerProbe;
pub use run::{Probe, RunOutcome, reproduction, simulate, simulate_within};
pub use schedule::{Profile, Schedule, generate};
pub use world::World;
