//! The Hyperlight executor: the sandbox pools (one per language) and the session table, composed.
//!
//! A plain exec goes to its language's pool. A session exec waits for the session's turn, is
//! given the state and files the session's last exec left, runs in whichever sandbox of the
//! pool is free, and hands the worker's answer back to the turn, which keeps what it says to
//! keep. The pool knows nothing of sessions (it runs a job from a saved state, and saves the
//! state it leaves), and the session table nothing of pools.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::Executor;
use crate::audit::AuditLog;
use crate::job::{
    ExecError, ExecutorHealth, Job, Language, Outcome, Principal, Ran, SavedState, SessionSettings,
};
use crate::metrics::Metrics;
use crate::sandbox::pool::{Pool, Scope};
use crate::sandbox::{self, SandboxSettings, StartError};
use crate::session::{Durable, Runner, Session, Sessions, durable};

/// How often expired sessions are looked for.
const REAP_PERIOD: Duration = Duration::from_secs(1);

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorStartError {
    /// A pool could not start.
    #[error(transparent)]
    Pool(#[from] StartError),
    /// The state directory could not be created or read.
    #[error("the state directory {}: {error}", dir.display())]
    StateDir {
        dir: std::path::PathBuf,
        error: std::io::Error,
    },
}

/// Runs jobs in warm Hyperlight sandboxes, fresh or in sessions.
#[derive(Debug)]
pub struct HyperlightExecutor {
    hypervisor: String,
    pools: BTreeMap<Language, Arc<Pool>>,
    sessions: Arc<Sessions>,
    /// Each pool's guest heap, in MiB.
    memory_mib: BTreeMap<Language, u64>,
}

impl HyperlightExecutor {
    /// Starts every pool (see [`sandbox::start_pools`]) and the session table, whose expiries
    /// go to `audit`, kept in `state_dir` when one is given (the sessions already there are
    /// read back). `hypervisor` is what health reports.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        hypervisor: String,
        sizes: &BTreeMap<Language, usize>,
        settings: SandboxSettings,
        sessions: SessionSettings,
        (audit, state_dir): (Arc<AuditLog>, Option<&Path>),
        runtime: tokio::runtime::Handle,
        metrics: &Metrics,
    ) -> Result<Self, ExecutorStartError> {
        let pools = sandbox::start_pools(sizes, &settings, runtime.clone(), metrics)?;
        let languages: Vec<Language> = pools.keys().copied().collect();
        let mut table = Sessions::new(sessions, &languages, metrics.sessions(), audit);
        if let Some(dir) = state_dir {
            // Asked to keep sessions on disk, the daemon does not start with a language whose
            // sessions it could not write or read back: they would vanish at the next restart.
            let codecs = pools
                .iter()
                .map(|(&language, pool)| {
                    let codec = pool
                        .state_codec()
                        .map_err(|why| ExecutorStartError::StateDir {
                            dir: dir.to_owned(),
                            error: std::io::Error::other(format!(
                                "{language} sessions cannot be kept there: {why}"
                            )),
                        })?;
                    Ok((language, codec))
                })
                .collect::<Result<_, ExecutorStartError>>()?;
            let park_after = sessions.park_after.unwrap_or(Duration::MAX);
            // A session's first checkpoint shares its template's memory: linked from the saved
            // template, when there is one, rather than written again.
            let templates = settings.snapshots.clone().map(|store| {
                Box::new(move |sha256: &str| store.find_blob(sha256)) as durable::blobs::Elsewhere
            });
            let durable = Durable::open(
                dir,
                codecs,
                metrics.sessions().durable,
                park_after,
                templates,
            )
            .map_err(|error| ExecutorStartError::StateDir {
                dir: dir.to_owned(),
                error,
            })?;
            table = table.with_durable(durable);
        }
        for (&language, pool) in &pools {
            table.template_memory(language, pool.template_memory());
        }
        let sessions = Arc::new(table);
        sessions.recover();
        sessions.reap_every(REAP_PERIOD, &runtime);
        Ok(HyperlightExecutor {
            hypervisor,
            memory_mib: languages
                .iter()
                .map(|&language| (language, settings.memory_mib(language)))
                .collect(),
            pools,
            sessions,
        })
    }

    fn pool(&self, language: Language) -> Result<Arc<Pool>, ExecError> {
        self.pools
            .get(&language)
            .cloned()
            .ok_or(ExecError::LanguageNotServed(language))
    }
}

impl Executor for HyperlightExecutor {
    type Session = Arc<Session>;

    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        let pool = self.pool(job.language)?;
        Ok(pool.submit(job, Scope::Fresh).await?.outcome)
    }

    fn health(&self) -> ExecutorHealth {
        ExecutorHealth {
            hypervisor: self.hypervisor.clone(),
            sandboxes: self
                .pools
                .iter()
                .map(|(&language, pool)| (language, pool.counts()))
                .collect(),
            warmed: self.pools.values().all(|pool| pool.warmed()),
            stuck_workers: self.pools.values().map(|pool| pool.stuck_workers()).sum(),
            runtimes: self
                .pools
                .iter()
                .map(|(&language, pool)| (language, pool.runtime().clone()))
                .collect(),
            memory_mib: self.memory_mib.clone(),
            sessions: self.sessions.counts(),
            session_limits: *self.sessions.settings(),
            durable: self.sessions.durable_health(),
        }
    }

    fn runtime(&self, language: Language) -> Option<crate::job::Runtime> {
        self.pools.get(&language).map(|pool| pool.runtime().clone())
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
        let pool = self.pool(job.language)?;
        self.sessions
            .exec(session, job, Arc::new(PoolRunner(pool)))
            .await
    }
}

/// A language's pool runs its sessions' jobs: a worker loads the state, runs the program,
/// answers, and saves what it left.
struct PoolRunner(Arc<Pool>);

impl Runner for PoolRunner {
    async fn run(&self, job: Job, state: Option<SavedState>) -> Result<Ran, ExecError> {
        self.0.submit(job, Scope::Session(state)).await
    }
}
