//! Growing a decoding thread's glibc arena ahead of its allocations.
//!
//! glibc gives every thread but the main one an arena of its own and grows
//! it by an `mprotect` of just the pages each allocation lacks (its
//! `top_pad` applies only to the main arena), under the process's address
//! space lock. A thread decoding many objects for a cache allocates them all
//! at once: one snapshot restore of 100k ConfigMaps made 330 000 such
//! calls, one page each, and most of its decoding threads' time went to them
//! and to waiting for the lock (BENCHMARKS.md, "Growing the decoding
//! threads' arenas"). The main thread's arena grows by `brk` with a 128 KiB
//! pad, so it needs none of this.
//!
//! A [`HeapReserve`] allocates blocks just under glibc's mmap threshold
//! ahead of the decoding, then frees all but the last: the arena keeps that
//! much free space (its pages untouched but the blocks' headers, so not
//! resident), which the decoded objects then take without a system call,
//! and the block held back stops glibc from trimming the space away. No
//! setting or crate does this for a library (`mallopt` is process-wide and
//! `unsafe`); other allocators only see a few large blocks come and go.

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
    /// the free space below it from being trimmed.
    pin: Option<Vec<u8>>,
    /// Bytes of the last growth not yet assumed taken.
    ahead: usize,
    /// Off on the main thread (see the module's documentation); known at
    /// the first batch (the reserve may be made on another thread).
    on: Option<bool>,
}

impl HeapReserve {
    /// Before (or after) decoding `json_bytes` of JSON into objects that
    /// stay: keeps room for about eight more such batches, so a small list
    /// reserves little.
    pub fn decoding(&mut self, json_bytes: usize) {
        let heap = json_bytes.saturating_mul(HEAP_PER_JSON_BYTE);
        let on = *self
            .on
            .get_or_insert_with(|| std::thread::current().name() != Some("main"));
        if on && heap > 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_first_then_only_when_less_than_a_third_is_left() {
        let step = 4 * BLOCK;
        let mut r = HeapReserve::default();
        assert!(r.taken(0, step), "nothing ahead at first");
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
            on: Some(false),
            ..HeapReserve::default()
        };
        r.decoding(1 << 20);
        assert!(r.pin.is_none(), "the main thread's arena needs no reserve");
        let mut r = HeapReserve::default();
        r.decoding(0);
        assert!(r.pin.is_none(), "nothing decoded, nothing reserved");
        assert_eq!(r.on, Some(true), "tests run on threads of their own");
        r.decoding(1000);
        assert_eq!(r.ahead, 1000 * HEAP_PER_JSON_BYTE * 8);
        r.decoding(100 << 20);
        assert_eq!(r.ahead, MAX_STEP, "a step is capped");
    }
}
