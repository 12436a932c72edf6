//! A control for latency workloads: a plain kube watch on a thread of its
//! own, in the same process as the informer under test. It records the same
//! write-to-receipt latencies as a subscriber, without any informer in
//! between: server, HTTP, decode and the OS scheduler. Its latency during
//! resync sweeps against its baseline tells how much of a tail is CPU
//! contention on the machine rather than queueing inside the informer.

use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::NamespaceResourceScope;
use kinformer_actors::Object;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};

use crate::probe::Probe;

/// What the control can watch: a namespaced object of a static kind.
pub trait Watched:
    Object + kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
{
}
impl<T> Watched for T where
    T: Object + kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
{
}

/// Starts the control watch on `namespace` of the server at `url`; it records
/// into the returned probe once that is begun, and ends with the process.
pub fn start<K: Watched>(url: &str, namespace: &str) -> anyhow::Result<Arc<Probe>> {
    let probe = Arc::new(Probe::new(None));
    let recorder = probe.clone();
    let (url, namespace) = (url.to_owned(), namespace.to_owned());
    std::thread::Builder::new()
        .name("control-watch".into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(watch::<K>(&url, &namespace, &recorder)));
            if let Err(e) = result {
                tracing::warn!("control watch ended: {e:#}");
            }
        })?;
    Ok(probe)
}

/// Watches from the current resourceVersion on, re-opening the watch when the
/// server ends it; its own client, so no request goes through another thread.
async fn watch<K: Watched>(url: &str, namespace: &str, probe: &Probe) -> anyhow::Result<()> {
    let api: Api<K> = Api::namespaced(super::client(url)?, namespace);
    let mut rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    loop {
        let mut events = api.watch(&WatchParams::default(), &rv).await?.boxed();
        while let Some(event) = events.try_next().await? {
            let (object, changed) = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, true),
                // A deleted object carries the stamp of an earlier write.
                WatchEvent::Deleted(o) => (o, false),
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(e) => anyhow::bail!("watch error: {e:?}"),
            };
            if let Some(v) = &object.meta().resource_version {
                rv.clone_from(v);
            }
            if changed {
                probe.watch_update(object.meta().annotations.as_ref());
            }
        }
    }
}
