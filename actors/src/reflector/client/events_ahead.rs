//! A streaming list's initial events decoded ahead of the Reflector, on
//! more than one core (`ListWatch::list_decoders`), as a paginated list's
//! pages are (`list_ahead`).
//!
//! A streaming list (R-24) sends every object as an ADDED line of one watch
//! body; decoding them is most of its time. One task reads the body's lines
//! into runs (at most [`RUN_LINES`] lines or [`RUN_BYTES`] bytes, fewer when
//! no more bytes are buffered: a run never waits for lines that have not
//! arrived), and each run is decoded on tokio's blocking threads, at most
//! `n` at once; the stream hands the events on in order, and at most `n`
//! runs wait in the channel to the Reflector (one more on its way, one
//! waiting to decode), so a Reflector that stops reading stops the reading
//! of the body. Both the reading and the decoding log in the Reflector's
//! span. After the line holding the
//! initial-events-end bookmark the body is handed back and its watch events
//! are read and decoded in place, one line at a time, as any watch's are: a
//! watch's events come a few at a time, and a hop to another thread per
//! event would only add latency (and free objects on another thread than
//! the one that allocated them).
//!
//! A line is decoded ahead exactly as in place (`decode_line`): the same
//! events, the same skipped lines, the same failure ending the stream.

use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::decode_pool::{DecodePool, Lost, Pending, Spares};
use super::list_ahead::{MAX_LIST_DECODERS, reserve_ahead};
use super::watch_body::{LineOutcome, LineReader, Read, WatchBody, decode_line};
use crate::reflector::decode::{DecodeOptions, LineDecoder};
use crate::reflector::event::{INITIAL_EVENTS_END, SourceEvent};
use crate::reflector::failure::Failure;
use crate::reflector::source::WatchStream;

/// Lines of a run at most (about a list page's worth).
pub const RUN_LINES: usize = 256;
/// Bytes of a run at most, past which it goes as it is (large objects).
pub const RUN_BYTES: usize = 4 << 20;

/// Run buffers kept for reuse between the reading and the decoding.
const SPARE_RUNS: usize = 2 * MAX_LIST_DECODERS + 2;

/// Lines read from the body, to decode together.
#[derive(Default)]
struct Run {
    bytes: Vec<u8>,
    /// Where each line ends in `bytes`, and whether it was cut (no newline).
    ends: Vec<(usize, bool)>,
}

/// A run's events, and what ended the stream within it, if anything.
struct DecodedRun<K> {
    events: Vec<SourceEvent<K>>,
    end: Option<RunEnd>,
}

/// What ended a stream within a run.
enum RunEnd {
    /// A line failed: nothing follows this failure.
    Failed(Failure),
    /// The last line was cut short: the stream ends like a clean close.
    Cut,
}

/// What the reading hands the stream, in order.
enum Ahead<K> {
    /// A run being decoded.
    Decoding(Pending<DecodedRun<K>>),
    /// The body ended: closed (`None`) or failed.
    Ended(Option<Failure>),
    /// The initial events are over: the rest of the body is read in place.
    Rest(LineReader),
}

/// Reads a streaming list's body (`reader`), its initial events decoded
/// ahead on up to `at_once` blocking threads (1 to [`MAX_LIST_DECODERS`]),
/// the rest in place. Needs a tokio runtime.
pub(super) fn initial_events_ahead<K: DeserializeOwned + Send + 'static>(
    reader: LineReader,
    options: DecodeOptions,
    at_once: usize,
) -> WatchStream<K> {
    let decoders = RunDecoders::new(at_once, options);
    let (tx, runs) = mpsc::channel(decoders.pool.threads());
    let reading = tokio::spawn(read_ahead(reader, decoders, tx).in_current_span());
    let state = State::Ahead(AheadState {
        runs,
        events: Vec::new().into_iter(),
        end: None,
        _reading: AbortOnDrop(reading),
        options,
    });
    futures::stream::unfold(state, next).boxed()
}

/// Aborts the reading when the stream is dropped (the watch is over).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The stream while its events are decoded ahead.
struct AheadState<K> {
    runs: mpsc::Receiver<Ahead<K>>,
    /// The current run's events not handed on yet.
    events: std::vec::IntoIter<SourceEvent<K>>,
    /// What ends the stream after `events`.
    end: Option<RunEnd>,
    _reading: AbortOnDrop,
    options: DecodeOptions,
}

/// Where the stream is.
enum State<K> {
    Ahead(AheadState<K>),
    InPlace(Box<WatchBody>),
    Done,
}

/// The stream's next event, and its state after it.
async fn next<K: DeserializeOwned + Send + 'static>(
    mut state: State<K>,
) -> Option<(Result<SourceEvent<K>, Failure>, State<K>)> {
    loop {
        let ahead = match state {
            State::Done => return None,
            State::InPlace(mut body) => {
                let item = body.next_event::<K>().await?;
                return Some((item, State::InPlace(body)));
            }
            State::Ahead(ref mut ahead) => ahead,
        };
        if let Some(event) = ahead.events.next() {
            return Some((Ok(event), state));
        }
        match ahead.end.take() {
            Some(RunEnd::Failed(failure)) => return Some((Err(failure), State::Done)),
            Some(RunEnd::Cut) => return None,
            None => {}
        }
        match ahead.runs.recv().await {
            Some(Ahead::Decoding(run)) => match run.result().await {
                Ok(run) => {
                    ahead.events = run.events.into_iter();
                    ahead.end = run.end;
                }
                Err(e) => {
                    let failure = lost("decoding a streaming list's events", &e);
                    return Some((Err(failure), State::Done));
                }
            },
            Some(Ahead::Ended(None)) => return None,
            Some(Ahead::Ended(Some(failure))) => return Some((Err(failure), State::Done)),
            Some(Ahead::Rest(reader)) => {
                state = State::InPlace(Box::new(WatchBody::new(reader, ahead.options)))
            }
            // The reading ends only after `Ended` or `Rest`: it panicked.
            None => {
                tracing::error!("reading a streaming list panicked; the list is retried");
                return Some((Err(Failure::Other), State::Done));
            }
        }
    }
}

/// The failure ending a stream whose decoding panicked or never ran (the
/// runtime is shutting down): the Reflector lists again.
fn lost(what: &str, e: &Lost) -> Failure {
    if *e == Lost::Panicked {
        tracing::error!("{what} panicked; the list is retried");
    } else {
        tracing::debug!("{what} was cancelled");
    }
    Failure::Other
}

/// Reads the body's lines into runs and hands each to be decoded (once
/// fewer than `at_once` decode), until the initial-events-end bookmark,
/// the body's end, or nobody takes the runs any more.
async fn read_ahead<K: DeserializeOwned + Send + 'static>(
    mut reader: LineReader,
    mut decoders: RunDecoders<K>,
    out: mpsc::Sender<Ahead<K>>,
) {
    let marker = memchr::memmem::Finder::new(INITIAL_EVENTS_END.as_bytes());
    loop {
        let mut run = decoders.spare_run();
        let mut ended = None;
        let mut initial_over = false;
        loop {
            let start = run.bytes.len();
            match reader.next_line(&mut run.bytes).await {
                Read::Line { cut } => {
                    run.ends.push((run.bytes.len(), cut));
                    // A false match (an object mentioning the annotation)
                    // only hands the body back early.
                    initial_over = marker.find(&run.bytes[start..]).is_some();
                    if initial_over || cut {
                        break;
                    }
                }
                Read::End => {
                    ended = Some(None);
                    break;
                }
                Read::Failed(failure) => {
                    ended = Some(Some(failure));
                    break;
                }
            }
            let full = run.ends.len() >= RUN_LINES || run.bytes.len() >= RUN_BYTES;
            if full || !reader.has_buffered().await {
                break;
            }
        }
        // What a failed read appended is no line.
        run.bytes
            .truncate(run.ends.last().map_or(0, |&(end, _)| end));
        if !run.ends.is_empty() {
            let decoding = decoders.decode(run).await;
            if out.send(Ahead::Decoding(decoding)).await.is_err() {
                return;
            }
        }
        let last = match ended {
            Some(ended) => Ahead::Ended(ended),
            None if initial_over => Ahead::Rest(reader),
            None => continue,
        };
        // Nobody may be listening any more: then there is nothing to do.
        let _ = out.send(last).await;
        return;
    }
}

/// Decodes one stream's runs on its decode pool (a few blocking threads).
struct RunDecoders<K> {
    /// The threads the runs decode on, at most its `threads` at once.
    pool: DecodePool,
    options: DecodeOptions,
    /// The decoders (simd-json's scratch space) of the runs not decoding now.
    idle: Spares<LineDecoder>,
    spare: Spares<Run>,
    _k: std::marker::PhantomData<fn() -> K>,
}

impl<K: DeserializeOwned + Send + 'static> RunDecoders<K> {
    fn new(at_once: usize, options: DecodeOptions) -> Self {
        let at_once = at_once.clamp(1, MAX_LIST_DECODERS);
        RunDecoders {
            pool: DecodePool::new(at_once),
            options,
            idle: Spares::new(MAX_LIST_DECODERS),
            spare: Spares::new(SPARE_RUNS),
            _k: std::marker::PhantomData,
        }
    }

    /// An empty run to read lines into.
    fn spare_run(&self) -> Run {
        self.spare.take().unwrap_or_else(|| Run {
            bytes: Vec::with_capacity(1 << 20),
            ends: Vec::with_capacity(RUN_LINES),
        })
    }

    /// Queues `run` for the list's decode pool, once fewer than its
    /// threads' worth of runs are queued or decoding.
    async fn decode(&mut self, run: Run) -> Pending<DecodedRun<K>> {
        let job = Job {
            run,
            span: tracing::Span::current(),
            options: self.options,
            idle: self.idle.clone(),
            spare: self.spare.clone(),
        };
        self.pool.run(move || job.decode()).await
    }
}

/// One run to decode, with what it gives back.
struct Job {
    run: Run,
    /// Where its lines' warnings are logged (the Reflector's span).
    span: tracing::Span,
    options: DecodeOptions,
    idle: Spares<LineDecoder>,
    spare: Spares<Run>,
}

impl Job {
    /// Decodes the run's lines up to the first that ends the stream, grows
    /// this thread's arena ahead of the next runs, and gives back the run's
    /// buffers and the decoder.
    fn decode<K: DeserializeOwned>(self) -> DecodedRun<K> {
        let Job {
            mut run,
            span,
            options,
            idle,
            spare,
        } = self;
        let _entered = span.enter();
        let mut decoder = idle.take().unwrap_or_default();
        let mut events = Vec::with_capacity(run.ends.len());
        let mut end = None;
        let mut start = 0;
        for &(line_end, cut) in &run.ends {
            let line = &run.bytes[start..line_end];
            start = line_end;
            match decode_line(&mut decoder, line, cut, options) {
                LineOutcome::Event(event) => events.push(event),
                LineOutcome::Skipped => {}
                LineOutcome::Failed(failure) => {
                    end = Some(RunEnd::Failed(failure));
                    break;
                }
                LineOutcome::Cut => {
                    end = Some(RunEnd::Cut);
                    break;
                }
            }
        }
        reserve_ahead(run.bytes.len());
        idle.put(decoder);
        run.bytes.clear();
        run.ends.clear();
        if run.bytes.capacity() <= RUN_BYTES + (1 << 20) {
            spare.put(run);
        }
        DecodedRun { events, end }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::time::Duration;

    use futures::io::AsyncBufRead;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    /// What a stream gave: each event's name (or "bookmark", "bookmark end"),
    /// then the failure that ended it, if any.
    async fn collect(mut stream: WatchStream<ConfigMap>) -> (Vec<String>, Option<Failure>) {
        let mut seen = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(SourceEvent::Added(o) | SourceEvent::Modified(o) | SourceEvent::Deleted(o)) => {
                    seen.push(o.metadata.name.clone().unwrap_or_default())
                }
                Ok(SourceEvent::Bookmark {
                    initial_events_end, ..
                }) => seen.push(
                    if initial_events_end {
                        "bookmark end"
                    } else {
                        "bookmark"
                    }
                    .into(),
                ),
                Err(f) => return (seen, Some(f)),
            }
        }
        (seen, None)
    }

    fn body(bytes: &[u8], capacity: usize) -> Pin<Box<dyn AsyncBufRead + Send>> {
        Box::pin(futures::io::BufReader::with_capacity(
            capacity,
            futures::io::Cursor::new(bytes.to_vec()),
        ))
    }

    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(600)
    }

    /// Reads `bytes` in place and ahead (with 1 and 2 decoders, through a
    /// small and a large read buffer); asserts they agree and returns what
    /// they gave.
    async fn both_ways(bytes: &[u8]) -> (Vec<String>, Option<Failure>) {
        let options = DecodeOptions::default();
        let in_place = collect(super::super::watch_body::watch_stream(
            body(bytes, 64 * 1024),
            options,
            far(),
        ))
        .await;
        for (at_once, capacity) in [(1, 7), (2, 7), (2, 64 * 1024)] {
            let reader = LineReader::new(body(bytes, capacity), far());
            let ahead = collect(initial_events_ahead(reader, options, at_once)).await;
            assert_eq!(ahead, in_place, "{at_once} decoders, {capacity}-byte reads");
        }
        in_place
    }

    fn cm(name: &str, rv: u32) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"a":"b"}}}}"#
        )
    }

    fn line(kind: &str, object: &str) -> String {
        format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
    }

    fn end_bookmark(rv: u32) -> String {
        line(
            "BOOKMARK",
            &format!(
                r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","annotations":{{"k8s.io/initial-events-end":"true"}}}}}}"#
            ),
        )
    }

    /// Many runs' worth of initial events, the end bookmark, then watch
    /// events read in place: every event, in order, either way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn initial_events_decoded_ahead_come_in_order_then_the_watch_goes_on() {
        let n = 3 * RUN_LINES + 17;
        let mut bytes = String::new();
        let mut want = Vec::new();
        for i in 0..n {
            bytes += &line("ADDED", &cm(&format!("cm-{i}"), 10 + i as u32));
            want.push(format!("cm-{i}"));
        }
        bytes += "\n";
        bytes += &end_bookmark(2000);
        want.push("bookmark end".into());
        bytes += &line("MODIFIED", &cm("cm-0", 2001));
        bytes += &line("DELETED", &cm("cm-1", 2002));
        want.extend(["cm-0".into(), "cm-1".into()]);
        assert_eq!(both_ways(bytes.as_bytes()).await, (want, None));
    }

    /// Skipped lines, a failing line (nothing after it), the server's
    /// error, a body cut inside a line, and a line past the cap: the same
    /// outcome ahead as in place, wherever in a run they fall.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_and_skipped_lines_end_the_stream_as_in_place() {
        let secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","resourceVersion":"6"},"type":"Opaque"}"#;
        let broken = r#"{"kind":"ConfigMap","metadata":{"name":"x"},"data":[1]}"#;
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}}"#;
        let lead: String = (0..300)
            .map(|i| line("ADDED", &cm(&format!("a{i}"), 5)))
            .collect();
        let names = |n: usize| (0..n).map(|i| format!("a{i}")).collect::<Vec<_>>();

        let skipped = [
            lead.clone(),
            line("ADDED", secret),
            line("ADDED", &cm("z", 7)),
        ]
        .concat();
        let mut want = names(300);
        want.push("z".into());
        assert_eq!(both_ways(skipped.as_bytes()).await, (want, None));

        let failing = [
            lead.clone(),
            line("ADDED", broken),
            line("ADDED", &cm("z", 7)),
        ]
        .concat();
        assert_eq!(
            both_ways(failing.as_bytes()).await,
            (names(300), Some(Failure::Malformed))
        );

        let expired = [
            lead.clone(),
            format!("{gone}\n"),
            line("ADDED", &cm("z", 7)),
        ]
        .concat();
        assert_eq!(
            both_ways(expired.as_bytes()).await,
            (names(300), Some(Failure::Expired))
        );

        let mut cut = [lead.clone(), line("ADDED", &cm("z", 7))].concat();
        cut.truncate(cut.len() - 10);
        assert_eq!(both_ways(cut.as_bytes()).await, (names(300), None));
    }

    /// A body whose chunks come from `chunks`, each an `Ok` of bytes or
    /// an error (through futures' `IntoAsyncRead`, as kube's bodies are).
    fn chunked(chunks: Vec<std::io::Result<Vec<u8>>>) -> Pin<Box<dyn AsyncBufRead + Send>> {
        Box::pin(futures::TryStreamExt::into_async_read(
            futures::stream::iter(chunks),
        ))
    }

    /// A body that fails after whole lines fails the stream with that
    /// error, ahead as in place (the reader reports an error once, then
    /// reads as ended: the error met while looking ahead is kept).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_failing_after_whole_lines_fails_ahead_as_in_place() {
        let lines: String = (0..3)
            .map(|i| line("ADDED", &cm(&format!("c{i}"), 5)))
            .collect();
        let chunks = || {
            vec![
                Ok(lines.clone().into_bytes()),
                Err(std::io::Error::other("tls: bad record mac")),
            ]
        };
        let options = DecodeOptions::default();
        let in_place = collect(super::super::watch_body::watch_stream(
            chunked(chunks()),
            options,
            far(),
        ))
        .await;
        let names = vec!["c0".to_owned(), "c1".into(), "c2".into()];
        assert_eq!(in_place.0, names);
        assert!(in_place.1.is_some(), "in place: {in_place:?}");
        for at_once in [1, 2] {
            let reader = LineReader::new(chunked(chunks()), far());
            let ahead = collect(initial_events_ahead(reader, options, at_once)).await;
            assert_eq!(ahead, in_place, "{at_once} decoders");
        }
    }

    /// Lines are handed on as they arrive: a run does not wait for lines
    /// the server has not sent yet.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_goes_on_without_waiting_for_lines_not_sent_yet() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<std::io::Result<Vec<u8>>>();
        let body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::TryStreamExt::into_async_read(rx));
        let mut stream = initial_events_ahead::<ConfigMap>(
            LineReader::new(body, far()),
            DecodeOptions::default(),
            2,
        );
        for round in 0..3 {
            let batch: String = (0..5)
                .map(|i| line("ADDED", &cm(&format!("r{round}-{i}"), 5)))
                .collect();
            tx.unbounded_send(Ok(batch.into_bytes())).unwrap();
            for i in 0..5 {
                let event = tokio::time::timeout(Duration::from_secs(30), stream.next())
                    .await
                    .expect("an event sent is handed on")
                    .unwrap()
                    .unwrap();
                let SourceEvent::Added(o) = event else {
                    panic!("not an add")
                };
                assert_eq!(
                    o.metadata.name.as_deref(),
                    Some(format!("r{round}-{i}").as_str())
                );
            }
        }
        drop(tx);
        assert!(
            stream.next().await.is_none(),
            "the body's end closes the stream"
        );
    }
}
