//! Metadata-only informers (`Informer::metadata`) against the embedded API
//! server: what is asked and cached, a server that refuses the form (406),
//! the factory keeping them apart from full informers. The engine's
//! behaviour on them runs in `engine.rs` (`::metadata` tests).

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Informer, InformerError, InformerFactory, ObjectKey, PartialObjectMeta};

const SYNC: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(20);

fn metadata_informer(
    server: &kinformer_apiserver::ServerHandle,
) -> kinformer::InformerBuilder<PartialObjectMeta<ConfigMap>> {
    Informer::metadata(kube::Api::<ConfigMap>::namespaced(
        client(server),
        "default",
    ))
}

/// The kind of a cached object: `PartialObjectMetadata` when the server
/// answered in the metadata-only form (a full object says `ConfigMap`, or
/// nothing in a list's items).
fn served_kind(object: &PartialObjectMeta<ConfigMap>) -> Option<&str> {
    object.types.as_ref().map(|t| t.kind.as_str())
}

/// Lists and watches ask for `PartialObjectMetadata`: the listed and the
/// watched objects both come in that form, with their labels and
/// annotations; managedFields are kept unless skipped at decode.
#[actix::test]
async fn lists_and_watches_ask_for_and_cache_only_metadata() {
    let server = server(10_000);
    let mut body = configmap("listed", "a-value-only-a-full-object-has");
    body["metadata"]["annotations"] = serde_json::json!({"note": "kept"});
    body["metadata"]["managedFields"] = serde_json::json!([{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:value": {}}}
    }]);
    server
        .create("", "configmaps", Some("default"), body.clone())
        .unwrap();
    let plain = metadata_informer(&server).page_size(1).start().unwrap();
    let skipping = metadata_informer(&server)
        .skip_managed_fields(true)
        .start()
        .unwrap();
    plain.wait_for_sync(SYNC).await.unwrap();
    skipping.wait_for_sync(SYNC).await.unwrap();
    let key = ObjectKey::from("default/listed");
    let listed = plain.store().snapshot().get(&key).expect("cached");
    assert_eq!(served_kind(&listed), Some("PartialObjectMetadata"));
    assert_eq!(
        listed.metadata.annotations.as_ref().unwrap()["note"],
        "kept"
    );
    assert_eq!(listed.metadata.labels.as_ref().unwrap()["app"], "test");
    assert_eq!(
        listed.metadata.managed_fields.as_ref().map(Vec::len),
        Some(1)
    );
    let slim = skipping.store().snapshot().get(&key).expect("cached");
    assert!(slim.metadata.managed_fields.is_none());

    body["metadata"]["name"] = "watched".into();
    server
        .create("", "configmaps", Some("default"), body)
        .unwrap();
    let key = ObjectKey::from("default/watched");
    eventually(SETTLE, "the watched object in both caches", || {
        [&plain, &skipping]
            .iter()
            .all(|i| i.store().snapshot().contains(&key))
    })
    .await;
    let watched = plain.store().snapshot().get(&key).unwrap();
    assert_eq!(served_kind(&watched), Some("PartialObjectMetadata"));
    assert_eq!(
        watched.metadata.managed_fields.as_ref().map(Vec::len),
        Some(1)
    );
    let slim = skipping.store().snapshot().get(&key).unwrap();
    assert!(slim.metadata.managed_fields.is_none());
    assert_eq!(plain.stats().relists, 0);
}

/// A server that does not serve `PartialObjectMetadata` answers 406: the
/// informer does not sync, says why (status 406, the server's message) in
/// `last_failure` and in `wait_for_sync`'s error, keeps retrying, and
/// syncs once the server serves the form. A full informer is unaffected.
#[actix::test]
async fn a_server_refusing_metadata_is_reported_as_not_acceptable_and_retried() {
    let server = server(10_000);
    server.seed_configmaps("default", 3).unwrap();
    server.faults().refuse_metadata(true);
    let informer = metadata_informer(&server)
        .backoff(fast_backoff())
        .start()
        .unwrap();
    let full = informer_of_full_objects(&server);
    full.wait_for_sync(SYNC).await.unwrap();
    eventually(SETTLE, "two refused lists", || {
        informer.stats().failures >= 2
    })
    .await;
    match informer.wait_for_sync(Duration::from_millis(100)).await {
        Err(InformerError::SyncTimeout {
            last_failure: Some(failure),
            ..
        }) => {
            assert_eq!(failure.request, "list");
            assert_eq!(failure.status, Some(406), "{failure}");
            assert!(failure.message.contains("NotAcceptable"), "{failure}");
            assert!(
                failure.message.contains("application/json"),
                "the server's list of what it serves: {failure}"
            );
        }
        other => panic!("{other:?}"),
    }
    let refused = server
        .requests()
        .count(|r| r.verb == "list" && r.status == 406);
    assert!(refused >= 2, "{refused} lists answered 406");
    assert!(!informer.has_synced());

    server.faults().refuse_metadata(false);
    informer.wait_for_sync(SYNC).await.unwrap();
    assert_eq!(informer.store().snapshot().len(), 3);
    assert!(informer.last_failure().is_none());
}

fn informer_of_full_objects(server: &kinformer_apiserver::ServerHandle) -> Informer<ConfigMap> {
    informer(server).start().unwrap()
}

/// The factory keys a metadata-only informer apart from the full informer
/// of the same resource and selectors, and shares each among its requests.
#[actix::test]
async fn the_factory_keeps_metadata_and_full_informers_apart() {
    let server = server(10_000);
    server.seed_configmaps("default", 4).unwrap();
    let factory = InformerFactory::new();
    let api = || kube::Api::<ConfigMap>::namespaced(client(&server), "default");
    let full = factory.informer(api(), None, None, |b| b).unwrap();
    let meta = factory.metadata_informer(api(), None, None, |b| b).unwrap();
    let meta_again = factory.metadata_informer(api(), None, None, |b| b).unwrap();
    assert_eq!(factory.len(), 2);
    full.wait_for_sync(SYNC).await.unwrap();
    meta_again.wait_for_sync(SYNC).await.unwrap();
    assert!(meta.has_synced(), "the same informer");
    let key = full.store().snapshot().keys()[0].clone();
    assert!(full.store().snapshot().get(&key).unwrap().data.is_some());
    assert_eq!(
        served_kind(&meta.store().snapshot().get(&key).unwrap()),
        Some("PartialObjectMetadata")
    );
    factory.stop_all().await;
}

/// Batched and pipelined subscribers of a metadata-only informer see every
/// change, as a per-event one does (`engine.rs` runs actors, streams and
/// closures on metadata informers).
#[actix::test]
async fn batched_and_pipelined_subscribers_receive_metadata_events() {
    let server = server(10_000);
    server.seed_configmaps("default", 50).unwrap();
    let informer = metadata_informer(&server).page_size(20).start().unwrap();
    let options = kinformer::SubscribeOptions::default().batch_size(8);
    let (batched, batched_log) = Recorder::start();
    let _batched = informer
        .subscribe_batches(batched.recipient(), options)
        .await
        .unwrap();
    let (_open, gate) = tokio::sync::watch::channel(true);
    let (pipelined, pipelined_log) = SyncRecorder::gated(gate);
    let _pipelined = informer
        .subscribe_pipelined(&pipelined, options)
        .await
        .unwrap();
    informer.wait_for_sync(SYNC).await.unwrap();
    create(&server, "late", "1");
    server
        .delete("", "configmaps", Some("default"), "late")
        .unwrap();
    create(&server, "after", "1");
    converges(&server, &batched_log, "the batched subscriber caught up").await;
    converges(
        &server,
        &pipelined_log,
        "the pipelined subscriber caught up",
    )
    .await;
    let batched = batched_log.lock().unwrap();
    assert!(batched.batches.iter().all(|&n| (1..=8).contains(&n)));
    for log in [&*batched, &*pipelined_log.lock().unwrap()] {
        assert_eq!(
            log.count(|s| s.key == "default/late"),
            2,
            "added, then deleted"
        );
    }
}
