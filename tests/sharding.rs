//! Sharded controllers against the embedded API server (SH-1..SH-8,
//! CTL-10..CTL-12): replicas in one process, each with its own informer,
//! shard member and controller, through an abandon (a crash: 3 → 2) and a
//! scale-up (2 → 4). After each change every key is reconciled by exactly
//! one replica, its rendezvous owner, and no key is ever reconciled by two
//! at once. Shard Lease timings are short (1 s, 0.6 s, 0.2 s).

mod common;
#[path = "support/replicas.rs"]
mod replicas;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{create, eventually, informer, server};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::controller::{Action, Controller, ControllerHandle, Request};
use kinformer::shard::ShardMember;
use kinformer::shard::rendezvous::owner;
use kinformer_apiserver::ServerHandle;
use replicas::{Calls, TIMINGS, WAIT};
use tokio::time::Instant;

const KEYS: usize = 40;

struct Replica {
    id: String,
    member: Option<ShardMember>,
    controller: ControllerHandle<ConfigMap>,
}

async fn replica(server: &ServerHandle, id: &str, calls: Arc<Calls>) -> Replica {
    let leases = kube::Api::namespaced(common::client(server), "default");
    let member = ShardMember::builder(leases, "mirror")
        .identity(id)
        .timings(TIMINGS)
        .start()
        .unwrap();
    let replica = id.to_owned();
    let controller = Controller::new(informer(server).start().unwrap())
        .name(id)
        .workers(4)
        .sharded(&member)
        .start(move |req: Request<ConfigMap>| {
            let calls = calls.clone();
            let replica = replica.clone();
            async move {
                let rv = req
                    .object
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.clone());
                let _running = calls.begin(&replica, req.key.as_str(), rv);
                // Long enough for reconciles to overlap if two replicas held a key.
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, String>(Action::Done)
            }
        })
        .await
        .unwrap();
    Replica {
        id: id.to_owned(),
        member: Some(member),
        controller,
    }
}

fn names() -> Vec<String> {
    (0..KEYS).map(|i| format!("cm-{i:02}")).collect()
}

fn key(name: &str) -> String {
    format!("default/{name}")
}

/// Waits until every replica counts exactly `live` as members and every key
/// is owned by its rendezvous owner among them, and by no other replica.
async fn settled(replicas: &[Replica], live: &[&str]) {
    let live: Vec<String> = live.iter().map(|s| s.to_string()).collect();
    eventually(WAIT, &format!("assignments settled on {live:?}"), || {
        replicas.iter().all(|r| {
            let Some(m) = &r.member else { return true };
            *m.members().borrow() == live
                && names().iter().all(|n| {
                    let k = key(n);
                    m.assignment().borrow().owns(&k) == (owner(&live, &k) == Some(r.id.as_str()))
                })
        })
    })
    .await;
}

/// Updates every ConfigMap; answers name → the new resourceVersion.
fn bump(server: &ServerHandle, value: &str) -> BTreeMap<String, String> {
    names()
        .into_iter()
        .map(|n| {
            let mut cm = server.get("", "configmaps", Some("default"), &n).unwrap();
            cm["data"]["value"] = value.into();
            let cm = server
                .update("", "configmaps", Some("default"), cm)
                .unwrap();
            let rv = cm["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned();
            (key(&n), rv)
        })
        .collect()
}

/// After a bump: each key's new state is reconciled by exactly one replica,
/// its owner among `live`.
async fn each_change_reconciled_once(calls: &Calls, rvs: &BTreeMap<String, String>, live: &[&str]) {
    let live: Vec<String> = live.iter().map(|s| s.to_string()).collect();
    let by_key = || {
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in calls.all() {
            if rvs.get(&c.key) == c.rv.as_ref() {
                seen.entry(c.key.clone())
                    .or_default()
                    .push(c.replica.clone());
            }
        }
        seen
    };
    eventually(WAIT, "every change reconciled", || {
        by_key().len() == rvs.len()
    })
    .await;
    // Give a second reconcile (by another replica) time to show up.
    tokio::time::sleep(TIMINGS.retry_period).await;
    for (k, mut replicas) in by_key() {
        // The same replica twice is allowed: keys gained are queued again
        // (CTL-12) and a change may be reconciled from both.
        replicas.dedup();
        assert_eq!(replicas.len(), 1, "{k} reconciled by {replicas:?}");
        assert_eq!(Some(replicas[0].as_str()), owner(&live, &k), "{k}");
    }
}

#[actix::test]
async fn sh_5_every_key_reconciled_by_exactly_one_replica_through_a_kill_and_a_scale_up() {
    let server = server(10_000);
    for n in names() {
        create(&server, &n, "v0");
    }
    let calls = Arc::new(Calls::default());
    let mut replicas = Vec::new();
    for id in ["r0", "r1", "r2"] {
        replicas.push(replica(&server, id, calls.clone()).await);
    }
    settled(&replicas, &["r0", "r1", "r2"]).await;
    let rvs = bump(&server, "v1");
    each_change_reconciled_once(&calls, &rvs, &["r0", "r1", "r2"]).await;
    calls.assert_never_concurrent();

    // r2 dies without leaving (its Lease stays until it expires): its keys
    // are picked up by the others and reconciled once each.
    let dead = replicas.remove(2);
    let died = Instant::now();
    dead.member.unwrap().abandon().await;
    settled(&replicas, &["r0", "r1"]).await;
    let survivors = ["r0", "r1"].map(String::from);
    let moved: Vec<String> = names()
        .into_iter()
        .map(|n| key(&n))
        .filter(|k| owner(&["r0", "r1", "r2"].map(String::from), k) == Some("r2"))
        .collect();
    eventually(WAIT, "r2's keys reconciled by their new owners", || {
        moved.iter().all(|k| {
            let new = owner(&survivors, k).unwrap();
            calls.by(new, died).contains_key(k)
        })
    })
    .await;
    let first = ["r0", "r1"]
        .iter()
        .filter_map(|r| {
            calls
                .all()
                .iter()
                .filter(|c| c.replica == *r && c.started >= died && moved.contains(&c.key))
                .map(|c| c.started)
                .min()
        })
        .min()
        .unwrap();
    let bound = TIMINGS.lease_duration + 3 * TIMINGS.retry_period + Duration::from_millis(500);
    eprintln!(
        "kill to the first reconcile of a dead replica's key: {:?}",
        first - died
    );
    assert!(first - died <= bound, "{:?} > {bound:?}", first - died);
    let rvs = bump(&server, "v2");
    each_change_reconciled_once(&calls, &rvs, &["r0", "r1"]).await;
    // The dead replica's controller took nothing after its member stopped.
    assert!(
        calls
            .all()
            .iter()
            .all(|c| c.replica != "r2" || c.started < died),
        "r2 reconciled after it stopped"
    );
    dead.controller.stop(Duration::from_secs(5)).await;

    // Scale 2 → 4: keys move to the new replicas only after the old owners
    // gave them up.
    for id in ["r3", "r4"] {
        replicas.push(replica(&server, id, calls.clone()).await);
    }
    let four = ["r0", "r1", "r3", "r4"];
    settled(&replicas, &four).await;
    let rvs = bump(&server, "v3");
    each_change_reconciled_once(&calls, &rvs, &four).await;
    calls.assert_never_concurrent();

    // A graceful leave: r0 releases its Lease, the others take its keys
    // without waiting for an expiry.
    let leaving = replicas.remove(0);
    leaving.controller.stop(Duration::from_secs(5)).await;
    let left = Instant::now();
    leaving.member.unwrap().stop().await.unwrap();
    settled(&replicas, &["r1", "r3", "r4"]).await;
    assert!(
        left.elapsed() < TIMINGS.lease_duration + TIMINGS.retry_period,
        "{:?}",
        left.elapsed()
    );
    let rvs = bump(&server, "v4");
    each_change_reconciled_once(&calls, &rvs, &["r1", "r3", "r4"]).await;
    calls.assert_never_concurrent();

    for mut r in replicas {
        r.controller.stop(Duration::from_secs(5)).await;
        r.member.take().unwrap().stop().await.unwrap();
    }
}
