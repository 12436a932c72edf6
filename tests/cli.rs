//! The `kinformer` binary, end to end: `run --embedded --for 5s` and
//! `watch configmaps -A -o json` against an embedded server the test starts,
//! with writes made through kube-client.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_apiserver::{ApiServer, ServerConfig};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use serde_json::Value;

fn kinformer() -> Command {
    common::kinformer_command()
}

/// Runs `cmd` with its output captured, to its end (at most `limit`).
fn run_to_end(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kinformer");
    wait_output(child, limit)
}

/// Waits for the process to end, at most `limit`; kills it past that.
fn wait_output(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for kinformer"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("kinformer did not finish within {limit:?}");
        }
    }
}

#[test]
fn run_embedded_for_5s_exits_0_with_a_summary() {
    let started = Instant::now();
    let out = run_to_end(
        kinformer()
            .current_dir(env!("CARGO_MANIFEST_DIR")) // the repository's config.toml
            .args(["run", "--embedded", "--for", "5s"]),
        Duration::from_secs(40),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(started.elapsed() >= Duration::from_secs(5));
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.contains("embedded API server") && first.contains("--embedded"),
        "first line: {first}"
    );
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("summary:"))
        .collect();
    assert!(!summary.is_empty(), "no summary:\n{stdout}");
    let informer = summary
        .iter()
        .find(|l| l.trim_start().starts_with("configmaps"))
        .unwrap_or_else(|| panic!("no informer line:\n{stdout}"));
    assert!(informer.contains("synced true"), "{informer}");
    // Both configured subscribers handled the initial list and the churn.
    for sub in ["fast:", "slow:"] {
        let line = summary
            .iter()
            .find(|l| l.trim_start().starts_with(sub))
            .unwrap_or_else(|| panic!("no {sub} line:\n{stdout}"));
        let handled: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(handled >= 5_000, "{line}");
        assert!(!line.contains(" 0 watch"), "no watch events reached {line}");
    }
    // The sync line counts what was cached when the informer synced, not at
    // the later tick that printed it (the churn adds ConfigMaps meanwhile):
    // about what the subscribers were handed as the initial list.
    let synced: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("configmaps: synced "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sync line:\n{stdout}"));
    let initial: usize = summary
        .iter()
        .find(|l| l.trim_start().starts_with("fast:"))
        .and_then(|l| l.split_once('(')?.1.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no initial count:\n{stdout}"));
    assert!(
        initial >= 5_000 && synced.abs_diff(initial) <= 100,
        "synced {synced} objects, {initial} initial adds:\n{stdout}"
    );
    // Plain lines (stdout is a pipe): a live status line was printed.
    assert!(stdout.contains("events/s"), "{stdout}");
}

/// `run --persist DIR`, twice against the same server: the first run lists
/// and leaves a snapshot; the second restores it and resumes the watch (the
/// server kept its history) without a list, gets the change made between
/// the runs as a watch event, and says so in its summary.
#[test]
fn run_persist_restores_and_resumes_on_the_next_run() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.seed_configmaps("default", 50).unwrap();
    let dir = std::env::temp_dir().join(format!("kinformer-cli-persist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = || {
        let out = run_to_end(
            kinformer()
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                // Long enough for the server to confirm the restore (the
                // watch's first event) on a loaded machine.
                .args(["run", "--server", &server.url(), "--for", "4s", "--persist"])
                .arg(&dir),
            Duration::from_secs(40),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}");
        stdout
    };
    let warm = |stdout: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with("warm start:"))
            .unwrap_or_else(|| panic!("no warm start line:\n{stdout}"))
            .to_owned()
    };
    let first = run();
    assert!(warm(&first).contains("no snapshot, listed"), "{first}");
    server
        .create(
            "",
            "configmaps",
            Some("default"),
            serde_json::json!({"metadata": {"name": "while-down", "namespace": "default"}}),
        )
        .unwrap();
    let lists = server.requests().counts().verb("list");
    let second = run();
    assert!(
        warm(&second).contains("resumed: restored 50 in"),
        "{second}"
    );
    assert_eq!(server.requests().counts().verb("list"), lists, "{second}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kinformer ARGS` with its stdout read line by line (stderr dropped).
fn spawn_reading(args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = kinformer()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kinformer");
    let rx = common::stdout_lines(&mut child);
    (child, rx)
}

/// The next JSON line matching `pred`, within `limit`; every line must be one JSON object
/// with exactly the documented fields.
fn expect_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no line for {what} within {limit:?}"));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let obj = v.as_object().expect("an object per line");
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "cause",
                "finalStateUnknown",
                "key",
                "resourceVersion",
                "type"
            ],
            "{line}"
        );
        assert!(["Added", "Updated", "Deleted"].contains(&v["type"].as_str().unwrap_or("")));
        assert!(
            ["initial", "watch", "relist", "resync"].contains(&v["cause"].as_str().unwrap_or(""))
        );
        if pred(&v) {
            return v;
        }
    }
}

fn cm(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

#[test]
fn watch_json_prints_every_change_and_resyncs() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _runtime = rt.enter(); // kube's client needs a runtime when it is built
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let api = kube::Api::<ConfigMap>::namespaced(client, "default");
    rt.block_on(api.create(&PostParams::default(), &cm("before", "0")))
        .unwrap();

    let mut child = kinformer()
        .args([
            "watch",
            // Ends on its own even if this test fails before killing it.
            "--for",
            "120s",
            "configmaps",
            "-A",
            "-o",
            "json",
            "--resync",
            "1s",
            "--server",
            &server.url(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kinformer watch");
    let rx = common::stdout_lines(&mut child);
    let limit = Duration::from_secs(15);

    // The initial list: proves the informer synced before the writes.
    let v = expect_line(&rx, limit, "initial add", |v| {
        v["key"] == "default/before" && v["cause"] == "initial"
    });
    assert_eq!(v["type"], "Added");

    let created = rt
        .block_on(api.create(&PostParams::default(), &cm("made", "1")))
        .unwrap();
    let v = expect_line(&rx, limit, "watch add", |v| v["key"] == "default/made");
    assert_eq!(
        (v["type"].as_str(), v["cause"].as_str()),
        (Some("Added"), Some("watch"))
    );
    assert_eq!(
        v["resourceVersion"].as_str(),
        created.metadata.resource_version.as_deref()
    );

    let mut changed = created.clone();
    changed.data = Some([("v".to_string(), "2".to_string())].into());
    let updated = rt
        .block_on(api.replace("made", &PostParams::default(), &changed))
        .unwrap();
    let v = expect_line(&rx, limit, "watch update", |v| {
        v["key"] == "default/made" && v["cause"] == "watch"
    });
    assert_eq!(v["type"], "Updated");
    assert_eq!(
        v["resourceVersion"].as_str(),
        updated.metadata.resource_version.as_deref()
    );

    rt.block_on(api.delete("made", &DeleteParams::default()))
        .unwrap();
    let v = expect_line(&rx, limit, "watch delete", |v| {
        v["key"] == "default/made" && v["type"] == "Deleted"
    });
    assert_eq!(v["cause"], "watch");
    assert_eq!(v["finalStateUnknown"], false);

    // The resync period chosen on the command line: an unchanged replay.
    let v = expect_line(&rx, limit, "resync", |v| v["cause"] == "resync");
    assert_eq!(v["type"], "Updated");
    assert_eq!(v["key"], "default/before");

    let _ = child.kill();
    let _ = child.wait();
    server.shutdown();
}

#[test]
fn watch_full_includes_the_object_and_text_is_one_line_each() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.seed_configmaps("default", 3).unwrap();
    let mut child = kinformer()
        .args([
            "watch",
            // Ends on its own even if this test fails before killing it.
            "--for",
            "120s",
            "configmaps",
            "-n",
            "default",
            "-o",
            "json",
            "--full",
        ])
        .args(["--server", &server.url()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let rx = common::stdout_lines(&mut child);
    let line = rx.recv_timeout(Duration::from_secs(15)).expect("a line");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["cause"], "initial");
    assert_eq!(v["object"]["kind"], "ConfigMap", "{line}");
    assert_eq!(
        v["object"]["metadata"]["resourceVersion"],
        v["resourceVersion"]
    );
    let _ = child.kill();
    let _ = child.wait();

    let mut child = kinformer()
        .args([
            "watch",
            // Ends on its own even if this test fails before killing it.
            "--for",
            "120s",
            "configmaps",
            "-n",
            "default",
            "--server",
            &server.url(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let rx = common::stdout_lines(&mut child);
    for _ in 0..3 {
        let line = rx.recv_timeout(Duration::from_secs(15)).expect("a line");
        assert!(line.starts_with("ADDED"), "{line}");
        assert!(
            line.contains("initial") && line.contains("default/seed-"),
            "{line}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    server.shutdown();
}

#[test]
fn watch_unknown_resource_fails_with_its_name() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    let out = run_to_end(
        kinformer().args(["watch", "frobnicators", "-A", "--server", &server.url()]),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("frobnicators") && stderr.contains("unknown resource"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    server.shutdown();
}

#[test]
fn namespace_and_all_namespaces_contradict() {
    let out = kinformer()
        .args(["watch", "configmaps", "-n", "x", "-A"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--all-namespaces"), "{stderr}");
}

/// A kubeconfig with two contexts: `good` points at `url`, `bad` at a closed port.
fn kubeconfig(url: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("kinformer-kubeconfig-{}", std::process::id()));
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: bad\n\
         clusters:\n- name: good\n  cluster:\n    server: {url}\n\
         - name: bad\n  cluster:\n    server: http://127.0.0.1:9\n\
         contexts:\n- name: good\n  context:\n    cluster: good\n    user: me\n    namespace: default\n\
         - name: bad\n  context:\n    cluster: bad\n    user: me\n\
         users:\n- name: me\n  user: {{}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn cluster_selection_follows_kubeconfig_conventions() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.seed_configmaps("default", 2).unwrap();
    let path = kubeconfig(&server.url());
    let path_str = path.to_str().unwrap();

    // KUBECONFIG with its current context switched by --context.
    let mut child = kinformer()
        .env("KUBECONFIG", path_str)
        .args([
            "watch",
            "configmaps",
            "-o",
            "json",
            "--context",
            "good",
            "--for",
            "120s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let rx = common::stdout_lines(&mut child);
    let v = expect_line(
        &rx,
        Duration::from_secs(15),
        "initial via KUBECONFIG",
        |v| v["cause"] == "initial",
    );
    assert!(v["key"].as_str().unwrap().starts_with("default/seed-"));
    let _ = child.kill();
    let _ = child.wait();

    // --kubeconfig FILE: its current context (`bad`) is unreachable, and that is an error,
    // not a silent fallback to the embedded server.
    let out = run_to_end(
        kinformer().args(["run", "--kubeconfig", path_str, "--for", "5s"]),
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with("kinformer: using the cluster at http://127.0.0.1:9/"),
        "{stdout}"
    );
    assert!(!stdout.contains("embedded"), "{stdout}");

    // A KUBECONFIG that does not load (missing file, unknown current context)
    // is an error too: the embedded server is only for "nothing configured".
    let broken = std::env::temp_dir().join(format!(
        "kinformer-kubeconfig-broken-{}",
        std::process::id()
    ));
    std::fs::write(
        &broken,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace("current-context: bad", "current-context: typo"),
    )
    .unwrap();
    for kubeconfig in ["/nonexistent/kubeconfig", broken.to_str().unwrap()] {
        let out = run_to_end(
            kinformer()
                .env("KUBECONFIG", kubeconfig)
                .args(["run", "--for", "1s"]),
            Duration::from_secs(30),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("KUBECONFIG={kubeconfig}")),
            "{stderr}"
        );
        assert!(!stdout.contains("embedded"), "{stdout}");
    }
    let _ = std::fs::remove_file(&broken);
    let _ = std::fs::remove_file(&path);
    server.shutdown();
}

/// A server that accepts connections and never answers: discovery fails
/// after `engine.read_timeout` (exit 1, naming the wait) instead of hanging;
/// with a shorter `--for`, the run stops gracefully when `--for` ends (it
/// counts from the start), before any informer started.
#[test]
fn a_silent_server_fails_discovery_instead_of_hanging() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Accepts, keeps the connections open, never answers.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    for (env, args) in [
        (Some("2s"), vec!["run", "--server", &url]),
        (Some("2s"), vec!["watch", "configmaps", "--server", &url]),
    ] {
        let started = Instant::now();
        let mut cmd = kinformer();
        if let Some(t) = env {
            cmd.env("KINFORMER__ENGINE__READ_TIMEOUT", t);
        }
        let out = run_to_end(cmd.args(&args), Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("did not answer within"),
            "{args:?}: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(20), "{args:?}");
    }
    let started = Instant::now();
    let out = run_to_end(
        kinformer().args(["run", "--server", &url, "--for", "2s"]),
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("stopping (time is up) before every informer started"),
        "{stdout}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// SIGTERM (how Kubernetes and systemd stop a process) stops `run` as
/// gracefully as Ctrl-C: a summary and exit 0.
#[test]
fn sigterm_stops_run_gracefully() {
    let mut child = kinformer()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--embedded", "--seed", "100", "--for", "120s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kinformer");
    let rx = common::stdout_lines(&mut child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("a status line before the deadline");
        if line.contains("synced") {
            break;
        }
    }
    common::expect_graceful_stop(child, "-TERM", "terminated", &rx);
}

/// A list the server refuses (a malformed selector: 400) is retried, and the
/// program says why it never synced and exits 1 instead of 0.
#[test]
fn a_list_that_never_succeeds_fails_the_run_with_its_reason() {
    let fake = refusing_cluster();
    let out = run_to_end(
        kinformer().args(["watch", "configmaps", "--server", &fake.url, "--for", "3s"]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("never synced: last list failed") && stderr.contains("Forbidden"),
        "{stderr}"
    );
}

/// A malformed selector on the command line is refused before anything
/// starts, naming the flag, rather than by the server at the first list.
#[test]
fn a_malformed_selector_is_refused_before_anything_starts() {
    for (flag, selector) in [("-l", "a in (b"), ("--field-selector", "metadata.name")] {
        let out = run_to_end(
            kinformer().args(["get", "configmaps", flag, selector, "--embedded"]),
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains("invalid value") && stderr.contains(selector),
            "{flag}: {stderr}"
        );
    }
}

/// `run --seed` / `--churn` against a cluster other than the embedded
/// server are refused, naming the key, rather than silently ignored.
#[test]
fn seed_and_churn_flags_are_refused_against_a_real_cluster() {
    let fake = refusing_cluster();
    for (flag, key) in [
        ("--seed", "embedded.seed"),
        ("--churn", "embedded.churn_per_sec"),
    ] {
        let out = run_to_end(
            kinformer().args(["run", flag, "5", "--server", &fake.url, "--for", "5s"]),
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {stderr}");
        assert!(
            stderr.contains(key) && stderr.contains("embedded API server only"),
            "{flag}: {stderr}"
        );
    }
}

/// A cluster whose API server refuses every list with 403 Forbidden (RBAC
/// without `list`), after discovery.
fn refusing_cluster() -> fake::Fake {
    fake::Fake::start(|path, _query, accept| {
        if let Some(answer) = fake::discovery(path, accept) {
            return answer;
        }
        fake::Answer::Json(
            403,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
                "message": "configmaps is forbidden: User \"system:serviceaccount:default:reader\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"}),
        )
    })
}

/// A small fake API server for what the embedded one does not do (yet):
/// aggregated discovery, list items without `apiVersion`/`kind` (as a real
/// server sends them). One
/// thread per connection, one request per connection (`Connection: close`).
mod fake {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use serde_json::{Value, json};

    /// What the fake answers to one request.
    pub enum Answer {
        /// A JSON document with this status.
        Json(u16, Value),
        /// Watch events, one line each, then the stream stays open until the client leaves.
        Stream(Vec<Value>),
    }

    /// A running fake; the requests it received (`path?query`, Accept header).
    pub struct Fake {
        pub url: String,
        pub requests: Arc<Mutex<Vec<(String, String)>>>,
    }

    impl Fake {
        pub fn start(route: impl Fn(&str, &str, &str) -> Answer + Send + Sync + 'static) -> Fake {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let requests = Arc::new(Mutex::new(Vec::new()));
            let seen = requests.clone();
            let route = Arc::new(route);
            std::thread::spawn(move || {
                for conn in listener.incoming().flatten() {
                    let (route, seen) = (route.clone(), seen.clone());
                    std::thread::spawn(move || serve(conn, &*route, &seen));
                }
            });
            Fake { url, requests }
        }

        pub fn paths(&self) -> Vec<String> {
            let requests = self.requests.lock().unwrap();
            requests.iter().map(|(p, _)| p.clone()).collect()
        }
    }

    fn serve(
        conn: TcpStream,
        route: &(dyn Fn(&str, &str, &str) -> Answer + Send + Sync),
        seen: &Mutex<Vec<(String, String)>>,
    ) {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(120)));
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let mut accept = String::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("accept")
            {
                accept = v.trim().to_owned();
            }
        }
        seen.lock().unwrap().push((target.clone(), accept.clone()));
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let mut conn = conn;
        match route(path, query, &accept) {
            Answer::Json(code, body) => {
                let body = body.to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Answer::Stream(events) => {
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                );
                for e in events {
                    let _ = writeln!(conn, "{e}");
                }
                let _ = conn.flush();
                // Held open until the client goes away.
                let mut sink = [0u8; 64];
                while matches!(reader.get_mut().read(&mut sink), Ok(n) if n > 0) {}
            }
        }
    }

    pub fn not_found() -> Answer {
        Answer::Json(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
        )
    }

    /// One aggregated discovery resource entry.
    pub fn resource(plural: &str, kind: &str, short: &[&str], namespaced: bool) -> Value {
        json!({
            "resource": plural,
            "singularResource": kind.to_lowercase(),
            "responseKind": {"kind": kind},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "shortNames": short,
            "verbs": ["get", "list", "watch"],
        })
    }

    /// An aggregated discovery list of (group, version, resources).
    pub fn aggregated(groups: &[(&str, &str, Vec<Value>)]) -> Value {
        json!({
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": groups.iter().map(|(g, v, r)| json!({
                "metadata": {"name": g},
                "versions": [{"version": v, "resources": r, "freshness": "Current"}],
            })).collect::<Vec<_>>(),
        })
    }

    /// `/api` and `/apis` as aggregated discovery (when asked for it, as a
    /// real 1.30 server answers): core ConfigMaps, apps Deployments, and a
    /// CRD `gizmos.demo.example.org` with its own short name `gz`.
    pub fn discovery(path: &str, accept: &str) -> Option<Answer> {
        let aggregated_asked = accept.contains("apidiscovery.k8s.io");
        match path {
            "/api" if aggregated_asked => Some(Answer::Json(
                200,
                aggregated(&[(
                    "",
                    "v1",
                    vec![resource("configmaps", "ConfigMap", &["cm"], true)],
                )]),
            )),
            "/apis" if aggregated_asked => Some(Answer::Json(
                200,
                aggregated(&[
                    (
                        "apps",
                        "v1",
                        vec![resource("deployments", "Deployment", &["deploy"], true)],
                    ),
                    (
                        "demo.example.org",
                        "v1",
                        vec![resource("gizmos", "Gizmo", &["gz"], true)],
                    ),
                ]),
            )),
            _ => None,
        }
    }
}

/// The fake's resources, listed without `apiVersion`/`kind` in the items
/// (as a real server lists them) and watched with them.
fn fake_cluster() -> fake::Fake {
    use fake::Answer;
    fake::Fake::start(|path, query, accept| {
        if let Some(answer) = fake::discovery(path, accept) {
            return answer;
        }
        let kinds = [
            ("/apis/apps/v1/deployments", "apps/v1", "Deployment"),
            (
                "/apis/demo.example.org/v1/gizmos",
                "demo.example.org/v1",
                "Gizmo",
            ),
        ];
        let Some((_, api_version, kind)) = kinds.iter().find(|(p, ..)| *p == path) else {
            return fake::not_found();
        };
        let item = |name: &str, rv: &str| serde_json::json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": rv, "creationTimestamp": "2020-01-01T00:00:00Z"}, "spec": {"replicas": 1}});
        if query.contains("watch=true") || query.contains("watch=1") {
            let mut object = item("made-later", "11");
            object["apiVersion"] = (*api_version).into();
            object["kind"] = (*kind).into();
            return Answer::Stream(vec![serde_json::json!({"type": "ADDED", "object": object})]);
        }
        Answer::Json(
            200,
            serde_json::json!({
                "kind": format!("{kind}List"),
                "apiVersion": api_version,
                "metadata": {"resourceVersion": "10"},
                "items": [item("listed", "10")],
            }),
        )
    })
}

/// `kinformer get NAME -A -o json` against `url`: the exit status and the parsed List or stderr.
fn get_json(url: &str, name: &str) -> Result<Value, String> {
    let out = run_to_end(
        kinformer().args(["get", name, "-A", "-o", "json", "--server", url]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(stderr);
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {stderr}"))
}

/// Finding 1 of issue 28, against the embedded server (plain discovery, as
/// Kubernetes 1.24 serves it): names outside the core group resolve
/// without their group, by plural, singular, kind in any case and short
/// name, and a name two groups serve is refused with both listed.
#[test]
fn resource_names_resolve_as_kubectl_resolves_them_with_plain_discovery() {
    use kinformer_apiserver::ResourceType;
    let mut resources = ResourceType::defaults();
    resources.push(ResourceType::new(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        true,
    ));
    let config = ServerConfig {
        resources: resources.clone(),
        ..ServerConfig::default()
    };
    let server = ApiServer::start_in_thread(config).expect("server");
    let deployment = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}});
    server
        .create("apps", "deployments", Some("default"), deployment)
        .unwrap();
    let widget = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}});
    server
        .create("example.com", "widgets", Some("default"), widget)
        .unwrap();
    server.seed_configmaps("default", 1).unwrap();
    let url = server.url();
    for (name, kind) in [
        ("widgets", "Widget"),
        ("widget", "Widget"),
        ("Widget", "Widget"),
        ("widgets.example.com", "Widget"),
        ("deployments", "Deployment"),
        ("Deployment", "Deployment"),
        ("DEPLOYMENT", "Deployment"),
        ("deployments.apps", "Deployment"),
        ("deployments.v1.apps", "Deployment"),
        ("cm", "ConfigMap"),
        ("ns", "Namespace"),
    ] {
        let list = get_json(&url, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let items = list["items"].as_array().expect("items");
        assert!(!items.is_empty(), "{name}: {list}");
        assert!(items.iter().all(|i| i["kind"] == kind), "{name}: {list}");
    }
    server.shutdown();

    // A second group serving `widgets`: the bare name is ambiguous.
    resources.push(ResourceType::new(
        "demo.example.org",
        "v1",
        "Widget",
        "widgets",
        true,
    ));
    let server = ApiServer::start_in_thread(ServerConfig {
        resources,
        ..ServerConfig::default()
    })
    .expect("server");
    let e = get_json(&server.url(), "widgets").unwrap_err();
    assert!(
        e.contains("ambiguous")
            && e.contains("widgets.example.com")
            && e.contains("widgets.demo.example.org"),
        "{e}"
    );
    let list = get_json(&server.url(), "widgets.demo.example.org").unwrap();
    assert_eq!(list["items"], serde_json::json!([]));
    server.shutdown();
}

/// The same against a server answering aggregated discovery: short names
/// (`deploy`, a CRD's own), kinds, qualified names; the two aggregated
/// documents are all that is read (no per-group request).
#[test]
fn resource_names_resolve_with_aggregated_discovery_from_two_documents() {
    let fake = fake_cluster();
    for (name, kind) in [
        ("deploy", "Deployment"),
        ("deployment", "Deployment"),
        ("Deployment.apps", "Deployment"),
        ("gz", "Gizmo"),
        ("gizmos", "Gizmo"),
        ("gizmos.v1.demo.example.org", "Gizmo"),
    ] {
        let list = get_json(&fake.url, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The listed object (and the watched one, if it came in before the print).
        let items = list["items"].as_array().expect("items");
        assert_eq!(items[0]["metadata"]["name"], "listed", "{name}: {list}");
        for item in items {
            // Filled in from discovery: the fake's list items carry neither.
            assert_eq!(item["kind"], kind, "{name}: {list}");
            assert!(item["apiVersion"].is_string(), "{name}: {list}");
        }
    }
    let discovery: Vec<String> = fake
        .paths()
        .into_iter()
        .filter(|p| !p.contains("deployments") && !p.contains("gizmos"))
        .collect();
    assert!(
        discovery.iter().all(|p| p == "/api" || p == "/apis"),
        "only the aggregated documents are read: {discovery:?}"
    );
    let e = get_json(&fake.url, "frobnicators").unwrap_err();
    assert!(e.contains("unknown resource \"frobnicators\""), "{e}");
}

/// Finding 7: `watch --full` prints the initial objects (a real server's
/// list items have no apiVersion/kind) like the watched ones (which have them).
#[test]
fn watch_full_prints_apiversion_and_kind_for_listed_and_watched_objects() {
    let fake = fake_cluster();
    let (mut child, rx) = spawn_reading(&[
        "watch", "deploy", "-A", "-o", "json", "--full", "--for", "60s", "--server", &fake.url,
    ]);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("two notifications, got {seen:?}"));
        seen.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    let _ = child.kill();
    let _ = child.wait();
    for (v, cause) in seen.iter().zip(["initial", "watch"]) {
        assert_eq!(v["cause"], cause, "{v}");
        assert_eq!(v["object"]["apiVersion"], "apps/v1", "{v}");
        assert_eq!(v["object"]["kind"], "Deployment", "{v}");
    }
}

/// `resource = "widgets"` in a configuration file (issue 28 exited 2 here).
#[test]
fn run_resolves_an_unqualified_custom_resource_from_the_config_file() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    let dir = std::env::temp_dir().join(format!("kinformer-widgets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.toml");
    std::fs::write(
        &file,
        "[[informers]]\nresource = \"widgets\"\n[[informers.subscribers]]\nname = \"a\"\n\
         [[informers]]\nresource = \"cm\"\n[[informers.subscribers]]\nname = \"b\"\n",
    )
    .unwrap();
    let out = run_to_end(
        kinformer().args([
            "run",
            "--config",
            file.to_str().unwrap(),
            "--server",
            &server.url(),
            "--for",
            "2s",
        ]),
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("widgets (example.com/v1/widgets): synced true"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cm (v1/configmaps): synced true"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    server.shutdown();
}

/// Finding 6: a cluster-scoped resource says so.
#[test]
fn cluster_scoped_resources_say_cluster_scoped() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    let out = run_to_end(
        kinformer().args([
            "watch",
            "namespaces",
            "--server",
            &server.url(),
            "--for",
            "1s",
        ]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("watching v1/namespaces (cluster-scoped"),
        "{stderr}"
    );
    assert!(!stderr.contains("all namespaces"), "{stderr}");
    server.shutdown();
}

/// Finding 4: no escape codes in a log written to a file (stderr is no terminal).
#[test]
fn logs_written_to_a_file_carry_no_colour_codes() {
    let path = std::env::temp_dir().join(format!("kinformer-log-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    let status = kinformer()
        .env("RUST_LOG", "info")
        .args([
            "watch",
            "configmaps",
            "--server",
            &server.url(),
            "--for",
            "1s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .status()
        .expect("run");
    assert!(status.success());
    let log = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in {log:?}");
    server.shutdown();
}

/// Finding 5: a failing request is reported once, by kinformer, not also
/// by kube-client's `ERROR … failed with error` (which RUST_LOG naming
/// kube_client brings back). The server goes away after the initial sync:
/// every re-watch and relist is refused.
#[test]
fn each_failure_is_logged_once_by_kinformer() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.seed_configmaps("default", 1).unwrap();
    let url = server.url();
    let children: Vec<_> = [None, Some("warn,kube_client=error")]
        .into_iter()
        .map(|rust_log| {
            let mut cmd = kinformer();
            match rust_log {
                Some(l) => cmd.env("RUST_LOG", l),
                None => cmd.env_remove("RUST_LOG"),
            };
            let mut child = cmd
                .args(["watch", "configmaps", "-A", "--server", &url, "--for", "4s"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            let rx = common::stdout_lines(&mut child);
            (child, rx)
        })
        .collect();
    for (_, rx) in &children {
        let line = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the initial add");
        assert!(line.contains("initial"), "{line}");
    }
    server.shutdown();
    let stderr: Vec<String> = children
        .into_iter()
        .map(|(child, _)| {
            let out = wait_output(child, Duration::from_secs(30));
            String::from_utf8_lossy(&out.stderr).into_owned()
        })
        .collect();
    let default = &stderr[0];
    let ours = default
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("failed"))
        .count();
    assert!(ours >= 1, "{default}");
    assert!(
        default
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("failed"))
            .all(|l| l.contains("retrying")),
        "each failure line says when it is retried:\n{default}"
    );
    assert!(
        !default.contains("kube_client"),
        "a second line per failure:\n{default}"
    );
    assert!(
        stderr[1].contains("kube_client") && stderr[1].contains("failed with error"),
        "not reachable with RUST_LOG:\n{}",
        stderr[1]
    );
}

/// `kinformer get`: the synced cache once, as a table, JSON or YAML, then exit 0.
#[test]
fn get_prints_the_cache_once_as_a_table_json_or_yaml() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.seed_configmaps("default", 3).unwrap();
    let other = serde_json::json!({"metadata": {"name": "elsewhere", "labels": {"app": "x"}}});
    server
        .create("", "configmaps", Some("kube-system"), other)
        .unwrap();
    let url = server.url();
    let get = |args: &[&str]| {
        let out = run_to_end(
            kinformer().arg("get").args(args).args(["--server", &url]),
            Duration::from_secs(30),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        (stdout, stderr)
    };
    // The kubeconfig-less default namespace ("default"), no NAMESPACE column.
    let (table, _) = get(&["configmaps", "-n", "default"]);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(
        rows[0].starts_with("NAME ") && rows[0].ends_with("AGE"),
        "{table}"
    );
    assert!(rows[1].starts_with("seed-000000 "), "{table}");
    // -A: a NAMESPACE column, every namespace; -l filters.
    let (table, _) = get(&["cm", "-A"]);
    assert!(table.starts_with("NAMESPACE "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("kube-system ") && l.contains("elsewhere")),
        "{table}"
    );
    let (table, _) = get(&["cm", "-A", "-l", "app=x"]);
    assert_eq!(table.lines().count(), 2, "{table}");
    // Nothing selected: kubectl's message on stderr, nothing on stdout.
    let (table, stderr) = get(&["cm", "-n", "default", "-l", "app=none"]);
    assert!(
        table.is_empty() && stderr.contains("No resources found in default namespace."),
        "{stderr}"
    );
    // -o json: a List of typed objects.
    let (json, _) = get(&["configmaps", "-n", "default", "-o", "json"]);
    let list: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3), "{list}");
    assert_eq!(list["items"][0]["metadata"]["name"], "seed-000000");
    assert!(
        list["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
    );
    // -o yaml: the same List.
    let (yaml, _) = get(&["configmaps", "-n", "default", "-o", "yaml"]);
    let from_yaml: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(from_yaml, list);
    server.shutdown();

    // A list the server refuses fails at once, with the reason.
    let fake = refusing_cluster();
    let started = Instant::now();
    let out = run_to_end(
        kinformer().args(["get", "configmaps", "--server", &fake.url]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("listing v1/configmaps") && stderr.contains("Forbidden"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// `watch -o yaml`: one YAML document per notification, each after `---`.
#[test]
fn watch_yaml_prints_one_document_per_notification() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    server.seed_configmaps("default", 2).unwrap();
    let url = server.url();
    let (mut child, rx) = spawn_reading(&[
        "watch",
        "configmaps",
        "-n",
        "default",
        "-o",
        "yaml",
        "--full",
        "--resync",
        "1s",
        "--for",
        "60s",
        "--server",
        &url,
    ]);
    let mut documents: Vec<String> = Vec::new();
    // Two documents are complete once the third starts (a resync's, at the latest).
    while documents.len() < 3 {
        let line = rx.recv_timeout(Duration::from_secs(15)).expect("a line");
        if line == "---" {
            documents.push(String::new());
        } else {
            let doc = documents.last_mut().expect("a document starts with ---");
            doc.push_str(&line);
            doc.push('\n');
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    for doc in &documents[..2] {
        let v: Value = serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
        assert_eq!(v["type"], "Added", "{doc}");
        assert_eq!(v["cause"], "initial", "{doc}");
        assert_eq!(v["object"]["kind"], "ConfigMap", "{doc}");
        assert!(
            v["key"].as_str().unwrap().starts_with("default/seed-"),
            "{doc}"
        );
    }
    server.shutdown();
}

/// Issue 29: Secret data and bearer tokens appear nowhere, at any log
/// level: `watch secrets` prints keys and resourceVersions; `--full`
/// redacts the values; only `--show-secrets` prints them.
#[test]
fn secret_data_and_tokens_never_appear_in_output_or_logs() {
    const VALUE: &str = "s3cr3t-VALUE-4711";
    const TOKEN: &str = "tok-ZXY-bearer-0815";
    let encoded = "czNjcjN0LVZBTFVFLTQ3MTE="; // base64 of VALUE
    let server = ApiServer::start_in_thread(ServerConfig::default()).expect("server");
    let secret = |rev: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": format!("{{\"data\":{{\"password\":\"{encoded}\"}}}}"),
                "rev": rev}},
            "type": "Opaque",
            "data": {"password": encoded},
        })
    };
    server
        .create("", "secrets", Some("default"), secret("1"))
        .unwrap();
    let kubeconfig =
        std::env::temp_dir().join(format!("kinformer-token-kubeconfig-{}", std::process::id()));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters:\n- name: k\n  cluster:\n    server: {}\n\
             contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n    namespace: default\n\
             users:\n- name: u\n  user:\n    token: {TOKEN}\n",
            server.url()
        ),
    )
    .unwrap();
    let watch = |extra: &[&str]| {
        let mut child = kinformer()
            .env("RUST_LOG", "trace")
            .env("KUBECONFIG", &kubeconfig)
            .args([
                "watch", "secrets", "-o", "json", "--resync", "1s", "--for", "60s",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let rx = common::stdout_lines(&mut child);
        let mut out = Vec::new();
        // The initial add, then an update through the watch, then a resync.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut updated = false;
        while !out.iter().any(|l: &String| l.contains("\"resync\"")) || !updated {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("notifications: {out:?}"));
            if line.contains("\"initial\"") && !updated {
                server
                    .update("", "secrets", Some("default"), secret("2"))
                    .unwrap();
                updated = true;
            }
            out.push(line);
        }
        let _ = child.kill();
        let output = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (out.join("\n"), stderr)
    };
    for extra in [&[][..], &["--full"][..]] {
        let (stdout, stderr) = watch(extra);
        assert!(
            stderr.contains("TRACE") || stderr.contains("DEBUG"),
            "logs at trace: {stderr:.2000}"
        );
        for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            for leak in [VALUE, encoded, TOKEN] {
                assert!(!text.contains(leak), "{extra:?}: {leak} in {what}");
            }
        }
        let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
        assert_eq!(first["key"], "default/db");
        assert!(
            first["resourceVersion"]
                .as_str()
                .is_some_and(|rv| !rv.is_empty())
        );
        if extra.is_empty() {
            assert!(first.get("object").is_none(), "{first}");
        } else {
            assert_eq!(
                first["object"]["data"]["password"], "<redacted: 17 bytes>",
                "{first}"
            );
        }
    }
    // The values are there to print when asked for: the scan above could fail.
    let (stdout, _) = watch(&["--full", "--show-secrets"]);
    assert!(stdout.contains(encoded), "{stdout}");
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown();
}

/// `watch --help` says which resource names are accepted.
#[test]
fn watch_help_lists_the_accepted_resource_names() {
    let out = kinformer().args(["watch", "--help"]).output().expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for words in [
        "plural",
        "singular",
        "kind",
        "short name",
        "deployments.apps",
        "deployments.v1.apps",
    ] {
        assert!(help.contains(words), "{words}: {help}");
    }
}

/// A server URL with credentials is refused before anything is printed or
/// stored (the URL would go into the banner and the snapshot keys).
#[test]
fn a_server_url_with_credentials_is_refused() {
    let out = run_to_end(
        kinformer().args([
            "run",
            "--server",
            "http://admin:hunter2@127.0.0.1:9",
            "--for",
            "1s",
        ]),
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("credentials"), "{stderr}");
    assert!(
        !stdout.contains("hunter2") && !stderr.contains("hunter2"),
        "{stdout}{stderr}"
    );
}

/// A metrics port already in use fails the run before it connects or lists
/// anything (the lists would be thrown away).
#[test]
fn a_metrics_port_in_use_fails_before_anything_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = run_to_end(
        kinformer().args(["run", "--embedded", "--for", "20s", "--metrics", &port]),
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("cannot listen"), "{stderr}");
    assert!(!stdout.contains("embedded"), "nothing started: {stdout}");
}
