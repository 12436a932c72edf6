//! What the multi-replica tests share: short Lease timings, and a record of
//! every reconcile of several replicas (which replica, which key, the
//! object's resourceVersion, when it ran) to check that no key was
//! reconciled by two replicas at once (CTL-11, SH-5).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kinformer::leader::ElectionTimings;
use tokio::time::Instant;

/// Lease 1 s, renew deadline 0.6 s, retry 0.2 s: every bound a few seconds.
pub const TIMINGS: ElectionTimings = ElectionTimings {
    lease_duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(600),
    retry_period: Duration::from_millis(200),
};

/// How long a test waits for a condition.
pub const WAIT: Duration = Duration::from_secs(20);

/// One reconcile; `ended` is `None` while it runs.
#[derive(Debug, Clone)]
pub struct Call {
    pub replica: String,
    pub key: String,
    pub rv: Option<String>,
    pub started: Instant,
    pub ended: Option<Instant>,
}

/// Every reconcile of every replica.
#[derive(Default)]
pub struct Calls(Mutex<Vec<Call>>);

/// A reconcile in progress: its end is recorded when this is dropped, so a
/// cancelled reconcile (its future dropped) ends too.
pub struct Running<'a>(&'a Calls, usize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.0.lock().unwrap()[self.1].ended = Some(Instant::now());
    }
}

impl Calls {
    pub fn begin(&self, replica: &str, key: &str, rv: Option<String>) -> Running<'_> {
        let mut calls = self.0.lock().unwrap();
        calls.push(Call {
            replica: replica.to_owned(),
            key: key.to_owned(),
            rv,
            started: Instant::now(),
            ended: None,
        });
        Running(self, calls.len() - 1)
    }

    /// Records a reconcile reported by another process (its times mapped to
    /// this one's clock); answers its index for [`ended`](Self::ended).
    pub fn push(&self, call: Call) -> usize {
        let mut calls = self.0.lock().unwrap();
        calls.push(call);
        calls.len() - 1
    }

    /// Sets the end of the reconcile [`push`](Self::push) answered `i` for.
    pub fn ended(&self, i: usize, at: Instant) {
        self.0.lock().unwrap()[i].ended = Some(at);
    }

    pub fn all(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }

    /// Reconciles per key by `replica` (ended or not) started since `since`.
    pub fn by(&self, replica: &str, since: Instant) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in self.all() {
            if c.replica == replica && c.started >= since {
                *out.entry(c.key).or_default() += 1;
            }
        }
        out
    }

    /// The first reconcile by `replica` started since `since`.
    pub fn first_by(&self, replica: &str, since: Instant) -> Option<Instant> {
        self.all()
            .iter()
            .filter(|c| c.replica == replica && c.started >= since)
            .map(|c| c.started)
            .min()
    }

    /// No key was reconciled by two replicas at once.
    pub fn assert_never_concurrent(&self) {
        let calls = self.all();
        let now = Instant::now();
        for (i, a) in calls.iter().enumerate() {
            for b in &calls[i + 1..] {
                if a.key != b.key || a.replica == b.replica {
                    continue;
                }
                let (ea, eb) = (a.ended.unwrap_or(now), b.ended.unwrap_or(now));
                assert!(
                    ea <= b.started || eb <= a.started,
                    "{} reconciled by {} and {} at once: {a:?} {b:?}",
                    a.key,
                    a.replica,
                    b.replica
                );
            }
        }
    }
}
