//! hyperlightd: runs untrusted code in pre-warmed Hyperlight micro-VMs and serves it over HTTP
//! on a Unix socket.
//!
//! A request flows `server` (accept, HTTP/1.1) → `http` (route, parse, map errors) →
//! `executor::Executor` (the transport-free boundary) → `sandbox` (pools of warm guests per
//! language, one worker thread per sandbox). `sys` holds the platform specifics, `metrics` the
//! Prometheus registry, `config` the command line. See docs/ARCHITECTURE.md.

// The Python guest's generated bindings (sandbox::python) name `::alloc`.
extern crate alloc;

pub mod config;
pub mod executor;
pub mod http;
pub mod metrics;
pub mod sandbox;
pub mod server;
pub mod sys;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info;

use crate::config::{Config, ConfigError};
use crate::http::Api;
use crate::metrics::Metrics;
use crate::sandbox::guest::GuestSizes;
use crate::sandbox::{HyperlightExecutor, SandboxSettings};
use crate::sys::hypervisor::{self, HypervisorError};
use crate::sys::socket::{self, SocketError};

/// Why the daemon could not start (or stopped abnormally). Each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The host's hypervisor cannot be used.
    #[error(transparent)]
    Hypervisor(#[from] HypervisorError),
    /// The socket could not be set up.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// Building the first sandbox did not finish in time.
    #[error(
        "building the first sandbox did not finish within {} s; the hypervisor may be stuck \
         (raise --startup-timeout-ms if this host is merely slow)",
        .0.as_secs()
    )]
    ProbeTimedOut(Duration),
    /// Anything else that stops startup.
    #[error("{0}")]
    Other(String),
}

impl StartError {
    /// Exit code, after sysexits(3): 64 bad configuration, 69 hypervisor unavailable,
    /// 73 socket cannot be created, 75 socket in use by a live daemon, 70 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Config(_) => 64,
            StartError::Hypervisor(_) | StartError::ProbeTimedOut(_) => 69,
            StartError::Socket(SocketError::InUse(_)) => 75,
            StartError::Socket(_) => 73,
            StartError::Other(_) => 70,
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

/// Runs the daemon until `shutdown` completes: checks the hypervisor, binds the socket, builds
/// one sandbox per language (the probe that guests really run), serves while the pools warm to
/// their size, then drains.
pub async fn run(
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), StartError> {
    let sizes = config.pool_sizes()?;
    let limits = config.limits()?;
    let metrics = Metrics::new().map_err(|e| StartError::Other(format!("metrics: {e}")))?;
    let hypervisor = hypervisor::detect()?;
    info!(%hypervisor, "hypervisor found");
    // Before any sandbox memory exists (see sys::memory for why).
    if let Err(e) = sys::memory::disable_transparent_huge_pages() {
        tracing::warn!(
            "cannot turn transparent huge pages off ({e}); every request may clear whole 2 MiB pages"
        );
    }

    // Bound before the pools warm, so that a second daemon on the same socket is refused at
    // once; connections wait in the backlog until the pools are warm and serving starts.
    let (listener, bound) = socket::bind(&config.socket, config.socket_group.as_deref())?;

    let sizes_with_heap = |heap_mib: u64| GuestSizes {
        heap_bytes: heap_mib * 1024 * 1024,
        max_body_bytes: limits.max_body_bytes,
        max_result_bytes: limits.max_result_bytes,
    };
    let settings = SandboxSettings {
        sizes: sizes_with_heap(config.guest_heap_mib),
        python_sizes: sizes_with_heap(config.python_heap_mib),
        python_component: config.python_guest.clone(),
        queue_depth: config.queue_depth,
    };
    let started = Instant::now();
    let runtime = tokio::runtime::Handle::current();
    let hv = hypervisor.clone();
    let pool_metrics = metrics.clone();
    let probe = tokio::task::spawn_blocking(move || {
        // This thread builds the first sandboxes: keep SIGTERM and the like off it (see
        // sys::signals). It stays in tokio's blocking pool with the mask, which is harmless.
        if let Err(e) = sys::signals::block_process_signals_on_this_thread() {
            tracing::warn!("cannot block signals on the startup thread: {e}");
        }
        HyperlightExecutor::start(hv.to_string(), &sizes, settings, runtime, &pool_metrics)
    });
    // A hypervisor that hangs instead of failing must not leave the daemon silently bound but
    // never serving. The blocked thread cannot be cancelled; the process exits instead.
    let probe_limit = Duration::from_millis(config.startup_timeout_ms);
    let executor = tokio::time::timeout(probe_limit, probe)
        .await
        .map_err(|_| StartError::ProbeTimedOut(probe_limit))?
        .map_err(|e| StartError::Other(format!("starting the pools: {e}")))?
        .map_err(|e| hypervisor::probe_failed(hypervisor, &e))?;
    info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        socket = %bound.path().display(),
        "guests run; serving while the pools warm"
    );

    let api = Arc::new(Api::new(Arc::new(executor), metrics, limits, versions()));
    server::serve(
        listener,
        api,
        shutdown,
        Duration::from_millis(config.drain_timeout_ms),
    )
    .await;
    drop(bound);
    info!("stopped");
    Ok(())
}
