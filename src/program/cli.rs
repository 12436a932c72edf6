//! Command-line arguments (clap) and how they map onto configuration keys.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::config::{FlagOverrides, LogFormat};

/// `kinformer`: runs informers against a cluster, or against the embedded API
/// server when none is configured.
#[derive(Debug, Parser)]
#[command(
    name = "kinformer",
    version,
    about = "Actor-based Kubernetes informer engine",
    long_about = "Actor-based Kubernetes informer engine.\n\n\
        Configuration: built-in defaults < config.toml < environment \
        (KINFORMER__SECTION__KEY, e.g. KINFORMER__ENGINE__PAGE_SIZE=1000) < flags.\n\
        Logs go to stderr, filtered by RUST_LOG (default: warn)."
)]
pub struct Cli {
    /// Configuration file (default: ./config.toml when present).
    #[arg(long, global = true, env = "KINFORMER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do (default: `run`).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the configured informers and show what they see.
    Run(RunArgs),
    /// Watch one resource with one printing subscriber.
    Watch(WatchArgs),
    /// Print one resource's objects once, from a synced cache, and exit.
    Get(GetArgs),
    /// Print the effective configuration (after file, environment and flags) as JSON.
    Config(ConfigArgs),
}

/// How to reach a cluster (kube's conventions unless told otherwise).
#[derive(Debug, Args, Default, Clone)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// API server URL, no credentials (e.g. `kubectl proxy`, an embedded server).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// Use the embedded API server (seeded, with churn) even when a cluster is configured.
    #[arg(long)]
    pub embedded: bool,
}

impl ClusterArgs {
    /// The configuration keys these flags set.
    pub fn overrides(&self, flags: &mut FlagOverrides) {
        flags.set(
            "cluster.kubeconfig",
            self.kubeconfig.as_ref().map(|p| p.display().to_string()),
        );
        flags.set("cluster.context", self.context.as_ref());
        flags.set("cluster.server", self.server.as_ref());
        if self.embedded {
            flags.set("cluster.embedded", Some(true));
        }
    }
}

/// `kinformer run`.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// Cluster selection.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Stop after this long (`30s`, `5m`); default: until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub run_for: Option<Duration>,
    /// Serve Prometheus `/metrics`, `/healthz` and `/readyz` on ADDR: `IP:PORT`,
    /// or a bare `PORT` on 127.0.0.1 (port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Embedded server: ConfigMaps to seed (overrides `embedded.seed`).
    #[arg(long, value_name = "N")]
    pub seed: Option<usize>,
    /// Embedded server: churn writes per second (overrides `embedded.churn_per_sec`).
    #[arg(long, value_name = "PER_SEC")]
    pub churn: Option<f64>,
    /// Keep each informer's cache in a snapshot under DIR and start from it
    /// next time: no relist inside the server's history window (sets
    /// `engine.persist`).
    #[arg(long, value_name = "DIR")]
    pub persist: Option<PathBuf>,
}

impl RunArgs {
    /// The configuration keys these flags set.
    pub fn overrides(&self) -> FlagOverrides {
        let mut flags = FlagOverrides::default();
        self.cluster.overrides(&mut flags);
        flags.set("observability.metrics_addr", self.metrics.as_ref());
        flags.set("embedded.seed", self.seed);
        flags.set("embedded.churn_per_sec", self.churn);
        flags.set(
            "engine.persist",
            self.persist.as_ref().map(|p| p.display().to_string()),
        );
        flags
    }
}

/// Output format of `kinformer watch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum WatchOutput {
    /// One aligned line per notification.
    #[default]
    Text,
    /// One JSON object per notification per line (for `jq`).
    Json,
    /// One YAML document per notification, each starting with `---`.
    Yaml,
}

/// Output format of `kinformer get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum GetOutput {
    /// NAMESPACE, NAME, AGE columns, as `kubectl get`.
    #[default]
    Table,
    /// A `List` of the objects, as `kubectl get -o json`.
    Json,
    /// The same `List` as YAML.
    Yaml,
}

/// Which resource and which of its objects (`watch` and `get`).
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// The resource, named as kubectl names it (see --help).
    #[arg(
        long_help = "The resource, named as kubectl names it: plural (`deployments`), \
        singular (`deployment`), kind in any case (`Deployment`) or a short name the server \
        lists (`deploy`, `cm`, `crd`, a CRD's own), optionally qualified by group \
        (`deployments.apps`, `widgets.example.com`) or by version and group \
        (`deployments.v1.apps`). A name the core group serves means the core resource; \
        a name served by several other groups must be qualified (the error lists them)."
    )]
    pub resource: String,
    /// Only this namespace (default: the kubeconfig's namespace).
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// All namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Label selector.
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR", value_parser = label_selector)]
    pub label_selector: Option<String>,
    /// Field selector.
    #[arg(long, value_name = "SELECTOR", value_parser = field_selector)]
    pub field_selector: Option<String>,
    /// Print Secrets' `data`/`stringData` values (redacted by default).
    #[arg(long)]
    pub show_secrets: bool,
    /// Cluster selection.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `kinformer watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Resource, namespace, selectors, cluster.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Resync period of the printing subscriber (`0s` = never).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub resync: Option<Duration>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = WatchOutput::Text)]
    pub output: WatchOutput,
    /// Include the object in each notification (Secret values redacted
    /// unless --show-secrets).
    #[arg(long)]
    pub full: bool,
    /// Stop after this long; default: until Ctrl-C.
    #[arg(long = "for", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub run_for: Option<Duration>,
}

/// `kinformer get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Resource, namespace, selectors, cluster.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = GetOutput::Table)]
    pub output: GetOutput,
}

impl TargetArgs {
    /// The configuration keys these flags set.
    pub fn overrides(&self) -> FlagOverrides {
        let mut flags = FlagOverrides::default();
        self.cluster.overrides(&mut flags);
        flags
    }
}

/// `kinformer config`.
#[derive(Debug, Args, Default)]
pub struct ConfigArgs {
    /// Cluster flags, layered like `run`'s.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// A label selector, checked here rather than by the server at the first
/// list (which would leave the informer retrying, never synced).
fn label_selector(s: &str) -> Result<String, String> {
    kinformer_apiserver::selector::LabelSelector::parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// A field selector's syntax, checked like [`label_selector`] (which fields
/// a resource supports is the server's to say).
fn field_selector(s: &str) -> Result<String, String> {
    kinformer_apiserver::selector::FieldSelector::parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}
