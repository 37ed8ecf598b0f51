//! The daemon's own system call filters (seccomp-BPF, compiled by Firecracker's
//! `seccompiler`), one per kind of thread, behind the micro-VM and beside the service manager's
//! filter: a guest that escaped into the thread running it, or a bug in the code that reads a
//! peer's input, can ask the kernel only what that thread's work needs. The lists are in
//! [`lists`], one entry per call with who needs it.
//!
//! # Design
//! A thread inherits its creator's filter, and a filter can only be narrowed. So every thread
//! starts under a filter that allows what any kind does (the [`Kind::Spawner`] filter, which
//! the main thread takes at [`start`]) and narrows itself to its kind's as its first step:
//! tokio's threads in `on_thread_start` ([`enter_or_abort`]), the others through [`spawn`],
//! which has them started by one thread kept for it (a guest's thread started from a runtime
//! thread would otherwise inherit the runtime's filter, without the hypervisor's requests). The
//! main thread narrows itself to the runtime's filter before the first request is served; the
//! pools' and the startup's threads to the guests' before a guest runs.
//!
//! The egress client runs on a runtime of its own ([`egress_runtime`]), the only threads whose
//! filter allows Internet sockets; the runtime that serves the API has Unix sockets only, and
//! the threads that run guests no socket at all.
//!
//! A violation under `enforce` is trapped (SIGSYS, [`trap`]): the handler writes a line naming
//! the thread and the system call to stderr, then either ends the process (exit 159, 128 +
//! SIGSYS; `--seccomp-violation kill`, the default) or makes the call fail with EPERM
//! (`refuse`). Under `log` the kernel allows the call and logs it (its audit log, `dmesg`,
//! type 1326, with the thread's name and the call's number): how a new kernel's or
//! hypervisor's needs are found. `off` installs nothing.

pub mod lists;
mod trap;

use std::io;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};

use clap::ValueEnum;
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// Whether the filters are installed, and what a call outside them meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// No filter of the daemon's own (the service manager's may still apply).
    Off,
    /// Calls outside a thread's list are allowed and logged by the kernel (dmesg).
    Log,
    /// Calls outside a thread's list are violations (see --seccomp-violation).
    Enforce,
}

/// What a violation under `enforce` does, after its line on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnViolation {
    /// The process ends (exit 159): a thread doing what it never does may be a guest that
    /// escaped.
    Kill,
    /// The call fails with EPERM, and the process goes on.
    Refuse,
}

/// The command line's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct SeccompOptions {
    /// The daemon's own system call filters, one per kind of thread (guests, the API's async
    /// runtime, the egress client, the disk writer): `enforce` refuses what a thread's list
    /// does not allow; `log` lets it through and the kernel logs it (dmesg), for finding what
    /// a new kernel or hypervisor needs; `off` installs none.
    #[arg(long = "seccomp", value_enum, env = "HYPERLIGHTD_SECCOMP", default_value_t = Mode::Enforce)]
    pub mode: Mode,

    /// What a call outside a thread's list does under `--seccomp enforce`, after a line naming
    /// the thread and the call on stderr: `kill` ends the process (exit 159); `refuse` fails
    /// the call with EPERM.
    #[arg(long = "seccomp-violation", value_enum, default_value_t = OnViolation::Kill)]
    pub on_violation: OnViolation,
}

/// A kind of thread, and with it a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Builds sandboxes and runs guests: the hypervisor, no socket.
    Guest,
    /// The async runtime that serves the API, and the main thread once serving.
    Runtime,
    /// The egress client's runtime: Internet sockets, no hypervisor.
    Egress,
    /// Writes checkpoints and saved templates.
    Writer,
    /// Starts threads of every kind, and is the main thread's until it serves: what any kind
    /// may do, and the startup's own calls.
    Spawner,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Guest,
        Kind::Runtime,
        Kind::Egress,
        Kind::Writer,
        Kind::Spawner,
    ];

    /// The name violations are reported with.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Guest => "guest",
            Kind::Runtime => "runtime",
            Kind::Egress => "egress",
            Kind::Writer => "writer",
            Kind::Spawner => "spawner",
        }
    }
}

/// Why the filters could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("compiling the {0} threads' system call filter: {1}")]
    Compile(&'static str, seccompiler::BackendError),
    #[error("installing the {0} threads' system call filter: {1}")]
    Install(&'static str, seccompiler::Error),
    #[error("the SIGSYS handler that reports violations: {0}")]
    Handler(nix::Error),
    #[error("this architecture ({0}) has no system call filters here; start with --seccomp off")]
    Architecture(&'static str),
    #[error("starting the thread that starts the others: {0}")]
    Spawner(io::Error),
    #[error("no system call filter was compiled for the {0} threads")]
    Missing(&'static str),
    #[error("starting the egress client's runtime: {0}")]
    EgressRuntime(io::Error),
}

/// A job for the spawner thread: start one thread.
type Job = Box<dyn FnOnce() + Send>;

struct Started {
    programs: Vec<(Kind, BpfProgram)>,
    spawner: mpsc::Sender<Job>,
}

static STARTED: OnceLock<Started> = OnceLock::new();

/// The egress client's runtime, started once the filters are (its threads narrow themselves
/// to the egress filter as they start, which needs [`STARTED`]).
static EGRESS: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// Compiles the filters and, unless `off`, installs the trap for violations, starts the egress
/// runtime and the spawner thread, and narrows the calling (main) thread to the spawner's
/// filter. Called once, before any other thread starts.
pub fn start(options: &SeccompOptions) -> Result<(), SeccompError> {
    let Some((mismatch, arch)) = settings(options)? else {
        return Ok(());
    };
    let mut programs = Vec::new();
    for kind in Kind::ALL {
        let program = compile(kind, mismatch.clone(), arch)
            .map_err(|e| SeccompError::Compile(kind.name(), e))?;
        programs.push((kind, program));
    }
    let (spawner, jobs) = mpsc::channel::<Job>();
    if STARTED.set(Started { programs, spawner }).is_err() {
        return Ok(());
    }
    thread::Builder::new()
        .name("spawner".to_owned())
        .spawn(move || {
            enter_or_abort(Kind::Spawner);
            for job in jobs {
                job();
            }
        })
        .map_err(SeccompError::Spawner)?;
    enter(Kind::Spawner)?;
    // Its threads start from this one, now under the spawner's filter, and narrow to egress's.
    let egress = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("egress")
        .on_thread_start(|| enter_or_abort(Kind::Egress))
        .enable_all()
        .build()
        .map_err(SeccompError::EgressRuntime)?;
    let _ = EGRESS.set(egress);
    report(options);
    Ok(())
}

/// For a process whose threads are all of one kind (the egress helper): narrows the calling
/// thread to `kind`'s filter before it starts any other, and those inherit it.
pub fn confine(options: &SeccompOptions, kind: Kind) -> Result<(), SeccompError> {
    let Some((mismatch, arch)) = settings(options)? else {
        return Ok(());
    };
    let program =
        compile(kind, mismatch, arch).map_err(|e| SeccompError::Compile(kind.name(), e))?;
    trap::name_this_process(kind);
    apply(kind, &program)?;
    report(options);
    Ok(())
}

/// What a call outside a list meets, and the architecture; None when the filters are off.
/// Installs the trap that reports violations under `enforce`.
fn settings(options: &SeccompOptions) -> Result<Option<(SeccompAction, TargetArch)>, SeccompError> {
    if options.mode == Mode::Off {
        tracing::warn!("--seccomp off: the threads run without filters of their own");
        return Ok(None);
    }
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| SeccompError::Architecture(std::env::consts::ARCH))?;
    if options.mode == Mode::Log {
        return Ok(Some((SeccompAction::Log, arch)));
    }
    trap::install(options.on_violation).map_err(SeccompError::Handler)?;
    Ok(Some((SeccompAction::Trap, arch)))
}

fn report(options: &SeccompOptions) {
    match options.mode {
        Mode::Log => tracing::warn!(
            "--seccomp log: calls outside each thread's filter are allowed, and the kernel logs \
             them (dmesg)"
        ),
        _ => tracing::info!(
            on_violation = ?options.on_violation,
            "system call filters installed, one per kind of thread"
        ),
    }
}

/// `kind`'s list as a BPF program whose calls outside the list meet `mismatch`.
pub fn compile(
    kind: Kind,
    mismatch: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, seccompiler::BackendError> {
    let mut rules = std::collections::BTreeMap::new();
    for (call, checks) in lists::of(kind) {
        let checks: Result<Vec<_>, _> = checks.iter().map(lists::Check::rule).collect();
        rules.insert(call, checks?);
    }
    SeccompFilter::new(rules, mismatch, SeccompAction::Allow, arch)?.try_into()
}

/// Narrows the calling thread to `kind`'s filter (nothing when the filters are off).
pub fn enter(kind: Kind) -> Result<(), SeccompError> {
    let Some(started) = STARTED.get() else {
        return Ok(());
    };
    let Some((_, program)) = started.programs.iter().find(|(k, _)| *k == kind) else {
        return Err(SeccompError::Missing(kind.name()));
    };
    apply(kind, program)
}

/// Installs `program`, `kind`'s, on the calling thread, named for a violation's line.
fn apply(kind: Kind, program: &BpfProgram) -> Result<(), SeccompError> {
    trap::name_this_thread(kind);
    seccompiler::apply_filter(program).map_err(|e| SeccompError::Install(kind.name(), e))
}

/// Records the calling thread's kind and name for the line a violation writes: for a thread
/// that inherited its filter rather than entering one (the egress helper's).
pub fn name_this_thread(kind: Kind) {
    trap::name_this_thread(kind);
}

/// [`enter`], for a thread that must not run unfiltered and cannot report an error (tokio's
/// `on_thread_start`): the process ends instead.
pub fn enter_or_abort(kind: Kind) {
    if let Err(e) = enter(kind) {
        eprintln!("hyperlightd: {e}; stopping rather than running a thread unfiltered");
        std::process::exit(70);
    }
}

/// The egress client's runtime, when the filters are on: the only threads that may open
/// Internet sockets. None: the caller's runtime does.
pub fn egress_runtime() -> Option<tokio::runtime::Handle> {
    EGRESS.get().map(|egress| egress.handle().clone())
}

/// Starts a thread named `name` that narrows itself to `kind`'s filter, then runs `work`. With
/// the filters on, the spawner thread starts it, so that it inherits no narrower filter than
/// the spawner's.
pub fn spawn<F, T>(kind: Kind, name: String, work: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let Some(started) = STARTED.get() else {
        return thread::Builder::new().name(name).spawn(work);
    };
    let (tell_handle, handle) = mpsc::sync_channel(1);
    let (tell_entered, entered) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let spawned = thread::Builder::new().name(name).spawn(move || {
            let result = enter(kind);
            let failed = result.is_err();
            let _ = tell_entered.send(result);
            if failed {
                // Never run unfiltered; the caller has the error.
                std::panic::resume_unwind(Box::new(()));
            }
            work()
        });
        let _ = tell_handle.send(spawned);
    });
    let gone = || io::Error::other("the thread that starts threads has stopped");
    started.spawner.send(job).map_err(|_| gone())?;
    let handle = handle.recv().map_err(|_| gone())??;
    match entered.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => Err(io::Error::other(e.to_string())),
        Err(_) => Err(io::Error::other(
            "the new thread ended before its filter was installed",
        )),
    }
}

#[cfg(test)]
mod tests;
