//! The sharding rules with driven time: members of [`Membership`] against an
//! in-memory store of Leases that answers as the API server does (409 on a
//! stale resourceVersion or a create of an existing Lease), stepped in
//! random interleavings, with the safety rule checked after every step: no
//! key is ours for two members at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::assignment::Assignment;
use super::membership::{Membership, Write, Written};
use super::rendezvous::owner;
use crate::leader::ElectionTimings;

const TIMINGS: ElectionTimings = ElectionTimings {
    lease_duration: Duration::from_secs(1),
    renew_deadline: Duration::from_millis(600),
    retry_period: Duration::from_millis(200),
};

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("ns/object-{i}")).collect()
}

fn names(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// The Leases as the API server keeps them.
#[derive(Default)]
struct Server {
    leases: BTreeMap<String, Lease>,
    rv: u64,
}

impl Server {
    fn list(&self) -> Vec<Lease> {
        self.leases.values().cloned().collect()
    }

    fn write(&mut self, write: &Write) -> Written {
        let (lease, create) = match write {
            Write::Create(l) => (l, true),
            Write::Update(l) => (l, false),
        };
        let name = lease.metadata.name.clone().unwrap();
        match (self.leases.get(&name), create) {
            (Some(_), true) => return Written::Conflict,
            (None, false) => return Written::Missing,
            (Some(current), false)
                if current.metadata.resource_version != lease.metadata.resource_version =>
            {
                return Written::Conflict;
            }
            _ => {}
        }
        self.rv += 1;
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(self.rv.to_string());
        self.leases.insert(name, stored.clone());
        Written::Stored(Box::new(stored))
    }

    /// A delete conditional on the resourceVersion: whether it deleted.
    fn delete(&mut self, name: &str, resource_version: &str) -> bool {
        let current = self
            .leases
            .get(name)
            .and_then(|l| l.metadata.resource_version.as_deref());
        if current != Some(resource_version) {
            return false;
        }
        self.leases.remove(name);
        true
    }
}

/// Where a member is in its round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    List,
    Write,
}

/// One member and its round.
struct Member {
    id: String,
    m: Membership,
    step: Step,
    /// The write decided by `plan`, sent at the next step.
    write: Option<Write>,
    /// Stopped being stepped (killed): its Lease stays as it was.
    dead: bool,
    /// Its lists fail (its writes still go through).
    lists_fail: bool,
    /// Its writes fail, unstored (a server refusing them).
    writes_fail: bool,
}

impl Member {
    fn new(id: &str) -> Member {
        Member {
            id: id.into(),
            m: Membership::new(id, &format!("g-{id}"), "g", TIMINGS),
            step: Step::List,
            write: None,
            dead: false,
            lists_fail: false,
            writes_fail: false,
        }
    }
}

/// A group of members on one server, with one clock.
struct Sim {
    server: Server,
    members: Vec<Member>,
    now: Instant,
    wall: Timestamp,
    keys: Vec<String>,
    rng: SmallRng,
    /// Writes whose answer is lost (a timeout): `Some(p)` stores them with
    /// probability `p` anyway, as a server may.
    lost_writes: Option<f64>,
}

impl Sim {
    fn new(ids: &[&str], seed: u64) -> Sim {
        Sim {
            server: Server::default(),
            members: ids.iter().map(|id| Member::new(id)).collect(),
            now: Instant::now(),
            wall: Timestamp::now(),
            keys: keys(200),
            rng: SmallRng::seed_from_u64(seed),
            lost_writes: None,
        }
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.wall += SignedDuration::try_from(by).unwrap();
    }

    /// One step of member `i`: a list and the plan it leads to, or the write.
    fn step(&mut self, i: usize) {
        let (now, wall) = (self.now, self.wall);
        // With lost answers on, 30 % of writes time out; of those, `p` are stored anyway.
        let lost = self.lost_writes.is_some() && self.rng.random_bool(0.3);
        let store_lost = self.lost_writes.is_some_and(|p| self.rng.random_bool(p));
        let member = &mut self.members[i];
        match member.step {
            Step::List => {
                if !member.lists_fail {
                    let leases = self.server.list();
                    member.m.observed(now, now, &leases);
                }
                member.write = member.m.plan(now, wall);
                member.step = Step::Write;
            }
            Step::Write => {
                if let Some(write) = member.write.take() {
                    let answer = if member.writes_fail {
                        Written::Failed
                    } else if lost {
                        if store_lost {
                            self.server.write(&write);
                        }
                        Written::Failed
                    } else {
                        self.server.write(&write)
                    };
                    member.m.written(now, answer);
                }
                for (name, rv) in member.m.departed(now, 1) {
                    self.server.delete(&name, &rv);
                }
                member.step = Step::List;
            }
        }
        self.check();
    }

    /// SH-5: no key is ours for two members at once (dead ones included:
    /// their assignment lasts until their renew deadline).
    fn check(&mut self) {
        let now = self.now;
        let assignments: Vec<Assignment> = self
            .members
            .iter_mut()
            .map(|m| m.m.assignment(now))
            .collect();
        for key in &self.keys {
            let owners: Vec<&str> = assignments
                .iter()
                .filter(|a| a.owns(key))
                .map(Assignment::me)
                .collect();
            assert!(owners.len() <= 1, "{key} is owned by {owners:?} at once");
        }
    }

    /// `rounds` rounds: every live member lists and writes once per round,
    /// the steps of all of them interleaved at random, 0–20 ms apart.
    fn run(&mut self, rounds: usize) {
        for _ in 0..rounds {
            let mut order: Vec<usize> = (0..self.members.len())
                .filter(|i| !self.members[*i].dead)
                .flat_map(|i| [i, i])
                .collect();
            order.shuffle(&mut self.rng);
            for i in order {
                self.step(i);
                let ms = self.rng.random_range(0..=20);
                self.advance(Duration::from_millis(ms));
            }
        }
    }

    /// Every key owned by exactly one of the live members, the owner its
    /// rendezvous owner among them.
    fn settled(&mut self) -> bool {
        let now = self.now;
        let live: Vec<String> = {
            let mut ids: Vec<String> = self
                .members
                .iter()
                .filter(|m| !m.dead)
                .map(|m| m.id.clone())
                .collect();
            ids.sort();
            ids
        };
        let assignments: Vec<Assignment> = self
            .members
            .iter_mut()
            .filter(|m| !m.dead)
            .map(|m| m.m.assignment(now))
            .collect();
        self.keys.iter().all(|k| {
            let owners: Vec<&str> = assignments
                .iter()
                .filter(|a| a.owns(k))
                .map(Assignment::me)
                .collect();
            owners.len() == 1 && Some(owners[0]) == owner(&live, k)
        })
    }

    /// Runs rounds until settled, at most `limit` of simulated time.
    fn run_until_settled(&mut self, limit: Duration) -> Duration {
        let start = self.now;
        while !self.settled() {
            assert!(self.now - start < limit, "not settled within {limit:?}");
            self.run(1);
        }
        self.now - start
    }
}

#[test]
fn sh_1_rendezvous_moves_only_the_keys_of_the_member_that_came_or_went() {
    let keys = keys(3000);
    let abc = names(&["a", "b", "c"]);
    let abcd = names(&["a", "b", "c", "d"]);
    let ab = names(&["a", "b"]);
    let mut counts = BTreeMap::new();
    for k in &keys {
        let before = owner(&abc, k).unwrap();
        *counts.entry(before).or_insert(0usize) += 1;
        let added = owner(&abcd, k).unwrap();
        assert!(
            added == before || added == "d",
            "{k} moved {before} → {added}"
        );
        let removed = owner(&ab, k).unwrap();
        assert!(
            before == "c" || removed == before,
            "{k} moved {before} → {removed}"
        );
    }
    for (m, n) in &counts {
        assert!((800..1200).contains(n), "{m} owns {n} of 3000");
    }
    assert_eq!(owner(&[], "ns/x"), None);
    assert_eq!(
        super::rendezvous::score("a", "ns/x"),
        super::rendezvous::score("a", "ns/x")
    );
}

#[test]
fn sh_3_a_member_takes_keys_only_after_a_list_that_followed_its_write() {
    let mut server = Server::default();
    let mut a = Membership::new("a", "g-a", "g", TIMINGS);
    let t0 = Instant::now();
    let wall = Timestamp::now();
    a.observed(t0, t0, &server.list());
    let write = a.plan(t0, wall).expect("a write");
    assert!(matches!(write, Write::Create(_)));
    a.written(t0, server.write(&write));
    assert!(
        a.assignment(t0).is_nothing(),
        "not before a list after the write"
    );
    let t1 = t0 + Duration::from_millis(10);
    a.observed(t1, t1, &server.list());
    assert!(a.assignment(t1).owns("ns/x"), "alone, every key is ours");
    // A list sent before the write was answered does not count.
    let mut b = Membership::new("b", "g-b", "g", TIMINGS);
    b.observed(t1, t1, &server.list());
    let write = b.plan(t1, wall).unwrap();
    let t2 = t1 + Duration::from_millis(10);
    b.written(t2, server.write(&write));
    b.observed(t1, t2, &server.list());
    assert!(b.assignment(t2).is_nothing());
    // After it: b sees a claiming every key under a's view {a}.
    b.observed(t2, t2, &server.list());
    assert!(!b.assignment(t2).is_nothing());
    assert!(
        keys(100).iter().all(|k| !b.assignment(t2).owns(k)),
        "a still claims them all"
    );
    assert_eq!(b.members(t2), names(&["a", "b"]));
}

#[test]
fn sh_4_a_member_gives_keys_up_before_its_lease_says_so() {
    let mut sim = Sim::new(&["a"], 1);
    sim.run_until_settled(Duration::from_secs(2));
    assert!(
        sim.keys
            .iter()
            .all(|k| sim.members[0].m.assignment(sim.now).owns(k))
    );
    // b's Lease appears naming no view yet (so b claims nothing): a's next
    // plan, whose view gives b some keys, drops them before writing.
    let mut b = Lease::default();
    b.metadata.name = Some("g-b".into());
    b.metadata.labels = Some([(super::GROUP_LABEL.to_owned(), "g".to_owned())].into());
    b.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
        holder_identity: Some("b".into()),
        lease_duration_seconds: Some(1),
        ..Default::default()
    });
    assert!(matches!(
        sim.server.write(&Write::Create(b)),
        Written::Stored(_)
    ));
    sim.step(0); // a lists, sees b, plans
    let now = sim.now;
    let a = sim.members[0].m.assignment(now);
    let ab = names(&["a", "b"]);
    let mut given = 0;
    for k in &sim.keys {
        if owner(&ab, k) == Some("b") {
            given += 1;
            assert!(
                !a.owns(k),
                "{k}: a still takes it while writing a view that gives it to b"
            );
        } else {
            assert!(a.owns(k), "{k} stays a's");
        }
    }
    assert!(given > 0);
    // The real b joins (with that Lease as its own): settled without waiting
    // for an expiry.
    sim.members.push(Member::new("b"));
    let took = sim.run_until_settled(Duration::from_secs(2));
    assert!(
        took < TIMINGS.lease_duration,
        "a join waits for no expiry: {took:?}"
    );
}

#[test]
fn sh_5_no_key_is_ours_for_two_members_through_joins_kills_and_leaves() {
    for seed in 0..12 {
        let mut sim = Sim::new(&["a", "b", "c"], seed);
        sim.run_until_settled(Duration::from_secs(3));
        // A kill: c stops (its Lease stays): the others take its keys once
        // it expired for them, a lease duration after its last heartbeat.
        let last_heartbeat = sim.members[2].m.deadline().unwrap() - TIMINGS.renew_deadline;
        sim.members[2].dead = true;
        sim.run_until_settled(Duration::from_secs(4));
        let took = sim.now - last_heartbeat;
        assert!(
            took >= TIMINGS.lease_duration,
            "seed {seed}: c's keys taken {took:?} after its last heartbeat, before its Lease expired"
        );
        // Scale up by two.
        sim.members.push(Member::new("d"));
        sim.members.push(Member::new("e"));
        sim.run_until_settled(Duration::from_secs(3));
        // A graceful leave: no wait for an expiry.
        let now = sim.now;
        let wall = sim.wall;
        let released = sim.members[0].m.release(wall).expect("a holds its Lease");
        assert!(matches!(
            sim.server.write(&Write::Update(released)),
            Written::Stored(_)
        ));
        assert!(sim.members[0].m.assignment(now).is_nothing());
        sim.members[0].dead = true;
        let took = sim.run_until_settled(Duration::from_secs(3));
        assert!(
            took < TIMINGS.lease_duration,
            "seed {seed}: a leave took {took:?}"
        );
    }
}

/// A member whose lists fail while its writes succeed keeps counting its
/// peers (it cannot tell them dead): it never publishes a view of itself
/// alone, which would claim every key and leave most keys without an owner.
#[test]
fn sh_2_a_member_whose_lists_fail_keeps_its_view() {
    for seed in 0..12 {
        let mut sim = Sim::new(&["a", "b", "c"], seed);
        sim.run_until_settled(Duration::from_secs(3));
        sim.members[2].lists_fail = true;
        sim.run(60);
        let now = sim.now;
        assert_eq!(
            sim.members[2].m.members(now),
            names(&["a", "b", "c"]),
            "seed {seed}"
        );
        let owned = sim
            .keys
            .iter()
            .filter(|k| {
                sim.members[..2]
                    .iter_mut()
                    .any(|m| m.m.assignment(now).owns(k))
            })
            .count();
        assert!(owned > 0, "seed {seed}: a and b own nothing");
        sim.members[2].lists_fail = false;
        sim.run_until_settled(Duration::from_secs(3));
    }
}

/// A member's Lease deleted under it: the others count it until its Lease
/// would have expired (it owns its keys until its renew deadline), so no key
/// has two owners; it creates its Lease again and the group settles, also
/// when its writes failed past the renew deadline meanwhile (its claims
/// forgotten, only the 404 to its update tells it).
#[test]
fn sh_5_a_deleted_lease_is_counted_until_it_expires_and_created_again() {
    for seed in 0..12 {
        for outage in [false, true] {
            let mut sim = Sim::new(&["a", "b", "c"], seed);
            sim.run_until_settled(Duration::from_secs(3));
            sim.server.leases.remove("g-c");
            if outage {
                sim.members[2].dead = true;
                sim.run(60);
                sim.members[2].dead = false;
            }
            sim.run(3);
            sim.run_until_settled(Duration::from_secs(4));
            assert!(
                sim.server.leases.contains_key("g-c"),
                "seed {seed}, outage {outage}"
            );
        }
    }
}

/// The Leases of a killed member and of one that left are deleted by the
/// live members once unchanged for the retention, not before; the group
/// stays settled, and a member back after its Lease was deleted creates it
/// again and gets its keys back.
#[test]
fn sh_9_departed_members_leases_are_deleted_after_the_retention() {
    let retention = TIMINGS.lease_duration * super::membership::RETENTION_LEASES;
    for seed in 0..12 {
        let mut sim = Sim::new(&["a", "b", "c", "d"], 200 + seed);
        sim.run_until_settled(Duration::from_secs(3));
        let released = sim.members[0]
            .m
            .release(sim.wall)
            .expect("a holds its Lease");
        assert!(matches!(
            sim.server.write(&Write::Update(released)),
            Written::Stored(_)
        ));
        let d_heartbeat = sim.members[3].m.deadline().unwrap() - TIMINGS.renew_deadline;
        sim.members[0].dead = true;
        sim.members[3].dead = true;
        let released_at = sim.now;
        sim.run_until_settled(Duration::from_secs(3));
        let deadline = released_at + retention + Duration::from_secs(3);
        while sim.server.leases.contains_key("g-a") || sim.server.leases.contains_key("g-d") {
            assert!(sim.now < deadline, "seed {seed}: not deleted in time");
            sim.run(1);
            if sim.now < released_at + retention {
                assert!(
                    sim.server.leases.contains_key("g-a"),
                    "seed {seed}: a's deleted early"
                );
            }
            if sim.now < d_heartbeat + retention {
                assert!(
                    sim.server.leases.contains_key("g-d"),
                    "seed {seed}: d's deleted early"
                );
            }
        }
        assert!(sim.server.leases.contains_key("g-b") && sim.server.leases.contains_key("g-c"));
        assert!(sim.settled(), "seed {seed}");
        // d comes back (a long pause, say): its update finds no Lease, so it
        // creates one and the keys are spread over b, c and d again.
        sim.members[3].dead = false;
        sim.run_until_settled(Duration::from_secs(4));
        assert!(sim.server.leases.contains_key("g-d"), "seed {seed}");
    }
}

#[test]
fn sh_4_writes_whose_answer_was_lost_never_make_two_owners() {
    for seed in 0..12 {
        let mut sim = Sim::new(&["a", "b"], 100 + seed);
        sim.lost_writes = Some(0.5);
        sim.run(20);
        sim.members.push(Member::new("c"));
        sim.run(20);
        sim.members[0].dead = true;
        sim.run(40);
        sim.lost_writes = None;
        sim.run_until_settled(Duration::from_secs(4));
    }
}

#[test]
fn sh_6_past_the_renew_deadline_nothing_is_ours_until_a_new_write_and_list() {
    let mut sim = Sim::new(&["a"], 7);
    sim.run_until_settled(Duration::from_secs(2));
    let now = sim.now;
    let deadline = sim.members[0].m.deadline().unwrap();
    assert!(deadline > now);
    assert!(
        !sim.members[0]
            .m
            .assignment(deadline - Duration::from_millis(1))
            .is_nothing()
    );
    assert!(sim.members[0].m.assignment(deadline).is_nothing());
    // Its claims are forgotten: the next stored write alone gives nothing back.
    sim.now = deadline + Duration::from_millis(1);
    sim.members[0].step = Step::List;
    sim.step(0);
    sim.step(0);
    assert!(sim.members[0].m.assignment(sim.now).is_nothing());
    sim.step(0);
    assert!(!sim.members[0].m.assignment(sim.now).is_nothing());
}

/// A member whose writes keep failing while the group changes keeps no
/// growing list of the views it may have written: past its renew deadline
/// it owns nothing, so views written then need no keeping.
#[test]
fn sh_6_failing_writes_keep_no_growing_list_of_views() {
    let mut sim = Sim::new(&["a", "b"], 11);
    sim.run_until_settled(Duration::from_secs(2));
    sim.members[0].writes_fail = true;
    for round in 0..40 {
        // The group changes every round: each plan is a new view.
        let id = format!("c{round}");
        sim.members.push(Member::new(&id));
        let last = sim.members.len() - 2;
        if last >= 2 {
            sim.members[last].dead = true;
        }
        sim.run(3);
    }
    let most = (TIMINGS.renew_deadline.as_millis() / TIMINGS.retry_period.as_millis()) as usize + 2;
    let kept = sim.members[0].m.uncertain_views();
    assert!(kept <= most, "{kept} views kept");
    assert!(sim.members[0].m.assignment(sim.now).is_nothing());
}
