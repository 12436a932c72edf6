//! `[leader_election]` in `kinformer run`: one elector per replica, its
//! state in the status line (`leader: this replica` / `standby, leader: x`)
//! and in metrics (`kinformer_leader`, `kinformer_leader_transitions_total`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use kinformer::leader::{LeaderElector, LeaderEvent, StopOutcome};
use tokio::sync::{Mutex, watch};

use super::config::LeaderElectionSettings;

/// This replica's elector, as the program shows it.
pub struct LeaderView {
    /// The identity written into the Lease.
    pub identity: String,
    /// `namespace/name` of the Lease.
    pub lease: String,
    leading: watch::Receiver<bool>,
    holder: watch::Receiver<Option<String>>,
    /// Times this replica became leader or stepped down.
    transitions: Arc<AtomicU64>,
    elector: Mutex<Option<LeaderElector>>,
}

impl LeaderView {
    /// Starts electing over the configured Lease.
    pub fn start(client: kube::Client, s: &LeaderElectionSettings) -> anyhow::Result<Self> {
        let api = kube::Api::<Lease>::namespaced(client, &s.namespace);
        let mut builder = LeaderElector::builder(api, s.lease_name.clone()).timings(s.timings());
        if let Some(identity) = &s.identity {
            builder = builder.identity(identity.clone());
        }
        let mut events = builder.events();
        let elector = builder.start().context("starting leader election")?;
        let transitions = Arc::new(AtomicU64::new(0));
        let counted = transitions.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match events.recv().await {
                    Ok(LeaderEvent::BecameLeader { .. } | LeaderEvent::SteppedDown { .. }) => {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(LeaderEvent::NewLeader { .. }) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
            }
        });
        Ok(LeaderView {
            identity: elector.identity().to_owned(),
            lease: format!("{}/{}", s.namespace, s.lease_name),
            leading: elector.leadership(),
            holder: elector.leader(),
            transitions,
            elector: Mutex::new(Some(elector)),
        })
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Leadership changes of this replica so far.
    pub fn transitions(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }

    /// `leader: this replica (id)`, or `standby (id), leader: x`.
    pub fn status(&self) -> String {
        if self.is_leader() {
            format!(
                "leader: this replica ({}) holds {}",
                self.identity, self.lease
            )
        } else {
            let holder = self.holder.borrow().clone();
            format!(
                "standby ({}), leader: {}",
                self.identity,
                holder.as_deref().unwrap_or("none")
            )
        }
    }

    /// Copies leadership into the metrics recorder.
    pub fn sample(&self) {
        metrics::gauge!("kinformer_leader", "lease" => self.lease.clone())
            .set(if self.is_leader() { 1.0 } else { 0.0 });
        metrics::counter!("kinformer_leader_transitions_total", "lease" => self.lease.clone())
            .absolute(self.transitions());
    }

    /// Stops electing; a leader releases the Lease so another replica takes
    /// over at once (LE-8).
    pub async fn stop(&self) -> String {
        let Some(elector) = self.elector.lock().await.take() else {
            return "leader election already stopped".into();
        };
        match elector.stop().await {
            Ok(StopOutcome::Released) => format!("released the Lease {}", self.lease),
            Ok(StopOutcome::NotHolding) => format!("did not hold the Lease {}", self.lease),
            Err(e) => format!("the Lease {} was not released: {e}", self.lease),
        }
    }
}
