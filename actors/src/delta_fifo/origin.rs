//! Where the initial population comes from: a list, or a snapshot restored
//! from disk, whose adds are `Cause::Restored` (DF-15: only the first list
//! or restore can be the initial population).

/// Invariant: `restoring` implies `restored`; neither holds before `begun`.
#[derive(Debug, Default)]
pub(super) struct PopulationOrigin {
    /// A list or a restore has arrived.
    begun: bool,
    /// The initial population is a restored snapshot (so far).
    restored: bool,
    /// A restored snapshot's pages are arriving, its end not yet.
    restoring: bool,
}

impl PopulationOrigin {
    /// A page of a list, or of a snapshot (`restored`).
    pub(super) fn page(&mut self, restored: bool) {
        if !self.begun {
            self.begun = true;
            self.restored = restored;
            self.restoring = restored;
        } else if !restored {
            self.cut_short();
        }
    }

    /// A list's or a snapshot's end, or a whole one.
    pub(super) fn end(&mut self, restored: bool) {
        if !self.begun {
            self.begun = true;
            self.restored = restored;
        } else if !restored {
            self.cut_short();
        }
        self.restoring = false;
    }

    /// Whether initial items popped now were restored.
    pub(super) fn restored(&self) -> bool {
        self.restored
    }

    /// A list while a snapshot's pages were arriving: the restore was cut
    /// short (the snapshot turned out damaged), so what is listed to
    /// complete the population is `Initial`.
    fn cut_short(&mut self) {
        if self.restoring {
            self.restoring = false;
            self.restored = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_list_is_not_restored_and_a_later_restore_changes_nothing() {
        let mut o = PopulationOrigin::default();
        o.page(false);
        o.end(true);
        assert!(!o.restored());
        let mut o = PopulationOrigin::default();
        o.end(false);
        o.page(true);
        assert!(!o.restored());
    }

    #[test]
    fn a_restore_in_pages_or_whole_is_restored_and_stays_so_after_its_end() {
        let mut o = PopulationOrigin::default();
        o.page(true);
        o.page(true);
        assert!(o.restored());
        o.end(true);
        // A relist after the restore ended (a 410): its items are not
        // initial ones, and restored items still queued stay restored.
        o.page(false);
        o.end(false);
        assert!(o.restored());
        let mut o = PopulationOrigin::default();
        o.end(true);
        o.end(false);
        assert!(o.restored());
    }

    #[test]
    fn a_list_during_a_restore_cuts_it_short() {
        for list_end_only in [false, true] {
            let mut o = PopulationOrigin::default();
            o.page(true);
            if list_end_only {
                o.end(false);
            } else {
                o.page(false);
            }
            assert!(!o.restored(), "{list_end_only}");
        }
    }
}
