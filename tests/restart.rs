//! An informer rides through a restart of the embedded API server: its watch is reset,
//! the server is down for a moment while objects change (as another apiserver in front of
//! the same etcd would change them), and comes back with the same objects and
//! resourceVersions. It resumes without a relist when the watch history survived, and
//! relists (after the 410) when it did not; either way its view ends equal to the server's.

mod common;

use common::*;
use kinformer_apiserver::{CloseMode, RestartOptions};

async fn ride_through_a_restart(options: RestartOptions) -> kinformer::InformerStats {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = informer(&server).backoff(fast_backoff()).start().unwrap();
    let log = subscribed(&informer).await;
    // An event on the watch, so its end is not a "very short watch".
    create(&server, "before", "1");
    converges(&server, &log, "the event before the restart").await;
    assert_eq!(informer.stats().relists, 0);

    server.stop_serving(options).await.unwrap();
    assert!(!server.is_serving());
    create(&server, "during", "1");
    server
        .delete("", "configmaps", Some("default"), "seed-000001")
        .unwrap();
    let mut changed = server
        .get("", "configmaps", Some("default"), "seed-000002")
        .unwrap();
    changed["data"]["extra"] = "changed during the outage".into();
    server
        .update("", "configmaps", Some("default"), changed)
        .unwrap();
    server.start_serving().await.unwrap();
    assert_eq!(server.serving_state().epoch, 1);

    converges(&server, &log, "the changes made while the server was down").await;
    create(&server, "after", "1");
    converges(&server, &log, "the watch after the restart").await;
    let cached: std::collections::BTreeMap<String, String> = informer
        .store()
        .snapshot()
        .list()
        .iter()
        .map(|cm| {
            (
                format!(
                    "default/{}",
                    cm.metadata.name.as_deref().unwrap_or_default()
                ),
                cm.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(cached, server_view(&server), "the cache equals the server");
    assert!(log.lock().unwrap().out_of_order().is_none());
    informer.stats()
}

#[actix::test]
async fn an_informer_resumes_without_relist_when_the_history_survives_a_restart() {
    let stats = ride_through_a_restart(RestartOptions::default().keep_history()).await;
    assert_eq!(stats.relists, 0, "{stats:?}");
    assert!(stats.watch_restarts >= 1, "{stats:?}");
}

#[actix::test]
async fn an_informer_relists_when_the_history_is_lost_in_a_restart() {
    let stats = ride_through_a_restart(RestartOptions::default().close(CloseMode::Eof)).await;
    assert!(stats.relists >= 1, "{stats:?}");
}
