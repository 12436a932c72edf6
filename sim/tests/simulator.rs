//! The schedule simulator's CI batch, its regression seeds, and the replay
//! of one seed:
//!
//! ```text
//! KINFORMER_SIM_SEED=17 KINFORMER_SIM_PROFILE=quick cargo test -p kinformer-sim --test simulator -- replay --nocapture
//! ```
//!
//! The long run (thousands of schedules, schedules per minute, every
//! divergence with its reproduction) is `cargo run --release -p
//! kinformer-sim --bin kinformer-sim -- --help` (RELIABILITY.md).

use kinformer_sim::run::profile_named;
use kinformer_sim::{InformerProbe, Profile, RunOutcome, generate, simulate};

/// Seeds that once diverged, with their profile and what they found; each
/// runs on every CI run.
const REGRESSIONS: &[(u64, &str, &str)] = &[];

/// Schedules per batch test; `BATCHES` tests run in parallel.
const PER_BATCH: u64 = 25;

async fn run_seeds(seeds: impl IntoIterator<Item = u64>, profile: Profile) -> Vec<RunOutcome> {
    let mut failed = Vec::new();
    for seed in seeds {
        let outcome = simulate(&generate(seed, profile), &mut InformerProbe::new()).await;
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
    let start = base() + n * PER_BATCH;
    let failed = run_seeds(start..start + PER_BATCH, Profile::QUICK).await;
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
    let outcome = simulate(&schedule, &mut InformerProbe::new()).await;
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
