//! An answer given now or later, without a task per message.
//!
//! actix 0.13's `ResponseFuture` spawns a task for every answer
//! (`actix_rt::spawn` in its `MessageResponse`), even one known at once. At
//! one message per event per hop that showed in profiles: answering the
//! listeners' deliveries in place cut the CPU per event with 100 subscribers
//! by 9 % (BENCHMARKS.md, workload 2). [`Answer`] answers in place and spawns
//! (on the actor's own context) only an answer that has to wait.

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use futures::channel::oneshot;

/// A handler's answer: known now, or sent later on a oneshot channel.
pub enum Answer<T> {
    /// Answered now.
    Now(T),
    /// Answered with what the other end sends. If that end is dropped
    /// unsent (or the actor stops first), the asker gets
    /// `MailboxError::Closed`.
    Later(oneshot::Receiver<T>),
}

impl<T> Answer<T> {
    /// `rx`'s value if it is there already, else an answer waiting for it.
    /// A dropped sender answers `dropped`.
    pub fn from_receiver(mut rx: oneshot::Receiver<T>, dropped: T) -> Self {
        match rx.try_recv() {
            Ok(Some(value)) => Answer::Now(value),
            Ok(None) => Answer::Later(rx),
            Err(oneshot::Canceled) => Answer::Now(dropped),
        }
    }
}

impl<A, M, T> MessageResponse<A, M> for Answer<T>
where
    A: Actor<Context = Context<A>>,
    M: Message<Result = T>,
    T: 'static,
{
    fn handle(self, ctx: &mut Context<A>, tx: Option<OneshotSender<T>>) {
        let Some(tx) = tx else { return };
        match self {
            Answer::Now(value) => {
                let _ = tx.send(value);
            }
            Answer::Later(rx) => {
                ctx.spawn(actix::fut::wrap_future(async move {
                    if let Ok(value) = rx.await {
                        let _ = tx.send(value);
                    }
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Message)]
    #[rtype(result = "u32")]
    struct Ask(Option<u32>);

    /// Answers `Ask(Some(v))` now with `v`; `Ask(None)` later, with what
    /// arrives on `Release`.
    #[derive(Default)]
    struct Responder {
        held: Vec<oneshot::Sender<u32>>,
    }

    impl Actor for Responder {
        type Context = Context<Self>;
    }

    impl Handler<Ask> for Responder {
        type Result = Answer<u32>;

        fn handle(&mut self, Ask(now): Ask, _: &mut Context<Self>) -> Answer<u32> {
            match now {
                Some(v) => Answer::Now(v),
                None => {
                    let (tx, rx) = oneshot::channel();
                    self.held.push(tx);
                    Answer::from_receiver(rx, 0)
                }
            }
        }
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Release(Option<u32>);

    impl Handler<Release> for Responder {
        type Result = ();

        fn handle(&mut self, Release(v): Release, _: &mut Context<Self>) {
            for tx in self.held.drain(..) {
                if let Some(v) = v {
                    let _ = tx.send(v);
                }
            }
        }
    }

    #[actix::test]
    async fn answers_now_later_or_closed_when_dropped() {
        let addr = Responder::default().start();
        assert_eq!(addr.send(Ask(Some(7))).await.unwrap(), 7);
        let mut later = Box::pin(addr.send(Ask(None)));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert!(
            futures::poll!(&mut later).is_pending(),
            "held until released"
        );
        addr.send(Release(Some(9))).await.unwrap();
        assert_eq!(later.await.unwrap(), 9);
        let dropped = addr.send(Ask(None));
        addr.send(Release(None)).await.unwrap();
        assert!(matches!(dropped.await, Err(MailboxError::Closed)));
    }

    #[test]
    fn a_value_already_sent_is_answered_now() {
        let (tx, rx) = oneshot::channel();
        tx.send(3).unwrap();
        assert!(matches!(Answer::from_receiver(rx, 0), Answer::Now(3)));
        let (tx, rx) = oneshot::channel::<u32>();
        drop(tx);
        assert!(matches!(Answer::from_receiver(rx, 5), Answer::Now(5)));
        let (_tx, rx) = oneshot::channel::<u32>();
        assert!(matches!(Answer::from_receiver(rx, 5), Answer::Later(_)));
    }
}
