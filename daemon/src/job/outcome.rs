//! How a program's run ended.

use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Display, Files};

/// How a program's run ended. Produced for every job the executor accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Overall status.
    pub status: Status,
    /// Standard output, possibly truncated.
    pub stdout: String,
    /// Standard error, possibly truncated.
    pub stderr: String,
    /// Whether stdout or stderr was cut at the output cap, or display data left out at it.
    pub truncated: bool,
    /// The program's result value (JSON null when none).
    pub result: serde_json::Value,
    /// Rich output, in the order the program showed it.
    pub display: Vec<Display>,
    /// Set when `status` is not `Ok`.
    pub error: Option<Failure>,
    /// For a session's exec: the session, and whether its state was rolled back.
    pub session: Option<SessionRef>,
    /// Files the program created or changed (only when it completed).
    pub files: Files,
    /// When its sandbox started running the program: what came before (waiting for a sandbox,
    /// for a session's earlier execs and for their state to be saved) is the job's queue time.
    pub started: Instant,
    /// How long the program ran in its sandbox.
    pub ran: Duration,
}

impl Outcome {
    /// The outcome of a program that failed with `error`, its output `stdout` and `stderr`,
    /// timed as if it started now and ran no time (the caller sets when it started and how
    /// long it ran).
    pub fn failed(error: Failure, stdout: String, stderr: String, truncated: bool) -> Outcome {
        Outcome {
            status: match error.kind {
                FailureKind::Timeout | FailureKind::WallClock => Status::Timeout,
                _ => Status::Error,
            },
            stdout,
            stderr,
            truncated,
            result: serde_json::Value::Null,
            display: Vec::new(),
            error: Some(error),
            session: None,
            files: Files::new(),
            started: Instant::now(),
            ran: Duration::ZERO,
        }
    }
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// It completed.
    Ok,
    /// It failed (see its [`Failure`]).
    Error,
    /// It was stopped at its time limit.
    Timeout,
}

impl Status {
    /// The name metrics and logs use (the API's too).
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Timeout => "timeout",
        }
    }
}

/// Why a program that ran did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// What happened, for whoever reads it (a model included).
    pub message: String,
    /// For [`FailureKind::PolicyViolation`]: what the program names that its policy refuses.
    pub violations: Vec<Violation>,
}

impl Failure {
    /// A failure of `kind` saying `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            violations: Vec::new(),
        }
    }
}

/// The ways a program that ran can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// It does not parse.
    SyntaxError,
    /// It raised and did not catch it.
    Exception,
    /// It ran past its time limit.
    Timeout,
    /// Its result is over the limit.
    ResultTooLarge,
    /// It ran out of memory.
    OutOfMemory,
    /// Its sandbox failed (a guest crash, a fault in the daemon's side of it).
    SandboxFailure,
    /// It used up a limit the host keeps on it beyond time, memory and output.
    ResourceLimit,
    /// It names what its policy refuses; it did not run.
    PolicyViolation,
    /// It wrote past its working directory's caps, and failed for it.
    FileLimit,
    /// It declared tools and ran past the wall-clock cap of such executions.
    WallClock,
    /// A package could not be installed in the sandbox; the program did not run.
    InstallFailed,
}

impl FailureKind {
    /// Its name in spans and logs (the wire's name of the same kind: `service::wire` checks).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::SyntaxError => "syntax_error",
            FailureKind::Exception => "exception",
            FailureKind::Timeout => "timeout",
            FailureKind::ResultTooLarge => "result_too_large",
            FailureKind::OutOfMemory => "out_of_memory",
            FailureKind::SandboxFailure => "sandbox_failure",
            FailureKind::ResourceLimit => "resource_limit",
            FailureKind::PolicyViolation => "policy_violation",
            FailureKind::FileLimit => "file_limit",
            FailureKind::WallClock => "wall_clock",
            FailureKind::InstallFailed => "install_failed",
        }
    }
}

/// Something a program names that its policy refuses, as its runner found it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Violation {
    /// The line it is on, from 1.
    pub line: u32,
    /// The rule that refuses it.
    pub rule: String,
    /// What was refused.
    pub name: String,
}

/// The session an exec ran in, and whether its state was rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRef {
    /// The session's id.
    pub id: String,
    /// Whether the exec's effects were dropped.
    pub rolled_back: bool,
    /// The checkpoint the exec left the session at: the one it made, or, when it made none
    /// (rolled back, or its program did not run), the one it started from.
    pub checkpoint: u64,
    /// State the session lost before this exec, reported once, here.
    pub lost: Option<super::Loss>,
}
