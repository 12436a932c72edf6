//! The program's own HTTP server (metrics and probes): HTTP/1.1 through
//! hyper, on its own thread and runtime, hardened against clients that
//! misbehave: a request head over [`Limits::max_head_bytes`] or with more
//! than [`Limits::max_headers`] headers is refused (431), a request with a
//! body is refused (413: no endpoint reads one), a client that does not
//! send its head within [`Limits::header_timeout`] is disconnected, no
//! connection lives longer than [`Limits::connection_lifetime`], and at
//! most [`Limits::max_connections`] are served at once (more are closed at
//! once). `axum::serve` exposes none of these knobs, hence the accept loop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

/// What a client may ask of the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Request line and headers, in bytes (at least 8 KiB, hyper's floor).
    pub max_head_bytes: usize,
    /// Headers per request.
    pub max_headers: usize,
    /// Time to send the request head.
    pub header_timeout: Duration,
    /// Longest life of one connection (keep-alive included).
    pub connection_lifetime: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    /// A scrape or a probe needs a few hundred bytes and milliseconds.
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            header_timeout: Duration::from_secs(5),
            connection_lifetime: Duration::from_secs(60),
            max_connections: 64,
        }
    }
}

/// A running server; stops when stopped or dropped.
pub struct HttpServer {
    /// The bound address.
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// Stops serving (open connections are dropped).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// 413 for any request that announces a body.
async fn refuse_bodies(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let sized = headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0");
    if sized || headers.contains_key(header::TRANSFER_ENCODING) {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are not accepted\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// Binds `addr` (before the work that would be wasted if it cannot be).
pub fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))
}

/// Serves `app` on `listener` within `limits` on a thread named `name`.
pub fn serve(
    listener: std::net::TcpListener,
    app: Router,
    limits: Limits,
    name: &str,
) -> anyhow::Result<HttpServer> {
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let app = app.layer(axum::middleware::from_fn(refuse_bodies));
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "HTTP listener");
                        return;
                    }
                };
                let permits = Arc::new(Semaphore::new(limits.max_connections));
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let (stream, peer) = tokio::select! {
                        _ = &mut rx => break,
                        Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                        accepted = listener.accept() => match accepted {
                            Ok(a) => a,
                            Err(e) => {
                                // Out of file descriptors, say: wait a little, not a hot loop.
                                tracing::warn!(error = %e, "HTTP accept failed");
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                continue;
                            }
                        },
                    };
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        tracing::debug!(%peer, "HTTP connection refused: too many open");
                        continue;
                    };
                    let service = TowerToHyperService::new(app.clone());
                    connections.spawn(async move {
                        let _permit = permit;
                        let mut builder = hyper::server::conn::http1::Builder::new();
                        builder
                            .timer(TokioTimer::new())
                            .header_read_timeout(limits.header_timeout)
                            .max_buf_size(limits.max_head_bytes.max(8192))
                            .max_header_size(limits.max_head_bytes)
                            .max_headers(limits.max_headers);
                        let connection = builder.serve_connection(TokioIo::new(stream), service);
                        match tokio::time::timeout(limits.connection_lifetime, connection).await {
                            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP connection"),
                            Err(_) => {
                                tracing::debug!(%peer, "HTTP connection outlived its lifetime")
                            }
                            Ok(Ok(())) => {}
                        }
                    });
                }
            });
        })?;
    Ok(HttpServer {
        addr: bound,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    fn start(limits: Limits) -> HttpServer {
        let app = Router::new().route("/x", get(|| async { "ok\n" }));
        serve(
            bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap(),
            app,
            limits,
            "test-http",
        )
        .unwrap()
    }

    /// Sends `request`, reads until the server closes (or 10 s): the status code, 0 for none.
    fn exchange(addr: SocketAddr, request: &[u8]) -> (u16, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(request);
        // A server closing on unread input resets the connection after its
        // answer: keep what was read before.
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (code, text)
    }

    const GET: &[u8] = b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";

    #[test]
    fn well_formed_requests_are_served() {
        let server = start(Limits::default());
        let (code, text) = exchange(server.addr, GET);
        assert_eq!(code, 200, "{text}");
        assert!(text.ends_with("ok\n"), "{text}");
        assert_eq!(
            exchange(
                server.addr,
                b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
            )
            .0,
            405
        );
    }

    #[test]
    fn oversized_heads_and_too_many_headers_are_refused() {
        let server = start(Limits::default());
        let big = format!(
            "GET /x HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        assert_eq!(exchange(server.addr, big.as_bytes()).0, 431);
        let long_uri = format!(
            "GET /x?{} HTTP/1.1\r\nHost: a\r\n\r\n",
            "q".repeat(32 * 1024)
        );
        assert_eq!(exchange(server.addr, long_uri.as_bytes()).0, 431);
        let many: String = (0..100).map(|i| format!("X-H{i}: v\r\n")).collect();
        let many = format!("GET /x HTTP/1.1\r\nHost: a\r\n{many}Connection: close\r\n\r\n");
        assert_eq!(exchange(server.addr, many.as_bytes()).0, 431);
        // Still serving.
        assert_eq!(exchange(server.addr, GET).0, 200);
    }

    #[test]
    fn requests_with_bodies_are_refused() {
        let server = start(Limits::default());
        let sized = b"GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100000000\r\n\r\nabc";
        assert_eq!(exchange(server.addr, sized).0, 413);
        let chunked =
            b"GET /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
        assert_eq!(exchange(server.addr, chunked).0, 413);
        let malformed = b"NOT HTTP AT ALL\r\n\r\n";
        assert_eq!(exchange(server.addr, malformed).0, 400);
    }

    #[test]
    fn slow_clients_are_disconnected_and_do_not_hold_others() {
        let limits = Limits {
            header_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let server = start(limits);
        let started = Instant::now();
        let mut slow = TcpStream::connect(server.addr).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        slow.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n").unwrap();
        // Meanwhile another client is served.
        assert_eq!(exchange(server.addr, GET).0, 200);
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "disconnected after {waited:?}"
        );
    }

    #[test]
    fn connections_beyond_the_limit_are_closed_at_once() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let server = start(limits);
        let held: Vec<TcpStream> = (0..2)
            .map(|_| {
                let mut s = TcpStream::connect(server.addr).unwrap();
                // A complete keep-alive exchange proves the connection is being served.
                s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
                let mut buf = [0u8; 256];
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                assert!(s.read(&mut buf).unwrap() > 0);
                s
            })
            .collect();
        let (code, _) = exchange(server.addr, GET);
        assert_eq!(code, 0, "a third connection is closed unanswered");
        drop(held);
        // The slots free up again.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if exchange(server.addr, GET).0 == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "slots never freed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
