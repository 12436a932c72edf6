//! The `kinformer` program: runs informers against a cluster, or against the
//! embedded API server when no cluster is configured.
//!
//! `cargo run --release` on a machine without a cluster starts the embedded
//! server with seeded ConfigMaps and churn, runs an informer with two
//! subscribers (resync 10 s and 30 s), and prints a live status line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Cause, Event, Informer, OverflowPolicy, SubscribeOptions, Subscription};
use kinformer_apiserver::{ApiServer, ChurnSpec, ServerConfig};

#[derive(Parser)]
#[command(
    name = "kinformer",
    version,
    about = "Actor-based Kubernetes informer engine"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run informers over ConfigMaps and show what they see.
    Run(RunArgs),
}

#[derive(clap::Args, Default)]
struct RunArgs {
    /// Use the embedded API server even when a cluster is configured.
    #[arg(long)]
    embedded: bool,
    /// Stop after this long (e.g. `30s`, `5m`); default: until Ctrl-C.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
    /// Objects seeded into the embedded server.
    #[arg(long, default_value_t = 5_000)]
    seed: usize,
    /// Churn of the embedded server, in writes per second.
    #[arg(long, default_value_t = 200.0)]
    churn: f64,
}

/// A subscriber that counts what it receives.
#[derive(Default)]
struct Counter {
    events: Arc<AtomicU64>,
    resyncs: Arc<AtomicU64>,
}

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Counter {
    type Result = ();

    fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) {
        self.events.fetch_add(1, Ordering::Relaxed);
        if event.cause() == Cause::Resync {
            self.resyncs.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[actix::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Run(args)) => args,
        None => RunArgs {
            seed: 5_000,
            churn: 200.0,
            ..RunArgs::default()
        },
    };
    run(args).await
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let cluster = if args.embedded {
        None
    } else {
        kube::Config::infer().await.ok()
    };
    let mut _server = None;
    let config = match cluster {
        Some(config) => {
            println!(
                "kinformer: using the configured cluster at {}",
                config.cluster_url
            );
            config
        }
        None => {
            let server = ApiServer::start_in_thread(ServerConfig::default())
                .context("embedded API server")?;
            println!(
                "kinformer: no cluster configured; running against the embedded API server at {} ({} ConfigMaps, {} writes/s)",
                server.url(),
                args.seed,
                args.churn
            );
            server
                .seed_configmaps("default", args.seed)
                .context("seeding")?;
            let churn = server.start_churn(ChurnSpec {
                namespace: "churn".into(),
                objects: 500,
                ops_per_sec: args.churn,
                ..ChurnSpec::default()
            });
            let config = kube::Config::new(server.url().parse()?);
            _server = Some((server, churn));
            config
        }
    };
    let client = kube::Client::try_from(config)?;
    let informer = Informer::builder(kube::Api::<ConfigMap>::all(client))
        .transform(|mut cm: ConfigMap| {
            cm.metadata.managed_fields = None;
            cm
        })
        .index("namespace", |cm: &ConfigMap| {
            Ok(cm.metadata.namespace.clone().into_iter().collect())
        })
        .start()?;

    let mut subs: Vec<(Subscription<ConfigMap>, Counter)> = Vec::new();
    for (resync, policy) in [(10, OverflowPolicy::Block), (30, OverflowPolicy::Coalesce)] {
        let counter = Counter::default();
        let view = Counter {
            events: counter.events.clone(),
            resyncs: counter.resyncs.clone(),
        };
        let addr = counter.start();
        let options = SubscribeOptions::default()
            .resync(Duration::from_secs(resync))
            .policy(policy);
        subs.push((informer.subscribe(addr.recipient(), options).await?, view));
    }

    let started = tokio::time::Instant::now();
    let deadline = args.run_for.map(|d| started + d);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_events = 0;
    let mut synced_reported = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let s = informer.stats();
        if !informer.has_synced() {
            let (done, total) = s.list_progress;
            println!(
                "initial sync: {done}/{} objects",
                if total > 0 {
                    total.to_string()
                } else {
                    "?".into()
                }
            );
            continue;
        }
        if !synced_reported {
            synced_reported = true;
            println!(
                "synced {} objects in {:.2?} at resourceVersion {}",
                s.objects,
                started.elapsed(),
                informer.last_sync_resource_version()
            );
        }
        let per_sub: Vec<String> = subs
            .iter()
            .map(|(sub, c)| {
                format!(
                    "{}[resync {:?}, delivered {}, pending {}, resyncs {}]",
                    sub.id(),
                    sub.resync_period(),
                    c.events.load(Ordering::Relaxed),
                    sub.stats().pending.load(Ordering::Relaxed),
                    c.resyncs.load(Ordering::Relaxed)
                )
            })
            .collect();
        println!(
            "cached {} | {} events/s | relists {} | watch restarts {} | {}",
            s.objects,
            s.events - last_events,
            s.relists,
            s.watch_restarts,
            per_sub.join(" ")
        );
        last_events = s.events;
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
    }
    informer.stop().await;
    let s = informer.stats();
    println!(
        "summary: ran {:.1?}; cached {} objects; {} watch events; {} adds, {} updates, {} deletes ({} tombstones); {} relists; {} watch restarts",
        started.elapsed(),
        s.objects,
        s.events,
        s.added,
        s.updated,
        s.deleted,
        s.tombstones,
        s.relists,
        s.watch_restarts
    );
    Ok(())
}
