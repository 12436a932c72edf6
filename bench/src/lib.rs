//! kinformer-bench: end-to-end benchmarks of kinformer against kube-runtime 5,
//! in the same run, on the same embedded API server and the same objects.
//!
//! The binary (`src/main.rs`) is the entry point; this library holds its
//! parts so that the micro-benchmarks in `benches/` can reuse them.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod child;
pub mod mem;
pub mod objects;
pub mod parent;
pub mod probe;
pub mod profile;
pub mod proto;
pub mod report;
pub mod stats;
