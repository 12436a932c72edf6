//! A controller's life after start: waits until every subscription synced
//! (CTL-1), admits the scope's keys and lets the workers run, then follows
//! every change of scope (CTL-10..CTL-12) until the controller stops.

use std::sync::Arc;

use actix::Addr;
use kinformer_actors::workqueue::WorkQueue;
use kinformer_actors::{Object, ObjectKey};
use tokio::sync::watch;

use super::scope::{self, Ownership, Scope, ScopeChannels};
use super::worker::Phase;
use crate::shard::Assignment;

/// What [`govern`] moves.
pub(crate) struct Governed<K> {
    pub(crate) synced: Vec<watch::Receiver<bool>>,
    pub(crate) phase: watch::Sender<Phase>,
    pub(crate) name: Arc<str>,
    pub(crate) channels: ScopeChannels,
    pub(crate) ownership: Ownership<K>,
    pub(crate) queue: Addr<WorkQueue<ObjectKey>>,
}

/// Runs until the controller stops or its scope can no longer change.
pub(crate) async fn govern<K: Object>(governed: Governed<K>) {
    let Governed {
        synced,
        phase,
        name,
        mut channels,
        ownership,
        queue,
    } = governed;
    let mut stopping = phase.subscribe();
    for mut s in synced {
        tokio::select! {
            r = s.wait_for(|synced| *synced) => {
                if r.is_err() {
                    tracing::warn!(controller = %name, "a subscription ended before it synced: no reconcile will run");
                    return;
                }
            }
            _ = stopping.wait_for(|p| *p == Phase::Stopping) => return,
        }
    }
    let mut current = Scope::Nothing;
    loop {
        let new = channels.source.borrow_and_update().clone();
        let queued = scope::change(&channels, &ownership, &queue, &current, new.clone()).await;
        tracing::debug!(controller = %name, scope = ?new, queued, "scope changed");
        current = new;
        let started = phase.send_if_modified(|p| {
            let starting = *p == Phase::Syncing;
            if starting {
                *p = Phase::Running;
            }
            starting
        });
        if !started && *phase.borrow() == Phase::Stopping {
            break;
        }
        tokio::select! {
            r = channels.source.changed() => if r.is_err() { return },
            _ = stopping.wait_for(|p| *p == Phase::Stopping) => break,
        }
    }
    follow_while_stopping(&mut channels).await;
}

/// While the controller stops, reconciles may run on until the stop's
/// deadline: a scope that shrinks meanwhile (leadership lost, shard moved)
/// must still cancel theirs at once (CTL-11), or a successor could
/// reconcile the same keys alongside. Nothing is queued any more (CTL-5).
/// Ends when the scope can no longer change or no worker is left to tell.
async fn follow_while_stopping(channels: &mut ScopeChannels) {
    loop {
        tokio::select! {
            r = channels.source.changed() => if r.is_err() { return },
            () = channels.work.closed() => return,
        }
        let new = channels.source.borrow_and_update().clone();
        channels.work.send_replace(new.clone());
        channels.feed.send_replace(new);
    }
}

/// The scope of a controller run by a leader elector (CTL-10): every key
/// while `leading`, none otherwise. Ends when the elector does (its
/// leadership then reads `false`).
pub(crate) fn leader_scope(mut leading: watch::Receiver<bool>) -> watch::Receiver<Scope> {
    let of = |leading: bool| if leading { Scope::All } else { Scope::Nothing };
    let (tx, rx) = watch::channel(of(*leading.borrow_and_update()));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = leading.changed() => if r.is_err() {
                    tx.send_replace(Scope::Nothing);
                    return;
                },
                () = tx.closed() => return,
            }
            let now = *leading.borrow_and_update();
            tx.send_replace(of(now));
        }
    });
    rx
}

/// The scope of a sharded controller (CTL-10): the keys `assignment` gives
/// this replica now. Ends when the member does (its assignment is then
/// nothing).
pub(crate) fn shard_scope(mut assignment: watch::Receiver<Assignment>) -> watch::Receiver<Scope> {
    let of = |a: &Assignment| {
        if a.is_nothing() {
            Scope::Nothing
        } else {
            let a = a.clone();
            Scope::Keys(Arc::new(move |key: &ObjectKey| a.owns(key.as_str())))
        }
    };
    let (tx, rx) = watch::channel(of(&assignment.borrow_and_update()));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = assignment.changed() => if r.is_err() {
                    tx.send_replace(Scope::Nothing);
                    return;
                },
                () = tx.closed() => return,
            }
            let now = of(&assignment.borrow_and_update());
            tx.send_replace(now);
        }
    });
    rx
}
