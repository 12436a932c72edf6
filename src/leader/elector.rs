//! The handle a service holds: [`LeaderElector`], built by
//! [`LeaderElectorBuilder`].

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::{broadcast, oneshot, watch};
use tracing::Instrument;

use super::election::Election;
use super::error::LeaderError;
use super::messages::{LeaderEvent, StopMode, StopOutcome};
use super::stopper::Stopper;
use super::task::{self, Outputs};
use super::timings::ElectionTimings;

/// Events kept for a receiver that lags; past that it gets
/// `RecvError::Lagged` (the `watch` channels still carry the state).
const EVENT_CAPACITY: usize = 64;

/// Configures a [`LeaderElector`]; see [`LeaderElector::builder`].
pub struct LeaderElectorBuilder {
    api: Api<Lease>,
    lease_name: String,
    identity: Option<String>,
    timings: ElectionTimings,
    events: broadcast::Sender<LeaderEvent>,
}

impl LeaderElectorBuilder {
    /// This elector's identity, written as the Lease's `holderIdentity`.
    /// It must be unique among the running candidates (an elector takes a
    /// Lease naming its own identity back at once). Default: `POD_NAME`,
    /// else the host name with a random suffix.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// All three durations at once (LE-1; default 15 s, 10 s, 2 s).
    pub fn timings(mut self, timings: ElectionTimings) -> Self {
        self.timings = timings;
        self
    }

    /// How long others wait after the last renew they saw (default 15 s; whole seconds).
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.timings.lease_duration = duration;
        self
    }

    /// How long a leader leads without a successful renew (default 10 s).
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.timings.renew_deadline = deadline;
        self
    }

    /// How often the leader renews and candidates try, jittered (default 2 s).
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.timings.retry_period = period;
        self
    }

    /// A receiver of every event from the start on (subscribe before
    /// [`start`](Self::start) not to miss the first ones).
    pub fn events(&self) -> broadcast::Receiver<LeaderEvent> {
        self.events.subscribe()
    }

    /// Validates the settings and starts electing, on the current tokio
    /// runtime (actix's included): the first try is made at once.
    pub fn start(self) -> Result<LeaderElector, LeaderError> {
        self.timings.validate()?;
        if self.lease_name.is_empty() {
            return Err(LeaderError::Empty { what: "lease name" });
        }
        let identity = match self.identity {
            Some(identity) => identity,
            None => elector_identity()?,
        };
        if identity.is_empty() {
            return Err(LeaderError::Empty { what: "identity" });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LeaderError::NoRuntime)?;
        let election = Election::new(
            identity.clone(),
            self.lease_name.clone(),
            self.timings,
            rand::random(),
            tokio::time::Instant::now().into_std(),
        );
        let (leading_tx, leading) = watch::channel(false);
        let (holder_tx, holder) = watch::channel(None);
        let outputs = Outputs {
            leading: leading_tx,
            holder: holder_tx,
            events: self.events.clone(),
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let span = tracing::info_span!(
            "leader_election",
            lease = %self.lease_name,
            identity = %identity
        );
        let task = runtime.spawn(
            task::run(
                election,
                self.api,
                self.lease_name.clone(),
                stop_rx,
                outputs,
            )
            .instrument(span),
        );
        Ok(LeaderElector {
            identity,
            lease_name: self.lease_name,
            timings: self.timings,
            leading,
            holder,
            events: self.events,
            stopper: Stopper::new(stop_tx, task),
        })
    }
}

/// The identity used when none is given: `POD_NAME` (set it from the
/// downward API's `metadata.name`), else the host name (a pod's name, in a
/// pod). Shard members name their Lease after it, so it stays a valid name.
pub fn default_identity() -> Result<String, LeaderError> {
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.is_empty()
    {
        return Ok(name);
    }
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .ok_or(LeaderError::NoIdentity)
}

/// An elector's identity when none is given: `POD_NAME`, else the host name
/// with a random suffix, as client-go's examples do. The host name alone is
/// not unique (pods on the host network, two processes on one machine), and
/// two electors of one identity would both lead. `holderIdentity` is free
/// text, so the suffix needs no name rules.
fn elector_identity() -> Result<String, LeaderError> {
    if std::env::var("POD_NAME").is_ok_and(|n| !n.is_empty()) {
        return default_identity();
    }
    Ok(format!("{}_{}", default_identity()?, uuid::Uuid::new_v4()))
}

/// A running leader election over one Lease: a tokio task that tries,
/// renews and releases it (client-go's rules, LE-1…LE-11), and this handle
/// to read leadership, follow its changes and stop it.
///
/// There is no fencing. A leader steps down before the Lease can expire for
/// anyone else (LE-7), but work it already started goes on until it notices,
/// and a process paused past the margin `lease_duration − renew_deadline`
/// can act after a successor started: make the guarded work idempotent.
///
/// To gate work on leadership (a controller's workers, say), hold a
/// [`leadership`](Self::leadership) receiver: wait for `true` before taking
/// work, and stop taking it when it turns `false` (`changed()` wakes you).
/// It turns `false` whenever the task ends, a panic included.
///
/// Dropping the handle stops gracefully in the background (as
/// [`stop`](Self::stop), without waiting for the release).
pub struct LeaderElector {
    identity: String,
    lease_name: String,
    timings: ElectionTimings,
    leading: watch::Receiver<bool>,
    holder: watch::Receiver<Option<String>>,
    events: broadcast::Sender<LeaderEvent>,
    stopper: Stopper,
}

impl LeaderElector {
    /// An elector over the Lease `lease_name` in `api`'s namespace
    /// (`Api::namespaced(client, ns)`, or `Api::default_namespaced`).
    pub fn builder(api: Api<Lease>, lease_name: impl Into<String>) -> LeaderElectorBuilder {
        LeaderElectorBuilder {
            api,
            lease_name: lease_name.into(),
            identity: None,
            timings: ElectionTimings::default(),
            events: broadcast::channel(EVENT_CAPACITY).0,
        }
    }

    /// This elector's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Its Lease's timings.
    pub fn timings(&self) -> ElectionTimings {
        self.timings
    }

    /// The Lease's name.
    pub fn lease_name(&self) -> &str {
        &self.lease_name
    }

    /// Whether this elector leads now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Leadership as a `watch` channel: `true` while leading.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// The holder the Lease named when last read (this elector or another;
    /// `None` when it names none or is missing).
    pub fn leader(&self) -> watch::Receiver<Option<String>> {
        self.holder.clone()
    }

    /// Events from now on (became leader, stepped down, new leader; LE-10).
    /// A receiver that falls 64 events behind gets `Lagged`.
    pub fn events(&self) -> broadcast::Receiver<LeaderEvent> {
        self.events.subscribe()
    }

    /// The events' sender, for a controller to hand out receivers.
    pub(crate) fn event_sender(&self) -> broadcast::Sender<LeaderEvent> {
        self.events.clone()
    }

    /// Stops gracefully: steps down at once, then clears the Lease's holder
    /// so a successor takes over at its next try (LE-8; client-go's
    /// `ReleaseOnCancel`). Stop the guarded work first: once released,
    /// another replica may start at once. Gives up after the renew deadline
    /// ([`LeaderError::ReleaseFailed`]; others then wait for the expiry).
    pub async fn stop(mut self) -> Result<StopOutcome, LeaderError> {
        self.stopper.release().await
    }

    /// Stops without releasing: steps down and leaves the Lease held until
    /// it expires for the others, as a crash (or `SIGKILL`) would.
    pub async fn abandon(mut self) {
        let _ = self.stopper.finish(StopMode::Abandon).await;
    }
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("identity", &self.identity)
            .field("lease_name", &self.lease_name)
            .field("leading", &*self.leading.borrow())
            .finish_non_exhaustive()
    }
}
