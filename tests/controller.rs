//! Controller integration tests against the embedded API server (CTL-1..CTL-9).
//!
//! Timing assertions are lower bounds the queue guarantees (a key is never
//! handed out before its backoff ends), exact retry counts, or generous
//! upper bounds that only catch a missing backoff reset.

mod common;
#[path = "../examples/secret_mirror_controller/mirror.rs"]
mod mirror;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{client, create, eventually, informer, server};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kinformer::controller::{Action, Controller, ControllerHandle, Request};
use kinformer::controller::{ItemExponential, Priority};
use kinformer::{Backoff, Informer};
use kinformer_apiserver::{Failure, ServerHandle, Verb};
use tokio::sync::watch;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(20);

/// One reconcile as the reconcile function saw it.
#[derive(Debug, Clone)]
struct Call {
    key: String,
    rv: Option<String>,
    retries: u32,
    priority: Priority,
    started: Instant,
    ended: Option<Instant>,
}

/// Records every reconcile; counts reconciles of one key running at once.
#[derive(Default)]
struct Calls {
    calls: Mutex<Vec<Call>>,
    running: Mutex<HashMap<String, usize>>,
    overlapped: AtomicBool,
}

impl Calls {
    fn begin(&self, req: &Request<ConfigMap>) -> usize {
        let key = req.key.name().to_owned();
        let mut running = self.running.lock().unwrap();
        let n = running.entry(key.clone()).or_default();
        *n += 1;
        if *n > 1 {
            self.overlapped.store(true, Ordering::SeqCst);
        }
        let mut calls = self.calls.lock().unwrap();
        calls.push(Call {
            key,
            rv: req
                .object
                .as_ref()
                .and_then(|o| o.metadata.resource_version.clone()),
            retries: req.retries,
            priority: req.priority,
            started: Instant::now(),
            ended: None,
        });
        calls.len() - 1
    }

    fn end(&self, i: usize) {
        let mut calls = self.calls.lock().unwrap();
        calls[i].ended = Some(Instant::now());
        *self.running.lock().unwrap().get_mut(&calls[i].key).unwrap() -= 1;
    }

    fn of(&self, key: &str) -> Vec<Call> {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|c| c.key == key).cloned().collect()
    }

    fn count(&self, key: &str) -> usize {
        self.of(key).len()
    }
}

fn update(server: &ServerHandle, name: &str, value: &str) -> String {
    let mut cm = server.get("", "configmaps", Some("default"), name).unwrap();
    cm["data"]["value"] = value.into();
    let cm = server
        .update("", "configmaps", Some("default"), cm)
        .unwrap();
    cm["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn labelled_secret(name: &str, keys: &[&str]) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.into());
    secret.metadata.labels = Some(BTreeMap::from([(
        "kinformer.example/mirror".into(),
        "true".into(),
    )]));
    secret.data = Some(
        keys.iter()
            .map(|k| (k.to_string(), ByteString(b"s3cr3t".to_vec())))
            .collect(),
    );
    secret
}

/// The mirrors on the server: name → `keys`.
fn mirrors(server: &ServerHandle) -> BTreeMap<String, String> {
    server
        .list("", "configmaps", Some("default"))
        .into_iter()
        .filter(|cm| cm["metadata"]["labels"][mirror::MANAGED_BY.0] == mirror::MANAGED_BY.1)
        .map(|cm| {
            let name = cm["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let keys = cm["data"]["keys"].as_str().unwrap_or_default().to_owned();
            (name, keys)
        })
        .collect()
}

async fn mirrors_are(server: &ServerHandle, expected: &[(&str, &str)], what: &str) {
    let expected: BTreeMap<String, String> = expected
        .iter()
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect();
    eventually(WAIT, what, || mirrors(server) == expected).await;
}

#[actix::test]
async fn the_secret_mirror_converges_after_creates_updates_and_deletes() {
    let server = server(10_000);
    let client = client(&server);
    let controller = mirror::start(client.clone(), "default").await.unwrap();
    let secrets = kube::Api::<Secret>::namespaced(client, "default");
    let pp = kube::api::PostParams::default();
    secrets
        .create(&pp, &labelled_secret("db", &["user", "password"]))
        .await
        .unwrap();
    secrets
        .create(&pp, &labelled_secret("api", &["token"]))
        .await
        .unwrap();
    let mut plain = labelled_secret("plain", &["x"]);
    plain.metadata.labels = None;
    secrets.create(&pp, &plain).await.unwrap();
    mirrors_are(
        &server,
        &[("api-mirror", "token"), ("db-mirror", "password,user")],
        "mirrors created",
    )
    .await;
    let db = server
        .get("", "configmaps", Some("default"), "db-mirror")
        .unwrap();
    let owner = &db["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Secret"), Some(true))
    );
    assert!(
        !db.to_string().contains("czNjcjN0"),
        "no Secret value in the mirror"
    );

    let mut changed = secrets.get("db").await.unwrap();
    changed
        .data
        .get_or_insert_default()
        .insert("host".into(), ByteString(b"h".to_vec()));
    secrets.replace("db", &pp, &changed).await.unwrap();
    mirrors_are(
        &server,
        &[("api-mirror", "token"), ("db-mirror", "host,password,user")],
        "mirror updated",
    )
    .await;

    // Drift: a mirror edited or deleted by hand is put back (its change
    // reaches the owner through `owns`).
    let mut edited = server
        .get("", "configmaps", Some("default"), "api-mirror")
        .unwrap();
    edited["data"]["keys"] = "tampered".into();
    server
        .update("", "configmaps", Some("default"), edited)
        .unwrap();
    mirrors_are(
        &server,
        &[("api-mirror", "token"), ("db-mirror", "host,password,user")],
        "edit undone",
    )
    .await;
    server
        .delete("", "configmaps", Some("default"), "api-mirror")
        .unwrap();
    mirrors_are(
        &server,
        &[("api-mirror", "token"), ("db-mirror", "host,password,user")],
        "delete undone",
    )
    .await;

    // A Secret no longer labelled, and one deleted: their mirrors go.
    let mut unlabelled = secrets.get("api").await.unwrap();
    unlabelled.metadata.labels = None;
    secrets.replace("api", &pp, &unlabelled).await.unwrap();
    mirrors_are(
        &server,
        &[("db-mirror", "host,password,user")],
        "unlabelled secret's mirror deleted",
    )
    .await;
    secrets.delete("db", &Default::default()).await.unwrap();
    mirrors_are(&server, &[], "deleted secret's mirror deleted").await;

    let metrics = controller.metrics().await.unwrap();
    assert_eq!(metrics.reconcile.errors, 0, "{metrics:?}");
    assert!(metrics.reconcile.successes >= 6);
    assert_eq!(metrics.queue.name, "secret-mirror");
    assert!(metrics.queue.adds >= metrics.reconcile.reconciles);
    let report = controller.stop(Duration::from_secs(5)).await;
    assert!(report.cancelled.is_empty(), "{report:?}");
}

/// A ConfigMap controller whose reconcile is `f`, recorded in `calls`.
async fn configmap_controller<Fut>(
    server: &ServerHandle,
    calls: Arc<Calls>,
    configure: impl FnOnce(Controller<ConfigMap>) -> Controller<ConfigMap>,
    f: impl Fn(Request<ConfigMap>) -> Fut + Send + Sync + 'static,
) -> ControllerHandle<ConfigMap>
where
    Fut: std::future::Future<Output = Result<Action, String>> + Send + 'static,
{
    let primary = informer(server).start().unwrap();
    let f = Arc::new(f);
    configure(Controller::new(primary))
        .start(move |req: Request<ConfigMap>| {
            let calls = calls.clone();
            let f = f.clone();
            async move {
                let i = calls.begin(&req);
                let result = f(req).await;
                calls.end(i);
                result
            }
        })
        .await
        .unwrap()
}

/// A ConfigMap controller with `workers` whose reconcile of `gated` waits
/// until the returned sender opens the gate.
async fn gated_controller(
    server: &ServerHandle,
    calls: Arc<Calls>,
    workers: usize,
    gated: &'static str,
) -> (ControllerHandle<ConfigMap>, watch::Sender<bool>) {
    let (open, gate) = watch::channel(false);
    let c = configmap_controller(
        server,
        calls,
        |c| c.workers(workers),
        move |req| {
            let mut gate = gate.clone();
            async move {
                if req.key.name() == gated {
                    let _ = gate.wait_for(|open| *open).await;
                }
                Ok(Action::Done)
            }
        },
    )
    .await;
    (c, open)
}

#[actix::test]
async fn a_change_made_during_a_reconcile_is_reconciled_again_afterwards() {
    let server = server(10_000);
    let calls = Arc::new(Calls::default());
    let (c, open) = gated_controller(&server, calls.clone(), 4, "held").await;
    c.wait_for_sync(WAIT).await.unwrap();
    create(&server, "held", "v1");
    eventually(WAIT, "the first reconcile of held", || {
        calls.count("held") == 1
    })
    .await;
    let changed_rv = update(&server, "held", "v2");
    update(&server, "held", "v3");
    let last_rv = update(&server, "held", "v4");
    create(&server, "other", "x");
    eventually(WAIT, "other reconciled beside it", || {
        calls.count("other") == 1
    })
    .await;
    assert_eq!(
        calls.count("held"),
        1,
        "held is not reconciled twice at once"
    );
    open.send_replace(true);
    eventually(WAIT, "held reconciled again", || calls.count("held") >= 2).await;
    let held = calls.of("held");
    let first_end = held[0].ended.expect("the first one ended");
    assert!(
        held[1].started >= first_end,
        "after the first, not beside it"
    );
    assert_eq!(
        held[1].rv.as_deref(),
        Some(last_rv.as_str()),
        "with the state of then"
    );
    assert_ne!(held[0].rv.as_deref(), Some(changed_rv.as_str()));
    // Three changes during the first reconcile make one more, not three.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls.count("held"), 2);
    assert!(!calls.overlapped.load(Ordering::SeqCst));
    c.stop(Duration::from_secs(5)).await;
}

#[actix::test]
async fn a_failing_key_backs_off_per_key_and_a_success_resets_it() {
    let server = server(10_000);
    create(&server, "good", "v");
    create(&server, "bad", "v");
    let calls = Arc::new(Calls::default());
    let failing = Arc::new(AtomicBool::new(true));
    let fail = failing.clone();
    let base = Duration::from_millis(50);
    let c = configmap_controller(
        &server,
        calls.clone(),
        |c| c.rate_limiter(ItemExponential::new(base, Duration::from_secs(10))),
        move |req| {
            let fail = req.key.name() == "bad" && fail.load(Ordering::SeqCst);
            async move {
                if fail {
                    Err("the bad key fails".to_owned())
                } else {
                    Ok(Action::Done)
                }
            }
        },
    )
    .await;
    eventually(WAIT, "5 attempts of bad", || calls.count("bad") >= 5).await;
    // A change during the fifth backoff (800 ms) does not cut it short (PQ-5).
    update(&server, "bad", "during-backoff");
    eventually(WAIT, "6 attempts of bad", || calls.count("bad") >= 6).await;
    failing.store(false, Ordering::SeqCst);
    eventually(WAIT, "a successful attempt", || calls.count("bad") >= 7).await;
    let bad = calls.of("bad");
    let retries: Vec<u32> = bad.iter().map(|c| c.retries).collect();
    assert_eq!(
        retries[..7],
        [0, 1, 2, 3, 4, 5, 6],
        "consecutive failures, per key"
    );
    for (i, pair) in bad[..7].windows(2).enumerate() {
        let gap = pair[1].started - pair[0].started;
        let backoff = base * 2u32.pow(i as u32);
        assert!(
            gap >= backoff,
            "attempt {}: waited {gap:?}, backoff {backoff:?}",
            i + 1
        );
    }
    let total = bad[6].started - bad[0].started;
    assert!(
        total < Duration::from_secs(15),
        "3.15 s of backoff took {total:?}"
    );
    assert_eq!(
        calls.count("good"),
        1,
        "the other key was reconciled once, at once"
    );
    let good = &calls.of("good")[0];
    assert_eq!(
        (good.retries, good.priority),
        (0, Priority::Low),
        "PQ-1: initial list"
    );

    // After the success, a failure starts over from the base delay.
    failing.store(true, Ordering::SeqCst);
    update(&server, "bad", "after-success");
    eventually(WAIT, "two attempts after the success", || {
        calls.count("bad") >= 9
    })
    .await;
    let bad = calls.of("bad");
    assert_eq!(
        (bad[7].retries, bad[8].retries),
        (0, 1),
        "failures forgotten"
    );
    let gap = bad[8].started - bad[7].started;
    assert!(
        gap >= base && gap < Duration::from_secs(6),
        "back to 50 ms, not 6.4 s: {gap:?}"
    );
    let m = c.reconcile_metrics();
    assert!(m.errors >= 8 && m.successes >= 2, "{m:?}");
    c.stop(Duration::from_secs(5)).await;
}

#[actix::test]
async fn a_panicking_or_hanging_reconcile_is_counted_retried_and_the_controller_goes_on() {
    let server = server(10_000);
    create(&server, "boom", "v");
    create(&server, "hang", "v");
    let calls = Arc::new(Calls::default());
    let c = configmap_controller(
        &server,
        calls.clone(),
        |c| {
            c.rate_limiter(ItemExponential::new(
                Duration::from_millis(10),
                Duration::from_secs(1),
            ))
            .reconcile_timeout(Duration::from_millis(200))
        },
        move |req| async move {
            match (req.key.name(), req.retries) {
                ("boom", 0 | 1) => panic!("reconcile of boom panics (test)"),
                ("hang", 0) => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(Action::Done)
                }
                _ => Ok(Action::Done),
            }
        },
    )
    .await;
    eventually(WAIT, "boom reconciled after two panics", || {
        calls.count("boom") >= 3
    })
    .await;
    eventually(WAIT, "hang retried after its timeout", || {
        calls.count("hang") >= 2
    })
    .await;
    create(&server, "later", "v");
    eventually(WAIT, "a later key is still reconciled", || {
        calls.count("later") == 1
    })
    .await;
    let boom: Vec<u32> = calls.of("boom").iter().map(|c| c.retries).collect();
    assert_eq!(boom[..3], [0, 1, 2]);
    assert_eq!(calls.of("hang")[1].retries, 1);
    let m = c.reconcile_metrics();
    assert_eq!((m.panics, m.timeouts), (2, 1), "{m:?}");
    assert_eq!(m.errors, 3);
    c.stop(Duration::from_secs(5)).await;
}

#[actix::test]
async fn no_reconcile_before_a_secondary_informer_synced() {
    let server = server(10_000);
    create(&server, "a", "v");
    let primary = informer(&server).start().unwrap();
    primary.wait_for_sync(WAIT).await.unwrap();
    // The secondary's first lists fail: it syncs only after some backoff.
    server.faults().fail_next(Verb::List, 3, Failure::Internal);
    let secondary = Informer::builder(kube::Api::<Secret>::namespaced(client(&server), "default"))
        .backoff(Backoff::new(
            Duration::from_millis(200),
            Duration::from_millis(200),
            Duration::from_secs(120),
        ))
        .start()
        .unwrap();
    let seen_synced = Arc::new(Mutex::new(Vec::new()));
    let (seen, probe) = (seen_synced.clone(), secondary.clone());
    let c = Controller::new(primary)
        .watches(secondary.clone(), |_: &Secret| Vec::new())
        .start(move |_req: Request<ConfigMap>| {
            seen.lock().unwrap().push(probe.has_synced());
            async { Ok::<_, String>(Action::Done) }
        })
        .await
        .unwrap();
    c.wait_for_sync(WAIT).await.unwrap();
    eventually(WAIT, "a reconcile", || {
        !seen_synced.lock().unwrap().is_empty()
    })
    .await;
    assert!(
        secondary.stats().failures >= 1,
        "the secondary's list did fail first"
    );
    assert!(
        seen_synced.lock().unwrap().iter().all(|synced| *synced),
        "CTL-1"
    );
    c.stop(Duration::from_secs(5)).await;
}

#[actix::test]
async fn graceful_stop_lets_reconciles_finish_and_reports_what_was_left() {
    let server = server(10_000);
    let calls = Arc::new(Calls::default());
    let (c, open) = gated_controller(&server, calls.clone(), 1, "slow").await;
    c.wait_for_sync(WAIT).await.unwrap();
    create(&server, "slow", "v");
    eventually(WAIT, "slow in progress", || calls.count("slow") == 1).await;
    create(&server, "a", "v");
    create(&server, "b", "v");
    let deadline = Instant::now() + WAIT;
    while c.metrics().await.unwrap().queue.depth != 2 {
        assert!(Instant::now() < deadline, "a and b queued behind slow");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopping = actix::spawn(c.stop(Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "the stop waits for the reconcile in progress"
    );
    open.send_replace(true);
    let report = stopping.await.unwrap();
    assert_eq!(report.left, ["default/a".into(), "default/b".into()]);
    assert!(report.cancelled.is_empty());
    assert!(calls.of("slow")[0].ended.is_some(), "slow finished");
    assert_eq!(
        calls.count("a") + calls.count("b"),
        0,
        "nothing taken after the stop"
    );

    // Past the deadline, what still runs is cancelled and reported.
    let calls = Arc::new(Calls::default());
    let c = configmap_controller(
        &server,
        calls.clone(),
        |c| c,
        |_| async {
            std::future::pending::<()>().await;
            Ok(Action::Done)
        },
    )
    .await;
    eventually(WAIT, "reconciles of the initial list", || {
        calls.count("slow") == 1
    })
    .await;
    let started = Instant::now();
    let report = c.stop(Duration::from_millis(300)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        report.cancelled.contains(&"default/slow".into()),
        "{report:?}"
    );
}

/// The controller under `#[tokio::main]`: informers and queue in a
/// `LocalSet`, workers on the multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_under_a_multi_threaded_tokio_runtime_with_a_local_set() {
    let server = server(10_000);
    create(&server, "a", "v");
    let reconciled = Arc::new(AtomicUsize::new(0));
    let count = reconciled.clone();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            let primary = informer(&server).start().unwrap();
            let c = Controller::new(primary)
                .start(move |req: Request<ConfigMap>| {
                    let count = count.clone();
                    async move {
                        assert_eq!(req.priority, Priority::Low, "an initial-list key");
                        count.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, String>(Action::Done)
                    }
                })
                .await
                .unwrap();
            eventually(WAIT, "a reconciled", || {
                reconciled.load(Ordering::SeqCst) == 1
            })
            .await;
            let report = c.stop(Duration::from_secs(5)).await;
            assert!(report.left.is_empty() && report.cancelled.is_empty());
        })
        .await;
}

/// Many workers share the queue's mailbox: none stalls on a full mailbox
/// (each request goes through a fresh sender), so all of them run at once.
#[actix::test]
async fn many_workers_reconcile_every_key_without_stalling() {
    let server = server(10_000);
    server.seed_configmaps("default", 500).unwrap();
    let calls = Arc::new(Calls::default());
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (now.clone(), most.clone());
    let c = configmap_controller(
        &server,
        calls.clone(),
        |c| c.workers(64),
        move |_| {
            let (n, m) = (n.clone(), m.clone());
            async move {
                m.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok(Action::Done)
            }
        },
    )
    .await;
    eventually(WAIT, "500 keys reconciled", || {
        calls.calls.lock().unwrap().len() == 500
    })
    .await;
    assert_eq!(most.load(Ordering::SeqCst), 64, "every worker took keys");
    assert!(!calls.overlapped.load(Ordering::SeqCst));
    let started = Instant::now();
    let report = c.stop(Duration::from_secs(5)).await;
    assert!(
        report.left.is_empty() && report.cancelled.is_empty(),
        "{report:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "every worker ended"
    );
}
