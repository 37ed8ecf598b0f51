//! Command-line configuration of the daemon, and the limits derived from it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use hyperlightd_api::Language;

use crate::audit::AuditOptions;
use crate::caller::{CallerOptionError, CallerOptions};
use crate::egress::options::EgressOptions;
use crate::egress::rules::Rule;
use crate::job::FileLimits;
use crate::job::SessionSettings;
use crate::job::tools::ToolLimits;
use crate::packages::options::PackageOptions;
use crate::service::code_policy::CodePolicy;
use crate::service::{Limits, ToolGrants, tool_defaults};

/// hyperlightd: runs untrusted code in pre-warmed Hyperlight micro-VMs, served over HTTP on a
/// Unix socket.
#[derive(Debug, Clone, Parser)]
#[command(name = "hyperlightd", version, about)]
pub struct Config {
    /// Unix socket to listen on.
    #[arg(long, env = "HYPERLIGHTD_SOCKET", default_value = hyperlightd_api::DEFAULT_SOCKET)]
    pub socket: PathBuf,

    /// Group that owns the socket (mode 0660), so that its members can connect.
    #[arg(long)]
    pub socket_group: Option<String>,

    /// Sandboxes kept per language, as LANGUAGE=COUNT; repeat for each language.
    #[arg(
        long = "pool",
        value_name = "LANGUAGE=COUNT",
        default_value = "javascript=2"
    )]
    pub pools: Vec<PoolSpec>,

    /// Requests that may wait for a sandbox, per language, before new ones are refused (503).
    #[arg(long, default_value_t = 64)]
    pub queue_depth: usize,

    /// When a sandbox runs its language's priming program after the restore that follows each
    /// execution (a new sandbox is always primed once).
    ///
    /// `when-idle`: if no request waits, so the next request's first writes are paid for;
    /// `never`: less CPU per execution, each request paying for its writes; `auto`: native Python
    /// when idle, the others never.
    #[arg(long, value_enum, env = "HYPERLIGHTD_PRIME", default_value_t = Prime::Auto)]
    pub prime: Prime,

    /// Time limit of a request that names none, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub default_timeout_ms: u64,

    /// Highest time limit a request may ask for, in milliseconds; larger values are capped.
    #[arg(long, default_value_t = 60_000)]
    pub max_timeout_ms: u64,

    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest request head (request line and headers) accepted, in bytes; a larger one is
    /// answered 431.
    #[arg(long, default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,

    /// How long a request's body may take to arrive after its head, in milliseconds; past it
    /// the request is answered 408 and its connection closed.
    #[arg(long, default_value_t = 10_000)]
    pub body_read_timeout_ms: u64,

    /// Client connections open at once.
    ///
    /// At the cap, a new connection takes the place of the one that has waited longest for a
    /// request (or to send its body); only when every connection is running a request is a new one
    /// refused.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,

    /// How long a connection may stay open without running a request (waiting for one,
    /// sending its head, or taking its answer), in milliseconds; then it is closed.
    #[arg(long, default_value_t = 30_000)]
    pub idle_timeout_ms: u64,

    /// Largest program accepted, in bytes (413 past it).
    #[arg(long, default_value_t = 512 * 1024)]
    pub max_code_bytes: usize,

    /// Most files and directories a program's working directory (or a session's) may hold:
    /// the files a request gives it and those the program writes. 0: no files at all.
    #[arg(long, default_value_t = 256)]
    pub max_files: usize,

    /// Most bytes the files of a program's working directory (or a session's) may hold together.
    ///
    /// Files given travel in the request body, within --max-body-bytes too.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_file_bytes: u64,

    /// Highest cap on what one execution may write to stdout and stderr together, in bytes, and
    /// the cap of a request that names none; past it the output is cut and the response says
    /// `"truncated": true`.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_output_bytes: usize,

    /// Largest result (the last expression's value, as JSON) returned, in bytes; a larger one is
    /// an error of kind `result_too_large`.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_result_bytes: usize,

    /// How long one tool call waits for its answer when the request names no
    /// `tool_timeout_ms`, in milliseconds; past it the program's call fails.
    #[arg(long, default_value_t = tool_defaults::CALL_TIMEOUT_MS)]
    pub tool_timeout_ms: u64,

    /// Highest `tool_timeout_ms` a request may ask for.
    #[arg(long, default_value_t = tool_defaults::MAX_CALL_TIMEOUT_MS)]
    pub max_tool_timeout_ms: u64,

    /// Most tool calls one execution may make; past it a call fails in the program.
    #[arg(long, default_value_t = tool_defaults::MAX_CALLS)]
    pub max_tool_calls: u32,

    /// Most bytes of one tool call's arguments, or of one answer, as JSON.
    #[arg(long, default_value_t = tool_defaults::MAX_BYTES)]
    pub max_tool_bytes: usize,

    /// How long an execution that declared tools may last from its arrival, tool waits
    /// included, in milliseconds; past it the program is stopped (`wall_clock`).
    #[arg(long, default_value_t = tool_defaults::WALL_CLOCK_MS)]
    pub max_tool_wall_clock_ms: u64,

    /// Guest heap of each JavaScript sandbox, in MiB: the memory a program can allocate.
    #[arg(long, default_value_t = 64)]
    pub guest_heap_mib: u64,

    /// Guest heap of each Python sandbox, in MiB: the interpreter, the WebAssembly runtime and the
    /// program's objects together.
    ///
    /// A sandbox's build time and the host memory its template holds grow with it.
    #[arg(long, default_value_t = 128)]
    pub python_heap_mib: u64,

    /// Which Python serves `"language": "python"`: `wasm` or `native`.
    ///
    /// `wasm`: CPython compiled to WebAssembly (pure-Python packages only; `--python-guest`);
    /// `native`: Debian's CPython with the scientific stack in a Unikraft micro-VM
    /// (`--python-rootfs`).
    #[arg(long, value_enum, env = "HYPERLIGHTD_PYTHON_RUNTIME", default_value_t = PythonRuntime::Wasm)]
    pub python_runtime: PythonRuntime,

    /// The native Python guest's root filesystem (`python.cpio`, built by `cargo xtask
    /// native-python`).
    ///
    /// Needed only with `--python-runtime native`.
    #[arg(
        long,
        env = "HYPERLIGHTD_PYTHON_ROOTFS",
        default_value = "/usr/lib/hyperlightd/python.cpio"
    )]
    pub python_rootfs: std::path::PathBuf,

    /// Memory of each native Python sandbox, in MiB: the interpreter, the packages' and the
    /// program's data, and its working directory's files together.
    ///
    /// Only pages used cost the host memory.
    #[arg(long, default_value_t = 1024)]
    pub python_native_memory_mib: u64,

    /// Host handles a Python program may take in one run: each `time.sleep()`, poll or stream takes
    /// one, and the host keeps them (about 32 bytes each, in tables that grow by doubling) until
    /// the run ends.
    ///
    /// Past the limit the program is stopped with the error kind `resource_limit`.
    #[arg(long, default_value_t = 1_000_000)]
    pub python_max_host_handles: u64,

    /// The compiled Python guest (`python.aot`, built by `cargo xtask python-guest`).
    ///
    /// Needed only when a `python` pool is configured.
    #[arg(
        long,
        env = "HYPERLIGHTD_PYTHON_GUEST",
        default_value = "/usr/lib/hyperlightd/python.aot"
    )]
    pub python_guest: std::path::PathBuf,

    /// The Python guest's library (`python-lib.tar`, built with the guest): the standard library
    /// and packages it imports at run time, served read-only from memory.
    ///
    /// By default the file of that name beside `--python-guest`.
    #[arg(long, env = "HYPERLIGHTD_PYTHON_LIB")]
    pub python_lib: Option<std::path::PathBuf>,

    /// Where to save each language's template (a snapshot of a guest with its runtime loaded and
    /// its runner ready), and load it from at the next start instead of building it.
    ///
    /// A saved template is checked before use (every byte, the daemon's build, the guest's
    /// settings and files) and rebuilt when it does not fit; none: build at every start.
    #[arg(long, env = "HYPERLIGHTD_SNAPSHOT_DIR")]
    pub snapshot_dir: Option<std::path::PathBuf>,

    /// Where sessions are kept so that they outlive the daemon: each session's record, journal and
    /// checkpoints (every exec's state, written after its answer, crash-safe and checksummed).
    ///
    /// A daemon started again with the same directory serves the same sessions; none: sessions
    /// live in memory only, and a stop loses them.
    #[arg(long, env = "HYPERLIGHTD_STATE_DIR")]
    pub state_dir: Option<std::path::PathBuf>,

    /// Seconds a session kept in --state-dir may stay idle before its state leaves memory (parked:
    /// on disk only, brought back at its next use).
    ///
    /// Sessions also leave memory, least recently used first, when their states hold
    /// --session-memory-mib.
    #[arg(long, default_value_t = 300)]
    pub session_park_after_s: u64,

    /// A JSON file with the default policy every program is checked against before it runs.
    ///
    /// Its fields are a request's `policy`'s and `network` (`{"allow": [...]}`, destinations
    /// besides those of --egress-allow), which a request's own can only narrow.
    #[arg(long, env = "HYPERLIGHTD_POLICY")]
    pub policy: Option<std::path::PathBuf>,

    /// How long building the first sandbox of each language (the startup probe) may take, in
    /// milliseconds, before the daemon gives up and exits.
    #[arg(long, default_value_t = 120_000)]
    pub startup_timeout_ms: u64,

    /// How long in-flight requests may take to finish after SIGTERM/SIGINT, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub drain_timeout_ms: u64,

    /// Most live sessions, all languages together; past it, creating or forking a session is
    /// refused with `too_many_sessions`.
    ///
    /// Lowered at start, and logged, to the sessions whose checkpoints fit in the kernel's cap
    /// on the daemon's memory mappings (vm.max_map_count), at up to 43 mappings a checkpoint:
    /// past the cap a checkpoint cannot be restored. Raise the cap for more (sysctl -w
    /// vm.max_map_count=262144); the sessions guide says how many each cap holds.
    #[arg(long, default_value_t = 1000)]
    pub max_sessions: usize,

    /// Seconds a session may stay idle (no exec) before it is deleted, when it names no
    /// `idle_timeout_s`.
    #[arg(long, default_value_t = 600)]
    pub session_idle_timeout_s: u64,

    /// Highest idle timeout a session may ask for, in seconds; higher ones are capped.
    #[arg(long, default_value_t = 86_400)]
    pub max_session_idle_timeout_s: u64,

    /// Longest a session lives, however busy, in seconds.
    #[arg(long, default_value_t = 86_400)]
    pub max_session_lifetime_s: u64,

    /// Host memory all sessions' saved state may hold, in MiB; past it, creating or forking a
    /// session is refused with `too_many_sessions` (execs in existing sessions still run).
    #[arg(long, default_value_t = 4096)]
    pub session_memory_mib: u64,

    /// Most checkpoints a session keeps (its state after each exec, to roll back to or fork from),
    /// its newest included; the oldest beyond are dropped.
    ///
    /// Each holds what its exec changed and shares the rest with its parent, counted in
    /// --session-memory-mib; 1 keeps only the session's state.
    #[arg(long, default_value_t = 4)]
    pub session_checkpoints: usize,

    /// Most MiB a session's checkpoints may hold together; the oldest beyond are dropped (the
    /// newest is kept whatever its size).
    ///
    /// A checkpoint holds what its exec changed (about a MiB after a small exec, a little over N
    /// after one that writes N MiB), so the default keeps four of execs writing up to 15 MiB.
    #[arg(long, default_value_t = 64)]
    pub session_checkpoint_mib: u64,

    /// Who may call, and how much one caller may have at once.
    #[command(flatten)]
    pub callers: CallerOptions,

    /// The audit log.
    #[command(flatten)]
    pub audit: AuditOptions,

    /// Outbound HTTP from programs.
    #[command(flatten)]
    pub egress: EgressOptions,

    /// Packages installed at runtime.
    #[command(flatten)]
    pub packages: PackageOptions,

    /// The daemon's own system call filters.
    #[command(flatten)]
    pub seccomp: crate::sys::seccomp::SeccompOptions,

    /// Traces sent over OTLP.
    #[command(flatten)]
    pub traces: crate::telemetry::export::TraceOptions,

    /// E2B's API on a TCP address.
    #[command(flatten)]
    pub e2b: crate::e2b::E2bOptions,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// hyperlightd-egress, the egress helper: resolves names and makes TCP connections for a
/// daemon that has no network, on a Unix socket only the daemon's user may open
/// (docs/guide/network.md).
#[derive(Debug, Clone, Parser)]
#[command(name = "hyperlightd-egress", version, about)]
pub struct HelperConfig {
    /// The socket to listen on, when systemd passes none (socket activation).
    #[arg(long)]
    pub socket: Option<PathBuf>,

    /// Connections served at once; past them a connection is answered "failed".
    #[arg(long, default_value_t = 64)]
    pub max_connections: usize,

    /// The helper's system call filter: the daemon's egress threads' list.
    #[command(flatten)]
    pub seccomp: crate::sys::seccomp::SeccompOptions,
}

/// Exit code of a command line that does not parse: a bad configuration (sysexits' EX_USAGE, as
/// for every other configuration error).
pub const BAD_COMMAND_LINE: u8 = 64;

/// The command line as `T` reads it. Err: the process's exit code, the message printed: 64 for
/// a command line that does not parse, 0 after `--help` and `--version` (stdout), which are not
/// errors.
pub fn command_line<T: Parser>() -> Result<T, std::process::ExitCode> {
    T::try_parse().map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            std::process::ExitCode::from(BAD_COMMAND_LINE)
        } else {
            std::process::ExitCode::SUCCESS
        }
    })
}

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `LANGUAGE=COUNT`: how many sandboxes to keep for a language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    /// The language.
    pub language: Language,
    /// How many sandboxes.
    pub size: usize,
}

impl FromStr for PoolSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (lang, count) = s
            .split_once('=')
            .ok_or_else(|| format!("expected LANGUAGE=COUNT, got {s:?}"))?;
        let language = lang.parse::<Language>().map_err(|e| e.to_string())?;
        let size = count
            .parse::<usize>()
            .map_err(|e| format!("bad count {count:?}: {e}"))?;
        if size == 0 {
            return Err(format!("{language}: a pool needs at least one sandbox"));
        }
        Ok(PoolSpec { language, size })
    }
}

/// When a sandbox is primed after a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Prime {
    /// As each runtime does by default: where priming pays for its CPU.
    Auto,
    /// After each restore that finds no request waiting.
    WhenIdle,
    /// Never.
    Never,
}

impl Prime {
    /// The operator's choice for every pool; None: each runtime's own.
    pub fn priming(self) -> Option<crate::sandbox::pool::Priming> {
        use crate::sandbox::pool::Priming;
        match self {
            Prime::Auto => None,
            Prime::WhenIdle => Some(Priming::WhenIdle),
            Prime::Never => Some(Priming::Never),
        }
    }
}

/// Which Python serves `"language": "python"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PythonRuntime {
    /// CPython compiled to WebAssembly, run by hyperlight-wasm.
    Wasm,
    /// Debian's CPython with the scientific stack, run by hyperlight-unikraft.
    Native,
}

/// An inconsistent configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Traces cannot be sent as `--otlp-endpoint` or the `OTEL_*` variables say.
    #[error(transparent)]
    Traces(#[from] crate::telemetry::export::TraceError),
    /// Two `--pool` options for one language.
    #[error("--pool names {0} twice")]
    DuplicatePool(Language),
    /// A limit that must be positive is zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// A `python` pool is configured but its guest is not where `--python-guest` says.
    #[error(
        "the Python guest {0:?} does not exist: build it with `cargo xtask python-guest` and \
         pass its path with --python-guest (or HYPERLIGHTD_PYTHON_GUEST), or configure no python pool"
    )]
    PythonGuestMissing(std::path::PathBuf),
    /// A native `python` pool is configured but its root filesystem is missing.
    #[error(
        "the native Python guest's root filesystem {0:?} does not exist: build it with `cargo \
         xtask native-python` and pass its path with --python-rootfs (or \
         HYPERLIGHTD_PYTHON_ROOTFS), or choose --python-runtime wasm"
    )]
    PythonRootfsMissing(std::path::PathBuf),
    /// A `python` pool is configured but the guest's library is missing.
    #[error(
        "the Python guest's library {0:?} does not exist: `cargo xtask python-guest` builds it \
         beside python.aot; pass its path with --python-lib (or HYPERLIGHTD_PYTHON_LIB)"
    )]
    PythonLibraryMissing(std::path::PathBuf),
    /// `--max-header-bytes` is too small for any real request.
    #[error("--max-header-bytes must be at least {MIN_HEADER_BYTES}, not {0}")]
    HeaderLimitTooSmall(usize),
    /// The process may not open enough files for `--max-connections`.
    #[error(
        "--max-connections {connections} needs about {needed} open files, and this process may \
         open only {limit} (raise its limit: `ulimit -n`, or LimitNOFILE= in a systemd unit), \
         or lower --max-connections"
    )]
    TooFewFiles {
        /// The connection cap asked for.
        connections: usize,
        /// Files it needs, with the daemon's own.
        needed: u64,
        /// The process's limit.
        limit: u64,
    },
    /// The egress options (or the policy file's `network`) do not hold.
    #[error("egress: {0}")]
    Egress(String),
    /// The package options do not hold.
    #[error("packages: {0}")]
    Packages(String),
    /// The default idle timeout of sessions is larger than the maximum.
    #[error(
        "--session-idle-timeout-s ({default}) is larger than --max-session-idle-timeout-s ({max})"
    )]
    SessionIdleAboveMax {
        /// The default.
        default: u64,
        /// The maximum.
        max: u64,
    },
    /// The kernel's cap on memory mappings holds no session's checkpoints.
    #[error(
        "the kernel lets this process have {max_map_count} memory mappings \
         (vm.max_map_count), too few for one session's checkpoints ({per_session}) beside the \
         daemon's own: raise it (sysctl -w vm.max_map_count=262144) or lower \
         --session-checkpoints"
    )]
    TooFewMappings {
        /// The kernel's cap.
        max_map_count: u64,
        /// The mappings one session's checkpoints may take.
        per_session: u64,
    },
    /// An allow list or a per-caller quota does not hold.
    #[error(transparent)]
    Caller(#[from] CallerOptionError),
    /// The default policy file cannot be read or is not a valid policy.
    #[error("--policy {}: {why}", path.display())]
    Policy {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The default timeout is larger than the maximum.
    #[error("--default-timeout-ms ({default}) is larger than --max-timeout-ms ({max})")]
    DefaultAboveMax {
        /// The default.
        default: u64,
        /// The maximum.
        max: u64,
    },
}

/// The smallest `--max-header-bytes`: the request line and the few headers a client sends.
pub const MIN_HEADER_BYTES: usize = 1024;

impl Config {
    /// The policy file (`--policy`), checked: the default code policy (empty without the
    /// option) and the destinations its `network.allow` names.
    pub fn policy_file(&self) -> Result<(CodePolicy, Vec<Rule>), ConfigError> {
        let Some(path) = &self.policy else {
            return Ok((CodePolicy::default(), Vec::new()));
        };
        let error = |why: String| ConfigError::Policy {
            path: path.clone(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        let mut fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| error(e.to_string()))?;
        let network = fields
            .remove("network")
            .map(serde_json::from_value::<hyperlightd_api::Network>)
            .transpose()
            .map_err(|e| error(format!("network: {e}")))?;
        let policy: hyperlightd_api::Policy =
            serde_json::from_value(fields.into()).map_err(|e| error(e.to_string()))?;
        let policy = CodePolicy::from(policy);
        crate::service::code_policy::validate(&policy).map_err(|e| error(e.to_string()))?;
        let rules = network
            .map(|n| crate::egress::options::rules_of(&n.allow))
            .transpose()
            .map_err(error)?
            .unwrap_or_default();
        Ok((policy, rules))
    }

    /// The Python guest's library: `--python-lib`, or `python-lib.tar` beside the guest.
    pub fn python_library(&self) -> std::path::PathBuf {
        self.python_lib
            .clone()
            .unwrap_or_else(|| self.python_guest.with_file_name("python-lib.tar"))
    }

    /// Pool sizes by language, rejecting duplicates.
    pub fn pool_sizes(&self) -> Result<BTreeMap<Language, usize>, ConfigError> {
        let mut sizes = BTreeMap::new();
        for spec in &self.pools {
            if sizes.insert(spec.language, spec.size).is_some() {
                return Err(ConfigError::DuplicatePool(spec.language));
            }
        }
        if sizes.contains_key(&Language::Python) && self.python_runtime == PythonRuntime::Native {
            if !self.python_rootfs.is_file() {
                return Err(ConfigError::PythonRootfsMissing(self.python_rootfs.clone()));
            }
        } else if sizes.contains_key(&Language::Python) {
            if !self.python_guest.is_file() {
                return Err(ConfigError::PythonGuestMissing(self.python_guest.clone()));
            }
            if !self.python_library().is_file() {
                return Err(ConfigError::PythonLibraryMissing(self.python_library()));
            }
        }
        Ok(sizes)
    }

    /// The request limits, checked for consistency.
    pub fn limits(&self) -> Result<Limits, ConfigError> {
        for (name, value) in [
            ("--default-timeout-ms", self.default_timeout_ms),
            ("--max-timeout-ms", self.max_timeout_ms),
            ("--max-body-bytes", self.max_body_bytes as u64),
            ("--max-code-bytes", self.max_code_bytes as u64),
            ("--max-output-bytes", self.max_output_bytes as u64),
            ("--max-result-bytes", self.max_result_bytes as u64),
            ("--guest-heap-mib", self.guest_heap_mib),
            ("--queue-depth", self.queue_depth as u64),
            ("--startup-timeout-ms", self.startup_timeout_ms),
            ("--body-read-timeout-ms", self.body_read_timeout_ms),
            ("--max-connections", self.max_connections as u64),
            ("--idle-timeout-ms", self.idle_timeout_ms),
            ("--python-max-host-handles", self.python_max_host_handles),
            ("--python-native-memory-mib", self.python_native_memory_mib),
            ("--tool-timeout-ms", self.tool_timeout_ms),
            ("--max-tool-timeout-ms", self.max_tool_timeout_ms),
            ("--max-tool-calls", u64::from(self.max_tool_calls)),
            ("--max-tool-bytes", self.max_tool_bytes as u64),
            ("--max-tool-wall-clock-ms", self.max_tool_wall_clock_ms),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.default_timeout_ms > self.max_timeout_ms {
            return Err(ConfigError::DefaultAboveMax {
                default: self.default_timeout_ms,
                max: self.max_timeout_ms,
            });
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(ConfigError::HeaderLimitTooSmall(self.max_header_bytes));
        }
        Ok(Limits {
            default_timeout: Duration::from_millis(self.default_timeout_ms),
            max_timeout: Duration::from_millis(self.max_timeout_ms),
            max_body_bytes: self.max_body_bytes,
            max_code_bytes: self.max_code_bytes,
            max_output_bytes: self.max_output_bytes,
            max_result_bytes: self.max_result_bytes,
            body_read_timeout: Duration::from_millis(self.body_read_timeout_ms),
            files: FileLimits {
                max_entries: self.max_files,
                max_bytes: self.max_file_bytes,
            },
            tools: ToolGrants {
                default_call_timeout: Duration::from_millis(self.tool_timeout_ms),
                max: ToolLimits {
                    call_timeout: Duration::from_millis(self.max_tool_timeout_ms),
                    max_calls: self.max_tool_calls,
                    max_bytes: self.max_tool_bytes,
                    wall_clock: Duration::from_millis(self.max_tool_wall_clock_ms),
                },
            },
        })
    }

    /// The limits of sessions, checked.
    pub fn sessions(&self) -> Result<SessionSettings, ConfigError> {
        for (name, value) in [
            ("--max-sessions", self.max_sessions as u64),
            ("--session-idle-timeout-s", self.session_idle_timeout_s),
            (
                "--max-session-idle-timeout-s",
                self.max_session_idle_timeout_s,
            ),
            ("--max-session-lifetime-s", self.max_session_lifetime_s),
            ("--session-memory-mib", self.session_memory_mib),
            ("--session-checkpoints", self.session_checkpoints as u64),
            ("--session-checkpoint-mib", self.session_checkpoint_mib),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.session_idle_timeout_s > self.max_session_idle_timeout_s {
            return Err(ConfigError::SessionIdleAboveMax {
                default: self.session_idle_timeout_s,
                max: self.max_session_idle_timeout_s,
            });
        }
        Ok(SessionSettings {
            max_sessions: self.max_sessions,
            max_per_caller: self.callers.session_quota(self.max_sessions)?,
            exempt_uid: None,
            default_idle: Duration::from_secs(self.session_idle_timeout_s),
            max_idle: Duration::from_secs(self.max_session_idle_timeout_s),
            max_lifetime: Duration::from_secs(self.max_session_lifetime_s),
            memory_budget: self.session_memory_mib.saturating_mul(1 << 20),
            max_checkpoints: self.session_checkpoints,
            max_checkpoint_bytes: self.session_checkpoint_mib.saturating_mul(1 << 20),
            park_after: self
                .state_dir
                .as_ref()
                .map(|_| Duration::from_secs(self.session_park_after_s)),
        })
    }

    /// The open files the daemon needs: one per connection, and its own (the socket, logs,
    /// and a handful per sandbox: the VM, its vCPU, its memory).
    pub fn files_needed(&self) -> u64 {
        (self.max_connections as u64)
            .saturating_add(FILES_OF_OUR_OWN)
            .saturating_add(FILES_PER_SANDBOX.saturating_mul(self.sandboxes()))
    }

    /// The sandboxes of every pool together.
    fn sandboxes(&self) -> u64 {
        self.pools.iter().map(|pool| pool.size as u64).sum()
    }

    /// `settings` with `--max-sessions` lowered, if need be, to the sessions whose checkpoints
    /// fit in `max_map_count` memory mappings beside the daemon's own, each session holding up
    /// to `--session-checkpoints` of them at [`MAPPINGS_PER_CHECKPOINT`]; the per-caller quota
    /// lowered with it. Past the kernel's cap a checkpoint cannot be restored into a sandbox, and
    /// an exec that needs it fails: refusing the session up front is the error a caller can act
    /// on. `Lowered` when it did.
    pub fn sessions_within_mappings(
        &self,
        mut settings: SessionSettings,
        max_map_count: u64,
    ) -> Result<(SessionSettings, Option<Lowered>), ConfigError> {
        let own = MAPPINGS_OF_OUR_OWN
            .saturating_add(MAPPINGS_PER_SANDBOX.saturating_mul(self.sandboxes()));
        let per_session = MAPPINGS_PER_CHECKPOINT.saturating_mul(settings.max_checkpoints as u64);
        let fit = usize::try_from(max_map_count.saturating_sub(own) / per_session.max(1))
            .unwrap_or(usize::MAX);
        if fit >= settings.max_sessions {
            return Ok((settings, None));
        }
        if fit == 0 {
            return Err(ConfigError::TooFewMappings {
                max_map_count,
                per_session,
            });
        }
        let lowered = Lowered {
            from: settings.max_sessions,
            to: fit,
            per_session,
        };
        settings.max_sessions = fit;
        settings.max_per_caller = self.callers.session_quota(fit)?.min(fit);
        Ok((settings, Some(lowered)))
    }
}

/// The most memory mappings one checkpoint in memory may take: one of its own file, read by
/// the checkpoint after it (hyperlight-host patch 0010); and once a sandbox is restored from
/// it, one for each run of the files its memory is composed from (at most 8 of pages and 32 of
/// page tables, by patches 0003 and 0005) and the guard pages around them. What small execs
/// take is in the sessions guide.
pub const MAPPINGS_PER_CHECKPOINT: u64 = 43;
/// Memory mappings the daemon may hold besides its sessions' checkpoints: its own (code,
/// heaps, thread stacks; about 80 at start), and each sandbox's.
const MAPPINGS_OF_OUR_OWN: u64 = 512;
/// Memory mappings a sandbox of a pool may hold.
const MAPPINGS_PER_SANDBOX: u64 = 128;

/// `--max-sessions` lowered to what the kernel's cap on memory mappings holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lowered {
    /// The sessions asked for.
    pub from: usize,
    /// The sessions that fit.
    pub to: usize,
    /// The mappings one session's checkpoints may take.
    pub per_session: u64,
}

/// Open files the daemon needs besides connections and sandboxes.
const FILES_OF_OUR_OWN: u64 = 64;
/// Open files a sandbox may hold.
const FILES_PER_SANDBOX: u64 = 8;

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
