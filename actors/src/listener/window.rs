//! How much a listener sends its subscriber per handler call, and how much
//! may be unhandled at once.
//!
//! One event per call with up to `depth` of them in the subscriber's mailbox
//! ([`CallShape::Events`]; depth 1 is one at a time), or batches of up to
//! `max` events, one or two at a time ([`CallShape::Batches`]). Events go in
//! groups of at most half the depth (rounded up): all but the last unanswered, the last
//! answered, and that one answer acknowledges the group (the subscriber's
//! mailbox hands them over in order), so there is one reply channel per group
//! rather than per event, and the next group is sent while the subscriber
//! handles the first.

/// The shape of a listener's handler calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallShape {
    /// One event per call, at most `depth` (at least 1) unhandled at once.
    Events {
        /// Most events sent and not yet handled.
        depth: usize,
    },
    /// Batches of at most `max` (at least 1) events, at most `calls` (at
    /// least 1) unhandled at once: one for an actor (on its thread), two for
    /// a feed read on another thread, so the next batch is made while the
    /// consumer works on the last one.
    Batches {
        /// Most events in one batch.
        max: usize,
        /// Most batches sent and not yet handled.
        calls: usize,
    },
}

/// The handler calls of one listener in flight (see the module doc).
#[derive(Debug, Clone)]
pub struct Window {
    /// Depth and batch size are at least 1.
    shape: CallShape,
    /// Events sent and not yet handled; at most `depth` for [`CallShape::Events`].
    events: usize,
    /// Handler calls sent and not returned; at most 1 for [`CallShape::Batches`].
    calls: usize,
}

impl Window {
    /// An empty window; a depth or batch size of 0 is raised to 1.
    pub fn new(shape: CallShape) -> Self {
        let shape = match shape {
            CallShape::Events { depth } => CallShape::Events {
                depth: depth.max(1),
            },
            CallShape::Batches { max, calls } => CallShape::Batches {
                max: max.max(1),
                calls: calls.max(1),
            },
        };
        Window {
            shape,
            events: 0,
            calls: 0,
        }
    }

    /// Most events the next call may carry; 0 while the window is full.
    #[inline]
    pub fn next_call_max(&self) -> usize {
        match self.shape {
            CallShape::Events { depth } => (depth - self.events).min(depth.div_ceil(2)),
            CallShape::Batches { max, calls } if self.calls < calls => max,
            CallShape::Batches { .. } => 0,
        }
    }

    /// A call of `events` events (at least 1, at most [`Window::next_call_max`]) was sent.
    #[inline]
    pub fn sent(&mut self, events: usize) {
        self.events += events;
        self.calls += 1;
    }

    /// A call of `events` events returned.
    #[inline]
    pub fn returned(&mut self, events: usize) {
        self.events = self.events.saturating_sub(events);
        self.calls = self.calls.saturating_sub(1);
    }

    /// Events sent and not yet handled.
    #[inline]
    pub fn in_flight_events(&self) -> usize {
        self.events
    }

    /// True when no call is in flight.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }

    /// The shape of the calls.
    #[inline]
    pub fn shape(&self) -> CallShape {
        self.shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_at_a_time_waits_for_each_call() {
        let mut w = Window::new(CallShape::Events { depth: 0 });
        assert_eq!(w.next_call_max(), 1);
        w.sent(1);
        assert_eq!(w.next_call_max(), 0);
        w.returned(1);
        assert!(w.is_empty());
        assert_eq!(w.next_call_max(), 1);
    }

    #[test]
    fn pipelined_events_go_in_groups_of_half_the_depth_up_to_the_depth() {
        let mut w = Window::new(CallShape::Events { depth: 8 });
        assert_eq!(w.next_call_max(), 4);
        w.sent(4);
        assert_eq!(w.next_call_max(), 4);
        w.sent(3);
        assert_eq!(w.next_call_max(), 1, "the depth bounds what is unhandled");
        w.sent(1);
        assert_eq!(w.next_call_max(), 0);
        assert_eq!(w.in_flight_events(), 8);
        w.returned(4);
        assert_eq!(w.next_call_max(), 4);
        let mut odd = Window::new(CallShape::Events { depth: 5 });
        assert_eq!(odd.next_call_max(), 3);
        odd.sent(3);
        assert_eq!(odd.next_call_max(), 2);
    }

    #[test]
    fn batches_for_a_feed_go_two_at_a_time() {
        let mut w = Window::new(CallShape::Batches { max: 3, calls: 2 });
        w.sent(3);
        assert_eq!(
            w.next_call_max(),
            3,
            "a second batch while the first is out"
        );
        w.sent(1);
        assert_eq!(w.next_call_max(), 0);
        assert_eq!(w.in_flight_events(), 4);
        w.returned(3);
        assert_eq!(w.next_call_max(), 3);
    }

    #[test]
    fn one_batch_at_a_time_of_at_most_max() {
        let mut w = Window::new(CallShape::Batches { max: 3, calls: 1 });
        assert_eq!(w.next_call_max(), 3);
        w.sent(2);
        assert_eq!(w.next_call_max(), 0);
        assert_eq!(w.in_flight_events(), 2);
        w.returned(2);
        assert!(w.is_empty());
        assert_eq!(w.next_call_max(), 3);
    }
}
