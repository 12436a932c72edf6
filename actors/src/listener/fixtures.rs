//! Test fixtures shared by the listener's unit tests: events over `u32`
//! states and a seeded pseudo-random sequence.

use std::sync::Arc;

use crate::event::{Cause, Event};
use crate::key::ObjectKey;
use crate::listener::messages::Replay;

/// `key` added at state 1.
pub(super) fn added(key: &str, cause: Cause) -> Event<u32> {
    Event::Added {
        key: key.into(),
        object: Arc::new(1),
        cause,
    }
}

/// `key` updated from state `to - 1` to `to`.
pub(super) fn updated(key: &str, to: u32, cause: Cause) -> Event<u32> {
    Event::Updated {
        key: key.into(),
        old: Arc::new(to - 1).into(),
        new: Arc::new(to),
        cause,
    }
}

/// A seeded xorshift sequence: `next(n)` is in `0..n`.
pub(super) fn seeded() -> impl FnMut(u64) -> u64 {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// A replay of `objects`, in order.
pub(super) fn replay_of<K: Send + Sync + 'static>(objects: Vec<(ObjectKey, Arc<K>)>) -> Replay<K> {
    Replay {
        len: objects.len(),
        objects: Box::new(objects.into_iter()),
    }
}
