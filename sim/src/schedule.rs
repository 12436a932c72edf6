//! Schedules: a seeded, reproducible interleaving of writes, faults and
//! consumer actions. Pure: the same seed and [`Profile`] give the same
//! [`Schedule`] on every machine (rand's `StdRng`), whatever the engine does
//! with it; only the engine's timing is real.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The namespaces objects live in.
pub const NAMESPACES: [&str; 3] = ["sim-a", "sim-b", "sim-c"];

/// The finalizer some objects are created with (it holds their delete).
pub const FINALIZER: &str = "sim.kinformer.dev/hold";

/// The label key whose value moves objects in and out of the tiered informer's selection.
pub const TIER_LABEL: &str = "tier";

/// One object name: `o{name}` in `NAMESPACES[ns]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjRef {
    /// Index into [`NAMESPACES`].
    pub ns: u8,
    /// The name's number.
    pub name: u8,
}

impl ObjRef {
    /// The namespace.
    pub fn namespace(&self) -> &'static str {
        NAMESPACES[usize::from(self.ns) % NAMESPACES.len()]
    }

    /// The object's name.
    pub fn name(&self) -> String {
        format!("o{}", self.name)
    }

    /// The cache key, `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
}

/// The `tier` label an object carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// `tier=a`: selected by the tiered informer.
    A,
    /// `tier=b`.
    B,
    /// No `tier` label.
    Unlabelled,
}

impl Tier {
    /// The label value, if any.
    pub fn value(self) -> Option<&'static str> {
        match self {
            Tier::A => Some("a"),
            Tier::B => Some("b"),
            Tier::Unlabelled => None,
        }
    }
}

/// A write to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Create (in-process); `pad` bytes of data, with the finalizer or not.
    Create {
        /// The object.
        obj: ObjRef,
        /// Its label.
        tier: Tier,
        /// Bytes of padding data (up to about 1.4 MiB).
        pad: usize,
        /// Created with [`FINALIZER`].
        finalizer: bool,
    },
    /// Get, change data and label, update (in-process).
    Update {
        /// The object.
        obj: ObjRef,
        /// Its new label.
        tier: Tier,
        /// Bytes of padding data.
        pad: usize,
    },
    /// A JSON merge patch of data and label, over HTTP (fails while the server is down).
    Patch {
        /// The object.
        obj: ObjRef,
        /// Its new label.
        tier: Tier,
    },
    /// Delete (in-process): an object with the finalizer only gets a deletionTimestamp.
    Delete {
        /// The object.
        obj: ObjRef,
    },
    /// Remove the finalizers (an update), which completes a held delete.
    ReleaseFinalizer {
        /// The object.
        obj: ObjRef,
    },
    /// Delete and create the same name again at once (a new uid, the same key).
    Recreate {
        /// The object.
        obj: ObjRef,
        /// The new object's label.
        tier: Tier,
    },
}

/// Which verb an injected failure hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailVerb {
    /// Lists.
    List,
    /// Watches.
    Watch,
}

/// How injected failures answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailWith {
    /// 429 with `Retry-After: secs`.
    TooManyRequests {
        /// The header's seconds.
        retry_after_secs: u32,
    },
    /// 500.
    Internal,
}

/// A fault (everything the embedded server's `Faults` and restarts offer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// End every open watch cleanly.
    CloseWatches,
    /// End each watch after N events (`None`: off).
    CloseWatchesAfter(Option<u64>),
    /// Compact the history and end the watches: the resume gets a 410 at watch start.
    CompactAndClose,
    /// Compact only: an open watch goes on, a later resume from an old version gets 410.
    Compact,
    /// Fail the next `count` requests of a verb.
    FailNext {
        /// The verb.
        verb: FailVerb,
        /// How many.
        count: u32,
        /// The answer.
        with: FailWith,
    },
    /// One line that is not JSON into every open watch.
    Malformed,
    /// Watches send nothing for this long (past the informer's read timeout when long enough).
    Stall(Duration),
    /// Every request is delayed this long (zero: off).
    Latency(Duration),
    /// Periodic bookmarks off or on.
    SuppressBookmarks(bool),
    /// A restart, with the history kept or lost.
    Restart {
        /// Watches from older resourceVersions resume (else 410).
        keep_history: bool,
        /// Connections end with an unexpected EOF (else a TCP reset).
        eof: bool,
        /// How long the server is down.
        down_for: Duration,
    },
    /// The server stops serving until [`Fault::OutageEnd`]; writes go on in-process.
    OutageBegin {
        /// Connections are accepted and reset (else refused).
        reset: bool,
        /// The history survives the outage.
        keep_history: bool,
    },
    /// Serve again after [`Fault::OutageBegin`].
    OutageEnd,
    /// Persistent faults off (latency, stalls, close-after, suppression, queued failures).
    Clear,
}

/// Which of the simulation's informers a subscriber joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InformerSlot {
    /// ConfigMaps in every namespace.
    All,
    /// ConfigMaps labelled `tier=a`, every namespace (objects move in and out).
    Tiered,
    /// ConfigMaps in `sim-b` only; started and stopped during the schedule.
    Namespaced,
}

/// How a subscriber behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriberKind {
    /// `subscribe`, `Block` with this capacity.
    Block {
        /// Queue capacity.
        capacity: usize,
    },
    /// `subscribe`, `Coalesce`.
    Coalesce,
    /// `subscribe_batches`, `Block`.
    Batches {
        /// Most events per batch.
        batch_size: usize,
    },
    /// `subscribe_pipelined`, `Block`.
    Pipelined {
        /// Mailbox depth.
        depth: usize,
    },
    /// `subscribe_inline`, `Block`: a function the listener calls in place.
    Inline {
        /// Queue capacity.
        capacity: usize,
    },
    /// Each handler call takes this long (an async sleep).
    Slow {
        /// Per-event delay.
        delay_ms: u64,
        /// `Coalesce` (else `Block` with a small capacity).
        coalesce: bool,
    },
    /// Handles nothing until the gates open ([`Consumer::OpenGates`], or the end).
    Gated {
        /// `Coalesce` (else `Block`, which holds the whole informer back).
        coalesce: bool,
    },
    /// Panics in its handler at its `after`-th event.
    Panics {
        /// The event (1-based) it panics at.
        after: usize,
    },
}

/// A consumer action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumer {
    /// A new subscriber.
    Subscribe {
        /// Which informer.
        informer: InformerSlot,
        /// Its behaviour.
        kind: SubscriberKind,
        /// Resync every second (else never).
        resync: bool,
    },
    /// Unsubscribe the live subscriber `pick % live`.
    Unsubscribe {
        /// Which one.
        pick: u8,
    },
    /// Let every gated subscriber go on.
    OpenGates,
    /// Start the namespaced informer (no-op when running).
    StartNamespaced,
    /// Stop the namespaced informer (no-op when not running).
    StopNamespaced,
    /// Stop the namespaced informer and start it again at once from its
    /// snapshot: a process restart with persistence on (a start when not
    /// running).
    RestartNamespaced,
}

/// One step of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A write.
    Write(Write),
    /// A fault.
    Fault(Fault),
    /// A consumer action.
    Consumer(Consumer),
    /// Let the engine run for this long.
    Pause(Duration),
}

/// How the informers are configured for one schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineChoice {
    /// List page size (0: unpaginated).
    pub page_size: u32,
    /// Streaming lists for the `All` informer.
    pub streaming_lists: bool,
    /// Skip managedFields while decoding.
    pub skip_managed_fields: bool,
    /// The DeltaFIFO's high watermark.
    pub high_watermark: usize,
    /// The `All` informer's Reflector on a thread of its own.
    pub reflector_thread: bool,
    /// The `Tiered` and `Namespaced` informers keep a compact cache (the
    /// `All` one stays decoded, as a reference).
    pub compact_cache: bool,
    /// A compact cache's objects kept decoded (`CompactOptions::recent`).
    pub compact_recent: usize,
    /// A compact cache compresses on a thread of its own
    /// (`CompactOptions::background`).
    pub compact_background: bool,
}

/// The shape of the schedules to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// Steps per schedule.
    pub steps: usize,
    /// Names per namespace.
    pub names: u8,
    /// Some objects of up to about 1.4 MiB.
    pub big_objects: bool,
    /// Faults that cost real seconds: stalls past the read timeout,
    /// Retry-After of 1 s, latency past the read timeout, longer outages.
    pub slow_faults: bool,
}

impl Profile {
    /// CI's quick schedules.
    pub const QUICK: Profile = Profile {
        steps: 60,
        names: 6,
        big_objects: true,
        slow_faults: false,
    };

    /// The long run's schedules.
    pub const LONG: Profile = Profile {
        steps: 150,
        names: 8,
        big_objects: true,
        slow_faults: true,
    };
}

/// A generated schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Its seed.
    pub seed: u64,
    /// The profile it was generated with.
    pub profile: Profile,
    /// The informers' configuration.
    pub engine: EngineChoice,
    /// Objects created before the informers start.
    pub seed_objects: Vec<Write>,
    /// Subscribers in place before the first step (they take the initial list).
    pub initial: Vec<Consumer>,
    /// The steps.
    pub steps: Vec<Step>,
}

/// What the generator knows of an object (its writes are deterministic; a
/// patch over HTTP may fail, which changes no existence).
#[derive(Debug, Clone, Copy)]
struct Known {
    finalizer: bool,
    deleting: bool,
}

struct Gen {
    rng: StdRng,
    profile: Profile,
    objects: BTreeMap<ObjRef, Known>,
    /// Steps left before the outage in progress ends, if any.
    outage_left: Option<usize>,
    latency_on: bool,
}

impl Gen {
    fn obj(&mut self) -> ObjRef {
        ObjRef {
            ns: self.rng.random_range(0..NAMESPACES.len() as u8),
            name: self.rng.random_range(0..self.profile.names),
        }
    }

    fn existing(&mut self) -> Option<ObjRef> {
        if self.objects.is_empty() {
            return None;
        }
        let i = self.rng.random_range(0..self.objects.len());
        self.objects.keys().nth(i).copied()
    }

    fn tier(&mut self) -> Tier {
        match self.rng.random_range(0..10) {
            0..=3 => Tier::A,
            4..=7 => Tier::B,
            _ => Tier::Unlabelled,
        }
    }

    fn pad(&mut self) -> usize {
        if self.profile.big_objects && self.rng.random_ratio(1, 40) {
            self.rng.random_range(64 << 10..1_400 << 10)
        } else {
            self.rng.random_range(0..256)
        }
    }

    fn create(&mut self, obj: ObjRef) -> Write {
        let finalizer = self.rng.random_ratio(1, 4);
        self.objects.insert(
            obj,
            Known {
                finalizer,
                deleting: false,
            },
        );
        Write::Create {
            obj,
            tier: self.tier(),
            pad: self.pad(),
            finalizer,
        }
    }

    fn write(&mut self) -> Write {
        let held: Vec<ObjRef> = self
            .objects
            .iter()
            .filter(|(_, k)| k.deleting)
            .map(|(o, _)| *o)
            .collect();
        if !held.is_empty() && self.rng.random_ratio(1, 5) {
            let obj = held[self.rng.random_range(0..held.len())];
            self.objects.remove(&obj);
            return Write::ReleaseFinalizer { obj };
        }
        let roll = self.rng.random_range(0..100);
        let target = if roll < 30 { None } else { self.existing() };
        let Some(obj) = target else {
            let obj = self.obj();
            return if self.objects.contains_key(&obj) {
                Write::Update {
                    obj,
                    tier: self.tier(),
                    pad: self.pad(),
                }
            } else {
                self.create(obj)
            };
        };
        match roll {
            30..=59 => Write::Update {
                obj,
                tier: if self.rng.random_ratio(1, 3) {
                    self.tier()
                } else {
                    Tier::A
                },
                pad: self.pad(),
            },
            60..=71 => Write::Patch {
                obj,
                tier: self.tier(),
            },
            72..=91 => {
                let known = self.objects[&obj];
                if known.finalizer {
                    if let Some(k) = self.objects.get_mut(&obj) {
                        k.deleting = true;
                    }
                } else {
                    self.objects.remove(&obj);
                }
                Write::Delete { obj }
            }
            _ => {
                if self.objects[&obj].finalizer {
                    // A held delete would leave the name taken: delete only.
                    if let Some(k) = self.objects.get_mut(&obj) {
                        k.deleting = true;
                    }
                    return Write::Delete { obj };
                }
                self.objects.insert(
                    obj,
                    Known {
                        finalizer: false,
                        deleting: false,
                    },
                );
                Write::Recreate {
                    obj,
                    tier: self.tier(),
                }
            }
        }
    }

    fn fault(&mut self) -> Fault {
        let slow = self.profile.slow_faults;
        match self.rng.random_range(0..100) {
            0..=14 => Fault::CloseWatches,
            15..=21 => Fault::CloseWatchesAfter(if self.rng.random_bool(0.5) {
                Some(self.rng.random_range(1..6))
            } else {
                None
            }),
            22..=31 => Fault::CompactAndClose,
            32..=36 => Fault::Compact,
            37..=51 => Fault::FailNext {
                verb: if self.rng.random_bool(0.5) {
                    FailVerb::List
                } else {
                    FailVerb::Watch
                },
                count: self.rng.random_range(1..5),
                with: if self.rng.random_bool(0.5) {
                    FailWith::Internal
                } else {
                    FailWith::TooManyRequests {
                        retry_after_secs: u32::from(slow && self.rng.random_ratio(1, 4)),
                    }
                },
            },
            52..=59 => Fault::Malformed,
            60..=65 => {
                let most = if slow { 2_600 } else { 400 };
                Fault::Stall(Duration::from_millis(self.rng.random_range(20..most)))
            }
            66..=71 => {
                self.latency_on = !self.latency_on;
                let most = if slow { 450 } else { 120 };
                Fault::Latency(if self.latency_on {
                    Duration::from_millis(self.rng.random_range(5..most))
                } else {
                    Duration::ZERO
                })
            }
            72..=76 => Fault::SuppressBookmarks(self.rng.random_bool(0.5)),
            77..=86 if self.outage_left.is_none() => Fault::Restart {
                keep_history: self.rng.random_bool(0.5),
                eof: self.rng.random_bool(0.5),
                down_for: Duration::from_millis(
                    self.rng.random_range(0..if slow { 800 } else { 150 }),
                ),
            },
            87..=93 if self.outage_left.is_none() => {
                self.outage_left = Some(self.rng.random_range(1..8));
                Fault::OutageBegin {
                    reset: self.rng.random_bool(0.5),
                    keep_history: self.rng.random_bool(0.5),
                }
            }
            _ => {
                self.latency_on = false;
                Fault::Clear
            }
        }
    }

    fn kind(&mut self) -> SubscriberKind {
        match self.rng.random_range(0..100) {
            0..=19 => SubscriberKind::Block {
                capacity: self.rng.random_range(1..16),
            },
            20..=34 => SubscriberKind::Coalesce,
            35..=49 => SubscriberKind::Batches {
                batch_size: self.rng.random_range(1..32),
            },
            50..=57 => SubscriberKind::Pipelined {
                depth: self.rng.random_range(1..10),
            },
            58..=64 => SubscriberKind::Inline {
                capacity: self.rng.random_range(1..64),
            },
            65..=79 => SubscriberKind::Slow {
                delay_ms: self.rng.random_range(1..8),
                coalesce: self.rng.random_bool(0.5),
            },
            80..=89 => SubscriberKind::Gated {
                coalesce: self.rng.random_bool(0.7),
            },
            _ => SubscriberKind::Panics {
                after: self.rng.random_range(1..40),
            },
        }
    }

    fn consumer(&mut self) -> Consumer {
        match self.rng.random_range(0..100) {
            0..=44 => {
                let informer = match self.rng.random_range(0..10) {
                    0..=5 => InformerSlot::All,
                    6..=8 => InformerSlot::Tiered,
                    _ => InformerSlot::Namespaced,
                };
                Consumer::Subscribe {
                    informer,
                    kind: self.kind(),
                    resync: self.rng.random_ratio(1, 3),
                }
            }
            45..=69 => Consumer::Unsubscribe {
                pick: self.rng.random(),
            },
            70..=79 => Consumer::OpenGates,
            80..=86 => Consumer::StartNamespaced,
            87..=93 => Consumer::StopNamespaced,
            _ => Consumer::RestartNamespaced,
        }
    }

    fn step(&mut self) -> Step {
        if let Some(left) = self.outage_left.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.outage_left = None;
                return Step::Fault(Fault::OutageEnd);
            }
        }
        match self.rng.random_range(0..100) {
            0..=63 => Step::Write(self.write()),
            64..=79 => Step::Fault(self.fault()),
            80..=89 => Step::Consumer(self.consumer()),
            _ => Step::Pause(Duration::from_millis(self.rng.random_range(1..40))),
        }
    }
}

/// Generates the schedule of `seed`.
pub fn generate(seed: u64, profile: Profile) -> Schedule {
    let mut g = Gen {
        rng: StdRng::seed_from_u64(seed),
        profile,
        objects: BTreeMap::new(),
        outage_left: None,
        latency_on: false,
    };
    let engine = EngineChoice {
        page_size: [0, 3, 500][g.rng.random_range(0..3)],
        streaming_lists: g.rng.random_ratio(1, 3),
        skip_managed_fields: g.rng.random_bool(0.5),
        high_watermark: if g.rng.random_bool(0.5) { 16 } else { 16_384 },
        reflector_thread: g.rng.random_ratio(1, 4),
        // From the seed, not the generator: earlier seeds keep their schedules.
        compact_cache: seed % 4 == 1,
        compact_recent: [0, 2, 1024][(seed / 4 % 3) as usize],
        compact_background: seed / 12 % 4 != 3,
    };
    let seeded = g.rng.random_range(0..usize::from(profile.names) * 2);
    let mut seed_objects = Vec::new();
    for _ in 0..seeded {
        let obj = g.obj();
        if !g.objects.contains_key(&obj) {
            seed_objects.push(g.create(obj));
        }
    }
    let mut initial = vec![
        Consumer::Subscribe {
            informer: InformerSlot::All,
            kind: SubscriberKind::Block {
                capacity: g.rng.random_range(1..8),
            },
            resync: false,
        },
        Consumer::Subscribe {
            informer: InformerSlot::All,
            kind: SubscriberKind::Coalesce,
            resync: true,
        },
        Consumer::Subscribe {
            informer: InformerSlot::Tiered,
            kind: SubscriberKind::Block { capacity: 4 },
            resync: false,
        },
    ];
    for _ in 0..g.rng.random_range(0..3) {
        let kind = g.kind();
        initial.push(Consumer::Subscribe {
            informer: InformerSlot::All,
            kind,
            resync: g.rng.random_ratio(1, 3),
        });
    }
    let mut steps: Vec<Step> = (0..profile.steps).map(|_| g.step()).collect();
    if g.outage_left.is_some() {
        steps.push(Step::Fault(Fault::OutageEnd));
    }
    Schedule {
        seed,
        profile,
        engine,
        seed_objects,
        initial,
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        for seed in 0..50 {
            assert_eq!(
                generate(seed, Profile::QUICK),
                generate(seed, Profile::QUICK)
            );
        }
        assert_ne!(generate(1, Profile::QUICK), generate(2, Profile::QUICK));
    }

    #[test]
    fn every_outage_ends() {
        for seed in 0..500 {
            let s = generate(seed, Profile::LONG);
            let mut down = false;
            for step in &s.steps {
                match step {
                    Step::Fault(Fault::OutageBegin { .. }) => {
                        assert!(!down, "seed {seed}: nested outage");
                        down = true;
                    }
                    Step::Fault(Fault::OutageEnd) => down = false,
                    _ => {}
                }
            }
            assert!(!down, "seed {seed}: an outage never ends");
        }
    }

    #[test]
    fn schedules_cover_every_kind_of_step() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..300 {
            for step in generate(seed, Profile::LONG).steps {
                let name = match step {
                    Step::Write(w) => format!("{w:?}"),
                    Step::Fault(f) => format!("{f:?}"),
                    Step::Consumer(c) => format!("{c:?}"),
                    Step::Pause(_) => "Pause".into(),
                };
                let variant: String = name.chars().take_while(|c| c.is_alphanumeric()).collect();
                seen.insert(variant);
            }
        }
        for variant in [
            "Create",
            "Update",
            "Patch",
            "Delete",
            "ReleaseFinalizer",
            "Recreate",
            "CloseWatches",
            "CloseWatchesAfter",
            "CompactAndClose",
            "Compact",
            "FailNext",
            "Malformed",
            "Stall",
            "Latency",
            "SuppressBookmarks",
            "Restart",
            "OutageBegin",
            "OutageEnd",
            "Clear",
            "Subscribe",
            "Unsubscribe",
            "OpenGates",
            "StartNamespaced",
            "StopNamespaced",
            "RestartNamespaced",
            "Pause",
        ] {
            assert!(
                seen.contains(variant),
                "{variant} never generated: {seen:?}"
            );
        }
    }
}
