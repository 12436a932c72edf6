//! An informer rides through a restart of the embedded API server held for 30 s
//! (issue 28 findings 2 and 3), in driven time: the watch is reset, every connection
//! attempt while the server is down is accepted and reset (so the server counts them),
//! objects change meanwhile, and the server comes back. The informer re-watches from
//! its last resourceVersion (no relist when the history survived), keeps the backoff's
//! pace of list and watch requests while the server is away, and converges within 2 s
//! of its return. What it asked after the return is read from the server's request log.

mod common;

use std::time::Duration;

use common::*;
use kinformer_apiserver::{ApiServer, DownMode, RestartOptions, ServerConfig};
use tokio::time::Instant;

const OUTAGE: Duration = Duration::from_secs(30);
const SYNC: Duration = Duration::from_secs(60);

/// What a 30 s restart cost the informer.
#[derive(Debug)]
struct Restart {
    /// From the server serving again to the subscriber's view equal to the server's.
    recovered_after: Duration,
    /// List and watch requests that failed while the server was down.
    failed_requests: u64,
    /// Probes made while it was down.
    probes: u64,
    /// Connection attempts the server reset while down (requests and probes).
    attempts_seen_by_the_server: u64,
    relists: u64,
    /// List requests for ConfigMaps the server answered after its return.
    lists_after: usize,
    /// The resourceVersion the first watch after the return asked for, and the one the
    /// informer had synced before the outage.
    first_watch_after: Option<String>,
    synced_before: String,
}

/// The `resourceVersion` parameter of a query string.
fn resource_version(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .find_map(|p| p.strip_prefix("resourceVersion="))
        .map(str::to_owned)
}

/// Under paused time (call `tokio::time::pause` first): the 30 s pass at once.
async fn restart_held_30s(options: RestartOptions, probes: bool) -> Restart {
    let server = ApiServer::start(ServerConfig {
        history_limit: 10_000,
        ..ServerConfig::default()
    })
    .await
    .unwrap();
    server.seed_configmaps("default", 20).unwrap();
    // The library's default backoff: 800 ms doubling to 30 s.
    let informer = informer(&server).probes(probes).start().unwrap();
    let log = subscribed(&informer).await;
    // An event on the watch, so its end is not a "very short watch".
    create(&server, "before", "1");
    converges(&server, &log, "the event before the restart").await;
    let before = informer.stats();
    let synced_before = server
        .get("", "configmaps", Some("default"), "before")
        .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    let options = options.down_for(OUTAGE).while_down(DownMode::Reset);
    let restart = tokio::spawn({
        let server = server.clone();
        async move { server.restart(options).await }
    });
    eventually(SYNC, "the server down", || !server.is_serving()).await;
    create(&server, "during", "1");
    server
        .delete("", "configmaps", Some("default"), "seed-000001")
        .unwrap();
    restart.await.unwrap().unwrap();
    let up = Instant::now();
    let down = informer.stats();
    let attempts = server.requests().counts().reset_while_down;
    // Without probes the next attempt may come a minute after the return.
    let truth = server_view(&server);
    eventually(
        Duration::from_secs(120),
        "the changes made while down",
        || log.lock().unwrap().view == truth,
    )
    .await;
    let recovered_after = up.elapsed();
    create(&server, "after", "1");
    converges(&server, &log, "the watch after the restart").await;
    assert!(log.lock().unwrap().out_of_order().is_none());
    let after = informer.stats();
    // Answered after the return: the epoch counts the restarts the server went through.
    let since_return: Vec<_> = server
        .requests()
        .records()
        .into_iter()
        .filter(|r| r.epoch >= 1 && r.path.ends_with("/configmaps"))
        .collect();
    let first_watch_after = since_return
        .iter()
        .find(|r| r.verb == "watch")
        .and_then(|r| resource_version(r.query.as_deref()));
    Restart {
        lists_after: since_return.iter().filter(|r| r.verb == "list").count(),
        first_watch_after,
        synced_before,
        recovered_after,
        failed_requests: down.failures - before.failures,
        probes: down.probes - before.probes,
        attempts_seen_by_the_server: attempts,
        relists: after.relists - before.relists,
    }
}

/// The history survives: a re-watch resumes, no relist, within 2 s of the return. The
/// list and watch requests while down keep the backoff's pace, with probes as without.
#[actix::test]
async fn after_a_30s_restart_that_kept_the_history_a_rewatch_converges_within_2s() {
    tokio::time::pause();
    let probed = restart_held_30s(RestartOptions::default().keep_history(), true).await;
    assert!(
        probed.recovered_after <= Duration::from_secs(2),
        "{probed:?}"
    );
    assert_eq!(probed.relists, 0, "{probed:?}");
    assert_eq!(
        probed.lists_after, 0,
        "no list after the return: {probed:?}"
    );
    assert_eq!(
        probed.first_watch_after.as_ref(),
        Some(&probed.synced_before),
        "re-watched from the last resourceVersion: {probed:?}"
    );
    // Waits of at least 0.8, 1.6, 3.2, 6.4 and 12.8 s: at most 6 attempts in 30 s.
    assert!(probed.failed_requests <= 6, "{probed:?}");
    // At most two probes a second; every attempt the server saw is accounted for.
    assert!(probed.probes <= 60, "{probed:?}");
    assert_eq!(
        probed.attempts_seen_by_the_server,
        probed.failed_requests + probed.probes,
        "{probed:?}"
    );
    let waited = restart_held_30s(RestartOptions::default().keep_history(), false).await;
    assert_eq!(waited.relists, 0, "{waited:?}");
    assert_eq!(waited.lists_after, 0, "{waited:?}");
    assert!(waited.failed_requests <= 6, "{waited:?}");
    assert_eq!(waited.probes, 0);
    assert_eq!(waited.attempts_seen_by_the_server, waited.failed_requests);
}

/// The history is lost, as a real apiserver's watch cache is: the first re-watch after
/// the return gets a 410, and the relist comes at once, within 2 s of the return.
#[actix::test]
async fn after_a_30s_restart_that_lost_the_history_the_relist_converges_within_2s() {
    tokio::time::pause();
    let probed = restart_held_30s(RestartOptions::default(), true).await;
    assert!(
        probed.recovered_after <= Duration::from_secs(2),
        "{probed:?}"
    );
    assert_eq!(probed.relists, 1, "{probed:?}");
    // The re-watch from the last resourceVersion got the 410; one list followed.
    assert_eq!(
        probed.first_watch_after.as_ref(),
        Some(&probed.synced_before),
        "{probed:?}"
    );
    assert_eq!(
        probed.lists_after, 1,
        "one list after the return: {probed:?}"
    );
    assert!(probed.failed_requests <= 6, "{probed:?}");
    assert!(probed.probes <= 60, "{probed:?}");
}
