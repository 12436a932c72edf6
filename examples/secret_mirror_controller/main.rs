//! A controller that does real work: a ConfigMap `<name>-mirror` per Secret
//! labelled `kinformer.example/mirror=true`, owner-referenced, kept in sync,
//! deleted with it (see `mirror.rs`; Secret values are never copied or logged).
//!
//! By default against the embedded API server: it creates Secrets, changes
//! one, breaks a mirror by hand, deletes a Secret, shows the controller
//! converge after each step, then stops gracefully and prints its metrics.
//!
//! ```text
//! cargo run --example secret_mirror_controller
//! cargo run --example secret_mirror_controller -- --kubeconfig ~/.kube/config [--context NAME] [--namespace NS]
//! ```
//!
//! With a kubeconfig it runs against that cluster (in `default` unless
//! `--namespace`) until Ctrl-C; label a Secret to see its mirror appear:
//! `kubectl label secret my-secret kinformer.example/mirror=true`. It needs
//! `list`/`watch` on Secrets and ConfigMaps and `patch`/`delete` on ConfigMaps.

mod mirror;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kinformer::controller::ControllerHandle;
use kinformer_apiserver::{ApiServer, ServerConfig};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};

/// The command line: `--kubeconfig PATH`, `--context NAME`, `--namespace NS`.
#[derive(Default)]
struct Args {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    namespace: Option<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--kubeconfig" => args.kubeconfig = Some(value()?.into()),
            "--context" => args.context = Some(value()?),
            "--namespace" | "-n" => args.namespace = Some(value()?),
            other => {
                anyhow::bail!("unknown argument {other:?} (--kubeconfig, --context, --namespace)")
            }
        }
    }
    Ok(args)
}

#[actix::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    match &args.kubeconfig {
        None => demo().await,
        Some(path) => {
            let options = KubeConfigOptions {
                context: args.context.clone(),
                ..KubeConfigOptions::default()
            };
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
            let namespace = args.namespace.as_deref().unwrap_or("default");
            let controller = mirror::start(Client::try_from(config)?, namespace).await?;
            println!("secret-mirror running in {namespace}; Ctrl-C stops it");
            tokio::signal::ctrl_c().await?;
            finish(controller).await
        }
    }
}

/// Waits (at most 10 s) until the mirrors in `default` are exactly `expected`
/// (mirror name → its `keys`).
async fn converge(
    api: &Api<ConfigMap>,
    expected: &[(&str, &str)],
    step: &str,
) -> anyhow::Result<()> {
    let expected: BTreeMap<String, String> = expected
        .iter()
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lp = kube::api::ListParams::default().labels(mirror::MIRROR_SELECTOR);
        let seen: BTreeMap<String, String> = api
            .list(&lp)
            .await?
            .into_iter()
            .map(|cm| {
                let keys = cm
                    .data
                    .and_then(|d| d.get("keys").cloned())
                    .unwrap_or_default();
                (cm.metadata.name.unwrap_or_default(), keys)
            })
            .collect();
        if seen == expected {
            println!("{step}: converged, mirrors {seen:?}");
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("{step}: mirrors {seen:?}, expected {expected:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn secret(name: &str, labelled: bool, keys: &[&str]) -> Secret {
    let labels =
        labelled.then(|| BTreeMap::from([("kinformer.example/mirror".into(), "true".into())]));
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels,
            ..ObjectMeta::default()
        },
        data: Some(
            keys.iter()
                .map(|k| (k.to_string(), ByteString(b"not-shown".to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// The tour on the embedded server.
async fn demo() -> anyhow::Result<()> {
    let server = ApiServer::start_in_thread(ServerConfig::default())?;
    println!("embedded API server at {}", server.url());
    let client = Client::try_from(kube::Config::new(server.url().parse()?))?;
    let controller = mirror::start(client.clone(), "default").await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let mirrors: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();

    secrets
        .create(&pp, &secret("db", true, &["user", "password"]))
        .await?;
    secrets
        .create(&pp, &secret("api", true, &["token"]))
        .await?;
    secrets
        .create(&pp, &secret("unrelated", false, &["x"]))
        .await?;
    converge(
        &mirrors,
        &[("api-mirror", "token"), ("db-mirror", "password,user")],
        "created",
    )
    .await?;

    let mut db = secrets.get("db").await?;
    db.data
        .get_or_insert_default()
        .insert("host".into(), ByteString(b"not-shown".to_vec()));
    secrets.replace("db", &pp, &db).await?;
    let both = [("api-mirror", "token"), ("db-mirror", "host,password,user")];
    converge(&mirrors, &both, "updated").await?;

    mirrors
        .delete("api-mirror", &DeleteParams::default())
        .await?;
    converge(&mirrors, &both, "mirror deleted by hand").await?;

    secrets.delete("api", &DeleteParams::default()).await?;
    converge(
        &mirrors,
        &[("db-mirror", "host,password,user")],
        "secret deleted",
    )
    .await?;

    finish(controller).await
}

async fn finish(controller: ControllerHandle<Secret>) -> anyhow::Result<()> {
    let metrics = controller.metrics().await?;
    let r = &metrics.reconcile;
    println!(
        "reconciles {} (errors {}, panics {}, timeouts {}), mean {:.1} ms; queue adds {}, retries {}",
        r.reconciles,
        r.errors,
        r.panics,
        r.timeouts,
        1000.0 * r.duration.sum() / r.duration.count().max(1) as f64,
        metrics.queue.adds,
        metrics.queue.retries,
    );
    let report = controller.stop(Duration::from_secs(10)).await;
    println!(
        "stopped: {} keys left, {} cancelled",
        report.left.len(),
        report.cancelled.len()
    );
    Ok(())
}
