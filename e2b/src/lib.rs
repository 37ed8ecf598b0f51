//! E2B's API over hyperlightd's sessions, so that code written for E2B's code interpreter (its
//! official SDKs, unmodified) runs on hyperlightd by a change of environment: `E2B_API_URL` and
//! `E2B_SANDBOX_URL` both the listener's address, `E2B_API_KEY` its key.
//!
//! # Design
//!
//! **Over a seam, not a transport.** The translation asks the daemon for sessions, execs and
//! files through [`Daemon`], in the API's own types, for one caller. `hlctl e2b-gateway`
//! implements it over the daemon's Unix socket with the client crate: a process of the
//! caller's own, beside the agent (as `hlctl mcp` is), whose identity the daemon reads from the
//! socket's peer credentials (in Kubernetes the pod's, since the gateway runs in the pod). The
//! daemon implements it over its service layer in-process (`hyperlightd --e2b-listen`), each
//! key of its keys file a caller of its own: one exchange per request instead of two. Either
//! way every request goes through the daemon's one service layer: its policies, quotas, audit
//! lines and sessions are the caller's own.
//!
//! **Who may use it.** A TCP port, even on loopback, is open to every user of the host, so the
//! listener answers only requests that carry a key it knows (`X-API-Key`, as the SDKs send
//! `E2B_API_KEY`); no key or an unknown one is 401, as E2B answers it. Each key is an
//! [`Account`]: whom its requests act for, as the [`Daemon`] that acts for that caller.
//! - Alone (the default), the gateway is its user's: one key, read from `--api-key-file` or
//!   made at start and printed, and the daemon sees the gateway's own uid or pod.
//! - Shared (`--api-keys FILE`, [`read_keys`]), one listener serves several callers: the
//!   operator gives each a name and a key, and runs the gateway as a user the daemon trusts to
//!   act for others (`hyperlightd --delegate-uid`). Each request then names its key's caller to
//!   the daemon (`hyperlightd-on-behalf-of`), and the daemon counts that name as a caller of
//!   its own: quotas, sessions, the audit log and tool answers are the name's, and a sandbox of
//!   one key is another's 404.
//!
//! **No state of its own.** A sandbox is the daemon's sessions: its default context (Python,
//! or the language its template names) is the session whose id is the sandbox's id, and every
//! other context a session labelled `e2b.dev/sandbox=<id>`. A restarted gateway, or a second one
//! of the same caller, sees the same sandboxes; a sandbox ends when its sessions do.
//!
//! **One listener for both halves.** The SDKs send a sandbox's requests with `E2b-Sandbox-Id`
//! and `E2b-Sandbox-Port` (49999 the code interpreter, 49983 envd, E2B's in-sandbox daemon);
//! a request without them is for the control plane. [`Gateway::route`] is the one routing
//! table and [`Refusal`] the one mapping of errors to E2B's statuses and bodies (envd's Connect
//! calls answer Connect's errors, `files::Rpc`).
//!
//! **Files are the default context's.** envd's files API and `filesystem` service are the
//! working directory of the sandbox's default context, changed through the daemon's session
//! files API (`files.rs`): what the SDK writes, that context's next program reads.

mod control;
mod daemon;
mod files;
mod interpreter;
mod keys;
mod wire;

pub use daemon::{Daemon, DaemonError, Events};
/// The HTTP method a request of [`Daemon::for_request`] was sent with.
pub use hyper::Method;
pub use keys::{new_key, read_key, read_keys};

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyperlightd_api::{ErrorKind, SessionInfo};
use tokio::net::{TcpListener, TcpStream};

/// What an answer's body is: whole, or a stream of lines.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The port the SDKs name for the code interpreter, and for envd.
const INTERPRETER_PORT: &str = "49999";
const ENVD_PORT: &str = "49983";

/// The largest request body the gateway reads (a program, a context's settings).
const MAX_BODY_BYTES: usize = 16 << 20;

/// The gateway: an account per key it answers.
pub struct Gateway<D> {
    accounts: Vec<Account<D>>,
    on_unknown_key: Option<OnUnknownKey>,
}

/// Told of each request refused for its key, before it is answered 401.
pub type OnUnknownKey = Box<dyn Fn(&UnknownKey<'_>) + Send + Sync>;

/// A request that carried no key, or none the gateway knows.
#[derive(Debug)]
pub struct UnknownKey<'a> {
    /// Whence it came, when the connection could tell.
    pub peer: Option<SocketAddr>,
    pub method: &'a Method,
    pub path: &'a str,
}

impl<D: Daemon> Gateway<D> {
    /// A gateway answering each of `accounts`' keys; none answers no request.
    pub fn new(accounts: Vec<Account<D>>) -> Self {
        Gateway {
            accounts,
            on_unknown_key: None,
        }
    }

    /// The gateway, telling `hook` of each request refused for its key (to count and audit
    /// them: they never reach a daemon).
    pub fn on_unknown_key(mut self, hook: OnUnknownKey) -> Self {
        self.on_unknown_key = Some(hook);
        self
    }
}

/// One key's caller: the key, the daemon as that caller sees it, and the sandboxes the gateway
/// has seen of it.
pub struct Account<D> {
    pub key: String,
    pub daemon: D,
    pub known: Known,
}

impl<D> std::fmt::Debug for Gateway<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("accounts", &self.accounts.len())
            .finish()
    }
}

/// Its key never shown.
impl<D> std::fmt::Debug for Account<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account").finish_non_exhaustive()
    }
}

impl<D: Daemon> Account<D> {
    /// The account of `key`, acting through `daemon`.
    pub fn new(key: String, daemon: D) -> Self {
        Account {
            key,
            daemon,
            known: Known::default(),
        }
    }
}

/// The sandboxes the gateway has seen, for the code interpreter's requests: a sandbox's
/// language and labels never change, so they are kept rather than asked of the daemon on every
/// `run_code`. Only this process's caller's, so nothing crosses callers; a sandbox the daemon
/// no longer has is forgotten when it says so (its `run_code` is 404 either way), and the
/// table is emptied should it ever fill.
#[derive(Debug, Default)]
pub struct Known(Mutex<HashMap<String, SessionInfo>>);

/// The most sandboxes [`Known`] keeps.
const MAX_KNOWN: usize = 4096;

impl Known {
    fn table(&self) -> MutexGuard<'_, HashMap<String, SessionInfo>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, id: &str) -> Option<SessionInfo> {
        self.table().get(id).cloned()
    }

    pub fn insert(&self, info: SessionInfo) {
        let mut table = self.table();
        if table.len() >= MAX_KNOWN {
            table.clear();
        }
        table.insert(info.id.clone(), info);
    }

    pub fn forget(&self, id: &str) {
        self.table().remove(id);
    }
}

/// How a listener bounds its connections: anyone who can reach its address can open one, key
/// or none.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once; past them a new one is closed at once.
    pub max_connections: usize,
    /// How long a connection may take to send a request's head, or wait between requests.
    pub header_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(30),
        }
    }
}

/// How long a request's body may take to arrive, once its head has.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `gateway` on `listener` within the default [`ConnectionLimits`] until the task is
/// dropped.
pub async fn serve<D: Daemon>(listener: TcpListener, gateway: Arc<Gateway<D>>) {
    serve_within(listener, gateway, ConnectionLimits::default()).await;
}

/// Serves `gateway` on `listener` within `limits` until the task is dropped.
pub async fn serve_within<D: Daemon>(
    listener: TcpListener,
    gateway: Arc<Gateway<D>>,
    limits: ConnectionLimits,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    continue;
                };
                let gateway = gateway.clone();
                tokio::spawn(async move {
                    serve_connection(gateway, stream, limits.header_read_timeout).await;
                    drop(permit);
                });
            }
            // Out of file descriptors, or the connection reset before it was taken: the next
            // one may do; a moment's pause keeps a lasting failure from spinning.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

/// Serves one connection's requests until it closes, each head within `header_read_timeout`.
pub async fn serve_connection<D: Daemon>(
    gateway: Arc<Gateway<D>>,
    stream: TcpStream,
    header_read_timeout: Duration,
) {
    // Answers go out as they are written: a stream's lines are small, and Nagle's algorithm
    // would hold each behind the client's delayed acknowledgement.
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().ok();
    let service = service_fn(move |request| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(gateway.handle(request, peer).await) }
    });
    // A client that goes away mid-answer is its own business.
    let _ = http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

impl<D: Daemon> Gateway<D> {
    async fn handle(&self, request: Request<Incoming>, peer: Option<SocketAddr>) -> Response<Body> {
        match self.route(request, peer).await {
            Ok(response) => response,
            Err(refusal) => refusal.response(),
        }
    }

    /// The one routing table.
    async fn route(
        &self,
        request: Request<Incoming>,
        peer: Option<SocketAddr>,
    ) -> Result<Response<Body>, Refusal> {
        let Some(account) = self.account(&request) else {
            if let Some(hook) = &self.on_unknown_key {
                let (method, path) = (request.method(), request.uri().path());
                hook(&UnknownKey { peer, method, path });
            }
            return Err(Refusal::Unauthorized);
        };
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let daemon = &account.daemon.for_request(&method, &path);
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let sandbox = header(&request, "e2b-sandbox-id");
        let port = header(&request, "e2b-sandbox-port");
        match (sandbox, port.as_deref()) {
            (Some(id), Some(INTERPRETER_PORT)) => {
                let body = read_body(request).await?;
                let known = &account.known;
                let sandbox = interpreter::sandbox(daemon, known, &id).await?;
                let routed = interpreter::route(daemon, &sandbox, &method, &segments, body);
                let answer = routed.await;
                if matches!(&answer, Err(Refusal::Daemon(e)) if daemon_status(e) == StatusCode::NOT_FOUND)
                {
                    known.forget(&id);
                }
                answer
            }
            (Some(id), Some(ENVD_PORT)) => {
                let content_type = header(&request, "content-type").unwrap_or_default();
                if !matches!(
                    segments.as_slice(),
                    ["files"] | ["filesystem.Filesystem", _]
                ) {
                    return envd(&method, &segments, &content_type);
                }
                let query = request.uri().query().unwrap_or("").to_owned();
                let body = read_body(request).await?;
                let segments = segments.as_slice();
                files::route(daemon, &id, &method, segments, &query, &content_type, body).await
            }
            (Some(_), port) => Err(Refusal::NotFound(format!(
                "no service on port {} of a sandbox: 49999 (code interpreter) and 49983 (envd) \
                 are served",
                port.unwrap_or("(none)")
            ))),
            (None, _) => {
                let query = request.uri().query().unwrap_or("").to_owned();
                let body = read_body(request).await?;
                control::route(daemon, account, &method, &segments, &query, body).await
            }
        }
    }

    /// The account whose key `request` carries: as the API key, or as a sandbox's access token
    /// (see [`wire::created`]).
    fn account<B>(&self, request: &Request<B>) -> Option<&Account<D>> {
        let given: Vec<String> = ["x-api-key", "x-access-token", "e2b-traffic-access-token"]
            .iter()
            .filter_map(|name| header(request, name))
            .collect();
        // Every key compared in full whatever matches, so that timing says nothing of them.
        let mut found = None;
        for account in &self.accounts {
            if given
                .iter()
                .fold(false, |hit, g| same(g, &account.key) | hit)
            {
                found = Some(account);
            }
        }
        found
    }
}

/// Whether `a` is `b`, in a time that depends only on their lengths.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// envd's own services: health answers; its RPCs (Connect protocol, `/<service>/<method>`)
/// are refused as Connect refuses, with why and what to use instead.
fn envd(method: &Method, segments: &[&str], content_type: &str) -> Result<Response<Body>, Refusal> {
    match (method, segments) {
        (&Method::GET, ["health"]) => Ok(empty(StatusCode::NO_CONTENT)),
        (&Method::POST, [service, _]) if service.starts_with("process.") => Ok(connect_error(
            content_type,
            "hyperlightd's sandboxes are micro-VMs that run one interpreter, not processes: \
             commands and terminals are not available; run code with run_code instead",
        )),
        (&Method::POST, [service, rpc]) => Ok(connect_error(
            content_type,
            &format!("{service}/{rpc} is not served by hyperlightd's E2B gateway yet"),
        )),
        _ => Err(Refusal::Unsupported(format!(
            "{method} /{} of envd is not served by hyperlightd's E2B gateway yet",
            segments.join("/")
        ))),
    }
}

/// A Connect RPC refused as `unimplemented` with `message`: for a streaming call (its body
/// `application/connect+...`), a 200 whose one message ends the stream with the error; for a
/// unary one, 501 and the error as JSON.
fn connect_error(content_type: &str, message: &str) -> Response<Body> {
    let error = serde_json::json!({"code": "unimplemented", "message": message});
    if !content_type.starts_with("application/connect+") {
        return json(StatusCode::NOT_IMPLEMENTED, &error);
    }
    let end = serde_json::json!({"error": error}).to_string();
    let mut framed = Vec::with_capacity(5 + end.len());
    // Flags (end of stream), then the length, big-endian.
    framed.push(0x02);
    framed.extend_from_slice(&u32::try_from(end.len()).unwrap_or(u32::MAX).to_be_bytes());
    framed.extend_from_slice(end.as_bytes());
    let mut response = Response::new(Full::new(Bytes::from(framed)).boxed_unsync());
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn header<B>(request: &Request<B>, name: &str) -> Option<String> {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

async fn read_body<B>(request: Request<B>) -> Result<Bytes, Refusal>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limited = http_body_util::Limited::new(request.into_body(), MAX_BODY_BYTES);
    match tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) => Err(Refusal::BadRequest(format!(
            "the request's body could not be read (at most {MAX_BODY_BYTES} bytes): {e}"
        ))),
        Err(_) => Err(Refusal::BadRequest(format!(
            "the request's body did not arrive within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ))),
    }
}

/// Why a request was not served, as E2B answers it: a status and `{"code", "message"}`.
#[derive(Debug)]
pub enum Refusal {
    Unauthorized,
    BadRequest(String),
    NotFound(String),
    /// The sandbox is already as asked (paused).
    Conflict(String),
    /// What hyperlightd's sandboxes cannot do, or the gateway does not yet.
    Unsupported(String),
    /// The daemon refused, or could not be reached.
    Daemon(DaemonError),
}

impl Refusal {
    fn response(&self) -> Response<Body> {
        let (status, message) = match self {
            Refusal::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "missing or unknown API key: send the gateway's key as X-API-Key (E2B_API_KEY)"
                    .to_owned(),
            ),
            Refusal::BadRequest(why) => (StatusCode::BAD_REQUEST, why.clone()),
            Refusal::NotFound(why) => (StatusCode::NOT_FOUND, why.clone()),
            Refusal::Conflict(why) => (StatusCode::CONFLICT, why.clone()),
            Refusal::Unsupported(why) => (StatusCode::NOT_IMPLEMENTED, why.clone()),
            Refusal::Daemon(error) => (daemon_status(error), error.to_string()),
        };
        json(
            status,
            &serde_json::json!({"code": status.as_u16(), "message": message}),
        )
    }
}

impl From<DaemonError> for Refusal {
    fn from(error: DaemonError) -> Refusal {
        Refusal::Daemon(error)
    }
}

/// The status E2B gives what the daemon said.
fn daemon_status(error: &DaemonError) -> StatusCode {
    let Some(kind) = error.kind else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    match kind {
        ErrorKind::SessionNotFound => StatusCode::NOT_FOUND,
        ErrorKind::InvalidRequest | ErrorKind::PayloadTooLarge => StatusCode::BAD_REQUEST,
        ErrorKind::TooManySessions | ErrorKind::Overloaded | ErrorKind::QuotaExceeded => {
            StatusCode::TOO_MANY_REQUESTS
        }
        ErrorKind::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    }
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed_unsync());
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests;
