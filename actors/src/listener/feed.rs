//! A subscriber outside actix (a `Stream` read by a tokio task): the
//! listener pushes its handler calls into a channel, and the consumer counts
//! what it took. A call is answered once the consumer took it, so the
//! listener's credits, windows and answers work as with an actor, without an
//! actor, a message or a one-shot channel per call: the consumer wakes the
//! listener only when the call the listener waits for was taken.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use actix::MailboxError;
use futures::task::AtomicWaker;
use tokio::sync::mpsc;

/// What both ends share.
#[derive(Debug, Default)]
struct Shared {
    /// Calls taken by the consumer, counted from 1.
    taken: AtomicU64,
    /// The call the listener waits for: the consumer wakes it once `taken`
    /// reaches it. Stored before `taken` is read again (both `SeqCst`), so
    /// either the listener sees the take or the consumer sees the wish.
    wanted: AtomicU64,
    waker: AtomicWaker,
    /// The consumer is gone: calls in flight are answered as failed.
    closed: AtomicBool,
    /// It went by unsubscribing (not lost): set before `closed`.
    unsubscribed: AtomicBool,
}

/// The listener's end of a feed.
#[derive(Debug)]
pub struct FeedSender<M> {
    tx: mpsc::UnboundedSender<M>,
    shared: Arc<Shared>,
    /// Calls pushed, counted from 1 (only the listener pushes).
    pushed: AtomicU64,
}

/// The consumer's end of a feed. A call counts as taken once the consumer
/// is done with it: when it asks for the next one (as an actor's handler
/// call counts once it returned).
#[derive(Debug)]
pub struct FeedReceiver<M> {
    rx: mpsc::UnboundedReceiver<M>,
    shared: Arc<Shared>,
    /// Calls received, counted from 1.
    received: u64,
    /// Calls taken (published to the listener): `received`, or one less
    /// while the consumer works on the last one.
    taken: u64,
}

/// A new feed's two ends.
pub fn feed<M>() -> (FeedSender<M>, FeedReceiver<M>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::default());
    (
        FeedSender {
            tx,
            shared: shared.clone(),
            pushed: AtomicU64::new(0),
        },
        FeedReceiver {
            rx,
            shared,
            received: 0,
            taken: 0,
        },
    )
}

impl<M> FeedSender<M> {
    /// Pushes `message`, unanswered (a gone consumer is noticed at the next
    /// answered call).
    pub(super) fn push(&self, message: M) {
        self.pushed.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(message);
    }

    /// Pushes `message`; the answer resolves once the consumer took it, or
    /// fails once the consumer is gone.
    pub(super) fn call(&self, message: M) -> Taken {
        self.push(message);
        Taken {
            shared: self.shared.clone(),
            seq: self.pushed.load(Ordering::Relaxed),
        }
    }

    /// Whether the consumer went by unsubscribing ([`FeedReceiver::unsubscribing`]):
    /// a call that failed because of it is not a lost subscriber.
    pub fn unsubscribed(&self) -> bool {
        self.shared.unsubscribed.load(Ordering::SeqCst)
    }

    /// Whether the consumer is still there.
    pub fn is_connected(&self) -> bool {
        !self.shared.closed.load(Ordering::SeqCst) && !self.tx.is_closed()
    }
}

impl<M> FeedReceiver<M> {
    /// The consumer is about to go by unsubscribing: calls in flight will
    /// fail, and the listener must not take that for a lost subscriber.
    pub fn unsubscribing(&self) {
        self.shared.unsubscribed.store(true, Ordering::SeqCst);
    }

    /// The next call; asking for it counts the previous one as taken.
    /// `None` once the listener is gone.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<M>> {
        if self.taken < self.received {
            self.taken = self.received;
            let s = &self.shared;
            s.taken.store(self.taken, Ordering::SeqCst);
            if s.wanted.load(Ordering::SeqCst) <= self.taken {
                s.waker.wake();
            }
        }
        let message = std::task::ready!(self.rx.poll_recv(cx));
        self.received += u64::from(message.is_some());
        Poll::Ready(message)
    }
}

impl<M> Drop for FeedReceiver<M> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.waker.wake();
    }
}

/// The answer of a call pushed into a feed.
#[derive(Debug)]
pub struct Taken {
    shared: Arc<Shared>,
    seq: u64,
}

impl Taken {
    fn taken(&self) -> bool {
        self.shared.taken.load(Ordering::SeqCst) >= self.seq
    }
}

impl Future for Taken {
    type Output = Result<(), MailboxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.taken() {
            return Poll::Ready(Ok(()));
        }
        let s = &self.shared;
        s.waker.register(cx.waker());
        s.wanted.store(self.seq, Ordering::SeqCst);
        if self.taken() {
            Poll::Ready(Ok(()))
        } else if s.closed.load(Ordering::SeqCst) {
            Poll::Ready(Err(MailboxError::Closed))
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use futures::FutureExt;

    use super::*;

    #[test]
    fn a_call_is_answered_once_taken_and_failed_once_the_consumer_is_gone() {
        let (tx, mut rx) = feed::<u32>();
        let mut cx = Context::from_waker(Waker::noop());
        tx.push(1);
        let mut second = tx.call(2);
        assert!(second.poll_unpin(&mut cx).is_pending());
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(1)));
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(2)));
        assert!(
            second.poll_unpin(&mut cx).is_pending(),
            "received, not done with until the consumer asks again"
        );
        assert!(rx.poll_recv(&mut cx).is_pending());
        assert!(matches!(second.poll_unpin(&mut cx), Poll::Ready(Ok(()))));
        let mut third = tx.call(3);
        assert!(tx.is_connected());
        drop(rx);
        assert!(!tx.is_connected());
        assert!(matches!(
            third.poll_unpin(&mut cx),
            Poll::Ready(Err(MailboxError::Closed))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_consumer_on_another_thread_wakes_the_waiting_listener() {
        let (tx, mut rx) = feed::<u64>();
        let consumer = tokio::spawn(async move {
            let mut sum = 0;
            while let Some(n) = futures::future::poll_fn(|cx| rx.poll_recv(cx)).await {
                sum += n;
            }
            sum
        });
        // Windows of 8, each waited for by its last call: no lost wake-up.
        for window in 0..1000u64 {
            let mut last = None;
            for i in 0..8 {
                last = Some(tx.call(window * 8 + i));
            }
            tokio::time::timeout(std::time::Duration::from_secs(10), last.unwrap())
                .await
                .expect("answered in time")
                .expect("taken");
        }
        drop(tx);
        assert_eq!(consumer.await.unwrap(), (0..8000).sum::<u64>());
    }
}
