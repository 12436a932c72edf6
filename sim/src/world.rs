//! The server side of a simulation: the embedded API server, and how each
//! write and fault of a schedule is applied to it. Writes go in-process
//! (they work while the server is down, as another apiserver on the same
//! etcd would write), patches over HTTP; every outcome is ignored but
//! counted, because the server's state, not the schedule, is the truth.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kinformer_apiserver::{
    ApiServer, CloseMode, DownMode, Failure, RestartOptions, ServerConfig, ServerHandle, Verb,
};
use serde_json::{Value, json};

use crate::schedule::{FINALIZER, FailVerb, FailWith, Fault, ObjRef, TIER_LABEL, Tier, Write};

/// Which objects an informer (and so each of its subscribers) should see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only this namespace (`None`: all).
    pub namespace: Option<String>,
    /// Only objects with `tier=<value>`.
    pub tier: Option<&'static str>,
}

impl Selection {
    /// The label selector to ask the server for.
    pub fn label_selector(&self) -> Option<String> {
        self.tier.map(|t| format!("{TIER_LABEL}={t}"))
    }

    /// Whether a server object (as JSON) is selected.
    pub fn selects(&self, object: &Value) -> bool {
        let meta = &object["metadata"];
        if let Some(ns) = &self.namespace
            && meta["namespace"].as_str() != Some(ns.as_str())
        {
            return false;
        }
        match self.tier {
            Some(t) => meta["labels"][TIER_LABEL].as_str() == Some(t),
            None => true,
        }
    }
}

/// What happened to the writes and faults of a run (for the report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorldCounts {
    /// Writes the server took.
    pub writes: u64,
    /// Writes it refused (not found, already exists, down for HTTP patches).
    pub refused_writes: u64,
    /// Faults applied.
    pub faults: u64,
    /// Restarts and outages.
    pub restarts: u64,
}

/// The embedded server under a schedule.
pub struct World {
    /// The server.
    pub server: ServerHandle,
    client: kube::Client,
    step: u64,
    /// Counts of what was applied.
    pub counts: WorldCounts,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("server", &self.server)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

/// Every ConfigMap of the server as key → resourceVersion, for a selection.
pub fn view_of(server: &ServerHandle, selection: &Selection) -> BTreeMap<String, String> {
    server
        .list("", "configmaps", selection.namespace.as_deref())
        .into_iter()
        .filter(|o| selection.selects(o))
        .map(|o| {
            let meta = &o["metadata"];
            (
                format!(
                    "{}/{}",
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap_or_default()
                ),
                meta["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// The server configuration simulations use: a short history (so 410s come
/// on their own too), frequent bookmarks, a quick 504 for future versions.
pub fn server_config() -> ServerConfig {
    ServerConfig {
        history_limit: 200,
        bookmark_interval: Duration::from_millis(200),
        too_large_rv_wait: Duration::from_millis(100),
        ..ServerConfig::default()
    }
}

/// A kube client for `server` with kube-client's own retries off (the
/// informer's rules see every answer).
pub fn client_for(server: &ServerHandle) -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::new(server.url().parse()?);
    config.default_retry = false;
    config.read_timeout = Some(Duration::from_secs(5));
    Ok(kube::Client::try_from(config)?)
}

/// A ConfigMap as the simulation writes it.
pub fn configmap(obj: ObjRef, tier: Tier, pad: usize, step: u64, finalizer: bool) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert("sim".into(), "yes".into());
    if let Some(t) = tier.value() {
        labels.insert(TIER_LABEL.into(), t.into());
    }
    let mut meta = json!({"name": obj.name(), "namespace": obj.namespace(), "labels": labels});
    if finalizer {
        meta["finalizers"] = json!([FINALIZER]);
    }
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {"step": step.to_string(), "pad": "x".repeat(pad)},
    })
}

fn set_tier(object: &mut Value, tier: Tier) {
    let labels = &mut object["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    match tier.value() {
        Some(t) => labels[TIER_LABEL] = t.into(),
        None => {
            if let Some(m) = labels.as_object_mut() {
                m.remove(TIER_LABEL);
            }
        }
    }
}

impl World {
    /// Starts a server (on its own thread) for one run.
    pub fn start() -> anyhow::Result<World> {
        Self::with_server(ApiServer::start_in_thread(server_config())?)
    }

    /// A world around a server already running (its namespaces created,
    /// as a test would before writing into them).
    pub fn with_server(server: ServerHandle) -> anyhow::Result<World> {
        for namespace in crate::schedule::NAMESPACES {
            server.create_namespace(namespace)?;
        }
        let client = client_for(&server)?;
        Ok(World {
            server,
            client,
            step: 0,
            counts: WorldCounts::default(),
        })
    }

    /// A kube client for the server.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The server's objects a selection holds, as key → resourceVersion.
    pub fn truth(&self, selection: &Selection) -> BTreeMap<String, String> {
        view_of(&self.server, selection)
    }

    fn counted<T, E>(&mut self, r: Result<T, E>) {
        match r {
            Ok(_) => self.counts.writes += 1,
            Err(_) => self.counts.refused_writes += 1,
        }
    }

    /// Applies one write.
    pub async fn write(&mut self, write: &Write) {
        self.step += 1;
        let step = self.step;
        let s = &self.server.clone();
        match write {
            Write::Create {
                obj,
                tier,
                pad,
                finalizer,
            } => {
                let r = s.create(
                    "",
                    "configmaps",
                    Some(obj.namespace()),
                    configmap(*obj, *tier, *pad, step, *finalizer),
                );
                self.counted(r);
            }
            Write::Update { obj, tier, pad } => {
                let r = s
                    .get("", "configmaps", Some(obj.namespace()), &obj.name())
                    .and_then(|mut o| {
                        set_tier(&mut o, *tier);
                        o["data"] = json!({"step": step.to_string(), "pad": "y".repeat(*pad)});
                        s.update("", "configmaps", Some(obj.namespace()), o)
                    });
                self.counted(r);
            }
            Write::Patch { obj, tier } => {
                let api = kube::Api::<ConfigMap>::namespaced(self.client.clone(), obj.namespace());
                let patch = json!({
                    "metadata": {"labels": {TIER_LABEL: tier.value()}},
                    "data": {"step": step.to_string()},
                });
                let r = tokio::time::timeout(
                    Duration::from_secs(3),
                    api.patch(
                        &obj.name(),
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    ),
                )
                .await;
                match r {
                    Ok(Ok(_)) => self.counts.writes += 1,
                    _ => self.counts.refused_writes += 1,
                }
            }
            Write::Delete { obj } => {
                let r = s.delete("", "configmaps", Some(obj.namespace()), &obj.name());
                self.counted(r);
            }
            Write::ReleaseFinalizer { obj } => {
                let r = s
                    .get("", "configmaps", Some(obj.namespace()), &obj.name())
                    .and_then(|mut o| {
                        o["metadata"]["finalizers"] = json!([]);
                        s.update("", "configmaps", Some(obj.namespace()), o)
                    });
                self.counted(r);
            }
            Write::Recreate { obj, tier } => {
                let gone = s.delete("", "configmaps", Some(obj.namespace()), &obj.name());
                self.counted(gone);
                let r = s.create(
                    "",
                    "configmaps",
                    Some(obj.namespace()),
                    configmap(*obj, *tier, 16, step, false),
                );
                self.counted(r);
            }
        }
    }

    /// Applies one fault (a stall or an outage's restart is awaited here).
    pub async fn fault(&mut self, fault: &Fault) -> anyhow::Result<()> {
        self.counts.faults += 1;
        let f = self.server.faults();
        match fault {
            Fault::CloseWatches => f.close_all_watches(),
            Fault::CloseWatchesAfter(n) => f.close_watches_after(*n),
            Fault::CompactAndClose => {
                f.compact();
                f.close_all_watches();
            }
            Fault::Compact => f.compact(),
            Fault::FailNext { verb, count, with } => {
                let verb = match verb {
                    FailVerb::List => Verb::List,
                    FailVerb::Watch => Verb::Watch,
                };
                let failure = match with {
                    FailWith::Internal => Failure::Internal,
                    FailWith::TooManyRequests { retry_after_secs } => Failure::TooManyRequests {
                        retry_after_secs: *retry_after_secs,
                    },
                };
                f.fail_next(verb, *count, failure);
            }
            Fault::Malformed => f.inject_malformed_line(),
            Fault::Stall(d) => {
                f.stall_watches(true);
                tokio::time::sleep(*d).await;
                f.stall_watches(false);
            }
            Fault::Latency(d) => f.set_latency(*d),
            Fault::SuppressBookmarks(on) => f.suppress_bookmarks(*on),
            Fault::Restart {
                keep_history,
                eof,
                down_for,
            } => {
                self.counts.restarts += 1;
                let mut options = RestartOptions::default()
                    .down_for(*down_for)
                    .close(if *eof {
                        CloseMode::Eof
                    } else {
                        CloseMode::Reset
                    });
                if *keep_history {
                    options = options.keep_history();
                }
                self.server.restart(options).await?;
            }
            Fault::OutageBegin {
                reset,
                keep_history,
            } => {
                self.counts.restarts += 1;
                let mut options = RestartOptions::default().while_down(if *reset {
                    DownMode::Reset
                } else {
                    DownMode::Refuse
                });
                if *keep_history {
                    options = options.keep_history();
                }
                self.server.stop_serving(options).await?;
            }
            Fault::OutageEnd => self.server.start_serving().await?,
            Fault::Clear => f.clear(),
        }
        Ok(())
    }

    /// Ends every persistent fault and makes sure the server serves, so
    /// that the engine can settle.
    pub async fn calm(&mut self) -> anyhow::Result<()> {
        self.server.faults().clear();
        if !self.server.is_serving() {
            self.server.start_serving().await?;
        }
        Ok(())
    }
}
