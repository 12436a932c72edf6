//! Property tests of the whole [`RateLimitingQueue`] over random
//! interleavings of adds (any priority), delayed adds, gets, outcomes
//! (success, requeue-after, failure), time steps and shutdowns, with several
//! workers.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::{Get, ItemExponential, Outcome, Priority, RateLimitingQueue};

const WORKERS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    Add(u8, Priority),
    AddAfter(u8, u64, Priority),
    Get(usize),
    Finish(usize, Outcome),
    Advance(u64),
    ShutDown { drain: bool },
}

fn priority() -> impl Strategy<Value = Priority> {
    prop_oneof![Just(Priority::Low), Just(Priority::Normal)]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Success),
        (1u64..50).prop_map(|ms| Outcome::RequeueAfter(Duration::from_millis(ms))),
        Just(Outcome::Failure),
    ]
}

fn op(shutdowns: bool) -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    let worker = 0..WORKERS;
    let shutdown_weight = if shutdowns { 1 } else { 0 };
    prop_oneof![
        6 => (key.clone(), priority()).prop_map(|(k, p)| Op::Add(k, p)),
        2 => (key, 0u64..50, priority()).prop_map(|(k, d, p)| Op::AddAfter(k, d, p)),
        6 => worker.clone().prop_map(Op::Get),
        5 => (worker, outcome()).prop_map(|(w, o)| Op::Finish(w, o)),
        3 => (0u64..40).prop_map(Op::Advance),
        shutdown_weight => any::<bool>().prop_map(|drain| Op::ShutDown { drain }),
    ]
}

/// What happened to each key, in op numbers.
#[derive(Default)]
struct History {
    /// The last accepted add (immediate or delayed) of each key.
    last_add: HashMap<u8, usize>,
    /// Hand-outs of each key after its last add.
    gets_since_add: HashMap<u8, u32>,
    /// Requeueing outcomes (failure, requeue-after) after its last add.
    requeues_since_add: HashMap<u8, u32>,
    /// Every hand-out: (op number, key).
    gets: Vec<(usize, u8)>,
}

struct Sim {
    q: RateLimitingQueue<u8>,
    now: Instant,
    workers: [Option<u8>; WORKERS],
    h: History,
    step: usize,
    /// Set at the shutdown: (op number, keys ready or pending then).
    shutdown: Option<(usize, HashSet<u8>)>,
}

impl Sim {
    fn new() -> Self {
        let limiter = ItemExponential::new(Duration::from_millis(1), Duration::from_secs(1));
        Sim {
            q: RateLimitingQueue::new("prop", Box::new(limiter)),
            now: Instant::now(),
            workers: [None; WORKERS],
            h: History::default(),
            step: 0,
            shutdown: None,
        }
    }

    fn added(&mut self, key: u8) {
        if self.q.shutting_down() {
            return;
        }
        self.h.last_add.insert(key, self.step);
        self.h.gets_since_add.insert(key, 0);
        self.h.requeues_since_add.insert(key, 0);
    }

    fn get(&mut self, worker: usize) {
        if self.workers[worker].is_some() {
            return;
        }
        if let Get::Item(ticket) = self.q.get(self.now) {
            let key = ticket.key;
            assert!(
                !self.workers.contains(&Some(key)),
                "never two workers on one key ({key})"
            );
            if ticket.priority == Priority::Low {
                assert_eq!(self.q.ready_at_priority(Priority::Normal), 0, "PQ-2");
            }
            self.workers[worker] = Some(key);
            self.h.gets.push((self.step, key));
            *self.h.gets_since_add.entry(key).or_default() += 1;
        }
    }

    fn finish(&mut self, worker: usize, outcome: Outcome) {
        let Some(key) = self.workers[worker].take() else {
            return;
        };
        assert!(self.q.finish(&key, outcome, self.now));
        if outcome != Outcome::Success {
            *self.h.requeues_since_add.entry(key).or_default() += 1;
        }
    }

    fn apply(&mut self, op: &Op) {
        self.step += 1;
        match *op {
            Op::Add(key, p) => {
                self.added(key);
                self.q.add(key, p, self.now);
            }
            Op::AddAfter(key, ms, p) => {
                self.added(key);
                self.q
                    .add_after(key, Duration::from_millis(ms), p, self.now);
            }
            Op::Get(w) => self.get(w),
            Op::Finish(w, outcome) => self.finish(w, outcome),
            Op::Advance(ms) => {
                self.now += Duration::from_millis(ms);
                self.q.release_due(self.now);
            }
            Op::ShutDown { drain } => {
                if self.shutdown.is_none() {
                    let due: HashSet<u8> = (0..6)
                        .filter(|k| self.q.is_ready(k) || self.q.is_pending(k))
                        .collect();
                    self.shutdown = Some((self.step, due));
                }
                if drain {
                    self.q.shut_down_with_drain();
                } else {
                    self.q.shut_down();
                }
            }
        }
        self.q.check_invariants();
    }

    /// Every worker finishes with success, then keys are taken and finished
    /// with success until the queue is empty: time jumps past every wait.
    fn settle(&mut self) {
        for w in 0..WORKERS {
            self.finish(w, Outcome::Success);
        }
        for _ in 0..1000 {
            self.step += 1;
            self.now += Duration::from_secs(10);
            self.get(0);
            if self.workers[0].is_none() && self.q.waiting() == 0 {
                return;
            }
            self.finish(0, Outcome::Success);
        }
        panic!("the queue did not settle");
    }

    fn check_liveness_and_bounds(&self) {
        for (&key, &added) in &self.h.last_add {
            assert!(
                self.h.gets.iter().any(|&(at, k)| k == key && at > added),
                "key {key} processed after its last add (op {added})"
            );
            let gets = self.h.gets_since_add[&key];
            let requeues = self.h.requeues_since_add[&key];
            assert!(
                gets <= 1 + requeues,
                "key {key}: {gets} hand-outs after its last add, {requeues} requeues"
            );
        }
    }

    fn check_empty(&self) {
        assert_eq!((self.q.len(), self.q.waiting()), (0, 0));
        assert_eq!(self.q.processing_keys().count(), 0, "nothing in progress");
        for key in 0..6 {
            assert_eq!(self.q.num_requeues(&key), 0, "PQ-6: key {key} forgotten");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Without shutdown: one worker per key; every key added is processed
    /// after its last add; after its last add a key is handed out at most
    /// once more than the requeues it asked for; nothing is left over.
    #[test]
    fn interleavings_keep_exclusivity_liveness_and_bounds(ops in prop::collection::vec(op(false), 1..200)) {
        let mut sim = Sim::new();
        for op in &ops {
            sim.apply(op);
        }
        sim.settle();
        sim.check_liveness_and_bounds();
        sim.check_empty();
    }

    /// With a shutdown (plain or draining) somewhere: adds after it are
    /// ignored, every key ready or pending at it is still handed out, no
    /// other key is handed out after it, and the drain ends with nothing in
    /// progress and nothing ready.
    #[test]
    fn shutdown_hands_out_what_was_due_and_drains(
        before in prop::collection::vec(op(false), 0..100),
        drain in any::<bool>(),
        after in prop::collection::vec(op(false), 0..100),
    ) {
        let mut sim = Sim::new();
        for op in &before {
            sim.apply(op);
        }
        sim.apply(&Op::ShutDown { drain });
        for op in &after {
            sim.apply(op);
        }
        for w in 0..WORKERS {
            sim.finish(w, Outcome::Success);
        }
        loop {
            sim.step += 1;
            sim.get(0);
            if sim.workers[0].is_none() {
                break;
            }
            sim.finish(0, Outcome::Success);
        }
        prop_assert_eq!(sim.q.get(sim.now), Get::ShutDown);
        prop_assert!(sim.q.is_drained());
        sim.check_empty();
        let (at, due) = sim.shutdown.clone().expect("shut down");
        let after: HashSet<u8> = sim.h.gets.iter().filter(|&&(s, _)| s > at).map(|&(_, k)| k).collect();
        for key in &due {
            prop_assert!(after.contains(key), "key {} was due at the shutdown", key);
        }
        for key in &after {
            prop_assert!(due.contains(key), "key {} handed out after the shutdown", key);
        }
    }
}
