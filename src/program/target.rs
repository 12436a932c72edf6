//! One resource named on the command line (`watch`, `get`): the cluster,
//! the resource resolved through discovery, the namespace looked at, and
//! its informer.

use anyhow::Context as _;
use kinformer::Informer;
use kube::core::DynamicObject;

use super::build::{Selection, start_informer};
use super::cli::TargetArgs;
use super::cluster;
use super::config::{EmbeddedSettings, Loaded};
use super::discovery::resolve_all;
use super::output::ObjectView;
use super::resource::{Resolved, ResourceSpec};

/// A resolved resource on a connected cluster.
pub struct Target {
    /// The cluster (and the embedded server, when that is what runs).
    pub cluster: cluster::Cluster,
    /// A client for it.
    pub client: kube::Client,
    /// The resource.
    pub resource: Resolved,
    /// The namespace looked at; `None`: all namespaces, or cluster-scoped.
    pub namespace: Option<String>,
}

impl Target {
    /// Connects (printing the banner on stderr), resolves `args.resource`,
    /// chooses the namespace (`-n`, else the kubeconfig's; none with `-A`
    /// or for a cluster-scoped resource).
    pub async fn open(loaded: &Loaded, args: &TargetArgs) -> anyhow::Result<Target> {
        let settings = &loaded.settings;
        // A small workload, in the namespace looked at by default, so that
        // `kinformer watch configmaps` shows changes as they happen.
        let embedded = EmbeddedSettings {
            seed: 10,
            churn_per_sec: 1.0,
            churn_objects: 10,
            churn_namespace: "default".into(),
            ..EmbeddedSettings::default()
        };
        let cluster = cluster::connect(&settings.cluster, &embedded).await?;
        eprintln!("{}", cluster.banner);
        let client =
            kube::Client::try_from(cluster.config.clone()).context("building the client")?;
        let spec = ResourceSpec {
            resource: Some(args.resource.clone()),
            ..ResourceSpec::default()
        };
        let resource = super::within(
            "reading the server's discovery documents",
            settings.engine.read_timeout,
            async {
                resolve_all(&client, std::slice::from_ref(&spec))
                    .await
                    .context("reading the server's discovery documents")
            },
        )
        .await?
        .pop()
        .context("not resolved")?
        .map_err(|e| anyhow::anyhow!("RESOURCE {:?}: {e}", args.resource))?;
        let namespace = match (&args.namespace, args.all_namespaces) {
            (_, true) => None,
            (Some(ns), false) => Some(ns.clone()),
            (None, false) => Some(cluster.config.default_namespace.clone()),
        }
        .filter(|_| resource.namespaced);
        Ok(Target {
            cluster,
            client,
            resource,
            namespace,
        })
    }

    /// `namespace "x"`, `all namespaces` or `cluster-scoped`, for messages.
    pub fn scope(&self) -> String {
        match (&self.namespace, self.resource.namespaced) {
            (_, false) => "cluster-scoped".into(),
            (Some(ns), true) => format!("in namespace {ns:?}"),
            (None, true) => "in all namespaces".into(),
        }
    }

    /// Starts the informer over the selected objects, with the engine's settings.
    pub fn start_informer(
        &self,
        args: &TargetArgs,
        loaded: &Loaded,
    ) -> anyhow::Result<Informer<DynamicObject>> {
        let selection = Selection {
            namespace: self.namespace.clone(),
            label_selector: args.label_selector.clone(),
            field_selector: args.field_selector.clone(),
            ..Selection::default()
        };
        Ok(start_informer(
            self.client.clone(),
            &self.resource,
            &selection,
            &loaded.settings.engine,
        )?)
    }

    /// How this resource's objects are printed.
    pub fn objects(&self, args: &TargetArgs) -> ObjectView {
        ObjectView::new(&self.resource, args.show_secrets)
    }

    /// Stops the embedded server, if it runs.
    pub fn shutdown(self) {
        if let Some(embedded) = self.cluster.embedded {
            embedded.shutdown();
        }
    }
}
