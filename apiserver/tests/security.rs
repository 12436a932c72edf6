//! Security on request: HTTPS with a generated CA (kube-client verifies it, and fails
//! clearly without it), bearer-token and client-certificate authentication (401 Status
//! objects as the real server's), the authorizer (403 Status objects as the real
//! server's), and kubectl over TLS with a kubeconfig the server writes.

mod common;

use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_apiserver::{
    AuthConfig, Authorization, Credentials, Rule, ServerConfig, ServerHandle, TlsConfig, TokenUser,
    UserInfo,
};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

fn token(token: &str, name: &str, groups: &[&str]) -> TokenUser {
    TokenUser {
        token: token.into(),
        user: UserInfo::new(name, groups.iter().copied()),
    }
}

/// Users: `admin` (system:masters), `viewer` (may read ConfigMaps in `default`), and
/// `carol`, who has no token (a client certificate) and may list ConfigMaps anywhere.
fn auth() -> AuthConfig {
    AuthConfig {
        tokens: vec![
            token("admin-token", "admin", &["system:masters"]),
            token("viewer-token", "viewer", &["viewers"]),
        ],
        anonymous: false,
        authorization: Authorization::Rules(vec![
            Rule::group("viewers")
                .verbs(["get", "list", "watch"])
                .api_groups([""])
                .resources(["configmaps"])
                .namespaces(["default"]),
            Rule::user("carol")
                .verbs(["list"])
                .api_groups([""])
                .resources(["configmaps"]),
        ]),
    }
}

async fn secure(tls: bool) -> ServerHandle {
    start_with(ServerConfig {
        tls: tls.then(TlsConfig::default),
        auth: Some(auth()),
        ..fast_config()
    })
    .await
}

/// A plain-HTTP request with an optional bearer token.
async fn call(method: &str, url: &str, bearer: Option<&str>, body: Option<Value>) -> Answer {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder().method(method).uri(url);
    if let Some(t) = bearer {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Bytes::from(v.to_string())
        }
        None => Bytes::new(),
    };
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(req.body(Full::new(body)).unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body,
    }
}

#[tokio::test]
async fn unauthenticated_requests_get_the_real_401_status() {
    let server = secure(false).await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let unauthorized = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    });
    for bearer in [None, Some("wrong-token")] {
        let a = call("GET", &url, bearer, None).await;
        assert_eq!(a.status, 401, "{bearer:?}");
        assert_eq!(a.json(), unauthorized);
        assert_eq!(a.headers["content-type"], "application/json");
    }
    // Even discovery and health need credentials when anonymous requests are off.
    assert_eq!(
        call("GET", &format!("{}/version", server.url()), None, None)
            .await
            .status,
        401
    );
    assert_eq!(
        call("GET", &url, Some("viewer-token"), None).await.status,
        200
    );
    // The request log names the users, and counts the refusals.
    let records = server.requests().records();
    assert_eq!(records.iter().filter(|r| r.status == 401).count(), 3);
    assert_eq!(records.last().unwrap().user.as_deref(), Some("viewer"));
}

#[tokio::test]
async fn denied_requests_get_the_real_403_status_and_discovery_is_allowed() {
    let server = secure(false).await;
    let base = server.url();
    let viewer = Some("viewer-token");
    let create = call(
        "POST",
        &format!("{base}/api/v1/namespaces/default/configmaps"),
        viewer,
        Some(cm("x", &[])),
    )
    .await;
    assert_eq!(create.status, 403);
    assert_eq!(
        create.json(),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps is forbidden: User \"viewer\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\"",
            "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403,
        })
    );
    let cluster_list = call("GET", &format!("{base}/api/v1/configmaps"), viewer, None).await;
    assert_eq!(cluster_list.status, 403);
    assert_eq!(
        cluster_list.json()["message"],
        "configmaps is forbidden: User \"viewer\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
    );
    let secret = call(
        "GET",
        &format!("{base}/api/v1/namespaces/default/secrets/s"),
        viewer,
        None,
    )
    .await;
    assert_eq!(secret.status, 403);
    assert_eq!(
        secret.json()["details"],
        json!({"name": "s", "kind": "secrets"})
    );
    let fault = call(
        "POST",
        &format!("{base}/admin/faults/compact"),
        viewer,
        Some(json!({})),
    )
    .await;
    assert_eq!(fault.status, 403);
    assert_eq!(
        fault.json()["message"],
        "forbidden: User \"viewer\" cannot post path \"/admin/faults/compact\""
    );
    // What the viewer may do, and what every authenticated user may read.
    for path in [
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1",
        "/api",
        "/api/v1",
        "/apis",
        "/version",
        "/healthz",
        "/openapi/v3",
    ] {
        assert_eq!(
            call("GET", &format!("{base}{path}"), viewer, None)
                .await
                .status,
            200,
            "{path}"
        );
    }
    // system:masters may do anything, the admin endpoints included.
    let admin = Some("admin-token");
    assert_eq!(
        call(
            "POST",
            &format!("{base}/api/v1/namespaces/default/configmaps"),
            admin,
            Some(cm("x", &[]))
        )
        .await
        .status,
        201
    );
    assert_eq!(
        call(
            "POST",
            &format!("{base}/admin/faults/compact"),
            admin,
            Some(json!({}))
        )
        .await
        .status,
        200
    );
}

#[tokio::test]
async fn kube_client_verifies_the_servers_ca_and_fails_clearly_without_it() {
    let server = secure(true).await;
    assert!(server.url().starts_with("https://127.0.0.1:"));
    assert!(server.ca_pem().unwrap().contains("BEGIN CERTIFICATE"));
    // One line to a client that trusts the CA and presents the admin token.
    let client = server.kube_client("admin").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut cm: ConfigMap = serde_json::from_value(common::cm("over-tls", &[])).unwrap();
    cm.metadata.namespace = None;
    cms.create(&PostParams::default(), &cm).await.unwrap();
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // Without the CA the handshake fails, and the error says why.
    let mut config = server.kube_config("admin").await.unwrap();
    config.root_cert = None;
    let untrusting: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let err = untrusting.list(&ListParams::default()).await.unwrap_err();
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain.push_str(&format!(": {s}"));
        source = s.source();
    }
    assert!(chain.contains("certificate"), "{chain}");

    // With the CA but a wrong token: the 401 Status reaches kube as an API error.
    let mut config = server.kube_config("admin").await.unwrap();
    config.auth_info.token = Some("nope".to_string().into());
    let wrong: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    match wrong.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(
                (s.code, s.reason.as_str(), s.message.as_str()),
                (401, "Unauthorized", "Unauthorized")
            )
        }
        other => panic!("expected a 401, got {other:?}"),
    }
}

#[tokio::test]
async fn client_certificates_authenticate_their_user() {
    let server = secure(true).await;
    server
        .create("", "configmaps", Some("default"), cm("a", &[]))
        .unwrap();
    // carol has no token: her kubeconfig carries a client certificate naming her.
    assert!(matches!(
        server.credentials("carol").unwrap(),
        Credentials::ClientCertificate(_)
    ));
    let carol = server.kube_client("carol").await.unwrap();
    let all: Api<ConfigMap> = Api::all(carol.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let one: Api<ConfigMap> = Api::namespaced(carol, "default");
    match one.get("a").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "configmaps \"a\" is forbidden: User \"carol\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\""
            );
        }
        other => panic!("expected a 403, got {other:?}"),
    }
    // A certificate in system:masters may do anything.
    let root = server
        .client_certificate(&UserInfo::new("root", ["system:masters"]))
        .unwrap();
    let kubeconfig = server.kubeconfig_with("root", Credentials::ClientCertificate(root));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let root: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    root.delete("a", &Default::default()).await.unwrap();
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    let cache = kubeconfig.with_extension("cache");
    Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .env("KUBERC", "off")
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--request-timeout=10s")
        .args(args)
        .output()
        .expect("kubectl is required for these tests; install kubectl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_works_over_tls_with_the_written_kubeconfig() {
    let server = secure(true).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin.yaml");
    server.write_kubeconfig(&admin, "admin").unwrap();
    let text = std::fs::read_to_string(&admin).unwrap();
    assert!(text.contains("certificate-authority-data"), "{text}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&admin).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let out = tokio::task::spawn_blocking(move || {
        let created = kubectl(
            &admin,
            &[
                "create",
                "configmap",
                "made-by-kubectl",
                "--from-literal=k=v",
            ],
        );
        let listed = kubectl(&admin, &["get", "configmaps", "-o", "name"]);
        (created, listed)
    })
    .await
    .unwrap();
    for o in [&out.0, &out.1] {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(
        String::from_utf8_lossy(&out.1.stdout).trim(),
        "configmap/made-by-kubectl"
    );
    // The viewer may read but not delete; kubectl prints the real server's message.
    let viewer = dir.path().join("viewer.yaml");
    server.write_kubeconfig(&viewer, "viewer").unwrap();
    let (get, delete) = tokio::task::spawn_blocking(move || {
        (
            kubectl(
                &viewer,
                &["get", "configmap", "made-by-kubectl", "-o", "name"],
            ),
            kubectl(&viewer, &["delete", "configmap", "made-by-kubectl"]),
        )
    })
    .await
    .unwrap();
    assert!(
        get.status.success(),
        "{}",
        String::from_utf8_lossy(&get.stderr)
    );
    assert!(!delete.status.success());
    assert!(
        String::from_utf8_lossy(&delete.stderr).contains(
            "configmaps \"made-by-kubectl\" is forbidden: User \"viewer\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\""
        ),
        "{}",
        String::from_utf8_lossy(&delete.stderr)
    );
}
