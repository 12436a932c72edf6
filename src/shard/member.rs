//! The shell of a shard member: a tokio task that runs the rounds of
//! [`Membership`] against the API server through kube-client, and
//! [`ShardMember`], the handle a service holds. The rules live in
//! `membership.rs`.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use super::assignment::Assignment;
use super::membership::{GROUP_LABEL, Membership, Write, Written};
use crate::leader::stopper::Stopper;
use crate::leader::{
    ElectionTimings, Finished, LeaderError, StopMode, StopOutcome, default_identity,
};

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Configures a [`ShardMember`]; see [`ShardMember::builder`].
pub struct ShardMemberBuilder {
    api: Api<Lease>,
    group: String,
    identity: Option<String>,
    timings: ElectionTimings,
}

impl ShardMemberBuilder {
    /// This member's identity, unique in the group (default: `POD_NAME`,
    /// else the host name). Its Lease is `<group>-<identity>`, so it must
    /// fit a Lease name.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// The shard Lease's timings (LE-1's rules; default 15 s, 10 s, 2 s):
    /// a dead member's keys move a lease duration after its last heartbeat
    /// was seen; heartbeats go every retry period.
    pub fn timings(mut self, timings: ElectionTimings) -> Self {
        self.timings = timings;
        self
    }

    /// Validates the settings and joins the group, on the current tokio
    /// runtime: the first round runs at once.
    pub fn start(self) -> Result<ShardMember, LeaderError> {
        self.timings.validate()?;
        if self.group.is_empty() {
            return Err(LeaderError::Empty {
                what: "shard group",
            });
        }
        let identity = match self.identity {
            Some(identity) => identity,
            None => default_identity()?,
        };
        if identity.is_empty() {
            return Err(LeaderError::Empty { what: "identity" });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LeaderError::NoRuntime)?;
        let lease_name = format!("{}-{identity}", self.group);
        let membership = Membership::new(&identity, &lease_name, &self.group, self.timings);
        let (assignment_tx, assignment) = watch::channel(Assignment::nothing(&identity));
        let (members_tx, members) = watch::channel(Vec::new());
        let (stop_tx, stop_rx) = oneshot::channel();
        let span = tracing::info_span!("shard_member", group = %self.group, identity = %identity);
        let shell = Shell {
            membership,
            api: self.api,
            group: self.group.clone(),
            timings: self.timings,
            collect: true,
            outputs: Outputs {
                assignment: assignment_tx,
                members: members_tx,
            },
        };
        let task = runtime.spawn(shell.run(stop_rx).instrument(span));
        Ok(ShardMember {
            identity,
            timings: self.timings,
            group: self.group,
            lease_name,
            assignment,
            members,
            stopper: Stopper::new(stop_tx, task),
        })
    }
}

/// One member of a shard group: holds the shard Lease `<group>-<identity>`
/// (its heartbeat), sees the other members' Leases, and publishes which
/// keys it may reconcile now ([`Assignment`]; rules SH-1..SH-9). Run a
/// controller on it with
/// [`Controller::sharded`](crate::controller::Controller::sharded).
///
/// There is no fencing: a member stops acting on a key before the others
/// may take it (SH-4, SH-6), but a process paused past the margin
/// `lease_duration − renew_deadline` can act late. Reconciles must be
/// idempotent.
///
/// Dropping the handle leaves the group gracefully in the background.
pub struct ShardMember {
    identity: String,
    timings: ElectionTimings,
    group: String,
    lease_name: String,
    assignment: watch::Receiver<Assignment>,
    members: watch::Receiver<Vec<String>>,
    stopper: Stopper,
}

impl ShardMember {
    /// A member of `group`, with its Lease in `api`'s namespace.
    pub fn builder(api: Api<Lease>, group: impl Into<String>) -> ShardMemberBuilder {
        ShardMemberBuilder {
            api,
            group: group.into(),
            identity: None,
            timings: ElectionTimings::default(),
        }
    }

    /// This member's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Its shard Lease's timings.
    pub fn timings(&self) -> ElectionTimings {
        self.timings
    }

    /// This member's Lease.
    pub fn lease_name(&self) -> &str {
        &self.lease_name
    }

    /// The keys this member may reconcile, as a `watch` channel: changes
    /// when membership or the others' claims do. Nothing once it stopped.
    pub fn assignment(&self) -> watch::Receiver<Assignment> {
        self.assignment.clone()
    }

    /// The members this one counts as live (itself included), sorted.
    pub fn members(&self) -> watch::Receiver<Vec<String>> {
        self.members.clone()
    }

    /// Leaves the group gracefully: owns nothing from now on, then releases
    /// its Lease (no holder), so the others take its keys at their next
    /// round, without waiting for it to expire (SH-7). Stop the controller
    /// first if its reconciles in progress should finish rather than be
    /// cancelled.
    pub async fn stop(mut self) -> Result<StopOutcome, LeaderError> {
        self.stopper.release().await
    }

    /// Leaves without releasing, as a crash would: the others take its keys
    /// once its Lease expired for them.
    pub async fn abandon(mut self) {
        let _ = self.stopper.finish(StopMode::Abandon).await;
    }
}

impl std::fmt::Debug for ShardMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMember")
            .field("group", &self.group)
            .field("identity", &self.identity)
            .field("members", &*self.members.borrow())
            .finish_non_exhaustive()
    }
}

/// Where the task publishes.
struct Outputs {
    assignment: watch::Sender<Assignment>,
    members: watch::Sender<Vec<String>>,
}

impl Drop for Outputs {
    /// Whatever ends the task, a panic included, nothing stays ours.
    fn drop(&mut self) {
        let me = self.assignment.borrow().clone();
        if !me.is_nothing() {
            self.assignment.send_replace(Assignment::nothing(me.me()));
        }
    }
}

struct Shell {
    membership: Membership,
    api: Api<Lease>,
    group: String,
    timings: ElectionTimings,
    /// Whether departed members' Leases are deleted (SH-9): off once the
    /// server forbade it (no `delete` on Leases granted).
    collect: bool,
    outputs: Outputs,
}

/// How a request ended while the shell waited for it.
enum Waited<T> {
    Answered(T),
    Stop(StopMode),
}

impl Shell {
    async fn run(mut self, mut stop: oneshot::Receiver<StopMode>) -> Finished {
        let mut round = now();
        loop {
            let mode = tokio::select! {
                mode = &mut stop => mode.unwrap_or(StopMode::Release),
                () = tokio::time::sleep_until(round.into()) => {
                    round = now() + self.timings.retry_period;
                    match self.round(&mut stop).await {
                        Some(mode) => mode,
                        None => continue,
                    }
                }
                () = sleep_until(self.membership.deadline()) => {
                    // SH-6: the heartbeat is late; nothing is ours until it is renewed.
                    self.publish();
                    continue;
                }
            };
            return self.leave(mode).await;
        }
    }

    /// One round: list, write, publish. `Some` when a stop came meanwhile.
    async fn round(&mut self, stop: &mut oneshot::Receiver<StopMode>) -> Option<StopMode> {
        let sent = now();
        let listed = match self.wait(self.list(), stop).await {
            Waited::Stop(mode) => return Some(mode),
            Waited::Answered(listed) => listed,
        };
        match listed {
            Listed(Ok(leases)) => self.membership.observed(sent, now(), &leases),
            Listed(Err(e)) => tracing::warn!(error = %e, "listing the shard Leases failed"),
        }
        if let Some(write) = self.membership.plan(now(), Timestamp::now()) {
            self.publish();
            let written = match self.wait(self.write(write), stop).await {
                Waited::Stop(mode) => return Some(mode),
                Waited::Answered(written) => written,
            };
            self.membership.written(now(), written);
        }
        self.publish();
        // One delete a round at most: a hanging one delays the next
        // heartbeat by at most the request timeout, within the renew deadline.
        if self.collect
            && let Some((name, resource_version)) = self.membership.departed(now(), 1).pop()
        {
            match self.wait(self.delete(name, resource_version), stop).await {
                Waited::Stop(mode) => return Some(mode),
                Waited::Answered(Deleted::Forbidden) => self.collect = false,
                Waited::Answered(Deleted::Done) => {}
            }
        }
        None
    }

    /// Waits for `request`, bounded by the request timeout, publishing when
    /// the renew deadline passes meanwhile; a stop abandons it.
    async fn wait<T>(
        &mut self,
        request: impl Future<Output = T>,
        stop: &mut oneshot::Receiver<StopMode>,
    ) -> Waited<T>
    where
        T: From<Timeout>,
    {
        let timeout = self.timings.request_timeout();
        let request = tokio::time::timeout(timeout, request);
        tokio::pin!(request);
        loop {
            tokio::select! {
                // An answer ready with the deadline is taken first: a write
                // that landed in time must not be judged late (as LE-7).
                biased;
                answer = &mut request => return Waited::Answered(answer.unwrap_or_else(|_| Timeout.into())),
                mode = &mut *stop => return Waited::Stop(mode.unwrap_or(StopMode::Release)),
                () = sleep_until(self.membership.deadline()) => self.publish(),
            }
        }
    }

    fn list(&self) -> impl Future<Output = Listed> + 'static {
        let api = self.api.clone();
        let params = ListParams::default().labels(&format!("{GROUP_LABEL}={}", self.group));
        async move {
            api.list(&params)
                .await
                .map(|l| l.items)
                .map_err(|e| e.to_string())
                .into()
        }
    }

    fn write(&self, write: Write) -> impl Future<Output = Written> + 'static {
        let api = self.api.clone();
        async move {
            let params = PostParams::default();
            let result = match &write {
                Write::Create(lease) => api.create(&params, lease).await,
                Write::Update(lease) => {
                    let name = lease.metadata.name.clone().unwrap_or_default();
                    api.replace(&name, &params, lease).await
                }
            };
            match result {
                // Without a resourceVersion the next replace would be
                // unconditional: not a write to build on (as LE-3).
                Ok(lease)
                    if lease
                        .metadata
                        .resource_version
                        .as_deref()
                        .is_none_or(str::is_empty) =>
                {
                    tracing::warn!("the server answered the shard Lease without a resourceVersion");
                    Written::Failed
                }
                Ok(lease) => Written::Stored(Box::new(lease)),
                Err(kube::Error::Api(status))
                    if status.code == 409 && matches!(write, Write::Create(_)) =>
                {
                    let (Write::Create(lease) | Write::Update(lease)) = &write;
                    let name = lease.metadata.name.as_deref().unwrap_or_default();
                    tracing::warn!(lease = %name, label = GROUP_LABEL, "creating the shard Lease found one of that name; if it lacks the group label this member is never listed and owns nothing");
                    Written::Conflict
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Written::Conflict,
                Err(kube::Error::Api(status)) if status.code == 404 => Written::Missing,
                Err(e) => {
                    tracing::warn!(error = %e, "writing the shard Lease failed");
                    Written::Failed
                }
            }
        }
    }

    /// Deletes a departed member's Lease, conditional on the
    /// resourceVersion it was last seen at: if its member came back and
    /// renewed it meanwhile, the delete fails (409) and the Lease stays.
    fn delete(
        &self,
        name: String,
        resource_version: String,
    ) -> impl Future<Output = Deleted> + 'static {
        let api = self.api.clone();
        async move {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(resource_version),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => tracing::info!(lease = %name, "deleted a departed member's shard Lease"),
                // Gone already (another member deleted it), or renewed since.
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    tracing::warn!(
                        lease = %name,
                        "not allowed to delete shard Leases: departed members' Leases stay (grant `delete` on leases)"
                    );
                    return Deleted::Forbidden;
                }
                Err(e) => {
                    tracing::debug!(lease = %name, error = %e, "deleting a departed member's shard Lease failed")
                }
            }
            Deleted::Done
        }
    }

    fn publish(&mut self) {
        let assignment = self.membership.assignment(now());
        self.outputs
            .assignment
            .send_if_modified(|a| std::mem::replace(a, assignment.clone()) != assignment);
        let members = self.membership.members(now());
        self.outputs
            .members
            .send_if_modified(|m| std::mem::replace(m, members.clone()) != members);
    }

    /// Ends membership: nothing is ours at once; a release clears our Lease,
    /// re-reading and retrying after a conflict until the renew deadline.
    async fn leave(mut self, mode: StopMode) -> Finished {
        let released = self.membership.release(Timestamp::now());
        self.publish();
        if mode == StopMode::Abandon {
            return Finished::Abandoned;
        }
        let mut lease = match released {
            Some(lease) => lease,
            None => return Finished::NotHolding,
        };
        let mut reason = String::from("no answer in time");
        let give_up = now() + self.timings.renew_deadline;
        let timeout = self.timings.request_timeout();
        while now() < give_up {
            match tokio::time::timeout(timeout, self.write(Write::Update(lease.clone()))).await {
                Ok(Written::Stored(_)) => {
                    tracing::info!("left the shard group (Lease released)");
                    return Finished::Released;
                }
                // Deleted: nothing of ours to release.
                Ok(Written::Missing) => return Finished::NotHolding,
                Ok(Written::Conflict) => {
                    let sent = now();
                    match tokio::time::timeout(timeout, self.list()).await {
                        Ok(Listed(Ok(leases))) => self.membership.observed(sent, now(), &leases),
                        // Not re-read: the next write would conflict again
                        // at once; wait as after a failure.
                        _ => {
                            tokio::time::sleep(
                                self.timings.retry_period.min(Duration::from_millis(200)),
                            )
                            .await
                        }
                    }
                    match self.membership.release(Timestamp::now()) {
                        Some(again) => lease = again,
                        None => return Finished::NotHolding,
                    }
                    reason = "conflict".into();
                }
                Ok(Written::Failed) | Err(_) => {
                    reason = "the write failed".into();
                    tokio::time::sleep(self.timings.retry_period.min(Duration::from_millis(200)))
                        .await;
                }
            }
        }
        tracing::warn!(%reason, "the shard Lease was not released; the others wait for it to expire");
        Finished::ReleaseFailed { reason }
    }
}

/// A request that did not answer in time.
struct Timeout;

/// How a delete of a departed member's Lease ended.
enum Deleted {
    /// Deleted, or not needed any more, or failed (tried again later).
    Done,
    /// 403: this member may not delete Leases.
    Forbidden,
}

impl From<Timeout> for Deleted {
    fn from(_: Timeout) -> Self {
        Deleted::Done
    }
}

/// A list's answer.
struct Listed(Result<Vec<Lease>, String>);

impl From<Result<Vec<Lease>, String>> for Listed {
    fn from(r: Result<Vec<Lease>, String>) -> Self {
        Listed(r)
    }
}

impl From<Timeout> for Listed {
    fn from(_: Timeout) -> Self {
        Listed(Err("no answer in time".into()))
    }
}

impl From<Timeout> for Written {
    fn from(_: Timeout) -> Self {
        Written::Failed
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
