//! The `kinformer` binary, end to end: `run --embedded --for 5s` and
//! `watch configmaps -A -o json` against an embedded server the test starts,
//! with writes made through kube-client.

mod common;

use std::io::{BufRead, BufReader};
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

/// Reads a child's stdout lines on a thread.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
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
    let rx = lines(&mut child);
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
    let rx = lines(&mut child);
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
    let rx = lines(&mut child);
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
    let rx = lines(&mut child);
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
    let rx = lines(&mut child);
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
    let out = run_to_end(
        kinformer().args([
            "watch",
            "configmaps",
            "-l",
            "a in (b",
            "--embedded",
            "--for",
            "3s",
        ]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("never synced: last list failed") && stderr.contains("BadRequest"),
        "{stderr}"
    );
}
