//! The job vocabulary: what a job is, what it produced, and why one did not run. Plain types,
//! shared by everything that runs jobs (the guests, their pools, sessions, the executor) and
//! by the layers that hand jobs in (the service, the transports).
//!
//! This module imports nothing else of the daemon, and every other module may import it. The
//! types are the core's own: the HTTP edge turns them into the API's wire types (and back), in
//! one place each. The one exception is [`Language`], the `hyperlightd-api` enum of the
//! languages served: a plain name, the same on the wire and in the core.

mod caller;
mod deadline;
pub mod egress;
pub mod env;
mod error;
pub mod files;
mod health;
pub mod labels;
mod outcome;
pub mod packages;
mod state;
pub mod tools;
pub mod workspace;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use self::caller::{Caller, Placement, PodOf, Principal};
pub use self::deadline::{Deadline, Now, Paused};
pub use self::env::Env;
pub use self::error::{ExecError, panic_message};
pub use self::files::{FileLimits, Files};
pub use self::health::{
    CheckpointInfo, DurableHealth, ExecutorHealth, Loss, PoolCounts, Runtime, SessionCounts,
    SessionInfo, SessionSettings, WriteHealth,
};
pub use self::labels::Labels;
pub use self::outcome::{Failure, FailureKind, Outcome, SessionRef, Status, Violation};
pub use self::state::{
    After, Answer, ExistingBlob, FileIdentity, Footprint, KeyMismatch, MemoryFile, Ran, Resume,
    Saved, SavedState, StateCodec, StateKey, StateRef,
};
pub use hyperlightd_api::Language;

/// One program to run.
#[derive(Debug)]
pub struct Job {
    /// The request's id: a session's checkpoint names the exec that made it.
    pub request_id: u64,
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
    pub policy: Option<Policy>,
    /// Where its output goes as it is written, besides the outcome; None: only the outcome.
    pub output: Option<OutputSink>,
    /// Its working directory's files (for a session's exec, added to the session's).
    pub files: Files,
    /// Changes made to a session's files, in order, after `files` are laid over them (a session's
    /// exec only; empty for every other job).
    pub file_changes: Vec<files::FileChange>,
    /// Run from the warm state rather than the session's, with the session's files: a
    /// session's interpreter started afresh (a session's exec only).
    pub fresh_interpreter: bool,
    /// Wheels to install before the program runs (a Python guest's only).
    pub packages: Vec<packages::Wheel>,
    /// What the working directory may hold.
    pub file_limits: FileLimits,
    /// The environment the program sees (for a session's exec, added to the session's).
    pub env: Env,
    /// The tools the program may call, and the exchange that carries its calls to the caller
    /// (whose stream is `output`); None: it may call none.
    pub tools: Option<Arc<tools::ToolExchange>>,
    /// The program's way out over HTTP (what it may reach, within its limits); None: it may
    /// reach nothing.
    pub egress: Option<Arc<dyn egress::Outbound>>,
    /// The request's tracing span, entered by whichever thread runs the job.
    pub span: tracing::Span,
    /// The request's place in a trace: the spans of its steps (the queue, the guest call, its
    /// tool calls and outbound requests, a session's save) go under it.
    pub trace: crate::telemetry::Trace,
    /// Who asked: a session runs the job only for the caller it belongs to, and a pool shares
    /// its sandboxes fairly between callers.
    pub caller: Caller,
}

impl Job {
    /// Whether the caller watching the job's output has gone away (never, without a sink).
    pub fn watcher_gone(&self) -> bool {
        self.output.as_ref().is_some_and(|sink| sink.is_closed())
    }
}

/// What a program may not name, checked by its runner before it runs (on the program's own
/// syntax tree, inside the guest). Serialized into the runner's event as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// Python: the only modules the program may import (and their submodules); None: any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_modules: Option<Vec<String>>,
    /// Python: functions the program may not name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_functions: Vec<String>,
    /// JavaScript: globals the program may not name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_globals: Vec<String>,
}

impl Policy {
    /// Whether the policy restricts nothing.
    pub fn is_empty(&self) -> bool {
        self.allowed_modules.is_none()
            && self.blocked_functions.is_empty()
            && self.blocked_globals.is_empty()
    }
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

/// A piece of a program's output, as the program wrote or showed it (within its output cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Text written to a stream.
    Text {
        /// Where it was written.
        stream: Stream,
        /// What was written.
        text: String,
    },
    /// Rich output shown.
    Display(Display),
    /// The job has its sandbox and its program starts: a streamed answer begins now, so that
    /// a client's own deadline counts from here. Not a line of the answer.
    Running,
    /// The first chunk of an exec that declared tools: the id its calls are answered under.
    Started(String),
    /// A call of one of the tools the request declared, for the caller to answer (not counted
    /// against the output cap).
    ToolCall(tools::ToolCall),
}

/// Rich output a program showed (a figure, a table): one item in one or more
/// representations, MIME type to content (binary content in base64), as a notebook's display
/// data.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Display {
    pub data: BTreeMap<String, String>,
    /// Whether it is the value of the program's last expression rather than output it showed.
    #[serde(default)]
    pub result: bool,
}

impl Display {
    /// What it counts against the output cap: every type's name and content.
    pub fn size(&self) -> usize {
        self.data
            .iter()
            .map(|(kind, content)| kind.len() + content.len())
            .sum()
    }
}

/// Where a job's output goes while it runs, for a caller that sees it as it comes. The caller
/// going away (the receiver dropped) stops the program. The output cap bounds what it holds.
pub type OutputSink = tokio::sync::mpsc::UnboundedSender<OutputChunk>;
