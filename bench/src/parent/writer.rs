//! The writer: timestamped updates of the churn objects (ConfigMaps, or
//! Pods with `--churn-kind pod`), paced at a rate or as fast as the server
//! takes them.

use std::time::{Duration, Instant};

use kinformer_apiserver::ServerHandle;
use serde_json::Value;

use crate::objects::stamp;
use crate::proto::Kind;

/// Updates the churn objects round-robin, each carrying its write timestamp.
pub struct Writer {
    server: ServerHandle,
    namespace: String,
    objects: Vec<Value>,
    /// What the objects are (their templates' `kind`), for the resource path.
    kind: Kind,
    next: usize,
    counter: u64,
    /// Failed writes (should stay 0).
    pub errors: u64,
}

impl Writer {
    /// A writer over `objects` (templates of existing ConfigMaps, or Pods,
    /// in `namespace`).
    pub fn new(server: ServerHandle, namespace: &str, objects: Vec<Value>) -> Self {
        let kind = match objects.first().and_then(|o| o["kind"].as_str()) {
            Some("Pod") => Kind::Pod,
            _ => Kind::ConfigMap,
        };
        Writer {
            server,
            namespace: namespace.into(),
            objects,
            kind,
            next: 0,
            counter: 0,
            errors: 0,
        }
    }

    /// What the churn objects are (their templates' `kind`).
    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn write_one(&mut self) {
        let resource = self.kind.plural();
        let n = self.objects.len().max(1);
        let i = self.next % n;
        self.next += 1;
        self.counter += 1;
        if let Some(obj) = self.objects.get_mut(i) {
            stamp(obj, self.counter);
            if let Err(e) = self
                .server
                .update("", resource, Some(&self.namespace), obj.clone())
            {
                tracing::warn!(%e, "write failed");
                self.errors += 1;
            }
        }
    }

    /// Writes at `rate` per second for `duration`; returns the writes made.
    pub fn paced(&mut self, rate: f64, duration: Duration) -> u64 {
        let total = (rate * duration.as_secs_f64()).round() as u64;
        let start = Instant::now();
        for i in 0..total {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            self.write_one();
        }
        total
    }

    /// Each object's name and the `data.counter` of its last write (or of its template).
    pub fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        self.objects
            .iter()
            .filter_map(|o| {
                let name = o["metadata"]["name"].as_str()?;
                let counter = o["data"]["counter"].as_str()?.parse().ok()?;
                Some((name.to_string(), counter))
            })
            .collect()
    }

    /// Writes `count` updates as fast as possible.
    pub fn burst(&mut self, count: u64) -> u64 {
        for _ in 0..count {
            self.write_one();
        }
        count
    }
}
