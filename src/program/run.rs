//! `kinformer run`: resolve every configured informer, start them all with
//! their subscribers, show progress and live status, stop on Ctrl-C,
//! SIGTERM or `--for`, print a summary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use anyhow::Context as _;

use super::build::{CountingSubscriber, Selection, start_informer, subscribe_options};
use super::cli::RunArgs;
use super::cluster;
use super::config::Loaded;
use super::discovery::resolve_all;
use super::leadership::LeaderView;
use super::metrics::{self, InformerView, InitialSync, Notifications, Registry, SubscriberView};
use super::resource::{Resolved, ResourceSpec};
use super::status::{self, Display};

/// Runs until Ctrl-C, SIGTERM or `--for`.
pub async fn run(loaded: Loaded, args: RunArgs) -> anyhow::Result<()> {
    let settings = &loaded.settings;
    if settings.informers.is_empty() {
        return Err(loaded
            .error(
                "informers",
                "no informers configured: `kinformer run` needs at least one",
            )
            .into());
    }
    // Caught from here on, and `--for` counts from here: a signal or the end
    // of `--for` during a slow start-up stops as gracefully as later.
    let mut signals = super::StopSignals::install()?;
    let deadline = super::deadline_after(args.run_for);
    let started = tokio::select! {
        started = start_all(&loaded) => started?,
        why = signals.recv() => {
            status::say(&format!("kinformer: stopping ({why}) before every informer started"));
            return Ok(());
        }
        _ = super::until(deadline) => {
            status::say("kinformer: stopping (time is up) before every informer started");
            return Ok(());
        }
    };
    let Started {
        cluster,
        registry,
        metrics_server,
    } = started;
    let started = Instant::now();

    let mut display = Display::new(&registry);
    let interval = if display.is_terminal() {
        settings
            .observability
            .status_interval
            .min(Duration::from_millis(200))
    } else {
        settings.observability.status_interval
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop_reason = loop {
        tokio::select! {
            _ = tick.tick() => {
                registry.sample();
                if !display.tick(&registry) {
                    break "stdout closed";
                }
            }
            why = signals.recv() => break why,
            _ = super::until(deadline) => break "time is up",
        }
    };
    display.finish();
    status::say(&format!("kinformer: stopping ({stop_reason})"));

    // Graceful stop: step down first (a successor takes over at once),
    // then no more listing or watching, then let every subscriber finish the
    // notification it is handling. A second signal meanwhile stops at once.
    let graceful = async {
        if let Some(leader) = &registry.leader {
            status::say(&format!("kinformer: {}", leader.stop().await));
        }
        for view in &registry.informers {
            view.informer.stop().await;
        }
        for view in &registry.informers {
            for sub in &view.subscribers {
                if let Some(subscription) = sub.take() {
                    subscription.unsubscribe().await;
                }
            }
        }
    };
    tokio::select! {
        () = graceful => {}
        why = signals.recv() => {
            status::say(&format!("kinformer: {why} again while stopping: stopping at once"));
            std::process::exit(130);
        }
    }
    for line in status::summary(&registry, started.elapsed()) {
        status::say(&line);
    }
    // An informer that never synced because its requests kept failing makes
    // the run a failure, with the reason; one merely stopped before its
    // (slow) initial sync finished does not.
    let mut failing = Vec::new();
    for view in registry
        .informers
        .iter()
        .filter(|v| !v.informer.has_synced())
    {
        match view.informer.last_failure() {
            Some(f) => failing.push(format!("{} (last {f})", view.name)),
            None => {
                let _ = status::say(&format!(
                    "kinformer: {} stopped before its initial sync finished",
                    view.name
                ));
            }
        }
    }
    if let Some(server) = metrics_server {
        server.stop();
    }
    if let Some(embedded) = cluster.embedded {
        embedded.shutdown();
    }
    if !failing.is_empty() {
        anyhow::bail!("never synced: {}", failing.join("; "));
    }
    Ok(())
}

/// What `run` starts before its main loop.
struct Started {
    cluster: cluster::Cluster,
    registry: Arc<Registry>,
    metrics_server: Option<super::http::HttpServer>,
}

/// Connects, resolves every configured resource, starts the informers and
/// their subscribers, and the metrics endpoint.
async fn start_all(loaded: &Loaded) -> anyhow::Result<Started> {
    let settings = &loaded.settings;
    // The metrics port first: a clash must not throw away lists under way.
    let metrics_listener = match &settings.observability.metrics_addr {
        Some(addr) => {
            // Checked when the configuration was loaded.
            let addr = super::config::metrics_listen_addr(addr)
                .map_err(|m| loaded.error("observability.metrics_addr", m))?;
            Some(super::http::bind(addr).context("observability.metrics_addr")?)
        }
        None => None,
    };
    let cluster = cluster::connect(&settings.cluster, &settings.embedded).await?;
    if cluster.embedded.is_none() {
        // `--seed` and `--churn` asked for this run make no sense against a
        // real cluster (the same keys in a file are for when none is found).
        for key in ["embedded.seed", "embedded.churn_per_sec"] {
            if loaded.origin(key) == super::config::FLAGS_ORIGIN {
                let message = format!(
                    "applies to the embedded API server only, and this run uses {}",
                    cluster.config.cluster_url
                );
                return Err(loaded.error(key, message).into());
            }
        }
    }
    status::say(&cluster.banner);
    let client = kube::Client::try_from(cluster.config.clone()).context("building the client")?;

    // Resolve everything before starting anything: nothing runs half-configured.
    let specs: Vec<ResourceSpec> = settings
        .informers
        .iter()
        .map(|inf| ResourceSpec {
            resource: inf.resource.clone(),
            kind: inf.kind.clone(),
            group: inf.group.clone(),
            version: inf.version.clone(),
        })
        .collect();
    let found = super::within(
        "reading the server's discovery documents",
        settings.engine.read_timeout,
        async {
            resolve_all(&client, &specs)
                .await
                .context("reading the server's discovery documents")
        },
    )
    .await?;
    let mut resolved: Vec<Resolved> = Vec::new();
    for (i, (inf, r)) in settings.informers.iter().zip(found).enumerate() {
        let key = if inf.resource.is_some() {
            format!("informers[{i}].resource")
        } else {
            format!("informers[{i}].kind")
        };
        let r = r.map_err(|e| loaded.error(&key, e.to_string()))?;
        if inf.namespace.is_some() && !r.namespaced {
            return Err(loaded
                .error(
                    &format!("informers[{i}].namespace"),
                    format!("{} is cluster-scoped: it has no namespaces", r.describe()),
                )
                .into());
        }
        resolved.push(r);
    }

    // What snapshots are keyed by: kube-system's uid differs between
    // clusters, the server URL may not (in-cluster, recreated test clusters).
    let persisting =
        settings.engine.persist.is_some() || settings.informers.iter().any(|i| i.persist.is_some());
    if persisting && cluster.embedded.is_some() {
        // A new server each run (another port, another kube-system uid): no
        // snapshot is ever used again, and each run leaves a file.
        tracing::warn!(
            "persisting against the embedded server: each run starts a new cluster, so snapshots are never reused"
        );
    }
    let cluster_id = if persisting {
        let read = super::within(
            "reading the cluster's identity",
            settings.engine.read_timeout,
            async { Ok(kinformer::cluster_identity(&client).await) },
        )
        .await
        .and_then(|read| Ok(read?));
        match read {
            Ok(id) => format!("{} {id}", cluster.config.cluster_url),
            Err(e) => {
                tracing::warn!(error = %e, "no cluster identity (the kube-system namespace's uid): snapshots are keyed by the server URL alone");
                cluster.config.cluster_url.to_string()
            }
        }
    } else {
        String::new()
    };

    let t0 = Instant::now();
    let mut views = Vec::new();
    for (inf, res) in settings.informers.iter().zip(&resolved) {
        let name = inf.display_name();
        let span = tracing::info_span!("informer", informer = %name, resource = %res.describe());
        let selection = Selection {
            namespace: inf.namespace.clone(),
            label_selector: inf.label_selector.clone(),
            field_selector: inf.field_selector.clone(),
            page_size: inf.page_size,
            streaming_lists: inf.streaming_lists,
            persist: (inf.persist.as_ref().or(settings.engine.persist.as_ref()))
                .map(|dir| (dir.clone(), cluster_id.clone())),
            compact_cache: inf.compact_cache,
        };
        let informer = start_informer(client.clone(), res, &selection, &settings.engine)?;
        span.in_scope(|| tracing::info!(namespace = ?inf.namespace, "informer started"));
        let mut subscribers = Vec::new();
        for sub in &inf.subscribers {
            let notifications = Arc::new(Notifications::default());
            let actor = CountingSubscriber {
                notifications: notifications.clone(),
                span: tracing::info_span!(parent: &span, "subscriber", subscriber = %sub.name),
            }
            .start();
            let options = subscribe_options(sub, &settings.engine);
            let subscription = informer.subscribe(actor.recipient(), options).await?;
            span.in_scope(|| {
                tracing::info!(subscriber = %sub.name, id = %subscription.id(), resync = ?subscription.resync_period(), "subscribed")
            });
            subscribers.push(SubscriberView::new(
                sub.name.clone(),
                notifications,
                subscription,
            ));
        }
        views.push(InformerView::new(
            name,
            res.describe(),
            informer,
            subscribers,
        ));
    }
    let leader = match &settings.leader_election {
        Some(le) => {
            let view = LeaderView::start(client.clone(), le)?;
            status::say(&format!(
                "kinformer: leader election on Lease {} as {}",
                view.lease, view.identity
            ));
            Some(view)
        }
        None => None,
    };
    let registry = Arc::new(Registry {
        informers: views,
        leader,
    });
    for view in &registry.informers {
        // Record when each informer syncs, for the progress display.
        let informer = view.informer.clone();
        let synced = view.synced.clone();
        let name = view.name.clone();
        actix::spawn(async move {
            if informer
                .wait_for_sync(Duration::from_secs(86_400 * 365))
                .await
                .is_ok()
            {
                let took = t0.elapsed();
                let objects = informer.stats().objects;
                let resource_version = informer.last_sync_resource_version();
                tracing::info!(informer = %name, ?took, objects, %resource_version, "initial sync done");
                let _ = synced.set(InitialSync {
                    took,
                    objects,
                    resource_version,
                });
            }
        });
    }

    let metrics_server = match metrics_listener {
        Some(listener) => {
            let server = metrics::serve(listener, registry.clone())?;
            status::say(&format!(
                "kinformer: metrics on http://{0}/metrics (health: /healthz, readiness: /readyz)",
                server.addr
            ));
            Some(server)
        }
        None => None,
    };

    Ok(Started {
        cluster,
        registry,
        metrics_server,
    })
}
