//! The accept loop: HTTP/1.1 connections on the Unix socket, each served by the [`Api`] within
//! the connection limits, and a graceful stop.
//!
//! Limits, so that no client can hold the daemon's memory or sockets for long ([`connections`]
//! has the rest):
//! - a request head larger than `max_header_bytes` is answered 431 by hyper;
//! - a connection that is not running a request (waiting for one, sending its head, or taking
//!   its response) is closed after `idle_timeout`; the API bounds the time to send a body;
//! - at most `max_connections` are open; at the cap a new one takes the place of the one that
//!   has waited longest.
//!
//! On the first stop request the daemon drains: open connections finish the request they are
//! running and close, and new requests are still read, each answered `503 shutting_down`, so
//! that clients learn why rather than find no socket or a closed connection. That holds for a
//! request already on its way on an open connection: one accepted just before the stop whose
//! head is not read yet, or a kept-alive one whose client sent its next request as the drain
//! began. So a connection between requests is closed only after [`DRAIN_GRACE`] without a
//! request; one that takes a request (or is in one) closes once it is answered. The drain ends
//! when the connections are done, at the drain deadline, or at a second stop request.
//!
//! # Design: connections
//! `server/` owns the accept loop and reads each connection's peer credentials at accept
//! (`caller/mod.rs`, `Identify::caller`). `server/connections.rs` tracks every open connection and what it
//! is doing: waiting for a request (or for its answer to be taken), reading a body, or running a
//! request. At `--max-connections` a new connection takes the place of the one that has waited or
//! read longest, which is closed; only when every connection is running a request is the new one
//! closed at once. Connections running requests are bounded already, by the pools and their
//! queues. A connection that is not running a request is closed after `--idle-timeout-ms`; the API
//! gives a body `--body-read-timeout-ms` to arrive (408); hyper refuses a head over
//! `--max-header-bytes` (431). So a client that holds connections open without using them costs
//! the daemon at most `--max-connections` sockets and buffers, and only for a while
//! (`daemon/tests/connections.rs` measures it). `server::serve_one` serves one connection over any
//! byte stream exactly as the accept loop does, for the tests and the fuzzer.

pub mod connections;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::Request;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use self::connections::{Admission, Admitted, Connections, Phase};
use crate::caller::Identify;
use crate::executor::Executor;
use crate::http::Api;
use crate::job::Caller;

/// The smallest read buffer hyper accepts, and a size that reads bodies in few calls.
const READ_BUFFER: usize = 64 * 1024;

/// How the server treats its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Connections open at once.
    pub max_connections: usize,
    /// Largest request head (request line and headers).
    pub max_header_bytes: usize,
    /// How long a connection may stay open without running a request.
    pub idle_timeout: Duration,
    /// How long a stop waits for open connections.
    pub drain: Duration,
    /// How a connection's caller is named.
    pub identify: Identify,
}

/// Why the daemon stops: the signal's name, for the log.
pub type StopRequest = &'static str;

/// The next stop request; never, once nobody can send one.
pub async fn next_stop(stops: &mut mpsc::Receiver<StopRequest>) -> StopRequest {
    match stops.recv().await {
        Some(why) => why,
        None => std::future::pending().await,
    }
}

/// How long, once the daemon drains, a connection between requests is kept for a request that
/// may be on its way (see the module's documentation): long enough for a client that has
/// connected to send its head, short enough that idle kept-alive connections do not hold the
/// drain.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Serves `api` on `listener` until a stop request arrives on `stops`, then drains (see the
/// module's documentation).
pub async fn serve<E: Executor>(
    listener: UnixListener,
    api: Arc<Api<E>>,
    config: ServerConfig,
    stops: &mut mpsc::Receiver<StopRequest>,
) {
    let (draining, drain) = watch::channel(None);
    let server = Server {
        connections: Connections::new(config.max_connections),
        api,
        config,
        drain,
    };
    let why = loop {
        tokio::select! {
            accepted = listener.accept() => server.accepted(accepted).await,
            why = next_stop(stops) => break why,
        }
    };
    let open = server.connections.count();
    info!(
        open,
        "{why}: draining; new requests are refused while open connections finish"
    );
    server.api.drain();
    draining.send_replace(Some(Instant::now()));
    crate::sys::notify::stopping(&format!("{why}: draining {open} connections"));
    let drained = server.connections.all_closed();
    tokio::pin!(drained);
    let deadline = tokio::time::sleep(config.drain);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut drained => {
                info!("all connections closed");
                break;
            }
            () = &mut deadline => {
                warn!(drain_ms = config.drain.as_millis() as u64, "drain deadline passed with connections still open");
                break;
            }
            why = next_stop(stops) => {
                warn!(open = server.connections.count(), "{why} again: stopping now, without waiting for open connections");
                break;
            }
            accepted = listener.accept() => server.accepted(accepted).await,
        }
    }
}

struct Server<E> {
    connections: Arc<Connections>,
    api: Arc<Api<E>>,
    config: ServerConfig,
    /// When the drain began; `None` until it does.
    drain: watch::Receiver<Option<Instant>>,
}

impl<E: Executor> Server<E> {
    /// Serves an accepted connection.
    async fn accepted(
        &self,
        accepted: std::io::Result<(tokio::net::UnixStream, tokio::net::unix::SocketAddr)>,
    ) {
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off rather than spin.
                warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                return;
            }
        };
        // Who connected, as the kernel saw it at connect(2): every request on the connection
        // is theirs.
        let caller = match self.config.identify.caller(&stream) {
            Ok(caller) => caller,
            Err(e) => {
                warn!("cannot read a connection's peer credentials ({e}); closing it");
                return;
            }
        };
        let metrics = self.api.metrics();
        let admitted = match self.connections.admit() {
            Admission::Admitted(admitted) => admitted,
            Admission::Replaced(admitted) => {
                metrics.connection_dropped("replaced");
                admitted
            }
            Admission::Refused => {
                debug!("every connection runs a request; refusing a new one");
                metrics.connection_dropped("refused");
                return;
            }
        };
        metrics.set_connections_open(self.connections.count());
        let admitted = Arc::new(admitted);
        let http = builder(&self.config);
        let connection =
            serve_connection(&http, stream, self.api.clone(), admitted.clone(), caller);
        let limits = Guard {
            idle_timeout: self.config.idle_timeout,
            drain: self.drain.clone(),
        };
        let connections = self.connections.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let closed = guard_connection(connection, admitted, limits).await;
            if closed == Closed::Idle {
                metrics.connection_dropped("idle_timeout");
            }
            metrics.set_connections_open(connections.count());
        });
    }
}

/// The HTTP/1.1 settings every connection is served with.
fn builder(config: &ServerConfig) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.idle_timeout)
        .max_header_size(config.max_header_bytes)
        .max_buf_size(config.max_header_bytes.max(READ_BUFFER));
    http
}

/// Serves one connection from `caller` over any byte stream exactly as the daemon serves a
/// client (the same HTTP settings, the API, the phases a connection goes through), until it
/// ends: for tests and the fuzzer, which drive it in memory. The idle timeout and the connection
/// cap are the accept loop's and are not applied here.
pub async fn serve_one<E, I>(
    io: I,
    api: Arc<Api<E>>,
    config: &ServerConfig,
    caller: Caller,
) -> hyper::Result<()>
where
    E: Executor,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let admitted = match Connections::new(1).admit() {
        Admission::Admitted(admitted) | Admission::Replaced(admitted) => Arc::new(admitted),
        Admission::Refused => unreachable!("an empty tracker admits"),
    };
    serve_connection(&builder(config), io, api, admitted, caller).await
}

/// One connection from `caller` served by `api`, reporting its phases to `admitted`.
fn serve_connection<E, I>(
    http: &http1::Builder,
    io: I,
    api: Arc<Api<E>>,
    admitted: Arc<Admitted>,
    caller: Caller,
) -> impl GracefulConnection<Error = hyper::Error> + Send + use<E, I>
where
    E: Executor,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        let api = api.clone();
        let admitted = admitted.clone();
        let caller = caller.clone();
        async move {
            admitted.set(if request.body().is_end_stream() {
                Phase::Running
            } else {
                Phase::Reading
            });
            let request = request.map(|body| Tracked {
                body,
                admitted: admitted.clone(),
                rule: request_phase,
            });
            let response = api.handle(request, caller).await;
            admitted.set(Phase::Waiting);
            Ok::<_, Infallible>(response.map(|body| Tracked {
                body,
                admitted,
                rule: answer_phase,
            }))
        }
    });
    http.serve_connection(TokioIo::new(io), service)
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// By the client, or after its last request.
    Done,
    /// It waited `idle_timeout` without running a request.
    Idle,
    /// A newer connection took its place.
    Replaced,
}

/// What a connection's task holds it to.
struct Guard {
    /// How long it may wait without running a request.
    idle_timeout: Duration,
    /// When the daemon began to drain, once it has.
    drain: watch::Receiver<Option<Instant>>,
}

/// Drives `connection` until it ends, it has waited `idle_timeout` without running a request,
/// or a newer connection took its place. Dropping the connection closes it. Once the daemon
/// drains, the connection is told to close after the request it is in, or takes, or after
/// [`DRAIN_GRACE`] between requests (hyper closes it at once if it is between requests then).
async fn guard_connection<C>(connection: C, admitted: Arc<Admitted>, mut limits: Guard) -> Closed
where
    C: GracefulConnection<Error = hyper::Error>,
{
    let mut state = admitted.watch();
    let mut shutting = false;
    tokio::pin!(connection);
    loop {
        let now = *state.borrow_and_update();
        if now.evicted {
            debug!("closing a connection to make room for a new one");
            return Closed::Replaced;
        }
        let waiting = now.phase == Phase::Waiting;
        let idle_until = waiting.then(|| now.since + limits.idle_timeout);
        let drain = *limits.drain.borrow_and_update();
        let mut shut_at = None;
        if let (Some(began), false) = (drain, shutting) {
            let at = if waiting {
                now.since.max(began) + DRAIN_GRACE
            } else {
                Instant::now()
            };
            if at <= Instant::now() {
                connection.as_mut().graceful_shutdown();
                shutting = true;
            } else {
                shut_at = Some(at);
            }
        }
        tokio::select! {
            ended = &mut connection => {
                if let Err(e) = ended {
                    debug!("connection ended with an error: {e}");
                }
                return Closed::Done;
            }
            _ = state.changed() => {}
            Ok(()) = limits.drain.changed(), if drain.is_none() => {}
            () = sleep_until(shut_at) => {}
            () = sleep_until(idle_until) => {
                debug!("closing a connection idle for {:?}", limits.idle_timeout);
                return Closed::Idle;
            }
        }
    }
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A body that moves its connection from phase to phase as it is polled, by `rule`.
struct Tracked<B> {
    body: B,
    admitted: Arc<Admitted>,
    rule: fn(Polled) -> Option<Phase>,
}

/// What polling a body gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polled {
    /// Nothing yet.
    Pending,
    /// A frame, the last one when `last`.
    Frame { last: bool },
    /// The end.
    End,
}

/// A request body moves its connection to [`Phase::Running`] once it has all arrived.
fn request_phase(polled: Polled) -> Option<Phase> {
    matches!(polled, Polled::Frame { last: true } | Polled::End).then_some(Phase::Running)
}

/// An answer's body keeps its connection [`Phase::Running`] while it waits on the daemon (a
/// streamed program that has not written yet), and [`Phase::Waiting`] while it waits on the
/// client to take what was sent: so a slow reader is closed at the idle timeout, and a quiet
/// program is not.
fn answer_phase(polled: Polled) -> Option<Phase> {
    Some(match polled {
        Polled::Pending => Phase::Running,
        Polled::Frame { .. } | Polled::End => Phase::Waiting,
    })
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        let polled = match &frame {
            Poll::Pending => Polled::Pending,
            Poll::Ready(None) => Polled::End,
            Poll::Ready(Some(_)) => Polled::Frame {
                last: self.body.is_end_stream(),
            },
        };
        if let Some(phase) = (self.rule)(polled) {
            self.admitted.set(phase);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
