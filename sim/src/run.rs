//! Running a schedule: the server side ([`World`]) applies writes and
//! faults, a [`Probe`] drives and checks what consumes the server (the
//! informers here; a controller or replica test brings its own probe), and
//! the process's panics are watched throughout.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::panics;
use crate::schedule::{Consumer, Profile, Schedule, Step};
use crate::watchdog::Watchdog;
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
    /// The simulator test that replays one seed with this probe (its
    /// reproduction line names it).
    const REPLAY: &'static str = "replay";
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
    /// The test that replays it ([`Probe::REPLAY`]).
    pub replay: &'static str,
}

impl RunOutcome {
    /// The one line that runs this schedule again.
    pub fn reproduction(&self) -> String {
        reproduction_in(self.replay, self.seed, self.profile)
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
    reproduction_in("replay", seed, profile)
}

/// The one-line reproduction of a seed by the replay test `test`.
pub fn reproduction_in(test: &str, seed: u64, profile: Profile) -> String {
    format!(
        "KINFORMER_SIM_SEED={seed} KINFORMER_SIM_PROFILE={} cargo test -p kinformer-sim --test simulator -- {test} --exact --nocapture",
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

/// Longest a step (or the probe's start or finish, or the server's
/// shutdown) may take in [`simulate`]: a step that takes longer is a hang,
/// reported as a divergence naming the seed and the step, and ends the run.
/// Far above any step's own time (the longest, a stall or an outage of the
/// long profile, takes under 3 s).
pub const STEP_LIMIT: Duration = Duration::from_secs(60);

/// How much longer than its limit the watchdog thread lets a phase last
/// before ending the process: only when the async limit could not fire,
/// because the run's thread is blocked.
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(30);

/// Bounds the phases of one run: an async limit on each (a divergence when
/// it passes) and the watchdog thread behind it.
struct Bounds {
    seed: u64,
    limit: Duration,
    watchdog: Watchdog,
}

impl Bounds {
    /// `fut` within `self.limit` (plus `extra`), or a divergence naming the
    /// seed and `what`.
    async fn run<T>(
        &self,
        what: String,
        extra: Duration,
        fut: impl Future<Output = T>,
    ) -> Result<T, String> {
        let limit = self.limit + extra;
        self.watchdog.phase(what.clone());
        let out = tokio::time::timeout(limit, fut).await.map_err(|_| {
            format!(
                "seed {}: {what} did not finish within {limit:?} (a hang)",
                self.seed
            )
        });
        self.watchdog.phase(format!("what follows {what}"));
        out
    }
}

/// Runs `schedule` against a fresh server with `probe`. Must run inside an
/// actix System (or a tokio `LocalSet`). Every step is bounded by
/// [`STEP_LIMIT`]: a hang is a divergence, not a stuck run; a blocked
/// thread ends the process with the seed and the step (see [`Watchdog`]).
pub async fn simulate<P: Probe>(schedule: &Schedule, probe: &mut P) -> RunOutcome {
    simulate_within(schedule, probe, STEP_LIMIT).await
}

/// [`simulate`] with each phase bounded by `step_limit` (settling by its
/// [`settle_time`] plus `step_limit`).
pub async fn simulate_within<P: Probe>(
    schedule: &Schedule,
    probe: &mut P,
    step_limit: Duration,
) -> RunOutcome {
    panics::install();
    let mark = panics::mark();
    let t0 = Instant::now();
    let seed = schedule.seed;
    let bounds = Bounds {
        seed,
        limit: step_limit,
        watchdog: Watchdog::aborting(
            format!(
                "seed {seed} (reproduce: {})",
                reproduction_in(P::REPLAY, seed, schedule.profile)
            ),
            step_limit + settle_time(schedule.profile) + WATCHDOG_GRACE,
        ),
    };
    let mut divergences = Vec::new();
    let mut world = match World::start() {
        Ok(w) => w,
        Err(e) => {
            return RunOutcome {
                seed,
                profile: schedule.profile,
                divergences: vec![format!("the server did not start: {e:#}")],
                elapsed: t0.elapsed(),
                counts: WorldCounts::default(),
                summary: BTreeMap::new(),
                replay: P::REPLAY,
            };
        }
    };
    let mut hung = false;
    for (i, write) in schedule.seed_objects.iter().enumerate() {
        let what = format!("seed object {i} ({write:?})");
        if let Err(e) = bounds.run(what, Duration::ZERO, world.write(write)).await {
            divergences.push(e);
            hung = true;
            break;
        }
    }
    let started = if hung {
        Ok(Err(anyhow::anyhow!("a seed object's write hung")))
    } else {
        let start = probe.start(&mut world, schedule);
        bounds
            .run("the probe's start".into(), Duration::ZERO, start)
            .await
    };
    match started {
        Ok(Ok(())) => {
            for (i, step) in schedule.steps.iter().enumerate() {
                let what = format!("step {i} ({step:?})");
                let done = bounds
                    .run(what, Duration::ZERO, async {
                        match step {
                            Step::Write(w) => world.write(w).await,
                            Step::Fault(f) => {
                                if let Err(e) = world.fault(f).await {
                                    divergences
                                        .push(format!("step {i}: fault {f:?} failed: {e:#}"));
                                }
                            }
                            Step::Consumer(c) => probe.consumer(&mut world, c).await,
                            Step::Pause(d) => tokio::time::sleep(*d).await,
                        }
                        // Let the engine's actors run between steps.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    })
                    .await;
                if let Err(e) = done {
                    divergences.push(e);
                    hung = true;
                    break;
                }
                probe.sample(&world);
            }
            let calm = bounds
                .run("clearing the faults".into(), Duration::ZERO, world.calm())
                .await;
            match calm {
                Ok(Ok(())) => {}
                Ok(Err(e)) => divergences.push(format!("the server did not serve again: {e:#}")),
                Err(e) => divergences.push(e),
            }
            // After a hang the views cannot be expected to converge: the
            // hang is the finding.
            if !hung {
                let settle = settle_time(schedule.profile);
                let deadline = Instant::now() + settle;
                let settled = bounds
                    .run(
                        "settling".into(),
                        settle,
                        probe.settle(&mut world, deadline),
                    )
                    .await;
                match settled {
                    Ok(found) => divergences.extend(found),
                    Err(e) => divergences.push(e),
                }
            }
        }
        Ok(Err(e)) => divergences.push(format!("the probe did not start: {e:#}")),
        Err(e) => divergences.push(e),
    }
    let finish = probe.finish();
    if let Err(e) = bounds
        .run("the probe's finish".into(), Duration::ZERO, finish)
        .await
    {
        divergences.push(e);
    }
    divergences.extend(
        panics::unexpected_since(mark)
            .into_iter()
            .map(|p| format!("an unexpected panic: {p}")),
    );
    let counts = world.counts;
    let server = world.server.clone();
    drop(world);
    let shutdown = server.shutdown_and_wait();
    if let Err(e) = bounds
        .run("the server's shutdown".into(), Duration::ZERO, shutdown)
        .await
    {
        divergences.push(e);
    }
    drop(bounds);
    RunOutcome {
        seed,
        profile: schedule.profile,
        divergences,
        elapsed: t0.elapsed(),
        counts,
        summary: probe.summary(),
        replay: P::REPLAY,
    }
}
