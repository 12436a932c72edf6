//! Subscribers that record what they receive: every notification in order,
//! and the view of the world rebuilt from them. They can be slow, held
//! behind a gate, or panic at a chosen event.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kinformer::{Cause, Event, EventBatch};
use tokio::sync::watch;

/// The message of every panic a simulation causes on purpose; any other
/// panic is a divergence.
pub const EXPECTED_PANIC: &str = "kinformer-sim: a subscriber panics on purpose";

/// What a notification was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Event::Added`.
    Added,
    /// `Event::Updated`.
    Updated,
    /// `Event::Deleted`.
    Deleted,
}

/// One recorded notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// What it was.
    pub kind: Kind,
    /// The object's key.
    pub key: String,
    /// The (new) object's resourceVersion; a tombstone's last known one.
    pub rv: Option<String>,
    /// Why it was sent.
    pub cause: Cause,
    /// A delete whose final state is unknown.
    pub tombstone: bool,
}

/// What one subscriber has seen.
#[derive(Debug, Default)]
pub struct Log {
    /// Every notification, in order.
    pub events: Vec<Seen>,
    /// key → resourceVersion, rebuilt from the notifications.
    pub view: BTreeMap<String, String>,
    /// Notifications recorded, whether kept in `events` or not.
    pub count: u64,
    /// Keep only `view` and `count`, not `events` (a long run's memory).
    pub forget_events: bool,
    /// Updates whose `old` (read with `OldObject::get`, which decodes a
    /// compact cache's compressed old state) is not the state the
    /// subscriber last saw, or does not decode: the first few.
    pub wrong_olds: Vec<String>,
}

/// At most this many wrong olds are kept.
const WRONG_OLDS_KEPT: usize = 5;

impl Log {
    /// A log that keeps the view and the count only.
    pub fn view_only() -> SharedLog {
        Arc::new(Mutex::new(Log {
            forget_events: true,
            ..Log::default()
        }))
    }
}

/// A log shared between a subscriber and its checker.
pub type SharedLog = Arc<Mutex<Log>>;

fn rv(o: &ConfigMap) -> Option<String> {
    o.metadata.resource_version.clone()
}

/// Records `event`; answers how many notifications are recorded.
pub fn record(log: &Mutex<Log>, event: &Event<ConfigMap>) -> usize {
    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
    let key = event.key().to_string();
    let seen = match event {
        Event::Added { object, cause, .. } => {
            log.view.insert(key.clone(), rv(object).unwrap_or_default());
            Seen {
                kind: Kind::Added,
                key,
                rv: rv(object),
                cause: *cause,
                tombstone: false,
            }
        }
        Event::Updated {
            old, new, cause, ..
        } => {
            let last_seen = log.view.insert(key.clone(), rv(new).unwrap_or_default());
            let old_rv = old.get().map(|o| rv(&o).unwrap_or_default());
            if old_rv.as_ref().ok() != last_seen.as_ref() && log.wrong_olds.len() < WRONG_OLDS_KEPT
            {
                log.wrong_olds.push(format!(
                    "{key}: update ({cause:?}) to {:?} with old {old_rv:?}, last seen {last_seen:?}",
                    rv(new)
                ));
            }
            Seen {
                kind: Kind::Updated,
                key,
                rv: rv(new),
                cause: *cause,
                tombstone: false,
            }
        }
        Event::Deleted { object, cause, .. } => {
            log.view.remove(&key);
            Seen {
                kind: Kind::Deleted,
                key,
                rv: object.object().and_then(|o| rv(o)),
                cause: *cause,
                tombstone: object.is_final_state_unknown(),
            }
        }
    };
    log.count += 1;
    if !log.forget_events {
        log.events.push(seen);
    }
    log.count as usize
}

/// How a recorder behaves.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Each handler call takes this long.
    pub delay: Option<Duration>,
    /// Handler calls wait while the gate is `false`.
    pub gate: Option<watch::Receiver<bool>>,
    /// Panic at this (1-based) notification.
    pub panic_at: Option<usize>,
}

/// A subscriber for `subscribe` and `subscribe_batches`: records, then
/// answers after its delay and gate.
pub struct Recorder {
    log: SharedLog,
    behaviour: Behaviour,
}

impl Recorder {
    /// Starts one; answers its address and log.
    pub fn start(behaviour: Behaviour) -> (Addr<Recorder>, SharedLog) {
        Self::start_with(behaviour, SharedLog::default())
    }

    /// Starts one recording into `log`.
    pub fn start_with(behaviour: Behaviour, log: SharedLog) -> (Addr<Recorder>, SharedLog) {
        let addr = Recorder {
            log: log.clone(),
            behaviour,
        }
        .start();
        (addr, log)
    }

    fn after(&self, n_before: usize, n: usize) -> ResponseFuture<()> {
        if let Some(at) = self.behaviour.panic_at
            && n_before < at
            && at <= n
        {
            panic!("{EXPECTED_PANIC}");
        }
        let delay = self.behaviour.delay;
        let gate = self.behaviour.gate.clone();
        Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            if let Some(mut gate) = gate {
                let _ = gate.wait_for(|open| *open).await;
            }
        })
    }
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for Recorder {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, event: Event<ConfigMap>, _: &mut Context<Self>) -> Self::Result {
        let n = record(&self.log, &event);
        self.after(n - 1, n)
    }
}

impl Handler<EventBatch<ConfigMap>> for Recorder {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, batch: EventBatch<ConfigMap>, _: &mut Context<Self>) -> Self::Result {
        let before = self.log.lock().unwrap_or_else(|p| p.into_inner()).count as usize;
        let mut n = before;
        for event in batch.iter() {
            n = record(&self.log, event);
        }
        self.after(before, n)
    }
}

/// A subscriber for `subscribe_pipelined` (its work done inside `handle`):
/// while its gate is closed it pauses its mailbox after each event.
pub struct PipelinedRecorder {
    log: SharedLog,
    gate: Option<watch::Receiver<bool>>,
}

impl PipelinedRecorder {
    /// Starts one; answers its address and log.
    pub fn start(gate: Option<watch::Receiver<bool>>) -> (Addr<PipelinedRecorder>, SharedLog) {
        let log = SharedLog::default();
        let addr = PipelinedRecorder {
            log: log.clone(),
            gate,
        }
        .start();
        (addr, log)
    }
}

impl Actor for PipelinedRecorder {
    type Context = Context<Self>;
}

impl Handler<Event<ConfigMap>> for PipelinedRecorder {
    type Result = ();

    fn handle(&mut self, event: Event<ConfigMap>, ctx: &mut Context<Self>) {
        record(&self.log, &event);
        if let Some(gate) = &self.gate
            && !*gate.borrow()
        {
            let mut gate = gate.clone();
            ctx.wait(
                async move {
                    let _ = gate.wait_for(|open| *open).await;
                }
                .into_actor(self),
            );
        }
    }
}
