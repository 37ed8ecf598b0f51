//! The service layer: everything a request must pass before and after the executor, decided
//! once, for every front end. No transport in it: a front end (the HTTP API today) parses a
//! request into a [`Call`] and a command, calls the service, and turns the typed answer (an
//! outcome, a session, a [`Refusal`]) into its own reply.
//!
//! What it decides, in order: whether the daemon still takes work (draining), whether the caller
//! may call at all (allow lists, audited when refused), whether the program may run (its size,
//! its policy, its files within the caps), the limits it gets (time, output, the code policy
//! narrowed by the request's), whether the caller has room (the per-caller cap), and afterwards
//! the audit line, the request metrics and the log line. The executor below runs what it lets
//! through.
//!
//! - [`code_policy`]: a program's policy, validated, combined and cut to its language;
//! - [`exec`]: plain and session execs;
//! - [`limits`]: the limits requests are granted;
//! - [`running`]: a streamed exec's events, as every front end reads them;
//! - [`sessions`]: the session operations;
//! - [`wire`]: the one place where core types become the API's wire types.

pub mod code_policy;
mod exec;
mod executions;
mod limits;
mod packages;
mod running;
mod sessions;
pub mod tools;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use hyperlightd_api::{AuditHealth, EgressHealth, ErrorKind, Language, PackagesHealth};

use self::code_policy::CodePolicy;
pub use self::exec::{Executed, Program};
pub use self::executions::AnswerRefused;
use self::executions::Executions;
pub use self::limits::{Limits, ToolGrants, tool_defaults};
pub use self::packages::Installed;
pub use self::running::Running;
use crate::audit::{AuditLog, DeniedRecord};
use crate::caller::{Access, ExecQuota, OverQuota};
use crate::egress::Egress;
use crate::executor::Executor;
use crate::job::files::FileError;
use crate::job::tools::AnswerError;
use crate::job::{Caller, ExecError, ExecutorHealth, PodOf};
use crate::metrics::Metrics;
use crate::packages::Packages;
use crate::telemetry::Trace;

/// One request as the service sees it, whatever carried it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The request's id (the HTTP API's `x-request-id`), in logs and audit lines.
    pub id: u64,
    /// Who sent it.
    pub caller: Caller,
    /// When it arrived: its time limit counts from here.
    pub received: Instant,
    /// Its tracing span (the logs').
    pub span: tracing::Span,
    /// Its place in a trace (its server span, or the caller's trace while tracing is off).
    pub trace: Trace,
}

/// Who may call, how much one caller may have at once, and where that is recorded.
#[derive(Debug)]
pub struct Callers {
    /// Who may call.
    pub access: Access,
    /// Executions in flight per caller.
    pub quota: Arc<ExecQuota>,
    /// The audit log.
    pub audit: Arc<AuditLog>,
}

impl Callers {
    /// Anyone who can connect may call, as much as the pools take, and nothing is recorded.
    pub fn open() -> Self {
        Callers {
            access: Access::default(),
            quota: ExecQuota::new(BTreeMap::new(), None),
            audit: Arc::new(AuditLog::off()),
        }
    }
}

/// Why the service did not do what a request asked. Nothing ran, nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The request is not valid (a policy or a file that cannot be, a bad value).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The program is over the limit.
    #[error("the code is {size} bytes; the limit is {limit} bytes")]
    CodeTooLarge {
        /// The program's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The request's files are more than a working directory may hold.
    #[error("{0}")]
    FilesOverCap(String),
    /// The caller is not on the allow lists.
    #[error(
        "this caller (uid {uid}, gid {gid}) may not use this daemon: it is not on its allow list \
         (--allow-uid, --allow-gid)"
    )]
    CallerNotAllowed {
        /// The caller's uid.
        uid: u32,
        /// Its gid.
        gid: u32,
    },
    /// With `--pod-identity`, the caller's pod cannot be told.
    #[error(
        "this caller (uid {uid}) may not use this daemon: it tells callers apart by pod and \
         cannot tell this one's ({why}); call from a process that stays connected"
    )]
    CallerUnplaced {
        /// The caller's uid.
        uid: u32,
        /// Why its pod cannot be told.
        why: String,
    },
    /// The caller named another it acts for, and is not trusted to.
    #[error(
        "this caller (uid {uid}) may not act for another (it sent hyperlightd-on-behalf-of): \
         only a user the daemon trusts with --delegate-uid may"
    )]
    NotADelegate {
        /// The caller's uid.
        uid: u32,
    },
    /// The caller has as many executions in flight as one caller may.
    #[error(transparent)]
    OverQuota(#[from] OverQuota),
    /// The daemon is stopping and takes no new requests.
    #[error("the daemon is shutting down and takes no new requests; retry once it is back")]
    ShuttingDown,
    /// The executor did not run the job.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A tool's answer was not taken.
    #[error(transparent)]
    ToolAnswer(#[from] AnswerRefused),
    /// Packages were not installed.
    #[error(transparent)]
    Package(#[from] crate::packages::Refusal),
}

impl Refusal {
    /// The API's error kind. Exhaustive on purpose: a new variant must decide its kind here
    /// (and its status in the front end's one mapping).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Refusal::InvalidRequest(_) => ErrorKind::InvalidRequest,
            Refusal::CodeTooLarge { .. } | Refusal::FilesOverCap(_) => ErrorKind::PayloadTooLarge,
            Refusal::CallerNotAllowed { .. }
            | Refusal::CallerUnplaced { .. }
            | Refusal::NotADelegate { .. } => ErrorKind::CallerNotAllowed,
            Refusal::OverQuota(_) => ErrorKind::QuotaExceeded,
            Refusal::ShuttingDown => ErrorKind::ShuttingDown,
            Refusal::Exec(error) => exec_error_kind(error),
            Refusal::ToolAnswer(refused) => match refused {
                AnswerRefused::NotFound(_) => ErrorKind::ExecutionNotFound,
                AnswerRefused::Ended(_) => ErrorKind::ExecutionEnded,
                AnswerRefused::Call(AnswerError::UnknownCall(_)) => ErrorKind::ToolCallNotFound,
                AnswerRefused::Call(AnswerError::AlreadyAnswered(_)) => ErrorKind::ToolCallAnswered,
                AnswerRefused::Call(AnswerError::Ended) => ErrorKind::ExecutionEnded,
                AnswerRefused::Call(AnswerError::TooLarge { .. }) => ErrorKind::PayloadTooLarge,
            },
            Refusal::Package(refused) => match refused {
                crate::packages::Refusal::Invalid(_) => ErrorKind::InvalidRequest,
                crate::packages::Refusal::Index(_) => ErrorKind::PackageIndexUnavailable,
                _ => ErrorKind::PackageRefused,
            },
        }
    }

    /// The reason an install's audit line and count give for it.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Package(refused) => refused.reason(),
            other => other.kind().as_str(),
        }
    }
}

/// The API's error kind of an error of the executor.
fn exec_error_kind(error: &ExecError) -> ErrorKind {
    match error {
        ExecError::Overloaded { .. } => ErrorKind::Overloaded,
        ExecError::NoSandboxAvailable { .. } => ErrorKind::NoSandboxAvailable,
        ExecError::LanguageNotServed(_) | ExecError::EnvRefused(_) | ExecError::NotParkable(_) => {
            ErrorKind::InvalidRequest
        }
        ExecError::SessionNotFound(_) => ErrorKind::SessionNotFound,
        ExecError::SessionLost { .. } => ErrorKind::SessionLost,
        ExecError::CheckpointNotFound { .. } => ErrorKind::CheckpointNotFound,
        ExecError::TooManySessions { .. } | ExecError::SessionMemoryFull { .. } => {
            ErrorKind::TooManySessions
        }
        ExecError::SessionQuota { .. } => ErrorKind::QuotaExceeded,
        ExecError::SessionBusy { .. } | ExecError::SessionSaving { .. } => ErrorKind::SessionBusy,
        ExecError::FilesOverCap(_) => ErrorKind::PayloadTooLarge,
        ExecError::FileRefused(refused) => match refused.error {
            FileError::NotFound => ErrorKind::NotFound,
            FileError::TooManyFiles | FileError::TooLarge => ErrorKind::PayloadTooLarge,
            FileError::NotDirectory
            | FileError::IsDirectory
            | FileError::Exists
            | FileError::NotEmpty
            | FileError::Escapes
            | FileError::BadName
            | FileError::NoLinks => ErrorKind::InvalidRequest,
        },
        ExecError::PoolGone(_) | ExecError::Internal(_) | ExecError::ParkFailed(_) => {
            ErrorKind::Internal
        }
    }
}

/// The service in front of an executor.
#[derive(Debug)]
pub struct Service<E> {
    executor: Arc<E>,
    metrics: Metrics,
    limits: Limits,
    versions: BTreeMap<String, String>,
    /// Set once the daemon stops: new work is refused.
    draining: AtomicBool,
    callers: Callers,
    /// What every program is checked against before it runs (`--policy`).
    code_policy: CodePolicy,
    /// Running executions that declared tools, where their calls' answers go.
    executions: Arc<Executions>,
    /// What programs may reach over HTTP; None: nothing.
    egress: Option<Arc<Egress>>,
    /// Where Python programs' packages come from; None: nothing is installed.
    packages: Option<Arc<Packages>>,
    /// Each session's turn to install.
    installing: packages::Installing,
    /// The next request's id, whichever front end it came through.
    next_call_id: AtomicU64,
}

impl<E: Executor> Service<E> {
    /// A service in front of `executor`, open to anyone who can connect, checking no code
    /// policy. `versions` is what health reports.
    pub fn new(
        executor: Arc<E>,
        metrics: Metrics,
        limits: Limits,
        versions: BTreeMap<String, String>,
    ) -> Self {
        Service {
            executor,
            metrics,
            limits,
            versions,
            draining: AtomicBool::new(false),
            callers: Callers::open(),
            code_policy: CodePolicy::default(),
            executions: Arc::default(),
            egress: None,
            packages: None,
            installing: packages::Installing::default(),
            next_call_id: AtomicU64::new(1),
        }
    }

    /// The same service, with `callers`' allow lists, quota and audit log.
    pub fn with_callers(mut self, callers: Callers) -> Self {
        self.callers = callers;
        self
    }

    /// The same service, checking every program against `policy` (narrowed by each request's
    /// own).
    pub fn with_code_policy(mut self, policy: CodePolicy) -> Self {
        self.code_policy = policy;
        self
    }

    /// Lets programs reach what `egress` allows over HTTP.
    pub fn with_egress(mut self, egress: Option<Arc<Egress>>) -> Self {
        self.egress = egress;
        self
    }

    /// Lets Python programs install what `packages` allows.
    pub fn with_packages(mut self, packages: Option<Arc<Packages>>) -> Self {
        self.packages = packages;
        self
    }

    /// A new request's id: unique across the daemon's front ends, for logs and audit lines.
    pub fn next_call_id(&self) -> u64 {
        self.next_call_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The daemon's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The limits requests are granted.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// From now on, refuse new work ([`Refusal::ShuttingDown`]); health says the daemon is
    /// stopping and not ready.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Whether the daemon still takes new work: [`Refusal::ShuttingDown`] once it drains. Every
    /// operation that takes work checks it; a front end may check it before reading a request's
    /// body, so that a draining daemon answers the same whatever the body.
    pub fn taking_work(&self) -> Result<(), Refusal> {
        match self.draining.load(Ordering::Relaxed) {
            true => Err(Refusal::ShuttingDown),
            false => Ok(()),
        }
    }

    /// Lets `call`'s caller in if the allow lists do, and if it acts for another only when it
    /// is a delegate; a refusal is audited, with what the caller asked for (`method` and
    /// `path`, in the front end's words).
    pub fn admit(&self, call: &Call, method: &str, path: &str) -> Result<(), Refusal> {
        let access = &self.callers.access;
        let refusal = match &call.caller.pod {
            _ if !access.allows(&call.caller) => Refusal::CallerNotAllowed {
                uid: call.caller.uid,
                gid: call.caller.gid,
            },
            _ if call.caller.on_behalf_of.is_some() && !access.is_delegate(call.caller.uid) => {
                Refusal::NotADelegate {
                    uid: call.caller.uid,
                }
            }
            PodOf::Unknown(why) => Refusal::CallerUnplaced {
                uid: call.caller.uid,
                why: why.to_string(),
            },
            _ => return Ok(()),
        };
        self.callers.audit.denied(&DeniedRecord {
            request_id: call.id,
            caller: call.caller.clone(),
            method,
            path,
            peer: None,
        });
        Err(refusal)
    }

    /// Counts and audits a request refused before it had a caller: E2B's listener, asked
    /// without a key it knows. `listener` is whom the listener serves as, `peer` whence the
    /// request came.
    pub fn refuse_unknown_key(&self, listener: &Caller, method: &str, path: &str, peer: String) {
        self.rejected(ErrorKind::CallerNotAllowed);
        self.callers.audit.denied(&DeniedRecord {
            request_id: self.next_call_id(),
            caller: listener.clone(),
            method,
            path,
            peer: Some(peer),
        });
    }

    /// Counts a request answered with an error of `kind`, whoever refused it.
    pub fn rejected(&self, kind: ErrorKind) {
        self.metrics.record_rejection(kind.as_str());
    }

    /// The daemon's health, as every probe sees it.
    pub fn health(&self) -> Health {
        Health {
            executor: self.executor.health(),
            draining: self.draining.load(Ordering::Relaxed),
            limits: self.limits,
            versions: self.versions.clone(),
            max_execs_per_caller: self.callers.quota.limits().clone(),
            allow_list: self.callers.access.is_restricted(),
            audit: self.callers.audit.health(),
            egress: self.egress.as_ref().map(|e| e.health()),
            packages: self.packages.as_ref().map(|p| p.health()),
        }
    }

    /// Every metric in the Prometheus text format, the gauges read now.
    pub fn metrics_text(&self) -> Result<String, prometheus::Error> {
        let health = self.executor.health();
        self.metrics.render(&health.sandboxes, &health.sessions)
    }
}

/// The daemon's health: the executor's, and what the service knows.
#[derive(Debug, Clone)]
pub struct Health {
    /// The pools and sessions.
    pub executor: ExecutorHealth,
    /// Whether the daemon is stopping.
    pub draining: bool,
    /// The limits requests are granted.
    pub limits: Limits,
    /// The Hyperlight versions and the daemon's.
    pub versions: BTreeMap<String, String>,
    /// The most executions one caller may have in flight, per language (none: no cap).
    pub max_execs_per_caller: BTreeMap<Language, usize>,
    /// Whether only listed callers may call.
    pub allow_list: bool,
    /// The audit log's state, when there is one.
    pub audit: Option<AuditHealth>,
    /// What programs may reach over HTTP, when anything.
    pub egress: Option<EgressHealth>,
    /// What Python programs may install, when anything.
    pub packages: Option<PackagesHealth>,
}

impl Health {
    /// Liveness: false when a worker is stuck in the hypervisor; only a restart frees it.
    pub fn live(&self) -> bool {
        self.executor.stuck_workers == 0
    }

    /// Readiness: every pool at its size, and not stopping.
    pub fn ready(&self) -> bool {
        self.at_size() && !self.draining
    }

    fn at_size(&self) -> bool {
        self.executor
            .sandboxes
            .values()
            .all(|counts| counts.total >= counts.target)
    }

    /// One word for the whole: `stopping`, `stuck`, `ok`, `degraded` (a pool below its size
    /// after warming) or `starting`.
    pub fn status(&self) -> &'static str {
        if self.draining {
            "stopping"
        } else if !self.live() {
            "stuck"
        } else if self.at_size() {
            "ok"
        } else if self.executor.warmed {
            "degraded"
        } else {
            "starting"
        }
    }
}

#[cfg(test)]
mod tests;
