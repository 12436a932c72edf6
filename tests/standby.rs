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
            async move {
                let _running = calls.begin(identity, req.key.name(), None);
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
    // lease duration and a retry and reconciles every key once.
    let died = Instant::now();
    replicas[leader].elector.take().unwrap().abandon().await;
    eventually(WAIT, "the standby leads", || {
        replicas[standby].controller.is_leader() == Some(true)
    })
    .await;
    eventually(WAIT, "the new leader reconciled every key once", || {
        calls.by(sid, died) == once_each(&keys)
    })
    .await;
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
