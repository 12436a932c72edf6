//! Workers waiting for a key, and how a ready key reaches one of them: as a
//! [`Lease`], oldest waiter first (WQ-3), put back when it reaches nobody
//! (PQ-9).

use std::collections::VecDeque;
use std::hash::Hash;
use std::time::Instant;

use actix::WeakRecipient;
use actix::dev::OneshotSender;

use super::messages::{Lease, Release};
use super::queue::{Get, Ticket};
use super::rate_limiting::RateLimitingQueue;

/// A waiting worker's reply.
pub(super) type Waiter<K> = OneshotSender<Option<Lease<K>>>;

/// Workers waiting for a key, oldest first; answered in order.
pub(super) struct Waiters<K: Send + 'static> {
    waiting: VecDeque<Waiter<K>>,
}

impl<K: Clone + Eq + Hash + Send + 'static> Waiters<K> {
    pub(super) fn new() -> Self {
        Waiters {
            waiting: VecDeque::new(),
        }
    }

    pub(super) fn push(&mut self, waiter: Waiter<K>) {
        self.waiting.push_back(waiter);
    }

    /// Hands ready keys to waiting workers (leases that release to `me`),
    /// and `None` to every one once the queue is shut down and empty.
    pub(super) fn serve(
        &mut self,
        queue: &mut RateLimitingQueue<K>,
        now: Instant,
        me: impl Fn() -> WeakRecipient<Release<K>>,
    ) {
        loop {
            while self.waiting.front().is_some_and(|w| w.is_closed()) {
                self.waiting.pop_front();
            }
            let Some(waiter) = self.waiting.pop_front() else {
                return;
            };
            match queue.get(now) {
                Get::Item(ticket) => {
                    Self::hand_out(queue, waiter, ticket, me());
                }
                Get::Empty => {
                    self.waiting.push_front(waiter);
                    return;
                }
                Get::ShutDown => {
                    let _ = waiter.send(None);
                    for waiter in self.waiting.drain(..) {
                        let _ = waiter.send(None);
                    }
                    return;
                }
            }
        }
    }

    /// Sends `ticket` to `waiter`, leased; if the worker left between the
    /// check and the send, the key goes back where it was (not an add, which
    /// a shutting-down queue would ignore). Answers whether it was sent.
    pub(super) fn hand_out(
        queue: &mut RateLimitingQueue<K>,
        waiter: Waiter<K>,
        ticket: Ticket<K>,
        me: WeakRecipient<Release<K>>,
    ) -> bool {
        match waiter.send(Some(Lease::new(ticket, me))) {
            Ok(()) => true,
            Err(lease) => {
                if let Some(lease) = lease {
                    queue.put_back(&lease.into_ticket().key);
                }
                false
            }
        }
    }
}
