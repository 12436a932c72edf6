//! A relist after an outage with many changes: every change and delete arrives.

mod common;

use std::time::Duration;

use common::*;
use kinformer::{Cause, SubscribeOptions};

#[actix::test]
async fn relist_after_outage_with_many_changes_converges() {
    let server = server(100_000);
    server.seed_configmaps("default", 3_000).unwrap();
    let informer = informer(&server).start().unwrap();
    let (a, log) = Recorder::start();
    let _sub = informer
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer
        .wait_for_sync(Duration::from_secs(60))
        .await
        .unwrap();
    let names: Vec<String> = server_view(&server)
        .keys()
        .map(|k| k.trim_start_matches("default/").to_owned())
        .collect();
    server.faults().stall_watches(true);
    for name in names.iter().take(300) {
        let mut o = server.get("", "configmaps", Some("default"), name).unwrap();
        o["data"]["changed"] = "yes".into();
        server.update("", "configmaps", Some("default"), o).unwrap();
    }
    for name in names.iter().skip(300).take(30) {
        server
            .delete("", "configmaps", Some("default"), name)
            .unwrap();
    }
    server.faults().compact();
    server.faults().close_all_watches();
    server.faults().stall_watches(false);
    converges(&server, &log, "relist with 10% changed and 1% deleted").await;
    let log = log.lock().unwrap();
    assert_eq!(
        log.count(|s| s.kind == "Updated" && s.cause == Cause::Relist),
        300
    );
    assert_eq!(log.count(|s| s.kind == "Deleted" && s.unknown), 30);
}
