//! `kinformer get RESOURCE`: the informer's cache once it has synced,
//! printed once, then exit: a table as `kubectl get` prints it (NAMESPACE
//! with `-A`, NAME, AGE), or a `List` as JSON or YAML (objects with their
//! `apiVersion` and `kind`, a Secret's values redacted unless
//! `--show-secrets`). The objects come through the informer, listed as
//! `watch` and `run` list them (pages, selectors, streaming lists), which
//! makes it a quick check of what an informer would cache.

use std::io::Write;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use kinformer::Informer;
use kube::core::DynamicObject;

use super::cli::{GetArgs, GetOutput};
use super::config::Loaded;
use super::output;
use super::target::Target;

/// Lists, prints, exits; a failed list request fails the command (exit 1)
/// rather than being retried.
pub async fn get(loaded: Loaded, args: GetArgs) -> anyhow::Result<()> {
    let mut signals = super::StopSignals::install()?;
    let target = tokio::select! {
        target = Target::open(&loaded, &args.target) => target?,
        why = signals.recv() => anyhow::bail!("stopped ({why}) before listing"),
    };
    let informer = target.start_informer(&args.target, &loaded)?;
    let synced = tokio::select! {
        synced = synced_or_failed(&informer) => synced,
        why = signals.recv() => Err(anyhow::anyhow!("stopped ({why}) before the list finished")),
    };
    informer.stop().await;
    let result = synced
        .with_context(|| format!("listing {}", target.resource.describe()))
        .and_then(|()| print(&target, &informer, &args));
    target.shutdown();
    result
}

/// Waits for the initial list; the first failed request is an error.
async fn synced_or_failed(informer: &Informer<DynamicObject>) -> anyhow::Result<()> {
    // The informer retries failures on its own and has no failure signal:
    // look at its state every few milliseconds (a one-shot command).
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    loop {
        if informer.has_synced() {
            return Ok(());
        }
        if let Some(failure) = informer.last_failure() {
            anyhow::bail!("{failure}");
        }
        poll.tick().await;
    }
}

fn print(
    target: &Target,
    informer: &Informer<DynamicObject>,
    args: &GetArgs,
) -> anyhow::Result<()> {
    let snapshot = informer.store().snapshot();
    let mut objects: Vec<_> = snapshot.iter().collect();
    objects.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let view = target.objects(&args.target);
    let render = || {
        let items = objects.iter().map(|(_, o)| view.render(o)).collect();
        output::list(items, &informer.last_sync_resource_version())
    };
    let text = match args.output {
        GetOutput::Table if objects.is_empty() => {
            match (&target.namespace, target.resource.namespaced) {
                (Some(ns), true) => eprintln!("No resources found in {ns} namespace."),
                _ => eprintln!("No resources found"),
            }
            return Ok(());
        }
        GetOutput::Table => output::table(
            objects.iter().map(|(_, o)| &**o),
            target.namespace.is_none() && target.resource.namespaced,
            SystemTime::now(),
        ),
        GetOutput::Json => format!("{}\n", serde_json::to_string_pretty(&render())?),
        GetOutput::Yaml => serde_saphyr::to_string(&render())?,
    };
    let mut out = std::io::stdout().lock();
    // A reader gone early (`| head`) is no error worth reporting.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    Ok(())
}
