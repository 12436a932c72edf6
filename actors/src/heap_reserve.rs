//! Growing a decoding thread's glibc arena ahead of its allocations.
//!
//! glibc gives every thread but the main one an arena of its own (up to
//! eight per core, then threads share) and, when an allocation does not fit,
//! grows it by an `mprotect` of just the pages that allocation lacks (its
//! `top_pad` is not added there), under the process's address space lock.
//! A thread decoding many objects for a cache allocates them all at once:
//! one snapshot restore of 100k ConfigMaps made 330 000 such calls, one page
//! each, and most of its decoding threads' time went to them and to waiting
//! for the lock (BENCHMARKS.md, "Growing the decoding threads' arenas"). The
//! main thread's arena grows by `brk` with a 128 KiB pad, so it needs none
//! of this.
//!
//! A [`HeapReserve`] allocates blocks just under glibc's mmap threshold
//! ahead of the decoding, one `mprotect` each, then frees all but the last:
//! they merge into one free chunk, which the decoded objects then split
//! without a system call. Only the blocks' headers are written (one page per
//! block becomes resident). The block held back keeps the space from being
//! trimmed (`madvise`) and faulted in again; glibc remembers how far an
//! arena was made writable anyway. No setting or crate does this for a
//! library (`mallopt` is process-wide and `unsafe`). Only on Linux with
//! glibc: other C libraries' allocators grow differently. Under another
//! global allocator (jemalloc, mimalloc) the blocks are merely allocated and
//! freed, a few hundred per 32 MiB; with glibc's mmap threshold set below
//! the block size (`MALLOC_MMAP_THRESHOLD_`) each block is a mapping of its
//! own, again only a cost.

/// Below glibc's initial mmap threshold (128 KiB), so a block comes from
/// the thread's arena, not from a mapping of its own.
const BLOCK: usize = 120 * 1024;

/// What a decoding thread's arena is assumed to grow by per byte of JSON
/// decoded: measured 4.5 for the benchmark's ConfigMaps and 14 for its Pods
/// (the pages a restore's arenas grew by, `strace`); 8 left 2–3 % of the
/// system calls.
const HEAP_PER_JSON_BYTE: usize = 8;
/// How much an arena grows by at a time, at most.
const MAX_STEP: usize = 32 << 20;

/// Free arena space kept ahead of one thread's allocations.
#[derive(Debug, Default)]
pub struct HeapReserve {
    /// The last block allocated (the highest of the arena): holding it keeps
    /// the free space below it from being trimmed. Dropping the reserve
    /// lets it go.
    pin: Option<Vec<u8>>,
    /// Bytes of the last growth not yet assumed taken.
    ahead: usize,
    /// Off on the main thread (see the module's documentation), known at
    /// the first batch (a reserve may be made on another thread than the
    /// one it serves); see [`on_main_thread`].
    enabled: Option<bool>,
}

impl HeapReserve {
    /// After decoding `json_bytes` of JSON into objects that stay: keeps
    /// room for another three to eight batches like it (it grows again once
    /// a third is left), so a small list reserves little.
    pub fn reserve_for(&mut self, json_bytes: usize) {
        if !cfg!(all(target_os = "linux", target_env = "gnu")) {
            return;
        }
        let heap = json_bytes.saturating_mul(HEAP_PER_JSON_BYTE);
        let enabled = *self.enabled.get_or_insert_with(|| !on_main_thread());
        if enabled && heap > 0 {
            self.taken(heap, heap.saturating_mul(8).min(MAX_STEP));
        }
    }

    /// Notes that about `taken` bytes were allocated since the last call,
    /// and grows the arena by `step` once less than a third of the last
    /// growth is left; answers whether it grew.
    fn taken(&mut self, taken: usize, step: usize) -> bool {
        self.ahead = self.ahead.saturating_sub(taken);
        if self.ahead >= step / 3 {
            return false;
        }
        // `black_box`: the blocks must really be allocated.
        let mut blocks: Vec<Vec<u8>> = (0..step.div_ceil(BLOCK).max(1))
            .map(|_| std::hint::black_box(Vec::with_capacity(BLOCK)))
            .collect();
        let pin = blocks.pop();
        drop(blocks);
        // The previous pin is freed only now, into the space below the new one.
        self.pin = pin;
        self.ahead = step;
        true
    }
}

/// Whether the calling thread is the process's first one, whose arena is
/// glibc's main arena: on Linux its thread id is the process id, which
/// `/proc/thread-self` (`<pid>/task/<tid>`) tells. Without `/proc`, by its
/// name: Rust names it `main` when Rust's `main` is the program's entry
/// (a program embedding Rust from C would not be seen).
fn on_main_thread() -> bool {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|link| is_main_task(&link.to_string_lossy()))
        .unwrap_or_else(|| std::thread::current().name() == Some("main"))
}

/// `<pid>/task/<tid>`: whether the thread is the main one (`None`: not such
/// a path).
fn is_main_task(link: &str) -> Option<bool> {
    let mut parts = link.split('/');
    let (pid, task, tid) = (parts.next()?, parts.next()?, parts.next()?);
    if task != "task" || parts.next().is_some() {
        return None;
    }
    let (pid, tid) = (pid.parse::<u32>().ok()?, tid.parse::<u32>().ok()?);
    Some(pid == tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_first_then_only_when_less_than_a_third_is_left() {
        let step = 4 * BLOCK;
        let mut r = HeapReserve::default();
        assert!(r.taken(0, step), "nothing ahead at first");
        assert_eq!(r.ahead, step);
        assert!(r.pin.as_ref().is_some_and(|p| p.capacity() >= BLOCK));
        assert!(!r.taken(step / 2, step), "half is left");
        assert!(!r.taken(step / 6 - 1, step), "just over a third is left");
        assert!(r.taken(2, step), "under a third is left");
        assert_eq!(r.ahead, step);
        assert!(r.taken(10 * step, step), "more taken than grown");
    }

    #[test]
    fn off_on_the_main_thread_and_small_batches_reserve_little() {
        let mut r = HeapReserve {
            enabled: Some(false),
            ..HeapReserve::default()
        };
        r.reserve_for(1 << 20);
        assert!(r.pin.is_none(), "the main thread's arena needs no reserve");
        let mut r = HeapReserve {
            enabled: Some(true),
            ..HeapReserve::default()
        };
        r.reserve_for(0);
        assert!(r.pin.is_none(), "nothing decoded, nothing reserved");
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            r.reserve_for(1000);
            assert_eq!(r.ahead, 1000 * HEAP_PER_JSON_BYTE * 8);
            r.reserve_for(100 << 20);
            assert_eq!(r.ahead, MAX_STEP, "a step is capped");
        }
    }

    #[test]
    fn the_main_task_is_the_one_whose_id_is_the_process_id() {
        assert_eq!(is_main_task("4242/task/4242"), Some(true));
        assert_eq!(is_main_task("4242/task/4243"), Some(false));
        for odd in [
            "",
            "4242",
            "4242/task",
            "4242/tasks/4242",
            "x/task/4242",
            "1/task/1/2",
        ] {
            assert_eq!(is_main_task(odd), None, "{odd:?}");
        }
    }

    /// Threads spawned here are never the main one, whatever their name
    /// (the main thread's arena needs no reserve).
    #[test]
    fn a_spawned_thread_named_main_is_not_the_main_one() {
        let enabled = |name: &str| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(|| {
                    let mut r = HeapReserve::default();
                    r.reserve_for(1);
                    r.enabled
                })
                .expect("spawn")
                .join()
                .expect("join")
        };
        let gnu = cfg!(all(target_os = "linux", target_env = "gnu"));
        let proc_mounted = std::fs::read_link("/proc/thread-self").is_ok();
        assert_eq!(enabled("main"), gnu.then_some(proc_mounted));
        assert_eq!(enabled("decoder"), gnu.then_some(true));
    }
}
