//! Async client for hyperlightd's HTTP API on a Unix socket.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hyperlightd_client::Error> {
//! use hyperlightd_client::{Client, ExecRequest, Language};
//!
//! let client = Client::connect("/run/hyperlightd/hyperlightd.sock");
//! let response = client.exec(&ExecRequest::new(Language::Javascript, "1 + 1")).await?;
//! assert_eq!(response.result, serde_json::json!(2));
//! # Ok(()) }
//! ```
//!
//! The public API speaks only in the wire types of `hyperlightd-api` (re-exported here) and
//! [`Error`]; hyper stays an implementation detail.
//!
//! Every call is bounded: connecting by [`Client::with_connect_timeout`], the answer by the
//! request's own time limit plus a margin for an execution (see [`Client::exec`]), or by
//! [`Client::with_response_timeout`]. A failure says whether the request was never sent
//! ([`Error::Unreachable`], safe to retry) or was sent and its answer lost
//! ([`Error::ConnectionLost`], [`Error::TimedOut`]: the program may have run).

#![forbid(unsafe_code)]

/// The book's guide to the clients (docs/guide/agents.md): its Rust examples are compiled as
/// this crate's doc tests, so the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/agents.md")]
pub struct AgentsGuide;

mod sessions;
mod stream;
pub mod tool;
mod tools;

pub use self::stream::ExecStream;
pub use self::tools::Tools;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use hyperlocal::{UnixConnector, Uri};

/// How long connecting may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer may take by default: health and metrics, and an execution that names no
/// time limit of its own (the daemon's default is 5 s, its cap 60 s, unless configured).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a tool call may take when the request names no `tool_timeout_ms`: the daemon's
/// default cap on one (its own default, 30 s, is shorter).
pub const DEFAULT_TOOL_WAIT: Duration = Duration::from_secs(300);
/// Added to an execution's own time limit: the daemon answers at the limit (waiting for a
/// sandbox counts), plus the time to send the answer.
const EXEC_MARGIN: Duration = Duration::from_secs(15);
/// Added again for a session's exec: the daemon moves its deadline on by the time the session
/// spends saving earlier execs' state, up to a minute (the daemon's `SAVE_WAIT_LIMIT`).
const SESSION_SAVE_WAIT: Duration = Duration::from_secs(60);

pub use hyperlightd_api::{
    AllowRule, CheckpointInfo, CreateSessionRequest, DEFAULT_SOCKET, DisplayData, EgressHealth,
    ErrorBody, ErrorKind, ExecEvent, ExecLimits, ExecRequest, ExecResponse, ExecSession,
    ExecStatus, FileChange, FileData, FileInfo, FileList, FileMap, FilesChanged, HealthResponse,
    InstallResponse, Language, Network, PackageInstalled, PackageList, PackagePresent,
    PackagesHealth, Policy, Runtime, SOCKET_ENV, SandboxCounts, SessionCounts, SessionExecRequest,
    SessionInfo, SessionLimits, SessionList, SessionPackage, ToolResult as ToolAnswer, ToolSpec,
    Violation, check_delegated_name,
};

/// What can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection could be made: the daemon is not running, the path is wrong, or it did
    /// not accept in time. The request was never sent; retrying is safe.
    #[error(
        "cannot reach hyperlightd at {socket}: {reason}. Is the daemon running? Start it, or point \
         --socket / {env} at its socket",
        env = SOCKET_ENV
    )]
    Unreachable {
        /// The socket tried.
        socket: PathBuf,
        /// Why the connection failed.
        reason: String,
    },
    /// The connection broke after the request was sent, before the whole answer arrived. The
    /// daemon may have run the program: retry only what is safe to run twice.
    #[error(
        "the connection to hyperlightd at {socket} was lost before its answer arrived ({reason}); \
         the request may have run"
    )]
    ConnectionLost {
        /// The socket.
        socket: PathBuf,
        /// What broke.
        reason: String,
    },
    /// The request was sent and no answer came in time. The program may have run.
    #[error(
        "hyperlightd at {socket} did not answer within {} ms; the request may have run",
        .after.as_millis()
    )]
    TimedOut {
        /// The socket.
        socket: PathBuf,
        /// How long the client waited.
        after: Duration,
    },
    /// The daemon refused the request (4xx/5xx) and said why.
    #[error("hyperlightd refused the request ({status}, {}): {}", .error.kind, .error.message)]
    Rejected {
        /// HTTP status code.
        status: u16,
        /// The daemon's error body.
        error: ErrorBody,
        /// Seconds to wait before retrying, when the daemon said (overload).
        retry_after: Option<u64>,
    },
    /// The daemon's answer could not be understood.
    #[error("unexpected answer from hyperlightd ({status}): {message}")]
    Protocol {
        /// HTTP status code.
        status: u16,
        /// What was wrong with it.
        message: String,
    },
}

impl Error {
    /// Whether the same request may simply be sent again: it never ran (the daemon was
    /// unreachable, overloaded, stopping, had no free sandbox in time, or the caller was at its
    /// quota). A lost connection or
    /// a timeout is not retryable this way: the program may have run.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Rejected { error, .. } => matches!(
                error.kind,
                ErrorKind::Overloaded
                    | ErrorKind::ShuttingDown
                    | ErrorKind::NoSandboxAvailable
                    | ErrorKind::SessionBusy
                    | ErrorKind::QuotaExceeded
            ),
            Error::ConnectionLost { .. } | Error::TimedOut { .. } | Error::Protocol { .. } => false,
        }
    }
}

/// A client of one daemon. Cheap to clone; connections are pooled.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    http: HyperClient<TimedConnector, Full<Bytes>>,
    response_timeout: Option<Duration>,
    /// The caller this client acts for, as a delegate (`hyperlightd-on-behalf-of`).
    on_behalf_of: Option<HeaderValue>,
    /// The caller's span its requests go under (W3C `traceparent`).
    traceparent: Option<HeaderValue>,
}

impl Client {
    /// A client for the daemon listening on `socket`. Connects lazily, on the first request.
    pub fn connect(socket: impl AsRef<Path>) -> Client {
        Client {
            socket: socket.as_ref().to_owned(),
            http: http_client(DEFAULT_CONNECT_TIMEOUT),
            response_timeout: None,
            on_behalf_of: None,
            traceparent: None,
        }
    }

    /// The same client (sharing its connections), whose requests carry `traceparent`, a W3C
    /// Trace Context parent (`00-<trace id>-<span id>-<flags>`): with tracing on, the daemon's
    /// spans of each request are that span's children, and the answer's `traceresponse` header
    /// names the daemon's span. Make one per span your code is in (an agent's tool call).
    /// `Err`: it is not a valid `traceparent`, and why.
    pub fn with_traceparent(&self, traceparent: &str) -> Result<Client, String> {
        check_traceparent(traceparent)?;
        let value = HeaderValue::from_str(traceparent).map_err(|e| e.to_string())?;
        Ok(Client {
            traceparent: Some(value),
            ..self.clone()
        })
    }

    /// The same client (sharing its connections), acting for the caller `name`: for a gateway
    /// that serves several callers and that the daemon trusts to (`hyperlightd
    /// --delegate-uid`). The daemon counts `name` as a caller of its own; from a user it does
    /// not trust, every request is refused (403 `caller_not_allowed`). `Err`: the name cannot
    /// be one, and why.
    pub fn on_behalf_of(&self, name: &str) -> Result<Client, String> {
        check_delegated_name(name)?;
        let value = HeaderValue::from_str(name).map_err(|e| e.to_string())?;
        Ok(Client {
            on_behalf_of: Some(value),
            ..self.clone()
        })
    }

    /// The same client, giving up on connecting after `limit` ([`DEFAULT_CONNECT_TIMEOUT`]
    /// unless set).
    pub fn with_connect_timeout(self, limit: Duration) -> Client {
        Client {
            http: http_client(limit),
            ..self
        }
    }

    /// The same client, waiting at most `limit` for any answer, executions included. Unless
    /// set, an execution waits for its own time limit plus a margin, and anything else for
    /// [`DEFAULT_RESPONSE_TIMEOUT`].
    pub fn with_response_timeout(self, limit: Duration) -> Client {
        Client {
            response_timeout: Some(limit),
            ..self
        }
    }

    /// A client for the socket named by `HYPERLIGHTD_SOCKET`, or the default path.
    pub fn from_env() -> Client {
        Client::connect(
            std::env::var_os(SOCKET_ENV)
                .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from),
        )
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Runs a program. A program that fails or times out is still `Ok`: see the response's
    /// `status`. `Err` means the request did not run, or its answer was lost (see [`Error`]).
    /// The answer is awaited for the request's `timeout_ms` plus a margin, or
    /// [`DEFAULT_RESPONSE_TIMEOUT`] when it names none.
    pub async fn exec(&self, request: &ExecRequest) -> Result<ExecResponse, Error> {
        let body = encode(request)?;
        self.call(
            Method::POST,
            hyperlightd_api::paths::EXEC,
            body,
            exec_wait(request.timeout_ms),
        )
        .await
        .and_then(|(status, bytes)| decode(status, &bytes))
    }

    /// The daemon's health.
    pub async fn health(&self) -> Result<HealthResponse, Error> {
        let path = hyperlightd_api::paths::HEALTH;
        self.call(Method::GET, path, Bytes::new(), DEFAULT_RESPONSE_TIMEOUT)
            .await
            .and_then(|(status, bytes)| decode(status, &bytes))
    }

    /// The daemon's metrics, in the Prometheus text format.
    pub async fn metrics(&self) -> Result<String, Error> {
        let path = hyperlightd_api::paths::METRICS;
        let (status, bytes) = self
            .call(Method::GET, path, Bytes::new(), DEFAULT_RESPONSE_TIMEOUT)
            .await?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Error::Protocol {
            status: status.as_u16(),
            message: e.to_string(),
        })
    }

    /// Sends a request, waits at most `wait` (unless the client sets its own limit) for the
    /// whole answer, and turns any 4xx/5xx into [`Error::Rejected`].
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        wait: Duration,
    ) -> Result<(StatusCode, Bytes), Error> {
        let wait = self.response_timeout.unwrap_or(wait);
        let answer = tokio::time::timeout(wait, self.send(method, path, body))
            .await
            .map_err(|_| Error::TimedOut {
                socket: self.socket.clone(),
                after: wait,
            })??;
        if answer.status.is_success() {
            return Ok((answer.status, answer.body));
        }
        Err(rejection(answer))
    }

    async fn send(&self, method: Method, path: &str, body: Bytes) -> Result<Answer, Error> {
        let (status, retry_after, body) = self.open(method, path, body, None).await?;
        let bytes = body
            .collect()
            .await
            .map_err(|e| Error::ConnectionLost {
                socket: self.socket.clone(),
                reason: format!("reading the answer ({status}): {}", innermost(&e)),
            })?
            .to_bytes();
        Ok(Answer {
            status,
            retry_after,
            body: bytes,
        })
    }

    /// Sends a request (asking for `accept` when given) and returns the answer's status, its
    /// `Retry-After`, and its body as it arrives.
    pub(crate) async fn open(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        accept: Option<&'static str>,
    ) -> Result<(StatusCode, Option<u64>, hyper::body::Incoming), Error> {
        let uri: hyper::Uri = Uri::new(&self.socket, path).into();
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| Error::Protocol {
                status: 0,
                message: format!("building the request: {e}"),
            })?;
        request
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(accept) = accept {
            request
                .headers_mut()
                .insert(hyper::header::ACCEPT, HeaderValue::from_static(accept));
        }
        if let Some(name) = &self.on_behalf_of {
            request
                .headers_mut()
                .insert(hyperlightd_api::ON_BEHALF_OF_HEADER, name.clone());
        }
        if let Some(parent) = self.traceparent.clone().or_else(current_traceparent) {
            request.headers_mut().insert("traceparent", parent);
        }
        let response = self.http.request(request).await.map_err(|e| {
            let reason = innermost(&e);
            let socket = self.socket.clone();
            // hyper-util sends nothing on a connection it could not make; a request on a
            // pooled connection the daemon had closed is retried by hyper-util itself.
            if e.is_connect() {
                Error::Unreachable { socket, reason }
            } else {
                Error::ConnectionLost { socket, reason }
            }
        })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        Ok((status, retry_after, response.into_body()))
    }
}

/// The innermost cause of an error: the one that says what actually happened.
fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

/// A hyper client over Unix sockets whose connections are made within `limit`.
fn http_client(limit: Duration) -> HyperClient<TimedConnector, Full<Bytes>> {
    HyperClient::builder(TokioExecutor::new()).build(TimedConnector { limit })
}

/// hyperlocal's connector, bounded in time: a daemon that does not accept (its backlog full,
/// say) must not hold the caller forever.
#[derive(Debug, Clone, Copy)]
struct TimedConnector {
    limit: Duration,
}

impl tower_service::Service<hyper::Uri> for TimedConnector {
    type Response = hyperlocal::UnixStream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: hyper::Uri) -> Self::Future {
        let connecting = UnixConnector.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            tokio::time::timeout(limit, connecting)
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("not accepted within {} ms", limit.as_millis()),
                    ))
                })
        })
    }
}

/// A response as received.
pub(crate) struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    body: Bytes,
}

/// How long to wait for an execution's answer: its `timeout_ms` plus a margin, or
/// [`DEFAULT_RESPONSE_TIMEOUT`] when it names none.
pub(crate) fn exec_wait(timeout_ms: Option<u64>) -> Duration {
    timeout_ms.map_or(DEFAULT_RESPONSE_TIMEOUT, |ms| {
        Duration::from_millis(ms).saturating_add(EXEC_MARGIN)
    })
}

/// How long to wait for a session exec's answer: [`exec_wait`], and the session's saving.
pub(crate) fn session_exec_wait(timeout_ms: Option<u64>) -> Duration {
    exec_wait(timeout_ms).saturating_add(SESSION_SAVE_WAIT)
}

/// A request's JSON body.
pub(crate) fn encode<T: serde::Serialize>(request: &T) -> Result<Bytes, Error> {
    serde_json::to_vec(request)
        .map(Bytes::from)
        .map_err(|e| Error::Protocol {
            status: 0,
            message: format!("encoding the request: {e}"),
        })
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    status: StatusCode,
    bytes: &[u8],
) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Protocol {
        status: status.as_u16(),
        message: format!("decoding the response: {e}"),
    })
}

pub(crate) fn rejection(answer: Answer) -> Error {
    let status = answer.status.as_u16();
    match serde_json::from_slice::<hyperlightd_api::ErrorResponse>(&answer.body) {
        Ok(body) => Error::Rejected {
            status,
            error: body.error,
            retry_after: answer.retry_after,
        },
        Err(_) => Error::Protocol {
            status,
            message: String::from_utf8_lossy(&answer.body).into_owned(),
        },
    }
}

/// The caller's current OpenTelemetry span as a `traceparent`, if there is one (with the
/// `opentelemetry` feature; never without it).
fn current_traceparent() -> Option<HeaderValue> {
    #[cfg(feature = "opentelemetry")]
    {
        use opentelemetry::trace::TraceContextExt;
        let context = opentelemetry::Context::current();
        let span = context.span();
        let span = span.span_context();
        if span.is_valid() {
            let value = format!(
                "00-{}-{}-{:02x}",
                span.trace_id(),
                span.span_id(),
                span.trace_flags().to_u8()
            );
            return HeaderValue::try_from(value).ok();
        }
    }
    None
}

/// Whether `value` is a W3C Trace Context `traceparent` of version 00 naming a span: two hex
/// digits of version, 32 of trace id, 16 of parent id and 2 of flags, lowercase, joined by
/// `-`, neither id all zeros.
pub fn check_traceparent(value: &str) -> Result<(), String> {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |part: &str, len: usize| {
        part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let zero = |part: &str| part.bytes().all(|b| b == b'0');
    match parts.as_slice() {
        [version, trace, span, flags]
            if *version == "00" && hex(trace, 32) && hex(span, 16) && hex(flags, 2) =>
        {
            if zero(trace) || zero(span) {
                Err(format!(
                    "{value:?} names no span: its trace id or span id is all zeros"
                ))
            } else {
                Ok(())
            }
        }
        _ => Err(format!(
            "{value:?} is not a W3C traceparent: expected 00-<32 hex digits>-<16 hex \
             digits>-<2 hex digits>, lowercase"
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tokio::io::AsyncReadExt;
    use tokio::net::UnixListener;

    use super::*;

    #[cfg(feature = "opentelemetry")]
    #[test]
    fn the_current_opentelemetry_span_is_the_traceparent() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        assert!(current_traceparent().is_none(), "no span, no header");
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let _current = opentelemetry::Context::new()
            .with_remote_span_context(span)
            .attach();
        assert_eq!(
            current_traceparent().unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
    }

    #[test]
    fn only_a_w3c_traceparent_is_sent() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(check_traceparent(good).is_ok());
        let client = Client::connect("/nowhere").with_traceparent(good).unwrap();
        assert_eq!(client.traceparent.unwrap(), good);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
        ] {
            assert!(check_traceparent(bad).is_err(), "{bad:?}");
            assert!(Client::connect("/nowhere").with_traceparent(bad).is_err());
        }
    }

    /// A daemon stand-in that takes each connection, reads what arrives for a moment, and then
    /// either hangs up (`answer: false`) or never answers at all (`hang: true`).
    fn stand_in(socket: &Path, hang: bool) {
        let listener = UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    if hang {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    drop(stream);
                });
            }
        });
    }

    fn program() -> ExecRequest {
        ExecRequest::new(Language::Javascript, "1")
    }

    #[tokio::test]
    async fn a_stream_goes_on_past_display_events_to_its_response() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("stream.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let lines = concat!(
            r#"{"type":"stdout","text":"before\n"}"#,
            "\n",
            r#"{"type":"display","data":{"image/png":"iVBORw0=","text/plain":"<Figure>"}}"#,
            "\n",
            r#"{"type":"result","status":"ok","stdout":"before\n","stderr":"","result":null,"#,
            r#""error":null,"duration_ms":1.0,"display":[{"data":{"text/plain":"<Figure>"}}]}"#,
            "\n",
        );
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = stream.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n",
                hyperlightd_api::NDJSON,
                lines.len()
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            stream.write_all(lines.as_bytes()).await.unwrap();
        });
        let mut seen = Vec::new();
        let opened = Client::connect(&socket).exec_stream(&program()).await;
        let response = opened
            .unwrap()
            .finish(|event| seen.push(event.clone()))
            .await
            .unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(
            matches!(&seen[1], ExecEvent::Display { data, .. } if data["text/plain"] == "<Figure>")
        );
        assert_eq!(response.display.len(), 1);
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable_and_safe_to_retry() {
        let dir = tempfile::tempdir().unwrap();
        let err = Client::connect(dir.path().join("none.sock"))
            .exec(&program())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unreachable { .. }), "{err}");
        assert!(err.is_retryable());
    }

    #[tokio::test]
    async fn a_connection_dropped_after_the_request_was_sent_is_lost_not_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("d.sock");
        stand_in(&socket, false);
        let err = Client::connect(&socket).exec(&program()).await.unwrap_err();
        assert!(matches!(err, Error::ConnectionLost { .. }), "{err}");
        assert!(!err.is_retryable(), "the program may have run");
        assert!(err.to_string().contains("may have run"), "{err}");
    }

    #[tokio::test]
    async fn no_answer_in_time_is_a_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("d.sock");
        stand_in(&socket, true);
        let client = Client::connect(&socket).with_response_timeout(Duration::from_millis(200));
        let err = client.health().await.unwrap_err();
        assert!(
            matches!(err, Error::TimedOut { after, .. } if after == Duration::from_millis(200)),
            "{err}"
        );
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn a_delegate_s_client_names_whom_it_acts_for_in_every_request() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("d.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let seen = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let n = stream.read(&mut request).await.unwrap();
            String::from_utf8_lossy(&request[..n]).to_lowercase()
        });
        assert!(Client::connect(&socket).on_behalf_of("a b").is_err());
        let client = Client::connect(&socket).on_behalf_of("alice").unwrap();
        let _ = client.health().await;
        let request = seen.await.unwrap();
        assert!(
            request.contains("\r\nhyperlightd-on-behalf-of: alice\r\n"),
            "{request}"
        );
    }
}
