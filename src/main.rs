//! The `kinformer` program: runs informers against a cluster, or against the
//! embedded API server when no cluster is configured.
//!
//! `cargo run --release` on a machine without a cluster starts the embedded
//! server with seeded ConfigMaps and churn, runs the informers of
//! `config.toml` (ConfigMaps, two subscribers with resync 10 s and 30 s),
//! shows a progress bar during the initial sync, then a live status line.
//!
//! ```text
//! kinformer run   [--config FILE] [--kubeconfig FILE] [--context NAME] [--server URL]
//!                 [--embedded] [--for DURATION] [--metrics [IP:]PORT]
//! kinformer watch RESOURCE [-n NS | -A] [-l SELECTOR] [--field-selector S]
//!                 [--resync DURATION] [-o text|json|yaml] [--full] [--show-secrets]
//!                 [cluster flags]
//! kinformer get   RESOURCE [-n NS | -A] [-l SELECTOR] [--field-selector S]
//!                 [-o table|json|yaml] [--show-secrets] [cluster flags]
//! kinformer config            # the effective configuration, as JSON
//! ```
//!
//! Exit status: 0 on success, 2 for a configuration error, 1 for any other error.

mod program;

use std::process::ExitCode;

use clap::Parser;
use program::cli::Cli;
use program::config::ConfigError;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = actix::System::new().block_on(program::main(cli));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<ConfigError>().is_some() => {
            eprintln!("kinformer: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("kinformer: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
