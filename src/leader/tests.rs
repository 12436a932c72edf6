//! The election rules with driven time: replicas of [`Election`] against an
//! in-memory Lease store that answers as the API server does (409 on a stale
//! resourceVersion, no-op updates not stored), event by event.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::election::{Answer, Effects, Election, Request};
use super::error::TimingsError;
use super::messages::{Finished, LeaderEvent, StepDownReason, StopMode};
use super::timings::{ElectionTimings, JITTER_FACTOR};

const LEASE: Duration = Duration::from_secs(1);
const RENEW: Duration = Duration::from_millis(600);
const RETRY: Duration = Duration::from_millis(200);
const LATENCY: Duration = Duration::from_millis(5);

fn timings() -> ElectionTimings {
    ElectionTimings {
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
    }
}

/// One Lease as the API server keeps it.
#[derive(Default)]
struct Server {
    lease: Option<Lease>,
    rv: u64,
    /// Every stored write's spec, in order.
    writes: Vec<LeaseSpec>,
}

impl Server {
    fn handle(&mut self, request: &Request) -> Answer {
        match request {
            Request::Get => self
                .lease
                .clone()
                .map_or(Answer::Missing, |l| Answer::Lease(Box::new(l))),
            Request::Create(_) if self.lease.is_some() => Answer::Conflict,
            Request::Create(lease) => self.store(lease.clone()),
            Request::Update(lease) => match &self.lease {
                None => Answer::Missing,
                Some(current)
                    if current.metadata.resource_version != lease.metadata.resource_version =>
                {
                    Answer::Conflict
                }
                Some(current) if current.spec == lease.spec => {
                    Answer::Lease(Box::new(current.clone()))
                }
                Some(_) => self.store(lease.clone()),
            },
        }
    }

    fn store(&mut self, mut lease: Lease) -> Answer {
        self.rv += 1;
        lease.metadata.resource_version = Some(self.rv.to_string());
        self.writes.push(lease.spec.clone().unwrap_or_default());
        self.lease = Some(lease.clone());
        Answer::Lease(Box::new(lease))
    }

    /// A write by someone else that leaves the spec alone (a label).
    fn touch(&mut self) {
        let mut lease = self.lease.clone().expect("a Lease");
        lease.metadata.labels = Some([("touched".into(), self.rv.to_string())].into());
        self.rv += 1;
        lease.metadata.resource_version = Some(self.rv.to_string());
        self.lease = Some(lease);
    }

    fn spec(&self) -> LeaseSpec {
        self.lease
            .as_ref()
            .and_then(|l| l.spec.clone())
            .expect("a Lease spec")
    }
}

/// A Lease as another process left it.
fn lease_held_by(holder: Option<&str>, transitions: i32, renew: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("lock".into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(1),
            acquire_time: Some(MicroTime(renew)),
            renew_time: Some(MicroTime(renew)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// One replica: its election, its clocks, its request in flight.
struct Node {
    election: Election,
    /// Added to the simulation's wall clock (a skewed or stepped clock).
    wall_offset: SignedDuration,
    /// A stalled wall clock.
    frozen_wall: Option<Timestamp>,
    /// Requests fail without reaching the server.
    cut_off: bool,
    latency: Duration,
    /// The answer to the request sent, and when it arrives.
    pending: Option<(Answer, Instant)>,
    wake: Option<Instant>,
    events: Vec<LeaderEvent>,
    sent: Vec<(Instant, Request)>,
    finished: Option<Finished>,
}

struct Sim {
    server: Server,
    start: Instant,
    now: Instant,
    wall0: Timestamp,
    nodes: Vec<Node>,
}

const NAMES: [&str; 3] = ["a", "b", "c"];

impl Sim {
    fn new() -> Sim {
        let start = Instant::now();
        Sim {
            server: Server::default(),
            start,
            now: start,
            wall0: Timestamp::from_second(1_800_000_000).unwrap(),
            nodes: Vec::new(),
        }
    }

    /// Adds a replica whose first try is now; returns its index.
    fn add(&mut self) -> usize {
        let i = self.nodes.len();
        self.nodes.push(Node {
            election: Election::new(NAMES[i], "lock", timings(), i as u64 + 1, self.now),
            wall_offset: SignedDuration::ZERO,
            frozen_wall: None,
            cut_off: false,
            latency: LATENCY,
            pending: None,
            wake: Some(self.now),
            events: Vec::new(),
            sent: Vec::new(),
            finished: None,
        });
        i
    }

    fn wall(&self, i: usize) -> Timestamp {
        let node = &self.nodes[i];
        node.frozen_wall.unwrap_or_else(|| {
            let elapsed = SignedDuration::try_from(self.now - self.start).unwrap();
            self.wall0 + elapsed + node.wall_offset
        })
    }

    fn apply(&mut self, i: usize, fx: Effects) {
        let now = self.now;
        let node = &mut self.nodes[i];
        node.events.extend(fx.events);
        node.wake = fx.wake_at;
        if let Some(finished) = fx.finished {
            node.finished = Some(finished);
            node.pending = None;
        }
        if let Some(request) = fx.request {
            assert!(node.pending.is_none(), "one request at a time");
            let answer = if node.cut_off {
                Answer::Failed("connection refused".into())
            } else {
                self.server.handle(&request)
            };
            node.sent.push((now, request));
            node.pending = Some((answer, now + node.latency));
        }
    }

    /// Runs every replica until `until`, event by event.
    fn run_until(&mut self, until: Instant) {
        for _ in 0..1_000_000 {
            let next = self
                .nodes
                .iter()
                .flat_map(|n| [n.pending.as_ref().map(|p| p.1), n.wake])
                .flatten()
                .min();
            let Some(t) = next.filter(|t| *t <= until) else {
                self.now = until;
                return;
            };
            self.now = t.max(self.now);
            for i in 0..self.nodes.len() {
                if self.nodes[i]
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.1 <= self.now)
                {
                    let (answer, _) = self.nodes[i].pending.take().unwrap();
                    let wall = self.wall(i);
                    let fx = self.nodes[i].election.answer(self.now, wall, answer);
                    self.apply(i, fx);
                }
                if self.nodes[i].wake.is_some_and(|w| w <= self.now) {
                    let wall = self.wall(i);
                    let fx = self.nodes[i].election.tick(self.now, wall);
                    self.apply(i, fx);
                }
            }
        }
        panic!("the simulation does not settle");
    }

    fn advance(&mut self, by: Duration) {
        self.run_until(self.now + by);
    }

    fn stop(&mut self, i: usize, mode: StopMode) {
        let wall = self.wall(i);
        let fx = self.nodes[i].election.stop(self.now, wall, mode);
        self.apply(i, fx);
    }

    fn leaders(&self) -> Vec<&'static str> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].election.is_leader())
            .map(|i| NAMES[i])
            .collect()
    }

    /// When `i` became leader, in order.
    fn became(&self, i: usize) -> Vec<Instant> {
        self.nodes[i]
            .events
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::BecameLeader { at } => Some(*at),
                _ => None,
            })
            .collect()
    }

    fn stepped_down(&self, i: usize) -> Vec<(Instant, StepDownReason)> {
        self.nodes[i]
            .events
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::SteppedDown { at, reason } => Some((*at, reason.clone())),
                _ => None,
            })
            .collect()
    }

    /// Each replica's leadership intervals (an open one ends now).
    fn intervals(&self, i: usize) -> Vec<(Instant, Instant)> {
        let mut out = Vec::new();
        let mut since = None;
        for event in &self.nodes[i].events {
            match event {
                LeaderEvent::BecameLeader { at } => since = Some(*at),
                LeaderEvent::SteppedDown { at, .. } => {
                    out.push((since.take().expect("stepped down while leading"), *at))
                }
                LeaderEvent::NewLeader { .. } => {}
            }
        }
        out.extend(since.map(|s| (s, self.now)));
        out
    }

    /// No two replicas lead at once (LE-7: with one clock rate, the bound is zero).
    fn assert_one_leader_at_a_time(&self) {
        let all: Vec<_> = (0..self.nodes.len())
            .flat_map(|i| self.intervals(i).into_iter().map(move |iv| (NAMES[i], iv)))
            .collect();
        for (n, (x, (s1, e1))) in all.iter().enumerate() {
            for (y, (s2, e2)) in &all[n + 1..] {
                assert!(
                    x == y || e1 <= s2 || e2 <= s1,
                    "{x} led {:?}..{:?} and {y} led {:?}..{:?}",
                    *s1 - self.start,
                    *e1 - self.start,
                    *s2 - self.start,
                    *e2 - self.start
                );
            }
        }
    }

    fn requests(&self, i: usize) -> std::slice::Iter<'_, (Instant, Request)> {
        self.nodes[i].sent.iter()
    }
}

fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref()
}

#[test]
fn le_5_a_missing_lease_is_created_naming_the_elector() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    assert_eq!(sim.leaders(), ["a"]);
    let spec = sim.server.spec();
    assert_eq!(holder(&spec), Some("a"));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.acquire_time, spec.renew_time);
    assert!(matches!(sim.nodes[a].sent[1].1, Request::Create(_)));
    assert!(matches!(
        sim.nodes[a].events[..],
        [
            LeaderEvent::NewLeader { .. },
            LeaderEvent::BecameLeader { .. }
        ]
    ));
}

#[test]
fn le_5_a_lease_with_no_holder_is_taken_at_once_with_one_more_transition() {
    let mut sim = Sim::new();
    let wall = sim.wall0;
    sim.server.store(lease_held_by(None, 3, wall));
    sim.add();
    // A read and an update: two round trips.
    sim.advance(LATENCY * 2);
    assert_eq!(sim.leaders(), ["a"]);
    let spec = sim.server.spec();
    assert_eq!(holder(&spec), Some("a"));
    assert_eq!(spec.lease_transitions, Some(4));
    let update_sent = sim.wall(0) - SignedDuration::try_from(LATENCY).unwrap();
    assert_eq!(spec.acquire_time, Some(MicroTime(update_sent)));
}

#[test]
fn le_2_the_leader_renews_every_retry_period_keeping_acquire_time_and_transitions() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let first = sim.server.spec();
    sim.advance(Duration::from_secs(2));
    assert_eq!(sim.leaders(), ["a"]);
    let renews: Vec<Instant> = sim
        .requests(a)
        .filter(|(_, r)| matches!(r, Request::Update(_)))
        .map(|(at, _)| *at)
        .collect();
    assert!(renews.len() >= 9, "{} renews in 2 s", renews.len());
    for pair in renews.windows(2) {
        // One retry period after the previous renew's answer.
        assert_eq!(pair[1] - pair[0], RETRY + LATENCY);
    }
    let last = sim.server.spec();
    assert_eq!(last.acquire_time, first.acquire_time);
    assert_eq!(last.lease_transitions, first.lease_transitions);
    assert!(last.renew_time > first.renew_time);
    assert_eq!(sim.became(a).len(), 1);
}

#[test]
fn le_3_a_stale_resource_version_loses_the_race_without_an_error() {
    let mut sim = Sim::new();
    let wall = sim.wall0;
    sim.server.store(lease_held_by(None, 0, wall));
    let a = sim.add();
    let b = sim.add();
    // Both read the free Lease at the same instant and update from the same
    // resourceVersion: the second update gets 409.
    sim.advance(LATENCY * 2);
    assert_eq!(sim.leaders(), ["a"]);
    let updates = |i| {
        sim.requests(i)
            .filter(|(_, r)| matches!(r, Request::Update(_)))
            .count()
    };
    assert_eq!((updates(a), updates(b)), (1, 1));
    assert!(sim.stepped_down(b).is_empty());
    // The loser reads again after a jittered retry, sees a held Lease, and
    // keeps off it while it is renewed.
    sim.advance(Duration::from_secs(3));
    assert_eq!(sim.leaders(), ["a"]);
    let b_requests: Vec<_> = sim.requests(b).skip(2).collect();
    assert!(!b_requests.is_empty());
    assert!(b_requests.iter().all(|(_, r)| *r == Request::Get));
    assert!(b_requests[0].0 - sim.start >= LATENCY * 2 + RETRY);
    assert_eq!(sim.server.spec().lease_transitions, Some(1));
    sim.assert_one_leader_at_a_time();
}

#[test]
fn le_6_a_held_unexpired_lease_is_not_taken() {
    let mut sim = Sim::new();
    sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    let c = sim.add();
    sim.advance(Duration::from_secs(5));
    assert_eq!(sim.leaders(), ["a"]);
    for i in [b, c] {
        assert!(sim.became(i).is_empty());
        assert!(sim.requests(i).all(|(_, r)| *r == Request::Get));
    }
}

/// LE-6: a leader whose Lease is deleted steps down when it sees that (a
/// candidate may create it and lead at once), and leads again only by
/// creating it; never two leaders at once.
#[test]
fn le_6_a_leader_whose_lease_is_deleted_steps_down_until_it_creates_it() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    sim.add();
    sim.advance(Duration::from_secs(3));
    assert_eq!(sim.leaders(), ["a"]);
    sim.server.lease = None;
    sim.advance(Duration::from_secs(10));
    assert!(
        sim.stepped_down(a)
            .iter()
            .any(|(_, r)| *r == StepDownReason::LeaseDeleted),
        "{:?}",
        sim.stepped_down(a)
    );
    sim.assert_one_leader_at_a_time();
    assert_eq!(sim.leaders().len(), 1);
}

#[test]
fn le_4_an_expired_lease_is_taken_after_a_full_duration_of_local_observation() {
    let mut sim = Sim::new();
    // Held by a process that is gone; its renewTime is a year old, which
    // must not matter: expiry is local observation (LE-4).
    let year_ago = sim.wall0 - SignedDuration::from_hours(24 * 365);
    sim.server.store(lease_held_by(Some("ghost"), 2, year_ago));
    let a = sim.add();
    sim.advance(LATENCY);
    let observed = sim.now;
    sim.run_until(observed + LEASE - Duration::from_millis(1));
    assert!(
        sim.leaders().is_empty(),
        "taken before a full lease duration"
    );
    // The candidate's next read is due at the expiry at the latest.
    sim.run_until(observed + LEASE + LATENCY * 2);
    assert_eq!(sim.leaders(), ["a"]);
    let spec = sim.server.spec();
    assert_eq!(holder(&spec), Some("a"));
    assert_eq!(spec.lease_transitions, Some(3));
    assert_eq!(spec.acquire_time, spec.renew_time);
    assert!(spec.acquire_time > Some(MicroTime(year_ago)));
    let reported: Vec<&str> = sim.nodes[a]
        .events
        .iter()
        .filter_map(|e| match e {
            LeaderEvent::NewLeader { identity, .. } => Some(identity.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reported, ["ghost", "a"]);
}

#[test]
fn le_7_a_leader_that_cannot_renew_steps_down_at_the_deadline_before_expiry() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    sim.advance(Duration::from_millis(500));
    sim.nodes[a].cut_off = true;
    let last_success = sim
        .requests(a)
        .rev()
        .find(|(_, r)| matches!(r, Request::Update(_)))
        .map(|(at, _)| *at)
        .unwrap();
    sim.advance(Duration::from_secs(3));
    let downs = sim.stepped_down(a);
    assert_eq!(downs.len(), 1);
    assert_eq!(
        downs[0],
        (last_success + RENEW, StepDownReason::RenewDeadline)
    );
    let b_became = sim.became(b);
    assert_eq!(b_became.len(), 1);
    // b waited a full lease duration after the last renew it could see.
    assert!(b_became[0] >= last_success + LEASE);
    assert!(b_became[0] - downs[0].0 >= LEASE - RENEW);
    assert_eq!(sim.leaders(), ["b"]);
    assert_eq!(sim.server.spec().lease_transitions, Some(1));
    sim.assert_one_leader_at_a_time();
}

/// A renew answered just as the previous one's deadline passes, before
/// any tick judged it, but within its own: the write landed, so nobody
/// else led meanwhile; leadership goes on without a step-down and a new
/// lead in the same step.
#[test]
fn le_7_a_renew_answered_at_the_last_ones_deadline_keeps_leading_without_events() {
    let mut server = Server::default();
    let wall = Timestamp::from_second(1_800_000_000).unwrap();
    let t0 = Instant::now();
    let mut e = Election::new("a", "lock", timings(), 1, t0);
    let mut fx = e.tick(t0, wall);
    let mut now = t0;
    // Until it leads: each request answered at once.
    while let Some(request) = fx.request.take() {
        let answer = server.handle(&request);
        fx = e.answer(now, wall, answer);
    }
    assert!(e.is_leader());
    // Its renew, sent a retry period later, is answered exactly at the
    // deadline of the create.
    now = t0 + RETRY;
    let fx = e.tick(now, wall);
    let renew = fx.request.expect("a renew");
    assert!(matches!(renew, Request::Update(_)));
    let answer = server.handle(&renew);
    let fx = e.answer(t0 + RENEW, wall, answer);
    assert!(fx.events.is_empty(), "{:?}", fx.events);
    assert!(e.is_leader());
    // Its own deadline still holds: unanswered renews after it step down.
    let fx = e.tick(t0 + RETRY + RENEW, wall);
    assert!(
        fx.events
            .iter()
            .any(|ev| matches!(ev, LeaderEvent::SteppedDown { .. })),
        "{:?}",
        fx.events
    );
}

#[test]
fn le_7_a_renew_answered_after_its_deadline_does_not_lead() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    // Answers now take longer than the renew deadline.
    sim.nodes[a].latency = RENEW + Duration::from_millis(100);
    sim.advance(Duration::from_secs(3));
    assert_eq!(sim.became(a).len(), 1);
    assert_eq!(sim.stepped_down(a)[0].1, StepDownReason::RenewDeadline);
    assert!(sim.leaders().is_empty());
}

#[test]
fn le_8_a_graceful_stop_steps_down_then_clears_the_holder_and_a_successor_takes_over_at_once() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    sim.advance(Duration::from_millis(700));
    sim.stop(a, StopMode::Release);
    assert_eq!(
        sim.stepped_down(a).last().unwrap().1,
        StepDownReason::Stopped
    );
    assert!(!sim.nodes[a].election.is_leader());
    // A renew may be in flight: the release follows its answer.
    sim.advance(LATENCY * 3);
    assert_eq!(sim.nodes[a].finished, Some(Finished::Released));
    let released = sim.server.writes.iter().rev().find(|s| holder(s).is_none());
    let released = released.expect("a write clearing the holder");
    assert_eq!(released.lease_duration_seconds, Some(1));
    assert_eq!(released.lease_transitions, Some(0));
    let stopped = sim.now;
    // LE-11: the next try reads the cleared holder and takes the Lease.
    let bound = timings().max_retry_wait() + LATENCY * 3;
    sim.run_until(stopped + bound);
    assert_eq!(sim.leaders(), ["b"]);
    assert!(sim.became(b)[0] - stopped <= bound);
    assert_eq!(sim.server.spec().lease_transitions, Some(1));
    sim.assert_one_leader_at_a_time();
}

#[test]
fn le_8_a_stop_while_a_renew_is_in_flight_releases_after_its_answer() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    sim.nodes[a].latency = Duration::from_millis(50);
    let renew_at = sim.nodes[a].wake.unwrap();
    sim.run_until(renew_at);
    assert!(sim.nodes[a].pending.is_some(), "a renew in flight");
    sim.stop(a, StopMode::Release);
    assert!(!sim.nodes[a].election.is_leader());
    assert!(
        sim.nodes[a].pending.is_some(),
        "no second request while one is in flight"
    );
    sim.advance(Duration::from_millis(120));
    assert_eq!(sim.nodes[a].finished, Some(Finished::Released));
    assert_eq!(holder(&sim.server.spec()), None);
}

#[test]
fn le_8_a_release_that_loses_a_race_rereads_and_releases_again() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    sim.server.touch();
    sim.stop(a, StopMode::Release);
    sim.advance(LATENCY * 4);
    assert_eq!(sim.nodes[a].finished, Some(Finished::Released));
    assert_eq!(holder(&sim.server.spec()), None);
    let kinds: Vec<&str> = sim
        .requests(a)
        .rev()
        .take(3)
        .map(|(_, r)| match r {
            Request::Get => "get",
            Request::Create(_) => "create",
            Request::Update(_) => "update",
        })
        .collect();
    assert_eq!(kinds, ["update", "get", "update"]);
}

#[test]
fn le_8_a_release_gives_up_at_the_renew_deadline() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    sim.nodes[a].cut_off = true;
    let stopped = sim.now;
    sim.stop(a, StopMode::Release);
    sim.advance(Duration::from_secs(2));
    assert!(matches!(
        sim.nodes[a].finished,
        Some(Finished::ReleaseFailed { .. })
    ));
    let last = sim.nodes[a].sent.last().unwrap().0;
    assert!(last < stopped + RENEW);
    assert_eq!(holder(&sim.server.spec()), Some("a"));
}

#[test]
fn le_8_stopping_a_follower_releases_nothing() {
    let mut sim = Sim::new();
    sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    sim.advance(Duration::from_millis(300));
    let writes = sim.server.writes.len();
    sim.stop(b, StopMode::Release);
    sim.advance(LATENCY * 2);
    assert_eq!(sim.nodes[b].finished, Some(Finished::NotHolding));
    assert!(sim.stepped_down(b).is_empty());
    // Only the leader's renews were written meanwhile.
    assert!(
        sim.server.writes[writes..]
            .iter()
            .all(|s| holder(s) == Some("a"))
    );
}

#[test]
fn le_8_an_abandoned_lease_is_taken_only_once_it_expired() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    sim.advance(Duration::from_millis(500));
    let last_write = sim.nodes[a].sent.last().unwrap().0;
    let abandoned = sim.now;
    sim.stop(a, StopMode::Abandon);
    assert_eq!(sim.nodes[a].finished, Some(Finished::Abandoned));
    assert_eq!(
        sim.stepped_down(a).last().unwrap().1,
        StepDownReason::Abandoned
    );
    assert_eq!(holder(&sim.server.spec()), Some("a"));
    sim.advance(Duration::from_secs(3));
    let took = sim.became(b)[0];
    assert!(took >= last_write + LEASE);
    // LE-11: within a lease duration and the longest jittered retry.
    assert!(took - abandoned <= LEASE + timings().max_retry_wait() + LATENCY * 4);
    sim.assert_one_leader_at_a_time();
}

#[test]
fn le_4_a_clock_jump_on_one_replica_cannot_make_two_leaders() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    // b's wall clock jumps an hour ahead: a's renewTime looks an hour old.
    sim.nodes[b].wall_offset = SignedDuration::from_hours(1);
    sim.advance(Duration::from_secs(2));
    // a's wall clock steps an hour back, then stalls.
    sim.nodes[a].wall_offset = SignedDuration::from_hours(-1);
    sim.advance(Duration::from_secs(1));
    let stalled = sim.wall(a);
    sim.nodes[a].frozen_wall = Some(stalled);
    let writes = sim.server.writes.len();
    sim.advance(Duration::from_secs(3));
    assert_eq!(sim.leaders(), ["a"]);
    assert!(sim.became(b).is_empty());
    assert_eq!(sim.became(a).len(), 1);
    // LE-9: with its clock stalled, each renew still changed the record.
    let during: Vec<_> = sim.server.writes[writes..]
        .iter()
        .map(|s| s.renew_time.clone())
        .collect();
    assert!(during.len() >= 10);
    for pair in during.windows(2) {
        assert_ne!(pair[0], pair[1]);
    }
    sim.assert_one_leader_at_a_time();
}

#[test]
fn le_2_candidate_tries_are_jittered_by_the_jitter_factor() {
    let mut sim = Sim::new();
    sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    sim.advance(Duration::from_secs(10));
    let gets: Vec<Instant> = sim.requests(b).map(|(at, _)| *at).collect();
    let gaps: Vec<Duration> = gets.windows(2).map(|p| p[1] - p[0]).collect();
    assert!(gaps.len() > 20);
    let longest = RETRY.mul_f64(1.0 + JITTER_FACTOR) + LATENCY;
    for gap in &gaps {
        assert!(*gap >= RETRY + LATENCY && *gap <= longest, "{gap:?}");
    }
    let (min, max) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
    assert!(*max - *min > RETRY / 2, "not spread: {min:?}..{max:?}");
}

#[test]
fn le_3_a_conflicting_fast_renew_rereads_at_once_and_keeps_leading() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let before = sim.requests(a).count();
    sim.server.touch();
    sim.advance(RETRY + LATENCY * 4);
    let after: Vec<_> = sim.requests(a).skip(before).take(3).collect();
    assert!(matches!(after[0].1, Request::Update(_)));
    assert_eq!(after[1], &(after[0].0 + LATENCY, Request::Get));
    assert!(matches!(after[2].1, Request::Update(_)));
    assert_eq!(sim.leaders(), ["a"]);
    assert!(sim.stepped_down(a).is_empty());
    assert_eq!(sim.server.spec().lease_transitions, Some(0));
}

#[test]
fn le_10_a_new_leader_is_reported_once_per_holder() {
    let mut sim = Sim::new();
    let a = sim.add();
    sim.advance(Duration::from_millis(50));
    let b = sim.add();
    let c = sim.add();
    sim.advance(Duration::from_secs(2));
    sim.stop(a, StopMode::Release);
    sim.advance(Duration::from_secs(2));
    let reported = |i: usize| -> Vec<String> {
        sim.nodes[i]
            .events
            .iter()
            .filter_map(|e| match e {
                LeaderEvent::NewLeader { identity, .. } => Some(identity.clone()),
                _ => None,
            })
            .collect()
    };
    let winner = sim.leaders();
    assert_eq!(winner.len(), 1);
    let expected = vec!["a".to_string(), winner[0].to_string()];
    assert_eq!(reported(b), expected);
    assert_eq!(reported(c), expected);
    sim.assert_one_leader_at_a_time();
}

#[test]
fn le_3_a_lease_answered_without_a_resource_version_is_never_updated() {
    let start = Instant::now();
    let wall = Timestamp::from_second(1_800_000_000).unwrap();
    let mut e = Election::new("a", "lock", timings(), 1, start);
    assert_eq!(e.tick(start, wall).request, Some(Request::Get));
    let no_rv = lease_held_by(None, 0, wall);
    let fx = e.answer(start, wall, Answer::Lease(Box::new(no_rv)));
    assert_eq!(fx.request, None);
    assert!(!e.is_leader());
    let next = fx.wake_at.unwrap();
    assert!(next >= start + RETRY);
    assert_eq!(e.tick(next, wall).request, Some(Request::Get));
}

#[test]
fn le_1_timings_follow_client_go_rules() {
    assert_eq!(ElectionTimings::default().validate(), Ok(()));
    assert_eq!(
        ElectionTimings::default(),
        ElectionTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    );
    assert_eq!(timings().validate(), Ok(()));
    let with = |lease: u64, renew: u64, retry: u64| ElectionTimings {
        lease_duration: Duration::from_millis(lease),
        renew_deadline: Duration::from_millis(renew),
        retry_period: Duration::from_millis(retry),
    };
    assert!(matches!(
        with(1000, 1000, 200).validate(),
        Err(TimingsError::RenewNotBeforeExpiry { .. })
    ));
    // 600 ms is not more than 1.2 × 500 ms.
    assert!(matches!(
        with(1000, 600, 500).validate(),
        Err(TimingsError::RetryTooLong { .. })
    ));
    assert!(matches!(
        with(1500, 600, 200).validate(),
        Err(TimingsError::LeaseNotWholeSeconds { .. })
    ));
    assert!(matches!(
        with(1000, 600, 0).validate(),
        Err(TimingsError::Zero {
            name: "retry period"
        })
    ));
}
