//! Leader election among replicas: one leads, the others stand by, and a
//! successor takes over when the leader dies or stops.
//!
//! Run: `cargo run --example leader_election`. It starts the embedded API
//! server, writes a kubeconfig for it, and starts three replica processes of
//! this example (short timings: lease 1 s, renew deadline 0.6 s, retry
//! 0.2 s). It kills the leader with SIGKILL (the successor waits for the
//! Lease to expire), then stops the next one with SIGTERM (it releases the
//! Lease: the third takes over at once), and prints who led when.
//!
//! The same against a real cluster: `cargo run --example leader_election --
//! --kubeconfig [PATH]` (default: `KUBECONFIG`, else `~/.kube/config`; its
//! current context and namespace). The replicas need `get`, `create` and
//! `update` on `leases` there; the Lease is `kinformer-leader-demo`.
//!
//! One replica by hand, with client-go's timings (15 s, 10 s, 2 s), in as
//! many terminals as you like: `POD_NAME=r1 cargo run --example
//! leader_election -- replica`; Ctrl-C one for a handover, `kill -9` it for a
//! failover.

#[path = "support/replicas.rs"]
mod support;

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kinformer::leader::{ElectionTimings, LeaderElector, LeaderEvent};
use support::{Cluster, Mode, Replicas, Target};
use tokio::sync::broadcast::error::RecvError;

const LEASE_NAME: &str = "kinformer-leader-demo";

const FAST: ElectionTimings = ElectionTimings {
    lease_duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(600),
    retry_period: Duration::from_millis(200),
};

/// How long the demo waits for a replica to take over before giving up.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(20);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match support::mode()? {
        Mode::Demo(target) => demo(target),
        Mode::Replica { fast: false } => replica(ElectionTimings::default()).await,
        Mode::Replica { fast: true } => replica(FAST).await,
    }
}

/// One replica against the cluster of the kubeconfig (`KUBECONFIG`, else
/// `~/.kube/config`; in a pod, its service account): leads when it can, until
/// SIGTERM or Ctrl-C; prints one line per change (`leading`,
/// `standing by (…)`, `leader is …`, `released`).
async fn replica(timings: ElectionTimings) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connect to the cluster")?;
    let builder =
        LeaderElector::builder(kube::Api::<Lease>::default_namespaced(client), LEASE_NAME)
            .timings(timings);
    let mut events = builder.events();
    let elector = builder.start()?;
    let me = elector.identity().to_owned();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(LeaderEvent::BecameLeader { .. }) => println!("{me}: leading"),
                Ok(LeaderEvent::SteppedDown { reason, .. }) => {
                    println!("{me}: standing by ({reason:?})");
                }
                Ok(LeaderEvent::NewLeader { identity, .. }) => println!("{me}: leader is {identity}"),
                Err(RecvError::Lagged(n)) => println!("{me}: missed {n} events"),
                Err(RecvError::Closed) => bail!("{me}: the elector ended"),
            },
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let outcome = elector.stop().await?;
    println!("{me}: released ({outcome:?})");
    Ok(())
}

/// Three replicas, a SIGKILL and a SIGTERM.
fn demo(target: Target) -> anyhow::Result<()> {
    let cluster = Cluster::connect(target, "leader-demo")?;
    let start = Instant::now();
    // Every replica's lines, stamped as they are read.
    let (mut replicas, lines) = Replicas::new();
    for name in ["r1", "r2", "r3"] {
        replicas.start(&cluster, name, &["replica", "--fast"])?;
    }
    replicas.close();
    let log = Log { lines, start };
    let (first, _) = log.until_leading("at start")?;
    log.for_a_while(Duration::from_secs(1));
    let killed = Instant::now();
    log.print(killed, &format!("SIGKILL {first}"));
    replicas.get(&first)?.kill()?;
    let (second, at) = log.until_leading("after SIGKILL")?;
    let failover = at - killed;
    log.for_a_while(Duration::from_secs(1));
    let stopped = Instant::now();
    log.print(stopped, &format!("SIGTERM {second}"));
    replicas.terminate(&second)?;
    let (third, at) = log.until_leading("after SIGTERM")?;
    let handover = at - stopped;
    // The last one releases too, so a rerun against a cluster starts clean.
    log.for_a_while(Duration::from_secs(1));
    replicas.terminate(&third)?;
    for (_, child) in &mut replicas.children {
        child.wait()?;
    }
    log.for_a_while(Duration::from_secs(1));
    println!(
        "failover after SIGKILL of {first}: {second} led {failover:.2?} later (the Lease had to expire)"
    );
    println!(
        "handover after SIGTERM of {second}: {third} led {handover:.2?} later (it was released)"
    );
    Ok(())
}

/// The replicas' lines, stamped as they were read, printed as they come.
struct Log {
    lines: mpsc::Receiver<(Instant, String)>,
    start: Instant,
}

impl Log {
    fn print(&self, at: Instant, line: &str) {
        println!("{:>7.3}s  {line}", (at - self.start).as_secs_f64());
    }

    /// Prints lines until one says `… leading`: who, and when it was read.
    fn until_leading(&self, what: &str) -> anyhow::Result<(String, Instant)> {
        loop {
            let (at, line) = match self.lines.recv_timeout(TAKEOVER_LIMIT) {
                Ok(line) => line,
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("every replica exited before one took over {what}")
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!("no replica took over {what} within {TAKEOVER_LIMIT:?}")
                }
            };
            self.print(at, &line);
            if let Some(name) = line.strip_suffix(": leading") {
                return Ok((name.to_owned(), at));
            }
        }
    }

    /// Prints the lines that come within `pause` (fewer if every replica exited).
    fn for_a_while(&self, pause: Duration) {
        let until = Instant::now() + pause;
        let wait = || until.saturating_duration_since(Instant::now());
        while let Ok((at, line)) = self.lines.recv_timeout(wait()) {
            self.print(at, &line);
        }
    }
}
