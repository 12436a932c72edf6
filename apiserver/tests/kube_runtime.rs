//! kube-runtime's `watcher()` converges to the server's state in list-watch and
//! streaming-list modes, across forced watch closes and a compaction that forces a 410.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_apiserver::{ChurnSpec, ServerHandle};
use kube::Api;
use kube_runtime::WatchStreamExt;
use kube_runtime::watcher::{self, Event};
use parking_lot::Mutex;

#[derive(Default)]
struct Mirror {
    objects: BTreeMap<String, String>,
    buffer: BTreeMap<String, String>,
    inits: u32,
    gone_errors: u32,
    other_errors: u32,
}

fn name_rv(cm: &ConfigMap) -> (String, String) {
    (
        cm.metadata.name.clone().unwrap_or_default(),
        cm.metadata.resource_version.clone().unwrap_or_default(),
    )
}

fn server_state(server: &ServerHandle) -> BTreeMap<String, String> {
    server
        .list("", "configmaps", Some("churn"))
        .into_iter()
        .map(|v| {
            (
                v["metadata"]["name"].as_str().unwrap().to_string(),
                v["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

fn spawn_mirror(server: &ServerHandle, config: watcher::Config) -> Arc<Mutex<Mirror>> {
    let api: Api<ConfigMap> = Api::namespaced(kube_client(server), "churn");
    let mirror = Arc::new(Mutex::new(Mirror::default()));
    let m = mirror.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            let mut m = m.lock();
            match item {
                Ok(Event::Init) => {
                    m.inits += 1;
                    m.buffer.clear();
                }
                Ok(Event::InitApply(cm)) => {
                    let (n, rv) = name_rv(&cm);
                    m.buffer.insert(n, rv);
                }
                Ok(Event::InitDone) => {
                    m.objects = std::mem::take(&mut m.buffer);
                }
                Ok(Event::Apply(cm)) => {
                    let (n, rv) = name_rv(&cm);
                    m.objects.insert(n, rv);
                }
                Ok(Event::Delete(cm)) => {
                    let (n, _) = name_rv(&cm);
                    m.objects.remove(&n);
                }
                Err(watcher::Error::WatchError(status)) if status.code == 410 => m.gone_errors += 1,
                Err(_) => m.other_errors += 1,
            }
        }
    });
    mirror
}

async fn converges(server: &ServerHandle, mirror: &Arc<Mutex<Mirror>>, what: &str) {
    eventually(Duration::from_secs(20), what, || {
        let expected = server_state(server);
        mirror.lock().objects == expected
    })
    .await;
}

async fn scenario(config: watcher::Config) {
    let server = start().await;
    server.create_namespace("churn").unwrap();
    for i in 0..30 {
        server
            .create(
                "",
                "configmaps",
                Some("churn"),
                cm(&format!("churn-{i:05}"), &[]),
            )
            .unwrap();
    }
    let mirror = spawn_mirror(&server, config);
    converges(&server, &mirror, "initial list").await;
    assert_eq!(mirror.lock().inits, 1);

    // churn with forced closes of every watch
    let churn = server.start_churn(ChurnSpec {
        namespace: "churn".into(),
        objects: 60,
        ops_per_sec: 3000.0,
        seed: 7,
        max_ops: Some(400),
        ..ChurnSpec::default()
    });
    for _ in 0..5 {
        let before = churn.stats().total();
        eventually(Duration::from_secs(10), "churn progress", || {
            churn.stats().total() > before + 30 || churn.is_finished()
        })
        .await;
        server.faults().close_all_watches();
    }
    eventually(Duration::from_secs(20), "churn done", || {
        churn.is_finished()
    })
    .await;
    let stats = churn.stop();
    assert_eq!(stats.total(), 400);
    assert!(
        stats.created > 0 && stats.updated > 0 && stats.deleted > 0,
        "{stats:?}"
    );
    converges(&server, &mirror, "state after churn and forced closes").await;
    // forced closes resume from the last RV: no relist needed
    assert_eq!(mirror.lock().inits, 1, "closes should not force a relist");

    // close each watch after a few events
    server.faults().close_watches_after(Some(3));
    let churn = server.start_churn(ChurnSpec {
        namespace: "churn".into(),
        objects: 60,
        ops_per_sec: 2000.0,
        seed: 8,
        max_ops: Some(100),
        ..ChurnSpec::default()
    });
    eventually(Duration::from_secs(20), "churn done", || {
        churn.is_finished()
    })
    .await;
    churn.stop();
    converges(&server, &mirror, "state after close-after-N").await;
    server.faults().close_watches_after(None);

    // compaction while the watcher is behind: its resume gets 410 and it relists
    server.faults().stall_watches(true);
    for i in 0..10 {
        server
            .create(
                "",
                "configmaps",
                Some("churn"),
                cm(&format!("late-{i}"), &[]),
            )
            .unwrap();
    }
    server.faults().compact();
    server.faults().close_all_watches();
    server.faults().stall_watches(false);
    converges(&server, &mirror, "state after compaction").await;
    let m = mirror.lock();
    assert!(m.gone_errors >= 1, "expected a 410 after compaction");
    assert!(m.inits >= 2, "expected a relist after the 410");
    assert_eq!(m.other_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_watch_mode_converges() {
    scenario(watcher::Config::default().page_size(7)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_mode_converges() {
    scenario(watcher::Config::default().streaming_lists()).await;
}
