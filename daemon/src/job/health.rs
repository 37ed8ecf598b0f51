//! What the executor reports of its pools and sessions, for health and metrics.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::{Env, Labels, Language};

/// What the executor reports for health and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorHealth {
    /// The hypervisor in use, e.g. `"kvm (kvm_amd)"`.
    pub hypervisor: String,
    /// Sandbox counts per served language.
    pub sandboxes: BTreeMap<Language, PoolCounts>,
    /// Whether every pool has been at its size at least once (warm-up is over).
    pub warmed: bool,
    /// Workers whose guest step (a call, a restore, a build) has run far past its limit: the
    /// hypervisor is not giving the thread back, and only restarting the daemon frees it.
    pub stuck_workers: usize,
    /// What runs each served language (asked of each pool's template once it is ready).
    pub runtimes: BTreeMap<Language, Runtime>,
    /// Memory a program can allocate in each served language's sandbox, in MiB.
    pub memory_mib: BTreeMap<Language, u64>,
    /// Live sessions and their memory, per served language.
    pub sessions: BTreeMap<Language, SessionCounts>,
    /// The limits sessions live under.
    pub session_limits: SessionSettings,
    /// The state directory, when sessions are kept on disk.
    pub durable: Option<DurableHealth>,
}

/// Sessions kept on disk (`--state-dir`), as health reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableHealth {
    /// The state directory.
    pub dir: std::path::PathBuf,
    /// Whether writes reach it.
    pub writes: WriteHealth,
}

/// Whether sessions reach the state directory, as health reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteHealth {
    /// Checkpoints, session directories and journal lines that could not be written since the
    /// daemon started: what they held is in memory only.
    pub failed: u64,
    /// Why the last of them failed.
    pub last_error: Option<String>,
    /// Whether the last write failed (until one succeeds again).
    pub failing: bool,
}

/// What runs a language's programs, as its guest reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runtime {
    /// The runtime: `"native"` or `"webassembly"` for Python, `"quickjs"` for JavaScript.
    pub name: &'static str,
    /// The language's version, when known.
    pub version: Option<String>,
    /// Packages the guest offers beyond the language's standard library, name to version.
    pub packages: BTreeMap<String, String>,
}

/// A pool's sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    /// Idle and ready to take a job.
    pub ready: usize,
    /// All of them, busy or not.
    pub total: usize,
    /// The pool's size.
    pub target: usize,
}

/// A language's live sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionCounts {
    /// Live sessions.
    pub live: usize,
    /// Host memory their saved state holds, in bytes.
    pub memory_bytes: u64,
    /// Sessions whose state is on disk only.
    pub parked: usize,
}

/// A session, as the executor describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// Its id.
    pub id: String,
    /// The language its execs run in.
    pub language: Language,
    /// When it was created.
    pub created_at: SystemTime,
    /// When it is deleted unless an exec comes first.
    pub expires_at: SystemTime,
    /// How long it may stay idle, as granted.
    pub idle_timeout: Duration,
    /// What its creator named it by.
    pub labels: Labels,
    /// The environment its execs see.
    pub env: Env,
    /// Execs that ran in it.
    pub execs: u64,
    /// Host memory its checkpoints hold, in bytes.
    pub memory_bytes: u64,
    /// The checkpoint it is at: its newest.
    pub checkpoint: u64,
    /// How many checkpoints it keeps.
    pub checkpoints: usize,
    /// Execs whose state it lost, not yet reported by an exec's answer.
    pub lost: Option<Loss>,
    /// Its state is on disk only.
    pub parked: bool,
    /// It is kept in the state directory.
    pub durable: bool,
    /// Why its state is gone, when none of its checkpoints could be brought back.
    pub gone: Option<String>,
}

/// Execs whose answer was sent but whose state the session lost: it is back at an older
/// checkpoint than its last exec left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loss {
    /// The checkpoint the session is back at.
    pub restored_from_checkpoint: u64,
    /// How many answered execs' state is gone.
    pub lost_execs: u64,
}

/// One of a session's checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Its number: 0 for where the session started, then one more for each exec whose state
    /// was kept; never reused.
    pub number: u64,
    /// The checkpoint the exec that made it started from (None for 0).
    pub parent: Option<u64>,
    /// When it was made.
    pub made_at: SystemTime,
    /// The request id of the exec that made it (None for 0).
    pub request_id: Option<u64>,
    /// Host memory it holds, in bytes.
    pub bytes: u64,
    /// It is on disk.
    pub durable: bool,
}

/// The limits sessions live under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSettings {
    /// Most live sessions, all languages together.
    pub max_sessions: usize,
    /// Most live sessions one caller (uid) may hold.
    pub max_per_caller: usize,
    /// A uid held to no per-caller limit: the daemon's own user, its operator.
    pub exempt_uid: Option<u32>,
    /// Idle timeout of a session that names none.
    pub default_idle: Duration,
    /// Highest idle timeout a session may have.
    pub max_idle: Duration,
    /// Longest a session lives.
    pub max_lifetime: Duration,
    /// Bytes all images together may hold before new sessions are refused.
    pub memory_budget: u64,
    /// Most checkpoints a session keeps, its newest included.
    pub max_checkpoints: usize,
    /// Most bytes a session's checkpoints may hold together (its newest is kept whatever its
    /// size).
    pub max_checkpoint_bytes: u64,
    /// With a state directory: how long a session stays idle before its state leaves memory.
    pub park_after: Option<Duration>,
}
