//! Security at the engine level, against the embedded server's HTTPS and
//! authentication modes: TLS verified by default with the kubeconfig's CA,
//! a wrong CA fails clearly and without a retry storm, certificate checks
//! are skipped only when the kubeconfig says so, and 401 and 403 answers are
//! reported clearly and backed off. Requests are counted with the server's
//! request log (connections accepted, for TLS failures that never become
//! requests).

mod common;
#[path = "support/logs.rs"]
mod logs;

use std::time::Duration;

use common::{TestDir, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Informer, InformerError};
use kinformer_apiserver::{
    ApiServer, AuthConfig, Authorization, CertificateAuthority, Credentials, Rule, ServerConfig,
    ServerHandle, TlsConfig, TokenUser, UserInfo,
};

const SETTLE: Duration = Duration::from_secs(30);

/// An HTTPS server with authentication: `admin` (system:masters) and
/// `reader`, who may only get discovery (no rule for configmaps).
fn secure_server() -> ServerHandle {
    let mut auth = AuthConfig::admin_token("admin-token");
    auth.tokens.push(TokenUser {
        token: "reader-token".into(),
        user: UserInfo::new("reader", Vec::<String>::new()),
    });
    auth.authorization = Authorization::Rules(vec![
        Rule::user("reader")
            .verbs(["get"])
            .resources(["pods"])
            .namespaces(["default"]),
    ]);
    let server = ApiServer::start_in_thread(ServerConfig {
        tls: Some(TlsConfig::default()),
        auth: Some(auth),
        ..ServerConfig::default()
    })
    .expect("start an HTTPS server");
    server.seed_configmaps("default", 3).unwrap();
    server
}

/// A kube client from `kubeconfig`, as a service would build it; kube's own
/// retries off, so every answer reaches the informer.
async fn client_from(kubeconfig: kube::config::Kubeconfig) -> kube::Client {
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a kube config");
    config.default_retry = false;
    kube::Client::try_from(config).expect("a kube client")
}

fn informer(client: kube::Client) -> Informer<ConfigMap> {
    // The default backoff (800 ms doubling to 30 s): what users get.
    Informer::builder(kube::Api::<ConfigMap>::namespaced(client, "default"))
        .start()
        .expect("start")
}

/// The kubeconfig of `user` with its cluster's CA replaced by `ca`'s (a file
/// in the directory returned beside it, which the client reads when it is
/// made).
fn with_ca(
    server: &ServerHandle,
    user: &str,
    ca: &CertificateAuthority,
) -> (kube::config::Kubeconfig, TestDir) {
    let dir = TestDir::new("kinformer-security");
    let path = dir.join("ca.crt");
    std::fs::write(&path, ca.cert_pem()).unwrap();
    let mut kubeconfig = server.kubeconfig(user).unwrap();
    let cluster = kubeconfig.clusters[0].cluster.as_mut().unwrap();
    cluster.certificate_authority_data = None;
    cluster.certificate_authority = Some(path.display().to_string());
    (kubeconfig, dir)
}

#[actix::test]
async fn tls_is_verified_with_the_kubeconfig_ca() {
    let server = secure_server();
    assert!(server.url().starts_with("https://"));
    let informer = informer(client_from(server.kubeconfig("admin").unwrap()).await);
    informer.wait_for_sync(SETTLE).await.unwrap();
    assert_eq!(informer.store().snapshot().len(), 3);
    let lists = server
        .requests()
        .count(|r| r.verb == "list" && r.status == 200);
    assert!(lists >= 1, "the list went over HTTPS to this server");
    informer.stop().await;
}

/// An informer whose kubeconfig trusts another CA, and how long it tried.
async fn wrong_ca_informer(
    server: &ServerHandle,
) -> (Informer<ConfigMap>, InformerError, Duration) {
    let other = CertificateAuthority::generate().unwrap();
    let (kubeconfig, _ca_dir) = with_ca(server, "admin", &other);
    let informer = informer(client_from(kubeconfig).await);
    let t0 = std::time::Instant::now();
    let error = informer
        .wait_for_sync(Duration::from_secs(4))
        .await
        .unwrap_err();
    (informer, error, t0.elapsed())
}

#[actix::test]
async fn a_wrong_ca_fails_without_a_retry_storm() {
    let server = secure_server();
    let before = server.requests().counts().connections;
    let (informer, error, elapsed) = wrong_ca_informer(&server).await;
    let failure = informer.last_failure().expect("a recorded failure");
    assert_eq!(failure.request, "list");
    assert_eq!(failure.status, None, "no answer: the handshake failed");
    assert!(
        matches!(error, InformerError::SyncTimeout { .. })
            && error.to_string().contains("list failed"),
        "{error}"
    );
    // No request ever got through, and the attempts backed off: within 4 s
    // of 0.8 s doubling, at most 4 or 5 failed attempts (a hot loop makes
    // hundreds). One failed attempt can open more than one connection (seen:
    // 5 to 7 connections for 3 recorded failures), so connections are bounded
    // per failure, and one attempt may be in flight (connected, its failure
    // not counted yet).
    assert_eq!(server.requests().count(|r| r.verb == "list"), 0);
    let attempts = server.requests().counts().connections - before;
    let failures = informer.stats().failures;
    assert!(
        (1..=6).contains(&failures) && (1..=3 * (failures + 1)).contains(&attempts),
        "{attempts} connections, {failures} failures in {elapsed:?}"
    );
    informer.stop().await;
}

#[actix::test]
async fn a_wrong_ca_failure_says_it_is_the_certificate() {
    let server = secure_server();
    let (informer, error, _) = wrong_ca_informer(&server).await;
    let failure = informer.last_failure().expect("a recorded failure");
    let text = failure.message.to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("issuer"),
        "the failure says it is the certificate: {failure}"
    );
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
    informer.stop().await;
}

#[actix::test]
async fn certificate_checks_are_skipped_only_when_the_kubeconfig_says_so() {
    let server = secure_server();
    let other = CertificateAuthority::generate().unwrap();
    // Without the flag, the wrong CA fails (above); with it, the list goes through.
    let (mut kubeconfig, _ca_dir) = with_ca(&server, "admin", &other);
    kubeconfig.clusters[0]
        .cluster
        .as_mut()
        .unwrap()
        .insecure_skip_tls_verify = Some(true);
    kubeconfig.clusters[0]
        .cluster
        .as_mut()
        .unwrap()
        .certificate_authority = None;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    assert!(config.accept_invalid_certs, "the kubeconfig's flag is read");
    let informer = informer(kube::Client::try_from(config).unwrap());
    informer.wait_for_sync(SETTLE).await.unwrap();
    informer.stop().await;
    // And a kubeconfig without it verifies.
    let config = kube::Config::from_custom_kubeconfig(
        server.kubeconfig("admin").unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(!config.accept_invalid_certs);
}

/// kube-client logs it (`WARN kube_client::client::tls::rustls_tls: Server
/// cert bypassed`) when it builds the client; the informer, which takes a
/// ready client, never sees the TLS settings.
#[actix::test]
async fn skipping_certificate_checks_is_logged_as_a_warning() {
    let (logs, _guard) = logs::capture(tracing::Level::WARN);
    let server = secure_server();
    let mut kubeconfig = server.kubeconfig("admin").unwrap();
    let cluster = kubeconfig.clusters[0].cluster.as_mut().unwrap();
    cluster.insecure_skip_tls_verify = Some(true);
    cluster.certificate_authority_data = None;
    let informer = informer(client_from(kubeconfig).await);
    informer.wait_for_sync(SETTLE).await.unwrap();
    informer.stop().await;
    let warned = logs.lines_with("WARN");
    assert!(
        warned
            .iter()
            .any(|l| l.contains("cert bypassed") || l.to_lowercase().contains("insecure")),
        "no warning about skipped certificate checks: {warned:?}"
    );
}

/// How many list requests the server answered with `status` since `mark`.
fn lists_answered(server: &ServerHandle, mark: u64, status: u16) -> usize {
    server
        .requests()
        .since(mark)
        .iter()
        .filter(|r| r.verb == "list" && r.status == status)
        .count()
}

#[actix::test]
async fn forbidden_names_verb_resource_and_namespace_and_backs_off() {
    let server = secure_server();
    let mark = server.requests().mark();
    let kubeconfig = server.kubeconfig_with("reader", Credentials::Token("reader-token".into()));
    let informer = informer(client_from(kubeconfig).await);
    let error = informer
        .wait_for_sync(Duration::from_secs(4))
        .await
        .unwrap_err()
        .to_string();
    let failure = informer.last_failure().expect("a recorded failure");
    assert_eq!((failure.request, failure.status), ("list", Some(403)));
    for needle in ["list", "configmaps", "\"default\"", "reader"] {
        assert!(failure.message.contains(needle), "{needle} in {failure}");
        assert!(error.contains(needle), "{needle} in {error}");
    }
    let denied = lists_answered(&server, mark, 403);
    assert!(
        (1..=6).contains(&denied),
        "{denied} forbidden lists in 4 s: backoff, not a hot loop"
    );
    informer.stop().await;
}

#[actix::test]
async fn unauthorized_is_reported_with_its_status_and_backs_off() {
    let server = secure_server();
    let mark = server.requests().mark();
    let kubeconfig = server.kubeconfig_with("admin", Credentials::Token("a-wrong-token".into()));
    let informer = informer(client_from(kubeconfig).await);
    let error = informer
        .wait_for_sync(Duration::from_secs(4))
        .await
        .unwrap_err()
        .to_string();
    let failure = informer.last_failure().expect("a recorded failure");
    assert_eq!((failure.request, failure.status), ("list", Some(401)));
    assert!(failure.message.contains("Unauthorized"), "{failure}");
    assert!(error.contains("401"), "{error}");
    assert!(
        !error.contains("a-wrong-token"),
        "the token is never part of an error: {error}"
    );
    let denied = lists_answered(&server, mark, 401);
    assert!(
        (1..=6).contains(&denied),
        "{denied} unauthorized lists in 4 s: backoff, not a hot loop"
    );
    informer.stop().await;
}

#[actix::test]
async fn unauthorized_names_the_resource_and_namespace() {
    let server = secure_server();
    let kubeconfig = server.kubeconfig_with("admin", Credentials::Token("a-wrong-token".into()));
    let informer = informer(client_from(kubeconfig).await);
    eventually(SETTLE, "a failed list", || {
        informer.last_failure().is_some()
    })
    .await;
    let failure = informer.last_failure().unwrap();
    for needle in ["list", "configmaps", "default"] {
        assert!(
            failure.to_string().contains(needle),
            "{needle} in {failure}"
        );
    }
    informer.stop().await;
}
