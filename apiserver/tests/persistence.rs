//! Persistence: two servers (in-process, then two `kinformer-apiserver --data` processes)
//! sharing a data directory see the same objects and resourceVersions; a corrupt data
//! directory is a clear error at start.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use kinformer_apiserver::{ApiServer, PersistError, ServerConfig, ServerError, TlsConfig};

fn with_data(dir: &std::path::Path) -> ServerConfig {
    ServerConfig {
        data_dir: Some(dir.to_path_buf()),
        ..fast_config()
    }
}

#[tokio::test]
async fn a_second_server_on_the_same_data_dir_has_the_same_objects_and_counter() {
    let dir = tempfile::tempdir().unwrap();
    let first = start_with(with_data(dir.path())).await;
    first.seed_configmaps("default", 20).unwrap();
    first
        .delete("", "configmaps", Some("default"), "seed-000003")
        .unwrap();
    let mut changed = first
        .get("", "configmaps", Some("default"), "seed-000004")
        .unwrap();
    changed["data"]["extra"] = "changed".into();
    first
        .update("", "configmaps", Some("default"), changed)
        .unwrap();
    let objects = first.list("", "configmaps", None);
    let rv = first.resource_version();
    // The directory is in use while the first server runs.
    match ApiServer::start(with_data(dir.path())).await {
        Err(ServerError::Data(PersistError::Locked(_))) => {}
        other => panic!("expected the data dir to be locked, got {other:?}"),
    }
    first.shutdown_and_wait().await;

    let second = start_with(with_data(dir.path())).await;
    assert_eq!(second.list("", "configmaps", None), objects);
    assert_eq!(second.resource_version(), rv);
    // Namespaces were restored, not created again.
    assert_eq!(second.list("", "namespaces", None).len(), 4);
    let created = second
        .create("", "configmaps", Some("default"), cm("after", &[]))
        .unwrap();
    assert_eq!(created["metadata"]["resourceVersion"], (rv + 1).to_string());
    // A watch from before the restart gets a 410; one from now resumes.
    let mut w = WatchLines::open(&format!(
        "{}/api/v1/configmaps?watch=1&resourceVersion={}",
        second.url(),
        rv - 1
    ))
    .await;
    assert_eq!(
        w.next_within(Duration::from_secs(5)).await.unwrap().kind(),
        "ERROR"
    );
    second.shutdown_and_wait().await;
}

#[tokio::test]
async fn custom_resources_and_their_definitions_survive_a_restart_on_the_same_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let first = start_with(with_data(dir.path())).await;
    first.create_crd(gadget_crd()).unwrap();
    let gadget = serde_json::json!({
        "apiVersion": "example.org/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": "default"},
        "spec": {"size": 3, "color": "red"}
    });
    first
        .create("example.org", "gadgets", Some("default"), gadget)
        .unwrap();
    let objects = first.list("example.org", "gadgets", None);
    let rv = first.resource_version();
    first.shutdown_and_wait().await;

    // The CRD's objects are loaded after the CRD made their type known again.
    let second = start_with(with_data(dir.path())).await;
    assert_eq!(second.list("example.org", "gadgets", None), objects);
    assert_eq!(second.resource_version(), rv);
    let served = second
        .get("example.org", "gadgets", Some("default"), "g1")
        .unwrap();
    assert_eq!(served["spec"]["size"], 3);
    second.shutdown_and_wait().await;
}

#[tokio::test]
async fn a_corrupt_data_dir_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(with_data(dir.path())).await;
    server.seed_configmaps("default", 5).unwrap();
    server.shutdown_and_wait().await;
    let log = dir.path().join("log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[10] ^= 0x55;
    std::fs::write(&log, &bytes).unwrap();
    let err = ApiServer::start(with_data(dir.path())).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ServerError::Data(PersistError::Corrupt { .. })),
        "{text}"
    );
    assert!(
        text.contains("is corrupt at byte 0") && text.contains("log"),
        "{text}"
    );
    // A data dir that is a file is an I/O error, not a panic.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    assert!(matches!(
        ApiServer::start(with_data(&file)).await,
        Err(ServerError::Data(PersistError::Io { .. }))
    ));
}

#[tokio::test]
async fn the_generated_ca_is_kept_in_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let config = || ServerConfig {
        tls: Some(TlsConfig::default()),
        ..with_data(dir.path())
    };
    let first = start_with(config()).await;
    let ca = first.ca_pem().unwrap();
    first.shutdown_and_wait().await;
    let second = start_with(config()).await;
    assert_eq!(second.ca_pem().unwrap(), ca);
    second.shutdown_and_wait().await;
}

/// A `kinformer-apiserver` process; its stdout lines after the announcement.
struct Process {
    child: Child,
    url: String,
    kubeconfig: std::path::PathBuf,
}

fn spawn(args: &[&str]) -> Result<Process, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kinformer-apiserver"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kinformer-apiserver");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut url = None;
    let mut kubeconfig = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("listening on ") {
            url = Some(u.to_string());
        }
        if let Some(k) = line.strip_prefix("kubeconfig: ") {
            kubeconfig = Some(k.into());
            break;
        }
    }
    match (url, kubeconfig) {
        (Some(url), Some(kubeconfig)) => {
            std::thread::spawn(move || lines.for_each(drop));
            Ok(Process {
                child,
                url,
                kubeconfig,
            })
        }
        _ => {
            let out = child.wait_with_output().unwrap();
            Err(String::from_utf8_lossy(&out.stderr).to_string())
        }
    }
}

/// A test that fails must not leave its server running (it would also hold the
/// build lock it inherited).
impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBERC", "off")
            .arg("--request-timeout=10s")
            .args(args)
            .output()
            .expect("kubectl is required for these tests; install kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Ctrl-C, as a user stops it; the data is written on the way out.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
        // (Drop then finds it exited.)
    }
}

#[test]
fn the_binary_keeps_its_data_and_serves_tls_with_auth_to_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let kubeconfig = dir.path().join("kubeconfig");
    let args = [
        "--data",
        data.to_str().unwrap(),
        "--tls",
        "--auth",
        "--kubeconfig-out",
        kubeconfig.to_str().unwrap(),
    ];
    let first = spawn(&args).unwrap();
    assert!(first.url.starts_with("https://"), "{}", first.url);
    first.kubectl(&["create", "configmap", "kept", "--from-literal=k=v"]);
    let rv = first.kubectl(&[
        "get",
        "configmap",
        "kept",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    // Without the kubeconfig's token the server refuses.
    let anonymous = Command::new("kubectl")
        .env("KUBECONFIG", "/nonexistent")
        .env("KUBERC", "off")
        .args([
            "--server",
            &first.url,
            "--insecure-skip-tls-verify",
            "--token",
            "wrong-token",
            "get",
            "configmaps",
        ])
        .output()
        .unwrap();
    assert!(!anonymous.status.success());
    assert!(
        String::from_utf8_lossy(&anonymous.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&anonymous.stderr)
    );
    first.stop();

    // A new process on the same data: same object, same resourceVersion, same CA (the
    // kubeconfig written again holds a new admin token).
    let second = spawn(&args).unwrap();
    let again = second.kubectl(&[
        "get",
        "configmap",
        "kept",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    assert_eq!(again, rv);
    second.stop();

    // A corrupt snapshot: the process exits 1 with the reason.
    std::fs::write(data.join("snapshot"), b"garbage").unwrap();
    let err = spawn(&args).err().expect("started on a corrupt data dir");
    assert!(err.contains("is corrupt"), "{err}");
}
