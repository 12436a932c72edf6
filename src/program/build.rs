//! Turning checked settings into running informers and subscribers.

use actix::prelude::*;
use kinformer::Backoff;
use kinformer::FifoOptions;
use kinformer::{Event, Informer, SubscribeOptions};
use kube::core::DynamicObject;
use std::sync::Arc;

use super::config::{EngineSettings, SubscriberSettings};
use super::metrics::Notifications;
use super::resource::Resolved;

/// Which objects an informer watches.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only this namespace (`None` = all).
    pub namespace: Option<String>,
    /// Label selector.
    pub label_selector: Option<String>,
    /// Field selector.
    pub field_selector: Option<String>,
    /// Page size override.
    pub page_size: Option<u32>,
    /// Streaming lists override.
    pub streaming_lists: Option<bool>,
    /// Snapshot directory and cluster identity (its URL), for a warm restart.
    pub persist: Option<(std::path::PathBuf, String)>,
    /// A compact cache (`None`: the engine's setting).
    pub compact_cache: Option<bool>,
}

/// Starts an informer over `resource` with the engine defaults. Needs an actix runtime.
pub fn start_informer(
    client: kube::Client,
    resource: &Resolved,
    selection: &Selection,
    engine: &EngineSettings,
) -> Result<Informer<DynamicObject>, kinformer::InformerError> {
    let api = resource.api(client, selection.namespace.as_deref());
    let mut builder = Informer::builder(api)
        .streaming_lists(selection.streaming_lists.unwrap_or(engine.streaming_lists))
        .backoff(Backoff::new(
            engine.backoff.initial,
            engine.backoff.cap,
            engine.backoff.reset_after,
        ))
        .fifo_options(
            FifoOptions::default()
                .batch_size(engine.fifo.batch_size)
                .initial_batch_size(engine.fifo.initial_batch_size)
                .high_watermark(engine.fifo.high_watermark),
        )
        .default_resync(engine.default_resync)
        .read_timeout(engine.read_timeout)
        .min_watch_timeout(engine.min_watch_timeout)
        .index("namespace", |o: &DynamicObject| {
            Ok(o.metadata.namespace.clone().into_iter().collect())
        });
    // An explicit page size applies to relists at a resourceVersion too
    // the engine's default one keeps the library's default rule.
    let default_size = kinformer::DEFAULT_PAGE_SIZE;
    let engine_size = (engine.page_size != default_size).then_some(engine.page_size);
    if let Some(size) = selection.page_size.or(engine_size) {
        builder = builder.page_size(size);
    }
    if let Some(l) = &selection.label_selector {
        builder = builder.label_selector(l.clone());
    }
    if let Some(f) = &selection.field_selector {
        builder = builder.field_selector(f.clone());
    }
    if let Some((dir, cluster)) = &selection.persist {
        builder = builder.persist(dir, cluster.clone());
    }
    if selection.compact_cache.unwrap_or(engine.compact_cache) {
        let options = kinformer::CompactOptions::default().recent(engine.compact_recent);
        builder = builder.compact_cache(options);
    }
    if let Some(n) = engine.list_decoders {
        builder = builder.list_decoders(n);
    }
    builder
        .skip_managed_fields(engine.drop_managed_fields)
        .start()
}

/// The subscribe options of `sub`, with the engine's defaults filled in.
pub fn subscribe_options(sub: &SubscriberSettings, engine: &EngineSettings) -> SubscribeOptions {
    let mut options = SubscribeOptions::default()
        .policy(sub.policy.unwrap_or(engine.overflow_policy).into())
        .capacity(sub.capacity.unwrap_or(engine.queue_capacity));
    if let Some(r) = sub.resync {
        options = options.resync(r);
    }
    options
}

/// The subscriber `kinformer run` attaches: counts what it handles, by type and cause.
pub struct CountingSubscriber {
    /// The counts, shared with the status display and metrics.
    pub notifications: Arc<Notifications>,
    /// `informer` / `subscriber` span for its log lines.
    pub span: tracing::Span,
}

impl Actor for CountingSubscriber {
    type Context = Context<Self>;
}

impl Handler<Event<DynamicObject>> for CountingSubscriber {
    type Result = ();

    fn handle(&mut self, event: Event<DynamicObject>, _: &mut Context<Self>) {
        let _entered = self.span.enter();
        tracing::trace!(key = %event.key(), cause = ?event.cause(), "notification");
        self.notifications.record(&event);
    }
}
