//! Subscribe your own actix actor to an informer.
//!
//! Run: `cargo run --example subscribe_actor` (uses the embedded API server;
//! set `KINFORMER_CLUSTER=1` to use your kubeconfig instead).

use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Event, Informer, SubscribeOptions};
use kinformer_apiserver::{ApiServer, ServerConfig};

/// Prints every notification; signals `demo_deleted` when the demo object goes.
struct Printer {
    demo_deleted: std::sync::Arc<tokio::sync::Notify>,
}

impl Actor for Printer {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Printer {
    type Result = ();

    fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) {
        match &event {
            Event::Added { key, cause, .. } => println!("added   {key} ({cause:?})"),
            Event::Updated { key, cause, .. } => println!("updated {key} ({cause:?})"),
            Event::Deleted { key, object, .. } => {
                println!(
                    "deleted {key} (final state unknown: {})",
                    object.is_final_state_unknown()
                );
                if key.as_str() == "default/demo" {
                    self.demo_deleted.notify_one();
                }
            }
        }
    }
}

#[actix::main]
async fn main() -> anyhow::Result<()> {
    let (client, server) = if std::env::var_os("KINFORMER_CLUSTER").is_some() {
        (kube::Client::try_default().await?, None)
    } else {
        let server = ApiServer::start_in_thread(ServerConfig::default())?;
        server.seed_configmaps("default", 5)?;
        (
            kube::Client::try_from(kube::Config::new(server.url().parse()?))?,
            Some(server),
        )
    };
    let informer =
        Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default")).start()?;
    let demo_deleted = std::sync::Arc::new(tokio::sync::Notify::new());
    let printer = Printer {
        demo_deleted: demo_deleted.clone(),
    };
    let subscription = informer
        .subscribe(printer.start().recipient(), SubscribeOptions::default())
        .await?;
    subscription.wait_for_sync(Duration::from_secs(30)).await?;
    if let Some(server) = &server {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "demo"}, "data": {"a": "1"}});
        server.create("", "configmaps", Some("default"), cm)?;
        server.delete("", "configmaps", Some("default"), "demo")?;
        // Until the printer has seen the delete (it comes after the add).
        tokio::time::timeout(Duration::from_secs(10), demo_deleted.notified()).await?;
    }
    subscription.unsubscribe().await;
    informer.stop().await;
    Ok(())
}
