//! The actor engine end to end, against the embedded API server with
//! kube-client as the real transport.

mod common;

use std::time::Duration;

use common::*;
use kinformer::{Cause, OverflowPolicy, SubscribeOptions};
use kinformer_apiserver::{Failure, Verb};
use tokio::sync::watch;

const SYNC: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(20);

/// Creates `name` and waits until the subscriber has seen it.
async fn warm_up(
    server: &kinformer_apiserver::ServerHandle,
    log: &std::sync::Arc<std::sync::Mutex<Log>>,
    name: &str,
) {
    create(server, name, "warm");
    let key = format!("default/{name}");
    eventually(SETTLE, "the warm-up event", || {
        log.lock().unwrap().view.contains_key(&key)
    })
    .await;
}

async fn initial_sync_across_pages_then_changes_reach_every_subscriber_in_order<K: Cached>(
    kind: Kind,
) {
    let server = server(10_000);
    server.seed_configmaps("default", 10_000).unwrap();
    let informer = kind.start(K::informer(&server).page_size(500));
    let (sub_a, log_a) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    let (sub_b, log_b) = kind
        .subscribe(
            &informer,
            SubscribeOptions::default().policy(OverflowPolicy::Coalesce),
            None,
        )
        .await;
    informer.wait_for_sync(SYNC).await.unwrap();
    sub_a.wait_for_sync(SYNC).await.unwrap();
    sub_b.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(informer.store().snapshot().len(), 10_000);
    assert!(informer.stats().list_progress.0 >= 10_000);
    for log in [&log_a, &log_b] {
        let log = log.lock().unwrap();
        assert_eq!(
            log.count(|s| s.kind == "Added" && s.cause == Cause::Initial),
            10_000
        );
    }

    create(&server, "x", "1");
    let mut cm = server.get("", "configmaps", Some("default"), "x").unwrap();
    cm["data"]["value"] = "2".into();
    server
        .update("", "configmaps", Some("default"), cm)
        .unwrap();
    server
        .delete("", "configmaps", Some("default"), "x")
        .unwrap();
    let truth = server_view(&server);
    eventually(
        SETTLE,
        "the delete of x reaches the Block subscriber",
        || {
            let log = log_a.lock().unwrap();
            log.view == truth && log.count(|s| s.key == "default/x" && s.kind == "Deleted") == 1
        },
    )
    .await;
    // The Coalesce subscriber may merge Added+Deleted of x into nothing; it
    // must have caught up and hold the same final state.
    eventually(SETTLE, "the Coalesce subscriber caught up", || {
        sub_b.stats().pending == 0 && log_b.lock().unwrap().view == truth
    })
    .await;
    // The Block subscriber sees every change of x, in order; Coalesce may merge.
    let kinds: Vec<_> = log_a
        .lock()
        .unwrap()
        .events
        .iter()
        .filter(|s| s.key == "default/x")
        .map(|s| (s.kind, s.cause))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("Added", Cause::Watch),
            ("Updated", Cause::Watch),
            ("Deleted", Cause::Watch)
        ]
    );
    assert_eq!(informer.stats().relists, 0);
}

#[actix::test]
async fn forced_watch_close_resumes_from_last_rv_without_relist_or_duplicates() {
    let server = server(10_000);
    server.seed_configmaps("default", 50).unwrap();
    let informer = informer(&server).start().unwrap();
    let (a, log) = Recorder::start();
    let _sub = informer
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();

    for round in 0..3 {
        // One event on the current watch first: a watch closed with no event in
        // under a second is a "very short watch" and relists by design.
        warm_up(&server, &log, &format!("warm{round}")).await;
        let restarts = informer.stats().watch_restarts;
        server.faults().close_all_watches();
        server
            .create(
                "",
                "configmaps",
                Some("default"),
                configmap(&format!("c{round}"), "v"),
            )
            .unwrap();
        eventually(SETTLE, "the watch is re-opened", || {
            informer.stats().watch_restarts > restarts
        })
        .await;
    }
    converges(&server, &log, "view equals server").await;
    let stats = informer.stats();
    assert_eq!(stats.relists, 0, "a clean close must re-watch, not relist");
    assert!(stats.watch_restarts >= 3);
    let log = log.lock().unwrap();
    for round in 0..3 {
        let key = format!("default/c{round}");
        assert_eq!(
            log.count(|s| s.key == key),
            1,
            "exactly one Added for {key}"
        );
    }
}

async fn compaction_forces_relist_with_tombstones_and_no_update_storm<K: Cached>(kind: Kind) {
    let server = server(10_000);
    server.seed_configmaps("default", 100).unwrap();
    let informer = kind.start(K::informer(&server));
    let (_sub, log) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    informer.wait_for_sync(SYNC).await.unwrap();
    let names: Vec<String> = server_view(&server)
        .keys()
        .map(|k| k.trim_start_matches("default/").to_owned())
        .collect();

    // The watch sees nothing while we delete one object and change another,
    // then history is compacted and the watch closed: resuming gets a 410.
    change_during_outage(&server, Some(&names[0]), &names[1]);

    converges(&server, &log, "view equals server after relist").await;
    // Counted once the DeltaFIFO answered the relist, which may be after
    // the subscriber converged.
    eventually(SETTLE, "the relist counted", || {
        informer.stats().relists >= 1
    })
    .await;
    let log = log.lock().unwrap();
    let deleted = format!("default/{}", names[0]);
    let updated = format!("default/{}", names[1]);
    assert_eq!(
        log.count(|s| s.key == deleted
            && s.kind == "Deleted"
            && s.unknown
            && s.cause == Cause::Relist),
        1
    );
    assert_eq!(
        log.count(|s| s.key == updated && s.kind == "Updated" && s.cause == Cause::Relist),
        1
    );
    // The 98 unchanged objects reach no subscriber that is not due for resync.
    assert_eq!(
        log.count(|s| s.kind == "Updated"),
        1,
        "a relist is no update storm: {:?}",
        log.events.len()
    );
}

async fn each_subscriber_resyncs_at_its_own_period<K: Cached>(kind: Kind) {
    let server = server(10_000);
    server.seed_configmaps("default", 5).unwrap();
    let informer = kind.start(K::informer(&server));
    let t0 = tokio::time::Instant::now();
    let resyncing = |secs| SubscribeOptions::default().resync(Duration::from_secs(secs));
    let (_fast, fast_log) = kind.subscribe(&informer, resyncing(1), None).await;
    let (_slow, slow_log) = kind.subscribe(&informer, resyncing(3), None).await;
    let (_never, never_log) = kind.subscribe(&informer, resyncing(0), None).await;
    informer.wait_for_sync(SYNC).await.unwrap();

    let resyncs = |log: &std::sync::Arc<std::sync::Mutex<Log>>| {
        log.lock().unwrap().count(|s| s.cause == Cause::Resync)
    };
    eventually(
        Duration::from_secs(10),
        "the 3 s subscriber's first resync",
        || resyncs(&slow_log) >= 5,
    )
    .await;
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2900),
        "3 s resync came after {elapsed:?}"
    );
    // The 1 s subscriber resyncs about three times as often: it gets its
    // second sweep of every object well before the 3 s one gets its second
    // (a late timer skips periods, so counts at one instant would be fragile).
    eventually(
        Duration::from_secs(10),
        "the 1 s subscriber's second resync",
        || resyncs(&fast_log) >= 10,
    )
    .await;
    assert!(
        resyncs(&slow_log) <= 5,
        "the 3 s subscriber resynced {} times before the 1 s one's second sweep",
        resyncs(&slow_log)
    );
    assert_eq!(
        resyncs(&slow_log) % 5,
        0,
        "a resync replays every object exactly once"
    );
    assert_eq!(resyncs(&never_log), 0);
}

async fn a_subscriber_changes_its_resync_period_after_subscribing<K: Cached>(kind: Kind) {
    let server = server(10_000);
    server.seed_configmaps("default", 5).unwrap();
    let informer = kind.start(K::informer(&server));
    let (mut sub, changing_log) = kind
        .subscribe(
            &informer,
            SubscribeOptions::default().resync(Duration::ZERO),
            None,
        )
        .await;
    let (_steady, steady_log) = kind
        .subscribe(
            &informer,
            SubscribeOptions::default().resync(Duration::from_secs(1)),
            None,
        )
        .await;
    informer.wait_for_sync(SYNC).await.unwrap();
    let resyncs = |log: &std::sync::Arc<std::sync::Mutex<Log>>| {
        log.lock().unwrap().count(|s| s.cause == Cause::Resync)
    };

    // Below the minimum is raised to it, as at subscribe time.
    let period = sub
        .set_resync_period(Duration::from_millis(10))
        .await
        .unwrap();
    assert_eq!(period, kinformer::MINIMUM_RESYNC_PERIOD);
    assert_eq!(sub.resync_period(), period);
    eventually(
        Duration::from_secs(10),
        "resyncs once a period is set",
        || resyncs(&changing_log) >= 5,
    )
    .await;

    // Back to never: while the steady subscriber gets two more sweeps, this
    // one gets at most the sweep that was under way.
    assert_eq!(
        sub.set_resync_period(Duration::ZERO).await.unwrap(),
        Duration::ZERO
    );
    let (before, steady_before) = (resyncs(&changing_log), resyncs(&steady_log));
    eventually(
        Duration::from_secs(10),
        "the steady subscriber's next two sweeps",
        || resyncs(&steady_log) >= steady_before + 10,
    )
    .await;
    let after = resyncs(&changing_log);
    assert!(
        after <= before + 5,
        "resynced {} more times after the period was set to never",
        after - before
    );
    assert_eq!(after % 5, 0, "a sweep replays every object exactly once");

    // Ended through a clone: no period can be set any more.
    let (mut ended, _ended_log) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    let clone = ended.clone();
    clone.unsubscribe().await;
    assert!(matches!(
        ended.set_resync_period(Duration::from_secs(5)).await,
        Err(kinformer::InformerError::SubscriberGone)
    ));

    informer.stop().await;
    assert!(matches!(
        sub.set_resync_period(Duration::from_secs(5)).await,
        Err(kinformer::InformerError::Stopped)
    ));
}

async fn late_subscriber_gets_a_replay_and_its_own_sync_state<K: Cached>(kind: Kind) {
    let server = server(10_000);
    server.seed_configmaps("default", 300).unwrap();
    let informer = kind.start(K::informer(&server));
    informer.wait_for_sync(SYNC).await.unwrap();
    let (sub, log) = kind
        .subscribe(&informer, SubscribeOptions::default().capacity(16), None)
        .await;
    sub.wait_for_sync(SYNC).await.unwrap();
    // A stream has handled an event once it yielded it: its consumer may
    // not have recorded the last one yet.
    let truth = server_view(&server);
    eventually(SETTLE, "the whole replay recorded", || {
        let log = log.lock().unwrap();
        log.count(|s| s.kind == "Added" && s.cause == Cause::Initial) >= 300 && log.view == truth
    })
    .await;
    let log = log.lock().unwrap();
    assert_eq!(
        log.count(|s| s.kind == "Added" && s.cause == Cause::Initial),
        300
    );
}

#[actix::test]
async fn a_subscriber_that_stops_is_removed_and_others_go_on() {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = informer(&server).start().unwrap();
    let log_dead = std::sync::Arc::new(std::sync::Mutex::new(Log::default()));
    let dead = actix::Actor::start(Recorder {
        log: log_dead.clone(),
        gate: None,
        stop_after: Some(5),
    });
    let (alive, log) = Recorder::start();
    let dead_sub = informer
        .subscribe(dead.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer
        .subscribe(alive.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    // Noticed without a later delivery to find it gone.
    eventually(SETTLE, "dead subscriber removed", || dead_sub.is_gone()).await;
    eventually(SETTLE, "informer counts the lost subscriber", || {
        let stats = informer.stats();
        stats.subscribers_lost == 1 && stats.subscribers == 1
    })
    .await;
    assert!(matches!(
        dead_sub.wait_for_sync(SYNC).await,
        Err(kinformer::InformerError::SubscriberGone)
    ));
    create(&server, "after", "1");
    converges(&server, &log, "live subscriber converges").await;
    assert_eq!(informer.stats().subscribers_lost, 1);
}

async fn stalled_coalesce_subscriber_delays_nobody_and_stays_bounded_by_keys<K: Cached>(
    kind: Kind,
) {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    let informer = kind.start(K::informer(&server));
    let (gate_tx, gate_rx) = watch::channel(false);
    let (stalled_sub, stalled_log) = kind
        .subscribe(
            &informer,
            SubscribeOptions::default().policy(OverflowPolicy::Coalesce),
            Some(gate_rx),
        )
        .await;
    let (_fast, fast_log) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    informer.wait_for_sync(SYNC).await.unwrap();

    // 500 updates over the same 10 keys while one subscriber is stalled.
    let names: Vec<String> = server_view(&server)
        .keys()
        .map(|k| k.trim_start_matches("default/").to_owned())
        .collect();
    for i in 0..50 {
        for name in &names {
            let mut o = server.get("", "configmaps", Some("default"), name).unwrap();
            o["data"]["i"] = i.to_string().into();
            server.update("", "configmaps", Some("default"), o).unwrap();
        }
    }
    converges(
        &server,
        &fast_log,
        "the fast subscriber converges while the other is stalled",
    )
    .await;
    // Pending notifications of the stalled one are bounded by keys (2 per key at most).
    assert!(stalled_sub.stats().pending <= 2 * names.len() + 1);
    gate_tx.send_replace(true);
    converges(
        &server,
        &stalled_log,
        "the stalled subscriber catches up with the final state",
    )
    .await;
}

/// Small DeltaFIFO batches and a low high watermark (64 deltas), so a stalled
/// subscriber's back-pressure shows within a few hundred events.
fn small_fifo() -> kinformer::FifoOptions {
    kinformer::FifoOptions::default()
        .batch_size(16)
        .initial_batch_size(16)
        .high_watermark(64)
}

async fn stalled_block_subscriber_holds_the_pipeline_with_bounded_memory<K: Cached>(kind: Kind) {
    let server = server(100_000);
    server.seed_configmaps("default", 10).unwrap();
    let informer = kind.start(K::informer(&server).fifo_options(small_fifo()));
    let (gate_tx, sub, log) = gated_block_subscriber(kind, &informer, true).await;
    informer.wait_for_sync(SYNC).await.unwrap();
    // A full Block subscriber holds the whole informer back (that is its contract).
    gate_tx.send_replace(false);
    for i in 0..2_000 {
        server
            .create(
                "",
                "configmaps",
                Some("default"),
                configmap(&format!("n{i}"), "v"),
            )
            .unwrap();
        // Later states of some keys, right behind their creates.
        let name = format!("n{i}");
        if i % 10 == 0 {
            let mut o = server
                .get("", "configmaps", Some("default"), &name)
                .unwrap();
            o["data"]["value"] = "w".into();
            server.update("", "configmaps", Some("default"), o).unwrap();
        } else if i % 10 == 5 {
            server
                .delete("", "configmaps", Some("default"), &name)
                .unwrap();
        }
    }
    // The pipeline fills (the stalled subscriber's queue is full and the
    // DeltaFIFO holds the rest); memory stays bounded by the queue bounds.
    eventually(
        SETTLE,
        "the pipeline fills up to the stalled subscriber",
        || sub.stats().pending >= 8 && informer.stats().queued_deltas > 0,
    )
    .await;
    let mut max_pending = 0;
    let mut max_queued = 0;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(40)).await;
        max_pending = max_pending.max(sub.stats().pending);
        max_queued = max_queued.max(informer.stats().queued_deltas);
    }
    // The queue (8) and one parked chunk: one FIFO batch of 16 keys, each
    // with up to two deltas here (a create, then its update or delete,
    // merged when both were queued before the key was popped).
    assert!(max_pending <= 8 + 2 * 16, "listener pending {max_pending}");
    assert!(max_queued <= 64 + 256 + 16, "fifo queued {max_queued}");
    gate_tx.send_replace(true);
    let truth = server_view(&server);
    eventually(
        Duration::from_secs(60),
        "the stalled subscriber catches up",
        || log.lock().unwrap().view == truth,
    )
    .await;
    let log = log.lock().unwrap();
    assert_eq!(log.out_of_order().map(|s| (&s.key, &s.rv)), None);
}

/// Relists while a Block subscriber holds the Indexer, and every watch open
/// fails (so no watch event holds the Reflector back): the DeltaFIFO stays
/// within its high watermark plus one list (a Replace waits for room, like
/// an Enqueue), and everything converges once the subscriber resumes.
async fn relists_against_a_stalled_block_subscriber_do_not_pile_up<K: Cached>(kind: Kind) {
    let server = server(100_000);
    server.seed_configmaps("default", 300).unwrap();
    let informer = kind.start(
        K::informer(&server)
            .backoff(kinformer::Backoff::new(
                Duration::from_millis(5),
                Duration::from_millis(10),
                Duration::from_secs(120),
            ))
            .fifo_options(small_fifo()),
    );
    let (gate_tx, _sub, log) = gated_block_subscriber(kind, &informer, true).await;
    informer.wait_for_sync(SYNC).await.unwrap();
    // Fill the stalled subscriber's queue (8) and park the next chunk: the
    // Indexer waits for it, the DeltaFIFO queues the rest, below its mark.
    gate_tx.send_replace(false);
    for i in 0..40 {
        create(&server, &format!("fill-{i}"), "1");
    }
    eventually(
        SETTLE,
        "the Indexer waits for the stalled subscriber",
        || {
            let stats = informer.stats();
            stats.events >= 40 && stats.queued_deltas > 0
        },
    )
    .await;
    server.faults().fail_next(
        kinformer_apiserver::Verb::Watch,
        1_000_000,
        kinformer_apiserver::Failure::Internal,
    );
    server.faults().close_all_watches();
    let lists = informer.stats().lists;
    // Relists at the backoff's pace (≤ 20 ms) for as long as they are
    // answered: until 20 have run, or the DeltaFIFO holds the Reflector back.
    eventually(SETTLE, "relists until 20 or until held back", || {
        let stats = informer.stats();
        stats.lists >= lists + 20 || (stats.lists > lists && stats.fifo_saturated)
    })
    .await;
    let queued = informer.stats().queued_deltas;
    assert!(
        queued <= 64 + 340 + 16,
        "fifo queued {queued} after {} relists",
        informer.stats().lists - lists
    );
    server.faults().clear();
    gate_tx.send_replace(true);
    converges(&server, &log, "the stalled subscriber catches up").await;
}

async fn the_initial_list_in_one_batch_reaches_a_stalled_block_subscriber_in_chunks<K: Cached>(
    kind: Kind,
) {
    let server = server(10_000);
    server.seed_configmaps("default", 3_000).unwrap();
    // Default options: the initial list reaches the Indexer a page (500)
    // at a time, each page one batch (or, unpaginated, all in one).
    let informer = kind.start(K::informer(&server));
    let (gate_tx, sub, log) = gated_block_subscriber(kind, &informer, false).await;
    let pending = || sub.stats().pending;
    eventually(SETTLE, "a batch is applied and delivery began", || {
        informer.stats().objects >= 500 && pending() > 0
    })
    .await;
    // The listener holds its queue (8) and at most one parked chunk (256),
    // not the batch's events; the FIFO waits for the rest.
    for _ in 0..20 {
        assert!(pending() <= 8 + 256, "listener pending {}", pending());
        tokio::task::yield_now().await;
    }
    assert!(!informer.has_synced(), "the batch is not done yet");
    gate_tx.send_replace(true);
    informer.wait_for_sync(SYNC).await.unwrap();
    sub.wait_for_sync(SYNC).await.unwrap();
    converges(&server, &log, "the stalled subscriber catches up").await;
    assert_eq!(
        log.lock().unwrap().count(|s| s.cause == Cause::Initial),
        3_000
    );
}

/// A label selector keeps other objects out of the cache and the events,
/// on the list and on the watch; an index on a label (metadata) answers by
/// value.
async fn a_label_selector_and_an_index_hold_only_what_they_select<K: Cached>(kind: Kind) {
    let server = server(10_000);
    let labelled = |name: &str, labels: serde_json::Value| {
        let mut body = configmap(name, "v");
        body["metadata"]["labels"] = labels;
        server
            .create("", "configmaps", Some("default"), body)
            .expect("create configmap");
    };
    let selected = |tier: &str| serde_json::json!({"selected": "yes", "tier": tier});
    labelled("a", selected("web"));
    labelled("b", selected("db"));
    labelled("c", serde_json::json!({"tier": "web"}));
    let by_tier = |o: &K| {
        Ok(o.meta()
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| *k == "tier")
            .map(|(_, v)| v.clone())
            .collect())
    };
    let informer = kind.start(
        K::informer(&server)
            .label_selector("selected=yes")
            .index("tier", by_tier),
    );
    let (_sub, log) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    informer.wait_for_sync(SYNC).await.unwrap();
    let names = |objects: Vec<std::sync::Arc<K>>| {
        let mut names: Vec<String> = objects
            .iter()
            .map(|o| o.meta().name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(informer.store().snapshot().list()), ["a", "b"]);
    labelled("d", selected("web"));
    labelled("e", serde_json::json!({"tier": "web"}));
    eventually(SETTLE, "d in the cache", || {
        informer
            .store()
            .snapshot()
            .contains(&kinformer::ObjectKey::from("default/d"))
    })
    .await;
    let web = informer.store().snapshot().by_index("tier", "web").unwrap();
    assert_eq!(names(web), ["a", "d"]);
    // The watch delivers in order: once f (created after e) arrived, e was left out.
    labelled("f", selected("db"));
    eventually(SETTLE, "f reaches the subscriber", || {
        log.lock().unwrap().view.contains_key("default/f")
    })
    .await;
    let log = log.lock().unwrap();
    let seen: std::collections::BTreeSet<&str> =
        log.events.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["default/a", "default/b", "default/d", "default/f"]
    );
}

// The engine's behaviour on a metadata-only informer (`::metadata`) and on
// a compact cache (`::compact`, `::compact_closure`, `::metadata_compact`):
// initial sync across pages, watch adds, updates and deletes, resyncs,
// replays, relists after a 410 with their diff, selectors and indexes,
// stalled subscribers, unsubscribing.
for_kinds!(initial_sync_across_pages_then_changes_reach_every_subscriber_in_order: actor inline stream closure worker metadata metadata_stream metadata_closure compact compact_closure metadata_compact);
for_kinds!(each_subscriber_resyncs_at_its_own_period: actor inline stream closure worker metadata compact);
for_kinds!(late_subscriber_gets_a_replay_and_its_own_sync_state: actor inline stream closure worker metadata compact compact_closure);
for_kinds!(compaction_forces_relist_with_tombstones_and_no_update_storm: actor inline metadata compact metadata_compact);
// Sharing holds only in the decoded cache: a compact one decodes each read.
for_kinds!(a_relist_keeps_the_cached_arc_of_every_unchanged_object: actor metadata);
for_kinds!(a_label_selector_and_an_index_hold_only_what_they_select: actor metadata compact metadata_compact);
for_kinds!(a_subscriber_changes_its_resync_period_after_subscribing: actor inline stream closure worker compact);
for_kinds!(stalled_coalesce_subscriber_delays_nobody_and_stays_bounded_by_keys: actor stream closure worker compact);
for_kinds!(stalled_block_subscriber_holds_the_pipeline_with_bounded_memory: actor stream closure worker compact);
for_kinds!(relists_against_a_stalled_block_subscriber_do_not_pile_up: actor stream closure worker compact);
for_kinds!(the_initial_list_in_one_batch_reaches_a_stalled_block_subscriber_in_chunks: actor stream closure worker compact);
for_kinds!(unsubscribe_waits_for_the_handler_in_progress_then_nothing_more_arrives: actor closure compact compact_closure);

#[actix::test]
async fn malformed_watch_line_is_logged_and_the_informer_recovers() {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    let informer = informer(&server).start().unwrap();
    let log = subscribed(&informer).await;
    server.faults().inject_malformed_line();
    server
        .create(
            "",
            "configmaps",
            Some("default"),
            configmap("after-garbage", "1"),
        )
        .unwrap();
    converges(&server, &log, "view equals server after a malformed line").await;
}

#[actix::test]
async fn too_many_requests_on_watch_backs_off_without_relist() {
    let server = server(10_000);
    server.seed_configmaps("default", 10).unwrap();
    let informer = informer(&server)
        .backoff(kinformer::Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(400),
            Duration::from_secs(120),
        ))
        .start()
        .unwrap();
    let log = subscribed(&informer).await;
    warm_up(&server, &log, "warm").await;
    server.faults().fail_next(
        Verb::Watch,
        3,
        Failure::TooManyRequests {
            retry_after_secs: 0,
        },
    );
    server.faults().close_all_watches();
    server
        .create(
            "",
            "configmaps",
            Some("default"),
            configmap("after-429", "1"),
        )
        .unwrap();
    eventually(SETTLE, "three 429s seen", || informer.stats().failures >= 3).await;
    converges(&server, &log, "view equals server after 429s").await;
    assert_eq!(informer.stats().relists, 0, "429 on watch must not relist");
    assert!(informer.stats().failures >= 3);
}

/// Not for streams: their handling ends when the event is taken.
async fn unsubscribe_waits_for_the_handler_in_progress_then_nothing_more_arrives<K: Cached>(
    kind: Kind,
) {
    let server = server(10_000);
    server.seed_configmaps("default", 3).unwrap();
    let informer = kind.start(K::informer(&server));
    let (gate_tx, gate_rx) = watch::channel(true);
    let (sub, log) = kind
        .subscribe(&informer, SubscribeOptions::default(), Some(gate_rx))
        .await;
    sub.wait_for_sync(SYNC).await.unwrap();

    // The subscriber is now busy with one event.
    gate_tx.send_replace(false);
    create(&server, "busy", "1");
    eventually(SETTLE, "the busy event is being handled", || {
        log.lock().unwrap().view.contains_key("default/busy")
    })
    .await;
    let unsubscribed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = unsubscribed.clone();
    tokio::spawn(async move {
        sub.unsubscribe().await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    // While the handler is still running, unsubscribe has not returned.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!unsubscribed.load(std::sync::atomic::Ordering::SeqCst));
    gate_tx.send_replace(true);
    eventually(
        SETTLE,
        "unsubscribe returns once the handler finished",
        || unsubscribed.load(std::sync::atomic::Ordering::SeqCst),
    )
    .await;
    let seen = log.lock().unwrap().events.len();
    create(&server, "after", "1");
    // A second subscriber proves the event was distributed; the first saw nothing more.
    let (_b, log_b) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    eventually(SETTLE, "the event was distributed", || {
        log_b.lock().unwrap().view.contains_key("default/after")
    })
    .await;
    assert_eq!(log.lock().unwrap().events.len(), seen);
    eventually(SETTLE, "one subscriber left", || {
        informer.stats().subscribers == 1
    })
    .await;
}

#[actix::test]
async fn skip_managed_fields_keeps_them_out_of_cache_and_events_only_when_asked() {
    let server = server(10_000);
    let mut body = configmap("tracked", "v1");
    body["metadata"]["managedFields"] = serde_json::json!([{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:value": {}}}
    }]);
    server
        .create("", "configmaps", Some("default"), body)
        .expect("create configmap");
    let plain = informer(&server).start().unwrap();
    let skipping = informer(&server).skip_managed_fields(true).start().unwrap();
    plain.wait_for_sync(SYNC).await.unwrap();
    skipping.wait_for_sync(SYNC).await.unwrap();
    let key = kinformer::ObjectKey::from("default/tracked");
    let kept = plain.store().snapshot().get(&key).expect("cached");
    assert_eq!(kept.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
    let skipped = skipping.store().snapshot().get(&key).expect("cached");
    assert!(skipped.metadata.managed_fields.is_none());
    assert_eq!(skipped.data, kept.data);
    // Watch events are decoded the same way.
    let mut update = configmap("tracked", "v2");
    update["metadata"]["managedFields"] =
        serde_json::json!([{"manager": "m", "operation": "Update"}]);
    server
        .update("", "configmaps", Some("default"), update)
        .expect("update configmap");
    eventually(SETTLE, "the update in both caches", || {
        [&plain, &skipping].iter().all(|i| {
            i.store()
                .snapshot()
                .get(&key)
                .and_then(|o| o.data.clone())
                .and_then(|d| d.get("value").cloned())
                == Some("v2".into())
        })
    })
    .await;
    let kept = plain.store().snapshot().get(&key).unwrap();
    assert_eq!(kept.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
    assert!(
        skipping
            .store()
            .snapshot()
            .get(&key)
            .unwrap()
            .metadata
            .managed_fields
            .is_none()
    );
}

/// 1 000 ConfigMaps, an informer over pages of 200, and a plain per-event
/// subscriber: the reference other kinds of subscribers are compared with.
struct Reference {
    server: kinformer_apiserver::ServerHandle,
    informer: kinformer::Informer<k8s_openapi::api::core::v1::ConfigMap>,
    sub_each: kinformer::Subscription<k8s_openapi::api::core::v1::ConfigMap>,
    log_each: std::sync::Arc<std::sync::Mutex<Log>>,
}

impl Reference {
    async fn start() -> Self {
        let server = server(10_000);
        server.seed_configmaps("default", 1_000).unwrap();
        let informer = informer(&server).page_size(200).start().unwrap();
        let (each, log_each) = Recorder::start();
        let sub_each = informer
            .subscribe(each.recipient(), SubscribeOptions::default())
            .await
            .unwrap();
        Reference {
            server,
            informer,
            sub_each,
            log_each,
        }
    }

    /// Waits for the reference to sync, then adds 50 objects and deletes one.
    async fn change(&self) {
        self.sub_each.wait_for_sync(SYNC).await.unwrap();
        for i in 0..50 {
            create(&self.server, &format!("new-{i}"), "1");
        }
        self.server
            .delete("", "configmaps", Some("default"), "new-0")
            .unwrap();
    }
}

#[actix::test]
async fn batched_subscriber_sees_the_same_sequence_as_a_per_event_one_in_bounded_batches() {
    let r = Reference::start().await;
    // The batched subscriber is held at its first handler call, so what
    // arrives meanwhile queues up and must leave in batches of at most 64.
    let (gate_tx, gate_rx) = watch::channel(false);
    let (batched, log_batched) = Recorder::gated(gate_rx);
    let sub_batched = r
        .informer
        .subscribe_batches(
            batched.recipient(),
            SubscribeOptions::default().capacity(4096).batch_size(64),
        )
        .await
        .unwrap();
    r.change().await;
    eventually(
        SETTLE,
        "the batched subscriber is held with a backlog",
        || sub_batched.stats().pending > 64,
    )
    .await;
    assert!(
        !sub_batched.has_synced(),
        "initial adds are not handled yet"
    );
    gate_tx.send_replace(true);
    sub_batched.wait_for_sync(SYNC).await.unwrap();
    converges(&r.server, &r.log_each, "per-event subscriber converges").await;
    converges(&r.server, &log_batched, "batched subscriber converges").await;
    counts_every_recorded_event(&sub_batched, &log_batched).await;
    let (each, batched) = (r.log_each.lock().unwrap(), log_batched.lock().unwrap());
    assert!(each.batches.is_empty());
    same_sequence_in_batches(&each, &batched, 64);
}

/// `batched` holds the notifications of `each`, in the same order, in
/// batches of 1 to `max`, at least two of them full (a backlog left in
/// full batches).
fn same_sequence_in_batches(each: &Log, batched: &Log, max: usize) {
    assert_eq!(
        each.events, batched.events,
        "same notifications, same order"
    );
    assert_eq!(batched.batches.iter().sum::<usize>(), batched.events.len());
    assert!(batched.batches.iter().all(|&n| (1..=max).contains(&n)));
    assert!(
        batched.batches.iter().filter(|&&n| n == max).count() >= 2,
        "a backlog leaves in full batches: {:?}",
        batched.batches
    );
}

#[actix::test]
async fn pipelined_subscriber_sees_the_same_sequence_as_a_per_event_one() {
    let r = Reference::start().await;
    // The pipelined subscriber pauses its mailbox at its first event, so the
    // rest queue up: at most `pipeline` in its mailbox, the others pending.
    let (gate_tx, gate_rx) = watch::channel(false);
    let (pipelined, log_pipelined) = SyncRecorder::gated(gate_rx);
    let sub_pipelined = r
        .informer
        .subscribe_pipelined(
            &pipelined,
            SubscribeOptions::default().capacity(4096).pipeline(8),
        )
        .await
        .unwrap();
    r.change().await;
    // 1 000 initial adds, 50 adds, 1 delete: all but the 8 sent (one of
    // them handled) stay pending.
    eventually(SETTLE, "the pipelined subscriber holds a backlog", || {
        sub_pipelined.stats().pending == 1_051 - 8
    })
    .await;
    assert_eq!(log_pipelined.lock().unwrap().events.len(), 1);
    assert!(!sub_pipelined.has_synced());
    gate_tx.send_replace(true);
    sub_pipelined.wait_for_sync(SYNC).await.unwrap();
    converges(&r.server, &r.log_each, "per-event subscriber converges").await;
    converges(&r.server, &log_pipelined, "pipelined subscriber converges").await;
    counts_every_recorded_event(&sub_pipelined, &log_pipelined).await;
    let (each, pipelined) = (r.log_each.lock().unwrap(), log_pipelined.lock().unwrap());
    assert_eq!(
        each.events, pipelined.events,
        "same notifications, same order"
    );
}

#[actix::test]
async fn stream_and_closure_subscribers_see_the_same_sequence_as_a_per_event_one() {
    let r = Reference::start().await;
    let options = SubscribeOptions::default().capacity(64);
    let (sub_stream, log_stream) = Kind::Stream.subscribe(&r.informer, options, None).await;
    let (sub_closure, log_closure) = Kind::Closure.subscribe(&r.informer, options, None).await;
    r.change().await;
    sub_stream.wait_for_sync(SYNC).await.unwrap();
    sub_closure.wait_for_sync(SYNC).await.unwrap();
    converges(&r.server, &r.log_each, "per-event subscriber converges").await;
    converges(&r.server, &log_stream, "stream subscriber converges").await;
    converges(&r.server, &log_closure, "closure subscriber converges").await;
    counts_every_recorded_event(&sub_stream, &log_stream).await;
    counts_every_recorded_event(&sub_closure, &log_closure).await;
    let each = r.log_each.lock().unwrap();
    for log in [&log_stream, &log_closure] {
        let log = log.lock().unwrap();
        assert_eq!(each.events, log.events, "same notifications, same order");
    }
}

#[actix::test]
async fn batch_stream_sees_the_same_sequence_as_a_per_event_one_in_bounded_batches() {
    let r = Reference::start().await;
    let mut batches = r
        .informer
        .stream_batches(SubscribeOptions::default().capacity(4096).batch_size(64))
        .await
        .unwrap();
    r.change().await;
    // Not polled yet: what arrives queues up, and must leave in batches of at most 64.
    eventually(SETTLE, "the batch stream holds a backlog", || {
        batches.subscription().stats().pending > 64
    })
    .await;
    assert!(!batches.subscription().has_synced());
    let log = std::sync::Arc::new(std::sync::Mutex::new(Log::default()));
    let sub = batches.subscription().clone();
    let recording = log.clone();
    actix::spawn(async move {
        use futures::StreamExt;
        while let Some(batch) = batches.next().await {
            let mut log = recording.lock().unwrap();
            log.batches.push(batch.len());
            for event in batch.iter() {
                log.record(event);
            }
        }
    });
    sub.wait_for_sync(SYNC).await.unwrap();
    converges(&r.server, &r.log_each, "per-event subscriber converges").await;
    converges(&r.server, &log, "batch stream converges").await;
    counts_every_recorded_event(&sub, &log).await;
    let (each, batched) = (r.log_each.lock().unwrap(), log.lock().unwrap());
    same_sequence_in_batches(&each, &batched, 64);
}

#[actix::test]
async fn reflector_on_its_own_thread_delivers_the_same() {
    let server = server(10_000);
    server.seed_configmaps("default", 500).unwrap();
    let informer = informer(&server)
        .page_size(100)
        .reflector_thread(true)
        .start()
        .unwrap();
    let (a, log) = Recorder::start();
    let _sub = informer
        .subscribe(a.recipient(), SubscribeOptions::default())
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    create(&server, "late", "1");
    converges(&server, &log, "view equals server").await;
    // A forced relist goes through the supervisor on that thread too.
    server.faults().compact();
    server.faults().close_all_watches();
    create(&server, "after-relist", "1");
    converges(&server, &log, "view equals server after relist").await;
    informer.stop().await;
}

async fn a_relist_keeps_the_cached_arc_of_every_unchanged_object<K: Cached>(kind: Kind) {
    let server = server(10_000);
    server.seed_configmaps("default", 200).unwrap();
    let informer = kind.start(K::informer(&server).page_size(50));
    let (_sub, log) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    informer.wait_for_sync(SYNC).await.unwrap();
    let before = informer.store().snapshot();
    let names: Vec<String> = server_view(&server)
        .keys()
        .map(|k| k.trim_start_matches("default/").to_owned())
        .collect();
    change_during_outage(&server, None, &names[0]);
    converges(&server, &log, "view equals server after relist").await;
    // Its pages reach the cache while it is read: the view can converge
    // before the relist ends.
    eventually(SETTLE, "the relist ended", || informer.stats().relists >= 1).await;
    let after = informer.store().snapshot();
    let changed_key = format!("default/{}", names[0]);
    let mut reused = 0;
    for key in after.keys() {
        let (old, new) = (before.get(&key).unwrap(), after.get(&key).unwrap());
        if key.to_string() == changed_key {
            assert!(!std::sync::Arc::ptr_eq(&old, &new));
        } else {
            assert!(std::sync::Arc::ptr_eq(&old, &new), "{key} was copied");
            reused += 1;
        }
    }
    assert_eq!(reused, 199);
}

/// Leaving is not losing: subscribers that unsubscribe (waiting, or at once
/// with `cancel`) while deliveries to them are in flight are never counted
/// lost, whatever the order in which the Indexer learns of it.
async fn unsubscribing_with_deliveries_in_flight_loses_no_subscriber(kind: Kind) {
    let server = server(10_000);
    server.seed_configmaps("default", 20).unwrap();
    let informer = kind.start(informer(&server));
    let mut subs = Vec::new();
    for _ in 0..16 {
        let (sub, _log) = kind
            .subscribe(&informer, SubscribeOptions::default().capacity(8), None)
            .await;
        subs.push(sub);
    }
    let (_stays, log) = kind
        .subscribe(&informer, SubscribeOptions::default(), None)
        .await;
    for sub in &subs {
        sub.wait_for_sync(SYNC).await.unwrap();
    }
    for (i, sub) in subs.into_iter().enumerate() {
        // Events on their way to every subscriber as each one leaves.
        for j in 0..5 {
            create(&server, &format!("in-flight-{i}-{j}"), "1");
        }
        if i % 2 == 0 {
            sub.cancel();
        } else {
            sub.unsubscribe().await;
        }
    }
    converges(&server, &log, "the remaining subscriber converges").await;
    eventually(SETTLE, "only the remaining subscriber is left", || {
        informer.stats().subscribers == 1
    })
    .await;
    assert_eq!(informer.stats().subscribers_lost, 0, "{kind:?}");
}

#[actix::test]
async fn unsubscribing_actors_with_deliveries_in_flight_are_not_lost() {
    unsubscribing_with_deliveries_in_flight_loses_no_subscriber(Kind::Actor).await;
}

#[actix::test]
async fn unsubscribing_closures_with_deliveries_in_flight_are_not_lost() {
    unsubscribing_with_deliveries_in_flight_loses_no_subscriber(Kind::Closure).await;
}
