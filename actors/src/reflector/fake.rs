//! A scripted [`ListerWatcher`] and a recording [`Sink`], to test the
//! Reflector loop without HTTP, in driven time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use tokio::sync::watch;
use tokio::time::Instant;

use super::decode::Page;
use super::event::SourceEvent;
use super::failure::Failure;
use super::list_and_watch::{Exit, ListAndWatch};
use super::sink::Sink;
use super::source::{ListerWatcher, PageRequest, WatchStream};
use super::state::{ReflectorOptions, ReflectorState, WatchRequest};
use super::stats::ReflectorStats;
use super::warm_start::{RestoreFn, Restored, RestoredPage, Taken};
use crate::delta_fifo::{FifoClosed, WatchDelta};

/// One step of a scripted watch stream; a stream whose steps run out closes cleanly.
#[derive(Debug, Clone)]
pub enum Step {
    /// An object event (`ADDED` of `name` at `rv`).
    Added(&'static str, &'static str),
    /// `MODIFIED`.
    Modified(&'static str, &'static str),
    /// `DELETED`.
    Deleted(&'static str, &'static str),
    /// A bookmark at `rv`, the initial-events-end one when `true`.
    Bookmark(&'static str, bool),
    /// The stream fails.
    Fail(Failure),
    /// Nothing for a while.
    Sleep(Duration),
    /// Nothing ever again (an open, quiet watch).
    Hang,
}

/// A request the fake answered, and when (driven time since the script began).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A list page.
    Page(PageRequest),
    /// A watch, or a streaming list when `true`.
    Watch(WatchRequest, bool),
}

/// What the script answers, in order. Once an answer list runs out, the
/// requests of that kind never complete (the test ends on its deadline).
/// During an outage every request is refused, and the script waits.
#[derive(Default)]
struct Script {
    pages: VecDeque<Result<Page<ConfigMap>, Failure>>,
    watches: VecDeque<Result<Vec<Step>, Failure>>,
    outages: Vec<(Duration, Duration)>,
    log: Vec<(Duration, Request)>,
    probes: Vec<Duration>,
}

/// A scripted source; clones share the script.
#[derive(Clone)]
pub struct FakeSource {
    script: Rc<RefCell<Script>>,
    start: Instant,
}

fn configmap(name: &str, rv: &str) -> ConfigMap {
    Arc::unwrap_or_clone(crate::testing::configmap(name, rv))
}

impl FakeSource {
    pub fn new() -> Self {
        FakeSource {
            script: Rc::default(),
            start: Instant::now(),
        }
    }

    /// Answers the next page request with these `name@rv` objects.
    pub fn page(&self, rv: &str, objects: &[(&str, &str)], continue_token: Option<&str>) -> &Self {
        let page = Page {
            items: objects.iter().map(|(n, v)| configmap(n, v)).collect(),
            resource_version: Some(rv.into()),
            continue_token: continue_token.map(str::to_owned),
            remaining_item_count: None,
        };
        self.script.borrow_mut().pages.push_back(Ok(page));
        self
    }

    /// Fails the next page request.
    pub fn page_fails(&self, failure: Failure) -> &Self {
        self.script.borrow_mut().pages.push_back(Err(failure));
        self
    }

    /// Answers the next watch request with a stream of `steps`.
    pub fn watch(&self, steps: &[Step]) -> &Self {
        self.script
            .borrow_mut()
            .watches
            .push_back(Ok(steps.to_vec()));
        self
    }

    /// Fails the next watch request when it opens.
    pub fn watch_fails(&self, failure: Failure) -> &Self {
        self.script.borrow_mut().watches.push_back(Err(failure));
        self
    }

    /// Refuses every request (probes included) from `from` to `to` after
    /// the script began; outside outages probes are answered.
    pub fn outage(&self, from: Duration, to: Duration) -> &Self {
        self.script.borrow_mut().outages.push((from, to));
        self
    }

    /// When the probes were made.
    pub fn probes(&self) -> Vec<Duration> {
        self.script.borrow().probes.clone()
    }

    fn down(&self) -> bool {
        let now = self.start.elapsed();
        let outages = &self.script.borrow().outages;
        outages.iter().any(|(from, to)| (*from..*to).contains(&now))
    }

    /// The requests answered so far, with when.
    pub fn log(&self) -> Vec<(Duration, Request)> {
        self.script.borrow().log.clone()
    }

    /// The requests answered so far.
    pub fn requests(&self) -> Vec<Request> {
        self.log().into_iter().map(|(_, r)| r).collect()
    }

    fn record(&self, request: Request) {
        let at = self.start.elapsed();
        self.script.borrow_mut().log.push((at, request));
    }
}

fn stream(steps: Vec<Step>) -> WatchStream<ConfigMap> {
    futures::stream::unfold(steps.into_iter(), |mut steps| async move {
        loop {
            let item = match steps.next()? {
                Step::Added(n, v) => Ok(SourceEvent::Added(configmap(n, v))),
                Step::Modified(n, v) => Ok(SourceEvent::Modified(configmap(n, v))),
                Step::Deleted(n, v) => Ok(SourceEvent::Deleted(configmap(n, v))),
                Step::Bookmark(v, end) => Ok(SourceEvent::Bookmark {
                    resource_version: v.into(),
                    initial_events_end: end,
                }),
                Step::Fail(f) => Err(f),
                Step::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    continue;
                }
                Step::Hang => futures::future::pending().await,
            };
            return Some((item, steps));
        }
    })
    .boxed()
}

impl ListerWatcher<ConfigMap> for FakeSource {
    async fn list_page(&mut self, req: &PageRequest) -> Result<Page<ConfigMap>, Failure> {
        self.record(Request::Page(req.clone()));
        if self.down() {
            return Err(Failure::ConnectionRefused);
        }
        let next = self.script.borrow_mut().pages.pop_front();
        match next {
            Some(answer) => answer,
            None => futures::future::pending().await,
        }
    }

    async fn watch(
        &mut self,
        req: &WatchRequest,
        streaming: bool,
    ) -> Result<WatchStream<ConfigMap>, Failure> {
        self.record(Request::Watch(req.clone(), streaming));
        if self.down() {
            return Err(Failure::ConnectionRefused);
        }
        let next = self.script.borrow_mut().watches.pop_front();
        match next {
            Some(answer) => answer.map(stream),
            None => futures::future::pending().await,
        }
    }

    async fn probe(&mut self) -> Result<(), Failure> {
        let at = self.start.elapsed();
        self.script.borrow_mut().probes.push(at);
        match self.down() {
            true => Err(Failure::ConnectionRefused),
            false => Ok(()),
        }
    }
}

/// What the sink received, and when: `replace RV [name@rv ...]` or
/// `enqueue [added name@rv ...]`.
#[derive(Clone)]
pub struct Recorder {
    received: Rc<RefCell<Vec<(Duration, String)>>>,
    /// The pages of the list in progress.
    pages: Rc<RefCell<Vec<String>>>,
    /// The pages of the snapshot being restored.
    restored: Rc<RefCell<Vec<String>>>,
    /// Every page received before its list ended, as `[name@rv ...]`, with
    /// whether it was a list's first.
    handed: Rc<RefCell<Vec<(bool, String)>>>,
    start: Instant,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            received: Rc::default(),
            pages: Rc::default(),
            restored: Rc::default(),
            handed: Rc::default(),
            start: Instant::now(),
        }
    }
}

fn name_at(o: &ConfigMap) -> String {
    let meta = &o.metadata;
    let (name, rv) = (meta.name.as_deref(), meta.resource_version.as_deref());
    format!("{}@{}", name.unwrap_or_default(), rv.unwrap_or_default())
}

impl Recorder {
    pub fn received(&self) -> Vec<String> {
        self.received_at().into_iter().map(|(_, r)| r).collect()
    }

    pub fn received_at(&self) -> Vec<(Duration, String)> {
        self.received.borrow().clone()
    }

    /// The pages handed over before their lists ended.
    pub fn pages(&self) -> Vec<(bool, String)> {
        self.handed.borrow().clone()
    }

    /// The pages of a restore that has not ended, as `name@rv`.
    pub fn restoring(&self) -> Vec<String> {
        self.restored.borrow().clone()
    }

    fn push(&self, what: String) {
        let at = self.start.elapsed();
        self.received.borrow_mut().push((at, what));
    }
}

impl Sink<ConfigMap> for Recorder {
    /// Pages are kept and shown with the list's end, as one `replace`.
    async fn list_page(&self, objects: Vec<Arc<ConfigMap>>, first: bool) -> Result<(), FifoClosed> {
        let mut pages = self.pages.borrow_mut();
        if first {
            pages.clear();
        }
        let names: Vec<String> = objects.iter().map(|o| name_at(o)).collect();
        self.handed
            .borrow_mut()
            .push((first, format!("[{}]", names.join(" "))));
        pages.extend(names);
        Ok(())
    }

    async fn replace(
        &self,
        objects: Vec<Arc<ConfigMap>>,
        rv: String,
        continues: bool,
    ) -> Result<(), FifoClosed> {
        let mut names = std::mem::take(&mut *self.pages.borrow_mut());
        if !continues {
            names.clear();
        }
        names.extend(objects.iter().map(|o| name_at(o)));
        self.push(format!("replace {rv} [{}]", names.join(" ")));
        Ok(())
    }

    /// A snapshot's pages are kept and shown with its end, as one `restore`.
    async fn restore_page(
        &self,
        objects: Vec<Arc<ConfigMap>>,
        first: bool,
    ) -> Result<(), FifoClosed> {
        let mut restored = self.restored.borrow_mut();
        if first {
            restored.clear();
        }
        restored.extend(objects.iter().map(|o| name_at(o)));
        Ok(())
    }

    async fn restore_end(&self, rv: String, continues: bool) -> Result<(), FifoClosed> {
        let mut names = std::mem::take(&mut *self.restored.borrow_mut());
        if !continues {
            names.clear();
        }
        self.push(format!("restore {rv} [{}]", names.join(" ")));
        Ok(())
    }

    async fn enqueue(&self, events: Vec<WatchDelta<ConfigMap>>) -> Result<(), FifoClosed> {
        let events: Vec<String> = events
            .iter()
            .map(|e| match e {
                WatchDelta::Added(o) => format!("added {}", name_at(o)),
                WatchDelta::Modified(o) => format!("modified {}", name_at(o)),
                WatchDelta::Deleted(o) => format!("deleted {}", name_at(o)),
            })
            .collect();
        self.push(format!("enqueue [{}]", events.join(" ")));
        Ok(())
    }
}

/// A Reflector driven by the fake, as its actor drives it: a run, then
/// another after each relist's delay, until `until` of driven time passed.
pub struct Driven {
    pub source: FakeSource,
    pub sink: Recorder,
    pub state: Rc<RefCell<ReflectorState>>,
    pub stats: Arc<ReflectorStats>,
    pub rv: watch::Receiver<String>,
    /// The jitter of every wait: 0 by default (every wait its base delay).
    pub jitter: fn() -> f64,
    /// A snapshot the first run starts from: its resourceVersion and
    /// `(name, rv)` objects.
    pub restore: Option<(&'static str, Vec<(&'static str, &'static str)>)>,
    /// How the snapshot's pages end after its objects.
    pub restore_end: SnapshotEnd,
    /// Where a complete snapshot's [`Taken`] is answered.
    pub taken: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// How a fake snapshot's pages end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotEnd {
    /// Read whole.
    Complete,
    /// Found damaged.
    Damaged,
    /// The reader stopped without a word (its thread panicked).
    ReaderGone,
}

impl Driven {
    pub fn new(options: ReflectorOptions) -> Self {
        Driven {
            source: FakeSource::new(),
            sink: Recorder::default(),
            state: Rc::new(RefCell::new(ReflectorState::new(options))),
            stats: Arc::default(),
            rv: watch::channel(String::new()).1,
            jitter: || 0.0,
            restore: None,
            restore_end: SnapshotEnd::Complete,
            taken: None,
        }
    }

    /// Runs for `until` of driven time.
    pub async fn run_for(&mut self, until: Duration) {
        let (rv, rx) = watch::channel(String::new());
        self.rv = rx;
        let damaged = self.restore_end;
        let taken = &mut self.taken;
        let mut restore = self.restore.take().map(|(at, objects)| {
            let objects: Vec<_> = objects
                .iter()
                .map(|(name, rv)| crate::testing::configmap(name, rv))
                .collect();
            let (tx, pages) = tokio::sync::mpsc::channel(2);
            let _ = tx.try_send(RestoredPage::Objects(objects));
            match damaged {
                SnapshotEnd::Complete => {
                    let (sent, answered) = Taken::new();
                    *taken = Some(answered);
                    drop(tx.try_send(RestoredPage::Complete(sent)))
                }
                SnapshotEnd::Damaged => drop(tx.try_send(RestoredPage::Damaged("damaged".into()))),
                SnapshotEnd::ReaderGone => {}
            }
            let restored = Restored {
                resource_version: at.to_owned(),
                pages,
            };
            let read: RestoreFn<ConfigMap> =
                Box::new(move || Box::pin(async move { Some(restored) }));
            read
        });
        let runs = async {
            let mut delay = Duration::ZERO;
            loop {
                let run = ListAndWatch::new(
                    self.source.clone(),
                    self.sink.clone(),
                    self.state.clone(),
                    rv.clone(),
                    self.stats.clone(),
                )
                .jitter(self.jitter)
                .restore(restore.take());
                match run.run(delay).await {
                    Exit::Relist(d) => delay = d,
                    Exit::SinkClosed => return,
                }
            }
        };
        let _ = tokio::time::timeout(until, runs).await;
    }
}
