//! `kinformer-apiserver`: run the embedded API server as a standalone process.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kinformer_apiserver::{ApiServer, ChurnSpec, ServerConfig};

/// An embedded Kubernetes-compatible API server for tests, demos and benchmarks.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(
        long,
        default_value = "127.0.0.1:0",
        env = "KINFORMER_APISERVER_LISTEN"
    )]
    listen: SocketAddr,
    /// Seed this many ~1.3 KB ConfigMaps at start-up.
    #[arg(long, default_value_t = 0)]
    seed: usize,
    /// Namespace for seeded ConfigMaps.
    #[arg(long, default_value = "default")]
    seed_namespace: String,
    /// Churn ConfigMaps in namespace `churn` at this many operations per second.
    #[arg(long)]
    churn: Option<f64>,
    /// Number of distinct objects the churn cycles through.
    #[arg(long, default_value_t = 100)]
    churn_objects: usize,
    /// RNG seed for the churn.
    #[arg(long, default_value_t = 1)]
    churn_seed: u64,
    /// Retained history (events) for watch replay and continue tokens.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Interval between watch BOOKMARKs, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    bookmark_interval_ms: u64,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = ServerConfig {
        listen: args.listen,
        history_limit: args.history,
        bookmark_interval: Duration::from_millis(args.bookmark_interval_ms),
        ..ServerConfig::default()
    };
    let server = ApiServer::start(config)
        .await
        .context("starting the server")?;
    if args.seed > 0 {
        server
            .seed_configmaps(&args.seed_namespace, args.seed)
            .map_err(|e| anyhow::anyhow!("seeding: {e}"))?;
    }
    let churn = match args.churn {
        Some(rate) => Some(
            server
                .try_start_churn(ChurnSpec {
                    ops_per_sec: rate,
                    objects: args.churn_objects,
                    seed: args.churn_seed,
                    ..ChurnSpec::default()
                })
                .map_err(|e| anyhow::anyhow!("starting churn: {e}"))?,
        ),
        None => None,
    };
    // Install the Ctrl-C handler before announcing the address (a signal
    // registers on first poll): a SIGINT right after the announcement must
    // stop the server cleanly, not kill it.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut interrupted = false;
    tokio::select! {
        biased;
        r = &mut ctrl_c => {
            r.context("waiting for Ctrl-C")?;
            interrupted = true;
        }
        _ = std::future::ready(()) => {}
    }
    let url = server.url();
    println!("listening on {url}");
    println!("try: kubectl --server {url} get configmaps -A");
    println!("faults: curl -X POST {url}/admin/faults/close-watches");
    if !interrupted {
        ctrl_c.await.context("waiting for Ctrl-C")?;
    }
    if let Some(c) = churn {
        let stats = c.stop();
        println!(
            "churn: {} created, {} updated, {} deleted",
            stats.created, stats.updated, stats.deleted
        );
    }
    server.shutdown_and_wait().await;
    println!("stopped");
    Ok(())
}
