//! The built-in types controllers need, stored without their controllers: Leases with
//! optimistic concurrency, workloads with `status` and `scale` subresources, and their
//! discovery entries (short names, categories, verbs).

mod common;

use common::*;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use serde_json::json;

fn lease(holder: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": "leader", "namespace": "default"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_lease_is_taken_renewed_and_a_stale_update_conflicts() {
    let server = start().await;
    let api: Api<Lease> = Api::namespaced(kube_client(&server), "default");
    let mine = api
        .create(&PostParams::default(), &lease("a"))
        .await
        .unwrap();
    assert!(
        mine.metadata.generation.is_none(),
        "Leases have no generation"
    );
    // Two candidates read the same version; the first renewal wins, the second conflicts.
    let mut first = mine.clone();
    let mut second = mine.clone();
    first.spec.as_mut().unwrap().renew_time =
        Some(serde_json::from_value(json!("2025-01-01T00:00:00.000000Z")).unwrap());
    let renewed = api
        .replace("leader", &PostParams::default(), &first)
        .await
        .unwrap();
    second.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let err = api
        .replace("leader", &PostParams::default(), &second)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(
                s.message.contains("leases.coordination.k8s.io \"leader\""),
                "{}",
                s.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        api.get("leader")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
    assert_ne!(
        renewed.metadata.resource_version,
        mine.metadata.resource_version
    );
}

fn deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        },
        "status": {"replicas": 7}
    }))
    .unwrap()
}

#[tokio::test]
async fn deployment_status_and_scale_subresources_and_generation() {
    let server = start().await;
    let api: Api<Deployment> = Api::namespaced(kube_client(&server), "default");
    let created = api
        .create(&PostParams::default(), &deployment(2))
        .await
        .unwrap();
    assert!(
        created.status.is_none(),
        "a create drops status, as the real server"
    );
    assert_eq!(created.metadata.generation, Some(1));

    // status through its subresource only
    let st = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"replicas": 2, "readyReplicas": 1}, "spec": {"replicas": 9}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(st.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(st.spec.replicas, Some(2));
    assert_eq!(st.metadata.generation, Some(1));
    let ignored = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(
        ignored.status.unwrap().ready_replicas,
        Some(1),
        "the main endpoint ignores status"
    );

    // scale reads and writes spec.replicas
    let scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    let status = scale.status.unwrap();
    assert_eq!(status.replicas, 2);
    assert_eq!(status.selector.as_deref(), Some("app=web"));
    let scaled = api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(5));
    let d = api.get("web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(2), "a scale changes the spec");

    // A StatefulSet scales the same way; a missing replica count defaults to 1.
    let sts_api: Api<StatefulSet> = Api::namespaced(kube_client(&server), "default");
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "pg"}]}}}
    }))
    .unwrap();
    let sts = sts_api.create(&PostParams::default(), &sts).await.unwrap();
    assert_eq!(sts.spec.replicas, Some(1));
    let mut scale = sts_api.get_scale("db").await.unwrap();
    scale.spec.as_mut().unwrap().replicas = Some(3);
    let scaled = sts_api
        .replace_scale("db", &PostParams::default(), &scale)
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    // A negative count is invalid.
    scale.spec.as_mut().unwrap().replicas = Some(-1);
    scale.metadata.resource_version = None;
    let err = sts_api
        .replace_scale("db", &PostParams::default(), &scale)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err:?}"
    );
}

#[tokio::test]
async fn generation_is_kept_only_by_kinds_with_a_spec() {
    let server = start().await;
    let client = kube_client(&server);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "v"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert!(
        created.metadata.generation.is_none(),
        "a real server keeps none on ConfigMaps"
    );
    let jobs: Api<Job> = Api::namespaced(client, "default");
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})).unwrap();
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let patched = jobs
        .patch(
            "j",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
}

#[tokio::test]
async fn discovery_has_kubectls_short_names_categories_and_subresources() {
    let server = start().await;
    let url = server.url();
    let apps = get(&format!("{url}/apis/apps/v1")).await.json();
    let find = |doc: &serde_json::Value, name: &str| {
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {doc}"))
    };
    for (name, short) in [
        ("deployments", "deploy"),
        ("replicasets", "rs"),
        ("statefulsets", "sts"),
        ("daemonsets", "ds"),
    ] {
        let r = find(&apps, name);
        assert_eq!(r["shortNames"], json!([short]));
        assert_eq!(r["categories"], json!(["all"]));
        assert_eq!(r["verbs"].as_array().unwrap().len(), 8);
    }
    assert_eq!(find(&apps, "deployments/scale")["kind"], "Scale");
    assert!(
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["name"] != "daemonsets/scale")
    );
    let core = get(&format!("{url}/api/v1")).await.json();
    for (name, short) in [
        ("configmaps", "cm"),
        ("namespaces", "ns"),
        ("pods", "po"),
        ("services", "svc"),
    ] {
        assert_eq!(find(&core, name)["shortNames"], json!([short]));
    }
    let crds = get(&format!("{url}/apis/apiextensions.k8s.io/v1"))
        .await
        .json();
    assert_eq!(
        find(&crds, "customresourcedefinitions")["shortNames"],
        json!(["crd", "crds"])
    );
    let leases = get(&format!("{url}/apis/coordination.k8s.io/v1"))
        .await
        .json();
    assert_eq!(find(&leases, "leases")["namespaced"], true);

    let d = Discovery::new(kube_client(&server)).run().await.unwrap();
    for g in [
        "apps",
        "batch",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(d.has_group(g), "{g}");
    }
}
