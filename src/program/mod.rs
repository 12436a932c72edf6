//! The `kinformer` program (binary only): command line, configuration,
//! cluster selection, resource names, the `run`, `watch`, `get` and
//! `config` commands, output formats, status display, logs and metrics.
//! The library (`kinformer::…`) knows nothing of it.

pub mod build;
pub mod cli;
pub mod cluster;
pub mod config;
#[cfg(test)]
mod config_fuzz;
pub mod discovery;
pub mod get;
pub mod http;
pub mod leadership;
pub mod logging;
pub mod metrics;
pub mod output;
pub mod resource;
pub mod run;
pub mod status;
pub mod target;
pub mod watch;

use std::time::Duration;

use cli::{Cli, Command, RunArgs};
use tokio::time::Instant;

/// Loads the configuration for the chosen command, sets up logging, runs it.
pub async fn main(cli: Cli) -> anyhow::Result<()> {
    let command = cli.command.unwrap_or(Command::Run(RunArgs::default()));
    let flags = match &command {
        Command::Run(a) => a.overrides(),
        Command::Watch(a) => a.target.overrides(),
        Command::Get(a) => a.target.overrides(),
        Command::Config(a) => {
            let mut flags = config::FlagOverrides::default();
            a.cluster.overrides(&mut flags);
            flags
        }
    };
    let mut flags = flags;
    flags.set(
        "observability.log_format",
        cli.log_format.map(|f| match f {
            config::LogFormat::Text => "text",
            config::LogFormat::Json => "json",
        }),
    );
    let loaded = config::load(cli.config.as_deref(), std::env::vars(), flags)?;
    logging::init(loaded.settings.observability.log_format);
    if let Some(file) = &loaded.file {
        tracing::info!(file = %file.display(), "configuration loaded");
    }
    match command {
        Command::Run(args) => run::run(loaded, args).await,
        Command::Watch(args) => watch::watch(loaded, args).await,
        Command::Get(args) => get::get(loaded, args).await,
        Command::Config(_) => {
            println!("{}", serde_json::to_string_pretty(&loaded.settings)?);
            Ok(())
        }
    }
}

/// When a `--for` that starts now ends: `None` for never, also when it is
/// too far away to represent.
pub fn deadline_after(run_for: Option<Duration>) -> Option<Instant> {
    run_for.and_then(|d| Instant::now().checked_add(d))
}

/// Waits until `deadline`; forever when `None`.
pub async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Ctrl-C (SIGINT) and SIGTERM (how Kubernetes, systemd and `kill` stop a
/// process), caught from when they are installed: install them first, so a
/// signal during a slow start-up stops the program gracefully too.
pub struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Replaces the default (kill) action of both signals.
    pub fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// The next stop signal: "interrupted" or "terminated".
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "interrupted",
                _ = self.terminate.recv() => "terminated",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "interrupted"
        }
    }
}

/// `work`, failed once `read_timeout` (`ZERO`: no limit) passes: kube-client
/// sets no read timeout of its own, so a server that accepts connections and
/// never answers would hang the program.
pub async fn within<T>(
    what: &str,
    read_timeout: Duration,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let end = (!read_timeout.is_zero())
        .then(|| Instant::now().checked_add(read_timeout))
        .flatten();
    tokio::select! {
        result = work => result,
        _ = until(end) => Err(anyhow::anyhow!(
            "{what}: the API server did not answer within {} (engine.read_timeout)",
            humantime::format_duration(read_timeout),
        )),
    }
}
