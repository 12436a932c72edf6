//! The soak: one informer for a long time at a steady write rate, with a
//! fault every so often and a subscriber too slow to keep up. At every
//! checkpoint the writer pauses and every view must come to equal the
//! server's; what does not is counted lost. Reports the RSS slope, events
//! lost (must be 0), relists and watch restarts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Backoff, Informer, OverflowPolicy, SubscribeOptions};
use kinformer_apiserver::{
    ApiServer, CloseMode, DownMode, Failure, RestartOptions, ServerConfig, ServerHandle, Verb,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::time::Instant;

use crate::check::{cache_view, view_diff};
use crate::subscriber::{Behaviour, Log, Recorder, SharedLog};
use crate::world::{Selection, client_for, view_of};

const NAMESPACE: &str = "soak";

/// What a soak does.
#[derive(Debug, Clone, Copy)]
pub struct SoakConfig {
    /// How long.
    pub duration: Duration,
    /// Writes (so events) per second.
    pub rate: f64,
    /// Names written to.
    pub objects: usize,
    /// A fault this often.
    pub fault_every: Duration,
    /// A checkpoint (writer paused, views compared) this often.
    pub checkpoint_every: Duration,
    /// The slow subscriber's time per event.
    pub slow_delay: Duration,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            duration: Duration::from_secs(30 * 60),
            rate: 1000.0,
            objects: 2000,
            fault_every: Duration::from_secs(15),
            checkpoint_every: Duration::from_secs(60),
            slow_delay: Duration::from_millis(2),
        }
    }
}

/// What a soak measured.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// Wall time.
    pub elapsed: Duration,
    /// Writes the server took.
    pub writes: u64,
    /// Notifications the fast subscriber handled.
    pub fast_delivered: u64,
    /// Notifications the slow subscriber handled.
    pub slow_delivered: u64,
    /// Of the slow subscriber's, merged away (`Coalesce`).
    pub slow_coalesced: u64,
    /// The slow subscriber's most pending notifications seen.
    pub slow_max_pending: usize,
    /// Checkpoints made.
    pub checkpoints: u64,
    /// Keys whose state a view or the cache missed at a checkpoint (must be 0).
    pub lost: u64,
    /// Faults injected.
    pub faults: u64,
    /// Relists.
    pub relists: u64,
    /// Watch restarts.
    pub watch_restarts: u64,
    /// Failed requests.
    pub failures: u64,
    /// (minutes, RSS MB) samples.
    pub rss: Vec<(f64, f64)>,
    /// RSS growth after the first fifth of the run, MB per minute (least squares).
    pub rss_slope_mb_per_min: f64,
    /// Divergences seen at checkpoints.
    pub divergences: Vec<String>,
}

/// This process's resident set size in MB (Linux; 0 elsewhere).
pub fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |pages| pages * 4096.0 / 1e6)
}

/// The least-squares slope of `(x, y)` points (0 for fewer than two).
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

/// The writer thread: creates, updates and deletes at `rate` until stopped;
/// holds still while `paused`, saying so in `idle`.
struct Writer {
    paused: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(server: ServerHandle, rate: f64, objects: usize) -> Writer {
        let paused = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let (p, i, s, w) = (paused.clone(), idle.clone(), stop.clone(), writes.clone());
        let thread = std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(29);
            let mut live = vec![false; objects];
            let t0 = std::time::Instant::now();
            let mut done = 0u64;
            let mut paused_for = Duration::ZERO;
            while !s.load(Ordering::Relaxed) {
                if p.load(Ordering::Relaxed) {
                    i.store(true, Ordering::SeqCst);
                    let since = std::time::Instant::now();
                    while p.load(Ordering::Relaxed) && !s.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    paused_for += since.elapsed();
                    i.store(false, Ordering::SeqCst);
                }
                // Keep to the rate over the time not paused.
                let due = ((t0.elapsed() - paused_for).as_secs_f64() * rate) as u64;
                if done >= due {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let batch = due.min(done + 64) - done;
                for _ in 0..batch {
                    let n = rng.random_range(0..objects);
                    let name = format!("s{n}");
                    let ok = if !live[n] {
                        let body = json!({"metadata": {"name": name, "namespace": NAMESPACE},
                            "data": {"v": done.to_string()}});
                        let r = server.create("", "configmaps", Some(NAMESPACE), body);
                        live[n] = true;
                        r.is_ok()
                    } else if rng.random_ratio(1, 4) {
                        live[n] = false;
                        server
                            .delete("", "configmaps", Some(NAMESPACE), &name)
                            .is_ok()
                    } else {
                        let body = json!({"metadata": {"name": name, "namespace": NAMESPACE},
                            "data": {"v": done.to_string()}});
                        server
                            .update("", "configmaps", Some(NAMESPACE), body)
                            .is_ok()
                    };
                    if ok {
                        w.fetch_add(1, Ordering::Relaxed);
                    }
                    done += 1;
                }
            }
        });
        Writer {
            paused,
            idle,
            stop,
            writes,
            thread: Some(thread),
        }
    }

    async fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        while !self.idle.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.writes.load(Ordering::Relaxed)
    }
}

async fn fault(server: &ServerHandle, n: u64) -> anyhow::Result<()> {
    let f = server.faults();
    match n % 9 {
        0 => f.close_all_watches(),
        1 => {
            f.compact();
            f.close_all_watches();
        }
        2 => {
            f.fail_next(Verb::List, 2, Failure::Internal);
            f.compact();
            f.close_all_watches();
        }
        3 => {
            f.fail_next(
                Verb::Watch,
                3,
                Failure::TooManyRequests {
                    retry_after_secs: 1,
                },
            );
            f.close_all_watches();
        }
        4 => f.inject_malformed_line(),
        5 => {
            server
                .restart(RestartOptions::default().keep_history())
                .await?
        }
        6 => {
            server
                .restart(
                    RestartOptions::default()
                        .close(CloseMode::Eof)
                        .down_for(Duration::from_millis(500)),
                )
                .await?
        }
        7 => {
            server
                .stop_serving(RestartOptions::default().while_down(DownMode::Refuse))
                .await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            server.start_serving().await?;
        }
        _ => {
            f.stall_watches(true);
            tokio::time::sleep(Duration::from_secs(2)).await;
            f.stall_watches(false);
        }
    }
    Ok(())
}

/// Runs a soak; must run inside an actix System. `progress` gets one line
/// per checkpoint.
pub async fn soak(config: SoakConfig, progress: impl Fn(&str)) -> anyhow::Result<SoakReport> {
    let server = ApiServer::start_in_thread(ServerConfig {
        history_limit: 10_000,
        ..ServerConfig::default()
    })?;
    server.create_namespace(NAMESPACE)?;
    let client = client_for(&server)?;
    let informer = Informer::builder(kube::Api::<ConfigMap>::namespaced(client, NAMESPACE))
        .backoff(Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(2),
            Duration::from_secs(120),
        ))
        .read_timeout(Duration::from_secs(5))
        .min_watch_timeout(Duration::from_secs(60))
        .start()?;
    let fast_log = Log::view_only();
    let (fast, _) = Recorder::start_with(Behaviour::default(), fast_log.clone());
    let fast_sub = informer
        .subscribe_batches(fast.recipient(), SubscribeOptions::default())
        .await?;
    let slow_log = Log::view_only();
    let (slow, _) = Recorder::start_with(
        Behaviour {
            delay: Some(config.slow_delay),
            ..Behaviour::default()
        },
        slow_log.clone(),
    );
    let slow_sub = informer
        .subscribe(
            slow.recipient(),
            SubscribeOptions::default().policy(OverflowPolicy::Coalesce),
        )
        .await?;
    informer.wait_for_sync(Duration::from_secs(60)).await?;
    let writer = Writer::start(server.clone(), config.rate, config.objects);
    let t0 = Instant::now();
    let mut report = SoakReport::default();
    let mut next_fault = t0 + config.fault_every;
    let mut next_checkpoint = t0 + config.checkpoint_every;
    let mut next_sample = t0;
    let selection = Selection {
        namespace: Some(NAMESPACE.into()),
        tier: None,
    };
    let logs: [(&str, &SharedLog); 2] = [("fast", &fast_log), ("slow", &slow_log)];
    while t0.elapsed() < config.duration {
        let now = Instant::now();
        if now >= next_sample {
            report
                .rss
                .push((t0.elapsed().as_secs_f64() / 60.0, rss_mb()));
            next_sample = now + Duration::from_secs(5);
        }
        report.slow_max_pending = report.slow_max_pending.max(slow_sub.stats().pending);
        if now >= next_fault {
            fault(&server, report.faults).await?;
            report.faults += 1;
            next_fault = Instant::now() + config.fault_every;
        }
        if now >= next_checkpoint {
            writer.pause().await;
            let deadline = Instant::now() + Duration::from_secs(60);
            let missed = loop {
                let truth = view_of(&server, &selection);
                let mut missed = view_diff(&cache_view(&informer), &truth, usize::MAX)
                    .into_iter()
                    .map(|d| format!("cache: {d}"))
                    .collect::<Vec<_>>();
                for (name, log) in logs {
                    let view = log.lock().unwrap_or_else(|p| p.into_inner()).view.clone();
                    missed.extend(
                        view_diff(&view, &truth, usize::MAX)
                            .into_iter()
                            .map(|d| format!("{name}: {d}")),
                    );
                }
                if missed.is_empty() || Instant::now() >= deadline {
                    break missed;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            report.checkpoints += 1;
            report.lost += missed.len() as u64;
            report.divergences.extend(missed.into_iter().take(10));
            let stats = informer.stats();
            progress(&format!(
                "{:>6.1} min: {} writes, checkpoint {} lost {}, relists {}, watch restarts {}, faults {}, rss {:.1} MB, slow pending max {}",
                t0.elapsed().as_secs_f64() / 60.0,
                writer.writes.load(Ordering::Relaxed),
                report.checkpoints,
                report.lost,
                stats.relists,
                stats.watch_restarts,
                report.faults,
                rss_mb(),
                report.slow_max_pending,
            ));
            writer.resume();
            next_checkpoint = Instant::now() + config.checkpoint_every;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.writes = writer.stop();
    report.elapsed = t0.elapsed();
    let stats = informer.stats();
    report.relists = stats.relists;
    report.watch_restarts = stats.watch_restarts;
    report.failures = stats.failures;
    report.fast_delivered = fast_sub.stats().delivered;
    let slow_stats = slow_sub.stats();
    report.slow_delivered = slow_stats.delivered;
    report.slow_coalesced = slow_stats.coalesced;
    let warm = config.duration.as_secs_f64() / 60.0 / 5.0;
    let after_warmup: Vec<(f64, f64)> = report
        .rss
        .iter()
        .copied()
        .filter(|(m, _)| *m >= warm)
        .collect();
    report.rss_slope_mb_per_min = slope(&after_warmup);
    informer.stop().await;
    server.shutdown_and_wait().await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_and_of_a_flat_series() {
        let line: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 1.0)).collect();
        assert!((slope(&line) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)]), 0.0);
        assert_eq!(slope(&[(1.0, 2.0)]), 0.0);
    }

    #[test]
    fn rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(rss_mb() > 1.0);
        }
    }
}
