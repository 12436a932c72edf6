//! Sharded controllers against the embedded API server (SH-1..SH-9,
//! CTL-10..CTL-12): replicas in one process, each with its own informer,
//! shard member and controller, through an abandon (a crash: 3 → 2), a
//! scale-up (2 → 4) and a graceful leave; and replica processes (this test
//! binary started again) through a SIGKILL and a scale-up. After each
//! change every key is reconciled by exactly one replica, its rendezvous
//! owner, and no key is ever reconciled by two at once. `shard_key` lands
//! dependents with their owner. Shard Lease timings are short (1 s, 0.6 s,
//! 0.2 s). Departed members' Leases are deleted (SH-9).

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
                // A delete's reconcile records its final state's, marked.
                let rv = match (&req.object, &req.last_known) {
                    (Some(o), _) => o.metadata.resource_version.clone(),
                    (None, Some(last)) => Some(format!(
                        "deleted:{}",
                        last.metadata.resource_version.clone().unwrap_or_default()
                    )),
                    (None, None) => None,
                };
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

/// Updates every ConfigMap named by [`names`]; answers key → the new resourceVersion.
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
    let moved: Vec<String> = names()
        .into_iter()
        .map(|n| key(&n))
        .filter(|k| owner(&["r0", "r1", "r2"].map(String::from), k) == Some("r2"))
        .collect();
    // Three of r2's keys are deleted before anyone took them: each delete
    // is reconciled by the key's new owner, with its final state (CTL-11:
    // the survivors remembered deletes of keys not theirs).
    let deleted: BTreeMap<String, String> = moved[..3]
        .iter()
        .map(|k| {
            let name = k.trim_start_matches("default/");
            let gone = server
                .delete("", "configmaps", Some("default"), name)
                .unwrap();
            let rv = gone["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned();
            (k.clone(), format!("deleted:{rv}"))
        })
        .collect();
    settled(&replicas, &["r0", "r1"]).await;
    each_change_reconciled_once(&calls, &deleted, &["r0", "r1"]).await;
    for k in deleted.keys() {
        create(&server, k.trim_start_matches("default/"), "v1");
    }
    let survivors = ["r0", "r1"].map(String::from);
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

    // SH-9: the Leases of the crashed r2 and of r0, which left, are deleted
    // by the live members once unchanged for the retention.
    let leases = || -> Vec<String> {
        let mut names: Vec<String> = server
            .list("coordination.k8s.io", "leases", Some("default"))
            .iter()
            .filter_map(|l| l["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    eventually(WAIT, "the departed members' Leases deleted", || {
        leases() == ["mirror-r1", "mirror-r3", "mirror-r4"]
    })
    .await;
    settled(&replicas, &["r1", "r3", "r4"]).await;

    for mut r in replicas {
        r.controller.stop(Duration::from_secs(5)).await;
        r.member.take().unwrap().stop().await.unwrap();
    }
}

/// `Controller::shard_key`: dependents shard by their owner's key, so every
/// object of a group lands on the replica that owns the group's key (its
/// rendezvous owner), whatever its own key's owner would be.
#[actix::test]
async fn sh_1_shard_key_lands_dependents_with_their_owner() {
    let server = server(10_000);
    let groups = ["g0", "g1", "g2", "g3", "g4", "g5"];
    let mut rvs = BTreeMap::new();
    for i in 0..KEYS {
        let name = format!("dep-{i:02}");
        let group = groups[i % groups.len()];
        let cm = server
            .create(
                "",
                "configmaps",
                Some("default"),
                serde_json::json!({
                    "metadata": {"name": name, "namespace": "default", "labels": {"group": group}},
                    "data": {"value": "v0"},
                }),
            )
            .unwrap();
        let rv = cm["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        rvs.insert(key(&name), (group, rv));
    }
    let calls = Arc::new(Calls::default());
    let ids = ["r0", "r1", "r2"];
    let mut members = Vec::new();
    let mut controllers = Vec::new();
    for id in ids {
        let leases = kube::Api::namespaced(common::client(&server), "default");
        let member = ShardMember::builder(leases, "grouped")
            .identity(id)
            .timings(TIMINGS)
            .start()
            .unwrap();
        let calls = calls.clone();
        let controller = Controller::new(informer(&server).start().unwrap())
            .name(id)
            .sharded(&member)
            .shard_key(|cm: &ConfigMap| {
                let group = cm.metadata.labels.as_ref()?.get("group")?;
                Some(kinformer::ObjectKey::new(Some("default"), group))
            })
            .start(move |req: Request<ConfigMap>| {
                let rv = req
                    .object
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.clone());
                drop(calls.begin(id, req.key.as_str(), rv));
                async { Ok::<_, String>(Action::Done) }
            })
            .await
            .unwrap();
        members.push(member);
        controllers.push(controller);
    }
    let live: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    // Every object reconciled at its state by the owner of its group's key.
    let group_owner = |group: &str| owner(&live, &key(group)).unwrap().to_owned();
    eventually(WAIT, "every object reconciled by its group's owner", || {
        let calls = calls.all();
        rvs.iter().all(|(k, (group, rv))| {
            calls.iter().any(|c| {
                &c.key == k && c.rv.as_ref() == Some(rv) && c.replica == group_owner(group)
            })
        })
    })
    .await;
    for c in calls.all() {
        let (group, _) = &rvs[&c.key];
        assert_eq!(c.replica, group_owner(group), "{} of {group}", c.key);
    }
    // The groups do not all land on one replica (else the test shows nothing).
    let owners: std::collections::BTreeSet<String> =
        groups.iter().map(|g| group_owner(g)).collect();
    assert!(owners.len() > 1, "{owners:?}");
    for c in controllers {
        c.stop(Duration::from_secs(5)).await;
    }
    for m in members {
        m.stop().await.unwrap();
    }
}

/// The environment that makes [`sh_replica_process`] a replica.
const REPLICA_ENV: &str = "KINFORMER_SH_REPLICA";
const SERVER_ENV: &str = "KINFORMER_SH_SERVER";

/// What a replica process last said of its shard: its members and the
/// names it owns.
#[derive(Debug, Default, Clone)]
struct Said {
    members: Vec<String>,
    owns: Vec<String>,
}

/// Replica processes of [`sh_5_three_processes_through_sigkill_and_a_scale_up`],
/// killed when dropped. A thread per process reads its lines into `calls`
/// (reconciles, their times mapped to this process's clock through the
/// system clock, which both share) and `said`.
struct Processes {
    children: Vec<(String, std::process::Child)>,
    calls: Arc<Calls>,
    said: Arc<std::sync::Mutex<BTreeMap<String, Said>>>,
    anchor: (Instant, u128),
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

impl Processes {
    fn new(calls: Arc<Calls>) -> Processes {
        Processes {
            children: Vec::new(),
            calls,
            said: Default::default(),
            anchor: (Instant::now(), unix_nanos()),
        }
    }

    fn start(&mut self, server: &ServerHandle, id: &str) {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["sh_replica_process", "--exact", "--ignored", "--nocapture"])
            .env(REPLICA_ENV, id)
            .env(SERVER_ENV, server.url())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start a replica");
        let stdout = child.stdout.take().unwrap();
        let (calls, said, anchor) = (self.calls.clone(), self.said.clone(), self.anchor);
        let name = id.to_owned();
        let id = id.to_owned();
        std::thread::spawn(move || {
            let at = |nanos: &str| {
                let nanos: u128 = nanos.parse().unwrap();
                let after = u64::try_from(nanos.saturating_sub(anchor.1)).unwrap();
                anchor.0 + Duration::from_nanos(after)
            };
            let mut open: BTreeMap<String, usize> = BTreeMap::new();
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let words: Vec<&str> = line.split(' ').collect();
                let list = |i: usize| -> Vec<String> {
                    words
                        .get(i)
                        .filter(|w| !w.is_empty())
                        .map_or(Vec::new(), |w| w.split(',').map(str::to_owned).collect())
                };
                match words.as_slice() {
                    ["SH", "begin", key, rv, nanos] => {
                        let i = calls.push(replicas::Call {
                            replica: id.clone(),
                            key: (*key).to_owned(),
                            rv: (*rv != "-").then(|| (*rv).to_owned()),
                            started: at(nanos),
                            ended: None,
                        });
                        open.insert((*key).to_owned(), i);
                    }
                    ["SH", "end", key, nanos] => {
                        if let Some(i) = open.remove(*key) {
                            calls.ended(i, at(nanos));
                        }
                    }
                    ["SH", "members", ..] => {
                        said.lock().unwrap().entry(id.clone()).or_default().members = list(2)
                    }
                    ["SH", "owns", ..] => {
                        said.lock().unwrap().entry(id.clone()).or_default().owns = list(2)
                    }
                    _ => {}
                }
            }
        });
        self.children.push((name, child));
    }

    /// SIGKILL: the replica's Lease stays until it expires.
    fn kill(&mut self, id: &str) {
        let i = self.children.iter().position(|(c, _)| c == id).unwrap();
        let (_, mut child) = self.children.remove(i);
        child.kill().unwrap();
        child.wait().unwrap();
        self.said.lock().unwrap().remove(id);
    }

    /// Waits until every process of `live` says exactly `live` are members
    /// and owns exactly the names whose rendezvous owner among them it is.
    async fn settled(&self, live: &[&str]) {
        let live: Vec<String> = live.iter().map(|s| s.to_string()).collect();
        eventually(WAIT, &format!("processes settled on {live:?}"), || {
            let said = self.said.lock().unwrap();
            live.iter().all(|id| {
                let Some(s) = said.get(id) else { return false };
                let mine: Vec<String> = names()
                    .into_iter()
                    .filter(|n| owner(&live, &key(n)) == Some(id.as_str()))
                    .collect();
                s.members == live && s.owns == mine
            })
        })
        .await;
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Three replica processes: after each change every key is reconciled by
/// exactly one process, its rendezvous owner among the live ones, and no
/// key is ever reconciled by two processes at once, through a SIGKILL
/// (3 → 2) and a scale-up (2 → 4).
#[actix::test]
async fn sh_5_three_processes_through_sigkill_and_a_scale_up() {
    let server = server(10_000);
    for n in names() {
        create(&server, &n, "v0");
    }
    let calls = Arc::new(Calls::default());
    let mut procs = Processes::new(calls.clone());
    for id in ["p0", "p1", "p2"] {
        procs.start(&server, id);
    }
    procs.settled(&["p0", "p1", "p2"]).await;
    let rvs = bump(&server, "v1");
    each_change_reconciled_once(&calls, &rvs, &["p0", "p1", "p2"]).await;

    procs.kill("p2");
    let died = Instant::now();
    procs.settled(&["p0", "p1"]).await;
    let rvs = bump(&server, "v2");
    each_change_reconciled_once(&calls, &rvs, &["p0", "p1"]).await;
    assert!(
        calls
            .all()
            .iter()
            .all(|c| c.replica != "p2" || c.started < died),
        "p2 reconciled after it was killed"
    );

    for id in ["p3", "p4"] {
        procs.start(&server, id);
    }
    let four = ["p0", "p1", "p3", "p4"];
    procs.settled(&four).await;
    let rvs = bump(&server, "v3");
    each_change_reconciled_once(&calls, &rvs, &four).await;
    calls.assert_never_concurrent();
}

/// A replica process of [`sh_5_three_processes_through_sigkill_and_a_scale_up`]:
/// this test binary started again to run only this test. It prints
/// `SH members …` and `SH owns …` whenever they change, and `SH begin KEY RV
/// NANOS` / `SH end KEY NANOS` around each reconcile (system-clock nanos).
#[test]
#[ignore = "a replica process started by sh_5_three_processes_…; does nothing on its own"]
fn sh_replica_process() {
    let (Ok(id), Ok(url)) = (std::env::var(REPLICA_ENV), std::env::var(SERVER_ENV)) else {
        eprintln!("not started by sh_5_three_processes_…: nothing to do");
        return;
    };
    actix::System::new().block_on(async move {
        let client = common::client_at(&url);
        let member =
            ShardMember::builder(kube::Api::namespaced(client.clone(), "default"), "mirror")
                .identity(&id)
                .timings(TIMINGS)
                .start()
                .unwrap();
        let informer =
            kinformer::Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default"))
                .start()
                .unwrap();
        let _controller = Controller::new(informer)
            .name(&id)
            .workers(4)
            .sharded(&member)
            .start(|req: Request<ConfigMap>| async move {
                /// Prints the end when dropped, so a cancelled reconcile ends too.
                struct End(String);
                impl Drop for End {
                    fn drop(&mut self) {
                        println!("SH end {} {}", self.0, unix_nanos());
                    }
                }
                let rv = req
                    .object
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.clone());
                println!(
                    "SH begin {} {} {}",
                    req.key,
                    rv.as_deref().unwrap_or("-"),
                    unix_nanos()
                );
                let _end = End(req.key.to_string());
                // Long enough for reconciles to overlap if two replicas held a key.
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, String>(Action::Done)
            })
            .await
            .unwrap();
        let mut members = member.members();
        let mut assignment = member.assignment();
        loop {
            let live = members.borrow_and_update().join(",");
            println!("SH members {live}");
            let owns: Vec<String> = {
                let a = assignment.borrow_and_update();
                names().into_iter().filter(|n| a.owns(&key(n))).collect()
            };
            println!("SH owns {}", owns.join(","));
            tokio::select! {
                _ = members.changed() => {}
                _ = assignment.changed() => {}
            }
        }
    });
}
