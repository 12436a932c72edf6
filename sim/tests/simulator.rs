//! The schedule simulator's CI batch, its regression seeds, and the replay
//! of one seed:
//!
//! ```text
//! KINFORMER_SIM_SEED=17 KINFORMER_SIM_PROFILE=quick cargo test -p kinformer-sim --test simulator -- replay --exact --nocapture
//! ```
//!
//! The long run (thousands of schedules, schedules per minute, every
//! divergence with its reproduction) is `cargo run --release -p
//! kinformer-sim --bin kinformer-sim -- --help` (RELIABILITY.md).

use std::collections::BTreeMap;
use std::time::Duration;

use kinformer_sim::run::profile_named;
use kinformer_sim::schedule::{Consumer, Step};
use kinformer_sim::{
    ControllerProbe, InformerProbe, Probe, Profile, RunOutcome, Schedule, World, generate,
    simulate, simulate_within,
};
use tokio::time::Instant;

/// Seeds that once diverged, with their profile and what they found; each
/// runs on every CI run.
const REGRESSIONS: &[(u64, &str, &str)] = &[
    (
        1_000_042,
        "quick",
        "the namespaced informer stopped before its first commit; its restart counted the never-committed snapshot as discarded",
    ),
    (
        1_000_054,
        "quick",
        "the same (a stop before the first commit, then a restart)",
    ),
];

/// Schedules per batch test by default: 4 tests make 24 schedules, about
/// 10 s on two cores (RELIABILITY.md); `KINFORMER_SIM_PER_BATCH=50` runs the
/// issue's batch of 200.
const PER_BATCH: u64 = 6;

fn per_batch() -> u64 {
    std::env::var("KINFORMER_SIM_PER_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(PER_BATCH)
}

async fn run_seeds(seeds: impl IntoIterator<Item = u64>, profile: Profile) -> Vec<RunOutcome> {
    run_seeds_with(seeds, profile, InformerProbe::new).await
}

async fn run_seeds_with<P: Probe>(
    seeds: impl IntoIterator<Item = u64>,
    profile: Profile,
    probe: impl Fn() -> P,
) -> Vec<RunOutcome> {
    let mut failed = Vec::new();
    for seed in seeds {
        let outcome = simulate(&generate(seed, profile), &mut probe()).await;
        if !outcome.divergences.is_empty() {
            eprintln!(
                "seed {seed} diverged ({:?}):\n  {}\nreproduce: {}",
                outcome.elapsed,
                outcome.divergences.join("\n  "),
                outcome.reproduction()
            );
            failed.push(outcome);
        }
    }
    failed
}

fn assert_none_failed(failed: &[RunOutcome]) {
    assert!(
        failed.is_empty(),
        "{} schedules diverged; reproduce each with:\n{}",
        failed.len(),
        failed
            .iter()
            .map(|o| o.reproduction())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The first seed of the CI batch (`KINFORMER_SIM_BASE` moves it, to try
/// other seeds with the same command).
fn base() -> u64 {
    std::env::var("KINFORMER_SIM_BASE")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(0)
}

async fn batch(n: u64) {
    let per_batch = per_batch();
    let start = base() + n * per_batch;
    let failed = run_seeds(start..start + per_batch, Profile::QUICK).await;
    assert_none_failed(&failed);
}

#[actix::test]
async fn quick_batch_0() {
    batch(0).await;
}

#[actix::test]
async fn quick_batch_1() {
    batch(1).await;
}

#[actix::test]
async fn quick_batch_2() {
    batch(2).await;
}

#[actix::test]
async fn quick_batch_3() {
    batch(3).await;
}

/// The controller probe's CI batch: the same schedules (their first
/// seeds), checked through a controller's reconciles.
#[actix::test]
async fn controller_quick_batch() {
    let per_batch = per_batch();
    let start = base();
    let failed = run_seeds_with(
        start..start + per_batch,
        Profile::QUICK,
        ControllerProbe::new,
    )
    .await;
    assert_none_failed(&failed);
}

/// A probe whose consumer steps never finish: a hang.
struct HangingProbe;

impl Probe for HangingProbe {
    async fn start(&mut self, _: &mut World, _: &Schedule) -> anyhow::Result<()> {
        Ok(())
    }
    async fn consumer(&mut self, _: &mut World, _: &Consumer) {
        std::future::pending::<()>().await;
    }
    fn sample(&mut self, _: &World) {}
    async fn settle(&mut self, _: &mut World, _: Instant) -> Vec<String> {
        Vec::new()
    }
    async fn finish(&mut self) {}
    fn summary(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::new()
    }
}

#[actix::test]
async fn a_hung_step_fails_the_run_naming_the_seed_and_the_step() {
    let schedule = generate(3, Profile::QUICK);
    let first = schedule
        .steps
        .iter()
        .position(|s| matches!(s, Step::Consumer(_)))
        .expect("seed 3 has a consumer step");
    let limit = Duration::from_secs(2);
    let t0 = Instant::now();
    let outcome = simulate_within(&schedule, &mut HangingProbe, limit).await;
    let hang = outcome
        .divergences
        .iter()
        .find(|d| d.contains("a hang"))
        .unwrap_or_else(|| panic!("no hang reported: {:?}", outcome.divergences));
    assert!(hang.starts_with("seed 3: "), "{hang}");
    assert!(hang.contains(&format!("step {first} (Consumer(")), "{hang}");
    // The run ended at the hang: no later step ran, nothing waited for the
    // 25 s of settling.
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

#[actix::test]
async fn regression_seeds() {
    let mut failed = Vec::new();
    for (seed, profile, _found) in REGRESSIONS {
        let profile = profile_named(profile).expect("a known profile");
        failed.extend(run_seeds([*seed], profile).await);
    }
    assert_none_failed(&failed);
}

/// Replays `KINFORMER_SIM_SEED` (with `KINFORMER_SIM_PROFILE`, default
/// quick), printing the schedule; passes without a seed.
#[actix::test]
async fn replay() {
    replay_with(InformerProbe::new()).await;
}

/// [`replay`] with the controller probe.
#[actix::test]
async fn replay_controller() {
    replay_with(ControllerProbe::new()).await;
}

async fn replay_with<P: Probe>(mut probe: P) {
    let Some(seed) = std::env::var("KINFORMER_SIM_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return;
    };
    let profile = std::env::var("KINFORMER_SIM_PROFILE")
        .ok()
        .and_then(|p| profile_named(&p))
        .unwrap_or(Profile::QUICK);
    let schedule = generate(seed, profile);
    eprintln!("{schedule:#?}");
    let outcome = simulate(&schedule, &mut probe).await;
    eprintln!(
        "seed {seed}: {:?}, {:?}, {:?}",
        outcome.elapsed, outcome.counts, outcome.summary
    );
    assert!(
        outcome.divergences.is_empty(),
        "seed {seed} diverged:\n  {}",
        outcome.divergences.join("\n  ")
    );
}
