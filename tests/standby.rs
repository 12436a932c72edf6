//! Controllers under a leader elector, warm standby (CTL-10..CTL-12),
//! against the embedded API server: two replicas in one process, each with
//! its own informer, elector and controller. Lease timings are short
//! (lease 1 s, renew deadline 0.6 s, retry 0.2 s); bounds follow LE-11.

mod common;
#[path = "support/replicas.rs"]
mod replicas;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{create, eventually, informer, server};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::Informer;
use kinformer::controller::{Action, Controller, ControllerHandle, Request};
use kinformer::leader::{LeaderElector, LeaderEvent};
use kinformer_apiserver::ServerHandle;
use replicas::{Calls, TIMINGS, WAIT};
use tokio::time::Instant;

/// What scheduling and requests to the in-process server may add to a bound.
const SLACK: Duration = Duration::from_millis(500);

/// One replica: an informer, an elector, and a controller run under it.
struct Replica {
    identity: &'static str,
    elector: Option<LeaderElector>,
    controller: ControllerHandle<ConfigMap>,
    informer: Informer<ConfigMap>,
}

/// A replica's reconcile of the key `hold` names for it runs until cancelled.
type Hold = Arc<Mutex<Option<(&'static str, String)>>>;

async fn replica(
    server: &ServerHandle,
    identity: &'static str,
    calls: Arc<Calls>,
    hold: Hold,
) -> Replica {
    let leases = kube::Api::namespaced(common::client(server), "default");
    let elector = LeaderElector::builder(leases, "standby")
        .identity(identity)
        .timings(TIMINGS)
        .start()
        .unwrap();
    let primary = informer(server).start().unwrap();
    let controller = Controller::new(primary.clone())
        .name(identity)
        .workers(4)
        .leader_elected(&elector)
        .start(move |req: Request<ConfigMap>| {
            let calls = calls.clone();
            let held = *hold.lock().unwrap() == Some((identity, req.key.name().to_owned()));
            // A delete's reconcile records the final state's resourceVersion.
            let deleted = req.object.is_none().then(|| {
                let rv = req
                    .last_known
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.clone());
                format!("deleted:{}", rv.unwrap_or_default())
            });
            async move {
                let _running = calls.begin(identity, req.key.name(), deleted);
                if held {
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(Action::Done)
            }
        })
        .await
        .unwrap();
    Replica {
        identity,
        elector: Some(elector),
        controller,
        informer: primary,
    }
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("cm-{i:02}")).collect()
}

fn once_each(keys: &[String]) -> BTreeMap<String, usize> {
    keys.iter().map(|k| (k.clone(), 1)).collect()
}

#[actix::test]
async fn ctl_10_only_the_leader_reconciles_and_a_standby_takes_over_every_key_once() {
    let server = server(10_000);
    let mut keys = names(20);
    for k in &keys {
        create(&server, k, "v1");
    }
    let calls = Arc::new(Calls::default());
    let hold = Arc::new(Mutex::new(None));
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        replicas.push(replica(&server, id, calls.clone(), hold.clone()).await);
    }
    for r in &replicas {
        r.controller.wait_for_sync(WAIT).await.unwrap();
    }
    let started = Instant::now() - Duration::from_secs(60);
    eventually(WAIT, "one leader", || {
        replicas
            .iter()
            .filter(|r| r.controller.is_leader() == Some(true))
            .count()
            == 1
    })
    .await;
    let leader = replicas
        .iter()
        .position(|r| r.controller.is_leader() == Some(true))
        .unwrap();
    let standby = 1 - leader;
    let (lid, sid) = (replicas[leader].identity, replicas[standby].identity);
    eventually(WAIT, "the leader reconciled every key", || {
        calls.by(lid, started) == once_each(&keys)
    })
    .await;

    // A change while a leads: reconciled by the leader only; the standby's
    // cache follows it (warm).
    *hold.lock().unwrap() = Some((lid, "held".into()));
    create(&server, "held", "v1");
    keys.push("held".into());
    keys.sort();
    eventually(WAIT, "the leader started on held", || {
        calls.by(lid, started).get("held") == Some(&1)
    })
    .await;
    eventually(WAIT, "the standby's cache has held", || {
        replicas[standby]
            .informer
            .store()
            .snapshot()
            .get("default/held")
            .is_some()
    })
    .await;
    assert_eq!(
        replicas[standby].controller.reconcile_metrics().reconciles,
        0
    );
    assert!(calls.by(sid, started).is_empty(), "the standby reconciled");
    let mut events = replicas[standby].controller.leader_events().unwrap();

    // The leader dies without releasing (as a crash would): its reconcile of
    // `held` is cancelled when it steps down, the standby takes over within a
    // lease duration and a retry and reconciles every key once. A key deleted
    // meanwhile, while nobody leads, is reconciled by the new leader as a
    // delete with its final state (CTL-11: the standby remembered it).
    let died = Instant::now();
    replicas[leader].elector.take().unwrap().abandon().await;
    let gone = server
        .delete("", "configmaps", Some("default"), "cm-00")
        .unwrap();
    let gone_rv = gone["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(WAIT, "the standby leads", || {
        replicas[standby].controller.is_leader() == Some(true)
    })
    .await;
    eventually(WAIT, "the new leader reconciled every key once", || {
        calls.by(sid, died) == once_each(&keys)
    })
    .await;
    let deletes: Vec<_> = calls
        .all()
        .into_iter()
        .filter(|c| c.replica == sid && c.started >= died && c.key == "cm-00")
        .map(|c| c.rv)
        .collect();
    assert_eq!(deletes, [Some(format!("deleted:{gone_rv}"))]);
    let first = calls.first_by(sid, died).unwrap();
    let bound = TIMINGS.lease_duration + TIMINGS.max_retry_wait() + SLACK;
    eprintln!(
        "kill to first reconcile by the new leader: {:?}",
        first - died
    );
    assert!(first - died <= bound, "{:?} > {bound:?}", first - died);
    let old = replicas[leader].controller.reconcile_metrics();
    assert_eq!(old.cancelled_out_of_scope, 1, "{old:?}");
    assert!(calls.all().iter().all(|c| c.ended.is_some()));
    calls.assert_never_concurrent();
    let mut became = false;
    while let Ok(event) = events.try_recv() {
        became |= matches!(event, LeaderEvent::BecameLeader { .. });
    }
    assert!(became, "the new leader's BecameLeader event");

    // Changes now go to the new leader only.
    let since = Instant::now();
    create(&server, "later", "v1");
    eventually(WAIT, "the new leader reconciled later", || {
        calls.by(sid, since).get("later") == Some(&1)
    })
    .await;
    assert!(calls.by(lid, since).is_empty(), "the old leader reconciled");
    calls.assert_never_concurrent();

    for mut r in replicas {
        if let Some(e) = r.elector.take() {
            e.stop().await.unwrap();
        }
        let report = r.controller.stop(Duration::from_secs(5)).await;
        assert!(report.cancelled.is_empty(), "{report:?}");
    }
}

#[actix::test]
async fn ctl_11_a_graceful_stop_of_the_leader_hands_over_within_a_retry() {
    let server = server(10_000);
    let keys = names(5);
    for k in &keys {
        create(&server, k, "v1");
    }
    let calls = Arc::new(Calls::default());
    let hold = Arc::new(Mutex::new(None));
    let mut a = replica(&server, "a", calls.clone(), hold.clone()).await;
    eventually(WAIT, "a leads", || a.controller.is_leader() == Some(true)).await;
    let b = replica(&server, "b", calls.clone(), hold).await;
    b.controller.wait_for_sync(WAIT).await.unwrap();
    let start = Instant::now() - Duration::from_secs(60);
    eventually(WAIT, "a reconciled every key", || {
        calls.by("a", start) == once_each(&keys)
    })
    .await;
    let report = a.controller.stop(Duration::from_secs(5)).await;
    assert!(report.cancelled.is_empty());
    let released = Instant::now();
    a.elector.take().unwrap().stop().await.unwrap();
    eventually(WAIT, "b reconciled every key once", || {
        calls.by("b", released) == once_each(&keys)
    })
    .await;
    let first = calls.first_by("b", released).unwrap();
    let bound = TIMINGS.max_retry_wait() + SLACK;
    assert!(
        first - released <= bound,
        "{:?} > {bound:?}",
        first - released
    );
    calls.assert_never_concurrent();
    let mut b = b;
    b.elector.take().unwrap().stop().await.unwrap();
    b.controller.stop(Duration::from_secs(5)).await;
}

/// A leader that loses its lease while its controller is stopping (a
/// partition during a rolling update, or the elector stopped alongside)
/// cancels the reconciles still running at once, not at the stop's
/// deadline: a successor may lead within a retry (CTL-11, CTL-5).
#[actix::test]
async fn ctl_11_leadership_lost_during_a_stop_cancels_the_running_reconciles() {
    let server = server(10_000);
    let calls = Arc::new(Calls::default());
    let hold = Arc::new(Mutex::new(Some(("a", "held".to_owned()))));
    let mut a = replica(&server, "a", calls.clone(), hold).await;
    eventually(WAIT, "a leads", || a.controller.is_leader() == Some(true)).await;
    let since = Instant::now() - Duration::from_secs(60);
    create(&server, "held", "v1");
    eventually(WAIT, "a started on held", || {
        calls.by("a", since).get("held") == Some(&1)
    })
    .await;
    let elector = a.elector.take().unwrap();
    let deadline = Duration::from_secs(30);
    let t0 = Instant::now();
    let (report, ()) = tokio::join!(a.controller.stop(deadline), async {
        // The stop is under way (it does not return while `held` runs).
        tokio::time::sleep(Duration::from_millis(100)).await;
        elector.abandon().await;
    });
    let took = t0.elapsed();
    assert!(
        report.cancelled.is_empty(),
        "held ran until the stop's deadline: {report:?}"
    );
    assert!(took < deadline / 3, "the stop took {took:?}");
    assert!(calls.all().iter().all(|c| c.ended.is_some()));
    a.informer.stop().await;
}

/// Failover time at 10k objects, warm standby (the standby's informer
/// synced before the kill) against cold (it starts its informer once it
/// leads). Figures in BENCHMARKS.md ("Failover: warm and cold standby");
/// run with `cargo test --release -p kinformer --test standby --
/// --ignored failover_time --nocapture`.
#[actix::test]
#[ignore = "a measurement (10k objects), not a check; see BENCHMARKS.md"]
async fn failover_time_warm_and_cold_standby_at_10k_objects() {
    const OBJECTS: usize = 10_000;
    let server = server(100);
    // 1 KiB of data each, about a small real ConfigMap.
    let value = "x".repeat(1024);
    for i in 0..OBJECTS {
        create(&server, &format!("cm-{i:05}"), &value);
    }
    for round in 0..3 {
        for warm in [true, false] {
            let f = failover(&server, warm, OBJECTS, round).await;
            eprintln!(
                "{} standby, round {round}: kill → leading {:?}; leading → first reconcile {:?}, \
                 → all {OBJECTS} reconciled {:?}",
                if warm { "warm" } else { "cold" },
                f.leading,
                f.first,
                f.all
            );
        }
    }
}

/// One failover: a leader (reconciling), a standby that is warm (its
/// controller started and synced) or cold (it starts its informer and
/// controller once it leads); the leader's elector is abandoned, as a crash.
/// Answers kill → the standby leads, and from then to its first reconcile
/// and to every object reconciled.
async fn failover(server: &ServerHandle, warm: bool, objects: usize, round: usize) -> Failover {
    let lease = format!("failover-{round}-{warm}");
    let leases = || kube::Api::namespaced(common::client(server), "default");
    let elector = |id: &str| {
        LeaderElector::builder(leases(), lease.clone())
            .identity(id)
            .timings(TIMINGS)
            .start()
            .unwrap()
    };
    let noop = |_: Request<ConfigMap>| async { Ok::<_, String>(Action::Done) };
    let leader = elector("leader");
    eventually(WAIT, "the leader leads", || leader.is_leader()).await;
    let old = Controller::new(informer(server).start().unwrap())
        .leader_elected(&leader)
        .start(noop)
        .await
        .unwrap();
    let standby = elector("standby");
    let calls = Arc::new(Calls::default());
    let recorded = |calls: Arc<Calls>| {
        move |req: Request<ConfigMap>| {
            let calls = calls.clone();
            async move {
                drop(calls.begin("standby", req.key.name(), None));
                Ok::<_, String>(Action::Done)
            }
        }
    };
    let mut new = None;
    if warm {
        let c = Controller::new(informer(server).start().unwrap())
            .leader_elected(&standby)
            .start(recorded(calls.clone()))
            .await
            .unwrap();
        c.wait_for_sync(Duration::from_secs(120)).await.unwrap();
        new = Some(c);
    }
    old.wait_for_sync(Duration::from_secs(120)).await.unwrap();
    eventually(
        Duration::from_secs(120),
        "the leader reconciled everything",
        || old.reconcile_metrics().reconciles >= objects as u64,
    )
    .await;
    let mut events = standby.events();
    let killed = Instant::now();
    leader.abandon().await;
    if !warm {
        let mut leading = standby.leadership();
        leading.wait_for(|l| *l).await.unwrap();
        new = Some(
            Controller::new(informer(server).start().unwrap())
                .leader_elected(&standby)
                .start(recorded(calls.clone()))
                .await
                .unwrap(),
        );
    }
    eventually(
        Duration::from_secs(120),
        "the new leader reconciled everything",
        || calls.by("standby", killed).len() >= objects,
    )
    .await;
    let mut leading = None;
    while let Ok(event) = events.try_recv() {
        if let LeaderEvent::BecameLeader { at } = event {
            leading.get_or_insert(Instant::from_std(at));
        }
    }
    let leading = leading.expect("the standby's BecameLeader");
    let first = calls.first_by("standby", killed).unwrap() - leading;
    let all = calls.all().iter().map(|c| c.started).max().unwrap() - leading;
    old.stop(Duration::from_secs(5)).await;
    new.unwrap().stop(Duration::from_secs(5)).await;
    standby.stop().await.unwrap();
    Failover {
        leading: leading - killed,
        first,
        all,
    }
}

/// One failover's times.
struct Failover {
    /// From the kill until the standby led (the Lease's expiry, LE-11).
    leading: Duration,
    /// From then until its first reconcile.
    first: Duration,
    /// From then until its last reconcile of the takeover.
    all: Duration,
}
