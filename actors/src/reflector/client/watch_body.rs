//! A watch body read line by line: one [`SourceEvent`] per line, through
//! a reused line buffer and [`LineDecoder`] (not kube's `LinesCodec`, which
//! allocates a `String` per line), ending at the first failure.

use std::pin::Pin;

use futures::StreamExt;
use futures::io::{AsyncBufRead, AsyncBufReadExt};
use serde::de::DeserializeOwned;

use super::classify::{classify, classify_status, ends_watch_cleanly};
use crate::reflector::decode::{self, DecodeOptions, LineDecoder};
use crate::reflector::event::SourceEvent;
use crate::reflector::failure::Failure;

/// A watch body and when to give up on it: where its lines come from.
pub(super) struct LineReader {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    /// Past this, the watch is over whatever the connection says.
    deadline: tokio::time::Instant,
    /// The error [`has_buffered`](Self::has_buffered) met, which the next
    /// read returns (a body's reader may give an error only once, then
    /// read as ended).
    pending: Option<std::io::Error>,
}

/// What reading a watch body's next line gave.
pub(super) enum Read {
    /// A line (appended); `cut` when the body ended without its newline.
    Line {
        /// The line has no newline: the last bytes of a body cut short.
        cut: bool,
    },
    /// The body ended (or its deadline passed): the watch closed.
    End,
    /// Reading failed (a line past [`MAX_WATCH_LINE`] is malformed).
    Failed(Failure),
}

impl LineReader {
    /// Reads `body` until `deadline`.
    pub(super) fn new(
        body: Pin<Box<dyn AsyncBufRead + Send>>,
        deadline: tokio::time::Instant,
    ) -> Self {
        LineReader {
            body,
            deadline,
            pending: None,
        }
    }

    /// Appends the next line, with its newline, to `line`. Bytes of a
    /// line that failed may have been appended.
    pub(super) async fn next_line(&mut self, line: &mut Vec<u8>) -> Read {
        let read = match self.pending.take() {
            Some(e) => Err(e),
            None => {
                // A fixed deadline: no clock read per line, and no timer is
                // registered while lines are already buffered.
                let read = tokio::time::timeout_at(
                    self.deadline,
                    read_line_capped(&mut self.body, line, MAX_WATCH_LINE),
                );
                let Ok(read) = read.await else {
                    tracing::warn!(
                        "the watch outlived its timeout without being closed; re-watching"
                    );
                    return Read::End;
                };
                read
            }
        };
        match read {
            Ok(0) => Read::End,
            Ok(_) => Read::Line {
                cut: line.last() != Some(&b'\n'),
            },
            Err(e) if ends_watch_cleanly(&e) => {
                tracing::debug!(%e, "watch body ended");
                Read::End
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                tracing::warn!(%e, "watch event too large");
                Read::Failed(Failure::Malformed)
            }
            Err(e) => {
                tracing::warn!(%e, "watch stream error");
                Read::Failed(classify(&kube::Error::ReadEvents(e)))
            }
        }
    }

    /// Whether the next read would not wait: bytes are buffered, or the
    /// body failed (kept for the next read).
    pub(super) async fn has_buffered(&mut self) -> bool {
        if self.pending.is_some() {
            return true;
        }
        match futures::future::poll_immediate(self.body.fill_buf()).await {
            Some(Ok(buf)) => !buf.is_empty(),
            Some(Err(e)) => {
                self.pending = Some(e);
                true
            }
            None => false,
        }
    }
}

/// What one watch line says.
pub(super) enum LineOutcome<K> {
    /// An event.
    Event(SourceEvent<K>),
    /// The server's error, or a line that cannot be decoded: the watch ends.
    Failed(Failure),
    /// Blank, or skipped (R-17): the watch goes on.
    Skipped,
    /// The incomplete last line of a body cut short: the watch closed.
    Cut,
}

/// Decodes one line as read (with its newline, if any; `cut` without).
pub(super) fn decode_line<K: DeserializeOwned>(
    decoder: &mut LineDecoder,
    line: &[u8],
    cut: bool,
    options: DecodeOptions,
) -> LineOutcome<K> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return LineOutcome::Skipped;
    }
    match decoder.decode::<K>(line, options) {
        Ok(decode::WatchLine::Event(event)) => LineOutcome::Event(event),
        Ok(decode::WatchLine::Error(status)) => {
            tracing::info!(code = status.code, reason = %status.reason, message = %status.message, "watch ERROR event");
            LineOutcome::Failed(classify_status(
                status.code,
                &status.reason,
                &status.message,
                None,
            ))
        }
        // An incomplete last line: the body was cut; resume like a clean close.
        Err(e) if e.is_eof() && cut => LineOutcome::Cut,
        // The same, cut inside a multi-byte character.
        Err(_) if cut && std::str::from_utf8(line).is_err_and(|u| u.error_len().is_none()) => {
            LineOutcome::Cut
        }
        Err(e) => {
            if let Some(why) = decode::skippable_watch_line::<K>(line) {
                // R-17 steps 2–3: logged and skipped; the resourceVersion stays.
                tracing::warn!(%e, why, "watch event skipped");
                return LineOutcome::Skipped;
            }
            match decode::bare_status(line) {
                Some(status) => LineOutcome::Failed(classify(&kube::Error::Api(Box::new(status)))),
                None => {
                    tracing::warn!(%e, "malformed watch event");
                    LineOutcome::Failed(classify(&kube::Error::SerdeError(e)))
                }
            }
        }
    }
}

/// The state of a watch body being read and decoded line by line.
pub(super) struct WatchBody {
    reader: LineReader,
    line: Vec<u8>,
    decoder: LineDecoder,
    options: DecodeOptions,
    done: bool,
}

impl WatchBody {
    /// Reads and decodes `reader`'s lines.
    pub(super) fn new(reader: LineReader, options: DecodeOptions) -> Self {
        WatchBody {
            reader,
            line: Vec::with_capacity(16 * 1024),
            decoder: LineDecoder::default(),
            options,
            done: false,
        }
    }

    /// The next event; `None` at the body's end. Nothing follows a failure.
    pub(super) async fn next_event<K: DeserializeOwned>(
        &mut self,
    ) -> Option<Result<SourceEvent<K>, Failure>> {
        loop {
            if self.done {
                return None;
            }
            if self.line.capacity() > KEEP_LINE_CAPACITY {
                self.line = Vec::with_capacity(16 * 1024);
            }
            self.line.clear();
            let outcome = match self.reader.next_line(&mut self.line).await {
                Read::End => LineOutcome::Cut,
                Read::Failed(failure) => LineOutcome::Failed(failure),
                Read::Line { cut } => decode_line(&mut self.decoder, &self.line, cut, self.options),
            };
            match outcome {
                LineOutcome::Event(event) => return Some(Ok(event)),
                LineOutcome::Skipped => {}
                LineOutcome::Cut => self.done = true,
                LineOutcome::Failed(failure) => {
                    self.done = true;
                    return Some(Err(failure));
                }
            }
        }
    }
}

/// Decodes a watch body, one event per line, ending at the first failure.
pub(crate) fn watch_stream<K: DeserializeOwned + Send + 'static>(
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    options: DecodeOptions,
    deadline: tokio::time::Instant,
) -> futures::stream::BoxStream<'static, Result<SourceEvent<K>, Failure>> {
    let state = WatchBody::new(LineReader::new(body, deadline), options);
    futures::stream::unfold(state, |mut st| async move {
        let item = st.next_event::<K>().await?;
        Some((item, st))
    })
    .boxed()
}

/// The longest watch line accepted (one event). Objects are limited to about
/// 1.5 MiB by etcd; a line past this is a broken or hostile stream, failed
/// as malformed rather than buffered without end.
pub const MAX_WATCH_LINE: usize = 64 << 20;

/// A line buffer that grew past this (a very large object) is given back
/// once that line is decoded.
const KEEP_LINE_CAPACITY: usize = 4 << 20;

/// Appends up to and including the next `\n` to `line`, like `read_until`,
/// but fails with `InvalidData` once the line passes `max` bytes.
async fn read_line_capped(
    body: &mut Pin<Box<dyn AsyncBufRead + Send>>,
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    let start = line.len();
    let mut read = 0;
    loop {
        let buf = body.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read);
        }
        let (n, end) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..n]);
        body.as_mut().consume(n);
        read += n;
        if end {
            return Ok(read);
        }
        if line.len() - start > max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("watch event longer than {max} bytes"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[tokio::test]
    async fn a_watch_line_past_the_cap_fails_and_shorter_ones_read_whole() {
        let data = b"{\"a\":1}\n0123456789abcdef\nlast".to_vec();
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> = Box::pin(
            futures::io::BufReader::with_capacity(4, futures::io::Cursor::new(data)),
        );
        let mut line = Vec::new();
        assert_eq!(read_line_capped(&mut body, &mut line, 12).await.unwrap(), 8);
        assert_eq!(line, b"{\"a\":1}\n");
        line.clear();
        let err = read_line_capped(&mut body, &mut line, 12)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        // A last line without its newline is returned as read (EOF).
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::io::Cursor::new(b"last".to_vec()));
        line.clear();
        assert_eq!(read_line_capped(&mut body, &mut line, 12).await.unwrap(), 4);
        assert_eq!(read_line_capped(&mut body, &mut line, 12).await.unwrap(), 0);
    }

    /// Reads a watch body to its end: the events, then the failure that ended it, if any.
    async fn read_watch(body: &[u8]) -> (Vec<String>, Option<Failure>) {
        let body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::io::Cursor::new(body.to_vec()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut stream = watch_stream::<ConfigMap>(body, DecodeOptions::default(), deadline);
        let mut names = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(SourceEvent::Added(o) | SourceEvent::Modified(o) | SourceEvent::Deleted(o)) => {
                    names.push(o.metadata.name.unwrap_or_default())
                }
                Ok(SourceEvent::Bookmark { .. }) => names.push("bookmark".into()),
                Err(f) => return (names, Some(f)),
            }
        }
        (names, None)
    }

    fn added(object: &str) -> String {
        format!("{{\"type\":\"ADDED\",\"object\":{object}}}\n")
    }

    /// R-17 step 2 (review note M4): an event whose object is of another
    /// kind is skipped; the watch goes on. A line that is not a decodable
    /// event of our kind (broken metadata included) still fails the watch as
    /// malformed: skipping it would lose the change without a relist.
    #[tokio::test]
    async fn a_watch_skips_objects_of_another_kind() {
        let cm = |name: &str| {
            format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","resourceVersion":"5"}},"data":{{"a":"b"}}}}"#
            )
        };
        let secret = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","resourceVersion":"6"},"type":"Opaque","data":{"a":"Yg=="}}"#;
        let body = [added(&cm("one")), added(secret), added(&cm("two"))].concat();
        assert_eq!(
            read_watch(body.as_bytes()).await,
            (vec!["one".to_owned(), "two".to_owned()], None)
        );

        for bad in [
            r#"{"kind":"ConfigMap","metadata":{"name":"x"},"data":[1]}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"a":"b"},"metadata":7}"#,
        ] {
            let broken = [added(&cm("one")), added(bad), added(&cm("two"))].concat();
            assert_eq!(
                read_watch(broken.as_bytes()).await,
                (vec!["one".to_owned()], Some(Failure::Malformed)),
                "{bad}"
            );
        }
        // A Status line of its own is the server's answer, not a malformed event.
        let gone = [
            added(&cm("one")),
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}"#.to_owned(),
        ]
        .concat();
        assert_eq!(
            read_watch(gone.as_bytes()).await,
            (vec!["one".to_owned()], Some(Failure::Expired))
        );
    }

    /// A body cut inside a multi-byte character ends the watch like a clean
    /// close (re-watch from the last resourceVersion), as a cut anywhere else
    /// does; the same bytes followed by a newline are a malformed line.
    #[tokio::test]
    async fn a_body_cut_inside_a_character_ends_the_watch_cleanly() {
        let first = added(r#"{"metadata":{"name":"one","resourceVersion":"5"}}"#);
        let mut cut = first.clone().into_bytes();
        cut.extend_from_slice(
            "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"é".as_bytes(),
        );
        cut.pop();
        assert_eq!(read_watch(&cut).await, (vec!["one".to_owned()], None));
        cut.push(b'\n');
        assert_eq!(
            read_watch(&cut).await,
            (vec!["one".to_owned()], Some(Failure::Malformed))
        );
    }

    /// A body cut inside an event ends the watch like a clean close; the
    /// same incomplete event followed by a newline is a whole line the
    /// server sent broken: malformed, not a close to re-watch after.
    #[tokio::test]
    async fn an_incomplete_line_with_its_newline_is_malformed() {
        let first = added(r#"{"metadata":{"name":"one","resourceVersion":"5"}}"#);
        let mut cut = first.into_bytes();
        cut.extend_from_slice(br#"{"type":"MODIFIED","object":{"metadata":{"name":"two""#);
        assert_eq!(read_watch(&cut).await, (vec!["one".to_owned()], None));
        cut.push(b'\n');
        assert_eq!(
            read_watch(&cut).await,
            (vec!["one".to_owned()], Some(Failure::Malformed))
        );
    }
}
