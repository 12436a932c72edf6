//! Watch streams: replay, synthetic initial events, live fan-out, bookmarks, timeouts,
//! selector transitions and the watch faults, encoded as newline-delimited JSON.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::encode::{CHUNK_BYTES, ObjectForm, bookmark_line, error_line, push_event};
use crate::faults::{MALFORMED_LINE, WatchFaultState};
use crate::history::{Event, EventKind};
use crate::object::ObjectRecord;
use crate::resource::ResourceType;
use crate::selector::ObjectFilter;
use crate::status::ApiError;
use crate::store::{Store, WatchRegistration, WatcherShared};

/// Everything a watch stream needs besides its registration.
pub struct WatchSpec {
    /// Resource index.
    pub resource: usize,
    /// Kind for BOOKMARK objects.
    pub kind: String,
    /// apiVersion for BOOKMARK objects.
    pub api_version: String,
    /// Which objects this watcher sees.
    pub filter: ObjectFilter,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// Whether to end the initial events with an `initial-events-end` BOOKMARK.
    pub initial_events_end: bool,
    /// When the watch ends.
    pub deadline: Instant,
    /// Periodic bookmark interval.
    pub bookmark_interval: Duration,
    /// How event objects are written.
    pub form: EventForm,
}

/// How a watch writes its event objects.
#[derive(Debug, Clone)]
pub enum EventForm {
    /// The object (as stored, at another served version, or metadata only).
    Object(ObjectForm),
    /// A one-row Table of this type (kubectl's `Accept: ...;as=Table`).
    Table(Arc<ResourceType>),
}

/// The state of one watch stream.
pub struct WatchStream {
    store: Arc<Store>,
    spec: WatchSpec,
    id: u64,
    initial: std::vec::IntoIter<Arc<ObjectRecord>>,
    initial_end_pending: bool,
    replay: std::vec::IntoIter<Arc<Event>>,
    rx: mpsc::Receiver<Arc<Event>>,
    shared: Arc<WatcherShared>,
    faults: watch::Receiver<WatchFaultState>,
    rv_rx: watch::Receiver<u64>,
    close_generation: u64,
    malformed_generation: u64,
    start_rv: u64,
    last_rv: u64,
    sent_events: u64,
    next_bookmark: Instant,
    pre_timeout_at: Instant,
    pre_timeout_sent: bool,
    finished: bool,
    pending: Option<Bytes>,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.store.unregister_watch(self.spec.resource, self.id);
    }
}

impl WatchStream {
    /// A stream over a fresh registration.
    pub fn new(
        store: Arc<Store>,
        spec: WatchSpec,
        reg: WatchRegistration,
        faults: watch::Receiver<WatchFaultState>,
    ) -> Self {
        let now = Instant::now();
        let state = faults.borrow().clone();
        let total = spec.deadline.saturating_duration_since(now);
        let lead = Duration::from_secs(1).min(total / 2);
        let rv_rx = store.subscribe_rv();
        WatchStream {
            next_bookmark: now + spec.bookmark_interval,
            pre_timeout_at: spec.deadline.checked_sub(lead).unwrap_or(spec.deadline),
            initial_end_pending: spec.initial_events_end,
            store,
            id: reg.id,
            initial: reg.initial.into_iter(),
            replay: reg.replay.into_iter(),
            rx: reg.rx,
            shared: reg.shared,
            faults,
            rv_rx,
            close_generation: state.close_all_generation,
            malformed_generation: state.malformed_generation,
            start_rv: reg.start_rv,
            last_rv: reg.start_rv,
            sent_events: 0,
            pre_timeout_sent: false,
            finished: false,
            pending: None,
            spec,
        }
    }

    /// The HTTP body stream.
    pub fn into_body_stream(
        self,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        futures::stream::unfold(self, |mut s| async move {
            let chunk = s.next_chunk().await?;
            Some((Ok(chunk), s))
        })
    }

    fn bookmark(&mut self, rv: u64, initial_end: bool) -> Bytes {
        self.last_rv = self.last_rv.max(rv);
        bookmark_line(&self.spec.kind, &self.spec.api_version, rv, initial_end)
    }

    fn emit(&self, buf: &mut BytesMut, event_type: &str, rec: &ObjectRecord) {
        match &self.spec.form {
            EventForm::Table(rt) => {
                push_event(buf, event_type, &crate::table::event_table(rt, &rec.json))
            }
            EventForm::Object(ObjectForm::Full) => push_event(buf, event_type, &rec.json),
            EventForm::Object(form) => push_event(buf, event_type, &form.bytes(rec)),
        }
    }

    fn close_limit_reached(&self, state: &WatchFaultState) -> bool {
        state
            .close_after_events
            .is_some_and(|n| self.sent_events >= n)
    }

    /// Encode one event for this watcher (selector transitions included); returns whether a line was written.
    fn encode_event(&mut self, buf: &mut BytesMut, ev: &Event) -> bool {
        let f = &self.spec.filter;
        let written = match ev.kind {
            EventKind::Added | EventKind::Deleted => {
                if f.matches(&ev.object) {
                    self.emit(buf, ev.kind.as_str(), &ev.object);
                    true
                } else {
                    false
                }
            }
            EventKind::Modified => {
                let now = f.matches(&ev.object);
                let before = ev.prev.as_ref().is_some_and(|p| f.matches(p));
                match (before, now) {
                    (true, true) => {
                        self.emit(buf, "MODIFIED", &ev.object);
                        true
                    }
                    (false, true) => {
                        self.emit(buf, "ADDED", &ev.object);
                        true
                    }
                    (true, false) => match ev.prev_at_rv() {
                        Some(prev) => {
                            self.emit(buf, "DELETED", &prev);
                            true
                        }
                        None => false,
                    },
                    (false, false) => false,
                }
            }
        };
        if written {
            self.sent_events += 1;
            self.last_rv = self.last_rv.max(ev.rv);
        }
        written
    }

    /// Fill a batch from what is ready without waiting.
    fn fill_ready(&mut self, state: &WatchFaultState) -> BytesMut {
        let mut buf = BytesMut::new();
        while buf.len() < CHUNK_BYTES && !self.close_limit_reached(state) {
            if let Some(obj) = self.initial.next() {
                if self.spec.filter.matches(&obj) {
                    self.emit(&mut buf, "ADDED", &obj);
                    self.sent_events += 1;
                }
                continue;
            }
            if self.initial_end_pending {
                self.initial_end_pending = false;
                let line = self.bookmark(self.start_rv, true);
                buf.extend_from_slice(&line);
                continue;
            }
            if let Some(ev) = self.replay.next() {
                self.encode_event(&mut buf, &ev);
                continue;
            }
            match self.rx.try_recv() {
                Ok(ev) => {
                    self.encode_event(&mut buf, &ev);
                }
                Err(_) => break,
            }
        }
        buf
    }

    /// How a watcher that fell too far behind ends: closed cleanly when the
    /// history still holds what it missed (as the real cacher closes an
    /// unresponsive watcher: the client re-watches from its last
    /// resourceVersion, no relist), a 410 otherwise.
    fn overflow_end(&self) -> Option<Bytes> {
        let compacted = self.store.history_stats().1;
        if self.last_rv >= compacted {
            return None;
        }
        Some(error_line(
            &ApiError::too_old_resource_version(
                self.last_rv,
                (compacted + 1).max(self.last_rv + 1),
            )
            .to_status(),
        ))
    }

    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(p) = self.pending.take() {
                return Some(p);
            }
            let state = self.faults.borrow_and_update().clone();
            if state.close_all_generation != self.close_generation {
                self.finished = true;
                return None;
            }
            if state.malformed_generation != self.malformed_generation {
                self.malformed_generation = state.malformed_generation;
                return Some(Bytes::from_static(MALFORMED_LINE));
            }
            let now = Instant::now();
            if now >= self.spec.deadline {
                self.finished = true;
                return None;
            }
            if state.stalled {
                tokio::select! {
                    r = self.faults.changed() => {
                        if r.is_err() {
                            // The server is gone: end the stream rather than spin.
                            self.finished = true;
                            return None;
                        }
                    }
                    _ = tokio::time::sleep_until(self.spec.deadline) => {}
                }
                continue;
            }
            if self.close_limit_reached(&state) {
                self.finished = true;
                return None;
            }
            // Read before draining the queue: a write queues its event before it
            // publishes its resourceVersion, so every event up to `current` is
            // delivered before a bookmark at `current` (a bookmark never
            // overtakes an event).
            let current = *self.rv_rx.borrow_and_update();
            let buf = self.fill_ready(&state);
            if !buf.is_empty() {
                return Some(buf.freeze());
            }
            let overflowed = self.shared.overflowed.load(Ordering::SeqCst);
            if overflowed && self.rx.is_closed() && self.rx.is_empty() {
                self.finished = true;
                return self.overflow_end();
            }
            // Nothing ready: time for a bookmark? Not past dropped events.
            let bookmarks_on = self.spec.bookmarks && !state.suppress_bookmarks && !overflowed;
            if bookmarks_on {
                if !self.pre_timeout_sent && now >= self.pre_timeout_at {
                    self.pre_timeout_sent = true;
                    let rv = current.max(self.last_rv);
                    return Some(self.bookmark(rv, false));
                }
                if now >= self.next_bookmark {
                    self.next_bookmark = now + self.spec.bookmark_interval;
                    if current > self.last_rv {
                        return Some(self.bookmark(current, false));
                    }
                }
            }
            let mut wake = self.spec.deadline;
            if bookmarks_on {
                wake = wake.min(self.next_bookmark);
                if !self.pre_timeout_sent {
                    wake = wake.min(self.pre_timeout_at);
                }
            }
            tokio::select! {
                biased;
                r = self.faults.changed() => {
                    if r.is_err() {
                        self.finished = true;
                        return None;
                    }
                }
                ev = self.rx.recv() => match ev {
                    Some(ev) => {
                        let mut buf = BytesMut::new();
                        self.encode_event(&mut buf, &ev);
                        let more = self.fill_ready(&state);
                        buf.extend_from_slice(&more);
                        if !buf.is_empty() {
                            return Some(buf.freeze());
                        }
                    }
                    None => {
                        self.finished = true;
                        if self.shared.overflowed.load(Ordering::SeqCst) {
                            return self.overflow_end();
                        }
                        return None;
                    }
                },
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

/// A body with one ERROR event (the answer to a watch from a compacted RV).
pub fn single_error_stream(
    err: &ApiError,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    futures::stream::iter(std::iter::once(Ok(error_line(&err.to_status()))))
}
