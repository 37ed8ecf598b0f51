//! Wire types of hyperlightd's HTTP API: requests, responses, the error body and the paths.
//!
//! This crate is the contract between the daemon and every client. It holds data only (serde, no
//! runtime), so that a client never has to depend on the daemon, and a change to the API shows up
//! as a change here.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod caller;
mod files;
mod network;
pub mod openapi;
mod packages;
mod policy;
mod session;
mod tools;

pub use self::caller::{
    AuditHealth, CallerLimits, MAX_DELEGATED_NAME, ON_BEHALF_OF_HEADER, check_delegated_name,
};
pub use self::files::{
    FileChange, FileChanges, FileData, FileInfo, FileList, FileMap, FilesChanged,
};
pub use self::network::{AllowRule, EgressHealth, Network};
pub use self::packages::{
    InstallRequest, InstallResponse, PackageInstalled, PackageList, PackagePresent, PackagesHealth,
    SessionPackage,
};
pub use self::policy::{Policy, Violation};
pub use self::session::{
    CheckpointInfo, CheckpointList, CreateSessionRequest, DurableHealth, ExecSession, ForkRequest,
    ParkRequest, RestartRequest, RollbackRequest, SessionCounts, SessionExecRequest, SessionInfo,
    SessionLimits, SessionList, UpdateSessionRequest,
};
pub use self::tools::{ToolResult, ToolSpec};

/// Where the daemon listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/hyperlightd/hyperlightd.sock";

/// Environment variable that clients read for the socket path.
pub const SOCKET_ENV: &str = "HYPERLIGHTD_SOCKET";

/// The HTTP paths the daemon serves.
pub mod paths {
    /// `POST`: run a program, answer with an [`ExecResponse`](super::ExecResponse).
    pub const EXEC: &str = "/v1/exec";
    /// `GET`: a [`HealthResponse`](super::HealthResponse), always 200 while the daemon answers.
    pub const HEALTH: &str = "/v1/health";
    /// `GET`: liveness. 200 while the daemon works, 503 when it is wedged (a guest the
    /// hypervisor does not give back): a supervisor should restart it then. Body: a
    /// [`HealthResponse`](super::HealthResponse).
    pub const HEALTH_LIVE: &str = "/v1/health/live";
    /// `GET`: readiness. 200 when every pool is at its size and the daemon is not stopping,
    /// 503 otherwise (warming, sandboxes being replaced, draining). Body: a
    /// [`HealthResponse`](super::HealthResponse).
    pub const HEALTH_READY: &str = "/v1/health/ready";
    /// Executions that declared tools: `{EXECUTIONS}/{execution_id}/{TOOL_RESULTS}`, `POST`
    /// a [`ToolResult`](super::ToolResult) answering one call (204; only the caller that
    /// started the execution may).
    pub const EXECUTIONS: &str = "/v1/executions";
    /// What follows an execution's id in the path of its tool results.
    pub const TOOL_RESULTS: &str = "tool-results";
    /// `GET`: Prometheus text exposition format.
    pub const METRICS: &str = "/metrics";
    /// `POST`: create a session ([`CreateSessionRequest`](super::CreateSessionRequest), 201
    /// [`SessionInfo`](super::SessionInfo)). `GET`: list them
    /// ([`SessionList`](super::SessionList)).
    pub const SESSIONS: &str = "/v1/sessions";
    /// What follows a session's id in the path of its exec (`POST`,
    /// [`SessionExecRequest`](super::SessionExecRequest), answered with an
    /// [`ExecResponse`](super::ExecResponse)).
    pub const SESSION_EXEC: &str = "exec";
    /// What follows a session's id in the path of its fork (`POST`, an optional
    /// [`ForkRequest`](super::ForkRequest), 201 [`SessionInfo`](super::SessionInfo)).
    pub const SESSION_FORK: &str = "fork";
    /// What follows a session's id in the path of its checkpoints (`GET`,
    /// [`CheckpointList`](super::CheckpointList)).
    pub const SESSION_CHECKPOINTS: &str = "checkpoints";
    /// What follows a session's id in the path of its rollback (`POST`,
    /// [`RollbackRequest`](super::RollbackRequest), answered with its
    /// [`SessionInfo`](super::SessionInfo)).
    pub const SESSION_ROLLBACK: &str = "rollback";
    /// What follows a session's id in the path that parks it now (`POST`, no body, answered
    /// with its [`SessionInfo`](super::SessionInfo)).
    pub const SESSION_PARK: &str = "park";
    /// What follows a session's id in the path that starts its interpreter afresh, keeping its
    /// files (`POST`, no body, answered with its [`SessionInfo`](super::SessionInfo)).
    pub const SESSION_RESTART: &str = "restart";
    /// What follows a session's id in the path of its files: `GET` lists them
    /// ([`FileList`](super::FileList)); `GET .../files/{path}` answers one file's bytes
    /// (`application/octet-stream`), its path percent-encoded as a URL path.
    pub const SESSION_FILES: &str = "files";
    /// What follows a session's id in the path of its packages: `POST` installs some
    /// ([`InstallRequest`](super::InstallRequest), answered with an
    /// [`InstallResponse`](super::InstallResponse)); `GET` lists those it installed
    /// ([`PackageList`](super::PackageList)).
    pub const SESSION_PACKAGES: &str = "packages";

    /// `GET`: the session ([`SessionInfo`](super::SessionInfo)); `DELETE`: delete it (204).
    pub fn session(id: &str) -> String {
        format!("{SESSIONS}/{id}")
    }

    /// `POST`: run a program in the session.
    pub fn session_exec(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_EXEC}")
    }

    /// `POST`: answer a tool call of execution `id`.
    pub fn tool_results(id: &str) -> String {
        format!("{EXECUTIONS}/{id}/{TOOL_RESULTS}")
    }

    /// `POST`: fork the session.
    pub fn session_fork(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_FORK}")
    }

    /// `GET`: the session's files.
    pub fn session_files(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_FILES}")
    }

    /// `POST`: install packages in the session; `GET`: those it installed.
    pub fn session_packages(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_PACKAGES}")
    }

    /// `GET`: the session's checkpoints.
    pub fn session_checkpoints(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_CHECKPOINTS}")
    }

    /// `POST`: return the session to a checkpoint.
    pub fn session_rollback(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_ROLLBACK}")
    }

    /// `POST`: park the session now (its state to disk, out of memory).
    pub fn session_park(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_PARK}")
    }

    /// `POST`: start the session's interpreter afresh, keeping its files.
    pub fn session_restart(id: &str) -> String {
        format!("{SESSIONS}/{id}/{SESSION_RESTART}")
    }
}

/// A guest language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum Language {
    /// ECMAScript (QuickJS inside the micro-VM).
    Javascript,
    /// CPython with its standard library (a WebAssembly component inside the micro-VM).
    Python,
}

impl Language {
    /// Every language, in a stable order.
    pub const ALL: &'static [Language] = &[Language::Javascript, Language::Python];

    /// The canonical name, as used on the wire and in metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Language::Javascript => "javascript",
            Language::Python => "python",
        }
    }

    /// The language a file extension names (`"js"`, `"mjs"`, `"py"`), if any.
    pub fn from_extension(ext: &str) -> Option<Language> {
        match ext {
            "js" | "mjs" | "cjs" => Some(Language::Javascript),
            "py" => Some(Language::Python),
            _ => None,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a language name the daemon does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownLanguage(pub String);

impl fmt::Display for UnknownLanguage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = Language::ALL.iter().map(|l| l.as_str()).collect();
        write!(
            f,
            "unknown language {:?}: expected one of {}",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownLanguage {}

impl FromStr for Language {
    type Err = UnknownLanguage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "javascript" | "js" => Ok(Language::Javascript),
            "python" | "py" => Ok(Language::Python),
            other => Err(UnknownLanguage(other.to_owned())),
        }
    }
}

impl TryFrom<String> for Language {
    type Error = UnknownLanguage;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// The canonical names only: the daemon also accepts the aliases `"js"` and `"py"`, which a
/// generated client has no need of.
impl JsonSchema for Language {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Language".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = Language::ALL.iter().map(|l| l.as_str()).collect();
        schemars::json_schema!({
            "description": "A guest language.",
            "type": "string",
            "enum": names,
        })
    }
}

/// Body of `POST /v1/exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Which guest runs the program.
    pub language: Language,
    /// The program's source text.
    pub code: String,
    /// Wall-clock limit for the whole request, including time spent waiting for a sandbox.
    /// The daemon's default applies when absent; values above the daemon's maximum are capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Cap on stdout and stderr together, in bytes. The daemon's default applies when absent;
    /// values above its maximum are capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
    /// What the program may not name; checked before it runs (`policy_violation` when it
    /// does, and nothing runs). Narrows the daemon's default policy, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Answer with the program's output as it is written, then the response, as
    /// newline-delimited JSON [`ExecEvent`]s (`application/x-ndjson`; also chosen by
    /// `Accept: application/x-ndjson`). A client that goes away stops the program.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Files for the program's working directory, by path (`data.csv`, `in/a.json`); it reads
    /// them as files (Python's `open`, JavaScript's `files`). Within the daemon's caps on their
    /// number and total size (`payload_too_large` past them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: FileMap,
    /// Tools the program may call as functions (Python `tools.NAME(...)`, JavaScript `await
    /// tools.NAME({...})`). With tools the answer is always the NDJSON stream: it begins with a
    /// `started` event naming the execution, and each call is a `tool_call` event, answered
    /// with `POST /v1/executions/{execution_id}/tool-results`. At most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// How long one tool call waits for its answer, in milliseconds. The daemon's default
    /// applies when absent; values above its maximum are capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// What the program may reach over HTTP (`fetch` in JavaScript, `urllib.request` in
    /// Python), narrowing the daemon's egress rules; the daemon's rules when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Environment variables the program sees (Python's `os.environ`, JavaScript's
    /// `process.env`), by name. A name is letters, digits and `_`, not beginning with a digit,
    /// at most 256 bytes; a value any text without NUL; at most 128 variables and 64 KiB in
    /// all. Guests run no processes, so nothing else reads them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: EnvMap,
    /// Python: packages to install before the program runs, as its `%pip install` lines would
    /// (`NAME`, `NAME==VERSION`), from the daemon's package index (`--package-index`). In a
    /// session they stay for its later execs; in a plain exec they are there for this one only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
}

/// Environment variables by name.
pub type EnvMap = BTreeMap<String, String>;

/// The content type of a streamed exec's answer: one JSON [`ExecEvent`] per line.
pub const NDJSON: &str = "application/x-ndjson";

/// One line of a streamed exec's answer: the program's output as it is written (within the
/// output cap), then the response, exactly as `POST /v1/exec` would have answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
// One event a line, made once and written out: the size of the largest (the response) is not
// worth a box in every caller's match.
#[allow(clippy::large_enum_variant)]
pub enum ExecEvent {
    /// Written to standard output.
    Stdout {
        /// The text, as the program wrote it.
        text: String,
    },
    /// Written to standard error.
    Stderr {
        /// The text, as the program wrote it.
        text: String,
    },
    /// Rich output the program showed (see [`ExecResponse::display`]).
    Display {
        /// MIME type to content: text as it is, binary types in base64.
        data: BTreeMap<String, String>,
        /// Whether it is the program's last expression (see [`DisplayData::result`]).
        #[serde(default, skip_serializing_if = "is_false")]
        result: bool,
    },
    /// The first line of an exec that declared tools: the id its calls are answered under
    /// (`POST /v1/executions/{execution_id}/tool-results`).
    Started {
        /// Unguessable; only the caller that started the exec may answer under it.
        execution_id: String,
    },
    /// The program called one of the tools its exec declared; it waits for the answer (its
    /// time limit stands still meanwhile).
    ToolCall {
        /// The call's id in this exec, which the answer names.
        id: String,
        /// The tool's name.
        name: String,
        /// Its arguments, which the tool's schema accepted.
        arguments: serde_json::Value,
    },
    /// The program ended: the last line. Its `stdout` and `stderr` hold the whole output.
    Result(ExecResponse),
    /// The request failed after its answer began (a fault in the daemon): the last line.
    Error {
        /// What went wrong.
        error: ErrorBody,
    },
}

impl ExecRequest {
    /// A request with the daemon's default limits.
    pub fn new(language: Language, code: impl Into<String>) -> Self {
        ExecRequest {
            language,
            code: code.into(),
            timeout_ms: None,
            max_output_bytes: None,
            policy: None,
            stream: false,
            files: FileMap::new(),
            tools: Vec::new(),
            tool_timeout_ms: None,
            network: None,
            env: EnvMap::new(),
            packages: Vec::new(),
        }
    }
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecStatus {
    /// The program ran to completion.
    Ok,
    /// The program failed: an uncaught exception, a syntax error, or the sandbox failed under it.
    Error,
    /// The program was stopped at its time limit.
    Timeout,
}

impl ExecStatus {
    /// The name used on the wire and in metrics labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            ExecStatus::Ok => "ok",
            ExecStatus::Error => "error",
            ExecStatus::Timeout => "timeout",
        }
    }
}

/// What kind of failure an [`ErrorBody`] reports. Agents can branch on it; the message is for
/// people. Kinds the client does not know yet deserialize as [`ErrorKind::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    // Outcomes of a program (status 200, `status` "error" or "timeout").
    /// The program does not parse.
    SyntaxError,
    /// The program threw and did not catch it.
    Exception,
    /// The program ran past its time limit.
    Timeout,
    /// The program's result is larger than the daemon returns.
    ResultTooLarge,
    /// The program allocated more memory than its sandbox has.
    OutOfMemory,
    /// The sandbox failed under the program (guest abort, memory fault): not the program's
    /// value, but caused by it. The sandbox is restored (or replaced) before its next use.
    SandboxFailure,
    /// The program used up a limit the host keeps on it besides time, memory and output (the
    /// message says which), and was stopped.
    ResourceLimit,
    /// The program names what its policy refuses (`violations` says what, and on which
    /// line); it did not run.
    PolicyViolation,
    /// The program tried to write more files, or more bytes of files, than its working
    /// directory may hold (the message says which cap), and failed for it.
    FileLimit,
    /// The execution declared tools and ran past the daemon's wall-clock cap on such
    /// executions (`--max-tool-wall-clock-ms`), tool waits included; it was stopped.
    WallClock,
    /// A package the host fetched and checked could not be installed in the sandbox (the
    /// message says which and why); the program did not run, and a session is as it was.
    InstallFailed,

    // Rejections of a request (status 4xx/5xx, nothing ran).
    /// The body is not a valid request (malformed JSON, missing or unknown field, bad value).
    InvalidRequest,
    /// The body, or the code in it, is larger than the daemon accepts.
    PayloadTooLarge,
    /// No such path.
    NotFound,
    /// The path exists but not with this method.
    MethodNotAllowed,
    /// The body did not arrive within the daemon's time limit for reading it.
    RequestTimeout,
    /// No sandbox can take the request now; retry later.
    Overloaded,
    /// The request waited for a sandbox for its whole time limit and none became free; nothing
    /// ran. Retry, or allow more time.
    NoSandboxAvailable,
    /// The daemon is shutting down.
    ShuttingDown,
    /// No session has this id: it never existed, was deleted, or expired.
    SessionNotFound,
    /// The session's state is gone: a restarted daemon could bring back none of its
    /// checkpoints from disk (the message says why). Delete it and create a new one.
    SessionLost,
    /// The session keeps no checkpoint of that number (never made, rolled back past, or dropped
    /// as the oldest); the message lists those it keeps.
    CheckpointNotFound,
    /// The daemon holds as many sessions, or as much session state, as it is allowed (the
    /// message says which); delete sessions no longer needed.
    TooManySessions,
    /// The session's earlier execs ran for the request's whole time limit; nothing ran. Retry,
    /// or allow more time.
    SessionBusy,
    /// The caller (its uid and groups, from the connection's peer credentials) is not on the
    /// daemon's allow list; nothing ran.
    CallerNotAllowed,
    /// The caller has as many executions in flight, or live sessions, as one caller may (the
    /// message says which); nothing ran. Retry once some have finished.
    QuotaExceeded,
    /// No running execution of this caller has this id (`tool-results`).
    ExecutionNotFound,
    /// The execution has ended: its calls take no more answers.
    ExecutionEnded,
    /// The execution made no call of this id.
    ToolCallNotFound,
    /// The call was already answered, or ran out of time.
    ToolCallAnswered,
    /// A package cannot be installed: installs are off, or the package is denied, not on the
    /// index, has no wheel for the guest, conflicts with what is installed, is too large, or
    /// does not match its hash (the message names it and says which); nothing changed.
    PackageRefused,
    /// The package index could not be read (the network, or the index failed); nothing
    /// changed. Retry later.
    PackageIndexUnavailable,
    /// A fault in the daemon itself.
    Internal,

    /// A kind this client version does not know. The daemon never sends it.
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl ErrorKind {
    /// Every kind the daemon sends (all but [`ErrorKind::Unknown`]).
    pub const ALL: &'static [ErrorKind] = &[
        ErrorKind::SyntaxError,
        ErrorKind::Exception,
        ErrorKind::Timeout,
        ErrorKind::ResultTooLarge,
        ErrorKind::OutOfMemory,
        ErrorKind::SandboxFailure,
        ErrorKind::ResourceLimit,
        ErrorKind::PolicyViolation,
        ErrorKind::FileLimit,
        ErrorKind::WallClock,
        ErrorKind::InstallFailed,
        ErrorKind::InvalidRequest,
        ErrorKind::PayloadTooLarge,
        ErrorKind::NotFound,
        ErrorKind::MethodNotAllowed,
        ErrorKind::RequestTimeout,
        ErrorKind::Overloaded,
        ErrorKind::NoSandboxAvailable,
        ErrorKind::ShuttingDown,
        ErrorKind::SessionNotFound,
        ErrorKind::SessionLost,
        ErrorKind::CheckpointNotFound,
        ErrorKind::TooManySessions,
        ErrorKind::SessionBusy,
        ErrorKind::CallerNotAllowed,
        ErrorKind::QuotaExceeded,
        ErrorKind::ExecutionNotFound,
        ErrorKind::ExecutionEnded,
        ErrorKind::ToolCallNotFound,
        ErrorKind::ToolCallAnswered,
        ErrorKind::PackageRefused,
        ErrorKind::PackageIndexUnavailable,
        ErrorKind::Internal,
    ];

    /// The HTTP status of an answer refusing a request with this kind: the one table of
    /// statuses (the OpenAPI document's tables are checked against it). None for the kinds
    /// that say what became of a program that ran (the `error` of a 200 answer), and for
    /// [`ErrorKind::Unknown`].
    pub const fn status(self) -> Option<u16> {
        match self {
            ErrorKind::SyntaxError
            | ErrorKind::Exception
            | ErrorKind::Timeout
            | ErrorKind::ResultTooLarge
            | ErrorKind::OutOfMemory
            | ErrorKind::SandboxFailure
            | ErrorKind::ResourceLimit
            | ErrorKind::PolicyViolation
            | ErrorKind::FileLimit
            | ErrorKind::WallClock
            | ErrorKind::InstallFailed
            | ErrorKind::Unknown => None,
            ErrorKind::InvalidRequest => Some(400),
            ErrorKind::CallerNotAllowed => Some(403),
            ErrorKind::NotFound
            | ErrorKind::SessionNotFound
            | ErrorKind::CheckpointNotFound
            | ErrorKind::ExecutionNotFound
            | ErrorKind::ToolCallNotFound => Some(404),
            ErrorKind::MethodNotAllowed => Some(405),
            ErrorKind::SessionLost => Some(410),
            ErrorKind::RequestTimeout => Some(408),
            ErrorKind::SessionBusy | ErrorKind::ExecutionEnded | ErrorKind::ToolCallAnswered => {
                Some(409)
            }
            ErrorKind::PayloadTooLarge => Some(413),
            ErrorKind::PackageRefused => Some(422),
            ErrorKind::QuotaExceeded | ErrorKind::TooManySessions => Some(429),
            ErrorKind::Internal => Some(500),
            ErrorKind::PackageIndexUnavailable => Some(502),
            ErrorKind::Overloaded | ErrorKind::NoSandboxAvailable | ErrorKind::ShuttingDown => {
                Some(503)
            }
        }
    }

    /// Whether the kind says what became of a program that ran (the `error` of a 200 answer),
    /// rather than why a request was refused.
    pub const fn is_outcome(self) -> bool {
        self.status().is_none() && !matches!(self, ErrorKind::Unknown)
    }

    /// The name used on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::SyntaxError => "syntax_error",
            ErrorKind::Exception => "exception",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ResultTooLarge => "result_too_large",
            ErrorKind::OutOfMemory => "out_of_memory",
            ErrorKind::SandboxFailure => "sandbox_failure",
            ErrorKind::ResourceLimit => "resource_limit",
            ErrorKind::PolicyViolation => "policy_violation",
            ErrorKind::FileLimit => "file_limit",
            ErrorKind::WallClock => "wall_clock",
            ErrorKind::InstallFailed => "install_failed",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::PayloadTooLarge => "payload_too_large",
            ErrorKind::NotFound => "not_found",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::RequestTimeout => "request_timeout",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::NoSandboxAvailable => "no_sandbox_available",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::SessionNotFound => "session_not_found",
            ErrorKind::SessionLost => "session_lost",
            ErrorKind::CheckpointNotFound => "checkpoint_not_found",
            ErrorKind::TooManySessions => "too_many_sessions",
            ErrorKind::SessionBusy => "session_busy",
            ErrorKind::CallerNotAllowed => "caller_not_allowed",
            ErrorKind::QuotaExceeded => "quota_exceeded",
            ErrorKind::ExecutionNotFound => "execution_not_found",
            ErrorKind::ExecutionEnded => "execution_ended",
            ErrorKind::ToolCallNotFound => "tool_call_not_found",
            ErrorKind::ToolCallAnswered => "tool_call_answered",
            ErrorKind::PackageRefused => "package_refused",
            ErrorKind::PackageIndexUnavailable => "package_index_unavailable",
            ErrorKind::Internal => "internal",
            ErrorKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure: what kind, and a message that says what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// Machine-readable kind.
    pub kind: ErrorKind,
    /// Human-readable message.
    pub message: String,
    /// For `policy_violation`: everything the program names that its policy refuses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
}

impl ErrorBody {
    /// An error body of the given kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorBody {
            kind,
            message: message.into(),
            violations: Vec::new(),
        }
    }
}

/// Body of every 4xx/5xx answer: `{"error": {"kind": ..., "message": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorResponse {
    /// What went wrong.
    pub error: ErrorBody,
}

/// One item of rich output, in one or more representations, as a notebook's display data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DisplayData {
    /// MIME type to content: text as it is, binary types (`image/png`) in base64.
    pub data: BTreeMap<String, String>,
    /// Whether it is the value of the program's last expression, shown as display data (a
    /// notebook's `execute_result`: a table or figure left last), rather than output the
    /// program showed (`plt.show()`). Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub result: bool,
}

/// For serde: a flag left out when false.
fn is_false(flag: &bool) -> bool {
    !flag
}

/// Body of a 200 answer to `POST /v1/exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecResponse {
    /// How the execution ended.
    pub status: ExecStatus,
    /// What the program wrote to standard output (`console.log`).
    pub stdout: String,
    /// What the program wrote to standard error (`console.error`, `console.warn`), and the
    /// stack trace of an uncaught exception.
    pub stderr: String,
    /// Whether stdout or stderr was cut at the daemon's output cap, or display data left out
    /// at it.
    #[serde(default)]
    pub truncated: bool,
    /// The value of the program's last expression statement as JSON, or null (null too when
    /// that value is shown as display data instead: a figure, a table). In JavaScript, the
    /// program's completion value as `eval` gives it, with or without top-level `await` (a
    /// program ending in `if` or `try` answers the value of the branch that ran).
    pub result: serde_json::Value,
    /// Rich output, in the order the program showed it: a matplotlib figure (`plt.show()`, or
    /// a figure left as the last expression) as `image/png`; a pandas DataFrame or Series left
    /// as the last expression as `text/html` and `text/plain`. A last expression's item is
    /// marked `result`. Counted against the output cap with stdout and stderr; an item past it
    /// is left out whole, and `truncated` is set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub display: Vec<DisplayData>,
    /// Set when `status` is not `ok`.
    pub error: Option<ErrorBody>,
    /// How long the program ran in its sandbox, in milliseconds.
    pub duration_ms: f64,
    /// How long the request waited before its program started, in milliseconds: for a
    /// sandbox, and in a session for its earlier execs and for the daemon to save the state
    /// they left (that saving does not count against the time limit).
    #[serde(default)]
    pub queued_ms: f64,
    /// For an exec in a session: the session, and whether its state was rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<ExecSession>,
    /// Files the program created or changed in its working directory, by path (files it was
    /// given and left as they were are not repeated). Only when it completed (`status` "ok").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: FileMap,
}

/// Body of `GET /v1/health` and its `live` and `ready` forms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HealthResponse {
    /// `"ok"` when every pool is at its size; `"starting"` while pools warm for the first time;
    /// `"degraded"` when a pool has fallen below its size (sandboxes being replaced);
    /// `"stopping"` while the daemon drains; `"stuck"` when a guest the hypervisor does not give
    /// back holds a worker (see `live`).
    pub status: String,
    /// Liveness: false when a worker is stuck in the hypervisor long past its time limit; only
    /// restarting the daemon frees it.
    #[serde(default = "default_true")]
    pub live: bool,
    /// Readiness: every pool is at its size and the daemon is not stopping.
    pub ready: bool,
    /// The hypervisor the sandboxes run on (`"kvm"`, `"mshv"`), with the kernel module when known.
    pub hypervisor: String,
    /// Versions of the daemon and the Hyperlight crates it runs on.
    pub versions: BTreeMap<String, String>,
    /// Sandboxes per language.
    pub sandboxes: BTreeMap<Language, SandboxCounts>,
    /// Packages each language's guest offers beyond its standard library, name to version
    /// (Python: what `import` finds besides the standard library). A language with none is
    /// absent.
    #[serde(default)]
    pub packages: BTreeMap<Language, BTreeMap<String, String>>,
    /// What runs each served language: the runtime and the language's version.
    #[serde(default)]
    pub runtimes: BTreeMap<Language, Runtime>,
    /// The limits every execution runs under, so that a client (an agent's tool description,
    /// say) can state them.
    pub limits: ExecLimits,
    /// Live sessions and the memory their state holds, per served language.
    #[serde(default)]
    pub sessions: BTreeMap<Language, SessionCounts>,
    /// The limits sessions live under (absent from daemons without sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_limits: Option<SessionLimits>,
    /// What one caller may use at once (absent from daemons without caller quotas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_limits: Option<CallerLimits>,
    /// The audit log (absent from daemons without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditHealth>,
    /// Sessions kept on disk (absent without `--state-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable: Option<DurableHealth>,
    /// What programs may reach over HTTP (absent when they can reach nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressHealth>,
    /// What Python programs may install at runtime (absent when the daemon installs nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installs: Option<PackagesHealth>,
}

/// The limits every execution runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecLimits {
    /// Time limit of a request that names none, in milliseconds.
    pub default_timeout_ms: u64,
    /// Highest time limit a request may ask for, in milliseconds; higher ones are capped.
    pub max_timeout_ms: u64,
    /// Largest program, in bytes.
    pub max_code_bytes: usize,
    /// Cap on stdout and stderr together, in bytes; output past it is cut.
    pub max_output_bytes: usize,
    /// Largest result (the last expression's value, as JSON), in bytes.
    pub max_result_bytes: usize,
    /// Memory a program can allocate in each language's sandbox, in MiB.
    pub memory_mib: BTreeMap<Language, u64>,
    /// Most files (and directories) a working directory may hold, given or written.
    #[serde(default)]
    pub max_files: usize,
    /// Most bytes the files of a working directory may hold together.
    #[serde(default)]
    pub max_file_bytes: u64,
}

fn default_true() -> bool {
    true
}

/// What runs a language's programs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Runtime {
    /// The runtime: for Python `"native"` (CPython built for Linux, with the scientific stack,
    /// in a Unikraft micro-VM) or `"webassembly"` (CPython compiled to WebAssembly, pure-Python
    /// packages only); for JavaScript `"quickjs"`.
    pub name: String,
    /// The language's version as the runtime reports it (Python's `platform.python_version()`),
    /// when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Sandbox counts for one language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxCounts {
    /// Idle and ready to take a request.
    pub ready: usize,
    /// All sandboxes of the language, busy or not.
    pub total: usize,
    /// The pool's size: how many sandboxes it keeps.
    pub target: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_request_parses_minimal_body() {
        let req: ExecRequest =
            serde_json::from_str(r#"{"language":"javascript","code":"1+1"}"#).unwrap();
        assert_eq!(req, ExecRequest::new(Language::Javascript, "1+1"));
    }

    #[test]
    fn exec_request_with_unknown_language_names_the_known_ones() {
        let err = serde_json::from_str::<ExecRequest>(r#"{"language":"cobol","code":""}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown language \"cobol\""), "{err}");
        assert!(err.contains("javascript"), "{err}");
    }

    #[test]
    fn exec_request_with_unknown_field_is_rejected() {
        let err = serde_json::from_str::<ExecRequest>(
            r#"{"language":"javascript","code":"","timeout":5}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `timeout`"), "{err}");
    }

    #[test]
    fn error_kind_unknown_to_this_client_deserializes_as_unknown() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"kind":"from_the_future","message":"m"}"#).unwrap();
        assert_eq!(body.kind, ErrorKind::Unknown);
    }

    #[test]
    fn error_kind_wire_names_match_as_str() {
        for &kind in ErrorKind::ALL {
            let wire = serde_json::to_string(&kind).unwrap();
            assert_eq!(wire, format!("\"{}\"", kind.as_str()));
        }
    }

    #[test]
    fn language_from_extension_knows_js_and_py() {
        assert_eq!(Language::from_extension("js"), Some(Language::Javascript));
        assert_eq!(Language::from_extension("py"), Some(Language::Python));
        assert_eq!(Language::from_extension("txt"), None);
    }

    #[test]
    fn python_names_parse_and_render() {
        assert_eq!("py".parse::<Language>().unwrap(), Language::Python);
        let req: ExecRequest =
            serde_json::from_str(r#"{"language":"python","code":"1+1"}"#).unwrap();
        assert_eq!(req.language, Language::Python);
        assert_eq!(Language::Python.to_string(), "python");
    }
}
