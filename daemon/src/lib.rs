//! hyperlightd: runs untrusted code in pre-warmed Hyperlight micro-VMs and serves it over HTTP
//! on a Unix socket.
//!
//! A request flows `server` (accept, HTTP/1.1) → `http` (route, parse, map errors) →
//! `executor::Executor` (the transport-free boundary) → `sandbox` (pools of warm guests per
//! language, one worker thread per sandbox). `caller` is who calls (peer credentials, allow
//! lists, quotas), `audit` the audit log, `session` the sessions. `sys` holds the platform
//! specifics, `metrics` the Prometheus registry, `telemetry` the spans sent over OTLP, `config`
//! the command line. See docs/ARCHITECTURE.md.
//!
//! # Design: startup and shutdown
//! `main.rs` parses the command line (clap; an error exits 64), sets up `tracing`, turns SIGTERM and
//! SIGINT into stop requests (`sys::signals::stop_requests`) before anything slow starts, and runs
//! `hyperlightd::run`: check the configuration (including the open-file limit, which
//! `sys/files.rs` raises to the hard limit) → detect the hypervisor (`sys/hypervisor.rs`:
//! `/dev/mshv` or `/dev/kvm`, the KVM module, open read-write) → bind the socket (`sys/socket.rs`:
//! bound in a private 0700 directory, given mode 0660 and its group there, renamed into place; a
//! stale file replaced, a live one refused, a directory others can write refused unless sticky) →
//! load the Python library (when a Python pool is configured) → start the pools one after another,
//! each making its template ready (loaded from `--snapshot-dir` when a fitting one is saved there,
//! otherwise built) and building its first sandbox from it, all within `--startup-timeout-ms` →
//! serve. A pool that fails or does not finish in time is judged by a probe sandbox of the built-in
//! JavaScript guest (`javascript::probe_hypervisor`, `lib.rs` `blame`): a probe that fails or
//! overruns the same limit makes it the hypervisor's failure (`probe_failed` explains it, naming
//! `kvm_pvm` where that is the reason, exit 69); a probe that runs leaves it the language's (the
//! message names the language and what failed, exit 70). The snapshot directory is created before the hypervisor is touched
//! (uncreatable: exit 73). Each step logs its `elapsed_ms`. A
//! stop request during startup ends it at once: the socket is removed, exit 0. Once serving, the
//! daemon tells the service manager READY (with a status line naming the socket and pools); on the
//! first stop request, STOPPING (`sys/notify.rs`; nothing without `NOTIFY_SOCKET`).
//!
//! On the first stop request the server drains: connections finish the request they are running
//! (each connection's task closes it after that request, or after a short grace between
//! requests: `server::DRAIN_GRACE`), up to `--drain-timeout-ms`; new connections are still
//! accepted and answered `503 shutting_down`; health says `stopping` and readiness is 503. A second
//! stop request ends the drain at once. Then the socket file is removed; exit 0. Startup errors
//! carry exit codes (`StartError::exit_code`).

// The Python guest's generated bindings (sandbox::python) name `::alloc`.
extern crate alloc;

/// The JavaScript runner the daemon's sandboxes load (for the benchmark's direct runs).
pub use self::sandbox::javascript::RUNNER as JAVASCRIPT_RUNNER;

pub mod audit;
pub mod caller;
pub mod config;
pub mod e2b;
pub mod egress;
pub mod executor;
pub mod http;
pub mod job;
pub mod metrics;
pub mod packages;
pub mod sandbox;
pub mod server;
pub mod service;
pub mod session;
pub mod sys;
pub mod telemetry;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlightd_api::Language;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::audit::{AuditLog, AuditOpenError};
use crate::caller::{ExecQuota, Identify};
use crate::config::{Config, ConfigError};
use crate::egress::Egress;
use crate::executor::{Executor, ExecutorStartError, HyperlightExecutor};
use crate::http::Api;
use crate::job::SessionSettings;
use crate::metrics::Metrics;
use crate::sandbox::SandboxSettings;
use crate::sandbox::guest::GuestSizes;
use crate::sandbox::stored::SnapshotStore;
use crate::server::{ServerConfig, StopRequest};
use crate::service::{Callers, Limits, Service};
use crate::sys::hypervisor::{self, Hypervisor, HypervisorError};
use crate::sys::socket::{self, SocketError};
use crate::telemetry::Tracer;
use crate::telemetry::export::Exporter;

/// Why the daemon could not start (or stopped abnormally). Each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The host's hypervisor cannot be used.
    #[error(transparent)]
    Hypervisor(#[from] HypervisorError),
    /// The hypervisor probe did not finish in time.
    #[error(
        "checking the hypervisor with a probe sandbox did not finish within {} s; the \
         hypervisor may be stuck (raise --startup-timeout-ms if this host is merely slow)",
        .0.as_secs_f64()
    )]
    ProbeTimedOut(Duration),
    /// The socket could not be set up.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// E2B's API could not be served as `--e2b-listen` and `--e2b-keys` ask.
    #[error(transparent)]
    E2b(#[from] e2b::E2bError),
    /// The audit log could not be opened.
    #[error(transparent)]
    Audit(#[from] AuditOpenError),
    /// The snapshot directory could not be created or read.
    #[error("the snapshot directory {}: {error}", dir.display())]
    SnapshotDir {
        dir: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The state directory could not be created or read.
    #[error("the state directory {}: {error}", dir.display())]
    StateDir {
        dir: std::path::PathBuf,
        error: std::io::Error,
    },
    /// A language's pool could not start (its guest, not the hypervisor, failed).
    #[error(transparent)]
    Pool(#[from] sandbox::StartError),
    /// The Python guest's library could not be loaded.
    #[error(transparent)]
    PythonLibrary(#[from] sandbox::python::LibraryError),
    /// Building the pools' first sandboxes did not finish in time.
    #[error(
        "building the first sandbox of each pool did not finish within {} s, although the \
         hypervisor runs guests (raise --startup-timeout-ms if this host is merely slow)",
        .0.as_secs_f64()
    )]
    PoolsTimedOut(Duration),
    /// The egress helper (`--egress-helper`) does not answer.
    #[error("{0} (is hyperlightd-egress.socket enabled?)")]
    EgressHelper(String),
    /// Anything else that stops startup.
    #[error("{0}")]
    Other(String),
}

impl StartError {
    /// Exit code, after sysexits(3): 64 bad configuration, 69 hypervisor or egress helper
    /// unavailable,
    /// 73 socket, audit log, snapshot or state directory cannot be created (or sessions
    /// cannot be kept in the state directory), 75 socket in use by a live daemon, 70 anything else
    /// (a pool that cannot start included).
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Config(_) => 64,
            StartError::Hypervisor(_)
            | StartError::ProbeTimedOut(_)
            | StartError::EgressHelper(_) => 69,
            StartError::Socket(SocketError::InUse(_)) => 75,
            StartError::E2b(
                e2b::E2bError::Keys(_)
                | e2b::E2bError::NoSocket
                | e2b::E2bError::TwoSockets
                | e2b::E2bError::NoKeys,
            ) => 64,
            StartError::E2b(e2b::E2bError::Listen { error, .. })
                if error.kind() == std::io::ErrorKind::AddrInUse =>
            {
                75
            }
            StartError::Socket(_)
            | StartError::E2b(_)
            | StartError::Audit(_)
            | StartError::SnapshotDir { .. }
            | StartError::StateDir { .. } => 73,
            StartError::Pool(_)
            | StartError::PythonLibrary(_)
            | StartError::PoolsTimedOut(_)
            | StartError::Other(_) => 70,
        }
    }
}

/// Versions reported by `/v1/health`.
fn versions() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "hyperlightd".to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
        // Kept in step with the workspace manifest, which pins every hyperlight crate.
        ("hyperlight-host".to_owned(), "0.17".to_owned()),
        ("hyperlight-js".to_owned(), "0.4".to_owned()),
        ("hyperlight-wasm".to_owned(), "0.15".to_owned()),
    ])
}

/// Runs the daemon until a stop request arrives on `stops` (see `sys::signals`): checks the
/// hypervisor, binds the socket, builds one sandbox per language (a probe sandbox says whose
/// fault a failure is), serves while the pools warm to their size, then drains. A stop request during startup ends
/// it at once, removing the socket.
pub async fn run(
    config: Config,
    passed: socket::Passed,
    mut stops: mpsc::Receiver<StopRequest>,
) -> Result<(), StartError> {
    let sizes = config.pool_sizes()?;
    let limits = config.limits()?;
    let (code_policy, policy_rules) = config.policy_file()?;
    let environment = |name: &str| std::env::var(name).ok();
    let egress_parts = config
        .egress
        .parts(policy_rules, &environment)
        .map_err(ConfigError::Egress)?;
    // The daemon's own user is its operator: always allowed, held to no per-caller quota.
    let own_uid = nix::unistd::geteuid().as_raw();
    let sessions = SessionSettings {
        exempt_uid: Some(own_uid),
        ..config.sessions()?
    };
    let sessions = fit_sessions_to_mappings(&config, sessions)?;
    let access = config.callers.access(own_uid).map_err(ConfigError::from)?;
    let identify = config.callers.identify().map_err(ConfigError::from)?;
    if identify.by_pod() {
        info!("callers are told apart by pod: quotas count per pod");
    }
    let exec_quota = config
        .callers
        .exec_quota(&sizes)
        .map_err(ConfigError::from)?;
    check_open_files(&config)?;
    let metrics = Metrics::new().map_err(|e| StartError::Other(format!("metrics: {e}")))?;
    let audit = Arc::new(AuditLog::open(&config.audit)?.with_metrics(metrics.audit()));
    let egress = egress_parts.map(|parts| {
        let runtime = tokio::runtime::Handle::current();
        Egress::new(parts, runtime, audit.clone(), Some(metrics.egress()))
    });
    if let Some(egress) = &egress {
        info!(rules = ?egress.health().rules, "programs may reach these destinations over HTTP");
    }
    let packages = config
        .packages
        .packages(|| config.egress.client(), Some(metrics.packages()))
        .map_err(ConfigError::Packages)?
        .map(Arc::new);
    if let Some(packages) = &packages {
        info!(indexes = ?packages.health().indexes, "Python programs may install packages");
    }
    let traces = start_traces(&config)?;
    if egress.is_some() || packages.is_some() || traces.is_some() {
        check_egress_helper(&config).await?;
    }
    let tracer = traces.as_ref().map(Exporter::tracer).unwrap_or_default();
    let snapshots = open_snapshot_store(&config)?;
    let hypervisor = hypervisor::detect()?;
    info!(%hypervisor, "hypervisor found");
    // Before any sandbox memory exists (see sys::memory for why).
    if let Err(e) = sys::memory::disable_transparent_huge_pages() {
        warn!(
            "cannot turn transparent huge pages off ({e}); every request may clear whole 2 MiB pages"
        );
    }

    // Bound before the pools warm, so that a second daemon on the same socket is refused at
    // once; connections wait in the backlog until the pools are warm and serving starts.
    let (listener, bound) = socket::bind(&config.socket, config.socket_group.as_deref())?;
    let e2b = config.e2b.bind(passed.tcp)?;
    let saves = snapshots.clone();
    let starting = start_executor(
        &config,
        &sizes,
        limits,
        sessions,
        hypervisor,
        &metrics,
        Stores {
            audit: audit.clone(),
            snapshots,
            tracer: tracer.clone(),
        },
    );
    let executor = tokio::select! {
        started = starting => started?,
        why = server::next_stop(&mut stops) => {
            info!("{why} during startup: stopping before serving");
            return Ok(());
        }
    };
    // The main thread polls the server from here on: narrowed to the runtime's filter before
    // the first request is served (see sys::seccomp).
    sys::seccomp::enter(sys::seccomp::Kind::Runtime)
        .map_err(|e| StartError::Other(e.to_string()))?;
    info!(socket = %bound.path().display(), "serving while the pools warm");
    if let Some(store) = saves {
        store.serving();
    }
    sys::notify::ready(&format!(
        "serving on {}; pools {}",
        bound.path().display(),
        pools_text(&sizes)
    ));
    let callers = Callers {
        access,
        quota: ExecQuota::new(exec_quota, Some(own_uid)),
        audit,
    };
    let sessions = executor.session_table().cloned();
    let service = Service::new(Arc::new(executor), metrics, limits, versions())
        .with_callers(callers)
        .with_code_policy(code_policy)
        .with_egress(egress)
        .with_packages(packages);
    let service = Arc::new(service);
    // Until the socket's server has drained: its requests then refused as the socket's are.
    let e2b = e2b.map(|e2b| tokio::spawn(e2b.serve(service.clone(), tracer.clone())));
    let api = Arc::new(Api::over(service).with_tracer(tracer));
    server::serve(listener, api, server_config(&config, identify), &mut stops).await;
    if let Some(e2b) = e2b {
        e2b.abort();
    }
    drop(bound);
    if let Some(sessions) = sessions {
        flush_sessions(sessions).await;
    }
    if let Some(traces) = traces {
        send_last_spans(traces).await;
    }
    info!("stopped");
    Ok(())
}

/// With `--egress-helper`, asks the helper whether it is there: a daemon whose requests could
/// not leave says so at its start, not at a program's first request.
async fn check_egress_helper(config: &Config) -> Result<(), StartError> {
    let Some(path) = config.egress.helper.clone() else {
        return Ok(());
    };
    let helper = egress::helper::Helper::new(path);
    let asked = tokio::task::spawn_blocking(move || helper.hello()).await;
    match asked {
        Ok(Ok(version)) => {
            info!(
                version,
                "the egress helper answers: requests leave through it"
            );
            Ok(())
        }
        Ok(Err(e)) => Err(StartError::EgressHelper(e.message)),
        Err(e) => Err(StartError::EgressHelper(e.to_string())),
    }
}

/// Starts sending traces when `--otlp-endpoint` or the `OTEL_*` variables ask for them.
fn start_traces(config: &Config) -> Result<Option<Exporter>, StartError> {
    let environment = |name: &str| std::env::var(name).ok();
    let Some(endpoint) =
        telemetry::export::endpoint(&config.traces, &environment).map_err(ConfigError::from)?
    else {
        return Ok(None);
    };
    let client = config.egress.client().map_err(ConfigError::Egress)?;
    let runtime = sys::seccomp::egress_runtime().unwrap_or_else(Handle::current);
    let timeout = telemetry::export::export_timeout(&environment);
    let collector = egress::collector::Collector::new(client, timeout, runtime);
    // The batch processor's thread inherits the filter of the thread that starts it: an egress
    // thread's, which may reach the network and not the hypervisor.
    let url = endpoint.url.clone();
    let started = sys::seccomp::spawn(
        sys::seccomp::Kind::Egress,
        "otlp-start".to_owned(),
        move || Exporter::start(&endpoint, collector),
    )
    .map_err(|e| StartError::Other(format!("starting the trace exporter: {e}")))?
    .join()
    .map_err(|_| StartError::Other("starting the trace exporter panicked".to_owned()))?;
    let exporter = started.map_err(ConfigError::from)?;
    info!(endpoint = %url, "sending traces over OTLP");
    Ok(Some(exporter))
}

/// How long a stopping daemon waits for its last spans to be sent.
const LAST_SPANS_LIMIT: Duration = Duration::from_secs(5);

/// Sends the spans not sent yet, within [`LAST_SPANS_LIMIT`].
async fn send_last_spans(traces: Exporter) {
    let sent = tokio::task::spawn_blocking(move || traces.shutdown(LAST_SPANS_LIMIT)).await;
    if let Ok(Err(e)) = sent {
        warn!("sending the last spans: {e}");
    }
}

/// How long a stopping daemon waits for the sessions' last states to be saved and written.
const FLUSH_LIMIT: Duration = Duration::from_secs(60);

/// Waits (at most [`FLUSH_LIMIT`]) until every session's last state is saved and, with a state
/// directory, on disk: a clean stop loses no answered exec.
async fn flush_sessions(sessions: Arc<session::Sessions>) {
    let started = Instant::now();
    let flushed = tokio::task::spawn_blocking(move || sessions.flush(FLUSH_LIMIT)).await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match flushed {
        Ok(true) => info!(elapsed_ms, "every session's state is saved"),
        _ => warn!(
            elapsed_ms,
            "some session states were still being saved or written when the daemon stopped: \
             those sessions come back at an older checkpoint, and say so"
        ),
    }
}

/// How the server treats its connections (the values were checked with the limits).
fn server_config(config: &Config, identify: Identify) -> ServerConfig {
    ServerConfig {
        max_connections: config.max_connections,
        max_header_bytes: config.max_header_bytes,
        idle_timeout: Duration::from_millis(config.idle_timeout_ms),
        drain: Duration::from_millis(config.drain_timeout_ms),
        identify,
    }
}

/// `javascript=2 python=1`.
fn pools_text(sizes: &BTreeMap<Language, usize>) -> String {
    let pools: Vec<String> = sizes.iter().map(|(l, n)| format!("{l}={n}")).collect();
    pools.join(" ")
}

/// Raises the open-file limit and checks that `--max-connections` fits in it.
fn check_open_files(config: &Config) -> Result<(), StartError> {
    let needed = config.files_needed();
    match sys::files::raise_open_file_limit() {
        Ok(limit) if limit < needed => Err(StartError::Config(ConfigError::TooFewFiles {
            connections: config.max_connections,
            needed,
            limit,
        })),
        Ok(_) => Ok(()),
        Err(e) => {
            warn!("cannot read or raise the open-file limit ({e}); connections may fail");
            Ok(())
        }
    }
}

/// Lowers `--max-sessions` to the sessions whose checkpoints fit in the kernel's cap on memory
/// mappings ([`Config::sessions_within_mappings`]), and says so.
fn fit_sessions_to_mappings(
    config: &Config,
    settings: SessionSettings,
) -> Result<SessionSettings, StartError> {
    let cap = match sys::maps::max_map_count() {
        Ok(cap) => cap,
        Err(e) => {
            warn!(
                "cannot read the kernel's cap on memory mappings ({e}); sessions are not held to it"
            );
            return Ok(settings);
        }
    };
    let (settings, lowered) = config.sessions_within_mappings(settings, cap)?;
    if let Some(config::Lowered {
        from,
        to,
        per_session,
    }) = lowered
    {
        warn!(
            from,
            to,
            per_session,
            vm_max_map_count = cap,
            "--max-sessions lowered to the sessions whose checkpoints fit in the kernel's cap on \
             memory mappings; raise the cap for more (sysctl -w vm.max_map_count=262144)"
        );
    }
    Ok(settings)
}

/// Loads the Python guest's library, once for every sandbox.
async fn load_python_library(
    path: std::path::PathBuf,
) -> Result<Arc<sandbox::python::Library>, StartError> {
    let started = Instant::now();
    let library = tokio::task::spawn_blocking(move || sandbox::python::Library::load(&path))
        .await
        .map_err(|e| StartError::Other(format!("loading the Python library: {e}")))??;
    let (files, bytes) = library.size();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    info!(
        files,
        bytes, elapsed_ms, "loaded the Python guest's library"
    );
    Ok(Arc::new(library))
}

/// Starts the pools, on a blocking thread and within `--startup-timeout-ms`. Building the
/// first sandbox is what shows that the hypervisor runs guests; only when a pool fails (or
/// does not finish in time) does a probe sandbox decide whom to blame: a probe that fails too
/// is the hypervisor's failure, one that runs leaves the failing language's guest to blame.
async fn start_executor(
    config: &Config,
    sizes: &BTreeMap<Language, usize>,
    limits: Limits,
    sessions: SessionSettings,
    hypervisor: Hypervisor,
    metrics: &Metrics,
    stores: Stores,
) -> Result<HyperlightExecutor, StartError> {
    let limit = Duration::from_millis(config.startup_timeout_ms);
    let started = Instant::now();
    let sizes_with_heap = |heap_mib: u64| GuestSizes {
        heap_bytes: heap_mib * 1024 * 1024,
        max_body_bytes: limits.max_body_bytes,
        max_result_bytes: limits.max_result_bytes,
    };
    let native = config.python_runtime == config::PythonRuntime::Native;
    let python_library = match sizes.contains_key(&Language::Python) && !native {
        true => Some(load_python_library(config.python_library()).await?),
        false => None,
    };
    let settings = SandboxSettings {
        sizes: sizes_with_heap(config.guest_heap_mib),
        python_sizes: sizes_with_heap(config.python_heap_mib),
        python_component: config.python_guest.clone(),
        python_library,
        python_library_file: Some(config.python_library()),
        python_max_host_handles: config.python_max_host_handles,
        python_rootfs: native.then(|| config.python_rootfs.clone()),
        native_python_sizes: sizes_with_heap(config.python_native_memory_mib),
        snapshots: stores.snapshots,
        queue_depth: config.queue_depth,
        build_limit: limit,
        priming: config.prime.priming(),
        tracer: stores.tracer,
    };
    let (runtime, sizes, metrics) = (Handle::current(), sizes.clone(), metrics.clone());
    let name = hypervisor.to_string();
    let (audit, state_dir) = (stores.audit, config.state_dir.clone());
    let starting = blocking_within(limit, move || {
        let stores = (audit, state_dir.as_deref());
        HyperlightExecutor::start(name, &sizes, settings, sessions, stores, runtime, &metrics)
    });
    let failed = match starting.await {
        Some(Ok(Ok(executor))) => {
            info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "every pool has a warm sandbox"
            );
            return Ok(executor);
        }
        Some(Ok(Err(ExecutorStartError::StateDir { dir, error }))) => {
            return Err(StartError::StateDir { dir, error });
        }
        Some(Ok(Err(ExecutorStartError::Pool(pool)))) => StartError::Pool(pool),
        Some(Err(thread)) => return Err(thread),
        None => StartError::PoolsTimedOut(limit),
    };
    Err(blame(hypervisor, limit, failed).await)
}

/// The error to report for a start that `failed`: the hypervisor's, when a probe sandbox (of
/// the daemon's own JavaScript guest, built in) fails or does not finish within `limit`;
/// otherwise `failed` itself.
async fn blame(hypervisor: Hypervisor, limit: Duration, failed: StartError) -> StartError {
    warn!("{failed}; checking the hypervisor with a probe sandbox");
    match blocking_within(limit, sandbox::javascript::probe_hypervisor).await {
        None => StartError::ProbeTimedOut(limit),
        Some(Err(thread)) => thread,
        Some(Ok(Err(probe))) => hypervisor::probe_failed(hypervisor, &probe).into(),
        Some(Ok(Ok(()))) => {
            info!("the hypervisor runs guests: the failure is the guest's");
            failed
        }
    }
}

/// Where the executor keeps what outlives a request: the audit log (session expiries), the
/// saved templates; and where the spans of its start go.
struct Stores {
    audit: Arc<AuditLog>,
    snapshots: Option<Arc<SnapshotStore>>,
    tracer: Tracer,
}

/// The store of `--snapshot-dir`, created if need be (None without the option).
fn open_snapshot_store(config: &Config) -> Result<Option<Arc<SnapshotStore>>, StartError> {
    let Some(dir) = &config.snapshot_dir else {
        return Ok(None);
    };
    let store = SnapshotStore::open(dir).map_err(|error| StartError::SnapshotDir {
        dir: dir.clone(),
        error,
    })?;
    Ok(Some(Arc::new(store)))
}

/// Runs `work` on a thread of its own that runs guests (its filter, and the process's signals
/// blocked there: it builds sandboxes; see sys::seccomp and sys::signals), and waits for it at
/// most `limit`: None past it. A hypervisor that hangs instead of failing must not leave the
/// daemon bound but never serving; the stuck thread cannot be cancelled, and the process exits
/// instead.
async fn blocking_within<T: Send + 'static>(
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<Result<T, StartError>> {
    let (done, outcome) = tokio::sync::oneshot::channel();
    let spawned = sys::seccomp::spawn(sys::seccomp::Kind::Guest, "startup".to_owned(), move || {
        if let Err(e) = sys::signals::block_process_signals_on_this_thread() {
            warn!("cannot block signals on the startup thread: {e}");
        }
        let _ = done.send(work());
    });
    if let Err(e) = spawned {
        return Some(Err(StartError::Other(format!(
            "cannot start a startup thread: {e}"
        ))));
    }
    let joined = tokio::time::timeout(limit, outcome).await.ok()?;
    Some(joined.map_err(|_| StartError::Other("a startup thread failed".to_owned())))
}
