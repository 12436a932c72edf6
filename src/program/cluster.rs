//! Choosing the cluster: an explicit server URL, a kubeconfig and context,
//! kube's conventions (KUBECONFIG, ~/.kube/config, in-cluster), or the
//! embedded API server when none of those is configured.

use anyhow::Context as _;
use kinformer_apiserver::{ApiServer, ChurnHandle, ChurnSpec, ServerConfig, ServerHandle};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::config::{ClusterSettings, EmbeddedSettings};

/// The embedded server and its churn generator, kept alive while the program runs.
pub struct Embedded {
    /// The server.
    pub server: ServerHandle,
    /// The churn generator, if any.
    pub churn: Option<ChurnHandle>,
}

impl Embedded {
    /// Stops the churn and the server.
    pub fn shutdown(self) {
        if let Some(churn) = self.churn {
            churn.stop();
        }
        self.server.shutdown();
    }
}

/// A reachable cluster, and what to tell the user about it on the first line.
pub struct Cluster {
    /// The client configuration.
    pub config: kube::Config,
    /// The first line of output: which cluster, and why.
    pub banner: String,
    /// The embedded server, when that is what runs.
    pub embedded: Option<Embedded>,
}

/// Why the embedded server is used.
enum EmbeddedBecause {
    Asked,
    NoCluster(String),
}

/// Picks the cluster following kube's conventions; falls back to the embedded server.
pub async fn connect(
    settings: &ClusterSettings,
    embedded: &EmbeddedSettings,
) -> anyhow::Result<Cluster> {
    let because = if settings.embedded {
        EmbeddedBecause::Asked
    } else if let Some(url) = &settings.server {
        let uri = url
            .parse()
            .with_context(|| format!("cluster.server: {url:?} is not a URL"))?;
        return Ok(Cluster {
            config: kube::Config::new(uri),
            banner: format!("kinformer: using the API server at {url}"),
            embedded: None,
        });
    } else if settings.kubeconfig.is_some() || settings.context.is_some() {
        let options = KubeConfigOptions {
            context: settings.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &settings.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kc, &options).await
            }
            None => kube::Config::from_kubeconfig(&options).await,
        }
        .context("loading the kubeconfig")?;
        return Ok(Cluster {
            banner: format!(
                "kinformer: using the cluster at {} (context {})",
                config.cluster_url,
                settings.context.as_deref().unwrap_or("current")
            ),
            config,
            embedded: None,
        });
    } else {
        match kube::Config::infer().await {
            Ok(config) => {
                return Ok(Cluster {
                    banner: format!(
                        "kinformer: using the configured cluster at {}",
                        config.cluster_url
                    ),
                    config,
                    embedded: None,
                });
            }
            // A configuration that exists but does not load is an error: falling
            // back to the embedded server would hide it behind a fake cluster.
            Err(e) => match configured_elsewhere() {
                Some(source) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("loading the cluster configuration from {source}")));
                }
                None => EmbeddedBecause::NoCluster(e.to_string()),
            },
        }
    };
    let server = ApiServer::start_in_thread(ServerConfig::default())
        .context("starting the embedded API server")?;
    if embedded.seed > 0 {
        server
            .seed_configmaps(&embedded.seed_namespace, embedded.seed)
            .context("seeding the embedded API server")?;
    }
    let churn = (embedded.churn_per_sec > 0.0 && embedded.churn_objects > 0).then(|| {
        server.start_churn(ChurnSpec {
            namespace: embedded.churn_namespace.clone(),
            objects: embedded.churn_objects,
            ops_per_sec: embedded.churn_per_sec,
            ..ChurnSpec::default()
        })
    });
    let why = match &because {
        EmbeddedBecause::Asked => "--embedded".to_owned(),
        EmbeddedBecause::NoCluster(_) => "no cluster configured".to_owned(),
    };
    if let EmbeddedBecause::NoCluster(reason) = &because {
        tracing::info!(%reason, "no cluster configuration found; using the embedded API server");
    }
    let banner = format!(
        "kinformer: {why}; running against the embedded API server at {} ({} ConfigMaps seeded in {:?}, churn {} writes/s over {} objects in {:?})",
        server.url(),
        embedded.seed,
        embedded.seed_namespace,
        embedded.churn_per_sec,
        embedded.churn_objects,
        embedded.churn_namespace,
    );
    let mut config = kube::Config::new(server.url().parse().context("embedded server URL")?);
    config.default_namespace = "default".into();
    Ok(Cluster {
        config,
        banner,
        embedded: Some(Embedded { server, churn }),
    })
}

/// Where kube's conventions find a cluster configuration, if anywhere:
/// `KUBECONFIG` (non-empty), `~/.kube/config`, or the in-cluster environment.
fn configured_elsewhere() -> Option<String> {
    if let Some(value) = std::env::var_os("KUBECONFIG")
        && std::env::split_paths(&value).any(|p| !p.as_os_str().is_empty())
    {
        return Some(format!("KUBECONFIG={}", value.to_string_lossy()));
    }
    let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"));
    if let Some(home) = home {
        let default = std::path::Path::new(&home).join(".kube").join("config");
        if default.exists() {
            return Some(default.display().to_string());
        }
    }
    std::env::var_os("KUBERNETES_SERVICE_HOST")
        .map(|_| "the in-cluster environment (KUBERNETES_SERVICE_HOST)".to_owned())
}
