//! The informer under test, kube-runtime flavour: `watcher()` + `reflector()`
//! driven by a task, and for subscribers the shared store (`store_shared` +
//! `subscribe()`), one task per subscriber.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{StreamExt, stream::BoxStream};
use kube::api::Api;
use kube::{Resource, ResourceExt};
use kube_runtime::reflector::{self, Store};
use kube_runtime::watcher::{self, Event};
use kube_runtime::{WatchStreamExt, watcher as watch_fn};
use serde::de::DeserializeOwned;

use super::Under;
use crate::probe::Probe;
use crate::proto::{ChildSpec, Strip};

/// What kube-runtime objects need here.
pub trait KrtObject:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}
impl<T> KrtObject for T where
    T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// Counts of the reflector stream, kept by its driver task.
#[derive(Default)]
struct Driver {
    events: AtomicU64,
    inits: AtomicU64,
    init_dones: AtomicU64,
    init_applies: AtomicU64,
    applies: AtomicU64,
    deletes: AtomicU64,
}

/// A running kube-runtime reflector with its subscribers.
pub struct KrtUnder<K: KrtObject> {
    reader: Store<K>,
    driver: Arc<Driver>,
    probes: Vec<Arc<Probe>>,
}

/// Builds the watcher and reflector, spawns the driver and subscriber tasks.
pub fn start<K: KrtObject>(api: Api<K>, spec: &ChildSpec) -> KrtUnder<K> {
    let mut config = watcher::Config::default().page_size(spec.page_size);
    if spec.variant.streaming {
        config = config.streaming_lists();
    }
    let events: BoxStream<'static, watcher::Result<Event<K>>> = match spec.variant.strip {
        Strip::None => watch_fn(api, config).boxed(),
        // kube-runtime cannot skip while decoding: the closest it has is `modify`.
        Strip::AfterDecode | Strip::AtDecode => watch_fn(api, config)
            .modify(|o| o.managed_fields_mut().clear())
            .boxed(),
    };
    let events = events.default_backoff();
    let driver = Arc::new(Driver::default());
    let mut probes = Vec::new();
    let (reader, stream) = if spec.subscribers.is_empty() {
        let (reader, writer) = reflector::store();
        (reader, reflector::reflector(writer, events).boxed())
    } else {
        let (reader, writer) = reflector::store_shared(spec.capacity);
        for s in &spec.subscribers {
            let probe = Arc::new(Probe::new(None).count_to(spec.count_to));
            probes.push(probe.clone());
            if let Some(handle) = writer.subscribe() {
                let stall = s.stall;
                tokio::spawn(async move {
                    let mut handle = std::pin::pin!(handle);
                    let mut stalled = false;
                    while let Some(obj) = handle.next().await {
                        record(&probe, &obj);
                        if let (Some(stall), false, Some(began)) = (stall, stalled, probe.began())
                            && began.elapsed() >= Duration::from_millis(stall.after_ms)
                        {
                            stalled = true;
                            tracing::info!(?stall, "subscriber stalls");
                            tokio::time::sleep(Duration::from_millis(stall.for_ms)).await;
                        }
                    }
                });
            }
        }
        (reader, reflector::reflector(writer, events).boxed())
    };
    let d = driver.clone();
    tokio::spawn(async move {
        let mut stream = stream;
        while let Some(item) = stream.next().await {
            d.events.fetch_add(1, Ordering::Relaxed);
            match item {
                Ok(Event::Init) => d.inits.fetch_add(1, Ordering::Relaxed),
                Ok(Event::InitApply(_)) => d.init_applies.fetch_add(1, Ordering::Relaxed),
                Ok(Event::InitDone) => d.init_dones.fetch_add(1, Ordering::Relaxed),
                Ok(Event::Apply(_)) => d.applies.fetch_add(1, Ordering::Relaxed),
                Ok(Event::Delete(_)) => d.deletes.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::info!(%e, "kube-runtime watcher error");
                    0
                }
            };
        }
    });
    KrtUnder {
        reader,
        driver,
        probes,
    }
}

fn record<K: Resource>(probe: &Probe, obj: &Arc<K>) {
    if !probe.is_recording() {
        probe.initial.fetch_add(1, Ordering::Relaxed);
        return;
    }
    probe.watch_update(obj.meta().annotations.as_ref());
}

impl<K: KrtObject> Under for KrtUnder<K> {
    async fn informer_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        tokio::time::timeout(timeout, self.reader.wait_until_ready())
            .await
            .map_err(|_| anyhow::anyhow!("not synced within {timeout:?}"))??;
        Ok(())
    }

    async fn subscribers_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        let objects = self.reader.len() as u64;
        let deadline = tokio::time::Instant::now() + timeout;
        for p in &self.probes {
            while p.initial.load(Ordering::Relaxed) < objects {
                if tokio::time::Instant::now() >= deadline {
                    anyhow::bail!("subscribers not synced within {timeout:?}");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }

    fn objects(&self) -> usize {
        self.reader.len()
    }

    fn watch_events(&self) -> u64 {
        self.driver.events.load(Ordering::Relaxed)
    }

    fn lists(&self) -> u64 {
        self.driver.init_dones.load(Ordering::Relaxed)
    }

    fn list_progress(&self) -> u64 {
        self.driver.init_applies.load(Ordering::Relaxed)
    }

    fn pending(&self) -> Vec<usize> {
        Vec::new()
    }

    fn queued(&self) -> usize {
        0
    }

    fn probes(&self) -> &[Arc<Probe>] {
        &self.probes
    }
}
