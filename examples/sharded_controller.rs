//! A sharded controller: three replica processes split the keys of 24
//! ConfigMaps between them by shard Leases (rendezvous hashing over the live
//! members); one is killed with SIGKILL and the other two pick up its keys
//! once its Lease expired for them.
//!
//! Run: `cargo run --example sharded_controller`. It starts the embedded API
//! server, writes a kubeconfig for it, creates the ConfigMaps
//! (`shard-demo-00`..`23`, labelled `kinformer.example/shard-demo=true`), and
//! starts three replicas of this example (short timings: lease 1 s, renew
//! deadline 0.6 s, retry 0.2 s). It prints who owns which keys, kills one
//! replica, prints when each of its keys was picked up and by whom, then
//! stops the others with SIGTERM (each releases its shard Lease).
//!
//! The same against a real cluster: `cargo run --example sharded_controller
//! -- --kubeconfig [PATH]` (default: `KUBECONFIG`, else `~/.kube/config`;
//! its current context and namespace). The replicas need `get`, `list`,
//! `create` and `update` on `leases` and `list`/`watch` on `configmaps`; the
//! demo creates the ConfigMaps if missing. One replica by hand:
//! `POD_NAME=r1 cargo run --example sharded_controller -- replica`.

#[path = "support/replicas.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::Informer;
use kinformer::controller::{Action, Controller, Request};
use kinformer::leader::ElectionTimings;
use kinformer::shard::ShardMember;
use kube::api::{ObjectMeta, PostParams};
use support::{Cluster, Mode, Replicas, Target};

const GROUP: &str = "kinformer-shard-demo";
const LABEL: (&str, &str) = ("kinformer.example/shard-demo", "true");
const OBJECTS: usize = 24;
const FAST: ElectionTimings = ElectionTimings {
    lease_duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(600),
    retry_period: Duration::from_millis(200),
};
/// How long the demo waits for the keys to settle before giving up.
const LIMIT: Duration = Duration::from_secs(30);

#[actix::main]
async fn main() -> anyhow::Result<()> {
    match support::mode()? {
        Mode::Demo(target) => demo(target).await,
        Mode::Replica { fast: false } => replica(ElectionTimings::default()).await,
        Mode::Replica { fast: true } => replica(FAST).await,
    }
}

/// One replica: a shard member and a controller of the demo's ConfigMaps
/// run on it, until SIGTERM or Ctrl-C. Prints `r1: owns a,b,…` whenever its
/// keys change and `r1: reconciled NAME` for every reconcile.
async fn replica(timings: ElectionTimings) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connect to the cluster")?;
    let member = ShardMember::builder(
        kube::Api::<Lease>::default_namespaced(client.clone()),
        GROUP,
    )
    .timings(timings)
    .start()?;
    let me = member.identity().to_owned();
    let informer = Informer::builder(kube::Api::<ConfigMap>::default_namespaced(client))
        .label_selector(format!("{}={}", LABEL.0, LABEL.1))
        .start()?;
    let who = me.clone();
    let controller = Controller::new(informer.clone())
        .sharded(&member)
        .start(move |req: Request<ConfigMap>| {
            println!("{who}: reconciled {}", req.key.name());
            async { Ok::<_, kube::Error>(Action::Done) }
        })
        .await?;
    controller.wait_for_sync(LIMIT).await?;
    let mut assignment = member.assignment();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut shown = None;
    loop {
        let owned: Vec<String> = {
            let a = assignment.borrow_and_update();
            let mut keys: Vec<String> = informer
                .store()
                .snapshot()
                .keys()
                .into_iter()
                .filter(|k| a.owns(k.as_str()))
                .map(|k| k.name().to_owned())
                .collect();
            keys.sort();
            keys
        };
        if shown.as_ref() != Some(&owned) {
            println!("{me}: owns {}", owned.join(","));
            shown = Some(owned);
        }
        tokio::select! {
            r = assignment.changed() => if r.is_err() { break },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    controller.stop(Duration::from_secs(5)).await;
    let outcome = member.stop().await?;
    println!("{me}: left ({outcome:?})");
    Ok(())
}

/// Creates the demo's ConfigMaps (those that exist are kept).
async fn seed(cluster: &Cluster) -> anyhow::Result<()> {
    let config = match &cluster.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let api = kube::Api::<ConfigMap>::default_namespaced(kube::Client::try_from(config)?);
    for i in 0..OBJECTS {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("shard-demo-{i:02}")),
                labels: Some([(LABEL.0.to_owned(), LABEL.1.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context("create the demo's ConfigMaps"),
        }
    }
    Ok(())
}

/// What the replicas said: who owns which keys, and every reconcile.
struct Seen {
    lines: Receiver<(Instant, String)>,
    start: Instant,
    owns: BTreeMap<String, BTreeSet<String>>,
    /// Reconciles in order: when, by whom, which key.
    reconciles: Vec<(Instant, String, String)>,
}

impl Seen {
    /// Reads lines until `done` holds; prints the `owns` and `left` lines.
    fn until(&mut self, what: &str, mut done: impl FnMut(&Seen) -> bool) -> anyhow::Result<()> {
        let deadline = Instant::now() + LIMIT;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => bail!("not {what} within {LIMIT:?}"),
                Err(RecvTimeoutError::Disconnected) => bail!("every replica exited before {what}"),
            };
            let Some((who, rest)) = line.split_once(": ") else {
                continue;
            };
            if let Some(keys) = rest.strip_prefix("owns ") {
                let keys = keys.split(',').filter(|k| !k.is_empty()).map(str::to_owned);
                self.owns.insert(who.to_owned(), keys.collect());
                self.print(at, &format!("{who} owns {} keys", self.owns[who].len()));
            } else if let Some(key) = rest.strip_prefix("reconciled ") {
                self.reconciles.push((at, who.to_owned(), key.to_owned()));
            } else {
                self.print(at, &line);
            }
        }
        Ok(())
    }

    fn print(&self, at: Instant, line: &str) {
        println!("{:>7.3}s  {line}", (at - self.start).as_secs_f64());
    }

    /// Every key owned by exactly one of `live`.
    fn partitioned(&self, live: &[&str]) -> bool {
        let mut all = BTreeSet::new();
        let mut count = 0;
        for r in live {
            let keys = self.owns.get(*r).cloned().unwrap_or_default();
            count += keys.len();
            all.extend(keys);
        }
        all.len() == OBJECTS && count == OBJECTS
    }
}

/// Three replicas, a SIGKILL, the pick-up of the dead replica's keys.
async fn demo(target: Target) -> anyhow::Result<()> {
    let cluster = Cluster::connect(target, "shard-demo")?;
    seed(&cluster).await?;
    let (mut replicas, lines) = Replicas::new();
    let names = ["r1", "r2", "r3"];
    for name in names {
        replicas.start(&cluster, name, &["replica", "--fast"])?;
    }
    replicas.close();
    let mut seen = Seen {
        lines,
        start: Instant::now(),
        owns: BTreeMap::new(),
        reconciles: Vec::new(),
    };
    seen.until("split between three replicas", |s| s.partitioned(&names))?;
    println!("who owns which keys:");
    for (who, keys) in &seen.owns {
        println!(
            "  {who}: {}",
            keys.iter().cloned().collect::<Vec<_>>().join(" ")
        );
    }
    let victim = "r2";
    let theirs = seen.owns[victim].clone();
    let killed = Instant::now();
    seen.print(
        killed,
        &format!("SIGKILL {victim} (it owned {} keys)", theirs.len()),
    );
    replicas.get(victim)?.kill()?;
    let survivors = ["r1", "r3"];
    let picked = |s: &Seen| {
        theirs.iter().all(|k| {
            s.reconciles
                .iter()
                .any(|(at, who, key)| *at > killed && key == k && who != victim)
        })
    };
    seen.until("the dead replica's keys picked up", |s| {
        s.partitioned(&survivors) && picked(s)
    })?;
    println!("the dead replica's keys, picked up after the SIGKILL:");
    for k in &theirs {
        if let Some((at, who, _)) = seen
            .reconciles
            .iter()
            .find(|(at, who, key)| *at > killed && key == k && who != victim)
        {
            println!(
                "  {k}: {victim} → {who}, reconciled {:.2?} after the kill",
                *at - killed
            );
        }
    }
    for name in survivors {
        replicas.terminate(name)?;
    }
    for (_, child) in &mut replicas.children {
        child.wait()?;
    }
    let _ = seen.until("the replicas left", |_| false);
    Ok(())
}
