//! Credit for the deliveries the Indexer sends a listener without waiting
//! for an answer.
//!
//! An answered `Deliver` per listener per event costs a reply channel, a
//! reply future in the Indexer and a wake-up; with 100 subscribers that was
//! most of the fan-out's cost beyond kube-runtime's (BENCHMARKS.md, workload
//! 2). Instead the listener publishes how much its queue can still take and
//! how many deliveries it has handled, and the Indexer sends unanswered
//! (`do_send`) while what it has in the listener's mailbox fits in that
//! room. Only when it does not fit does it send an answered `Deliver`, and
//! wait for it, as before: a full `Block` listener still holds the
//! pipeline, at the same bound.
//!
//! actix's mailbox bound is no help here: `do_send` ignores it (actix #515),
//! so the bound is this count, kept by the producer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Most unanswered deliveries in one listener's mailbox (each up to a chunk
/// of events). Well below the listener's mailbox capacity, so an answered
/// send after them is never parked by actix (which would let later messages
/// overtake it).
pub const UNANSWERED_MAX: u64 = 16;

/// One listener's side: written by the listener, read by the Indexer
/// (possibly on another thread).
#[derive(Debug)]
pub struct DeliveryCredit {
    /// `Deliver` messages the listener has handled.
    taken_messages: AtomicU64,
    /// The events of those messages.
    taken_events: AtomicU64,
    /// Events its queue can still take without parking any.
    room: AtomicUsize,
}

impl DeliveryCredit {
    /// A credit with `room` free slots (`usize::MAX`: never full).
    pub fn new(room: usize) -> Arc<Self> {
        Arc::new(DeliveryCredit {
            taken_messages: AtomicU64::new(0),
            taken_events: AtomicU64::new(0),
            room: AtomicUsize::new(room),
        })
    }

    /// The listener's queue can now take `room` more events.
    pub fn set_room(&self, room: usize) {
        self.room.store(room, Ordering::Release);
    }

    /// The listener handled a `Deliver` of `events` events (after queueing
    /// them and publishing its room: the Indexer reads in the other order).
    pub fn took(&self, events: usize) {
        self.taken_events
            .fetch_add(events as u64, Ordering::Release);
        self.taken_messages.fetch_add(1, Ordering::Release);
    }
}

/// The Indexer's side of one listener's credit: what it sent.
#[derive(Debug)]
pub struct CreditLine {
    credit: Arc<DeliveryCredit>,
    sent_messages: u64,
    sent_events: u64,
}

impl CreditLine {
    /// The producer's line on `credit`.
    pub fn new(credit: Arc<DeliveryCredit>) -> Self {
        CreditLine {
            credit,
            sent_messages: 0,
            sent_events: 0,
        }
    }

    /// Whether a `Deliver` of `events` events may go unanswered now: fewer
    /// than [`UNANSWERED_MAX`] are in the mailbox, and they fit in the
    /// queue's room with the ones still in the mailbox. Counts it as sent
    /// if so.
    pub fn try_unanswered(&mut self, events: usize) -> bool {
        // Taken counts first: a count seen implies the room published before
        // it. A room newer than the counts is either larger (the subscriber
        // took some) or already lowered by events still counted as in the
        // mailbox; both err on the safe side.
        let taken_messages = self.credit.taken_messages.load(Ordering::Acquire);
        let taken_events = self.credit.taken_events.load(Ordering::Acquire);
        let room = self.credit.room.load(Ordering::Acquire);
        let in_mailbox = self.sent_events.saturating_sub(taken_events);
        let fits = self.sent_messages.saturating_sub(taken_messages) < UNANSWERED_MAX
            && in_mailbox.saturating_add(events as u64) <= room as u64;
        if fits {
            self.sent(events);
        }
        fits
    }

    /// Counts a `Deliver` sent answered (the listener counts every one it handles).
    pub fn sent(&mut self, events: usize) {
        self.sent_messages += 1;
        self.sent_events += events as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unanswered_deliveries_fit_in_the_room_with_those_in_the_mailbox() {
        let credit = DeliveryCredit::new(10);
        let mut line = CreditLine::new(Arc::clone(&credit));
        assert!(line.try_unanswered(4));
        assert!(line.try_unanswered(6));
        // 10 in the mailbox, room 10: nothing more fits until the listener takes them.
        assert!(!line.try_unanswered(1));
        // The listener queued the first 4 (room 6 left) and counted them.
        credit.set_room(6);
        credit.took(4);
        assert!(
            !line.try_unanswered(1),
            "6 still in the mailbox fill the 6 slots"
        );
        credit.set_room(4);
        credit.took(6);
        assert!(line.try_unanswered(4));
        assert!(!line.try_unanswered(1));
        // The subscriber took everything.
        credit.set_room(10);
        credit.took(4);
        assert!(line.try_unanswered(10));
    }

    #[test]
    fn an_answered_delivery_counts_as_in_the_mailbox_until_taken() {
        let credit = DeliveryCredit::new(8);
        let mut line = CreditLine::new(Arc::clone(&credit));
        line.sent(8);
        assert!(!line.try_unanswered(1));
        credit.set_room(0);
        credit.took(8);
        assert!(!line.try_unanswered(1), "no room left");
        credit.set_room(8);
        assert!(line.try_unanswered(8));
    }

    #[test]
    fn a_never_full_queue_still_bounds_the_messages_in_the_mailbox() {
        let credit = DeliveryCredit::new(usize::MAX);
        let mut line = CreditLine::new(Arc::clone(&credit));
        for _ in 0..UNANSWERED_MAX {
            assert!(line.try_unanswered(256));
        }
        assert!(!line.try_unanswered(1));
        credit.took(256);
        assert!(line.try_unanswered(256));
        assert!(!line.try_unanswered(1));
    }
}
