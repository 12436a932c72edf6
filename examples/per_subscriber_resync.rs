//! Two subscribers of one informer, each resyncing at its own period (1 s and
//! 3 s), and one that never resyncs. client-go would round the 1 s subscriber
//! up to the informer's check period; kinformer schedules each on its own.
//!
//! Run: `cargo run --example per_subscriber_resync` (embedded API server).

use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Cause, Event, Informer, SubscribeOptions};
use kinformer_apiserver::{ApiServer, ServerConfig};

struct Named(&'static str);

impl Actor for Named {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Named {
    type Result = ();

    fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) {
        if event.cause() == Cause::Resync {
            println!("{:>6}: resync {}", self.0, event.key());
        }
    }
}

#[actix::main]
async fn main() -> anyhow::Result<()> {
    let server = ApiServer::start_in_thread(ServerConfig::default())?;
    server.seed_configmaps("default", 2)?;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse()?))?;
    let informer =
        Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default")).start()?;
    for (name, period) in [("1s", 1), ("3s", 3), ("never", 0)] {
        let options = SubscribeOptions::default().resync(Duration::from_secs(period));
        informer
            .subscribe(Named(name).start().recipient(), options)
            .await?;
    }
    informer.wait_for_sync(Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    informer.stop().await;
    Ok(())
}
