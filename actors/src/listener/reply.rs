//! The listener's answers to the Indexer: given at once, or held by the
//! delivery until it releases them.

use futures::channel::oneshot;

use super::delivery::Answers;
use super::messages::ListenerGone;
use crate::answer::Answer;

/// A held answer to the Indexer.
pub(super) type Reply = oneshot::Sender<Result<(), ListenerGone>>;

/// Sends held answers.
#[inline]
pub(super) fn answer(answers: Answers<Reply>) {
    answers.send(|reply, outcome| {
        let _ = reply.send(outcome);
    });
}

/// An answer that comes once the delivery releases what `hold` hands it.
pub(super) fn held(hold: impl FnOnce(Reply)) -> Answer<Result<(), ListenerGone>> {
    let (tx, rx) = oneshot::channel();
    hold(tx);
    Answer::Later(rx)
}
