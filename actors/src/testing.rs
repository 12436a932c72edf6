//! Test helpers shared by the actors' unit tests.

use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use tokio::sync::watch;

/// A ConfigMap `ns/name` at resourceVersion `rv`.
pub fn configmap(name: &str, rv: &str) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// Pauses `act`'s mailbox until `gate` opens (a subscriber stalled in its
/// handler); nothing happens when it is open already.
pub fn hold_until_open<A>(act: &A, gate: &watch::Receiver<bool>, ctx: &mut Context<A>)
where
    A: Actor<Context = Context<A>>,
{
    let mut gate = gate.clone();
    if !*gate.borrow() {
        ctx.wait(
            async move {
                let _ = gate.wait_for(|open| *open).await;
            }
            .into_actor(act),
        );
    }
}
