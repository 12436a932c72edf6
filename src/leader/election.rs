//! The rules of leader election over a `coordination.k8s.io/v1` Lease, as a
//! pure state machine: client-go's `tools/leaderelection` (`tryAcquireOrRenew`,
//! `release`, `isLeaseValid`) restated, with time passed in.
//!
//! Inputs: the local monotonic time (`now`), the wall clock (`wall`, used only
//! to write `acquireTime`/`renewTime`, never to judge expiry: LE-4), the
//! server's answers and the stop. Outputs ([`Effects`]): at most one request
//! (get, create or update the Lease), events (became leader, stepped down, new
//! leader observed), when to be woken next, and how the election finished.
//! The shell (`task.rs`) performs them.
//!
//! There is no fencing: a leader that stepped down may still be finishing
//! work it started, and a leader whose process was paused longer than the
//! margin `lease_duration - renew_deadline` may act after another took over.
//! Work guarded by an election must be idempotent.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::messages::{Finished, LeaderEvent, StepDownReason, StopMode};
use super::timings::{ElectionTimings, JITTER_FACTOR};

/// What the elector asks of the API server. Updates carry the
/// resourceVersion last read or written (LE-3).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Read the Lease.
    Get,
    /// Create the Lease (it was missing).
    Create(Lease),
    /// Replace the Lease (`PUT`), conditional on its `metadata.resourceVersion`.
    Update(Lease),
}

/// The server's answer to the request in flight.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The Lease as read or written.
    Lease(Box<Lease>),
    /// 404: there is no such Lease.
    Missing,
    /// 409 (a stale resourceVersion, or a create that found the Lease): a
    /// lost race, not an error (LE-3).
    Conflict,
    /// Anything else: a refused connection, a timeout, a 5xx, a 403...
    Failed(String),
}

/// What one step asks the shell to do.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    /// The request to send; only when none is in flight.
    pub request: Option<Request>,
    /// Leadership changes, in order.
    pub events: Vec<LeaderEvent>,
    /// When to call [`Election::tick`] next (`None`: only when an answer
    /// comes, or never once finished).
    pub wake_at: Option<Instant>,
    /// Set once: the election is over; drop any request still in flight.
    pub finished: Option<Finished>,
}

/// Which request is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    Create,
    /// The leader's optimistic renew from its cached Lease (client-go's fast
    /// path): any failure re-reads at once.
    FastRenew,
    /// An acquire or renew decided on a fresh read.
    Update,
    /// Clearing the holder on a graceful stop.
    Release,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Stopping gracefully: release the Lease until this deadline.
    Releasing {
        until: Instant,
    },
    Finished,
}

/// One elector's view of the election.
#[derive(Debug)]
pub struct Election {
    identity: String,
    lease_name: String,
    timings: ElectionTimings,
    rng: SmallRng,
    /// The Lease as last read or written: what the next update starts from,
    /// and the resourceVersion it sends (LE-3). `None` before the first
    /// answer and after a 404.
    lease: Option<Lease>,
    /// When `lease`'s spec was last seen to change, on the local monotonic
    /// clock: the only basis of expiry (LE-4). `Some` exactly when `lease` is.
    observed_at: Option<Instant>,
    /// `Some` while leading: when the last successful write was *sent*. The
    /// write landed after that, so every other elector saw it no earlier, and
    /// leading ends by `sent + renew_deadline` (LE-7).
    leading: Option<Instant>,
    /// The request awaiting its answer and when it was sent; at most one.
    in_flight: Option<(Op, Instant)>,
    /// When the next try is due (while nothing is in flight).
    next_try: Instant,
    /// The holder last reported with [`LeaderEvent::NewLeader`] (LE-10).
    reported: Option<String>,
    phase: Phase,
}

impl Election {
    /// An election for `identity` over the Lease `lease_name`, with
    /// validated `timings`; its first try is due at `now`. `seed` seeds the
    /// retry jitter (LE-2).
    pub fn new(
        identity: impl Into<String>,
        lease_name: impl Into<String>,
        timings: ElectionTimings,
        seed: u64,
        now: Instant,
    ) -> Self {
        Election {
            identity: identity.into(),
            lease_name: lease_name.into(),
            timings,
            rng: SmallRng::seed_from_u64(seed),
            lease: None,
            observed_at: None,
            leading: None,
            in_flight: None,
            next_try: now,
            reported: None,
            phase: Phase::Running,
        }
    }

    /// Whether this elector leads now.
    pub fn is_leader(&self) -> bool {
        self.leading.is_some()
    }

    /// The timings it runs with.
    pub fn timings(&self) -> &ElectionTimings {
        &self.timings
    }

    /// The holder named by the Lease as last observed.
    pub fn holder(&self) -> Option<&str> {
        self.lease.as_ref().and_then(holder_of)
    }

    /// The Lease as last read or written.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Time passed: step down past the renew deadline (LE-7), give up a
    /// release past its deadline (LE-8), and try when a try is due.
    pub fn tick(&mut self, now: Instant, wall: Timestamp) -> Effects {
        let mut fx = Effects::default();
        self.check_deadlines(now, &mut fx);
        if self.in_flight.is_none() && self.phase != Phase::Finished && now >= self.next_try {
            self.attempt(now, wall, &mut fx);
        }
        self.done(fx)
    }

    /// The answer to the request in flight (ignored if none is).
    pub fn answer(&mut self, now: Instant, wall: Timestamp, answer: Answer) -> Effects {
        let mut fx = Effects::default();
        let Some((op, sent)) = self.in_flight.take() else {
            return self.done(fx);
        };
        // A write that landed is taken in before the deadlines are judged:
        // a renew answered after the last one's deadline but within its own
        // keeps leading without a step-down and a new lead in one step (no
        // one else can have led: the write's resourceVersion precondition).
        let answer = checked(answer);
        let landed = matches!(
            (op, &answer),
            (Op::Create | Op::FastRenew | Op::Update, Answer::Lease(_))
        ) && self.phase == Phase::Running;
        if !landed {
            self.check_deadlines(now, &mut fx);
        }
        if self.phase == Phase::Finished {
            return self.done(fx);
        }
        let releasing = matches!(self.phase, Phase::Releasing { .. });
        match (op, answer) {
            (Op::Release, Answer::Lease(lease)) => {
                self.observe(*lease, now, &mut fx);
                self.finish(Finished::Released, &mut fx);
            }
            (Op::Get, Answer::Lease(lease)) => {
                self.observe(*lease, now, &mut fx);
                if releasing {
                    self.release_or_finish(now, wall, &mut fx);
                } else {
                    self.decide(now, wall, &mut fx);
                }
            }
            (Op::Create | Op::FastRenew | Op::Update, Answer::Lease(lease)) => {
                self.observe(*lease, now, &mut fx);
                if releasing {
                    self.release_or_finish(now, wall, &mut fx);
                } else {
                    self.written(sent, now, &mut fx);
                }
            }
            (_, Answer::Missing) => {
                self.lease = None;
                self.observed_at = None;
                // Deleted under us: another replica may create it and lead
                // at once (LE-6), so this one leads only once it creates it.
                self.step_down(now, StepDownReason::LeaseDeleted, &mut fx);
                self.report(now, &mut fx);
                if releasing {
                    self.finish(Finished::NotHolding, &mut fx);
                } else {
                    let lease = self.created(wall);
                    self.send(Op::Create, Request::Create(lease), now, &mut fx);
                }
            }
            // The optimistic renew failed: re-read at once, as client-go's
            // slow path does; so does a release that lost a race (LE-3, LE-8).
            (Op::FastRenew, Answer::Conflict | Answer::Failed(_))
            | (Op::Release, Answer::Conflict) => {
                self.send(Op::Get, Request::Get, now, &mut fx);
            }
            // A lost race (LE-3) or a failure: try again later.
            (_, Answer::Conflict | Answer::Failed(_)) => self.schedule_retry(now),
        }
        if landed {
            // Past its own deadline too, the write does not keep us leading.
            self.check_deadlines(now, &mut fx);
        }
        self.done(fx)
    }

    /// Stop: step down at once, then release the Lease or leave it to
    /// expire (LE-8). A request in flight is awaited before the release.
    pub fn stop(&mut self, now: Instant, wall: Timestamp, mode: StopMode) -> Effects {
        let mut fx = Effects::default();
        if self.phase != Phase::Running {
            return self.done(fx);
        }
        let reason = match mode {
            StopMode::Release => StepDownReason::Stopped,
            StopMode::Abandon => StepDownReason::Abandoned,
        };
        if self.leading.is_some() {
            self.step_down(now, reason, &mut fx);
        }
        if mode == StopMode::Abandon {
            self.finish(Finished::Abandoned, &mut fx);
            return self.done(fx);
        }
        self.phase = Phase::Releasing {
            until: now + self.timings.renew_deadline,
        };
        self.next_try = now;
        if self.in_flight.is_none() {
            self.attempt(now, wall, &mut fx);
        }
        self.done(fx)
    }

    fn check_deadlines(&mut self, now: Instant, fx: &mut Effects) {
        if let Some(sent) = self.leading
            && now >= sent + self.timings.renew_deadline
        {
            self.step_down(now, StepDownReason::RenewDeadline, fx);
        }
        if let Phase::Releasing { until } = self.phase
            && now >= until
        {
            let reason = format!(
                "no successful release within the renew deadline ({:?})",
                self.timings.renew_deadline
            );
            self.finish(Finished::ReleaseFailed { reason }, fx);
        }
    }

    /// A try: the leader renews from its cached Lease (fast path), anyone
    /// else reads first; a releasing elector clears its name if it holds it.
    fn attempt(&mut self, now: Instant, wall: Timestamp, fx: &mut Effects) {
        match self.phase {
            Phase::Running => match (&self.lease, self.leading) {
                (Some(lease), Some(_)) => {
                    let renewed = self.ours(lease, wall);
                    self.send(Op::FastRenew, Request::Update(renewed), now, fx);
                }
                _ => self.send(Op::Get, Request::Get, now, fx),
            },
            Phase::Releasing { .. } => match &self.lease {
                Some(lease) if self.names_us(lease) => {
                    let released = self.released(lease, wall);
                    self.send(Op::Release, Request::Update(released), now, fx);
                }
                _ => self.send(Op::Get, Request::Get, now, fx),
            },
            Phase::Finished => {}
        }
    }

    /// After a read while running: take the Lease if it is free, expired or
    /// ours (LE-5); otherwise leave it (LE-6), stepping down if we led.
    fn decide(&mut self, now: Instant, wall: Timestamp, fx: &mut Effects) {
        let Some(lease) = &self.lease else {
            return self.schedule_retry(now);
        };
        if let Some(holder) = holder_of(lease).filter(|h| *h != self.identity) {
            let by = holder.to_owned();
            let expired = self.expired(now);
            if self.leading.is_some() {
                self.step_down(now, StepDownReason::LeaseTaken { by }, fx);
            }
            if !expired {
                return self.schedule_retry(now);
            }
        }
        let Some(lease) = &self.lease else {
            return self.schedule_retry(now);
        };
        let update = self.ours(lease, wall);
        self.send(Op::Update, Request::Update(update), now, fx);
    }

    /// Our acquire or renew landed (it was sent at `sent`).
    fn written(&mut self, sent: Instant, now: Instant, fx: &mut Effects) {
        let ours = self.lease.as_ref().is_some_and(|l| self.names_us(l));
        // A late answer may come after the deadline it would set: the write
        // landed, but leading would already be over (LE-7).
        if ours && now < sent + self.timings.renew_deadline {
            if self.leading.is_none() {
                fx.events.push(LeaderEvent::BecameLeader { at: now });
            }
            self.leading = Some(sent);
            self.next_try = now + self.timings.retry_period;
        } else {
            self.schedule_retry(now);
        }
    }

    /// While releasing, after an answer: release if the Lease names us.
    fn release_or_finish(&mut self, now: Instant, wall: Timestamp, fx: &mut Effects) {
        match &self.lease {
            Some(lease) if self.names_us(lease) => {
                let released = self.released(lease, wall);
                self.send(Op::Release, Request::Update(released), now, fx);
            }
            _ => self.finish(Finished::NotHolding, fx),
        }
    }

    /// Records a read or written Lease: its observation time moves only when
    /// its spec changed (LE-4).
    fn observe(&mut self, lease: Lease, now: Instant, fx: &mut Effects) {
        let changed = self.lease.as_ref().map(|l| &l.spec) != Some(&lease.spec);
        if changed || self.observed_at.is_none() {
            self.observed_at = Some(now);
        }
        self.lease = Some(lease);
        self.report(now, fx);
    }

    /// Reports a holder other than the last one reported (LE-10).
    fn report(&mut self, now: Instant, fx: &mut Effects) {
        let holder = self.holder().map(str::to_owned);
        if holder != self.reported {
            if let Some(identity) = &holder {
                fx.events.push(LeaderEvent::NewLeader {
                    identity: identity.clone(),
                    at: now,
                });
            }
            self.reported = holder;
        }
    }

    /// When the observed Lease expires: its duration (the holder's, else
    /// ours) after its spec last changed, on the local clock (LE-4). `None`
    /// when nothing was observed.
    fn expiry(&self) -> Option<Instant> {
        let seconds = self
            .lease
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0);
        let duration = seconds.map_or(self.timings.lease_duration, Duration::from_secs);
        self.observed_at.map(|at| at + duration)
    }

    fn expired(&self, now: Instant) -> bool {
        self.expiry().is_none_or(|expiry| now >= expiry)
    }

    /// The next try: a leader's (or a releasing elector's) after one retry
    /// period, a candidate's after a jittered one (LE-2), but no later than
    /// the expiry of a Lease another holds.
    fn schedule_retry(&mut self, now: Instant) {
        let retry = self.timings.retry_period;
        if self.leading.is_some() || self.phase != Phase::Running {
            self.next_try = now + retry;
            return;
        }
        let jitter = 1.0 + JITTER_FACTOR * self.rng.random::<f64>();
        let mut at = now + retry.mul_f64(jitter);
        let held = self.holder().is_some_and(|h| h != self.identity);
        if let Some(expiry) = self.expiry().filter(|e| held && *e > now) {
            at = at.min(expiry);
        }
        self.next_try = at;
    }

    fn step_down(&mut self, now: Instant, reason: StepDownReason, fx: &mut Effects) {
        if self.leading.take().is_some() {
            fx.events.push(LeaderEvent::SteppedDown { at: now, reason });
        }
    }

    fn finish(&mut self, how: Finished, fx: &mut Effects) {
        self.phase = Phase::Finished;
        self.in_flight = None;
        fx.request = None;
        fx.finished = Some(how);
    }

    fn send(&mut self, op: Op, request: Request, now: Instant, fx: &mut Effects) {
        self.in_flight = Some((op, now));
        fx.request = Some(request);
    }

    /// Fills in when to wake next.
    fn done(&self, mut fx: Effects) -> Effects {
        fx.wake_at = match self.phase {
            Phase::Finished => None,
            phase => {
                let mut at = self.in_flight.is_none().then_some(self.next_try);
                let mut earliest = |t: Instant| at = Some(at.map_or(t, |a| a.min(t)));
                if let Some(sent) = self.leading {
                    earliest(sent + self.timings.renew_deadline);
                }
                if let Phase::Releasing { until } = phase {
                    earliest(until);
                }
                at
            }
        };
        fx
    }

    fn names_us(&self, lease: &Lease) -> bool {
        holder_of(lease) == Some(self.identity.as_str())
    }

    /// `lease` acquired or renewed by us (LE-5): a renew keeps `acquireTime`
    /// and `leaseTransitions`; taking it from another holder (or none) sets
    /// `acquireTime` and counts a transition.
    fn ours(&self, lease: &Lease, wall: Timestamp) -> Lease {
        let previous = lease.spec.as_ref();
        let renew = renew_time(previous, wall);
        let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
        let (acquire, transitions) = if self.names_us(lease) {
            let acquire = previous.and_then(|s| s.acquire_time.clone());
            (acquire.unwrap_or_else(|| renew.clone()), transitions)
        } else {
            (renew.clone(), transitions.saturating_add(1))
        };
        let mut updated = lease.clone();
        updated.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timings.lease_seconds()),
            acquire_time: Some(acquire),
            renew_time: Some(renew),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        });
        updated
    }

    /// A new Lease naming us, with no transition yet (LE-5).
    fn created(&self, wall: Timestamp) -> Lease {
        let now = renew_time(None, wall);
        Lease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.timings.lease_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    /// `lease` released (LE-8, client-go's `release`): no holder, a one-second
    /// duration, the times set to now, the transitions kept.
    fn released(&self, lease: &Lease, wall: Timestamp) -> Lease {
        let previous = lease.spec.as_ref();
        let now = renew_time(previous, wall);
        let mut released = lease.clone();
        released.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: previous.and_then(|s| s.lease_transitions),
            ..LeaseSpec::default()
        });
        released
    }
}

/// The holder a Lease names (an empty identity is none).
fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// `wall` at the wire's microsecond precision, and never equal to the
/// previous `renewTime`: a write whose record equals the last one would be a
/// no-op the server does not store, so a leader whose wall clock stalled
/// would look dead to the others (LE-9).
pub(crate) fn renew_time(previous: Option<&LeaseSpec>, wall: Timestamp) -> MicroTime {
    let micros = wall.as_microsecond();
    let last = previous
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.as_microsecond());
    let micros = if last == Some(micros) {
        micros.saturating_add(1)
    } else {
        micros
    };
    MicroTime(Timestamp::from_microsecond(micros).unwrap_or(wall))
}

/// A Lease answer without a resourceVersion cannot be updated safely (an
/// update without one is unconditional): it counts as a failure.
fn checked(answer: Answer) -> Answer {
    match answer {
        Answer::Lease(lease)
            if lease
                .metadata
                .resource_version
                .as_deref()
                .is_none_or(str::is_empty) =>
        {
            Answer::Failed("the server answered a Lease without a resourceVersion".into())
        }
        other => other,
    }
}
