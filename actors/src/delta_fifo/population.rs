//! The initial population and the latched HasSynced (DF-15, RF-6), shared
//! by both orderings.
//!
//! A queue is synced once its first mutation is an add, update or delete,
//! or once every item its first relist queued has been popped *and*
//! reported done: client-go latches DeltaFIFO's flag before the last item
//! is processed (the DF-15 note); RealFIFO after (RF-6), as here.

/// Where a queue stands with its initial population.
#[derive(Debug, Default)]
pub(super) struct InitialPopulation {
    /// A first mutation happened.
    populated: bool,
    /// The first mutation is a list whose pages are arriving: its end
    /// completes the initial population.
    open: bool,
    /// Items of the initial population not popped yet.
    unpopped: usize,
    /// Items of the initial population popped, not done yet.
    unfinished: usize,
    /// Latched: once true, true for good.
    synced: bool,
}

impl InitialPopulation {
    /// An add, update or delete: if it is the first mutation, there is no
    /// initial population and the queue is synced at once.
    pub(super) fn mutated(&mut self) {
        if !self.open {
            self.replaced(0);
        }
    }

    /// A page of a list that queued `items` more keys: if the list is the
    /// first mutation, they join the initial population, still open.
    pub(super) fn listed_page(&mut self, items: usize) {
        if !self.populated {
            self.open = true;
            self.unpopped += items;
        }
    }

    /// A relist (or the end of a paged one) that queued `items` more keys:
    /// if it is the first mutation, they complete the initial population
    /// (nothing queued: synced at once).
    pub(super) fn replaced(&mut self, items: usize) {
        if !self.populated {
            self.populated = true;
            self.open = false;
            self.unpopped += items;
            self.latch();
        }
    }

    /// A pop: whether the popped item belongs to the initial population
    /// (client-go's `isInInitialList`).
    pub(super) fn take(&mut self) -> bool {
        let initial = self.unpopped > 0;
        if initial {
            self.unpopped -= 1;
            self.unfinished += 1;
        }
        initial
    }

    /// Whether every item of the initial population has been popped (a
    /// batch that holds initial items stops there).
    pub(super) fn all_taken(&self) -> bool {
        self.unpopped == 0
    }

    /// An initial item was processed (its pop was reported done).
    pub(super) fn finished(&mut self) {
        self.unfinished = self.unfinished.saturating_sub(1);
        self.latch();
    }

    /// True once the initial population has been popped and processed.
    pub(super) fn has_synced(&self) -> bool {
        self.synced
    }

    fn latch(&mut self) {
        if self.populated && self.unpopped == 0 && self.unfinished == 0 {
            self.synced = true;
        }
    }
}
