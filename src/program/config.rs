//! The program's configuration: built-in defaults < `config.toml` <
//! environment (`KINFORMER__SECTION__KEY`) < command-line flags, layered with
//! the `config` crate and checked as a whole before anything starts.
//!
//! Every error names the key (`engine.backoff.initial`,
//! `informers[0].subscribers[1].resync`) and where its value came from (the
//! file's path, "the environment", "the command line" or "the built-in
//! defaults"), so an operator can fix it without reading code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{Map, Source, Value, ValueKind};
use kinformer_apiserver::selector::{FieldSelector, LabelSelector};
use serde::{Deserialize, Serialize};

/// Where the built-in defaults "come from", in messages.
pub const DEFAULTS_ORIGIN: &str = "the built-in defaults";
/// Where command-line flags come from, in messages.
pub const FLAGS_ORIGIN: &str = "the command line";
/// The file read when `--config` is not given (optional).
pub const DEFAULT_CONFIG_FILE: &str = "config.toml";
/// Prefix of environment overrides: `KINFORMER__ENGINE__PAGE_SIZE=1000`.
pub const ENV_PREFIX: &str = "KINFORMER";

/// A configuration problem: which key, from where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The key, as a path (`informers[0].resource`); empty for the whole file.
    pub key: String,
    /// The file, "the environment", "the command line" or "the built-in defaults".
    pub origin: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(
                f,
                "configuration error in {}: {}",
                self.origin, self.message
            )
        } else {
            write!(
                f,
                "configuration error: `{}` (from {}): {}",
                self.key, self.origin, self.message
            )
        }
    }
}

/// What a subscriber does when it falls behind (see `kinformer::OverflowPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Bounded queue; a full queue holds the informer back (back-pressure).
    #[default]
    Block,
    /// Pending notifications merge per key; nobody is held back.
    Coalesce,
}

impl From<Policy> for kinformer::OverflowPolicy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::Block => kinformer::OverflowPolicy::Block,
            Policy::Coalesce => kinformer::OverflowPolicy::Coalesce,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Defaults of every informer and subscriber.
    pub engine: EngineSettings,
    /// Which cluster to talk to.
    pub cluster: ClusterSettings,
    /// The embedded API server used when there is no cluster.
    pub embedded: EmbeddedSettings,
    /// Logs, metrics, status output.
    pub observability: ObservabilitySettings,
    /// The informers `kinformer run` starts.
    pub informers: Vec<InformerSettings>,
    /// Run as one of several replicas, one leading (absent: no election).
    pub leader_election: Option<LeaderElectionSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            engine: EngineSettings::default(),
            cluster: ClusterSettings::default(),
            embedded: EmbeddedSettings::default(),
            observability: ObservabilitySettings::default(),
            informers: vec![InformerSettings {
                name: Some("configmaps".into()),
                resource: Some("configmaps".into()),
                subscribers: vec![
                    SubscriberSettings {
                        name: "fast".into(),
                        resync: Some(Duration::from_secs(10)),
                        policy: Some(Policy::Block),
                        capacity: None,
                    },
                    SubscriberSettings {
                        name: "slow".into(),
                        resync: Some(Duration::from_secs(30)),
                        policy: Some(Policy::Coalesce),
                        capacity: None,
                    },
                ],
                ..InformerSettings::default()
            }],
            leader_election: None,
        }
    }
}

/// Engine defaults, used by every informer and subscriber that does not override them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSettings {
    /// Page size of lists (0 = unpaginated).
    pub page_size: u32,
    /// Try streaming lists (`sendInitialEvents`) before plain lists.
    pub streaming_lists: bool,
    /// Resync period of subscribers that set none (`0s` = never).
    #[serde(with = "humantime_serde")]
    pub default_resync: Duration,
    /// Queue capacity of subscribers that set none.
    pub queue_capacity: usize,
    /// Overflow policy of subscribers that set none.
    pub overflow_policy: Policy,
    /// Drop `metadata.managedFields` before caching.
    pub drop_managed_fields: bool,
    /// How long a list page or a watch open may go unanswered, and a watch
    /// may outlive the timeout it asked for (`0s` = no deadline).
    #[serde(with = "humantime_serde")]
    pub read_timeout: Duration,
    /// Shortest server-side watch timeout asked for (each watch: [min, 2·min)).
    #[serde(with = "humantime_serde")]
    pub min_watch_timeout: Duration,
    /// Backoff between failed list/watch attempts.
    pub backoff: BackoffSettings,
    /// DeltaFIFO tuning.
    pub fifo: FifoSettings,
    /// Keep every informer's cache in a snapshot in this directory and
    /// start from it (warm restart; default: off).
    pub persist: Option<PathBuf>,
    /// Compact caches (`InformerBuilder::compact_cache`; default: off).
    pub compact_cache: bool,
    /// A compact cache's most recently written objects kept decoded
    /// (`CompactOptions::recent`).
    pub compact_recent: usize,
    /// List pages (or runs of a streaming list's events) decoded at once on
    /// other threads than the informer's (`InformerBuilder::list_decoders`;
    /// 0: on the informer's thread; default: 2, or 0 on one core).
    pub list_decoders: Option<usize>,
}

impl Default for EngineSettings {
    /// The library's defaults (except `drop_managed_fields`, the program's own choice).
    fn default() -> Self {
        let reflector = kinformer::ReflectorOptions::default();
        EngineSettings {
            page_size: reflector.page_size.unwrap_or(kinformer::DEFAULT_PAGE_SIZE),
            streaming_lists: reflector.streaming_lists,
            default_resync: Duration::ZERO,
            queue_capacity: kinformer::SubscribeOptions::DEFAULT_CAPACITY,
            overflow_policy: Policy::Block,
            drop_managed_fields: true,
            read_timeout: reflector.read_timeout,
            min_watch_timeout: reflector.min_watch_timeout,
            backoff: BackoffSettings::default(),
            fifo: FifoSettings::default(),
            persist: None,
            compact_cache: false,
            compact_recent: kinformer::CompactOptions::default().recent_objects(),
            list_decoders: None,
        }
    }
}

/// The Reflector's backoff (spec ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackoffSettings {
    /// First wait.
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    /// Longest wait.
    #[serde(with = "humantime_serde")]
    pub cap: Duration,
    /// Back to `initial` after this long without a failure.
    #[serde(with = "humantime_serde")]
    pub reset_after: Duration,
}

impl Default for BackoffSettings {
    fn default() -> Self {
        let d = kinformer::Backoff::default();
        BackoffSettings {
            initial: d.initial(),
            cap: d.cap(),
            reset_after: d.reset_after(),
        }
    }
}

/// DeltaFIFO tuning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FifoSettings {
    /// Most keys handed to the Indexer in one batch.
    pub batch_size: usize,
    /// The same until the initial list is processed.
    pub initial_batch_size: usize,
    /// Queued deltas above which the Reflector stops reading the watch.
    pub high_watermark: usize,
}

impl Default for FifoSettings {
    fn default() -> Self {
        let d = kinformer::FifoOptions::default();
        FifoSettings {
            batch_size: d.batch_size,
            initial_batch_size: d.initial_batch_size,
            high_watermark: d.high_watermark,
        }
    }
}

/// Cluster selection; empty means kube's conventions (KUBECONFIG, ~/.kube/config, in-cluster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// A kubeconfig file instead of KUBECONFIG / ~/.kube/config.
    pub kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig instead of its current one.
    pub context: Option<String>,
    /// An API server URL, without credentials (tests, `kubectl proxy`).
    pub server: Option<String>,
    /// Always use the embedded API server.
    pub embedded: bool,
}

/// The embedded API server's workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddedSettings {
    /// ConfigMaps seeded into `seed_namespace` before the informers start.
    pub seed: usize,
    /// Namespace of the seeded ConfigMaps.
    pub seed_namespace: String,
    /// Writes per second of the churn generator (0 = none).
    pub churn_per_sec: f64,
    /// Distinct ConfigMaps the churn cycles through.
    pub churn_objects: usize,
    /// Namespace of the churned ConfigMaps.
    pub churn_namespace: String,
}

impl Default for EmbeddedSettings {
    fn default() -> Self {
        EmbeddedSettings {
            seed: 5_000,
            seed_namespace: "default".into(),
            churn_per_sec: 200.0,
            churn_objects: 500,
            churn_namespace: "churn".into(),
        }
    }
}

/// Logs, metrics and status output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObservabilitySettings {
    /// `text` or `json` log lines (on stderr; filtered by `RUST_LOG`).
    pub log_format: LogFormat,
    /// Serve `/metrics`, `/healthz`, `/readyz` on this address (`IP:port`,
    /// or a bare port on 127.0.0.1; port 0 picks one).
    pub metrics_addr: Option<String>,
    /// How often the live status is printed.
    #[serde(with = "humantime_serde")]
    pub status_interval: Duration,
}

impl Default for ObservabilitySettings {
    fn default() -> Self {
        ObservabilitySettings {
            log_format: LogFormat::Text,
            metrics_addr: None,
            status_interval: Duration::from_secs(1),
        }
    }
}

/// `[leader_election]`: a Lease elects one leader among the replicas of
/// `kinformer run` (client-go's rules, LE-1..LE-11); every replica's
/// informers run (warm standby).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderElectionSettings {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace (default: `POD_NAMESPACE`, the pod's own, which
    /// the Deployment sets and `deploy/leader-election/rbac.yaml` grants;
    /// else `default`).
    pub namespace: String,
    /// This replica's identity (default: `POD_NAME`, else the host name with a random suffix).
    pub identity: Option<String>,
    /// How long others wait after the last renew they saw (whole seconds).
    #[serde(with = "humantime_serde")]
    pub lease_duration: Duration,
    /// How long a leader leads without a successful renew.
    #[serde(with = "humantime_serde")]
    pub renew_deadline: Duration,
    /// How often the leader renews and candidates try (jittered).
    #[serde(with = "humantime_serde")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionSettings {
    fn default() -> Self {
        let t = kinformer::ElectionTimings::default();
        LeaderElectionSettings {
            lease_name: "kinformer".into(),
            namespace: std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "default".into()),
            identity: None,
            lease_duration: t.lease_duration,
            renew_deadline: t.renew_deadline,
            retry_period: t.retry_period,
        }
    }
}

impl LeaderElectionSettings {
    /// The three durations, for the elector.
    pub fn timings(&self) -> kinformer::ElectionTimings {
        kinformer::ElectionTimings {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// One informer: which objects, and who subscribes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct InformerSettings {
    /// A name for status and metrics (default: the resource).
    pub name: Option<String>,
    /// The resource by plural, singular, kind or short name, optionally
    /// group-qualified (`configmaps`, `deploy`, `deployments.apps`,
    /// `widgets`), exclusive with `kind`.
    pub resource: Option<String>,
    /// The API group (`""` = core), with `kind` or to qualify `resource`.
    pub group: Option<String>,
    /// The API version (default: the server's preferred one).
    pub version: Option<String>,
    /// The resource by kind (`Deployment`), exclusive with `resource`.
    pub kind: Option<String>,
    /// Only this namespace (default: all namespaces).
    pub namespace: Option<String>,
    /// Label selector (`app=web,tier in (a,b)`).
    pub label_selector: Option<String>,
    /// Field selector (`metadata.name=x`).
    pub field_selector: Option<String>,
    /// Page size of this informer's lists (default: `engine.page_size`).
    pub page_size: Option<u32>,
    /// Streaming lists for this informer (default: `engine.streaming_lists`).
    pub streaming_lists: Option<bool>,
    /// Snapshot directory of this informer (warm restart; default:
    /// `engine.persist`).
    pub persist: Option<PathBuf>,
    /// A compact cache for this informer (default: `engine.compact_cache`).
    pub compact_cache: Option<bool>,
    /// The subscribers.
    pub subscribers: Vec<SubscriberSettings>,
}

impl InformerSettings {
    /// The name shown in status lines and metrics labels.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .or_else(|| self.resource.clone())
            .or_else(|| self.kind.as_ref().map(|k| k.to_lowercase()))
            .unwrap_or_default()
    }
}

/// One subscriber of an informer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SubscriberSettings {
    /// A name for status and metrics.
    pub name: String,
    /// Resync period (`0s` = never; default `engine.default_resync`).
    #[serde(with = "humantime_serde")]
    pub resync: Option<Duration>,
    /// Overflow policy (default `engine.overflow_policy`).
    pub policy: Option<Policy>,
    /// Queue capacity (default `engine.queue_capacity`).
    pub capacity: Option<usize>,
}

/// Values from command-line flags, layered over everything else.
#[derive(Debug, Clone, Default)]
pub struct FlagOverrides(pub Vec<(String, String)>);

impl FlagOverrides {
    /// Adds `key = value` when `value` is set.
    pub fn set(&mut self, key: &str, value: Option<impl ToString>) {
        if let Some(v) = value {
            self.0.push((key.to_owned(), v.to_string()));
        }
    }
}

impl Source for FlagOverrides {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, config::ConfigError> {
        let origin = FLAGS_ORIGIN.to_owned();
        Ok(self
            .0
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    Value::new(Some(&origin), ValueKind::String(v.clone())),
                )
            })
            .collect())
    }
}

/// Loaded settings, with the layered sources kept to say where a key came from.
pub struct Loaded {
    /// The checked settings.
    pub settings: Settings,
    /// The config file read, if any.
    pub file: Option<PathBuf>,
    layered: config::Config,
}

impl Loaded {
    /// Where the value of `key` came from.
    pub fn origin(&self, key: &str) -> String {
        origin_of(&self.layered, self.file.as_deref(), key)
    }

    /// An error about `key`, naming its origin.
    pub fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.to_owned(),
            origin: self.origin(key),
            message: message.into(),
        }
    }
}

fn origin_of(layered: &config::Config, file: Option<&Path>, key: &str) -> String {
    // Walk the layered tree along the key; the deepest value with an origin wins
    // (a table merged from several sources has none of its own).
    let mut found = None;
    let mut at = Some(&layered.cache);
    for segment in split_key(key) {
        at = at.and_then(|v| match (&v.kind, segment) {
            (ValueKind::Table(t), Segment::Field(f)) => t.get(f),
            (ValueKind::Array(a), Segment::Index(i)) => a.get(i),
            _ => None,
        });
        if let Some(o) = at.and_then(Value::origin) {
            found = Some(o.to_owned());
        }
    }
    match (found, file) {
        (None, _) => DEFAULTS_ORIGIN.to_owned(),
        // `config` names files relative to the working directory; say it as the user did.
        (Some(o), Some(f)) if o != "the environment" && o != FLAGS_ORIGIN => {
            f.display().to_string()
        }
        (Some(o), _) => o,
    }
}

enum Segment<'a> {
    Field(&'a str),
    Index(usize),
}

/// `informers[0].subscribers[1].resync` → field, index, field, index, field.
fn split_key(key: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in key.split('.').filter(|p| !p.is_empty()) {
        let (field, rest) = part.split_once('[').unwrap_or((part, ""));
        if !field.is_empty() {
            out.push(Segment::Field(field));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Segment::Index(i));
            }
        }
    }
    out
}

/// Layers defaults, the file, the environment and `flags`, then checks the result.
///
/// `file`: an explicit `--config` (must exist); `None` reads `./config.toml` if present.
/// `env`: the environment's variables (pass `std::env::vars()`; tests pass their own).
pub fn load(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: FlagOverrides,
) -> Result<Loaded, ConfigError> {
    let (path, required) = match file {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_FILE), false),
    };
    let origin = path.display().to_string();
    if required && !path.is_file() {
        return Err(ConfigError {
            key: "--config".into(),
            origin: FLAGS_ORIGIN.into(),
            message: format!("no such file: {origin}"),
        });
    }
    let present = path.is_file();
    let env: Map<String, String> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}__")))
        .collect();
    let mut builder = config::Config::builder();
    if present {
        // TOML whatever the file's name ends in (`config` picks the format
        // from the extension otherwise).
        builder = builder.add_source(
            config::File::new(&path.to_string_lossy(), config::FileFormat::Toml).required(true),
        );
    }
    let layered = builder
        .add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator("__")
                .separator("__")
                .source(Some(env)),
        )
        .add_source(flags)
        .build()
        .map_err(|e| match e {
            config::ConfigError::FileParse { cause, .. } => ConfigError {
                key: String::new(),
                origin: origin.clone(),
                message: format!("not valid TOML: {cause}"),
            },
            other => ConfigError {
                key: String::new(),
                origin: origin.clone(),
                message: other.to_string(),
            },
        })?;
    let settings: Settings = serde_path_to_error::deserialize(layered.clone()).map_err(|e| {
        let mut key = e.path().to_string();
        let inner = e.into_inner();
        let message = describe(&inner);
        // An unknown key is reported at its parent: add the key itself.
        if let Some(field) = unknown_field(&message)
            && !key.ends_with(&field)
        {
            key = if key == "." || key.is_empty() {
                field
            } else {
                format!("{key}.{field}")
            };
        }
        let key = key.trim_start_matches('.').to_owned();
        ConfigError {
            origin: origin_of(&layered, present.then_some(path.as_path()), &key),
            key,
            message,
        }
    })?;
    let mut loaded = Loaded {
        settings,
        file: present.then_some(path),
        layered,
    };
    settle_cluster_choice(&mut loaded);
    validate(&loaded)?;
    Ok(loaded)
}

/// The way to reach the cluster is chosen by the highest layer that names
/// one (flags over the environment over the file): `--embedded` wins over a
/// file's `context`, and a lower layer's keys for another way are dropped.
/// `kubeconfig` and `context` are one way, so a flag's `--context` picks a
/// context of the file's kubeconfig. Two ways in one layer stay an error.
fn settle_cluster_choice(l: &mut Loaded) {
    let rank = |key: &str| {
        let origin = l.origin(key);
        match origin.as_str() {
            DEFAULTS_ORIGIN => 0,
            "the environment" => 2,
            FLAGS_ORIGIN => 3,
            _ => 1,
        }
    };
    let c = &l.settings.cluster;
    let layer_of = |keys: &[(&str, bool)]| {
        keys.iter()
            .filter(|(_, set)| *set)
            .map(|(k, _)| rank(k))
            .max()
    };
    let embedded = layer_of(&[("cluster.embedded", c.embedded)]);
    let server = layer_of(&[("cluster.server", c.server.is_some())]);
    let kubeconfig = layer_of(&[
        ("cluster.kubeconfig", c.kubeconfig.is_some()),
        ("cluster.context", c.context.is_some()),
    ]);
    let Some(top) = [embedded, server, kubeconfig].into_iter().flatten().max() else {
        return;
    };
    let c = &mut l.settings.cluster;
    if embedded.is_some_and(|r| r < top) {
        c.embedded = false;
    }
    if server.is_some_and(|r| r < top) {
        c.server = None;
    }
    if kubeconfig.is_some_and(|r| r < top) {
        c.kubeconfig = None;
        c.context = None;
    }
}

/// The message of a `config` error without its own key/origin decorations.
fn describe(e: &config::ConfigError) -> String {
    match e {
        config::ConfigError::At { error, .. } => describe(error),
        config::ConfigError::Type {
            unexpected,
            expected,
            ..
        } => format!("invalid type: {unexpected}, expected {expected}"),
        config::ConfigError::NotFound(k) => format!("missing key {k:?}"),
        other => {
            let text = other.to_string();
            // `config`'s wording for an unknown enum value; say what is allowed.
            match text.split_once(" does not have variant constructor ") {
                Some((ty, value)) => {
                    let allowed = match ty.trim_start_matches("enum ") {
                        "Policy" => "\"block\" or \"coalesce\"",
                        "LogFormat" => "\"text\" or \"json\"",
                        _ => "another value",
                    };
                    format!("unknown value {value:?}: expected {allowed}")
                }
                None => text,
            }
        }
    }
}

/// `unknown field `x`, expected ...` → `x`.
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(f, _)| f.to_owned())
}

/// Contradictions and values the types cannot rule out.
fn validate(l: &Loaded) -> Result<(), ConfigError> {
    let s = &l.settings;
    let e = &s.engine;
    let floor = kinformer::MIN_WATCH_TIMEOUT_FLOOR;
    if e.min_watch_timeout < floor {
        return Err(l.error(
            "engine.min_watch_timeout",
            format!("must be at least {}", humantime::format_duration(floor)),
        ));
    }
    if e.backoff.initial < kinformer::Backoff::MIN_DELAY {
        return Err(l.error(
            "engine.backoff.initial",
            format!(
                "must be at least {}",
                humantime::format_duration(kinformer::Backoff::MIN_DELAY)
            ),
        ));
    }
    if e.backoff.initial > e.backoff.cap {
        return Err(l.error(
            "engine.backoff.initial",
            format!(
                "{} is longer than engine.backoff.cap ({})",
                humantime::format_duration(e.backoff.initial),
                humantime::format_duration(e.backoff.cap)
            ),
        ));
    }
    if e.queue_capacity == 0 {
        return Err(l.error("engine.queue_capacity", "must be at least 1"));
    }
    if e.fifo.batch_size == 0 {
        return Err(l.error("engine.fifo.batch_size", "must be at least 1"));
    }
    if e.fifo.initial_batch_size == 0 {
        return Err(l.error("engine.fifo.initial_batch_size", "must be at least 1"));
    }
    if e.fifo.high_watermark < e.fifo.batch_size {
        return Err(l.error(
            "engine.fifo.high_watermark",
            format!(
                "{} is below engine.fifo.batch_size ({})",
                e.fifo.high_watermark, e.fifo.batch_size
            ),
        ));
    }
    if let Some(n) = e.list_decoders
        && n > kinformer::MAX_LIST_DECODERS
    {
        return Err(l.error(
            "engine.list_decoders",
            format!("must be at most {}", kinformer::MAX_LIST_DECODERS),
        ));
    }
    check_resync(l, "engine.default_resync", e.default_resync)?;
    let c = &s.cluster;
    if c.embedded {
        for (key, set) in [
            ("cluster.kubeconfig", c.kubeconfig.is_some()),
            ("cluster.context", c.context.is_some()),
            ("cluster.server", c.server.is_some()),
        ] {
            if set {
                return Err(l.error(
                    key,
                    "contradicts cluster.embedded = true (the embedded server needs no cluster)",
                ));
            }
        }
    }
    if c.server.is_some() && (c.kubeconfig.is_some() || c.context.is_some()) {
        return Err(l.error(
            "cluster.server",
            "contradicts cluster.kubeconfig / cluster.context: choose one way to reach the cluster",
        ));
    }
    if let Some(url) = &c.server {
        let uri = url.parse::<http::Uri>().ok();
        // The URL is printed and keys snapshots: never with credentials
        // (and not echoed back in this error).
        if url.contains('@') {
            return Err(l.error(
                "cluster.server",
                "a URL with credentials (user:password@) is refused: use a kubeconfig",
            ));
        }
        let usable = uri.as_ref().is_some_and(|u| {
            matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
        });
        if !usable {
            return Err(l.error(
                "cluster.server",
                format!("{url:?} is not an http:// or https:// URL with a host"),
            ));
        }
    }
    if let Some(addr) = &s.observability.metrics_addr
        && let Err(message) = metrics_listen_addr(addr)
    {
        return Err(l.error("observability.metrics_addr", message));
    }
    if s.observability.status_interval < Duration::from_millis(100) {
        return Err(l.error("observability.status_interval", "must be at least 100ms"));
    }
    if !(s.embedded.churn_per_sec.is_finite() && s.embedded.churn_per_sec >= 0.0) {
        return Err(l.error(
            "embedded.churn_per_sec",
            "must be a number of writes per second, 0 or more",
        ));
    }
    for (key, ns) in [
        ("embedded.seed_namespace", &s.embedded.seed_namespace),
        ("embedded.churn_namespace", &s.embedded.churn_namespace),
    ] {
        if ns.trim().is_empty() {
            return Err(l.error(key, "must not be empty"));
        }
    }
    if let Some(le) = &s.leader_election {
        check_leader_election(l, le)?;
    }
    let mut names = BTreeSet::new();
    // What a snapshot file is named by (the resource as written here, the
    // namespace and selectors) in each persist directory: two informers with
    // one would share a file, and the second would run without persistence.
    let mut snapshots = BTreeMap::new();
    for (i, inf) in s.informers.iter().enumerate() {
        let at = |k: &str| format!("informers[{i}].{k}");
        // Refused here rather than by the server at the first list (an
        // informer that never syncs, its reason only in `last_failure`).
        if let Some(Err(e)) = inf.label_selector.as_deref().map(LabelSelector::parse) {
            return Err(l.error(&at("label_selector"), e.to_string()));
        }
        if let Some(Err(e)) = inf.field_selector.as_deref().map(FieldSelector::parse) {
            return Err(l.error(&at("field_selector"), e.to_string()));
        }
        if let Some(dir) = inf.persist.as_ref().or(s.engine.persist.as_ref()) {
            let snapshot = (
                dir,
                (&inf.resource, &inf.group, &inf.version, &inf.kind),
                (&inf.namespace, &inf.label_selector, &inf.field_selector),
            );
            if let Some(first) = snapshots.insert(snapshot, i) {
                return Err(l.error(
                    &at("persist"),
                    format!(
                        "persists the same resource, namespace and selectors as informers[{first}] into the same directory: their snapshots would be one file; set another `persist` directory for one of them"
                    ),
                ));
            }
        }
        match (&inf.resource, &inf.kind) {
            (Some(_), Some(_)) => {
                return Err(l.error(
                    &at("kind"),
                    "contradicts `resource`: name the resource by plural or by kind, not both",
                ));
            }
            (None, None) => {
                return Err(l.error(
                    &at("resource"),
                    "missing: set `resource` (plural, e.g. \"configmaps\") or `group`/`version`/`kind`",
                ));
            }
            (Some(r), None) if r.trim().is_empty() => {
                return Err(l.error(&at("resource"), "must not be empty"));
            }
            _ => {}
        }
        if inf.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(l.error(
                &at("name"),
                "must not be empty (leave it out to use the resource)",
            ));
        }
        let name = inf.display_name();
        if !names.insert(name.clone()) {
            return Err(l.error(
                &at("name"),
                format!("informer name {name:?} is used twice; give each informer its own `name`"),
            ));
        }
        if inf.namespace.as_deref() == Some("") {
            return Err(l.error(
                &at("namespace"),
                "must not be empty (leave it out for all namespaces)",
            ));
        }
        let mut subs = BTreeSet::new();
        for (j, sub) in inf.subscribers.iter().enumerate() {
            let sat = |k: &str| format!("informers[{i}].subscribers[{j}].{k}");
            if sub.name.is_empty() {
                return Err(l.error(&sat("name"), "missing: every subscriber needs a name"));
            }
            if !subs.insert(sub.name.clone()) {
                return Err(l.error(
                    &sat("name"),
                    format!(
                        "subscriber name {:?} is used twice in this informer",
                        sub.name
                    ),
                ));
            }
            if let Some(r) = sub.resync {
                check_resync(l, &sat("resync"), r)?;
            }
            if sub.capacity == Some(0) {
                return Err(l.error(&sat("capacity"), "must be at least 1"));
            }
        }
    }
    Ok(())
}

/// The address `observability.metrics_addr` (flag `--metrics`) names: a
/// bare `PORT` or `:PORT` (and `localhost:PORT`) is on the loopback
/// interface, so nothing outside this machine reaches the endpoint unless
/// an address says so (`0.0.0.0:9898`, `[::]:9898`, a pod's IP).
pub fn metrics_listen_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    let text = text.trim();
    let loopback = |port: &str| {
        port.parse::<u16>()
            .ok()
            .map(|p| std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, p)))
    };
    let port_only = text.strip_prefix(':').unwrap_or(text);
    let found = text
        .parse::<std::net::SocketAddr>()
        .ok()
        .or_else(|| loopback(port_only))
        .or_else(|| text.strip_prefix("localhost:").and_then(loopback));
    found.ok_or_else(|| {
        format!(
            "{text:?} is not a port or an IP:port address (e.g. 9898 for 127.0.0.1:9898, \
             0.0.0.0:9898 for every interface, [::]:9898)"
        )
    })
}

/// `[leader_election]`: names not empty, timings as LE-1 requires.
fn check_leader_election(l: &Loaded, le: &LeaderElectionSettings) -> Result<(), ConfigError> {
    for (key, value) in [
        ("leader_election.lease_name", Some(&le.lease_name)),
        ("leader_election.namespace", Some(&le.namespace)),
        ("leader_election.identity", le.identity.as_ref()),
    ] {
        if value.is_some_and(|v| v.trim().is_empty()) {
            return Err(l.error(key, "must not be empty"));
        }
    }
    use kinformer::leader::TimingsError;
    let Err(e) = le.timings().validate() else {
        return Ok(());
    };
    let key = match &e {
        TimingsError::Zero { name } => match *name {
            "lease duration" => "leader_election.lease_duration",
            "renew deadline" => "leader_election.renew_deadline",
            _ => "leader_election.retry_period",
        },
        TimingsError::LeaseNotWholeSeconds { .. } => "leader_election.lease_duration",
        TimingsError::RenewNotBeforeExpiry { .. } => "leader_election.renew_deadline",
        TimingsError::RetryTooLong { .. } => "leader_election.retry_period",
        _ => "leader_election",
    };
    Err(l.error(key, e.to_string()))
}

fn check_resync(l: &Loaded, key: &str, period: Duration) -> Result<(), ConfigError> {
    resync_problem(period).map_or(Ok(()), |m| Err(l.error(key, m)))
}

/// What is wrong with a resync period, if anything: under the library's 1 s
/// minimum, which it would quietly raise (0 means never).
pub fn resync_problem(period: Duration) -> Option<String> {
    let minimum = kinformer::MINIMUM_RESYNC_PERIOD;
    (!period.is_zero() && period < minimum).then(|| {
        format!(
            "{} is below the {} minimum (use 0s for never)",
            humantime::format_duration(period),
            humantime::format_duration(minimum)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile_like::TempFile {
        tempfile_like::TempFile::new(text)
    }

    /// A minimal temporary file (no extra dependency for the binary's unit tests).
    mod tempfile_like {
        use std::path::PathBuf;
        use std::sync::atomic::{AtomicU64, Ordering};

        pub struct TempFile(pub PathBuf);

        impl TempFile {
            pub fn new(text: &str) -> Self {
                static N: AtomicU64 = AtomicU64::new(0);
                let path = std::env::temp_dir().join(format!(
                    "kinformer-config-{}-{}.toml",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::write(&path, text).unwrap();
                TempFile(path)
            }
        }

        impl Drop for TempFile {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    fn load_text(text: &str, env: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
        let f = file(text);
        load(
            Some(&f.0),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            FlagOverrides::default(),
        )
    }

    #[test]
    fn defaults_are_valid() {
        let l = load(
            Some(Path::new("/nonexistent-kinformer.toml")),
            Vec::new(),
            FlagOverrides::default(),
        );
        assert!(l.is_err(), "an explicit missing file is an error");
        let f = file("");
        let l = load(Some(&f.0), Vec::new(), FlagOverrides::default()).unwrap();
        assert_eq!(l.settings, Settings::default());
    }

    #[test]
    fn repository_config_toml_states_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CONFIG_FILE);
        let l = load(Some(&path), Vec::new(), FlagOverrides::default()).unwrap();
        assert_eq!(l.settings, Settings::default());
        assert_eq!(l.origin("engine.page_size"), path.display().to_string());
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let f = file("[engine]\npage_sise = 3\n");
        let e = load(Some(&f.0), Vec::new(), FlagOverrides::default())
            .err()
            .unwrap();
        assert_eq!(e.key, "engine.page_sise");
        assert_eq!(e.origin, f.0.display().to_string());
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn unknown_key_in_list_names_index() {
        let e = load_text(
            "[[informers]]\nresource = \"pods\"\n[[informers.subscribers]]\nname = \"a\"\nresink = \"1s\"\n",
            &[],
        )
        .err()
        .unwrap();
        assert_eq!(e.key, "informers[0].subscribers[0].resink");
    }

    #[test]
    fn bad_duration_names_key() {
        let e = load_text("[engine.backoff]\ncap = \"thirty seconds\"\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "engine.backoff.cap");
        assert!(e.origin.ends_with(".toml"), "{e}");
    }

    #[test]
    fn env_overrides_file_and_flags_override_env() {
        let text = "[engine]\npage_size = 100\n";
        let l = load_text(text, &[]).unwrap();
        assert_eq!(l.settings.engine.page_size, 100);
        let l = load_text(text, &[("KINFORMER__ENGINE__PAGE_SIZE", "42")]).unwrap();
        assert_eq!(l.settings.engine.page_size, 42);
        assert_eq!(l.origin("engine.page_size"), "the environment");
        let f = file(text);
        let mut flags = FlagOverrides::default();
        flags.set("engine.page_size", Some(7));
        let l = load(
            Some(&f.0),
            vec![("KINFORMER__ENGINE__PAGE_SIZE".to_string(), "42".to_string())],
            flags,
        )
        .unwrap();
        assert_eq!(l.settings.engine.page_size, 7);
        assert_eq!(l.origin("engine.page_size"), FLAGS_ORIGIN);
    }

    #[test]
    fn compact_cache_settings_come_from_file_and_environment() {
        let text = "[engine]\ncompact_cache = true\ncompact_recent = 16\n";
        let l = load_text(text, &[]).unwrap();
        assert!(l.settings.engine.compact_cache);
        assert_eq!(l.settings.engine.compact_recent, 16);
        let l = load_text(text, &[("KINFORMER__ENGINE__COMPACT_RECENT", "0")]).unwrap();
        assert_eq!(l.settings.engine.compact_recent, 0);
        assert!(load_text("[engine]\ncompact_recent = -1\n", &[]).is_err());
    }

    #[test]
    fn list_decoders_default_to_the_library_and_are_bounded() {
        assert_eq!(
            load_text("", &[]).unwrap().settings.engine.list_decoders,
            None
        );
        let l = load_text("[engine]\nlist_decoders = 0\n", &[]).unwrap();
        assert_eq!(l.settings.engine.list_decoders, Some(0));
        let l = load_text("", &[("KINFORMER__ENGINE__LIST_DECODERS", "3")]).unwrap();
        assert_eq!(l.settings.engine.list_decoders, Some(3));
        let e = load_text("[engine]\nlist_decoders = 5\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "engine.list_decoders");
        assert!(e.to_string().contains("at most 4"), "{e}");
    }

    #[test]
    fn bad_env_value_names_environment() {
        let e = load_text("", &[("KINFORMER__ENGINE__DEFAULT_RESYNC", "soon")])
            .err()
            .unwrap();
        assert_eq!(e.key, "engine.default_resync");
        assert_eq!(e.origin, "the environment");
    }

    #[test]
    fn contradictions() {
        let e = load_text("[[informers]]\nresource = \"pods\"\nkind = \"Pod\"\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "informers[0].kind");
        let e = load_text("[engine.backoff]\ninitial = \"1m\"\ncap = \"30s\"\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "engine.backoff.initial");
        let e = load_text("[engine]\nmin_watch_timeout = \"100ms\"\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "engine.min_watch_timeout");
        let e = load_text("[cluster]\nembedded = true\ncontext = \"prod\"\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "cluster.context");
        let e = load_text(
            "[[informers]]\nresource = \"pods\"\n[[informers.subscribers]]\nname = \"a\"\nresync = \"10ms\"\n",
            &[],
        )
        .err()
        .unwrap();
        assert_eq!(e.key, "informers[0].subscribers[0].resync");
    }

    /// A higher layer's way to reach the cluster replaces a lower one's; two
    /// ways in one layer contradict; kubeconfig and context combine across layers.
    #[test]
    fn the_highest_layer_chooses_the_cluster() {
        let f = file("[cluster]\ncontext = \"prod\"\nkubeconfig = \"/k\"\n");
        let mut flags = FlagOverrides::default();
        flags.set("cluster.embedded", Some("true"));
        let l = load(Some(&f.0), Vec::new(), flags).unwrap();
        let c = &l.settings.cluster;
        assert!(c.embedded && c.context.is_none() && c.kubeconfig.is_none());

        let env = [("KINFORMER__CLUSTER__SERVER", "http://127.0.0.1:8001")];
        let l = load_text("[cluster]\nembedded = true\n", &env).unwrap();
        let c = &l.settings.cluster;
        assert!(!c.embedded && c.server.as_deref() == Some("http://127.0.0.1:8001"));

        let mut flags = FlagOverrides::default();
        flags.set("cluster.context", Some("dev"));
        let l = load(Some(&f.0), Vec::new(), flags).unwrap();
        let c = &l.settings.cluster;
        assert_eq!(
            (c.kubeconfig.as_deref(), c.context.as_deref()),
            (Some(Path::new("/k")), Some("dev"))
        );

        let mut flags = FlagOverrides::default();
        flags.set("cluster.embedded", Some("true"));
        flags.set("cluster.context", Some("dev"));
        let e = load(None, Vec::new(), flags).err().unwrap();
        assert_eq!(e.key, "cluster.context");
    }

    /// Two informers that would persist into one snapshot file are refused.
    #[test]
    fn two_informers_persisting_one_snapshot_are_refused() {
        let two = |extra: &str| {
            format!(
                "[engine]\npersist = \"/tmp/snap\"\n[[informers]]\nname = \"a\"\nresource = \"configmaps\"\n[[informers]]\nname = \"b\"\nresource = \"configmaps\"\n{extra}"
            )
        };
        let e = load_text(&two(""), &[])
            .err()
            .expect("one snapshot for two");
        assert_eq!(e.key, "informers[1].persist");
        assert!(load_text(&two("label_selector = \"app=x\"\n"), &[]).is_ok());
        assert!(load_text(&two("persist = \"/tmp/other\"\n"), &[]).is_ok());
    }

    /// Selectors that do not parse are refused at load, with their key.
    #[test]
    fn malformed_selectors_are_refused_at_load() {
        let one = |extra: &str| {
            format!("[[informers]]\nname = \"a\"\nresource = \"configmaps\"\n{extra}")
        };
        for (line, key) in [
            (
                "label_selector = \"app in (a,\"",
                "informers[0].label_selector",
            ),
            ("label_selector = \"=x\"", "informers[0].label_selector"),
            (
                "field_selector = \"metadata.name\"",
                "informers[0].field_selector",
            ),
            (
                "field_selector = \"spec..x=1\"",
                "informers[0].field_selector",
            ),
        ] {
            let e = load_text(&one(line), &[]).err().expect(line);
            assert_eq!(e.key, key, "{line}");
        }
        for good in [
            "label_selector = \"app=web,tier in (a,b),!legacy\"",
            "field_selector = \"metadata.name=x,status.phase!=Running\"",
        ] {
            assert!(load_text(&one(good), &[]).is_ok(), "{good}");
        }
    }

    #[test]
    fn server_urls_and_workload_values_are_checked() {
        for bad in [
            "localhost:8001",
            "not a url",
            "ftp://h/",
            "http://",
            "http://u:p@h:6443",
        ] {
            let e = load_text(&format!("[cluster]\nserver = {bad:?}\n"), &[])
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.key, "cluster.server", "{bad}");
        }
        assert!(load_text("[cluster]\nserver = \"https://h:6443\"\n", &[]).is_ok());
        for (text, key) in [
            (
                "[embedded]\nchurn_per_sec = nan\n",
                "embedded.churn_per_sec",
            ),
            (
                "[embedded]\nchurn_per_sec = inf\n",
                "embedded.churn_per_sec",
            ),
            (
                "[embedded]\nseed_namespace = \"\"\n",
                "embedded.seed_namespace",
            ),
            (
                "[[informers]]\nresource = \"pods\"\nname = \"\"\n",
                "informers[0].name",
            ),
        ] {
            let e = load_text(text, &[])
                .err()
                .unwrap_or_else(|| panic!("{text} accepted"));
            assert_eq!(e.key, key, "{text}");
        }
    }

    /// A bare port binds the loopback interface: only an explicit address
    /// opens the endpoint to other machines.
    #[test]
    fn metrics_addresses_default_to_loopback() {
        for (text, want) in [
            ("9898", "127.0.0.1:9898"),
            (":9898", "127.0.0.1:9898"),
            ("0", "127.0.0.1:0"),
            ("localhost:9898", "127.0.0.1:9898"),
            ("127.0.0.1:9898", "127.0.0.1:9898"),
            ("0.0.0.0:9898", "0.0.0.0:9898"),
            ("[::]:9898", "[::]:9898"),
            ("[::1]:1", "[::1]:1"),
        ] {
            assert_eq!(
                metrics_listen_addr(text).unwrap().to_string(),
                want,
                "{text}"
            );
        }
        for bad in ["", "x", "99999", "host:9898", "1.2.3.4", ":"] {
            assert!(metrics_listen_addr(bad).is_err(), "{bad}");
        }
        let e = load_text("[observability]\nmetrics_addr = \"nine\"\n", &[])
            .err()
            .unwrap();
        assert_eq!(e.key, "observability.metrics_addr");
        assert!(load_text("[observability]\nmetrics_addr = \"9898\"\n", &[]).is_ok());
    }

    #[test]
    fn invalid_toml_names_file() {
        let f = file("[engine\n");
        let e = load(Some(&f.0), Vec::new(), FlagOverrides::default())
            .err()
            .unwrap();
        assert_eq!(e.origin, f.0.display().to_string());
        assert!(e.message.contains("TOML"), "{e}");
    }
}
