//! The simulator's long run: thousands of seeded schedules, on `--jobs`
//! threads (one actix System each), printing schedules per minute and every
//! divergence with its one-line reproduction.
//!
//! ```text
//! cargo run --release -p kinformer-sim --bin kinformer-sim -- --schedules 5000 --jobs 2 --profile long
//! cargo run --release -p kinformer-sim --bin kinformer-sim -- --probe controller --profile quick
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use kinformer_sim::run::profile_named;
use kinformer_sim::{ControllerProbe, InformerProbe, RunOutcome, generate, simulate};

/// What consumes the server in each schedule.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ProbeKind {
    /// Informers and their subscribers of every kind.
    Informer,
    /// A controller whose reconciles fail, panic and requeue now and then.
    Controller,
}

#[derive(Parser, Debug)]
#[command(about = "Runs seeded fault schedules against kinformer and the embedded API server")]
struct Args {
    /// Schedules to run in all.
    #[arg(long, default_value_t = 1000)]
    schedules: u64,
    /// Stop starting new schedules after this long (e.g. `30m`).
    #[arg(long, value_parser = humantime::parse_duration)]
    max_time: Option<Duration>,
    /// The first seed.
    #[arg(long, default_value_t = 1_000_000)]
    start: u64,
    /// Schedules run at once (threads).
    #[arg(long, default_value_t = 2)]
    jobs: u64,
    /// `quick` (CI's) or `long` (longer schedules, slow faults).
    #[arg(long, default_value = "long")]
    profile: String,
    /// What the schedules are checked with.
    #[arg(long, value_enum, default_value_t = ProbeKind::Informer)]
    probe: ProbeKind,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let profile = profile_named(&args.profile)
        .ok_or_else(|| anyhow::anyhow!("unknown profile {:?} (quick, long)", args.profile))?;
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<Vec<RunOutcome>>> = Arc::default();
    // The probes' counters summed over every schedule run.
    let totals: Arc<Mutex<BTreeMap<&'static str, u64>>> = Arc::default();
    let t0 = Instant::now();
    let stop_at = args.max_time.map(|d| t0 + d);
    let mut threads = Vec::new();
    for _ in 0..args.jobs.max(1) {
        let (next, done, failed, totals) =
            (next.clone(), done.clone(), failed.clone(), totals.clone());
        let (total, start, probe) = (args.schedules, args.start, args.probe);
        threads.push(std::thread::spawn(move || {
            actix::System::new().block_on(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= total || stop_at.is_some_and(|s| Instant::now() >= s) {
                        return;
                    }
                    let seed = start + i;
                    let schedule = generate(seed, profile);
                    let outcome = match probe {
                        ProbeKind::Informer => simulate(&schedule, &mut InformerProbe::new()).await,
                        ProbeKind::Controller => {
                            simulate(&schedule, &mut ControllerProbe::new()).await
                        }
                    };
                    {
                        let mut totals = totals.lock().unwrap_or_else(|p| p.into_inner());
                        for (k, v) in &outcome.summary {
                            *totals.entry(k).or_insert(0) += v;
                        }
                    }
                    if !outcome.divergences.is_empty() {
                        println!(
                            "DIVERGED seed {seed} after {:?}:\n  {}\n  reproduce: {}",
                            outcome.elapsed,
                            outcome.divergences.join("\n  "),
                            outcome.reproduction()
                        );
                        failed
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(outcome);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }));
    }
    let report = |final_line: bool| {
        let n = done.load(Ordering::SeqCst);
        let minutes = t0.elapsed().as_secs_f64() / 60.0;
        let f = failed.lock().map(|f| f.len()).unwrap_or(0);
        println!(
            "{}{n} schedules in {:.1} min: {:.1} schedules/min, {f} diverged",
            if final_line { "done: " } else { "" },
            minutes,
            n as f64 / minutes.max(1e-9)
        );
    };
    while threads.iter().any(|t| !t.is_finished()) {
        std::thread::sleep(Duration::from_millis(200));
        if t0.elapsed().as_secs().is_multiple_of(30) {
            report(false);
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    for t in threads {
        let _ = t.join();
    }
    report(true);
    let totals = totals.lock().unwrap_or_else(|p| p.into_inner());
    let totals: Vec<String> = totals.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("totals: {}", totals.join(", "));
    let failed = failed.lock().unwrap_or_else(|p| p.into_inner());
    for o in failed.iter() {
        println!("diverged: {}", o.reproduction());
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{} schedules diverged", failed.len())
    }
}
