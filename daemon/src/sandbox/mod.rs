//! Sandboxes: a pool of warm Hyperlight micro-VMs per language (the executor, above, runs jobs
//! and sessions on them).
//!
//! - [`guest`]: what a language's guest provides, the runner protocol, output capture;
//! - [`javascript`]: the QuickJS guest from hyperlight-js;
//! - [`python`]: CPython as a WebAssembly component, run by hyperlight-wasm;
//! - [`native_python`]: Debian's CPython with the scientific stack, run by hyperlight-unikraft;
//! - [`pool`]: worker threads, the bounded queue, time limits, restore after each request;
//! - [`stored`]: templates saved on disk, so that a daemon starts without building them;
//! - [`watchdog`]: the timers that interrupt a guest at its limit;
//! - [`workspace`]: a program's working directory, in the host's memory.

pub mod guest;
pub mod javascript;
pub mod native_python;
pub mod pool;
pub mod python;
pub mod run_host;
pub mod stored;
pub mod watchdog;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use self::guest::{GuestFactory, GuestSizes};
use self::javascript::JavascriptFactory;
use self::native_python::NativePythonFactory;
use self::pool::{Pool, PoolConfig, PoolError, Priming};
use self::python::PythonFactory;
use self::stored::SnapshotStore;
use self::watchdog::Watchdog;
use crate::job::Language;
use crate::metrics::Metrics;
use crate::telemetry::Tracer;

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
    /// The native Python guest's root filesystem, when it serves Python (else WebAssembly).
    pub python_rootfs: Option<PathBuf>,
    /// What each native Python guest is built with.
    pub native_python_sizes: GuestSizes,
    /// Where templates are saved and loaded from (`--snapshot-dir`).
    pub snapshots: Option<Arc<SnapshotStore>>,
    /// Jobs that may wait per language.
    pub queue_depth: usize,
    /// How long building one sandbox may take before its worker counts as stuck.
    pub build_limit: Duration,
    /// When workers prime their sandboxes after a restore; None: as each runtime does by
    /// default ([`GuestFactory::primes_when_idle`]).
    pub priming: Option<Priming>,
    /// Records the spans of each pool's start (its template made ready).
    pub tracer: Tracer,
}

impl SandboxSettings {
    /// What `language`'s guests are built with.
    fn sizes(&self, language: Language) -> GuestSizes {
        match language {
            Language::Javascript => self.sizes,
            Language::Python if self.python_rootfs.is_some() => self.native_python_sizes,
            Language::Python => self.python_sizes,
        }
    }

    /// The factory for `language`'s sandboxes.
    fn factory(&self, language: Language, watchdog: &Watchdog) -> Arc<dyn GuestFactory> {
        match language {
            Language::Javascript => {
                Arc::new(JavascriptFactory::new(self.sizes, self.snapshots.clone()))
            }
            Language::Python if self.python_rootfs.is_some() => {
                let rootfs = self.python_rootfs.clone().unwrap_or_default();
                Arc::new(NativePythonFactory::new(
                    rootfs,
                    self.native_python_sizes,
                    self.snapshots.clone(),
                ))
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

/// Starts a pool of each size in `sizes` and returns once each has one warm sandbox; the rest
/// warm in the background. A language whose first sandbox cannot be built fails the start with
/// its error.
pub fn start_pools(
    sizes: &BTreeMap<Language, usize>,
    settings: &SandboxSettings,
    runtime: tokio::runtime::Handle,
    metrics: &Metrics,
) -> Result<BTreeMap<Language, Arc<Pool>>, StartError> {
    let watchdog = Watchdog::new(runtime);
    let mut pools = BTreeMap::new();
    for (&language, &size) in sizes {
        let factory = settings.factory(language, &watchdog);
        let config = PoolConfig {
            language,
            size,
            queue_depth: settings.queue_depth,
            heap_bytes: settings.sizes(language).heap_bytes,
            build_limit: settings.build_limit,
            priming: priming(settings.priming, factory.as_ref()),
            factory,
            tracer: settings.tracer.clone(),
        };
        let pool = Pool::start(config, watchdog.clone(), metrics.pool(language))
            .map_err(|error| StartError { language, error })?;
        pools.insert(language, Arc::new(pool));
    }
    Ok(pools)
}

/// When a pool's workers prime: as the operator said, else as its runtime does by default.
fn priming(setting: Option<Priming>, factory: &dyn GuestFactory) -> Priming {
    setting.unwrap_or(if factory.primes_when_idle() {
        Priming::WhenIdle
    } else {
        Priming::Never
    })
}

impl SandboxSettings {
    /// Memory a program can allocate in a `language` sandbox, in MiB.
    pub fn memory_mib(&self, language: Language) -> u64 {
        self.sizes(language).heap_bytes >> 20
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::guest::{BuildError, Guest, GuestFactory, OutputCapture};
    use super::pool::Priming;
    use crate::job::Runtime;

    /// A runtime that primes by default, or not.
    struct Primes(bool);

    impl GuestFactory for Primes {
        fn create(&self, _: Arc<OutputCapture>) -> Result<Box<dyn Guest>, BuildError> {
            Err(BuildError("never built".into()))
        }

        fn runtime(&self) -> Runtime {
            Runtime::default()
        }

        fn primes_when_idle(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn a_pool_primes_as_its_runtime_does_unless_the_operator_says_otherwise() {
        use Priming::{Never, WhenIdle};
        for (setting, runtime_primes, expected) in [
            (None, true, WhenIdle),
            (None, false, Never),
            (Some(Never), true, Never),
            (Some(WhenIdle), false, WhenIdle),
        ] {
            let got = super::priming(setting, &Primes(runtime_primes));
            assert_eq!(
                got, expected,
                "{setting:?}, runtime primes: {runtime_primes}"
            );
        }
    }
}
