//! Events in a plain `#[tokio::main]` service: no actix, no `LocalSet`.
//! The informer runs its actors on a thread it owns; you read a `Stream`
//! (or pass a closure, or a plain function the listener calls in place, or
//! run actors on `Workers`, threads of their own).
//!
//! Run: `cargo run --example tokio_stream` (uses the embedded API server,
//! and ends after a demo ConfigMap's delete; set `KINFORMER_CLUSTER=1` to
//! use your kubeconfig instead, and stop it with Ctrl-C).

use actix::prelude::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Event, Informer, SubscribeOptions, Workers};

/// An actor reading its stream in its own context: `handle` gets each
/// event, the next once it returned.
struct Printer;

impl Actor for Printer {
    type Context = Context<Self>;
}

impl StreamHandler<Event<ConfigMap>> for Printer {
    fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) {
        println!("worker actor: {:?} {}", event.cause(), event.key());
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (client, server) = demo::cluster().await?;
    let api = kube::Api::<ConfigMap>::namespaced(client, "default");
    let informer = Informer::builder(api).start_on_own_thread()?;
    // A closure: each call's future finishes before the next call.
    let options = SubscribeOptions::default();
    let _closure = informer
        .subscribe_fn(options, |event| async move {
            println!("closure: {}", event.key())
        })
        .await?;
    // A plain function the listener calls in place, on the informer's
    // thread: no message per event, so it must only record or hand work on.
    let changes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = changes.clone();
    let _inline = informer
        .subscribe_inline(options, move |event| {
            if event.cause() == kinformer::Cause::Watch {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .await?;
    // Actors on worker threads (here 1), for handlers with work to spread
    // over cores; they stop when `workers` is dropped, at the end.
    let workers = Workers::new(1)?;
    workers.start_reading(informer.stream(options).await?, |_| Printer);
    // A stream: `Send`, so it could as well be read in a spawned task.
    let mut events = informer.stream(options).await?;
    demo::changes_once_synced(server, informer.clone());
    while let Some(event) = events.next().await {
        println!("stream: {:?} {}", event.cause(), event.key());
        if matches!(&event, Event::Deleted { key, .. } if key.as_str() == "default/demo") {
            break;
        }
    }
    let changes = changes.load(std::sync::atomic::Ordering::Relaxed);
    println!("inline function: {changes} changes seen so far");
    Ok(())
}

/// The example's cluster: the embedded API server with a few ConfigMaps,
/// unless `KINFORMER_CLUSTER` is set.
mod demo {
    use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};

    pub async fn cluster() -> anyhow::Result<(kube::Client, Option<ServerHandle>)> {
        if std::env::var_os("KINFORMER_CLUSTER").is_some() {
            return Ok((kube::Client::try_default().await?, None));
        }
        let server = ApiServer::start_in_thread(ServerConfig::default())?;
        server.seed_configmaps("default", 3)?;
        let config = kube::Config::new(server.url().parse()?);
        Ok((kube::Client::try_from(config)?, Some(server)))
    }

    /// With the embedded server: once the informer synced, creates and
    /// deletes `demo`, so those events come after the initial adds.
    pub fn changes_once_synced(
        server: Option<ServerHandle>,
        informer: kinformer::Informer<k8s_openapi::api::core::v1::ConfigMap>,
    ) {
        let Some(server) = server else { return };
        tokio::spawn(async move {
            informer
                .wait_for_sync(std::time::Duration::from_secs(30))
                .await?;
            let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo"}, "data": {"a": "1"}});
            server.create("", "configmaps", Some("default"), cm)?;
            server.delete("", "configmaps", Some("default"), "demo")?;
            // Keeps the server up until the example ends.
            std::future::pending::<()>().await;
            anyhow::Ok(())
        });
    }
}
