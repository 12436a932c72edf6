//! The listener and its connections: the accept loop, HTTPS handshakes, authentication and
//! authorization in front of the router, the request log, and going down and up again
//! (a restart) with every connection closed the way a dying server closes them.
//!
//! One control task owns the listener and a `JoinSet` of connection tasks; commands from
//! [`ServerHandle`](crate::ServerHandle) (or `POST /admin/faults/restart`) take it down and
//! up. Connections learn that they must close from a `watch` channel of close orders: a
//! reset (`SO_LINGER` 0, the peer sees `ECONNRESET`), an EOF (a plain close in the middle of
//! whatever was being sent), or graceful (finish the request in flight, then close).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt as _;

use crate::auth::{Auth, UserInfo};
use crate::handle::ServerError;
use crate::request_info::RequestInfo;
use crate::requests::{RequestRecord, Requests};
use crate::restart::{CloseMode, DownMode, RestartOptions};
use crate::server::error_response;
use crate::status::ApiError;
use crate::store::Store;
use crate::tls::{TlsState, certificate_user};

/// How long connections get to finish on shutdown (and a restart waits for them to go)
/// before they are dropped regardless.
const GRACE: Duration = Duration::from_secs(2);

/// Whether the server is serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Accepting connections and answering requests.
    Serving,
    /// Down for a restart: connections are refused or reset.
    Down,
    /// Shut down for good.
    Stopped,
}

/// The phase and the number of restarts completed (the epoch requests are logged with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServingState {
    /// The phase.
    pub phase: Phase,
    /// Restarts completed so far.
    pub epoch: u64,
}

type Done = oneshot::Sender<Result<(), ServerError>>;

pub(crate) enum Command {
    /// Close every connection and stop serving; with `auto_up`, serve again after
    /// `options.down_for` and answer `done` then, else answer `done` once down.
    Down {
        options: RestartOptions,
        exempt: Option<u64>,
        auto_up: bool,
        done: Option<Done>,
    },
    /// Serve again (answer `done` once serving).
    Up { done: Option<Done> },
}

/// The handle's side of the control task.
#[derive(Debug, Clone)]
pub(crate) struct Control {
    commands: mpsc::UnboundedSender<Command>,
    state: watch::Receiver<ServingState>,
}

impl Control {
    pub(crate) fn send(&self, command: Command) -> Result<(), ServerError> {
        self.commands
            .send(command)
            .map_err(|_| ServerError::Stopped)
    }

    pub(crate) fn state(&self) -> ServingState {
        *self.state.borrow()
    }
}

/// Everything the control task needs.
pub(crate) struct ServeParts {
    pub(crate) listener: TcpListener,
    pub(crate) addr: SocketAddr,
    pub(crate) router: Router,
    pub(crate) tls: Option<Arc<TlsState>>,
    pub(crate) auth: Option<Arc<Auth>>,
    pub(crate) requests: Requests,
    pub(crate) store: Arc<Store>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Abort(CloseMode),
    Graceful,
}

/// What every connection started before `generation` must do.
#[derive(Debug, Clone, Copy)]
struct CloseOrder {
    generation: u64,
    how: How,
    /// A connection that closes gracefully whatever `how` says (the one that asked for
    /// the restart over HTTP, so it gets its answer).
    exempt: Option<u64>,
}

/// What connections share.
struct ConnCtx {
    router: Router,
    tls: Option<Arc<TlsState>>,
    auth: Option<Arc<Auth>>,
    requests: Requests,
    epoch: AtomicU64,
    commands: mpsc::UnboundedSender<Command>,
    orders: watch::Receiver<CloseOrder>,
}

/// Start the control task's future (the caller spawns or awaits it).
pub(crate) fn start(
    parts: ServeParts,
) -> (
    Control,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (commands, command_rx) = mpsc::unbounded_channel();
    let (state_tx, state) = watch::channel(ServingState {
        phase: Phase::Serving,
        epoch: 0,
    });
    let (orders_tx, orders) = watch::channel(CloseOrder {
        generation: 0,
        how: How::Graceful,
        exempt: None,
    });
    let ctx = Arc::new(ConnCtx {
        router: parts.router,
        tls: parts.tls,
        auth: parts.auth,
        requests: parts.requests,
        epoch: AtomicU64::new(0),
        commands: commands.clone(),
        orders,
    });
    let task = ControlTask {
        listener: Some(parts.listener),
        addr: parts.addr,
        store: parts.store,
        shutdown: parts.shutdown,
        commands: command_rx,
        state: state_tx,
        orders: orders_tx,
        conns: JoinSet::new(),
        next_conn: 0,
        down: None,
        ctx,
    };
    (Control { commands, state }, task.run())
}

struct Down {
    options: RestartOptions,
    /// When to serve again, and whom to tell.
    up_at: Option<(Instant, Option<Done>)>,
}

struct ControlTask {
    listener: Option<TcpListener>,
    addr: SocketAddr,
    store: Arc<Store>,
    shutdown: watch::Receiver<bool>,
    commands: mpsc::UnboundedReceiver<Command>,
    state: watch::Sender<ServingState>,
    orders: watch::Sender<CloseOrder>,
    conns: JoinSet<()>,
    next_conn: u64,
    down: Option<Down>,
    ctx: Arc<ConnCtx>,
}

async fn accept(listener: &Option<TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_up(down: &Option<Down>) {
    match down.as_ref().and_then(|d| d.up_at.as_ref()) {
        Some((at, _)) => tokio::time::sleep_until(*at).await,
        None => std::future::pending().await,
    }
}

/// Reset a socket when its last handle closes (the peer sees `ECONNRESET`).
fn reset_on_close(socket: &impl std::os::fd::AsFd) {
    if let Err(e) = socket2::SockRef::from(socket).set_linger(Some(Duration::ZERO)) {
        tracing::debug!(error = %e, "could not set SO_LINGER");
    }
}

impl ControlTask {
    async fn run(mut self) {
        let addr = self.addr;
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                biased;
                _ = async { shutdown.wait_for(|s| *s).await.is_ok() } => break,
                command = self.commands.recv() => match command {
                    Some(command) => self.command(command).await,
                    None => break,
                },
                _ = sleep_until_up(&self.down) => {
                    let done = self.down.as_mut().and_then(|d| d.up_at.take()).and_then(|(_, done)| done);
                    let result = self.come_up().await;
                    if let Some(done) = done {
                        let _ = done.send(result);
                    }
                }
                accepted = accept(&self.listener) => match accepted {
                    Ok((tcp, _)) => self.accepted(tcp),
                    Err(e) => {
                        // Out of file descriptors and the like: do not spin on it.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                Some(_) = self.conns.join_next(), if !self.conns.is_empty() => {}
            }
        }
        self.listener = None;
        self.close_connections(How::Graceful, None).await;
        self.set_phase(Phase::Stopped);
        tracing::info!(%addr, "api server stopped");
    }

    fn set_phase(&self, phase: Phase) {
        // (Not `send_replace` with a `borrow()` inside: the borrow's read lock would
        // deadlock the write.)
        self.state.send_modify(|s| s.phase = phase);
    }

    fn accepted(&mut self, tcp: TcpStream) {
        if self.down.is_some() {
            // DownMode::Reset: the port is open but nothing answers.
            self.ctx.requests.reset_while_down();
            reset_on_close(&tcp);
            return;
        }
        self.ctx.requests.connection_accepted();
        let id = self.next_conn;
        self.next_conn += 1;
        let ctx = self.ctx.clone();
        self.conns.spawn(connection(tcp, id, ctx));
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Down {
                options,
                exempt,
                auto_up,
                done,
            } => {
                self.go_down(options.clone(), exempt).await;
                if auto_up {
                    let at = Instant::now() + options.down_for;
                    if let Some(d) = self.down.as_mut() {
                        d.up_at = Some((at, done));
                    }
                } else if let Some(done) = done {
                    let _ = done.send(Ok(()));
                }
            }
            Command::Up { done } => {
                let result = if self.down.is_some() {
                    self.come_up().await
                } else {
                    Ok(())
                };
                if let Some(done) = done {
                    let _ = done.send(result);
                }
            }
        }
    }

    async fn go_down(&mut self, options: RestartOptions, exempt: Option<u64>) {
        tracing::info!(addr = %self.addr, ?options, "api server going down");
        if options.while_down == DownMode::Refuse {
            self.listener = None;
        }
        self.set_phase(Phase::Down);
        self.close_connections(How::Abort(options.close), exempt)
            .await;
        // Streams whose connection is gone have unregistered; nothing else may stay.
        self.store.drop_all_watchers();
        if let Some(Down {
            up_at: Some((_, Some(done))),
            ..
        }) = self.down.take()
        {
            // A restart was pending: this later command replaces it.
            let _ = done.send(Ok(()));
        }
        self.down = Some(Down {
            options,
            up_at: None,
        });
    }

    async fn come_up(&mut self) -> Result<(), ServerError> {
        let Some(down) = self.down.as_ref() else {
            return Ok(());
        };
        if self.listener.is_none() {
            // The port was free a moment ago; retry briefly in case the kernel holds it.
            let mut tries = 0;
            let listener = loop {
                match TcpListener::bind(self.addr).await {
                    Ok(l) => break l,
                    Err(source) if tries >= 20 => {
                        tracing::error!(addr = %self.addr, error = %source, "cannot listen again");
                        return Err(ServerError::Bind {
                            addr: self.addr,
                            source,
                        });
                    }
                    Err(_) => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            };
            self.listener = Some(listener);
        }
        if !down.options.keep_history {
            // A real apiserver's watch cache starts empty at the current revision.
            self.store.compact();
        }
        self.down = None;
        let epoch = self.state.borrow().epoch + 1;
        self.ctx.epoch.store(epoch, Ordering::SeqCst);
        self.state.send_replace(ServingState {
            phase: Phase::Serving,
            epoch,
        });
        tracing::info!(addr = %self.addr, epoch, "api server serving again");
        Ok(())
    }

    /// Order every connection closed and wait (at most [`GRACE`]) until they are.
    async fn close_connections(&mut self, how: How, exempt: Option<u64>) {
        self.orders.send_modify(|o| {
            o.generation += 1;
            o.how = how;
            o.exempt = exempt;
        });
        let deadline = Instant::now() + GRACE;
        while !self.conns.is_empty() {
            match tokio::time::timeout_at(deadline, self.conns.join_next()).await {
                Ok(_) => {}
                Err(_) => {
                    tracing::debug!(
                        left = self.conns.len(),
                        "dropping connections after the grace period"
                    );
                    self.conns.abort_all();
                    while self.conns.join_next().await.is_some() {}
                }
            }
        }
    }
}

/// Waits for a close order newer than `since`.
async fn close_order(orders: &mut watch::Receiver<CloseOrder>, since: u64) -> CloseOrder {
    match orders.wait_for(|o| o.generation > since).await {
        Ok(o) => *o,
        // The control task is gone: close as on shutdown.
        Err(_) => CloseOrder {
            generation: since + 1,
            how: How::Graceful,
            exempt: None,
        },
    }
}

async fn connection(tcp: TcpStream, id: u64, ctx: Arc<ConnCtx>) {
    // Watch events are small writes: without TCP_NODELAY, Nagle plus the client's delayed
    // ACK holds them back by up to 40 ms (measured: p99 20–40 ms → 0.3 ms with it set).
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    // A second handle on the socket, to make its close a reset when told to.
    let (tcp, socket) = match tcp.into_std().and_then(|s| {
        let dup = s.try_clone()?;
        Ok((TcpStream::from_std(s)?, dup))
    }) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "could not set the connection up");
            return;
        }
    };
    let mut orders = ctx.orders.clone();
    let since = orders.borrow().generation;
    match ctx.tls.clone() {
        None => serve_io(tcp, None, id, ctx, orders, since, socket).await,
        Some(tls) => {
            let handshake = tokio::select! {
                r = tls.acceptor.accept(tcp) => r,
                order = close_order(&mut orders, since) => {
                    if let How::Abort(CloseMode::Reset) = order.how {
                        reset_on_close(&socket);
                    }
                    return;
                }
            };
            match handshake {
                Ok(stream) => {
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(certificate_user);
                    serve_io(stream, peer, id, ctx, orders, since, socket).await;
                }
                Err(e) => tracing::debug!(error = %e, "TLS handshake failed"),
            }
        }
    }
}

async fn serve_io<I>(
    io: I,
    peer: Option<UserInfo>,
    id: u64,
    ctx: Arc<ConnCtx>,
    mut orders: watch::Receiver<CloseOrder>,
    since: u64,
    socket: std::net::TcpStream,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service_ctx = ctx.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let ctx = service_ctx.clone();
        let peer = peer.clone();
        async move { Ok::<_, Infallible>(ctx.handle(req, id, peer.as_ref()).await) }
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let order = tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        order = close_order(&mut orders, since) => order,
    };
    let how = if order.exempt == Some(id) {
        How::Graceful
    } else {
        order.how
    };
    match how {
        How::Abort(mode) => {
            if mode == CloseMode::Reset {
                reset_on_close(&socket);
            }
            // Dropping the connection (then `socket`) cuts whatever was being sent.
        }
        How::Graceful => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
    }
}

impl ConnCtx {
    async fn handle(
        &self,
        req: hyper::Request<Incoming>,
        id: u64,
        peer: Option<&UserInfo>,
    ) -> Response {
        let method = req.method().as_str().to_string();
        let path = req.uri().path().to_string();
        let query = req.uri().query().map(str::to_string);
        let info = RequestInfo::resolve(&method, &path, query.as_deref());
        let (response, user) = self.answer(req, id, peer, &info).await;
        self.requests.record(RequestRecord {
            seq: 0,
            at: Instant::now(),
            epoch: self.epoch.load(Ordering::SeqCst),
            method,
            path,
            query,
            verb: info.verb,
            user,
            status: response.status().as_u16(),
        });
        response
    }

    async fn answer(
        &self,
        mut req: hyper::Request<Incoming>,
        id: u64,
        peer: Option<&UserInfo>,
        info: &RequestInfo,
    ) -> (Response, Option<String>) {
        let mut name = None;
        if let Some(auth) = &self.auth {
            let user = match auth.authenticate(req.headers(), peer) {
                Ok(user) => user,
                Err(e) => return (error_response(&e), None),
            };
            name = Some(user.name.clone());
            if let Err(e) = auth.authorize(&user, info) {
                return (error_response(&e), name);
            }
            req.extensions_mut().insert(user);
        }
        let response = match (req.method(), req.uri().path()) {
            (&Method::POST, "/admin/faults/restart") => self.admin_restart(req, id).await,
            (&Method::GET, "/admin/requests") => self.admin_requests(),
            _ => match self.router.clone().oneshot(req.map(Body::new)).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
        };
        (response, name)
    }

    /// `POST /admin/faults/restart` with [`RestartOptions`] as JSON: answered at once,
    /// then the server goes down (this connection closes after the answer).
    async fn admin_restart(&self, req: hyper::Request<Incoming>, id: u64) -> Response {
        let body = match axum::body::to_bytes(Body::new(req.into_body()), 64 * 1024).await {
            Ok(b) => b,
            Err(e) => {
                return error_response(&ApiError::bad_request(format!("reading the body: {e}")));
            }
        };
        let options: RestartOptions = if body.iter().all(u8::is_ascii_whitespace) {
            RestartOptions::default()
        } else {
            match serde_json::from_slice(&body) {
                Ok(o) => o,
                Err(e) => {
                    return error_response(&ApiError::bad_request(format!(
                        "invalid restart options: {e}"
                    )));
                }
            }
        };
        let answer = json!({"restarting": true, "options": options});
        if self
            .commands
            .send(Command::Down {
                options,
                exempt: Some(id),
                auto_up: true,
                done: None,
            })
            .is_err()
        {
            return error_response(&ApiError::internal("the server is stopping"));
        }
        let mut response = json_response(StatusCode::ACCEPTED, Bytes::from(answer.to_string()));
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }

    /// `GET /admin/requests`: the request counts.
    fn admin_requests(&self) -> Response {
        let counts = self.requests.counts();
        let body = json!({
            "total": counts.total,
            "byVerb": counts.by_verb,
            "connections": counts.connections,
            "resetWhileDown": counts.reset_while_down,
            "epoch": self.epoch.load(Ordering::SeqCst),
        });
        json_response(StatusCode::OK, Bytes::from(body.to_string()))
    }
}

fn json_response(code: StatusCode, body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
