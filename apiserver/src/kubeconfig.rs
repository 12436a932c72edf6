//! A kubeconfig for the server itself (its URL, its CA, a user's token or client
//! certificate), and ready `kube::Config`/`kube::Client`s for tests: envtest's one line
//! from a started server to a client.

use std::path::Path;

use base64::Engine as _;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use secrecy::SecretString;

use crate::auth::UserInfo;
use crate::handle::ServerHandle;
use crate::tls::{CertifiedKey, TlsError};

/// The cluster and context name written into kubeconfigs.
pub const CLUSTER_NAME: &str = "kinformer-apiserver";

/// Why a kubeconfig or client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The server authenticates, but `user` has no token and the server has no TLS to
    /// issue a client certificate.
    #[error(
        "user {0:?} has no token and the server serves plain HTTP (no client certificates): add a token for it to AuthConfig::tokens"
    )]
    NoCredentials(String),
    /// A client certificate could not be issued.
    #[error("cannot issue a client certificate: {0}")]
    Tls(#[from] TlsError),
    /// The kubeconfig could not be written.
    #[error("cannot write the kubeconfig to {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The kubeconfig could not be serialized.
    #[error("cannot serialize the kubeconfig: {0}")]
    Serialize(String),
    /// kube refused the kubeconfig.
    #[error("kube refused the kubeconfig: {0}")]
    Kube(#[from] kube::config::KubeconfigError),
    /// kube could not build a client.
    #[error("cannot build a kube client: {0}")]
    Client(#[from] kube::Error),
}

/// What a client presents.
#[derive(Clone, Default)]
pub enum Credentials {
    /// Nothing (a server without authentication, or anonymous requests).
    #[default]
    None,
    /// A bearer token.
    Token(String),
    /// A client certificate and key.
    ClientCertificate(CertifiedKey),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
            Credentials::ClientCertificate(c) => {
                f.debug_tuple("ClientCertificate").field(c).finish()
            }
        }
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

impl ServerHandle {
    /// The CA certificate (PEM) an HTTPS server's certificate chains to; `None` for plain HTTP.
    pub fn ca_pem(&self) -> Option<String> {
        self.tls_state().map(|t| t.ca.cert_pem().to_string())
    }

    /// The HTTPS server's certificate authority, key included (to issue more certificates).
    pub fn certificate_authority(&self) -> Option<crate::tls::CertificateAuthority> {
        self.tls_state().map(|t| t.ca.clone())
    }

    /// A client certificate for `user` signed by the server's CA (HTTPS only): the server
    /// authenticates it as `user.name` in `user.groups`.
    pub fn client_certificate(&self, user: &UserInfo) -> Result<CertifiedKey, KubeconfigError> {
        let tls = self
            .tls_state()
            .ok_or_else(|| KubeconfigError::NoCredentials(user.name.clone()))?;
        Ok(tls.ca.issue_client(user)?)
    }

    /// What `user` presents: its token if [`AuthConfig::tokens`](crate::AuthConfig::tokens)
    /// has one, else (HTTPS) a fresh client certificate naming it (no groups); nothing when
    /// the server does not authenticate.
    pub fn credentials(&self, user: &str) -> Result<Credentials, KubeconfigError> {
        let Some(auth) = self.auth_config() else {
            return Ok(Credentials::None);
        };
        if let Some(t) = auth.token_user(user) {
            return Ok(Credentials::Token(t.token.clone()));
        }
        let cert = self.client_certificate(&UserInfo {
            name: user.to_string(),
            groups: Vec::new(),
        })?;
        Ok(Credentials::ClientCertificate(cert))
    }

    /// A kubeconfig for this server as `user` (see [`credentials`](Self::credentials)),
    /// with its CA, one cluster, user and context (namespace `default`), current.
    pub fn kubeconfig(&self, user: &str) -> Result<Kubeconfig, KubeconfigError> {
        Ok(self.kubeconfig_with(user, self.credentials(user)?))
    }

    /// A kubeconfig for this server presenting `credentials`, the user entry named `user`.
    pub fn kubeconfig_with(&self, user: &str, credentials: Credentials) -> Kubeconfig {
        let mut auth_info = AuthInfo::default();
        match credentials {
            Credentials::None => {}
            Credentials::Token(token) => auth_info.token = Some(SecretString::from(token)),
            Credentials::ClientCertificate(c) => {
                auth_info.client_certificate_data = Some(b64(&c.cert_pem));
                auth_info.client_key_data = Some(SecretString::from(b64(&c.key_pem)));
            }
        }
        Kubeconfig {
            clusters: vec![NamedCluster {
                name: CLUSTER_NAME.into(),
                cluster: Some(Cluster {
                    server: Some(self.url()),
                    certificate_authority_data: self.ca_pem().as_deref().map(b64),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: user.to_string(),
                auth_info: Some(auth_info),
                ..Default::default()
            }],
            contexts: vec![NamedContext {
                name: CLUSTER_NAME.into(),
                context: Some(Context {
                    cluster: CLUSTER_NAME.into(),
                    user: Some(user.to_string()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            current_context: Some(CLUSTER_NAME.into()),
            kind: Some("Config".into()),
            api_version: Some("v1".into()),
            ..Default::default()
        }
    }

    /// Write [`kubeconfig`](Self::kubeconfig) as YAML to `path` (mode 0600: it holds
    /// credentials), for `KUBECONFIG=path kubectl ...`.
    pub fn write_kubeconfig(&self, path: &Path, user: &str) -> Result<(), KubeconfigError> {
        write_kubeconfig_file(path, &self.kubeconfig(user)?)
    }

    /// A `kube::Config` for this server as `user`: trusts the server's CA, presents the
    /// user's credentials, default namespace `default`.
    pub async fn kube_config(&self, user: &str) -> Result<kube::Config, KubeconfigError> {
        let kubeconfig = self.kubeconfig(user)?;
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
    }

    /// A `kube::Client` for this server as `user` (call inside a tokio runtime).
    pub async fn kube_client(&self, user: &str) -> Result<kube::Client, KubeconfigError> {
        Ok(kube::Client::try_from(self.kube_config(user).await?)?)
    }
}

/// Write `kubeconfig` as YAML to `path`, readable by its owner only.
pub fn write_kubeconfig_file(path: &Path, kubeconfig: &Kubeconfig) -> Result<(), KubeconfigError> {
    let yaml = serde_saphyr::to_string(kubeconfig)
        .map_err(|e| KubeconfigError::Serialize(e.to_string()))?;
    let write_err = |source| KubeconfigError::Write {
        path: path.display().to_string(),
        source,
    };
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(write_err)?;
    file.write_all(yaml.as_bytes()).map_err(write_err)?;
    file.sync_all().map_err(write_err)
}
