//! `kinformer run --metrics PORT`: bound to the loopback interface,
//! `/metrics` counters move with the workload, `/healthz` and `/readyz`
//! answer (`/readyz` 503 until every informer has synced), an oversized
//! request is refused, and Ctrl-C (SIGINT) or SIGTERM stops the program
//! gracefully with a summary.

mod common;

use common::http_get as get;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The status answered to a GET whose path is `len` bytes long. The server
/// may close before reading it all (a reset after its answer): what was
/// read before counts.
fn refused_status(addr: SocketAddr, len: usize) -> u16 {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let request = format!(
        "GET /metrics?{} HTTP/1.1\r\nHost: {addr}\r\n\r\n",
        "x".repeat(len)
    );
    let _ = stream.write_all(request.as_bytes());
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&response)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `name{labels} value` lines → map from `name{labels}` to value.
fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of `name` whose labels contain all of `labels`.
fn value(metrics: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| {
            (k.as_str() == name || k.starts_with(&format!("{name}{{")))
                && labels.iter().all(|l| k.contains(l))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Polls `f` until it returns `Some`, at most `limit`.
fn until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_move_with_the_workload_and_sigint_stops_gracefully() {
    let mut cmd = common::kinformer_command();
    let mut child = cmd
        .args([
            "run",
            "--embedded",
            "--for",
            "60s",
            // A bare port: on the loopback interface only.
            "--metrics",
            "0",
        ])
        .args(["--seed", "300", "--churn", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kinformer");
    let rx = common::stdout_lines(&mut child);
    let (addr, _) = common::metrics_address(&rx, Duration::from_secs(20))
        .unwrap_or_else(|seen| panic!("no metrics address printed: {seen:?}"));

    assert!(addr.ip().is_loopback(), "bound to {addr}");
    assert_eq!(get(addr, "/healthz").unwrap().0, 200);
    // A request head far past any scrape's is refused; serving goes on.
    assert_eq!(refused_status(addr, 64 * 1024), 431);
    assert_eq!(get(addr, "/healthz").unwrap().0, 200);
    until(Duration::from_secs(20), "ready", || {
        (get(addr, "/readyz").ok()?.0 == 200).then_some(())
    });

    let cm = r#"informer="configmaps""#;
    // Ready means the cache is synced; the subscriber may still be handling
    // its initial adds.
    let first = until(Duration::from_secs(20), "initial adds handled", || {
        let m = parse(&get(addr, "/metrics").ok()?.1);
        let initial = value(
            &m,
            "kinformer_notifications_total",
            &[cm, r#"subscriber="fast""#, r#"cause="initial""#],
        );
        (initial >= 300.0).then_some(m)
    });
    assert_eq!(value(&first, "kinformer_synced", &[cm]), 1.0);
    assert!(
        value(&first, "kinformer_objects", &[cm]) >= 300.0,
        "{first:?}"
    );
    let initial = value(
        &first,
        "kinformer_notifications_total",
        &[cm, r#"subscriber="fast""#, r#"cause="initial""#],
    );
    assert!(initial >= 300.0, "initial notifications: {initial}");
    assert!(first.contains_key(&format!(
        r#"kinformer_queue_depth{{{cm},actor="delta_fifo"}}"#
    )));
    assert!(
        first
            .keys()
            .any(|k| k.starts_with("kinformer_subscriber_pending{")
                && k.contains(r#"subscriber="slow""#))
    );
    assert!(
        first
            .keys()
            .any(|k| k.starts_with("kinformer_subscriber_in_flight{")
                && k.contains(r#"subscriber="slow""#))
    );
    assert!(
        value(&first, "kinformer_lists_total", &[cm]) >= 1.0,
        "at least the initial list is counted"
    );
    for name in [
        "kinformer_watch_ends_total",
        "kinformer_backoff_milliseconds_total",
        "kinformer_reflector_panics_total",
        "kinformer_fifo_queued_keys",
        "kinformer_fifo_saturated",
        "kinformer_relists_total",
        "kinformer_watch_restarts_total",
        "kinformer_failures_total",
        "kinformer_resource_version_age_seconds",
        "kinformer_subscriber_coalesced_total",
        "kinformer_subscriber_resyncs_total",
    ] {
        assert!(first.keys().any(|k| k.starts_with(name)), "{name} missing");
    }

    // The churn keeps writing: watch events, cache changes and watch-caused
    // notifications all grow between scrapes.
    let events = |m: &BTreeMap<String, f64>| value(m, "kinformer_watch_events_total", &[cm]);
    let updates = |m: &BTreeMap<String, f64>| {
        value(
            m,
            "kinformer_cache_changes_total",
            &[cm, r#"type="updated""#],
        )
    };
    let watched = |m: &BTreeMap<String, f64>| {
        value(
            m,
            "kinformer_notifications_total",
            &[cm, r#"subscriber="fast""#, r#"cause="watch""#],
        )
    };
    let later = until(Duration::from_secs(15), "counters moving", || {
        let m = parse(&get(addr, "/metrics").ok()?.1);
        (events(&m) >= events(&first) + 50.0
            && updates(&m) > updates(&first)
            && watched(&m) >= watched(&first) + 50.0)
            .then_some(m)
    });
    assert!(value(&later, "kinformer_resource_version_age_seconds", &[cm]) < 10.0);

    // Ctrl-C: a graceful stop with a summary, exit 0.
    common::expect_graceful_stop(child, "-INT", "interrupted", &rx);
}

/// The readiness probe's contract (deploy/30-deployment.yaml): `/readyz`
/// answers 503 naming the informers still waiting while the initial list
/// cannot succeed, and 200 once it has; `/healthz` answers 200 throughout.
#[test]
fn readyz_answers_503_until_every_informer_has_synced() {
    use kinformer_apiserver::{Failure, Verb};
    let server = common::server(1_000);
    server.seed_configmaps("default", 20).unwrap();
    // Every list fails until the faults are cleared.
    server
        .faults()
        .fail_next(Verb::List, u32::MAX, Failure::Internal);
    let mut child = common::kinformer_command()
        .args(["run", "--server", &server.url(), "--for", "60s"])
        .args(["--metrics", "0"])
        .env("KINFORMER__ENGINE__BACKOFF__INITIAL", "20ms")
        .env("KINFORMER__ENGINE__BACKOFF__CAP", "100ms")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kinformer");
    let rx = common::stdout_lines(&mut child);
    let (addr, _) = common::metrics_address(&rx, Duration::from_secs(20))
        .unwrap_or_else(|seen| panic!("no metrics address printed: {seen:?}"));
    let failed_lists = || {
        server
            .requests()
            .records()
            .iter()
            .filter(|r| r.verb == "list" && r.status == 500)
            .count()
    };
    until(Duration::from_secs(20), "a failed list", || {
        (failed_lists() >= 2).then_some(())
    });
    assert_eq!(
        get(addr, "/readyz").unwrap(),
        (503, "not synced: configmaps\n".to_owned())
    );
    assert_eq!(get(addr, "/healthz").unwrap().0, 200);

    server.faults().clear();
    until(
        Duration::from_secs(20),
        "ready after the faults cleared",
        || (get(addr, "/readyz").ok()? == (200, "ready\n".to_owned())).then_some(()),
    );
    assert_eq!(get(addr, "/healthz").unwrap().0, 200);
    common::expect_graceful_stop(child, "-TERM", "terminated", &rx);
}

/// One `kinformer run` replica with `[leader_election]`, against `server`.
struct Replica {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    addr: SocketAddr,
    _dir: common::TestDir,
}

impl Replica {
    fn start(server: &kinformer_apiserver::ServerHandle, identity: &str) -> Replica {
        let dir = common::TestDir::new(&format!("kinformer-le-test-{identity}"));
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[observability]\nstatus_interval = \"100ms\"\n\
                 [leader_election]\nlease_name = \"kinformer-run\"\nidentity = \"{identity}\"\n\
                 lease_duration = \"1s\"\nrenew_deadline = \"600ms\"\nretry_period = \"200ms\"\n"
            ),
        )
        .unwrap();
        let mut child = common::kinformer_command()
            .args(["run", "--config", config.to_str().unwrap()])
            .args(["--server", &server.url(), "--for", "60s", "--metrics", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kinformer");
        let lines = common::stdout_lines(&mut child);
        let (addr, seen) = common::metrics_address(&lines, Duration::from_secs(20))
            .unwrap_or_else(|seen| panic!("no metrics address printed: {seen:?}"));
        Replica {
            child,
            lines,
            seen,
            addr,
            _dir: dir,
        }
    }

    fn leader_metrics(&self) -> Option<(f64, f64)> {
        let m = parse(&get(self.addr, "/metrics").ok()?.1);
        let lease = r#"lease="default/kinformer-run""#;
        Some((
            value(&m, "kinformer_leader", &[lease]),
            value(&m, "kinformer_leader_transitions_total", &[lease]),
        ))
    }

    /// The stdout lines so far.
    fn lines(&mut self) -> &[String] {
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }
}

#[test]
fn leader_election_shows_in_the_status_line_and_metrics_and_sigterm_hands_over() {
    let server = common::server(10_000);
    let mut replicas = vec![Replica::start(&server, "a"), Replica::start(&server, "b")];
    let leader = until(Duration::from_secs(20), "one leader", || {
        let states: Vec<_> = replicas
            .iter()
            .map(|r| r.leader_metrics().map(|(l, _)| l))
            .collect::<Option<_>>()?;
        (states.iter().sum::<f64>() == 1.0).then(|| states.iter().position(|l| *l == 1.0))?
    });
    let (lid, sid) = (["a", "b"][leader], ["a", "b"][1 - leader]);
    let standby = 1 - leader;
    until(Duration::from_secs(10), "status lines", || {
        let l = replicas[leader].lines().iter().any(|l| {
            l == &format!(
                "leader election: leader: this replica ({lid}) holds default/kinformer-run"
            )
        });
        let s = replicas[standby]
            .lines()
            .iter()
            .any(|l| l == &format!("leader election: standby ({sid}), leader: {lid}"));
        (l && s).then_some(())
    });
    assert_eq!(replicas[standby].leader_metrics(), Some((0.0, 0.0)));
    // The transitions count comes from a task of its own that reads the
    // elector's events: it may follow the gauge.
    until(
        Duration::from_secs(10),
        "the leader's transition counted",
        || (replicas[leader].leader_metrics() == Some((1.0, 1.0))).then_some(()),
    );

    // SIGTERM: the leader releases the Lease on its way out, the standby
    // takes over at its next try.
    let old = replicas.remove(leader);
    common::expect_graceful_stop(old.child, "-TERM", "terminated", &old.lines);
    let new = &mut replicas[0];
    until(Duration::from_secs(5), "the standby leads", || {
        (new.leader_metrics()? == (1.0, 1.0)).then_some(())
    });
    until(Duration::from_secs(5), "its status line says so", || {
        new.lines()
            .iter()
            .any(|l| l.starts_with(&format!("leader election: leader: this replica ({sid})")))
            .then_some(())
    });
    let new = replicas.remove(0);
    common::expect_graceful_stop(new.child, "-TERM", "terminated", &new.lines);
}
