//! The soak run: one informer at a steady write rate for a long time, with
//! a fault every so often and a subscriber too slow to keep up; prints the
//! RSS slope, events lost (must be 0), relists and watch restarts.
//!
//! ```text
//! cargo run --release -p kinformer-sim --bin kinformer-soak -- --duration 30m --rate 1000
//! ```

use std::time::Duration;

use clap::Parser;
use kinformer_sim::soak::{SoakConfig, soak};

#[derive(Parser, Debug)]
#[command(about = "Soaks kinformer against the embedded API server")]
struct Args {
    /// How long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30m")]
    duration: Duration,
    /// Writes (events) per second.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Names written to.
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// A fault this often.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15s")]
    fault_every: Duration,
    /// A checkpoint this often.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    checkpoint_every: Duration,
    /// The slow subscriber's time per event.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2ms")]
    slow_delay: Duration,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let config = SoakConfig {
        duration: a.duration,
        rate: a.rate,
        objects: a.objects,
        fault_every: a.fault_every,
        checkpoint_every: a.checkpoint_every,
        slow_delay: a.slow_delay,
    };
    println!("soak: {config:?}");
    let report = actix::System::new().block_on(soak(config, |line| println!("{line}")))?;
    let minutes = report.elapsed.as_secs_f64() / 60.0;
    println!(
        "done: {:.1} min, {} writes ({:.0}/s), events lost {}, checkpoints {}, faults {}, relists {}, watch restarts {}, failures {}",
        minutes,
        report.writes,
        report.writes as f64 / report.elapsed.as_secs_f64(),
        report.lost,
        report.checkpoints,
        report.faults,
        report.relists,
        report.watch_restarts,
        report.failures,
    );
    println!(
        "fast subscriber: {} delivered; slow subscriber: {} delivered, {} coalesced, at most {} pending",
        report.fast_delivered,
        report.slow_delivered,
        report.slow_coalesced,
        report.slow_max_pending
    );
    let first = report.rss.first().map_or(0.0, |s| s.1);
    let last = report.rss.last().map_or(0.0, |s| s.1);
    println!(
        "rss: {first:.1} MB at start, {last:.1} MB at the end, slope after warm-up {:+.3} MB/min",
        report.rss_slope_mb_per_min
    );
    for d in &report.divergences {
        println!("lost: {d}");
    }
    if report.lost > 0 {
        anyhow::bail!("{} events lost", report.lost);
    }
    Ok(())
}
