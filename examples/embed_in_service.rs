//! An actix-web service that embeds kinformer's actor system.
//!
//! It runs an informer over ConfigMaps (with a `namespace` index) and a
//! subscriber actor of its own, and serves:
//! - `GET /readyz`: 200 once the informer has synced, 503 before (a
//!   Kubernetes readiness probe: no traffic until the cache is complete);
//! - `GET /healthz`: 200 while the process runs;
//! - `GET /configmaps/{namespace}`: the ConfigMaps of a namespace, answered
//!   from the informer's `namespace` index, never from the API server;
//! - `GET /stats`: what the subscriber has seen.
//!
//! Run (embedded API server with 500 ConfigMaps and some churn, no cluster needed):
//!
//! ```text
//! cargo run --example embed_in_service
//! curl -i localhost:8080/readyz
//! curl localhost:8080/configmaps/default | jq length
//! curl localhost:8080/stats
//! ```
//!
//! Against the cluster of your kubeconfig instead:
//! `cargo run --example embed_in_service -- --cluster`. Other flags:
//! `--bind ADDR` (default `127.0.0.1:8080`), `--for DURATION` (stop by itself).
//!
//! `#[actix_web::main]` starts an actix `System`, so informer actors can be
//! started directly in `main`; actix-web's workers read the cache through the
//! cloneable, thread-safe `Informer` handle.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use actix_web::{App, HttpResponse, HttpServer, web};
use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Cause, Event, Informer, OverflowPolicy, SubscribeOptions};
use kinformer_apiserver::{ApiServer, ChurnSpec, ServerConfig};

#[derive(Parser)]
struct Args {
    /// Use the cluster of the kubeconfig (or in-cluster config) instead of the embedded server.
    #[arg(long)]
    cluster: bool,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: String,
    /// Stop after this long (e.g. `30s`); default: until Ctrl-C.
    #[arg(long = "for", value_parser = humantime::parse_duration)]
    run_for: Option<Duration>,
}

/// Counts what the service's own subscriber handles.
#[derive(Default)]
struct Seen {
    changes: AtomicU64,
    resyncs: AtomicU64,
}

/// The service's subscriber: here it only counts; a real service would
/// reconcile, invalidate a cache, push to clients, ...
struct Watcher(Arc<Seen>);

impl Actor for Watcher {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Watcher {
    type Result = ();

    fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) {
        let counter = match event.cause() {
            Cause::Resync => &self.0.resyncs,
            _ => &self.0.changes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Shared with every actix-web worker.
struct AppState {
    informer: Informer<ConfigMap>,
    seen: Arc<Seen>,
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.informer.has_synced() {
        HttpResponse::Ok().body("ready\n")
    } else {
        HttpResponse::ServiceUnavailable().body("informer not synced\n")
    }
}

async fn configmaps_in(state: web::Data<AppState>, namespace: web::Path<String>) -> HttpResponse {
    // An unsynced cache is incomplete: answer 503 rather than a partial list.
    if !state.informer.has_synced() {
        return HttpResponse::ServiceUnavailable().body("informer not synced\n");
    }
    match state
        .informer
        .store()
        .snapshot()
        .by_index("namespace", &namespace)
    {
        Ok(items) => {
            let body: Vec<_> = items
                .iter()
                .map(|cm| {
                    serde_json::json!({
                        "name": cm.metadata.name,
                        "resourceVersion": cm.metadata.resource_version,
                        "keys": cm.data.as_ref().map_or(0, |d| d.len()),
                    })
                })
                .collect();
            HttpResponse::Ok().json(body)
        }
        Err(e) => HttpResponse::InternalServerError().body(e.to_string()),
    }
}

async fn stats(state: web::Data<AppState>) -> HttpResponse {
    let s = state.informer.stats();
    HttpResponse::Ok().json(serde_json::json!({
        "synced": state.informer.has_synced(),
        "cached": s.objects,
        "relists": s.relists,
        "watchRestarts": s.watch_restarts,
        "lastResourceVersion": state.informer.last_sync_resource_version(),
        "subscriber": {
            "changes": state.seen.changes.load(Ordering::Relaxed),
            "resyncs": state.seen.resyncs.load(Ordering::Relaxed),
        },
    }))
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();

    // The cluster: the kubeconfig's, or an embedded API server with a workload.
    let mut embedded = None;
    let client = if args.cluster {
        kube::Client::try_default()
            .await
            .context("no cluster configured")?
    } else {
        let server = ApiServer::start_in_thread(ServerConfig::default())?;
        server.seed_configmaps("default", 500)?;
        let churn = server.start_churn(ChurnSpec {
            namespace: "churn".into(),
            objects: 50,
            ops_per_sec: 5.0,
            ..ChurnSpec::default()
        });
        tracing::info!(url = %server.url(), "embedded API server");
        let client = kube::Client::try_from(kube::Config::new(server.url().parse()?))?;
        embedded = Some((server, churn));
        client
    };

    let informer = Informer::builder(kube::Api::<ConfigMap>::all(client))
        .transform(|mut cm: ConfigMap| {
            cm.metadata.managed_fields = None;
            cm
        })
        .index("namespace", |cm: &ConfigMap| {
            Ok(cm.metadata.namespace.clone().into_iter().collect())
        })
        .start()?;
    let seen = Arc::new(Seen::default());
    let subscription = informer
        .subscribe(
            Watcher(seen.clone()).start().recipient(),
            SubscribeOptions::default()
                .resync(Duration::from_secs(60))
                .policy(OverflowPolicy::Coalesce),
        )
        .await?;

    let state = web::Data::new(AppState {
        informer: informer.clone(),
        seen,
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/readyz", web::get().to(readyz))
            .route("/healthz", web::get().to(|| async { "ok\n" }))
            .route("/configmaps/{namespace}", web::get().to(configmaps_in))
            .route("/stats", web::get().to(stats))
    })
    .workers(2)
    .bind(&args.bind)
    .with_context(|| format!("binding {}", args.bind))?
    .run();
    println!(
        "serving on http://{}/ (readyz, healthz, configmaps/{{namespace}}, stats)",
        args.bind
    );
    let handle = server.handle();
    let served = actix::spawn(server);
    match args.run_for {
        Some(d) => tokio::time::sleep(d).await,
        None => tokio::signal::ctrl_c().await?,
    }

    // Graceful stop: HTTP first, then the informer and the subscriber.
    handle.stop(true).await;
    let _ = served.await;
    informer.stop().await;
    subscription.unsubscribe().await;
    if let Some((server, churn)) = embedded {
        churn.stop();
        server.shutdown();
    }
    Ok(())
}
