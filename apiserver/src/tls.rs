//! HTTPS: a certificate authority (generated or given), the server certificate it issues
//! for `127.0.0.1`/`localhost`, client certificates for users, and the rustls server
//! configuration that asks for (but does not require) a client certificate.
//!
//! rcgen issues the certificates and rustls with the ring provider serves them, the stack
//! kube-client itself uses (`rustls-tls` + `ring`). A client certificate names its user the
//! way kube-apiserver's x509 authenticator reads it: the subject's common name is the user,
//! each organization a group.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::auth::UserInfo;

/// Why certificates could not be made or loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused to generate or sign a certificate.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM given to the server does not hold what it should.
    #[error("invalid PEM for the {what}: {detail}")]
    Pem {
        /// Which PEM (CA certificate, CA key, ...).
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("cannot configure TLS: {0}")]
    Rustls(#[from] rustls::Error),
    /// A client certificate was asked for more than one group.
    #[error(
        "a client certificate names at most one group (rcgen writes one organization per subject); got {0:?}: use a token for users in several groups"
    )]
    TooManyGroups(Vec<String>),
}

/// A certificate authority: its certificate and its private key, both PEM.
///
/// The key never appears in `Debug` output.
#[derive(Clone)]
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A certificate and its private key, both PEM (a client's identity).
#[derive(Clone)]
pub struct CertifiedKey {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for CertifiedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl CertificateAuthority {
    /// A fresh self-signed CA (ECDSA P-256), named `kinformer-apiserver-ca`.
    pub fn generate() -> Result<Self, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kinformer-apiserver-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A CA from its certificate and key PEMs (checked now, so a bad pair fails at start).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let ca = CertificateAuthority {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        };
        ca.issuer()?;
        Ok(ca)
    }

    /// The CA certificate (what a client trusts).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, TlsError> {
        let key = KeyPair::from_pem(&self.key_pem).map_err(|e| TlsError::Pem {
            what: "CA key",
            detail: e.to_string(),
        })?;
        Issuer::from_ca_cert_pem(&self.cert_pem, key).map_err(|e| TlsError::Pem {
            what: "CA certificate",
            detail: e.to_string(),
        })
    }

    fn issue(
        &self,
        params: &mut CertificateParams,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<CertifiedKey, TlsError> {
        let issuer = self.issuer()?;
        let key = KeyPair::generate()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(CertifiedKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A server certificate for `localhost`, `127.0.0.1`, `::1` and `extra_names` (DNS
    /// names or IP addresses).
    pub fn issue_server(&self, extra_names: &[String]) -> Result<CertifiedKey, TlsError> {
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(str::to_string)
            .collect();
        for name in extra_names {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kinformer-apiserver");
        self.issue(&mut params, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate naming `user` (common name) and its group (organization):
    /// at most one group, see [`TlsError::TooManyGroups`].
    pub fn issue_client(&self, user: &UserInfo) -> Result<CertifiedKey, TlsError> {
        if user.groups.len() > 1 {
            return Err(TlsError::TooManyGroups(user.groups.clone()));
        }
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, user.name.as_str());
        if let Some(group) = user.groups.first() {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group.as_str());
        }
        self.issue(&mut params, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// How the server serves HTTPS.
#[derive(Debug, Clone, Default)]
pub struct TlsConfig {
    /// The CA that issues the server's certificate and accepted client certificates;
    /// `None` generates one at start (see [`ServerHandle::ca_pem`](crate::ServerHandle::ca_pem)).
    pub ca: Option<CertificateAuthority>,
    /// Names the server certificate holds besides `localhost`, `127.0.0.1` and `::1`.
    pub extra_names: Vec<String>,
}

/// What a started HTTPS server holds: its CA and the rustls configuration.
pub(crate) struct TlsState {
    pub(crate) ca: CertificateAuthority,
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for TlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsState")
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_err(what: &'static str) -> impl Fn(rustls::pki_types::pem::Error) -> TlsError {
    move |e| TlsError::Pem {
        what,
        detail: e.to_string(),
    }
}

impl TlsState {
    /// Issue the server certificate and build the acceptor.
    pub(crate) fn new(config: &TlsConfig) -> Result<TlsState, TlsError> {
        let ca = match &config.ca {
            Some(ca) => ca.clone(),
            None => CertificateAuthority::generate()?,
        };
        let server = ca.issue_server(&config.extra_names)?;
        let chain = vec![
            CertificateDer::from_pem_slice(server.cert_pem.as_bytes())
                .map_err(pem_err("server certificate"))?,
        ];
        let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes())
            .map_err(pem_err("server key"))?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(
            CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())
                .map_err(pem_err("CA certificate"))?,
        )?;
        // Ask for a client certificate but let connections without one through: they
        // may authenticate with a token (or be refused with a 401 by authentication).
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Pem {
            what: "CA certificate",
            detail: e.to_string(),
        })?;
        let mut server_config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)?;
        server_config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsState {
            ca,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server_config)),
        })
    }
}

/// The user a verified client certificate names: common name and organizations.
pub(crate) fn certificate_user(cert: &CertificateDer<'_>) -> Option<UserInfo> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(UserInfo { name, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_name_their_user_and_groups() {
        let ca = CertificateAuthority::generate().unwrap();
        let user = UserInfo::new("alice", ["dev"]);
        let id = ca.issue_client(&user).unwrap();
        let der = CertificateDer::from_pem_slice(id.cert_pem.as_bytes()).unwrap();
        assert_eq!(certificate_user(&der), Some(user));
        let two = UserInfo::new("bob", ["dev", "ops"]);
        assert!(matches!(
            ca.issue_client(&two),
            Err(TlsError::TooManyGroups(_))
        ));
        assert!(!format!("{id:?}").contains("PRIVATE KEY"));
        assert!(!format!("{ca:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn a_ca_round_trips_through_pem_and_a_bad_one_is_an_error() {
        let ca = CertificateAuthority::generate().unwrap();
        let again = CertificateAuthority::from_pem(ca.cert_pem(), ca.key_pem()).unwrap();
        assert!(
            TlsState::new(&TlsConfig {
                ca: Some(again),
                extra_names: vec!["kinformer.test".into()],
            })
            .is_ok()
        );
        let err = CertificateAuthority::from_pem("not a pem", ca.key_pem()).unwrap_err();
        assert!(err.to_string().contains("CA certificate"), "{err}");
        let err = CertificateAuthority::from_pem(ca.cert_pem(), "garbage").unwrap_err();
        assert!(err.to_string().contains("CA key"), "{err}");
    }
}
