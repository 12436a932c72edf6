//! How a DeltaFIFO is configured: its ordering, batch sizes and high
//! watermark.

/// In which order the DeltaFIFO hands changes to the Indexer; see the
/// [module documentation](super) for when to pick which.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FifoOrdering {
    /// client-go's classic DeltaFIFO ([`DeltaQueue`](super::DeltaQueue),
    /// spec 1.3): a key's pending deltas travel together, at the place of
    /// its oldest pending change; a relist's deletes follow its items.
    #[default]
    Merged,
    /// client-go's RealFIFO ([`RealFifo`](super::RealFifo), spec 1.4, the
    /// default queue since client-go 1.33): every delta in arrival order
    /// across keys; a relist's deletes come before its items.
    Arrival,
}

/// Tuning of the DeltaFIFO actor.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct FifoOptions {
    /// Most keys handed to the Indexer in one batch.
    pub batch_size: usize,
    /// The same until the initial list is processed (DF-15). The Indexer
    /// publishes its cache once per batch, and every publish makes the next
    /// writes copy the tree nodes they touch: with 256-key batches that was
    /// ~9 % of a 100k-object sync's CPU (BENCHMARKS.md). Listeners still get
    /// the events in chunks of 256. A first list's pages wait until half
    /// this many keys are queued (at most 250 ms; DF-15a).
    pub initial_batch_size: usize,
    /// Queued deltas above which the Reflector is held back.
    pub high_watermark: usize,
    /// Merged per key (the default) or in arrival order.
    pub ordering: FifoOrdering,
}

impl Default for FifoOptions {
    fn default() -> Self {
        FifoOptions {
            batch_size: 256,
            initial_batch_size: 16_384,
            high_watermark: 16_384,
            ordering: FifoOrdering::Merged,
        }
    }
}

impl FifoOptions {
    /// Most keys handed to the Indexer in one batch.
    pub const fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Most keys per batch until the initial list is processed.
    pub const fn initial_batch_size(mut self, initial_batch_size: usize) -> Self {
        self.initial_batch_size = initial_batch_size;
        self
    }

    /// Queued deltas above which the Reflector is held back.
    pub const fn high_watermark(mut self, high_watermark: usize) -> Self {
        self.high_watermark = high_watermark;
        self
    }

    /// Merged per key ([`FifoOrdering::Merged`], the default) or in arrival
    /// order ([`FifoOrdering::Arrival`]).
    pub const fn ordering(mut self, ordering: FifoOrdering) -> Self {
        self.ordering = ordering;
        self
    }

    /// Most keys per batch: `batch_size` once the initial list is
    /// processed (`synced`), `initial_batch_size` until then.
    pub const fn most_per_batch(&self, synced: bool) -> usize {
        if synced {
            self.batch_size
        } else {
            self.initial_batch_size
        }
    }

    /// The options with batch sizes ≥ 1 and `high_watermark ≥ batch_size`
    /// (a zero batch would never pop; a zero watermark never answer).
    pub fn sanitized(self) -> Self {
        let batch_size = self.batch_size.max(1);
        FifoOptions {
            batch_size,
            initial_batch_size: self.initial_batch_size.max(1),
            high_watermark: self.high_watermark.max(batch_size),
            ordering: self.ordering,
        }
    }
}
