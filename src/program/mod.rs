//! The `kinformer` program (binary only): command line, configuration,
//! cluster selection, the `run`, `watch` and `config` commands, status
//! display and metrics. The library (`kinformer::…`) knows nothing of it.

pub mod build;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod logging;
pub mod metrics;
pub mod resource;
pub mod run;
pub mod status;
pub mod watch;

use cli::{Cli, Command, RunArgs};

/// Loads the configuration for the chosen command, sets up logging, runs it.
pub async fn main(cli: Cli) -> anyhow::Result<()> {
    let command = cli.command.unwrap_or(Command::Run(RunArgs::default()));
    let flags = match &command {
        Command::Run(a) => a.overrides(),
        Command::Watch(a) => a.overrides(),
        Command::Config(a) => {
            let mut flags = config::FlagOverrides::default();
            a.cluster.overrides(&mut flags);
            flags
        }
    };
    let loaded = config::load(cli.config.as_deref(), std::env::vars(), flags)?;
    logging::init(
        cli.log_format
            .unwrap_or(loaded.settings.observability.log_format),
    );
    if let Some(file) = &loaded.file {
        tracing::info!(file = %file.display(), "configuration loaded");
    }
    match command {
        Command::Run(args) => run::run(loaded, args).await,
        Command::Watch(args) => watch::watch(loaded, args).await,
        Command::Config(_) => {
            println!("{}", serde_json::to_string_pretty(&loaded.settings)?);
            Ok(())
        }
    }
}
