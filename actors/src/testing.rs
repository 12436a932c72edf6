//! Test helpers shared by the actors' unit tests.

use actix::prelude::*;
use tokio::sync::watch;

/// Pauses `act`'s mailbox until `gate` opens (a subscriber stalled in its
/// handler); nothing happens when it is open already.
pub fn hold_until_open<A>(act: &A, gate: &watch::Receiver<bool>, ctx: &mut Context<A>)
where
    A: Actor<Context = Context<A>>,
{
    let mut gate = gate.clone();
    if !*gate.borrow() {
        ctx.wait(
            async move {
                let _ = gate.wait_for(|open| *open).await;
            }
            .into_actor(act),
        );
    }
}
