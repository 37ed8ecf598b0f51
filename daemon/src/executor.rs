//! The boundary between the transport and the core: a typed execution command, its outcome, and
//! the [`Executor`] trait that runs it.
//!
//! The HTTP layer turns a request into a [`Job`] and an [`Outcome`] back into a response; the
//! executor knows nothing of HTTP. That keeps the HTTP layer testable against a stub executor,
//! and lets the Hyperlight executor change (pools, languages) without touching the transport.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlightd_api::{ErrorBody, ExecSession, ExecStatus, Language, SandboxCounts, SessionCounts};

use crate::caller::Caller;
use crate::session::Sessions;

/// One program to run.
#[derive(Debug)]
pub struct Job {
    /// Which guest runs it.
    pub language: Language,
    /// The program's source.
    pub code: String,
    /// The request's time limit, as granted (after defaults and caps).
    pub timeout: Duration,
    /// When the request must be answered by: its arrival plus `timeout`. Time spent waiting for
    /// a sandbox counts, and for a session's earlier execs, but not for their state to be saved
    /// (a session moves the deadline on by that time).
    pub deadline: Instant,
    /// Cap on stdout plus stderr, as granted.
    pub max_output_bytes: usize,
    /// What the program may not name (the daemon's default and the request's, the language's
    /// part of them); None: nothing is checked.
    pub policy: Option<hyperlightd_api::Policy>,
    /// Where its output goes as it is written, besides the outcome; None: only the outcome.
    pub output: Option<OutputSink>,
    /// Its working directory's files (for a session's exec, added to the session's).
    pub files: Files,
    /// What the working directory may hold.
    pub file_limits: FileLimits,
    /// The request's tracing span, entered by whichever thread runs the job.
    pub span: tracing::Span,
    /// The session to run it in (its language is `language`); None: a fresh interpreter.
    pub session: Option<String>,
    /// Who asked: a session runs the job only for the caller it belongs to.
    pub caller: Caller,
}

/// A working directory's files: contents by path (`data.csv`, `out/a.txt`), paths checked
/// (see [`crate::sandbox::workspace`]).
pub type Files = BTreeMap<String, Vec<u8>>;

/// What a program's working directory may hold; the default, nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileLimits {
    /// Files and directories.
    pub max_entries: usize,
    /// Bytes of all files together.
    pub max_bytes: u64,
}

/// Which output stream a write goes to. The numbers are the runner protocol's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// The stream a runner's stream number names; anything unknown is treated as stderr, so
    /// that no output is silently lost.
    pub fn from_number(n: u8) -> Stream {
        match n {
            1 => Stream::Stdout,
            _ => Stream::Stderr,
        }
    }
}

/// A piece of a program's output, as the program wrote it (within its output cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Where it was written.
    pub stream: Stream,
    /// What was written.
    pub text: String,
}

/// Where a job's output goes while it runs, for a caller that sees it as it comes. The caller
/// going away (the receiver dropped) stops the program. The output cap bounds what it holds.
pub type OutputSink = tokio::sync::mpsc::UnboundedSender<OutputChunk>;

impl Job {
    /// Whether the caller watching the job's output has gone away (never, without a sink).
    pub fn watcher_gone(&self) -> bool {
        self.output.as_ref().is_some_and(|sink| sink.is_closed())
    }
}

/// How a program's run ended. Produced for every job the executor accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Overall status.
    pub status: ExecStatus,
    /// Standard output, possibly truncated.
    pub stdout: String,
    /// Standard error, possibly truncated.
    pub stderr: String,
    /// Whether stdout or stderr was cut at the output cap.
    pub truncated: bool,
    /// The program's result value (JSON null when none).
    pub result: serde_json::Value,
    /// Set when `status` is not `Ok`.
    pub error: Option<ErrorBody>,
    /// For a session's exec: the session, and whether its state was rolled back.
    pub session: Option<ExecSession>,
    /// Files the program created or changed (only when it completed).
    pub files: Files,
    /// When its sandbox started running the program: what came before (waiting for a sandbox,
    /// for a session's earlier execs and for their state to be saved) is the job's queue time.
    pub started: Instant,
    /// How long the program ran in its sandbox.
    pub ran: Duration,
}

/// Why the executor did not run a job. Nothing ran; the caller may retry where it says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// Every sandbox of the language is busy and its queue is full.
    #[error("all {language} sandboxes are busy and {queued} requests are already waiting")]
    Overloaded {
        /// The language.
        language: Language,
        /// The queue's depth.
        queued: usize,
    },
    /// The job waited for a sandbox for its whole time limit and never got one: every sandbox
    /// was busy (or being replaced) until its deadline. Nothing ran.
    #[error(
        "no {language} sandbox became free within the request's time limit of {} ms (all were \
         busy or being replaced); nothing ran. Retry, or allow more time with timeout_ms",
        .timeout.as_millis()
    )]
    NoSandboxAvailable {
        /// The language.
        language: Language,
        /// The request's time limit, all of it spent waiting.
        timeout: Duration,
    },
    /// The daemon runs no pool for the language.
    #[error("this daemon runs no {0} sandboxes (see its --pool option)")]
    LanguageNotServed(Language),
    /// No session has this id (never did, deleted, or expired).
    #[error(
        "no session {0}: it never existed, was deleted, or expired after its idle timeout or \
         lifetime. Create a new one with POST /v1/sessions"
    )]
    SessionNotFound(String),
    /// The daemon holds as many sessions as it may.
    #[error(
        "the daemon holds {limit} sessions, its limit (--max-sessions); delete sessions no \
         longer needed, or wait for idle ones to expire"
    )]
    TooManySessions {
        /// The limit.
        limit: usize,
    },
    /// The caller holds as many sessions as one caller may.
    #[error(
        "this caller (uid {uid}) holds {limit} sessions, as many as one caller may \
         (--max-sessions-per-caller); delete sessions it no longer needs, or wait for idle ones \
         to expire"
    )]
    SessionQuota {
        /// The caller's uid.
        uid: u32,
        /// The quota.
        limit: usize,
        /// When the caller's first session expires unless used.
        retry_after: Duration,
    },
    /// Session state holds the daemon's whole memory budget for it.
    #[error(
        "session state holds {} MiB, the daemon's budget of {} MiB (--session-memory-mib); \
         delete sessions no longer needed, or wait for idle ones to expire",
        .held >> 20, .budget >> 20
    )]
    SessionMemoryFull {
        /// Bytes held.
        held: u64,
        /// The budget.
        budget: u64,
    },
    /// The session's earlier execs (or forks) kept it busy for the request's whole time limit.
    #[error(
        "the session was busy with earlier execs for the request's whole time limit of {} ms; \
         nothing ran. Retry, or allow more time with timeout_ms",
        .timeout.as_millis()
    )]
    SessionBusy {
        /// The time limit, all of it spent waiting.
        timeout: Duration,
    },
    /// The state an earlier exec of the session left was still being saved when the job had
    /// waited for the saving as long as the daemon lets it (a save that long is a fault).
    #[error(
        "the session's state from its earlier exec was still being saved after {} s, longer \
         than an exec waits for it; nothing ran. Retry shortly",
        .waited.as_secs()
    )]
    SessionSaving {
        /// How long the job waited for the saving.
        waited: Duration,
    },
    /// The session's files and the request's together are more than a working directory may
    /// hold. Nothing ran.
    #[error(
        "the session's files and the request's together are more than a working directory may \
         hold ({0}); nothing ran. Send fewer or smaller files, or remove some in the session"
    )]
    FilesOverCap(String),
    /// The language's pool has no worker left to take jobs. A bug, reported as a 500.
    #[error("the {0} pool has no workers left (a fault in the daemon; see its log)")]
    PoolGone(Language),
    /// The executor lost the job (a worker thread died). A bug, reported as a 500.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What the executor reports for `/v1/health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorHealth {
    /// The hypervisor in use, e.g. `"kvm (kvm_amd)"`.
    pub hypervisor: String,
    /// Sandbox counts per served language.
    pub sandboxes: BTreeMap<Language, SandboxCounts>,
    /// Whether every pool has been at its size at least once (warm-up is over).
    pub warmed: bool,
    /// Workers whose guest step (a call, a restore, a build) has run far past its limit: the
    /// hypervisor is not giving the thread back, and only restarting the daemon frees it.
    pub stuck_workers: usize,
    /// Packages each language's guest offers beyond its standard library, name to version.
    pub packages: BTreeMap<Language, BTreeMap<String, String>>,
    /// Memory a program can allocate in each served language's sandbox, in MiB.
    pub memory_mib: BTreeMap<Language, u64>,
    /// Live sessions and their memory, per served language.
    pub sessions: BTreeMap<Language, SessionCounts>,
}

/// Runs jobs. Implemented by the Hyperlight executor, and by stubs in tests.
pub trait Executor: Send + Sync + 'static {
    /// Runs `job` (in its session, if it names one) and returns its outcome, or says why it
    /// did not run it.
    fn exec(&self, job: Job) -> impl Future<Output = Result<Outcome, ExecError>> + Send;

    /// Current state, for health and metrics.
    fn health(&self) -> ExecutorHealth;

    /// The sessions: create, fork, read, list and delete them (their execs go through
    /// [`exec`](Self::exec)).
    fn sessions(&self) -> &Arc<Sessions>;
}
