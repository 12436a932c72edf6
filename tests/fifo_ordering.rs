//! The DeltaFIFO's two orderings end to end: merged per key (client-go's
//! DeltaFIFO) and arrival order (client-go's RealFIFO), against the embedded
//! API server.

mod common;

use std::time::Duration;

use common::*;
use kinformer::{Cause, FifoOrdering, SubscribeOptions};

const SYNC: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(20);

const ORDERINGS: [FifoOrdering; 2] = [FifoOrdering::Merged, FifoOrdering::Arrival];

/// The names of the server's ConfigMaps in `default`.
fn names(server: &kinformer_apiserver::ServerHandle) -> Vec<String> {
    server_view(server)
        .keys()
        .map(|k| k.trim_start_matches("default/").to_owned())
        .collect()
}

/// A relist after an outage: one object deleted, one changed. Both
/// orderings give exactly one tombstone and one relist update (and no
/// update storm); merged delivers the delete after the relist's items
/// (DF-9), arrival order before them (RF-5).
/// The same with lists of 5 pages (merged: queued page by page; arrival:
/// kept until the end) and on a compact cache.
#[actix::test]
async fn a_relist_delivers_its_deletes_after_the_items_merged_and_before_them_in_arrival_order() {
    for (ordering, compact, page_size) in ORDERINGS
        .into_iter()
        .flat_map(|o| [(o, false, 500), (o, false, 4), (o, true, 4)])
    {
        let server = server(10_000);
        server.seed_configmaps("default", 20).unwrap();
        let mut builder = informer(&server)
            .fifo_ordering(ordering)
            .page_size(page_size);
        if compact {
            builder = builder.compact_cache(
                kinformer::CompactOptions::new()
                    .dictionary(8, 1024)
                    .recent(0),
            );
        }
        let informer = builder.start().unwrap();
        let (a, log) = Recorder::start();
        let _sub = informer
            .subscribe(a.recipient(), SubscribeOptions::default())
            .await
            .unwrap();
        informer.wait_for_sync(SYNC).await.unwrap();
        let names = names(&server);

        change_during_outage(&server, Some(&names[0]), &names[1]);

        converges(&server, &log, "view equals server after relist").await;
        eventually(SETTLE, "the relist ended", || informer.stats().relists >= 1).await;
        assert_eq!(informer.stats().compact.is_some(), compact);
        let events = log.lock().unwrap().events.clone();
        let deleted = format!("default/{}", names[0]);
        let updated = format!("default/{}", names[1]);
        let position = |f: &dyn Fn(&Seen) -> bool| {
            let at: Vec<usize> = (0..events.len()).filter(|&i| f(&events[i])).collect();
            assert_eq!(at.len(), 1, "{ordering:?}: {events:?}");
            at[0]
        };
        let tombstone = position(&|s| {
            s.key == deleted && s.kind == "Deleted" && s.unknown && s.cause == Cause::Relist
        });
        let relisted =
            position(&|s| s.key == updated && s.kind == "Updated" && s.cause == Cause::Relist);
        assert_eq!(
            events.iter().filter(|s| s.kind == "Updated").count(),
            1,
            "{ordering:?}: a relist is no update storm"
        );
        match ordering {
            FifoOrdering::Merged => assert!(relisted < tombstone, "{events:?}"),
            _ => assert!(tombstone < relisted, "{events:?}"),
        }
        informer.stop().await;
    }
}

/// Changes of two objects while the subscriber is stalled: `a`, `b`, `a`.
/// Merged, `a`'s two changes travel together (`a`, `a`, `b`); in arrival
/// order they come out as they went in. Either way nothing is lost.
#[actix::test]
async fn changes_behind_a_stalled_subscriber_come_out_merged_per_key_or_in_arrival_order() {
    for ordering in ORDERINGS {
        let server = server(10_000);
        let informer = informer(&server)
            .fifo_options(
                kinformer::FifoOptions::default()
                    .batch_size(16)
                    .initial_batch_size(16),
            )
            .fifo_ordering(ordering)
            .start()
            .unwrap();
        let (gate, sub, log) = gated_block_subscriber(Kind::Actor, &informer, true).await;
        informer.wait_for_sync(SYNC).await.unwrap();
        create(&server, "a", "0");
        create(&server, "b", "0");
        converges(&server, &log, "a and b reach the subscriber").await;

        // Fill the stalled subscriber's queue and the Indexer's parked chunk,
        // with more than a batch left in the DeltaFIFO: it cannot pop again.
        gate.send_replace(false);
        for i in 0..120 {
            create(&server, &format!("fill-{i}"), "1");
        }
        eventually(
            SETTLE,
            "the pipeline fills up to the stalled subscriber",
            || sub.stats().pending >= 8 && informer.stats().queued_deltas > 32,
        )
        .await;
        let mut last_rv = String::new();
        for (name, value) in [("a", "1"), ("b", "1"), ("a", "2")] {
            let mut o = server.get("", "configmaps", Some("default"), name).unwrap();
            o["data"]["value"] = value.into();
            let written = server.update("", "configmaps", Some("default"), o).unwrap();
            last_rv = written["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        // The DeltaFIFO accepted the last change: all three are queued.
        eventually(SETTLE, "the DeltaFIFO accepted the three changes", || {
            informer.last_sync_resource_version() == last_rv
        })
        .await;

        gate.send_replace(true);
        converges(&server, &log, "the stalled subscriber catches up").await;
        {
            let log = log.lock().unwrap();
            let order: Vec<&str> = log
                .events
                .iter()
                .filter(|s| s.kind == "Updated" && (s.key == "default/a" || s.key == "default/b"))
                .map(|s| s.key.trim_start_matches("default/"))
                .collect();
            let expected = match ordering {
                FifoOrdering::Merged => ["a", "a", "b"],
                _ => ["a", "b", "a"],
            };
            assert_eq!(order, expected, "{ordering:?}");
            assert_eq!(log.out_of_order().map(|s| (&s.key, &s.rv)), None);
            assert_eq!(log.count(|s| s.key.starts_with("default/fill-")), 120);
        }
        informer.stop().await;
    }
}

/// Arrival order keeps every event, so the high watermark counts each one:
/// many changes of a few objects behind a stalled subscriber hold the
/// Reflector back exactly as merged deltas do.
#[actix::test]
async fn arrival_order_holds_the_reflector_back_behind_a_stalled_subscriber() {
    let server = server(100_000);
    server.seed_configmaps("default", 4).unwrap();
    let informer = informer(&server)
        .fifo_options(
            kinformer::FifoOptions::default()
                .batch_size(16)
                .initial_batch_size(16)
                .high_watermark(64),
        )
        .fifo_ordering(FifoOrdering::Arrival)
        .start()
        .unwrap();
    let (gate, sub, log) = gated_block_subscriber(Kind::Actor, &informer, true).await;
    informer.wait_for_sync(SYNC).await.unwrap();
    gate.send_replace(false);
    let names = names(&server);
    for i in 0..1_000 {
        let name = &names[i % names.len()];
        let mut o = server.get("", "configmaps", Some("default"), name).unwrap();
        o["data"]["value"] = i.to_string().into();
        server.update("", "configmaps", Some("default"), o).unwrap();
    }
    eventually(SETTLE, "the DeltaFIFO holds the Reflector back", || {
        informer.stats().fifo_saturated
    })
    .await;
    // At most the watermark plus one watch batch (≤ 256 events) is queued,
    // though only 4 keys are.
    let stats = informer.stats();
    assert!(stats.queued_deltas <= 64 + 256 + 16, "{stats:?}");
    assert!(stats.queued_keys <= 4, "{stats:?}");
    assert!(stats.events < 1_000, "the watch is held back: {stats:?}");
    assert!(sub.stats().pending <= 8 + 16);

    gate.send_replace(true);
    converges(&server, &log, "the stalled subscriber catches up").await;
    let log = log.lock().unwrap();
    assert_eq!(
        log.count(|s| s.kind == "Updated" && s.cause == Cause::Watch),
        1_000,
        "arrival order delivers every change"
    );
    assert_eq!(log.out_of_order().map(|s| (&s.key, &s.rv)), None);
}
