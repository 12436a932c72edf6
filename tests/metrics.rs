//! `kinformer run --metrics PORT`: bound to the loopback interface,
//! `/metrics` counters move with the workload, `/healthz` and `/readyz`
//! answer, an oversized request is refused, and Ctrl-C (SIGINT) stops the
//! program gracefully with a summary.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A minimal HTTP/1.1 GET (test-side only): status code and body.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

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
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let addr: SocketAddr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no metrics address printed: {seen:?}"));
        if let Some(rest) = line.strip_prefix("kinformer: metrics on http://") {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
        seen.push(line);
    };

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
