//! Real `kubectl` against the server. These tests FAIL (never skip) when kubectl is missing.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};
use serde_json::Value;

struct Kubectl {
    server: ServerHandle,
    cache: std::path::PathBuf,
}

impl Kubectl {
    fn start() -> Kubectl {
        Self::start_with(ServerConfig {
            bookmark_interval: Duration::from_millis(200),
            ..ServerConfig::default()
        })
    }

    fn start_with(config: ServerConfig) -> Kubectl {
        let ok = Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            ok,
            "kubectl is required for these tests but was not found or does not run; install kubectl"
        );
        let server = ApiServer::start_in_thread(config).unwrap();
        let cache =
            std::env::temp_dir().join(format!("kinformer-kubectl-cache-{}", server.addr().port()));
        Kubectl { server, cache }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        // No kubeconfig, and no user preferences (`~/.kube/kuberc` aliases and defaults).
        c.env("KUBECONFIG", "/nonexistent/kinformer-kubeconfig")
            .env("KUBERC", "off")
            .arg("--server")
            .arg(self.server.url())
            .arg("--cache-dir")
            .arg(&self.cache)
            .arg("--request-timeout=10s")
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running kubectl")
    }

    /// Run and require success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    fn with_stdin(&self, args: &[&str], input: &str) -> String {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }

    fn names(&self, args: &[&str]) -> Vec<String> {
        let mut a = args.to_vec();
        a.extend(["-o", "name"]);
        let mut v: Vec<String> = self.ok(&a).lines().map(str::to_string).collect();
        v.sort();
        v
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.cache);
    }
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
  namespace: default
  labels:
    app: demo
    tier: front
data:
  greeting: hello
"#;

#[test]
fn create_get_apply_patch_delete() {
    let k = Kubectl::start();
    assert!(
        k.with_stdin(&["create", "-f", "-"], MANIFEST)
            .contains("configmap/demo created")
    );
    let got = k.json(&["get", "configmap", "demo", "-n", "default"]);
    assert_eq!(got["data"]["greeting"], "hello");
    assert_eq!(got["metadata"]["labels"]["app"], "demo");
    let table = k.ok(&["get", "cm", "-n", "default"]);
    assert!(table.contains("NAME") && table.contains("demo"), "{table}");

    // apply: first on an existing object (annotation added), then a real change
    k.with_stdin(&["apply", "-f", "-"], MANIFEST);
    let changed = MANIFEST.replace("greeting: hello", "greeting: bonjour");
    assert!(
        k.with_stdin(&["apply", "-f", "-"], &changed)
            .contains("configured")
    );
    let got = k.json(&["get", "cm", "demo", "-n", "default"]);
    assert_eq!(got["data"]["greeting"], "bonjour");
    assert!(
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );
    // apply creating a new object
    let fresh = MANIFEST.replace("name: demo", "name: applied");
    assert!(
        k.with_stdin(&["apply", "-f", "-"], &fresh)
            .contains("created")
    );

    // patch in all three flavours
    k.ok(&[
        "patch",
        "cm",
        "demo",
        "-n",
        "default",
        "-p",
        r#"{"data":{"s":"1"}}"#,
    ]);
    k.ok(&[
        "patch",
        "cm",
        "demo",
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"m":"1"}}"#,
    ]);
    k.ok(&[
        "patch",
        "cm",
        "demo",
        "-n",
        "default",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/j","value":"1"}]"#,
    ]);
    let got = k.json(&["get", "cm", "demo", "-n", "default"]);
    for key in ["s", "m", "j", "greeting"] {
        assert!(got["data"][key].is_string(), "missing {key}: {got}");
    }

    k.ok(&["label", "cm", "demo", "-n", "default", "extra=yes"]);
    assert!(
        k.ok(&["delete", "cm", "demo", "-n", "default"])
            .contains("deleted")
    );
    let out = k.run(&["get", "cm", "demo", "-n", "default"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        k.server
            .get("", "configmaps", Some("default"), "demo")
            .is_err()
    );

    // custom resource and cluster-scoped kinds through discovery
    k.with_stdin(
        &["create", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\nspec:\n  size: 2\n",
    );
    assert_eq!(
        k.names(&["get", "widgets", "-A"]),
        vec!["widget.example.com/w1"]
    );
    assert!(
        k.names(&["get", "ns"])
            .contains(&"namespace/default".to_string())
    );
}

#[test]
fn label_selectors() {
    let k = Kubectl::start();
    k.ok(&["create", "namespace", "sel"]);
    for (name, app, tier) in [
        ("a", "web", "front"),
        ("b", "web", "back"),
        ("c", "db", "back"),
    ] {
        k.ok(&[
            "create",
            "configmap",
            name,
            "-n",
            "sel",
            "--from-literal=k=v",
        ]);
        k.ok(&[
            "label",
            "cm",
            name,
            "-n",
            "sel",
            &format!("app={app}"),
            &format!("tier={tier}"),
        ]);
    }
    k.ok(&["create", "configmap", "plain", "-n", "sel"]);
    let cases: [(&str, &[&str]); 6] = [
        ("app=web", &["configmap/a", "configmap/b"]),
        ("app!=web", &["configmap/c", "configmap/plain"]),
        ("tier in (back)", &["configmap/b", "configmap/c"]),
        ("app notin (web,db)", &["configmap/plain"]),
        ("tier", &["configmap/a", "configmap/b", "configmap/c"]),
        ("!tier", &["configmap/plain"]),
    ];
    for (sel, expected) in cases {
        assert_eq!(
            k.names(&["get", "cm", "-n", "sel", "-l", sel]),
            expected,
            "selector {sel}"
        );
    }
    let out = k.run(&["get", "cm", "-n", "sel", "-l", "app in (web"]);
    assert!(!out.status.success(), "a bad selector must fail");
    k.ok(&["delete", "cm", "-n", "sel", "-l", "app=web"]);
    assert_eq!(
        k.names(&["get", "cm", "-n", "sel"]),
        vec!["configmap/c", "configmap/plain"]
    );
}

#[test]
fn get_watch_sees_live_changes() {
    let k = Kubectl::start();
    k.ok(&["create", "namespace", "watched"]);
    k.ok(&["create", "configmap", "before", "-n", "watched"]);
    let mut child = k
        .command(&["get", "cm", "-n", "watched", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning kubectl get -w");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |rx: &mpsc::Receiver<String>, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.trim() == want => return,
                Ok(_) => {}
                Err(_) => panic!("kubectl get -w never printed {want}"),
            }
        }
    };
    wait_for(&rx, "configmap/before");
    // the watch is open once the server has a watcher registered
    let deadline = Instant::now() + Duration::from_secs(15);
    while k.server.watcher_count() == 0 {
        assert!(Instant::now() < deadline, "kubectl never opened its watch");
        std::thread::sleep(Duration::from_millis(20));
    }
    k.ok(&["create", "configmap", "during", "-n", "watched"]);
    wait_for(&rx, "configmap/during");
    k.ok(&["delete", "cm", "during", "-n", "watched"]);
    wait_for(&rx, "configmap/during");
    let _ = child.kill();
    let _ = child.wait();
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.org
spec:
  group: example.org
  scope: Namespaced
  names:
    plural: gadgets
    singular: gadget
    kind: Gadget
    shortNames: [gd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
    subresources:
      status: {}
"#;

const GADGET: &str = "apiVersion: example.org/v1\nkind: Gadget\nmetadata:\n  name: g1\n  namespace: default\nspec:\n  size: 2\n";

#[test]
fn crds_with_kubectl_apply_get_by_plural_short_name_and_category_then_delete() {
    let k = Kubectl::start();
    assert!(k.with_stdin(&["apply", "-f", "-"], CRD).contains("created"));
    let crd = k.json(&["get", "crd", "gadgets.example.org"]);
    let established = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "{crd}");
    assert!(
        k.with_stdin(&["apply", "-f", "-"], GADGET)
            .contains("gadget.example.org/g1 created")
    );
    assert_eq!(
        k.names(&["get", "gadgets", "-n", "default"]),
        ["gadget.example.org/g1"]
    );
    assert_eq!(
        k.names(&["get", "gd", "-n", "default"]),
        ["gadget.example.org/g1"]
    );
    assert_eq!(
        k.names(&["get", "gadget.example.org", "-n", "default"]),
        ["gadget.example.org/g1"]
    );
    let all = k.names(&["get", "all", "-n", "default"]);
    assert!(
        all.contains(&"gadget.example.org/g1".to_string()),
        "{all:?}"
    );
    let table = k.ok(&["get", "gadgets", "-n", "default"]);
    assert!(table.contains("g1"), "{table}");
    // A schema violation is refused with the server's message.
    let bad = GADGET.replace("size: 2", "size: big");
    let out = k
        .command(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = out;
    out.stdin.take().unwrap().write_all(bad.as_bytes()).unwrap();
    let out = out.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must be of type integer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    assert!(
        k.ok(&["delete", "crd", "gadgets.example.org"])
            .contains("deleted")
    );
    assert!(
        k.server
            .get("example.org", "gadgets", Some("default"), "g1")
            .is_err()
    );
    let out = k.run(&["get", "gadgets", "-n", "default"]);
    assert!(!out.status.success(), "the type is not served any more");
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: nginx
"#;

fn workloads_by_short_name(k: &Kubectl) {
    assert!(
        k.with_stdin(&["apply", "-f", "-"], DEPLOYMENT)
            .contains("deployment.apps/web created")
    );
    assert_eq!(
        k.names(&["get", "deploy", "-n", "default"]),
        ["deployment.apps/web"]
    );
    assert!(
        k.ok(&["scale", "deploy", "web", "-n", "default", "--replicas=4"])
            .contains("scaled")
    );
    let d = k.json(&["get", "deployment", "web", "-n", "default"]);
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["metadata"]["generation"], 2);
    for short in ["rs", "sts", "ds", "cm", "po", "svc", "jobs", "leases"] {
        k.ok(&["get", short, "-n", "default"]);
    }
    k.ok(&["get", "ns"]);
    k.ok(&["get", "crd"]);
    let resources = k.ok(&["api-resources", "--api-group=apps"]);
    assert!(
        resources.contains("deployments") && resources.contains("deploy"),
        "{resources}"
    );
    assert!(
        k.ok(&["delete", "deploy", "web", "-n", "default"])
            .contains("deleted")
    );
    assert!(
        k.server
            .get("apps", "deployments", Some("default"), "web")
            .is_err()
    );
}

#[test]
fn workloads_by_short_name_with_aggregated_discovery() {
    workloads_by_short_name(&Kubectl::start());
}

#[test]
fn workloads_by_short_name_with_1_24_discovery() {
    workloads_by_short_name(&Kubectl::start_with(ServerConfig {
        aggregated_discovery: false,
        ..ServerConfig::default()
    }));
}

#[test]
fn kubectl_cascade_policies_with_the_garbage_collector() {
    let k = Kubectl::start_with(ServerConfig {
        garbage_collection: true,
        ..ServerConfig::default()
    });
    let owner = k
        .server
        .create(
            "",
            "configmaps",
            Some("default"),
            serde_json::json!({"metadata": {"name": "owner"}}),
        )
        .unwrap();
    let dependent = |name: &str| {
        serde_json::json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true
        }]}})
    };
    k.server
        .create("", "configmaps", Some("default"), dependent("kept"))
        .unwrap();
    assert!(
        k.ok(&["delete", "cm", "owner", "-n", "default", "--cascade=orphan"])
            .contains("deleted")
    );
    let kept = k.json(&["get", "cm", "kept", "-n", "default"]);
    assert!(kept["metadata"].get("ownerReferences").is_none(), "{kept}");

    let owner = k
        .server
        .create(
            "",
            "configmaps",
            Some("default"),
            serde_json::json!({"metadata": {"name": "owner"}}),
        )
        .unwrap();
    let dep = serde_json::json!({"metadata": {"name": "dep", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true
    }]}});
    k.server
        .create("", "configmaps", Some("default"), dep)
        .unwrap();
    assert!(
        k.ok(&[
            "delete",
            "cm",
            "owner",
            "-n",
            "default",
            "--cascade=foreground"
        ])
        .contains("deleted")
    );
    assert!(
        k.server
            .get("", "configmaps", Some("default"), "owner")
            .is_err()
    );
    assert!(
        k.server
            .get("", "configmaps", Some("default"), "dep")
            .is_err()
    );
}
