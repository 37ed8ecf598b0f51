//! A stub executor for the unit tests of the layers above the boundary (the service, the HTTP
//! API): it answers every job from a closure and keeps its sessions in a real table.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Executor;
use crate::job::{
    After, ExecError, ExecutorHealth, Job, Language, Outcome, Principal, Ran, Runtime, SavedState,
    SessionSettings,
};
use crate::metrics::Metrics;
use crate::session::{Runner, Session, Sessions};

type Answer = Box<dyn Fn(&Job) -> Result<Outcome, ExecError> + Send + Sync>;

/// Answers every job from a closure and remembers the jobs it saw.
pub struct StubExecutor {
    answers: Arc<Answers>,
    pub sessions: Arc<Sessions>,
}

/// The closure the stub answers from, and the jobs it saw (language, code, time left).
struct Answers {
    answer: Answer,
    seen: Mutex<Vec<(Language, String, Duration)>>,
}

impl std::fmt::Debug for StubExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StubExecutor").finish_non_exhaustive()
    }
}

impl StubExecutor {
    pub fn new(
        answer: impl Fn(&Job) -> Result<Outcome, ExecError> + Send + Sync + 'static,
    ) -> Self {
        StubExecutor {
            answers: Arc::new(Answers {
                answer: Box::new(answer),
                seen: Mutex::new(Vec::new()),
            }),
            sessions: stub_sessions(3),
        }
    }

    /// The same, with room for `n` sessions per caller (3 in all).
    pub fn with_session_quota(mut self, n: usize) -> Self {
        self.sessions = stub_sessions(n);
        self
    }
}

/// A real session table for 3 sessions, `per_caller` of them per caller.
pub fn stub_sessions(per_caller: usize) -> Arc<Sessions> {
    let settings = SessionSettings {
        max_sessions: 3,
        max_per_caller: per_caller,
        exempt_uid: None,
        default_idle: Duration::from_secs(60),
        max_idle: Duration::from_secs(600),
        max_lifetime: Duration::from_secs(3600),
        memory_budget: 1 << 30,
        max_checkpoints: 4,
        max_checkpoint_bytes: u64::MAX,
        park_after: None,
    };
    let languages = [Language::Javascript, Language::Python];
    let audit = Arc::new(crate::audit::AuditLog::off());
    let metrics = Metrics::new().unwrap().sessions();
    Arc::new(Sessions::new(settings, &languages, metrics, audit))
}

impl StubExecutor {
    /// The jobs it saw: language, code, and the time they had left.
    pub fn seen(&self) -> std::sync::MutexGuard<'_, Vec<(Language, String, Duration)>> {
        self.answers.seen.lock().unwrap()
    }
}

impl Answers {
    fn answer(&self, job: &Job) -> Result<Outcome, ExecError> {
        let left = job.deadline.saturating_duration_since(Instant::now());
        self.seen
            .lock()
            .unwrap()
            .push((job.language, job.code.clone(), left));
        (self.answer)(job)
    }
}

/// A session's job is answered from the closure too, and changes nothing of its state.
impl Runner for Answers {
    async fn run(&self, job: Job, _state: Option<SavedState>) -> Result<Ran, ExecError> {
        self.answer(&job).map(|outcome| Ran {
            outcome,
            after: After::Unchanged,
        })
    }
}

/// The stub keeps its sessions in a real table, so that the session endpoints are tested
/// against the table's own rules; its execs answer from the closure.
impl Executor for StubExecutor {
    type Session = Arc<Session>;

    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        self.answers.answer(&job)
    }

    fn session_table(&self) -> Option<&Arc<Sessions>> {
        Some(&self.sessions)
    }

    fn find_session(
        &self,
        owner: &Principal,
        id: &str,
    ) -> Result<(Arc<Session>, Language), ExecError> {
        let session = self.sessions.find(owner, id)?;
        let language = session.language();
        Ok((session, language))
    }

    async fn exec_in_session(&self, session: Arc<Session>, job: Job) -> Result<Outcome, ExecError> {
        self.sessions.exec(session, job, self.answers.clone()).await
    }

    fn health(&self) -> ExecutorHealth {
        ExecutorHealth {
            hypervisor: "stub".into(),
            warmed: true,
            stuck_workers: 0,
            runtimes: BTreeMap::from([
                (
                    Language::Python,
                    Runtime {
                        name: "native",
                        version: Some("3.11.2".to_owned()),
                        packages: BTreeMap::from([("sympy".to_owned(), "1.14.0".to_owned())]),
                    },
                ),
                (
                    Language::Javascript,
                    Runtime {
                        name: "quickjs",
                        ..Runtime::default()
                    },
                ),
            ]),
            sandboxes: BTreeMap::from([(
                Language::Javascript,
                crate::job::PoolCounts {
                    ready: 2,
                    total: 2,
                    target: 2,
                },
            )]),
            memory_mib: BTreeMap::from([(Language::Javascript, 64)]),
            sessions: self.sessions.counts(),
            session_limits: *self.sessions.settings(),
            durable: self.sessions.durable_health(),
        }
    }
}

pub fn ok_outcome(stdout: &str, result: serde_json::Value) -> Outcome {
    Outcome {
        status: crate::job::Status::Ok,
        stdout: stdout.into(),
        stderr: String::new(),
        truncated: false,
        result,
        display: Vec::new(),
        error: None,
        session: None,
        files: Default::default(),
        started: std::time::Instant::now(),
        ran: Duration::from_millis(3),
    }
}
