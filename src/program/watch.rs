//! `kinformer watch RESOURCE`: one informer, one printing subscriber.
//!
//! `-o json` prints exactly one JSON object per notification, one per line,
//! flushed at once (pipe it into `jq`):
//! `{"type":"Added"|"Updated"|"Deleted","key":"ns/name","resourceVersion":"…",
//! "cause":"initial"|"watch"|"relist"|"resync","finalStateUnknown":false}`,
//! plus `"object"` with `--full`. Everything else goes to stderr.

use std::io::Write;
use std::sync::Arc;

use actix::prelude::*;
use anyhow::Context as _;
use kinformer::Event;
use kube::core::DynamicObject;
use serde_json::json;
use tokio::sync::Notify;

use super::build::{Selection, start_informer};
use super::cli::{Output, WatchArgs};
use super::cluster;
use super::config::{EmbeddedSettings, Loaded};
use super::resource::{ResourceSpec, resolve_all};

/// Prints each notification; signals `closed` when stdout is gone.
struct Printer {
    output: Output,
    full: bool,
    closed: Arc<Notify>,
    stdout_closed: bool,
}

impl Actor for Printer {
    type Context = Context<Self>;
}

/// One notification as printed (`-o json`).
pub fn to_json(event: &Event<DynamicObject>, full: bool) -> serde_json::Value {
    let (ty, object, unknown) = match event {
        Event::Added { object, .. } => ("Added", Some(object), false),
        Event::Updated { new, .. } => ("Updated", Some(new), false),
        Event::Deleted { object, .. } => {
            ("Deleted", object.object(), object.is_final_state_unknown())
        }
    };
    let rv = object
        .and_then(|o| o.metadata.resource_version.clone())
        .unwrap_or_default();
    let mut line = json!({
        "type": ty,
        "key": event.key().as_str(),
        "resourceVersion": rv,
        "cause": event.cause(),
        "finalStateUnknown": unknown,
    });
    if full {
        line["object"] = object
            .and_then(|o| serde_json::to_value(&**o).ok())
            .unwrap_or(serde_json::Value::Null);
    }
    line
}

fn to_text(event: &Event<DynamicObject>) -> String {
    let line = to_json(event, false);
    let field = |k: &str| line[k].as_str().unwrap_or_default().to_owned();
    format!(
        "{:<8} {:<8} {} rv={}{}",
        field("type").to_uppercase(),
        field("cause"),
        field("key"),
        field("resourceVersion"),
        if line["finalStateUnknown"].as_bool() == Some(true) {
            " (final state unknown)"
        } else {
            ""
        }
    )
}

impl Handler<Event<DynamicObject>> for Printer {
    type Result = ();

    fn handle(&mut self, event: Event<DynamicObject>, _: &mut Context<Self>) {
        if self.stdout_closed {
            return;
        }
        let line = match self.output {
            Output::Json => to_json(&event, self.full).to_string(),
            Output::Text if self.full => format!(
                "{}\n{}",
                to_text(&event),
                event
                    .object()
                    .and_then(|o| serde_json::to_string_pretty(&**o).ok())
                    .unwrap_or_default()
            ),
            Output::Text => to_text(&event),
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
            // stdout closed (e.g. `| head`): the main task unsubscribes and
            // stops; stopping this actor here would log "subscriber is gone".
            self.stdout_closed = true;
            self.closed.notify_one();
        }
    }
}

/// Watches until Ctrl-C, SIGTERM, `--for`, or stdout closes.
pub async fn watch(loaded: Loaded, args: WatchArgs) -> anyhow::Result<()> {
    if let Some(message) = args.resync.and_then(super::config::resync_problem) {
        return Err(super::config::ConfigError {
            key: "--resync".into(),
            origin: super::config::FLAGS_ORIGIN.into(),
            message,
        }
        .into());
    }
    // Caught from here on, and `--for` counts from here (see `run`).
    let mut signals = super::StopSignals::install()?;
    let deadline = super::deadline_after(args.run_for);
    let Watching {
        cluster,
        informer,
        subscription,
        closed,
    } = tokio::select! {
        started = start_watching(&loaded, &args) => started?,
        _ = signals.recv() => return Ok(()),
        _ = super::until(deadline) => return Ok(()),
    };
    let stdout_closed = tokio::select! {
        _ = signals.recv() => false,
        _ = super::until(deadline) => false,
        _ = closed.notified() => true,
    };
    informer.stop().await;
    subscription.unsubscribe().await;
    if let Some(embedded) = cluster.embedded {
        embedded.shutdown();
    }
    // Never synced because its requests kept failing: say why rather than
    // end as if all was well (unless the reader went away first, as `| head`
    // does). Merely stopped before a slow initial sync finished is no failure.
    if !informer.has_synced()
        && !stdout_closed
        && let Some(f) = informer.last_failure()
    {
        anyhow::bail!("never synced: last {f}");
    }
    Ok(())
}

/// What `watch` runs until it stops.
struct Watching {
    cluster: cluster::Cluster,
    informer: kinformer::Informer<DynamicObject>,
    subscription: kinformer::Subscription<DynamicObject>,
    closed: Arc<Notify>,
}

/// Connects, resolves the resource, starts the informer and the printer.
async fn start_watching(loaded: &Loaded, args: &WatchArgs) -> anyhow::Result<Watching> {
    let settings = &loaded.settings;
    // A small workload, in the namespace `watch` looks at by default, so
    // that `kinformer watch configmaps` shows changes as they happen.
    let embedded = EmbeddedSettings {
        seed: 10,
        churn_per_sec: 1.0,
        churn_objects: 10,
        churn_namespace: "default".into(),
        ..EmbeddedSettings::default()
    };
    let cluster = cluster::connect(&settings.cluster, &embedded).await?;
    eprintln!("{}", cluster.banner);
    let default_namespace = cluster.config.default_namespace.clone();
    let client = kube::Client::try_from(cluster.config.clone()).context("building the client")?;
    let spec = ResourceSpec {
        resource: Some(args.resource.clone()),
        ..ResourceSpec::default()
    };
    let resource = super::within(
        "reading the server's discovery documents",
        settings.engine.read_timeout,
        async {
            resolve_all(&client, std::slice::from_ref(&spec))
                .await
                .context("reading the server's discovery documents")
        },
    )
    .await?
    .pop()
    .unwrap_or_else(|| Err("not resolved".into()))
    .map_err(|m| anyhow::anyhow!("RESOURCE {:?}: {m}", args.resource))?;
    let namespace = match (&args.namespace, args.all_namespaces) {
        (_, true) => None,
        (Some(ns), false) => Some(ns.clone()),
        (None, false) => Some(default_namespace),
    };
    let namespace = namespace.filter(|_| resource.namespaced);
    let selection = Selection {
        namespace: namespace.clone(),
        label_selector: args.label_selector.clone(),
        field_selector: args.field_selector.clone(),
        ..Selection::default()
    };
    let span =
        tracing::info_span!("informer", informer = %args.resource, resource = %resource.describe());
    let informer = start_informer(client, &resource, &selection, &settings.engine)?;
    let closed = Arc::new(Notify::new());
    let printer = Printer {
        output: args.output,
        full: args.full,
        closed: closed.clone(),
        stdout_closed: false,
    }
    .start();
    // The printer is a subscriber like `run`'s, with the engine's defaults.
    let printer_settings = super::config::SubscriberSettings {
        name: "printer".into(),
        resync: args.resync,
        policy: None,
        capacity: None,
    };
    let options = super::build::subscribe_options(&printer_settings, &settings.engine);
    let subscription = informer.subscribe(printer.recipient(), options).await?;
    span.in_scope(|| {
        tracing::info!(namespace = ?namespace, resync = ?subscription.resync_period(), "watching")
    });
    eprintln!(
        "kinformer: watching {} in {} (resync {})",
        resource.describe(),
        namespace
            .as_deref()
            .map_or("all namespaces".to_owned(), |ns| format!(
                "namespace {ns:?}"
            )),
        humantime::format_duration(subscription.resync_period()),
    );
    Ok(Watching {
        cluster,
        informer,
        subscription,
        closed,
    })
}
