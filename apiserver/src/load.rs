//! Load generation: a deterministic seeder and a rate-limited create/update/delete churn.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::object::ObjKey;
use crate::status::{ApiError, Reason};
use crate::store::{DeletePreconditions, Store};

/// A deterministic ConfigMap of about 1.3 KB (serialised with its server-filled metadata).
pub fn seed_configmap(index: usize) -> Value {
    // Four ~240-byte values built from a short deterministic unit (cheap even in debug builds).
    let filler = |tag: &str| -> String {
        let unit = format!("{tag}-{index:06};");
        let mut s = unit.repeat(240 / unit.len() + 1);
        s.truncate(240);
        s
    };
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("seed-{index:06}"),
            "labels": {"app": "seed", "shard": format!("{}", index % 10)},
            "annotations": {"kinformer.dev/seed": "true"},
        },
        "data": {
            "alpha": filler("alpha"),
            "beta": filler("beta"),
            "gamma": filler("gamma"),
            "delta": filler("delta"),
        },
    })
}

/// Seed `count` objects equal to `seed_configmap(i)` (plus server metadata) into `namespace`,
/// rendering JSON directly: fast enough for 100k objects in a debug build.
pub fn seed_configmaps_fast(store: &Store, namespace: &str, count: usize) -> Result<(), ApiError> {
    let res = store.resolve("", "configmaps")?;
    if !crate::names::valid_dns_label(namespace) {
        return Err(ApiError::bad_request(format!(
            "invalid namespace \"{namespace}\""
        )));
    }
    if let Some(rt) = store.registry().types().get(res) {
        store.open_namespace_for(rt, namespace)?;
    }
    let created = crate::object::now_timestamp();
    // What the generic create path records for these fields (see `managed_fields`).
    let managed = if store.options().managed_fields {
        format!(
            concat!(
                "\"managedFields\":[{{\"apiVersion\":\"v1\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{{",
                "\"f:data\":{{\".\":{{}},\"f:alpha\":{{}},\"f:beta\":{{}},\"f:delta\":{{}},\"f:gamma\":{{}}}},",
                "\"f:metadata\":{{\"f:annotations\":{{\".\":{{}},\"f:kinformer.dev/seed\":{{}}}},",
                "\"f:labels\":{{\".\":{{}},\"f:app\":{{}},\"f:shard\":{{}}}}}}}},",
                "\"manager\":\"{}\",\"operation\":\"Update\",\"time\":\"{}\"}}],"
            ),
            crate::write::IN_PROCESS_MANAGER,
            created
        )
    } else {
        String::new()
    };
    for index in 0..count {
        let name = format!("seed-{index:06}");
        let shard = (index % 10).to_string();
        let labels = std::collections::BTreeMap::from([
            ("app".to_string(), "seed".to_string()),
            ("shard".to_string(), shard.clone()),
        ]);
        let uid = uuid::Uuid::new_v4().to_string();
        let filler = |tag: &str| -> String {
            let unit = format!("{tag}-{index:06};");
            let mut s = unit.repeat(240 / unit.len() + 1);
            s.truncate(240);
            s
        };
        let (alpha, beta, gamma, delta) = (
            filler("alpha"),
            filler("beta"),
            filler("gamma"),
            filler("delta"),
        );
        let key = ObjKey::new(namespace, &name);
        let uid2 = uid.clone();
        store.create_rendered(res, key, labels, uid, |rv| {
            format!(
                concat!(
                    "{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"annotations\":{{\"kinformer.dev/seed\":\"true\"}},",
                    "\"creationTimestamp\":\"{}\",\"labels\":{{\"app\":\"seed\",\"shard\":\"{}\"}},{}",
                    "\"name\":\"{}\",\"namespace\":\"{}\",\"resourceVersion\":\"{}\",\"uid\":\"{}\"}},",
                    "\"data\":{{\"alpha\":\"{}\",\"beta\":\"{}\",\"delta\":\"{}\",\"gamma\":\"{}\"}}}}"
                ),
                created, shard, managed, name, namespace, rv, uid2, alpha, beta, delta, gamma
            )
            .into_bytes()
        })?;
    }
    Ok(())
}

/// What a churn generator does.
#[derive(Debug, Clone)]
pub struct ChurnSpec {
    /// API group of the churned type (`""` for core).
    pub group: String,
    /// Plural of the churned type.
    pub plural: String,
    /// Namespace the objects live in (ignored for cluster-scoped types).
    pub namespace: String,
    /// Number of distinct object names cycled through.
    pub objects: usize,
    /// Target operations per second.
    pub ops_per_sec: f64,
    /// RNG seed: the same seed gives the same sequence of operations.
    pub seed: u64,
    /// Stop by itself after this many operations (`None`: run until stopped).
    pub max_ops: Option<u64>,
}

impl Default for ChurnSpec {
    fn default() -> Self {
        ChurnSpec {
            group: String::new(),
            plural: "configmaps".into(),
            namespace: "churn".into(),
            objects: 100,
            ops_per_sec: 100.0,
            seed: 1,
            max_ops: None,
        }
    }
}

/// Operations a churn generator performed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChurnStats {
    /// Creates.
    pub created: u64,
    /// Updates.
    pub updated: u64,
    /// Deletes.
    pub deleted: u64,
    /// Failed operations.
    pub errors: u64,
}

impl ChurnStats {
    /// All operations.
    pub fn total(&self) -> u64 {
        self.created + self.updated + self.deleted + self.errors
    }
}

#[derive(Default)]
struct Counters {
    created: AtomicU64,
    updated: AtomicU64,
    deleted: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ChurnStats {
        ChurnStats {
            created: self.created.load(Ordering::SeqCst),
            updated: self.updated.load(Ordering::SeqCst),
            deleted: self.deleted.load(Ordering::SeqCst),
            errors: self.errors.load(Ordering::SeqCst),
        }
    }
}

/// A running churn generator; `stop` ends it and reports what it did.
pub struct ChurnHandle {
    stop: Arc<AtomicBool>,
    op_lock: Arc<Mutex<()>>,
    counters: Arc<Counters>,
    finished: Arc<AtomicBool>,
}

impl std::fmt::Debug for ChurnHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChurnHandle")
            .field("stats", &self.counters.snapshot())
            .finish()
    }
}

impl ChurnHandle {
    /// A handle for a generator that never ran.
    pub(crate) fn finished_empty() -> Self {
        ChurnHandle {
            stop: Arc::new(AtomicBool::new(true)),
            op_lock: Arc::new(Mutex::new(())),
            counters: Arc::new(Counters::default()),
            finished: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Stop the generator; no operation runs after this returns.
    pub fn stop(self) -> ChurnStats {
        self.stop.store(true, Ordering::SeqCst);
        let _guard = self.op_lock.lock();
        self.counters.snapshot()
    }

    /// Operations so far.
    pub fn stats(&self) -> ChurnStats {
        self.counters.snapshot()
    }

    /// Whether the generator ended by itself (`max_ops` reached or the type is unknown).
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

struct Churner {
    store: Arc<Store>,
    res: usize,
    namespace: Option<String>,
    spec: ChurnSpec,
    rng: StdRng,
    counters: Arc<Counters>,
    ops: u64,
}

impl Churner {
    fn one_op(&mut self) {
        let n = self.spec.objects.max(1);
        let idx = self.rng.random_range(0..n);
        let name = format!("churn-{idx:05}");
        let key = ObjKey::new(self.namespace.as_deref().unwrap_or(""), &name);
        let roll: f64 = self.rng.random();
        let flip: bool = self.rng.random_bool(0.3);
        let result = match self.store.get(self.res, &key) {
            Err(_) => {
                let body = json!({
                    "metadata": {"name": name, "labels": {"churn": "true", "phase": "a"}},
                    "data": {"counter": "0", "payload": "x".repeat(200)},
                });
                self.store
                    .create(self.res, self.namespace.as_deref(), body, false)
                    .map(|_| &self.counters.created)
            }
            Ok(_) if roll < 0.2 => self
                .store
                .delete(self.res, &key, &DeletePreconditions::default(), false)
                .map(|_| &self.counters.deleted),
            Ok(current) => {
                let v = current.to_value();
                let counter = v["data"]["counter"]
                    .as_str()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
                let phase = v["metadata"]["labels"]["phase"].as_str().unwrap_or("a");
                let phase = match (flip, phase) {
                    (false, p) => p.to_string(),
                    (true, "a") => "b".to_string(),
                    (true, _) => "a".to_string(),
                };
                let body = json!({
                    "metadata": {"name": name, "labels": {"churn": "true", "phase": phase}},
                    "data": {"counter": (counter + 1).to_string(), "payload": "x".repeat(200)},
                });
                self.store
                    .update(
                        self.res,
                        self.namespace.as_deref(),
                        Some(&name),
                        body,
                        false,
                    )
                    .map(|_| &self.counters.updated)
            }
        };
        match result {
            Ok(c) => {
                c.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::debug!(error = %e, "churn operation failed");
                self.counters.errors.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.ops += 1;
    }
}

/// Start a churn generator on `runtime`.
pub fn start_churn(
    store: Arc<Store>,
    runtime: &tokio::runtime::Handle,
    spec: ChurnSpec,
) -> Result<ChurnHandle, ApiError> {
    let res = store.resolve(&spec.group, &spec.plural)?;
    let namespaced = store
        .registry()
        .types()
        .get(res)
        .is_some_and(|t| t.namespaced);
    if spec.ops_per_sec <= 0.0 || !spec.ops_per_sec.is_finite() {
        return Err(ApiError::new(
            Reason::BadRequest,
            "ops_per_sec must be positive",
        ));
    }
    if let Some(rt) = store.registry().types().get(res) {
        store.open_namespace_for(rt, &spec.namespace)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let op_lock = Arc::new(Mutex::new(()));
    let counters = Arc::new(Counters::default());
    let finished = Arc::new(AtomicBool::new(false));
    let mut churner = Churner {
        store,
        res,
        namespace: namespaced.then(|| spec.namespace.clone()),
        rng: StdRng::seed_from_u64(spec.seed),
        spec,
        counters: counters.clone(),
        ops: 0,
    };
    let (stop2, lock2, fin2) = (stop.clone(), op_lock.clone(), finished.clone());
    runtime.spawn(async move {
        let tick = Duration::from_millis(10);
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = tokio::time::Instant::now();
        let mut credit = 0.0f64;
        'outer: loop {
            interval.tick().await;
            let now = tokio::time::Instant::now();
            credit += churner.spec.ops_per_sec * now.duration_since(last).as_secs_f64();
            last = now;
            // Never let a stall turn into an unbounded burst.
            credit = credit.min(churner.spec.ops_per_sec.max(1.0));
            while credit >= 1.0 {
                let _guard = lock2.lock();
                if stop2.load(Ordering::SeqCst) {
                    break 'outer;
                }
                if churner.spec.max_ops.is_some_and(|m| churner.ops >= m) {
                    break 'outer;
                }
                churner.one_op();
                credit -= 1.0;
            }
            if stop2.load(Ordering::SeqCst) {
                break;
            }
        }
        fin2.store(true, Ordering::SeqCst);
    });
    Ok(ChurnHandle {
        stop,
        op_lock,
        counters,
        finished,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_seeding_renders_the_same_object_as_the_generic_path() {
        use crate::registry::Registry;
        use crate::resource::ResourceType;
        use crate::selector::ObjectFilter;
        let fast = Store::new(Registry::new(ResourceType::defaults()), 100, 10);
        seed_configmaps_fast(&fast, "ns", 3).unwrap();
        let slow = Store::new(Registry::new(ResourceType::defaults()), 100, 10);
        let res = slow.resolve("", "configmaps").unwrap();
        slow.create(res, Some("ns"), seed_configmap(2), false)
            .unwrap();
        let strip = |mut v: Value| {
            for f in ["uid", "creationTimestamp", "resourceVersion"] {
                v["metadata"].as_object_mut().unwrap().remove(f);
            }
            v["metadata"]["managedFields"][0]
                .as_object_mut()
                .unwrap()
                .remove("time");
            v
        };
        let page = fast
            .list(res, &ObjectFilter::default(), None, None, None)
            .unwrap();
        assert_eq!(page.items.len(), 3);
        let a = page.items[2].to_value();
        assert_eq!(page.items[2].labels["shard"], "2");
        assert_eq!(
            a["metadata"]["resourceVersion"],
            page.items[2].rv.to_string()
        );
        let b = slow
            .list(res, &ObjectFilter::default(), None, None, None)
            .unwrap()
            .items[0]
            .to_value();
        assert_eq!(strip(a), strip(b));
        assert!(
            seed_configmaps_fast(&fast, "ns", 1).is_err(),
            "duplicates are refused"
        );
    }

    #[test]
    fn seed_objects_are_about_1_3_kb() {
        let len = seed_configmap(42).to_string().len();
        // the server adds ~250 bytes of metadata (uid, timestamps, namespace, rv)
        assert!((950..1250).contains(&len), "{len}");
        assert_eq!(seed_configmap(7), seed_configmap(7));
    }
}
