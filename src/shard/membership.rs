//! The rules of shard membership as a pure state machine, time passed in
//! (SH-2..SH-9): which members are live, which view of them this member
//! publishes in its shard Lease, and which keys it may reconcile now.
//!
//! One round of the shell (`member.rs`), every retry period: list the
//! group's Leases ([`Membership::observed`]), decide and write our own
//! ([`Membership::plan`], [`Membership::written`]), then publish
//! [`Membership::assignment`]. Expiry is judged as leader election judges it
//! (LE-4): by the local time at which a Lease was last seen to change.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::assignment::Assignment;
use crate::leader::ElectionTimings;
use crate::leader::election::renew_time;

/// The label naming a shard Lease's group (how members find each other).
pub const GROUP_LABEL: &str = "kinformer.io/shard-group";
/// The annotation holding the view a member acts on: the identities of the
/// members it counts as live, sorted, comma-separated.
pub const VIEW_ANNOTATION: &str = "kinformer.io/shard-view";

/// How many lease durations a shard Lease stays unchanged (by this
/// member's observation) and no longer counted before the live members
/// delete it (SH-9).
pub const RETENTION_LEASES: u32 = 4;

/// Another member's Lease, as last observed.
#[derive(Debug, Clone)]
struct Peer {
    /// `holderIdentity`; `None` once released.
    holder: Option<String>,
    /// The view its Lease names (`None`: none published yet).
    view: Option<Vec<String>>,
    resource_version: String,
    /// When this member last saw the Lease change (LE-4).
    observed_at: Instant,
    /// The `leaseDurationSeconds` it names.
    duration: Duration,
}

impl Peer {
    fn live(&self, now: Instant) -> bool {
        self.holder.is_some() && now < self.observed_at + self.duration
    }
}

/// What to write to our shard Lease.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// It does not exist yet.
    Create(Lease),
    /// Replace it, conditional on the resourceVersion last read or written.
    Update(Lease),
}

/// The answer to a [`Write`].
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// Stored: the Lease as the server answered it.
    Stored(Box<Lease>),
    /// 409: our copy was stale (or a create found it); the next list reads it.
    Conflict,
    /// 404 to an update: our Lease was deleted; the next round creates it.
    Missing,
    /// Anything else (a timeout included: the write may or may not be stored).
    Failed,
}

/// One member of a shard group (see the module docs).
#[derive(Debug)]
pub struct Membership {
    me: String,
    lease_name: String,
    group: String,
    timings: ElectionTimings,
    /// Other members' Leases by name, from the last list.
    peers: BTreeMap<String, Peer>,
    /// Our Lease as last read or written: the resourceVersion of the next write.
    own: Option<Lease>,
    /// The view our Lease names as of the last successful write, and when
    /// that write was answered: observations from lists sent after it may
    /// widen the assignment (SH-3).
    claims: Option<(Vec<String>, Instant)>,
    /// When the last successful write was sent: the heartbeat the renew
    /// deadline counts from (SH-6).
    renewed: Option<Instant>,
    /// Views of writes whose outcome is unknown (a timeout): the server may
    /// still store one, so the assignment stays within them too until a
    /// later write is stored, which proves them dead (its resourceVersion
    /// precondition would have failed after one of them; SH-4).
    uncertain: Vec<Vec<String>>,
    /// The write in flight: its view and when it was sent.
    pending: Option<(Vec<String>, Instant)>,
    /// What we may reconcile now (before the renew deadline check).
    assignment: Assignment,
    stopped: bool,
    /// When the last list that answered was sent: a peer counts as dead
    /// only once a list sent after its expiry shows it unchanged.
    listed_at: Option<Instant>,
    /// The departed Leases whose delete was planned, and when: one delete
    /// per Lease and lease duration (SH-9). Names no longer in `peers` are
    /// dropped at the next plan; a Lease renewed since is no longer due.
    collecting: BTreeMap<String, Instant>,
}

impl Membership {
    /// A member `me` of `group`, whose Lease is `lease_name`.
    pub fn new(me: &str, lease_name: &str, group: &str, timings: ElectionTimings) -> Self {
        Membership {
            me: me.to_owned(),
            lease_name: lease_name.to_owned(),
            group: group.to_owned(),
            timings,
            peers: BTreeMap::new(),
            own: None,
            claims: None,
            renewed: None,
            uncertain: Vec::new(),
            pending: None,
            assignment: Assignment::nothing(me),
            stopped: false,
            listed_at: None,
            collecting: BTreeMap::new(),
        }
    }

    /// The group's Leases as listed by a request sent at `sent_at`, answered
    /// at `now`. A Lease whose resourceVersion changed (or that is new to us)
    /// counts as observed now (SH-5). A Lease gone from the list (deleted)
    /// still counts until it would have expired: its member may act on its
    /// keys that long. Our own gone from a list sent after our last write
    /// was stored is created again. Once the list was sent after our claims
    /// were stored, the assignment is our view's keys less those other live
    /// members claim (SH-3).
    pub fn observed(&mut self, sent_at: Instant, now: Instant, leases: &[Lease]) {
        self.listed_at = self.listed_at.max(Some(sent_at));
        let mut peers = BTreeMap::new();
        let mut listed_own = false;
        for lease in leases {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            if name == self.lease_name {
                self.own = Some(lease.clone());
                listed_own = true;
                continue;
            }
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let spec = lease.spec.as_ref();
            let peer = match self.peers.remove(&name) {
                Some(p) if p.resource_version == rv => p,
                _ => Peer {
                    holder: spec
                        .and_then(|s| s.holder_identity.clone())
                        .filter(|h| !h.is_empty()),
                    view: view_of(lease),
                    resource_version: rv,
                    observed_at: now,
                    duration: spec
                        .and_then(|s| s.lease_duration_seconds)
                        .and_then(|s| u64::try_from(s).ok())
                        .map_or(self.timings.lease_duration, Duration::from_secs),
                },
            };
            peers.insert(name, peer);
        }
        for (name, gone) in std::mem::take(&mut self.peers) {
            if gone.live(now) {
                peers.insert(name, gone);
            }
        }
        self.peers = peers;
        if !listed_own
            && self
                .claims
                .as_ref()
                .is_some_and(|(_, stored_at)| sent_at >= *stored_at)
        {
            self.own = None;
        }
        if self.stopped {
            return;
        }
        if let Some((view, stored_at)) = &self.claims
            && sent_at >= *stored_at
        {
            let mut views = vec![view.clone()];
            views.extend(self.uncertain.iter().filter(|u| *u != view).cloned());
            self.assignment = Assignment::new(&self.me, views, self.claimants(now));
        }
    }

    /// Whether `peer` counts as a live member: until its Lease expires by
    /// our observation, and past that until a list sent after the expiry
    /// showed it unchanged. A member whose lists fail cannot tell a dead
    /// peer from a renewing one; counted dead, they would leave it a view
    /// of itself alone, which claims every key from the others.
    fn counts(&self, peer: &Peer, now: Instant) -> bool {
        peer.live(now)
            || (peer.holder.is_some()
                && self
                    .listed_at
                    .is_none_or(|l| l < peer.observed_at + peer.duration))
    }

    /// Other live members and the views they published.
    fn claimants(&self, now: Instant) -> Vec<(String, Vec<String>)> {
        self.peers
            .values()
            .filter(|p| self.counts(p, now))
            .filter_map(|p| Some((p.holder.clone()?, p.view.clone()?)))
            .collect()
    }

    /// The members this member counts as live now (itself included), sorted:
    /// the view it publishes (SH-2).
    pub fn members(&self, now: Instant) -> Vec<String> {
        let mut members: Vec<String> = self
            .peers
            .values()
            .filter(|p| self.counts(p, now))
            .filter_map(|p| p.holder.clone())
            .chain([self.me.clone()])
            .collect();
        members.sort();
        members.dedup();
        members
    }

    /// Decides this round's write: our Lease renewed, naming the live
    /// members as our view. When the view changes, the assignment first
    /// narrows to the keys ours under both views (SH-4): keys we lose are
    /// dropped before the Lease says we gave them up. `None` once stopped.
    pub fn plan(&mut self, now: Instant, wall: Timestamp) -> Option<Write> {
        if self.stopped {
            return None;
        }
        let view = self.members(now);
        if !self.assignment.is_nothing() && !self.assignment.views().contains(&view) {
            let mut views = self.assignment.views().to_vec();
            views.push(view.clone());
            self.assignment = Assignment::new(&self.me, views, self.assignment.claims().to_vec());
        }
        let write = match &self.own {
            Some(lease) => Write::Update(self.renewed_lease(lease, &view, wall)),
            None => Write::Create(self.created_lease(&view, wall)),
        };
        self.pending = Some((view, now));
        Some(write)
    }

    /// The answer to this round's write, at `now`.
    pub fn written(&mut self, now: Instant, answer: Written) {
        let Some((view, sent)) = self.pending.take() else {
            return;
        };
        match answer {
            Written::Stored(lease) => {
                self.own = Some(*lease);
                self.renewed = Some(sent);
                self.uncertain.clear();
                if self.claims.as_ref().is_none_or(|(c, _)| *c != view) {
                    self.claims = Some((view, now));
                }
            }
            Written::Conflict => {}
            // Not stored: the view is not uncertain, and our copy is void.
            Written::Missing => self.own = None,
            // Past the renew deadline we own nothing until a write is
            // stored, which settles every doubt: a view written then needs
            // no keeping (and a long outage would pile them up).
            Written::Failed if self.deadline().is_none_or(|d| now >= d) => {}
            Written::Failed => {
                if !self.uncertain.contains(&view) {
                    self.uncertain.push(view);
                }
            }
        }
    }

    /// How many views this member may have written without knowing it.
    #[cfg(test)]
    pub(super) fn uncertain_views(&self) -> usize {
        self.uncertain.len()
    }

    /// When the renew deadline passes without a successful write since
    /// (SH-6): `renewed + renew_deadline`.
    pub fn deadline(&self) -> Option<Instant> {
        self.renewed.map(|r| r + self.timings.renew_deadline)
    }

    /// The keys we may reconcile at `now`. Past the renew deadline nothing,
    /// and the claims are forgotten: keys come back only after a new write
    /// and a list after it (SH-6).
    pub fn assignment(&mut self, now: Instant) -> Assignment {
        if self.deadline().is_none_or(|d| now >= d) {
            self.claims = None;
            self.renewed = None;
            self.assignment = Assignment::nothing(&self.me);
        }
        self.assignment.clone()
    }

    /// The Leases of departed members to delete now, with the
    /// resourceVersion each delete is conditional on (SH-9): those no
    /// longer counted (released, or expired and confirmed by a list) and
    /// unchanged for [`RETENTION_LEASES`] lease durations, at most `limit`
    /// of them (the shell deletes them within its heartbeat round). Each is
    /// planned at most once per lease duration; nothing while this member's
    /// own heartbeat is not current or once it stopped.
    pub fn departed(&mut self, now: Instant, limit: usize) -> Vec<(String, String)> {
        self.collecting
            .retain(|name, _| self.peers.contains_key(name));
        if self.stopped || self.deadline().is_none_or(|d| now >= d) {
            return Vec::new();
        }
        let retention = self.timings.lease_duration * RETENTION_LEASES;
        let again = self.timings.lease_duration;
        let due: Vec<(String, String)> = self
            .peers
            .iter()
            .filter(|(_, p)| !self.counts(p, now) && now >= p.observed_at + retention)
            .filter(|(name, _)| {
                self.collecting
                    .get(*name)
                    .is_none_or(|at| now >= *at + again)
            })
            .map(|(name, p)| (name.clone(), p.resource_version.clone()))
            .take(limit)
            .collect();
        for (name, _) in &due {
            self.collecting.insert(name.clone(), now);
        }
        due
    }

    /// A graceful stop (SH-7): nothing is ours from now on; answers the
    /// write that releases our Lease (no holder, no view, a one-second
    /// duration), if we have one.
    pub fn release(&mut self, wall: Timestamp) -> Option<Lease> {
        self.stopped = true;
        self.claims = None;
        self.renewed = None;
        self.assignment = Assignment::nothing(&self.me);
        let lease = self.own.as_ref()?;
        let mut released = lease.clone();
        let previous = lease.spec.as_ref();
        released.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: previous.and_then(|s| s.acquire_time.clone()),
            renew_time: Some(renew_time(previous, wall)),
            lease_transitions: previous.and_then(|s| s.lease_transitions),
            ..LeaseSpec::default()
        });
        if let Some(a) = released.metadata.annotations.as_mut() {
            a.remove(VIEW_ANNOTATION);
        }
        Some(released)
    }

    fn metadata(&self, base: ObjectMeta, view: &[String]) -> ObjectMeta {
        let mut meta = base;
        meta.name = Some(self.lease_name.clone());
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(GROUP_LABEL.into(), self.group.clone());
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(VIEW_ANNOTATION.into(), view.join(","));
        meta
    }

    fn created_lease(&self, view: &[String], wall: Timestamp) -> Lease {
        let now = renew_time(None, wall);
        Lease {
            metadata: self.metadata(ObjectMeta::default(), view),
            spec: Some(LeaseSpec {
                holder_identity: Some(self.me.clone()),
                lease_duration_seconds: Some(self.timings.lease_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    fn renewed_lease(&self, lease: &Lease, view: &[String], wall: Timestamp) -> Lease {
        let previous = lease.spec.as_ref();
        let renew = renew_time(previous, wall);
        let ours = previous.and_then(|s| s.holder_identity.as_deref()) == Some(self.me.as_str());
        let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
        let (acquire, transitions) = match previous.and_then(|s| s.acquire_time.clone()) {
            Some(acquire) if ours => (acquire, transitions),
            _ => (renew.clone(), transitions.saturating_add(1)),
        };
        Lease {
            metadata: self.metadata(lease.metadata.clone(), view),
            spec: Some(LeaseSpec {
                holder_identity: Some(self.me.clone()),
                lease_duration_seconds: Some(self.timings.lease_seconds()),
                acquire_time: Some(acquire),
                renew_time: Some(renew),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// The view a Lease names, if any.
fn view_of(lease: &Lease) -> Option<Vec<String>> {
    let text = lease.metadata.annotations.as_ref()?.get(VIEW_ANNOTATION)?;
    let mut view: Vec<String> = text
        .split(',')
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
    view.sort();
    view.dedup();
    Some(view)
}
