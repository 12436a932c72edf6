//! `rbac.authorization.k8s.io/v1` Roles, ClusterRoles and their bindings: served in
//! discovery with a real server's scopes and verbs, stored and read back through kube-client,
//! and stored only: the server's own authorizer (`ServerConfig::auth`) ignores them.

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kinformer_apiserver::{AuthConfig, Authorization, ServerConfig, TokenUser, UserInfo};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::discovery::{Discovery, Scope};
use serde_json::json;

const GROUP: &str = "rbac.authorization.k8s.io";

fn reader_role() -> serde_json::Value {
    json!({
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}]
    })
}

fn cluster_role(name: &str) -> ClusterRole {
    let mut body = reader_role();
    body["metadata"] = json!({"name": name});
    serde_json::from_value(body).unwrap()
}

fn binding_to(role_kind: &str, role: &str, name: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]
    })
}

#[tokio::test]
async fn discovery_serves_the_four_rbac_types_with_their_scopes() {
    let server = start().await;
    let doc = get(&format!("{}/apis/{GROUP}/v1", server.url()))
        .await
        .json();
    let resources = doc["resources"].as_array().unwrap();
    let mut served: Vec<(String, String, bool)> = resources
        .iter()
        .map(|r| {
            assert_eq!(r["verbs"].as_array().unwrap().len(), 8, "{r}");
            assert!(r.get("shortNames").is_none_or(|s| s == &json!([])), "{r}");
            (
                r["name"].as_str().unwrap().to_string(),
                r["kind"].as_str().unwrap().to_string(),
                r["namespaced"].as_bool().unwrap(),
            )
        })
        .collect();
    served.sort();
    let expected = [
        ("clusterrolebindings", "ClusterRoleBinding", false),
        ("clusterroles", "ClusterRole", false),
        ("rolebindings", "RoleBinding", true),
        ("roles", "Role", true),
    ]
    .map(|(n, k, ns)| (n.to_string(), k.to_string(), ns));
    assert_eq!(served, expected);

    // kube-client's discovery (aggregated, as kubectl reads it) agrees.
    let d = Discovery::new(kube_client(&server))
        .run_aggregated()
        .await
        .unwrap();
    let group = d.get(GROUP).expect("the rbac group is discovered");
    let scopes: Vec<(String, bool)> = group
        .recommended_resources()
        .into_iter()
        .map(|(ar, caps)| (ar.plural, caps.scope == Scope::Namespaced))
        .collect();
    assert!(
        scopes.contains(&("clusterroles".into(), false)),
        "{scopes:?}"
    );
    assert!(scopes.contains(&("roles".into(), true)), "{scopes:?}");
}

#[tokio::test]
async fn roles_and_bindings_are_stored_and_read_back_as_written() {
    let server = start().await;
    let client = kube_client(&server);
    let pp = PostParams::default();

    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let created = cluster_roles
        .create(&pp, &cluster_role("cm-reader"))
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace, None, "cluster-scoped");
    let rules = created.rules.clone().unwrap();
    assert_eq!(rules[0].verbs, ["list", "watch"]);
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["configmaps".into()][..])
    );

    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding: ClusterRoleBinding =
        serde_json::from_value(binding_to("ClusterRole", "cm-reader", "cm-reader")).unwrap();
    let stored = bindings.create(&pp, &binding).await.unwrap();
    assert_eq!(stored.role_ref.name, "cm-reader");
    assert_eq!(stored.subjects.unwrap()[0].kind, "ServiceAccount");

    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    let mut role = reader_role();
    role["metadata"] = json!({"name": "lease-holder"});
    role["rules"] = json!([{
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
        "verbs": ["get", "create", "update"]
    }]);
    let role: Role = serde_json::from_value(role).unwrap();
    let role = roles.create(&pp, &role).await.unwrap();
    assert_eq!(role.metadata.namespace.as_deref(), Some("default"));
    let role_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let rb: RoleBinding =
        serde_json::from_value(binding_to("Role", "lease-holder", "lease-holder")).unwrap();
    role_bindings.create(&pp, &rb).await.unwrap();

    let listed: Vec<String> = roles
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|r| r.metadata.name)
        .collect();
    assert_eq!(listed, ["lease-holder"]);
    // A Role lives in its namespace only.
    let elsewhere: Api<Role> = Api::namespaced(client.clone(), "kube-system");
    assert!(
        elsewhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // A delete answers a Status (the rbac registry does not return the deleted object).
    let deleted = cluster_roles
        .delete("cm-reader", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_right(), "{deleted:?}");
    let err = cluster_roles.get("cm-reader").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));
}

#[tokio::test]
async fn rbac_objects_do_not_change_what_the_servers_authorizer_allows() {
    let token = |token: &str, name: &str, groups: &[&str]| TokenUser {
        token: token.into(),
        user: UserInfo::new(name, groups.iter().copied()),
    };
    let server = start_with(ServerConfig {
        auth: Some(AuthConfig {
            tokens: vec![
                token("admin-token", "admin", &["system:masters"]),
                token(
                    "reader-token",
                    "system:serviceaccount:default:reader",
                    &["system:serviceaccounts"],
                ),
            ],
            anonymous: false,
            authorization: Authorization::Rules(Vec::new()),
        }),
        ..fast_config()
    })
    .await;
    let admin = server.kube_client("admin").await.unwrap();
    let pp = PostParams::default();
    Api::<ClusterRole>::all(admin.clone())
        .create(&pp, &cluster_role("cm-reader"))
        .await
        .unwrap();
    let binding: ClusterRoleBinding =
        serde_json::from_value(binding_to("ClusterRole", "cm-reader", "cm-reader")).unwrap();
    Api::<ClusterRoleBinding>::all(admin)
        .create(&pp, &binding)
        .await
        .unwrap();

    // The binding names the reader's service account, yet the server's own rules decide.
    let reader = server
        .kube_client("system:serviceaccount:default:reader")
        .await
        .unwrap();
    let err = Api::<ConfigMap>::all(reader)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err:?}"
    );
}
