//! Leader election against the embedded API server: three electors in one
//! process, and three processes killed with SIGKILL. Timings are short
//! (lease 1 s, renew deadline 0.6 s, retry 0.2 s) and every bound is derived
//! from the rules (LE-7, LE-11), not slept for.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kinformer::leader::{ElectionTimings, LeaderElector, LeaderEvent, StepDownReason, StopOutcome};
use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::broadcast;

const TIMINGS: ElectionTimings = ElectionTimings {
    lease_duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(600),
    retry_period: Duration::from_millis(200),
};
const LEASE: &str = "lock";
/// What scheduling and requests to the in-process server may add to a bound.
const SLACK: Duration = Duration::from_millis(300);

/// LE-11 after a crash: the last renew, seen by a candidate within its
/// longest jittered wait, expires a lease duration later.
fn crash_failover_bound() -> Duration {
    TIMINGS.lease_duration + TIMINGS.max_retry_wait() + SLACK
}

/// A successor cannot take over before the dead leader's last renew (at
/// most one retry period before it died) expired.
fn crash_failover_floor() -> Duration {
    TIMINGS.lease_duration - TIMINGS.retry_period - Duration::from_millis(50)
}

/// LE-11 after a release: the candidates' next try finds no holder.
fn release_handover_bound() -> Duration {
    TIMINGS.max_retry_wait() + SLACK
}

/// The embedded server (it serves `coordination.k8s.io/v1` Leases built in).
fn lease_server() -> ServerHandle {
    ApiServer::start_in_thread(ServerConfig::default()).expect("start embedded API server")
}

fn leases(server: &ServerHandle) -> Api<Lease> {
    Api::namespaced(common::client(server), "default")
}

fn lease_spec(server: &ServerHandle) -> LeaseSpec {
    let lease = server
        .get("coordination.k8s.io", "leases", Some("default"), LEASE)
        .expect("the Lease");
    serde_json::from_value(lease["spec"].clone()).expect("a Lease spec")
}

/// One elector of the in-process tests, with every event it sent.
struct Candidate {
    elector: Option<LeaderElector>,
    identity: &'static str,
    events: broadcast::Receiver<LeaderEvent>,
    log: Vec<LeaderEvent>,
}

impl Candidate {
    fn start(server: &ServerHandle, identity: &'static str) -> Candidate {
        let builder = LeaderElector::builder(leases(server), LEASE)
            .identity(identity)
            .timings(TIMINGS);
        let events = builder.events();
        Candidate {
            elector: Some(builder.start().expect("start elector")),
            identity,
            events,
            log: Vec::new(),
        }
    }

    fn is_leader(&self) -> bool {
        self.elector.as_ref().is_some_and(LeaderElector::is_leader)
    }

    fn drain(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.log.push(event);
        }
    }

    /// Its last `BecameLeader` or `SteppedDown` event is a `BecameLeader`.
    fn leads_by_its_events(&self) -> bool {
        self.log
            .iter()
            .rev()
            .find_map(|e| match e {
                LeaderEvent::BecameLeader { .. } => Some(true),
                LeaderEvent::SteppedDown { .. } => Some(false),
                _ => None,
            })
            .unwrap_or(false)
    }

    /// When this elector became leader, in order.
    fn became(&self) -> Vec<Instant> {
        self.log
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::BecameLeader { at } => Some(*at),
                _ => None,
            })
            .collect()
    }

    /// Leadership intervals from the events (an open one ends at `now`).
    fn intervals(&self, now: Instant) -> Vec<(Instant, Instant)> {
        let mut out = Vec::new();
        let mut since = None;
        for event in &self.log {
            match event {
                LeaderEvent::BecameLeader { at } => since = Some(*at),
                LeaderEvent::SteppedDown { at, .. } => {
                    out.extend(since.take().map(|s| (s, *at)));
                }
                LeaderEvent::NewLeader { .. } => {}
            }
        }
        out.extend(since.map(|s| (s, now)));
        out
    }
}

fn three(server: &ServerHandle) -> Vec<Candidate> {
    ["a", "b", "c"]
        .into_iter()
        .map(|id| Candidate::start(server, id))
        .collect()
}

/// The index of the one leader, once there is exactly one.
async fn one_leader(candidates: &mut [Candidate], what: &str) -> usize {
    // Its `BecameLeader` too: the elector publishes `is_leader` just
    // before it sends the event.
    common::eventually(Duration::from_secs(5), what, || {
        candidates.iter_mut().for_each(Candidate::drain);
        let mut leaders = candidates.iter().filter(|c| c.is_leader());
        matches!((leaders.next(), leaders.next()), (Some(l), None) if l.leads_by_its_events())
    })
    .await;
    candidates.iter().position(Candidate::is_leader).unwrap()
}

/// Three electors, one of which leads, after the others saw a few renews.
async fn settled_leader() -> (ServerHandle, Vec<Candidate>, usize) {
    let server = lease_server();
    let mut candidates = three(&server);
    let leader = one_leader(&mut candidates, "a first leader").await;
    tokio::time::sleep(TIMINGS.lease_duration / 2).await;
    (server, candidates, leader)
}

/// After a takeover: the Lease names `next`, one transition later, and no
/// two electors led at once.
fn assert_taken_over(server: &ServerHandle, candidates: &mut [Candidate], next: usize) {
    let spec = lease_spec(server);
    assert_eq!(
        spec.holder_identity.as_deref(),
        Some(candidates[next].identity)
    );
    assert_eq!(spec.lease_transitions, Some(1));
    assert_one_leader_at_a_time(candidates);
}

/// Stops the electors still running (each releases what it holds).
async fn stop_all(candidates: &mut [Candidate]) {
    for c in candidates {
        if let Some(elector) = c.elector.take() {
            elector.stop().await.unwrap();
        }
    }
}

/// LE-7: no two electors led at once (one clock rate, no pauses past the
/// margin `lease_duration - renew_deadline`: the bound is zero).
fn assert_one_leader_at_a_time(candidates: &mut [Candidate]) {
    candidates.iter_mut().for_each(Candidate::drain);
    let now = Instant::now();
    for (i, x) in candidates.iter().enumerate() {
        for y in &candidates[i + 1..] {
            for (s1, e1) in x.intervals(now) {
                for (s2, e2) in y.intervals(now) {
                    assert!(
                        e1 <= s2 || e2 <= s1,
                        "{} and {} led at once: {:?} overlap",
                        x.identity,
                        y.identity,
                        e1.min(e2) - s1.max(s2)
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn le_3_the_embedded_server_answers_409_to_a_stale_resource_version() {
    let server = lease_server();
    let api = leases(&server);
    let params = PostParams::default();
    let mut lease = Lease::default();
    lease.metadata.name = Some(LEASE.into());
    let created = api.create(&params, &lease).await.unwrap();
    let again = api.create(&params, &lease).await.unwrap_err();
    assert!(
        matches!(&again, kube::Error::Api(s) if s.code == 409),
        "{again}"
    );
    let mut update = created.clone();
    update.spec = Some(LeaseSpec {
        holder_identity: Some("a".into()),
        ..LeaseSpec::default()
    });
    let updated = api.replace(LEASE, &params, &update).await.unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    // The same update again, from the old resourceVersion: a lost race.
    update.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let stale = api.replace(LEASE, &params, &update).await.unwrap_err();
    assert!(
        matches!(&stale, kube::Error::Api(s) if s.code == 409),
        "{stale}"
    );
    assert_eq!(lease_spec(&server).holder_identity.as_deref(), Some("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn le_7_three_electors_one_leader_at_a_time() {
    let server = lease_server();
    let mut candidates = three(&server);
    let leader = one_leader(&mut candidates, "a leader").await;
    let identity = candidates[leader].identity;
    // Steady state: the others keep off a renewed Lease (LE-6).
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let leading: Vec<_> = candidates.iter().filter(|c| c.is_leader()).collect();
        assert!(leading.len() <= 1, "two leaders at once");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(candidates[leader].is_leader());
    assert_eq!(
        lease_spec(&server).holder_identity.as_deref(),
        Some(identity)
    );
    for c in &candidates {
        let seen = c.elector.as_ref().unwrap().leader().borrow().clone();
        assert_eq!(seen.as_deref(), Some(identity), "{} sees", c.identity);
    }
    assert_one_leader_at_a_time(&mut candidates);
    stop_all(&mut candidates).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn le_11_an_abandoned_leader_is_replaced_within_a_lease_duration_and_a_retry() {
    let (server, mut candidates, leader) = settled_leader().await;
    let died = Instant::now();
    candidates[leader].elector.take().unwrap().abandon().await;
    let next = one_leader(&mut candidates, "a successor").await;
    assert_ne!(next, leader);
    let took = candidates[next].became()[0] - died;
    eprintln!("crash failover (in process): {took:?}");
    assert!(
        took <= crash_failover_bound(),
        "{took:?} > {:?}",
        crash_failover_bound()
    );
    assert!(
        took >= crash_failover_floor(),
        "taken after {took:?}, before the Lease expired"
    );
    let dead = &candidates[leader].log;
    assert!(dead.iter().any(|e| matches!(
        e,
        LeaderEvent::SteppedDown {
            reason: StepDownReason::Abandoned,
            ..
        }
    )));
    assert_taken_over(&server, &mut candidates, next);
    stop_all(&mut candidates).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn le_11_a_graceful_stop_hands_over_within_a_retry() {
    let (server, mut candidates, leader) = settled_leader().await;
    let outcome = candidates[leader].elector.take().unwrap().stop().await;
    let released = Instant::now();
    assert_eq!(outcome.unwrap(), StopOutcome::Released);
    let next = one_leader(&mut candidates, "a successor").await;
    let took = candidates[next].became()[0].saturating_duration_since(released);
    eprintln!("release handover (in process): {took:?}");
    assert!(
        took <= release_handover_bound(),
        "{took:?} > {:?}",
        release_handover_bound()
    );
    assert_taken_over(&server, &mut candidates, next);
    // The followers hold nothing; the successor releases last.
    let order = (0..candidates.len()).filter(|i| *i != next).chain([next]);
    for i in order.collect::<Vec<_>>() {
        if let Some(elector) = candidates[i].elector.take() {
            let expected = if i == next {
                StopOutcome::Released
            } else {
                StopOutcome::NotHolding
            };
            assert_eq!(elector.stop().await.unwrap(), expected);
        }
    }
}

/// The environment that makes [`le_replica_process`] a replica.
const REPLICA_ENV: &str = "KINFORMER_LE_REPLICA";
const SERVER_ENV: &str = "KINFORMER_LE_SERVER";

/// A replica process of [`le7_three_processes_one_leader_through_sigkill_and_sigterm`]:
/// this test binary started again to run only this test. It prints `LE up`,
/// `LE down` and, after SIGTERM, `LE released` lines.
#[test]
#[ignore = "a replica process started by le7_three_processes_…; does nothing on its own"]
fn le_replica_process() {
    let (Ok(identity), Ok(url)) = (std::env::var(REPLICA_ENV), std::env::var(SERVER_ENV)) else {
        eprintln!("not started by le7_three_processes_…: nothing to do");
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let client = common::client_at(&url);
        let builder = LeaderElector::builder(Api::namespaced(client, "default"), LEASE)
            .identity(identity.clone())
            .timings(TIMINGS);
        let mut events = builder.events();
        let elector = builder.start().unwrap();
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        println!("LE started {identity}");
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok(LeaderEvent::BecameLeader { .. }) => println!("LE up {identity}"),
                    Ok(LeaderEvent::SteppedDown { .. }) => println!("LE down {identity}"),
                    Ok(LeaderEvent::NewLeader { .. }) => {}
                    Err(e) => panic!("events: {e}"),
                },
                _ = term.recv() => break,
            }
        }
        let outcome = elector.stop().await.unwrap();
        // Stepping down precedes the release, so `down` is printed here.
        while let Ok(event) = events.try_recv() {
            if matches!(event, LeaderEvent::SteppedDown { .. }) {
                println!("LE down {identity}");
            }
        }
        println!("LE released {identity} {outcome:?}");
    });
}

/// Replica processes, killed when the test ends however it ends.
struct Replicas {
    children: Vec<(String, Child)>,
    lines: mpsc::Receiver<(Instant, String, String)>,
}

impl Replicas {
    fn start(server: &ServerHandle, identities: &[&str]) -> Replicas {
        let (tx, lines) = mpsc::channel();
        let mut children = Vec::new();
        for identity in identities {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args(["le_replica_process", "--exact", "--ignored", "--nocapture"])
                .env(REPLICA_ENV, identity)
                .env(SERVER_ENV, server.url())
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("start a replica");
            let stdout = child.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(rest) = line.strip_prefix("LE ") {
                        let mut words = rest.split_whitespace();
                        let what = words.next().unwrap_or_default().to_owned();
                        let who = words.next().unwrap_or_default().to_owned();
                        if tx.send((Instant::now(), what, who)).is_err() {
                            return;
                        }
                    }
                }
            });
            children.push((identity.to_string(), child));
        }
        Replicas { children, lines }
    }

    /// The next line `what` (from `who`, if given), with when it was read.
    fn wait_for(
        &self,
        what: &str,
        who: Option<&str>,
        seen: &mut Vec<(Instant, String, String)>,
    ) -> (Instant, String) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `LE {what}` line; saw {seen:?}"));
            seen.push(line.clone());
            let (at, w, id) = line;
            if w == what && who.is_none_or(|who| who == id) {
                return (at, id);
            }
        }
    }

    fn child(&mut self, identity: &str) -> &mut Child {
        &mut self
            .children
            .iter_mut()
            .find(|(id, _)| id == identity)
            .unwrap()
            .1
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// LE-7 across processes, from the lines the replicas print: no `up` while
/// another replica is up (a killed one is down from its kill on).
fn assert_one_up_at_a_time(mut seen: Vec<(Instant, String, String)>, killed: &[(Instant, &str)]) {
    for (at, who) in killed {
        seen.push((*at, "killed".into(), who.to_string()));
    }
    seen.sort_by_key(|(at, _, _)| *at);
    let mut up: Option<String> = None;
    for (_, what, who) in seen {
        match what.as_str() {
            "up" => {
                assert!(up.is_none(), "{who} up while {up:?} is");
                up = Some(who);
            }
            "down" | "killed" if up.as_deref() == Some(who.as_str()) => up = None,
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn le_7_three_processes_one_leader_through_sigkill_and_sigterm() {
    let server = lease_server();
    let mut replicas = Replicas::start(&server, &["p1", "p2", "p3"]);
    let mut seen = Vec::new();
    let (_, first) = replicas.wait_for("up", None, &mut seen);
    // Let the others observe a few renews, then SIGKILL the leader.
    std::thread::sleep(TIMINGS.lease_duration / 2);
    replicas.child(&first).kill().unwrap();
    let killed = Instant::now();
    replicas.child(&first).wait().unwrap();
    let (at, second) = replicas.wait_for("up", None, &mut seen);
    assert_ne!(second, first);
    let took = at - killed;
    eprintln!("SIGKILL failover (processes): {took:?}");
    // Processes add their start-up and pipe latency to the in-process slack.
    assert!(took <= crash_failover_bound() + SLACK, "{took:?}");
    assert!(
        took >= crash_failover_floor(),
        "taken after {took:?}, before expiry"
    );
    // SIGTERM: the leader steps down, releases, and the third takes over.
    let pid = replicas.child(&second).id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (released, _) = replicas.wait_for("released", Some(&second), &mut seen);
    let (at, third) = replicas.wait_for("up", None, &mut seen);
    assert!(third != first && third != second);
    let took = at.saturating_duration_since(released);
    eprintln!("SIGTERM handover (processes): {took:?}");
    assert!(took <= release_handover_bound() + SLACK, "{took:?}");
    let status = replicas.child(&second).wait().unwrap();
    assert!(status.success(), "{status:?}");
    let spec = lease_spec(&server);
    assert_eq!(spec.holder_identity.as_deref(), Some(third.as_str()));
    assert_eq!(spec.lease_transitions, Some(2));
    // The released line came after the `down` it printed.
    assert!(
        seen.iter()
            .any(|(_, what, who)| what == "down" && *who == second)
    );
    assert_one_up_at_a_time(seen, &[(killed, first.as_str())]);
}
