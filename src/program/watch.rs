//! `kinformer watch RESOURCE`: one informer, one printing subscriber.
//!
//! `-o json` prints exactly one JSON object per notification, one per line,
//! flushed at once (pipe it into `jq`):
//! `{"type":"Added"|"Updated"|"Deleted","key":"ns/name","resourceVersion":"…",
//! "cause":"initial"|"watch"|"relist"|"resync","finalStateUnknown":false}`,
//! plus `"object"` with `--full` (with its `apiVersion` and `kind`, a
//! Secret's values redacted unless `--show-secrets`). `-o yaml` prints the
//! same as one YAML document per notification. Everything else goes to stderr.

use std::io::Write;
use std::sync::Arc;

use actix::prelude::*;
use kinformer::Event;
use kube::core::DynamicObject;
use tokio::sync::Notify;

use super::cli::{WatchArgs, WatchOutput};
use super::config::Loaded;
use super::output::{self, ObjectView};
use super::target::Target;

/// Prints each notification; signals `closed` when stdout is gone.
struct Printer {
    output: WatchOutput,
    /// With `--full`: how objects are printed.
    objects: Option<ObjectView>,
    closed: Arc<Notify>,
    stdout_closed: bool,
}

impl Actor for Printer {
    type Context = Context<Self>;
}

impl Printer {
    fn format(&self, event: &Event<DynamicObject>) -> anyhow::Result<String> {
        let objects = self.objects.as_ref();
        Ok(match self.output {
            WatchOutput::Json => output::notification(event, objects).to_string(),
            WatchOutput::Yaml => output::yaml_document(&output::notification(event, objects))?,
            WatchOutput::Text => match (objects, event.object()) {
                (Some(view), Some(object)) => format!(
                    "{}\n{}",
                    output::text_line(event),
                    serde_json::to_string_pretty(&view.render(object))?
                ),
                _ => output::text_line(event),
            },
        })
    }
}

impl Handler<Event<DynamicObject>> for Printer {
    type Result = ();

    fn handle(&mut self, event: Event<DynamicObject>, _: &mut Context<Self>) {
        if self.stdout_closed {
            return;
        }
        let line = match self.format(&event) {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!(key = %event.key(), error = %e, "notification not printable");
                return;
            }
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
        target,
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
    target.shutdown();
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
    target: Target,
    informer: kinformer::Informer<DynamicObject>,
    subscription: kinformer::Subscription<DynamicObject>,
    closed: Arc<Notify>,
}

/// Connects, resolves the resource, starts the informer and the printer.
async fn start_watching(loaded: &Loaded, args: &WatchArgs) -> anyhow::Result<Watching> {
    let target = Target::open(loaded, &args.target).await?;
    let resource = &target.resource;
    let span = tracing::info_span!("informer", informer = %args.target.resource, resource = %resource.describe());
    let informer = target.start_informer(&args.target, loaded)?;
    let closed = Arc::new(Notify::new());
    let printer = Printer {
        output: args.output,
        objects: args.full.then(|| target.objects(&args.target)),
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
    let options = super::build::subscribe_options(&printer_settings, &loaded.settings.engine);
    let subscription = informer.subscribe(printer.recipient(), options).await?;
    span.in_scope(|| {
        tracing::info!(namespace = ?target.namespace, resync = ?subscription.resync_period(), "watching")
    });
    let resync = humantime::format_duration(subscription.resync_period());
    eprintln!(
        "kinformer: watching {} {}",
        resource.describe(),
        if resource.namespaced {
            format!("{} (resync {resync})", target.scope())
        } else {
            format!("({}, resync {resync})", target.scope())
        }
    );
    Ok(Watching {
        target,
        informer,
        subscription,
        closed,
    })
}
