//! The Hyperlight executor: a pool of warm micro-VMs per language, behind the [`Executor`] trait.
//!
//! - [`guest`]: what a language's guest provides, the runner protocol, output capture;
//! - [`javascript`]: the QuickJS guest from hyperlight-js;
//! - [`python`]: CPython as a WebAssembly component, run by hyperlight-wasm;
//! - [`pool`]: worker threads, the bounded queue, time limits, restore after each request;
//! - [`stored`]: templates saved on disk, so that a daemon starts without building them;
//! - [`watchdog`]: the timers that interrupt a guest at its limit.

pub mod guest;
pub mod javascript;
pub mod pool;
pub mod python;
pub mod stored;
pub mod watchdog;
pub mod workspace;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::guest::{GuestFactory, GuestSizes};
use self::javascript::JavascriptFactory;
use self::pool::{Pool, PoolConfig, PoolError, Scope};
use self::python::PythonFactory;
use self::stored::SnapshotStore;
use self::watchdog::Watchdog;
use crate::audit::AuditLog;
use crate::executor::Executor;
use crate::job::{ExecError, ExecutorHealth, Job, Language, Outcome, Resume};
use crate::metrics::Metrics;
use crate::session::{SessionSettings, Sessions};

/// How often expired sessions are looked for.
const REAP_PERIOD: Duration = Duration::from_secs(1);

/// Settings of the pools.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// What each JavaScript guest is built with.
    pub sizes: GuestSizes,
    /// What each Python guest is built with (a larger heap: the interpreter's own memory, the
    /// WebAssembly runtime and the program's objects all live in it).
    pub python_sizes: GuestSizes,
    /// The compiled Python guest component.
    pub python_component: PathBuf,
    /// The Python guest's library, shared by every Python sandbox (None without a Python pool).
    pub python_library: Option<Arc<python::Library>>,
    /// The file the Python library was read from.
    pub python_library_file: Option<PathBuf>,
    /// Host handles a Python program may take in one run.
    pub python_max_host_handles: u64,
    /// Where templates are saved and loaded from (`--snapshot-dir`).
    pub snapshots: Option<Arc<SnapshotStore>>,
    /// Jobs that may wait per language.
    pub queue_depth: usize,
    /// How long building one sandbox may take before its worker counts as stuck.
    pub build_limit: Duration,
    /// The limits of sessions.
    pub sessions: SessionSettings,
    /// Where session expiries are recorded.
    pub audit: Arc<AuditLog>,
}

impl SandboxSettings {
    /// What `language`'s guests are built with.
    fn sizes(&self, language: Language) -> GuestSizes {
        match language {
            Language::Javascript => self.sizes,
            Language::Python => self.python_sizes,
        }
    }

    /// The factory for `language`'s sandboxes.
    fn factory(&self, language: Language, watchdog: &Watchdog) -> Arc<dyn GuestFactory> {
        match language {
            Language::Javascript => {
                Arc::new(JavascriptFactory::new(self.sizes, self.snapshots.clone()))
            }
            Language::Python => {
                let factory = PythonFactory::new(
                    self.python_sizes,
                    self.python_component.clone(),
                    self.python_library.clone(),
                    self.python_max_host_handles,
                    watchdog.clone(),
                );
                Arc::new(match &self.snapshots {
                    Some(store) => {
                        factory.with_store(store.clone(), self.python_library_file.clone())
                    }
                    None => factory,
                })
            }
        }
    }
}

/// A language's pool could not start.
#[derive(Debug, thiserror::Error)]
#[error("starting the {language} pool: {error}")]
pub struct StartError {
    /// The pool's language.
    pub language: Language,
    /// What failed.
    pub error: PoolError,
}

/// Runs jobs in warm Hyperlight sandboxes.
#[derive(Debug)]
pub struct HyperlightExecutor {
    hypervisor: String,
    pools: BTreeMap<Language, Arc<Pool>>,
    sessions: Arc<Sessions>,
    /// What health reports of each guest's packages (read once, at start).
    packages: BTreeMap<Language, BTreeMap<String, String>>,
    /// Each pool's guest heap, in MiB.
    memory_mib: BTreeMap<Language, u64>,
}

impl HyperlightExecutor {
    /// Starts every pool and returns once each has one warm sandbox; the rest warm in the
    /// background. `hypervisor` is what health reports. A language whose first sandbox cannot
    /// be built fails the start with its error.
    pub fn start(
        hypervisor: String,
        sizes: &BTreeMap<Language, usize>,
        settings: SandboxSettings,
        runtime: tokio::runtime::Handle,
        metrics: &Metrics,
    ) -> Result<Self, StartError> {
        let watchdog = Watchdog::new(runtime.clone());
        let mut pools = BTreeMap::new();
        let mut memory_mib = BTreeMap::new();
        for (&language, &size) in sizes {
            memory_mib.insert(language, settings.sizes(language).heap_bytes >> 20);
            let config = PoolConfig {
                language,
                size,
                queue_depth: settings.queue_depth,
                heap_bytes: settings.sizes(language).heap_bytes,
                build_limit: settings.build_limit,
                factory: settings.factory(language, &watchdog),
            };
            let pool = Pool::start(config, watchdog.clone(), metrics.pool(language))
                .map_err(|error| StartError { language, error })?;
            pools.insert(language, Arc::new(pool));
        }
        let languages: Vec<Language> = pools.keys().copied().collect();
        let sessions = Arc::new(Sessions::new(
            settings.sessions,
            &languages,
            metrics.sessions(),
            settings.audit.clone(),
        ));
        sessions.reap_every(REAP_PERIOD, &runtime);
        let packages = settings
            .python_library
            .as_ref()
            .map(|library| library.packages())
            .filter(|packages| !packages.is_empty())
            .map(|packages| (Language::Python, packages))
            .into_iter()
            .collect();
        Ok(HyperlightExecutor {
            hypervisor,
            pools,
            sessions,
            packages,
            memory_mib,
        })
    }
}

impl Executor for HyperlightExecutor {
    async fn exec(&self, mut job: Job) -> Result<Outcome, ExecError> {
        let pool = self
            .pools
            .get(&job.language)
            .ok_or(ExecError::LanguageNotServed(job.language))?
            .clone();
        let Some(id) = job.session.take() else {
            return Ok(pool.submit(job, Scope::Fresh).await?.outcome);
        };
        let (deadline, timeout, owner) = (job.deadline, job.timeout, job.caller.uid);
        let run = move |resume: Option<Resume>, deadline: Instant| async move {
            let mut job = job;
            // Waiting for the session's earlier state to be saved is not the program's time.
            job.deadline = deadline;
            let state = resume.map(|resume| {
                job.files = workspace::overlay(&resume.files, &job.files);
                resume.state
            });
            let limits = job.file_limits;
            workspace::check_fits(&job.files, limits).map_err(|cap| {
                ExecError::FilesOverCap(format!("at most {}", workspace::cap_in_words(cap, limits)))
            })?;
            pool.submit(job, Scope::Session(state)).await
        };
        self.sessions.exec(owner, &id, deadline, timeout, run).await
    }

    fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
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
            packages: self.packages.clone(),
            memory_mib: self.memory_mib.clone(),
            sessions: self.sessions.counts(),
        }
    }
}
