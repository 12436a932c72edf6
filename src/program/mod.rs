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

use std::time::Duration;

use cli::{Cli, Command, RunArgs};
use tokio::time::Instant;

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

/// Resolves when the program is asked to stop, with what asked: Ctrl-C
/// (SIGINT), or SIGTERM (how Kubernetes, systemd and `kill` stop a process).
pub async fn stop_requested() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                _ = tokio::signal::ctrl_c() => "interrupted",
                _ = term.recv() => "terminated",
            };
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    "interrupted"
}

/// `work`, failed once `read_timeout` (`ZERO`: no limit) or the `deadline`
/// passes first: kube-client sets no read timeout of its own, so a server
/// that accepts connections and never answers would hang the program.
pub async fn within<T>(
    what: &str,
    read_timeout: Duration,
    deadline: Option<Instant>,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    let limit = (!read_timeout.is_zero())
        .then(|| started.checked_add(read_timeout))
        .flatten();
    let end = match (limit, deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    tokio::select! {
        result = work => result,
        _ = until(end) => Err(anyhow::anyhow!(
            "{what}: the API server did not answer within {} (engine.read_timeout, or --for)",
            humantime::format_duration(Duration::from_millis(started.elapsed().as_millis() as u64)),
        )),
    }
}
