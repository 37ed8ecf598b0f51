//! `hlctl e2b-gateway`: E2B's API on a TCP address, so that code written for E2B's code
//! interpreter (its official SDKs, unmodified) runs on hyperlightd by a change of environment:
//! `E2B_API_URL` and `E2B_SANDBOX_URL` both this gateway's address, `E2B_API_KEY` its key.
//!
//! # Design
//!
//! **Where it runs.** A process of the caller's own, beside the agent (as `hlctl mcp` is), that
//! talks to the daemon's Unix socket with the client crate. Every request therefore goes through
//! the daemon's one API and service layer, with the caller's identity from the socket's peer
//! credentials (in Kubernetes the pod's, since the gateway runs in the pod): its policies,
//! quotas, audit lines and sessions are the caller's own, and the daemon, which runs guests and
//! holds secrets, opens no TCP port and knows nothing of E2B.
//!
//! **Who may use it.** A TCP port, even on loopback, is open to every user of the host, so the
//! gateway answers only requests that carry a key it knows (`X-API-Key`, as the SDKs send
//! `E2B_API_KEY`); no key or an unknown one is 401, as E2B answers it. Each key is an
//! [`Account`]: whom its requests act for, with the daemon's client for that caller.
//! - Alone (the default), the gateway is its user's: one key, read from `--api-key-file` or
//!   made at start and printed, and the daemon sees the gateway's own uid or pod.
//! - Shared (`--api-keys FILE`), one listener serves several callers: the operator gives each
//!   a name and a key, and runs the gateway as a user the daemon trusts to act for others
//!   (`hyperlightd --delegate-uid`). Each request then names its key's caller to the daemon
//!   (`hyperlightd-on-behalf-of`), and the daemon counts that name as a caller of its own:
//!   quotas, sessions, the audit log and tool answers are the name's, and a sandbox of one
//!   key is another's 404.
//!
//! **No state of its own.** A sandbox is the daemon's sessions: its default context (Python,
//! or the language its template names) is the session whose id is the sandbox's id, and every
//! other context a session labelled `e2b.dev/sandbox=<id>`. A restarted gateway, or a second one
//! of the same caller, sees the same sandboxes; a sandbox ends when its sessions do.
//!
//! **One listener for both halves.** The SDKs send a sandbox's requests with `E2b-Sandbox-Id`
//! and `E2b-Sandbox-Port` (49999 the code interpreter, 49983 envd, E2B's in-sandbox daemon);
//! a request without them is for the control plane. [`route`] is the one routing table and
//! [`Refusal`] the one mapping of errors to E2B's statuses and bodies (envd's Connect calls
//! answer Connect's errors, `files::Rpc`).
//!
//! **Files are the default context's.** envd's files API and `filesystem` service are the
//! working directory of the sandbox's default context, changed through the daemon's session
//! files API (`files.rs`): what the SDK writes, that context's next program reads.

mod control;
mod files;
mod interpreter;
mod wire;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyperlightd_client::{Client, Error as DaemonError, ErrorKind, SessionInfo};

/// What an answer's body is: whole, or a stream of lines.
pub type Body = BoxBody<Bytes, Infallible>;

/// The port the SDKs name for the code interpreter, and for envd.
const INTERPRETER_PORT: &str = "49999";
const ENVD_PORT: &str = "49983";

/// The largest request body the gateway reads (a program, a context's settings).
const MAX_BODY_BYTES: usize = 16 << 20;

/// The shortest key the gateway takes, from a file or a keys file.
const MIN_KEY_CHARS: usize = 16;

/// `hlctl e2b-gateway`'s options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The TCP address to listen on. Loopback by default: anything that can reach it and has
    /// the key acts as you.
    #[arg(long, default_value = "127.0.0.1:49999")]
    listen: SocketAddr,
    /// A file whose first line is the key requests must carry (`E2B_API_KEY`). Without it, a
    /// key is made at start and printed on stderr.
    #[arg(long, value_name = "FILE", conflicts_with = "api_keys")]
    api_key_file: Option<PathBuf>,
    /// Serve several callers: a file of lines `NAME KEY`, each key acting for the caller NAME
    /// (letters, digits, `.`, `_`, `-`, `@`) for quotas, sandboxes and the audit log.
    ///
    /// The daemon must trust this gateway's user to act for others (`hyperlightd
    /// --delegate-uid`). The file must not be readable by group or others; blank lines and
    /// lines starting with `#` are skipped. Read at start: restart the gateway to change keys.
    #[arg(long, value_name = "FILE")]
    api_keys: Option<PathBuf>,
}

/// The gateway: an account per key it answers.
pub struct Gateway {
    accounts: Vec<Account>,
}

/// One key's caller: the key, the daemon's client acting for its caller, and the sandboxes the
/// gateway has seen of it.
pub struct Account {
    pub key: String,
    pub client: Client,
    pub known: Known,
}

impl Account {
    fn new(key: String, client: Client) -> Self {
        Account {
            key,
            client,
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

/// Serves E2B's API on `args.listen` until the process is stopped. An error: it could not
/// start (the key file, the address).
pub async fn serve(client: Client, args: Args) -> Result<(), String> {
    let accounts = accounts(client, &args).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    eprintln!(
        "hlctl e2b-gateway: E2B_API_URL=http://{0} E2B_SANDBOX_URL=http://{0}",
        args.listen
    );
    let gateway = Arc::new(Gateway { accounts });
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                eprintln!("hlctl e2b-gateway: accepting a connection failed: {e}");
                continue;
            }
        };
        // Answers go out as they are written: a stream's lines are small, and Nagle's
        // algorithm would hold each behind the client's delayed acknowledgement.
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let gateway = gateway.clone();
                async move { Ok::<_, Infallible>(gateway.handle(request).await) }
            });
            // A client that goes away mid-answer is its own business.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The accounts `args` name: one of the gateway's own, or with `--api-keys` one per line of
/// the file, checked with the daemon before the gateway listens.
async fn accounts(client: Client, args: &Args) -> Result<Vec<Account>, String> {
    let Some(path) = &args.api_keys else {
        let key = match &args.api_key_file {
            Some(path) => read_key(path)?,
            None => {
                let key = new_key()?;
                eprintln!("hlctl e2b-gateway: E2B_API_KEY={key}");
                key
            }
        };
        return Ok(vec![Account::new(key, client)]);
    };
    let keys = read_keys(path)?;
    let accounts = keys
        .into_iter()
        .map(|(name, key)| Ok(Account::new(key, client.on_behalf_of(&name)?)))
        .collect::<Result<Vec<_>, String>>()?;
    // Every request of a delegate the daemon does not trust would be refused: say so now.
    if let Err(e) = accounts[0].client.health().await {
        let refused = matches!(&e, DaemonError::Rejected { error, .. }
            if error.kind == ErrorKind::CallerNotAllowed);
        if refused {
            return Err(format!(
                "the daemon does not let this gateway act for others ({e}): start hyperlightd \
                 with --delegate-uid naming the user this gateway runs as"
            ));
        }
        eprintln!("hlctl e2b-gateway: the daemon could not be asked yet: {e}");
    }
    eprintln!(
        "hlctl e2b-gateway: {} keys from {}",
        accounts.len(),
        path.display()
    );
    Ok(accounts)
}

/// `--api-keys`' file: a `(name, key)` per line, names and keys each unique.
fn read_keys(path: &Path) -> Result<Vec<(String, String)>, String> {
    use std::os::unix::fs::PermissionsExt;
    let at = |line: usize, what: String| format!("{} line {line}: {what}", path.display());
    let unreadable =
        |e: std::io::Error| format!("cannot read the keys file {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mode = file.metadata().map_err(unreadable)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "the keys file {} may be read by others (mode {:o}): make it the gateway's user's \
             alone (chmod 600)",
            path.display(),
            mode & 0o777
        ));
    }
    let text = std::io::read_to_string(file).map_err(unreadable)?;
    let mut keys: Vec<(String, String)> = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let [name, key] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            return Err(at(n, "a line is a name and a key, and nothing else".into()));
        };
        hyperlightd_client::check_delegated_name(name).map_err(|e| at(n, e))?;
        if key.len() < MIN_KEY_CHARS {
            let short = format!("{name}'s key is shorter than {MIN_KEY_CHARS} characters");
            return Err(at(n, short));
        }
        if keys.iter().any(|(other, _)| other == name) {
            return Err(at(n, format!("{name} has a key already")));
        }
        if keys.iter().any(|(_, other)| other == key) {
            return Err(at(n, format!("{name}'s key is another's too")));
        }
        keys.push((name.to_owned(), key.to_owned()));
    }
    if keys.is_empty() {
        return Err(format!("the keys file {} has no keys", path.display()));
    }
    Ok(keys)
}

fn read_key(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?;
    let key = text.lines().next().unwrap_or("").trim().to_owned();
    if key.len() < MIN_KEY_CHARS {
        return Err(format!(
            "the key in {} is shorter than {MIN_KEY_CHARS} characters",
            path.display()
        ));
    }
    Ok(key)
}

/// 128 random bits from the host's entropy source, in hex, with E2B's key prefix.
fn new_key() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("the host's entropy source failed, no key: {e}"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("e2b_{hex}"))
}

impl Gateway {
    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        match self.route(request).await {
            Ok(response) => response,
            Err(refusal) => refusal.response(),
        }
    }

    /// The one routing table.
    async fn route(&self, request: Request<Incoming>) -> Result<Response<Body>, Refusal> {
        let account = self.account(&request).ok_or(Refusal::Unauthorized)?;
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let sandbox = header(&request, "e2b-sandbox-id");
        let port = header(&request, "e2b-sandbox-port");
        match (sandbox, port.as_deref()) {
            (Some(id), Some(INTERPRETER_PORT)) => {
                let body = read_body(request).await?;
                let Account { client, known, .. } = account;
                let sandbox = interpreter::sandbox(client, known, &id).await?;
                let routed = interpreter::route(client, &sandbox, &method, &segments, body);
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
                let (client, segments) = (&account.client, segments.as_slice());
                files::route(client, &id, &method, segments, &query, &content_type, body).await
            }
            (Some(_), port) => Err(Refusal::NotFound(format!(
                "no service on port {} of a sandbox: 49999 (code interpreter) and 49983 (envd) \
                 are served",
                port.unwrap_or("(none)")
            ))),
            (None, _) => {
                let query = request.uri().query().unwrap_or("").to_owned();
                let body = read_body(request).await?;
                control::route(account, &method, &segments, &query, body).await
            }
        }
    }

    /// The account whose key `request` carries: as the API key, or as a sandbox's access token
    /// (see [`wire::created`]).
    fn account<B>(&self, request: &Request<B>) -> Option<&Account> {
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
    let mut response = Response::new(Full::new(Bytes::from(framed)).boxed());
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
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(Refusal::BadRequest(format!(
            "the request's body could not be read (at most {MAX_BODY_BYTES} bytes): {e}"
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
    let DaemonError::Rejected { error, .. } = error else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    match error.kind {
        ErrorKind::SessionNotFound => StatusCode::NOT_FOUND,
        ErrorKind::InvalidRequest | ErrorKind::PayloadTooLarge => StatusCode::BAD_REQUEST,
        ErrorKind::TooManySessions | ErrorKind::Overloaded | ErrorKind::QuotaExceeded => {
            StatusCode::TOO_MANY_REQUESTS
        }
        _ => StatusCode::BAD_GATEWAY,
    }
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn body(response: Response<Body>) -> Bytes {
        response.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_refused_connect_rpc_says_why_as_connect_does() {
        let streaming = connect_error("application/connect+proto", "no processes");
        assert_eq!(streaming.status(), StatusCode::OK);
        let bytes = body(streaming).await;
        assert_eq!(bytes[0], 0x02, "one message, ending the stream");
        let length = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(length, bytes.len() - 5);
        let end: serde_json::Value = serde_json::from_slice(&bytes[5..]).unwrap();
        assert_eq!(end["error"]["code"], "unimplemented");
        assert_eq!(end["error"]["message"], "no processes");

        let unary = connect_error("application/json", "no processes");
        assert_eq!(unary.status(), StatusCode::NOT_IMPLEMENTED);
        let error: serde_json::Value = serde_json::from_slice(&body(unary).await).unwrap();
        assert_eq!(error["code"], "unimplemented");
    }

    #[tokio::test]
    async fn refusals_are_e2bs_status_and_body() {
        let response = Refusal::Unauthorized.response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let error: serde_json::Value = serde_json::from_slice(&body(response).await).unwrap();
        assert_eq!(error["code"], 401);
        assert!(error["message"].as_str().unwrap().contains("X-API-Key"));
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_refused_and_one_at_it_read() {
        let sized = |n: usize| Request::new(Full::new(Bytes::from(vec![b'x'; n])));
        assert_eq!(
            read_body(sized(MAX_BODY_BYTES)).await.unwrap().len(),
            MAX_BODY_BYTES
        );
        let refused = read_body(sized(MAX_BODY_BYTES + 1)).await.unwrap_err();
        assert!(
            matches!(&refused, Refusal::BadRequest(m) if m.contains("at most 16777216 bytes")),
            "{refused:?}"
        );
    }

    #[test]
    fn known_sandboxes_are_forgotten_when_gone_and_the_table_stays_bounded() {
        let known = Known::default();
        let info = |id: String| SessionInfo {
            id,
            language: hyperlightd_client::Language::Python,
            created_at: String::new(),
            expires_at: String::new(),
            idle_timeout_s: 1,
            labels: Default::default(),
            env: Default::default(),
            execs: 0,
            memory_bytes: 0,
            checkpoint: 0,
            checkpoints: 1,
            restored_from_checkpoint: None,
            lost_execs: 0,
            durable: false,
            parked: false,
            lost: None,
            packages: Vec::new(),
        };
        known.insert(info("a".to_owned()));
        assert!(known.get("a").is_some());
        known.forget("a");
        assert!(known.get("a").is_none());
        for i in 0..MAX_KNOWN {
            known.insert(info(i.to_string()));
        }
        assert_eq!(known.table().len(), MAX_KNOWN);
        known.insert(info("one more".to_owned()));
        assert_eq!(
            known.table().len(),
            1,
            "emptied when full, then the new one kept"
        );
        assert!(known.get("one more").is_some());
    }

    #[test]
    fn a_key_file_gives_its_first_line_and_a_short_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "e2b_0123456789abcdef\nignored\n").unwrap();
        assert_eq!(read_key(&path).unwrap(), "e2b_0123456789abcdef");
        std::fs::write(&path, "short\n").unwrap();
        assert!(read_key(&path).unwrap_err().contains("shorter than 16"));
        let made = new_key().unwrap();
        assert!(made.starts_with("e2b_") && made.len() == 36, "{made}");
    }

    fn keys_file(dir: &tempfile::TempDir, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join("keys");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_keys_file_names_a_caller_per_key_and_is_refused_whole_when_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let good = "# the agents\nalice e2b_aaaaaaaaaaaaaaaa\n\n  bob\te2b_bbbbbbbbbbbbbbbb  \n";
        let keys = read_keys(&keys_file(&dir, good, 0o600)).unwrap();
        assert_eq!(
            keys,
            [
                ("alice".to_owned(), "e2b_aaaaaaaaaaaaaaaa".to_owned()),
                ("bob".to_owned(), "e2b_bbbbbbbbbbbbbbbb".to_owned())
            ]
        );
        let refused = |text: &str, mode: u32| read_keys(&keys_file(&dir, text, mode)).unwrap_err();
        assert!(refused(good, 0o640).contains("chmod 600"));
        assert!(refused("", 0o600).contains("no keys"));
        assert!(refused("alice\n", 0o600).contains("line 1: a line is a name and a key"));
        assert!(refused("alice short\n", 0o600).contains("shorter than 16"));
        assert!(refused("a/b e2b_aaaaaaaaaaaaaaaa\n", 0o600).contains("line 1"));
        let twice = "alice e2b_aaaaaaaaaaaaaaaa\nalice e2b_bbbbbbbbbbbbbbbb\n";
        assert!(refused(twice, 0o600).contains("line 2: alice has a key already"));
        let shared = "alice e2b_aaaaaaaaaaaaaaaa\nbob e2b_aaaaaaaaaaaaaaaa\n";
        assert!(refused(shared, 0o600).contains("another's too"));
    }

    #[test]
    fn a_request_is_its_key_s_account_and_an_unknown_key_none() {
        let client = Client::connect("/nonexistent");
        let gateway = Gateway {
            accounts: vec![
                Account::new("e2b_aaaaaaaaaaaaaaaa".into(), client.clone()),
                Account::new("e2b_bbbbbbbbbbbbbbbb".into(), client),
            ],
        };
        let with = |name: &str, key: &str| {
            Request::builder()
                .header(name, key)
                .body(Full::new(Bytes::new()))
                .unwrap()
        };
        let key_of = |request| gateway.account(&request).map(|a| a.key.clone());
        assert_eq!(
            key_of(with("x-api-key", "e2b_bbbbbbbbbbbbbbbb")).as_deref(),
            Some("e2b_bbbbbbbbbbbbbbbb")
        );
        assert_eq!(
            key_of(with("x-access-token", "e2b_aaaaaaaaaaaaaaaa")).as_deref(),
            Some("e2b_aaaaaaaaaaaaaaaa")
        );
        assert_eq!(key_of(with("x-api-key", "e2b_cccccccccccccccc")), None);
        assert_eq!(key_of(with("x-api-key", "e2b_aaaaaaaaaaaaaaa")), None);
        assert_eq!(key_of(with("authorization", "e2b_aaaaaaaaaaaaaaaa")), None);
    }
}
