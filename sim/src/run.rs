//! Running a schedule: the server side ([`World`]) applies writes and
//! faults, a [`Probe`] drives and checks what consumes the server (the
//! informers here; a controller or replica test brings its own probe), and
//! the process's panics are watched throughout.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::panics;
use crate::schedule::{Consumer, Profile, Schedule, Step};
use crate::world::{World, WorldCounts};

/// What a simulation drives and checks besides the server.
///
/// Called in this order: [`start`](Probe::start) once, then for every step
/// [`consumer`](Probe::consumer) (consumer steps only) and
/// [`sample`](Probe::sample) (after every step), then, with faults cleared
/// and the server serving, [`settle`](Probe::settle), then
/// [`finish`](Probe::finish). All on one actix System's thread.
#[allow(async_fn_in_trait)]
pub trait Probe {
    /// Before the first step: start what consumes the server.
    async fn start(&mut self, world: &mut World, schedule: &Schedule) -> anyhow::Result<()>;
    /// A consumer step of the schedule (a probe may ignore any of them).
    async fn consumer(&mut self, world: &mut World, step: &Consumer);
    /// After every step: record what must hold at all times (memory bounds);
    /// divergences found here are answered by `settle`.
    fn sample(&mut self, world: &World);
    /// Wait until everything converged or `deadline` passed, then answer
    /// every divergence (one line each).
    async fn settle(&mut self, world: &mut World, deadline: Instant) -> Vec<String>;
    /// Stop what `start` started.
    async fn finish(&mut self);
    /// Counters for the run's summary (relists, watch restarts...).
    fn summary(&self) -> BTreeMap<&'static str, u64>;
}

/// What one schedule did and found.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The schedule's seed.
    pub seed: u64,
    /// Its profile.
    pub profile: Profile,
    /// Every divergence from the model (empty: the run passed).
    pub divergences: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// What the server took.
    pub counts: WorldCounts,
    /// The probe's counters.
    pub summary: BTreeMap<&'static str, u64>,
}

impl RunOutcome {
    /// The one line that runs this schedule again.
    pub fn reproduction(&self) -> String {
        reproduction(self.seed, self.profile)
    }
}

/// The name of a profile in `KINFORMER_SIM_PROFILE`.
pub fn profile_name(profile: Profile) -> &'static str {
    if profile == Profile::LONG {
        "long"
    } else {
        "quick"
    }
}

/// A profile by its `KINFORMER_SIM_PROFILE` name.
pub fn profile_named(name: &str) -> Option<Profile> {
    match name {
        "quick" => Some(Profile::QUICK),
        "long" => Some(Profile::LONG),
        _ => None,
    }
}

/// The one-line reproduction of a seed.
pub fn reproduction(seed: u64, profile: Profile) -> String {
    format!(
        "KINFORMER_SIM_SEED={seed} KINFORMER_SIM_PROFILE={} cargo test -p kinformer-sim --test simulator -- replay --nocapture",
        profile_name(profile)
    )
}

/// How long a probe may take to converge once the faults are off.
pub fn settle_time(profile: Profile) -> Duration {
    if profile.slow_faults {
        Duration::from_secs(40)
    } else {
        Duration::from_secs(25)
    }
}

/// Runs `schedule` against a fresh server with `probe`. Must run inside an
/// actix System (or a tokio `LocalSet`).
pub async fn simulate<P: Probe>(schedule: &Schedule, probe: &mut P) -> RunOutcome {
    panics::install();
    let mark = panics::mark();
    let t0 = Instant::now();
    let mut divergences = Vec::new();
    let mut world = match World::start() {
        Ok(w) => w,
        Err(e) => {
            return RunOutcome {
                seed: schedule.seed,
                profile: schedule.profile,
                divergences: vec![format!("the server did not start: {e:#}")],
                elapsed: t0.elapsed(),
                counts: WorldCounts::default(),
                summary: BTreeMap::new(),
            };
        }
    };
    for write in &schedule.seed_objects {
        world.write(write).await;
    }
    match probe.start(&mut world, schedule).await {
        Ok(()) => {
            for (i, step) in schedule.steps.iter().enumerate() {
                match step {
                    Step::Write(w) => world.write(w).await,
                    Step::Fault(f) => {
                        if let Err(e) = world.fault(f).await {
                            divergences.push(format!("step {i}: fault {f:?} failed: {e:#}"));
                        }
                    }
                    Step::Consumer(c) => probe.consumer(&mut world, c).await,
                    Step::Pause(d) => tokio::time::sleep(*d).await,
                }
                // Let the engine's actors run between steps.
                tokio::time::sleep(Duration::from_millis(1)).await;
                probe.sample(&world);
            }
            if let Err(e) = world.calm().await {
                divergences.push(format!("the server did not serve again: {e:#}"));
            }
            let deadline = Instant::now() + settle_time(schedule.profile);
            divergences.extend(probe.settle(&mut world, deadline).await);
        }
        Err(e) => divergences.push(format!("the probe did not start: {e:#}")),
    }
    probe.finish().await;
    divergences.extend(
        panics::unexpected_since(mark)
            .into_iter()
            .map(|p| format!("an unexpected panic: {p}")),
    );
    let counts = world.counts;
    let server = world.server.clone();
    drop(world);
    server.shutdown_and_wait().await;
    RunOutcome {
        seed: schedule.seed,
        profile: schedule.profile,
        divergences,
        elapsed: t0.elapsed(),
        counts,
        summary: probe.summary(),
    }
}
