//! Embedding kinformer in an existing `#[tokio::main]` service.
//!
//! actix actors need a local task set: run them inside a
//! `tokio::task::LocalSet` (or on a dedicated `actix::System` thread).
//! Directly inside `#[tokio::main]`, without one, `start()` answers
//! `InformerError::NoActorRuntime` (and starting your own actors there panics).
//! Without actors of your own, `start_on_own_thread()` needs no `LocalSet`:
//! see `examples/tokio_stream.rs`.
//!
//! Run: `cargo run --example embed_in_tokio_service` (embedded API server).

use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Event, Informer, SubscribeOptions};
use kinformer_apiserver::{ApiServer, ServerConfig};

struct Counter(usize);

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Counter {
    type Result = ();

    fn handle(&mut self, _: Event<ConfigMap>, _: &mut Context<Self>) {
        self.0 += 1;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = ApiServer::start_in_thread(ServerConfig::default())?;
    server.seed_configmaps("default", 100)?;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse()?))?;

    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            let informer = Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default"))
                .index("first-letter", |cm: &ConfigMap| {
                    Ok(cm
                        .metadata
                        .name
                        .iter()
                        .filter_map(|n| n.get(..1))
                        .map(str::to_owned)
                        .collect())
                })
                .start()?;
            let sub = informer
                .subscribe(Counter(0).start().recipient(), SubscribeOptions::default())
                .await?;
            sub.wait_for_sync(Duration::from_secs(30)).await?;
            // The store is readable from any task or thread without blocking the engine.
            let store = informer.store();
            let names = tokio::task::spawn_blocking(move || store.snapshot().len()).await?;
            println!(
                "synced: {names} ConfigMaps cached; {} delivered",
                sub.stats().delivered
            );
            informer.stop().await;
            anyhow::Ok(())
        })
        .await
}
