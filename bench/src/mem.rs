//! What a process costs: live heap (counting allocator), RSS from /proc, and
//! CPU time from /proc/self/stat.
//!
//! The live heap comes from the [`cap`] allocator installed as the global
//! allocator. It counts allocated bytes with one atomic per
//! allocation and keeps no peak that could be reset, so [`PeakSampler`] polls
//! it every millisecond from a thread of its own and keeps the maximum since
//! its last reset (long-lived peaks such as a whole list in memory are seen;
//! sub-millisecond spikes may not be).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use cap::Cap;

/// The allocator under the counting one: the system's, or mimalloc with
/// the `mimalloc` feature (for every process of the run alike).
#[cfg(not(feature = "mimalloc"))]
type Under = std::alloc::System;
#[cfg(not(feature = "mimalloc"))]
const UNDER: Under = std::alloc::System;
#[cfg(feature = "mimalloc")]
type Under = mimalloc::MiMalloc;
#[cfg(feature = "mimalloc")]
const UNDER: Under = mimalloc::MiMalloc;

/// The counting global allocator of the benchmark binary.
#[global_allocator]
pub static ALLOC: Cap<Under> = Cap::new(UNDER, usize::MAX);

/// The allocator under the counting one, for reports.
pub const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "the system allocator (glibc)"
};

/// Bytes currently allocated on the heap by this process.
pub fn heap_now() -> usize {
    ALLOC.allocated()
}

/// Tracks the largest live heap seen since the last [`PeakSampler::reset`].
#[derive(Clone)]
pub struct PeakSampler {
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl PeakSampler {
    /// Starts the sampling thread (1 ms period).
    pub fn start() -> Self {
        let peak = Arc::new(AtomicUsize::new(heap_now()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::Builder::new()
            .name("heap-sampler".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    p.fetch_max(heap_now(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .map(drop)
            .unwrap_or_else(|e| tracing::warn!(%e, "no heap sampler thread"));
        PeakSampler { peak, stop }
    }

    /// Forgets the peak so far: the next [`PeakSampler::peak`] covers only what follows.
    pub fn reset(&self) {
        self.peak.store(heap_now(), Ordering::Relaxed);
    }

    /// The largest live heap since the last reset (or start).
    pub fn peak(&self) -> usize {
        self.peak
            .fetch_max(heap_now(), Ordering::Relaxed)
            .max(heap_now())
    }
}

impl Drop for PeakSampler {
    fn drop(&mut self) {
        if Arc::strong_count(&self.stop) == 1 {
            self.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Resident set size now and its high-water mark, in bytes (VmRSS, VmHWM).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Rss {
    /// VmRSS.
    pub rss: u64,
    /// VmHWM (peak since start or since [`reset_rss_peak`]).
    pub hwm: u64,
}

/// Reads VmRSS and VmHWM from /proc/self/status (zeros where unavailable).
pub fn rss() -> Rss {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    Rss {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
    }
}

/// Resets VmHWM to the current RSS (writes "5" to /proc/self/clear_refs).
pub fn reset_rss_peak() {
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        tracing::debug!(%e, "cannot reset VmHWM");
    }
}

/// User plus system CPU time of this process so far, every thread
/// included, in nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`; `/proc/self/stat`
/// counts 10 ms ticks, too coarse for a 50 ms sync).
pub fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// CPU time (user + system, ms) of this process's threads whose name starts
/// with `name` (Linux thread names are cut at 15 bytes); 0 when unknown.
pub fn thread_cpu_ms(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    // Clock ticks per second: 100 on Linux for the `stat` fields.
    const TICKS: f64 = 100.0;
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        ticks += field(11) + field(12);
    }
    ticks as f64 * 1000.0 / TICKS
}

/// Bytes this process caused to be written to storage (`write_bytes` of
/// `/proc/self/io`); 0 when unknown.
pub fn disk_write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named thread's CPU is read from its own `stat`, and only its own.
    #[test]
    fn a_named_threads_cpu_is_counted() {
        assert_eq!(thread_cpu_ms("no-such-thread"), 0.0);
        let spinner = std::thread::Builder::new()
            .name("kinformer-spin".into())
            .spawn(|| {
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                // Spins until /proc says it used two ticks (or gives up).
                while thread_cpu_ms("kinformer-spin") < 20.0 && std::time::Instant::now() < deadline
                {
                    std::hint::black_box(0u64);
                }
                thread_cpu_ms("kinformer-spin")
            })
            .unwrap();
        assert!(spinner.join().unwrap() >= 20.0);
        let _ = disk_write_bytes();
    }

    #[test]
    fn proc_readings_are_plausible() {
        let r = rss();
        assert!(r.rss > 0 && r.hwm >= r.rss, "{r:?}");
        let before = cpu_time();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_time() >= before + Duration::from_millis(1));
        // Finer than /proc's 10 ms ticks: the first change seen is small
        // (this thread's clock, so parallel tests do not add to it).
        let thread = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
        };
        let from = thread();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut now = thread();
        while now == from && std::time::Instant::now() < deadline {
            x = x.wrapping_add(std::hint::black_box(1));
            now = thread();
        }
        assert!(
            now > from && now - from < Duration::from_millis(5),
            "{:?}",
            now - from
        );
    }

    #[test]
    fn heap_counter_sees_an_allocation() {
        let before = heap_now();
        let v = vec![1u8; 64 << 20];
        // Other test threads may free memory meanwhile: a loose bound.
        assert!(heap_now() + (32 << 20) >= before + (64 << 20));
        drop(std::hint::black_box(v));
    }
}
