//! A pool of warm sandboxes of one language: one worker thread per sandbox, fed from a bounded
//! queue, answering through a oneshot channel.
//!
//! Guest calls block their thread for their whole run, so they never run on the async runtime's
//! workers. A worker sends its answer *before* it restores its sandbox to the warm snapshot, so
//! the restore is off the request's path. Time limits are enforced from outside the guest, with
//! the sandbox's interrupt handle. A call that poisons its sandbox (time limit, guest abort,
//! memory fault) is followed by a restore as well, which clears the poison; only a sandbox whose
//! restore fails is dropped and rebuilt (see [`worker`]).
//!
//! A job that waits for a sandbox until its deadline is answered then, by its caller, with
//! [`ExecError::NoSandboxAvailable`]; a worker that dequeues it afterwards drops it without
//! touching its sandbox.
//!
//! # Design: sandboxes and their workers
//! - **Warm sandboxes from one template.** Each language has a *template*, made once per start: a
//!   snapshot of its guest with the runtime loaded, the runner ready (JavaScript: hyperlight-js's
//!   QuickJS with the runner, `guest/javascript/runner.js` after `web-apis.js`, `web.js`,
//!   `fetch.js` and `program.js` (a program with top-level `await` rewritten to keep its
//!   completion value), registered as a handler; Python: see below, with its priming program run
//!   once). Each pool
//!   worker owns one sandbox built *from* the template (hyperlight-host's
//!   `SandboxBuilder::from_snapshot`: a new micro-VM whose memory is the template's, mapped
//!   copy-on-write, with host functions of its own). A request runs in that state, and the
//!   sandbox is restored to the template after the answer has been sent, so the restore is off
//!   the request's path and nothing a program does is visible to the next one. See
//!   Templates.
//! - **Sandbox lifecycle** (`sandbox/pool/worker.rs`). `Pool::start` makes the template ready
//!   (`GuestFactory::prepare`: built, or loaded from `--snapshot-dir`), builds the pool's first
//!   sandbox from it on the spot and hands it to worker 0; the other workers build theirs in the
//!   background while the daemon serves. After every call the worker restores the sandbox,
//!   whatever the call did to it. A call that poisoned it (interrupted at its deadline, guest
//!   abort, memory fault, an unexplained reply) is no exception: hyperlight-host's restore
//!   replaces memory, mappings and vCPU state and clears the poison, and the restore is counted in
//!   `hyperlightd_sandboxes_restored_after_poison_total{reason}`. Only a sandbox whose restore
//!   fails, or in which a host function panicked (Hyperlight's own state may be half updated then),
//!   is dropped and a new one built from the template (retrying with backoff) while the others
//!   serve, counted in
//!   `hyperlightd_sandboxes_recycled_total{reason}`. Each worker's state (building, idle, busy)
//!   sits in a slot that health and metrics count.
//! - **A worker never leaves the pool short.** A panic outside a guest call (a bug) costs the
//!   sandbox in hand: the worker logs it, counts it (`hyperlightd_worker_restarts_total`) and starts
//!   over with a new sandbox.
//! - **Priming.** After a restore, the first write to each page copies it from the snapshot, and
//!   a runtime writes a great many pages on any request (reference counts, the allocator, the
//!   runner's own path). `Guest::prime` lets a guest pay for that before the next request: the
//!   runner runs a fixed program of its own with its output refused (Python: `PRIME` in
//!   `runner.py`, a loop, a function, an f-string, print, JSON; JavaScript: `PRIME` in
//!   `sandbox/javascript/mod.rs`, objects, strings, JSON; no host call, since a VM exit is paid per
//!   call and cannot be paid in advance). Its text is fixed and no
//!   request's data reaches it, so what it leaves is the same after every restore. The hidden
//!   cost: CPU after every request, several times the restore's, which a request sent meanwhile
//!   waits for (the benchmark's `latency` part prints both after each breakdown; a first, heavier
//!   JavaScript priming program halved JavaScript's back-to-back rate). The worker primes only when
//!   no job is waiting; a queued job takes the restored sandbox as it is rather than wait for the
//!   priming. A priming call that fails is undone by another restore.
//!   `hyperlightd_sandbox_prime_seconds` shows the cost, `hyperlightd_worker_busy_seconds_total`
//!   its share of a worker's time. Whether a pool primes is its runtime's default
//!   (`GuestFactory::primes_when_idle`: only native Python, whose request writes thousands of
//!   pages; for JavaScript and WebAssembly Python priming bought a request little and cost a
//!   sandbox a good part of its executions back to back)
//!   unless `--prime when-idle` or `never` says for all (`config::Prime` to `pool::Priming`,
//!   resolved per pool in `sandbox::start_pools`). Unprimed, a worker's time per execution is the
//!   call and the restore, and each request pays for the pages it writes.
//! - **A new sandbox is primed once, whatever the pool's priming.** Its first call also maps into
//!   the VM every page it touches (the hypervisor's nested page faults, the host's first touches
//!   of the snapshot's pages), which no restore undoes: a sandbox's first Python request
//!   took many times its later ones. So a worker runs the priming program on each
//!   sandbox it starts serving with (built at startup or as a replacement) before its first job,
//!   unless a job is already waiting (`pool/worker.rs`, `serve`); the pool counts the sandbox
//!   ready meanwhile, and a job that comes then waits for the priming rather than pay for the
//!   same pages itself.
//! - **Blocking stays off the async runtime.** A guest call blocks its thread for its whole run;
//!   workers are plain OS threads fed by the pool's queue (`pool/queue.rs`, a mutex and a condition
//!   variable) and answer through a `tokio::sync::oneshot`. The async side only waits.
//! - **Time limits from outside the guest** (`sandbox/watchdog.rs`). Every step that runs guest code
//!   (a request, a restore, a priming call, the warm-up call while building a Python sandbox) arms
//!   a timer on the tokio runtime that calls the sandbox's interrupt handle at the step's limit,
//!   and again every 100 ms until the step ends: Hyperlight forgets an interrupt that lands before
//!   a call has begun, so one interrupt could come too early for a job with a millisecond left. An
//!   interrupted request becomes `status: "timeout"`. A request's limit is its deadline (arrival +
//!   timeout, so queue time counts; in a session, less the time spent saving earlier execs'
//!   state, see Sessions).
//! - **Deadlines while queued.** Each queued task carries a claim that either its worker or its
//!   caller wins. At the deadline the caller gives the task up and answers `no_sandbox_available`
//!   itself; a worker that dequeues a task given up drops it without touching its sandbox. If the
//!   worker won, the caller waits up to two seconds past the deadline for its answer (a guest that
//!   does not stop is a hypervisor fault) and then answers "timeout" itself.
//! - **Stuck workers.** A worker records when its step should end; one that runs 30 s past that
//!   (or a build that takes far longer than `--startup-timeout-ms`) is stuck: the hypervisor is not
//!   giving its thread back. `/v1/health/live` answers 503 then, so a supervisor restarts the
//!   daemon; nothing else can free the thread.
//! - **Output.** The runner's console writes through a host function (`hyperlightd.write`), the
//!   runtime's own `print` through the host print function; both land in the worker's
//!   `OutputCapture`, which keeps at most the request's cap and flags truncation, so a flood costs
//!   the host nothing past the cap. `write` answers whether there is room, and the runner stops
//!   calling the host once there is none. A host call's arguments travel through the guest's output
//!   buffer (64 KiB beyond the result limit), so both runners send at most 8192 characters per call
//!   and shorten error messages in their replies to 8192 characters; Python's WASI streams take at
//!   most 32 KiB per write. Rich output (the native Python runner's figures and tables) is a
//!   `Display` item (MIME type to content) in the same capture and the same cap, kept whole or left
//!   out whole, and goes to a streaming caller as an `OutputChunk` like text.
//! - **Guest memory.** A sandbox's pages are copy-on-write from its snapshot, and every page a
//!   program dirties (heap, stack) comes from the sandbox's *scratch* region, as do the input and
//!   output buffers. `GuestSizes` (`sandbox/guest.rs`) therefore sizes scratch to hold the heap
//!   (`--guest-heap-mib`), the input buffer (six times the body limit: the program travels
//!   JSON-encoded) and the output buffer (the result limit), all in whole pages. Untouched pages cost
//!   nothing. On KVM, hyperlight-host as published releases every dirtied page at a restore
//!   (`MADV_DONTNEED`), and the next run takes a VM exit for each page it writes again; the daemon
//!   builds it with a patch (`patches/hyperlight-host`, see `patches/README.md`) by which a restore
//!   zeroes in place the pages below the guest's page allocator (at most 16 MiB of them), which the
//!   next run writes again with no exit, and releases the rest. MSHV support, where hyperlight-host
//!   zeroes all of scratch in place (hundreds of milliseconds with the default heap), is the opt-in
//!   `mshv` feature.
//! - **Failures.** A program's failure is a 200 with `status: "error"`; only requests that did not
//!   run get 4xx/5xx. Each error has one kind (`Refusal::kind`, `ApiError::kind`, exhaustive) and
//!   each kind one status, in one exhaustive table (`ErrorKind::status`, in the API crate, which
//!   the OpenAPI document's tables are tested against).

mod queue;
mod scope;
mod worker;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{error, info};

use self::queue::{FairQueue, Refused};
use self::worker::{Worker, timeout_outcome};
use super::guest::{Captured, Guest, GuestFactory, OutputCapture, SavedState, Source};
use super::watchdog::Watchdog;
use crate::job::{
    After, Deadline, ExecError, Job, Language, MemoryFile, Outcome, PoolCounts, Ran, Runtime,
    StateCodec,
};
use crate::metrics::PoolMetrics;
use crate::sys::seccomp::Kind;
use crate::telemetry::{Attribute, Tracer};

/// How long past a job's deadline the caller waits for the worker running it before answering
/// "timeout" itself. A worker stops its guest at the deadline; this only bounds the wait should
/// a guest not stop (a hypervisor fault), so that no request waits forever.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// How long past its limit a guest step may go on before its worker counts as stuck (see
/// [`Pool::stuck_workers`]). The watchdog interrupts a call at its limit, and an interrupted
/// call returns within milliseconds; one that has not returned long after is held by the
/// hypervisor, and only a restart of the daemon frees its thread.
const STUCK_AFTER: Duration = Duration::from_secs(30);

/// What a pool is built from.
#[derive(Clone)]
pub struct PoolConfig {
    /// The pool's language.
    pub language: Language,
    /// Sandboxes (and worker threads).
    pub size: usize,
    /// Jobs that may wait for a sandbox.
    pub queue_depth: usize,
    /// The guest heap, for messages about running out of it.
    pub heap_bytes: u64,
    /// How long building a sandbox may take before its worker counts as stuck.
    pub build_limit: Duration,
    /// Builds the sandboxes.
    pub factory: Arc<dyn GuestFactory>,
    /// When a worker primes its sandbox after a restore.
    pub priming: Priming,
    /// Records the spans of its start.
    pub tracer: Tracer,
}

/// When a worker primes its sandbox after a restore ([`Guest::prime`]): the priming program
/// writes the pages a request writes, so that the next request finds them copied already.
/// Under load no job waits for it: a worker primes only when no job is waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priming {
    /// After every restore that finds no job waiting: the next request is faster, and the
    /// sandbox is busy for a program's run more per execution.
    WhenIdle,
    /// Never: the next request writes its pages itself (slower by their faults), and an
    /// execution costs its worker only the call and the restore.
    Never,
}

impl Priming {
    /// Its name as `--prime` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Priming::WhenIdle => "when-idle",
            Priming::Never => "never",
        }
    }
}

impl std::fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolConfig")
            .field("language", &self.language)
            .field("size", &self.size)
            .field("queue_depth", &self.queue_depth)
            .finish_non_exhaustive()
    }
}

/// Why a pool could not start.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// Its first sandbox could not be built.
    #[error("building its first sandbox failed: {0}")]
    Build(crate::sandbox::guest::BuildError),
    /// A worker thread could not be started.
    #[error("starting a worker thread failed: {0}")]
    Spawn(std::io::Error),
}

/// Where a job's interpreter starts.
#[derive(Debug, Clone)]
pub enum Scope {
    /// A fresh interpreter: the warm snapshot, left behind after the job.
    Fresh,
    /// A session's: its saved state (None: the warm snapshot, for its first exec), saved
    /// again after the job unless the job rolls back.
    Session(Option<SavedState>),
}

/// A job handed to a worker, with the channel its answer goes back on.
struct Task {
    job: Job,
    /// The job's deadline as it runs: a tool wait stops its clock.
    deadline: Arc<Deadline>,
    scope: Scope,
    queued: Instant,
    claim: Arc<Claim>,
    reply: oneshot::Sender<Result<Ran, ExecError>>,
}

impl Task {
    /// The session state it resumes, if any.
    fn resumes(&self) -> Option<&SavedState> {
        match &self.scope {
            Scope::Session(Some(state)) => Some(state),
            Scope::Fresh | Scope::Session(None) => None,
        }
    }

    /// Whether it starts from the warm snapshot.
    fn starts_warm(&self) -> bool {
        self.resumes().is_none()
    }

    /// Whether it is a session's first exec.
    fn starts_session(&self) -> bool {
        matches!(self.scope, Scope::Session(None))
    }
}

/// Who owns a queued task: nobody yet, the worker that took it, or its caller, who gave up
/// waiting. Exactly one of the two wins, so a task is either run or answered unrun, never both.
#[derive(Debug, Default)]
struct Claim(AtomicU8);

impl Claim {
    const QUEUED: u8 = 0;
    const TAKEN: u8 = 1;
    const ABANDONED: u8 = 2;

    /// A worker takes the task; false when its caller gave it up first.
    fn take(&self) -> bool {
        self.0
            .compare_exchange(
                Self::QUEUED,
                Self::TAKEN,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The caller gives the task up; false when a worker took it first.
    fn abandon(&self) -> bool {
        self.0
            .compare_exchange(
                Self::QUEUED,
                Self::ABANDONED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// Gives a task up when its caller stops waiting for any reason (a client that went away drops
/// the request's future), so that no worker runs a job nobody waits for.
struct AbandonOnDrop(Arc<Claim>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

/// What a worker is doing, as health and metrics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum SlotState {
    /// Building a sandbox (or between sandboxes).
    Building = 0,
    /// Waiting for a job with a warm sandbox.
    Idle = 1,
    /// Running a job, or restoring after one.
    Busy = 2,
    /// Gone: the queue closed.
    Exited = 3,
}

/// One worker's state, shared with the pool's handle.
#[derive(Debug, Default)]
struct Slot {
    state: AtomicU8,
    /// The deadline of the guest step in progress (a tool wait moves it on); None when no
    /// step is in progress.
    step: Mutex<Option<Arc<Deadline>>>,
}

/// State shared by a pool's workers and its handle.
#[derive(Debug)]
struct Shared {
    slots: Box<[Slot]>,
    /// Set once the pool has been at its size.
    warmed: AtomicBool,
    /// Set when the pool is dropped: workers stop building.
    closed: AtomicBool,
}

impl Shared {
    fn new(size: usize) -> Self {
        Shared {
            slots: (0..size).map(|_| Slot::default()).collect(),
            warmed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    fn set_state(&self, index: usize, state: SlotState) {
        self.slots[index]
            .state
            .store(state as u8, Ordering::Relaxed);
        let serving = |s| matches!(s, SlotState::Idle | SlotState::Busy);
        if state == SlotState::Idle && self.count(serving) == self.slots.len() {
            self.warmed.store(true, Ordering::Relaxed);
        }
    }

    fn count(&self, which: impl Fn(SlotState) -> bool) -> usize {
        self.slots
            .iter()
            .filter(|slot| {
                which(match slot.state.load(Ordering::Relaxed) {
                    1 => SlotState::Idle,
                    2 => SlotState::Busy,
                    3 => SlotState::Exited,
                    _ => SlotState::Building,
                })
            })
            .count()
    }

    /// Records that worker `index` started a guest step that should end by `deadline`.
    fn step_started(&self, index: usize, deadline: &Arc<Deadline>) {
        *lock(&self.slots[index].step) = Some(deadline.clone());
    }

    fn step_ended(&self, index: usize) {
        *lock(&self.slots[index].step) = None;
    }

    /// Workers whose step has gone on [`STUCK_AFTER`] past its deadline.
    fn stuck(&self) -> usize {
        let now = Instant::now();
        self.slots
            .iter()
            .filter_map(|slot| lock(&slot.step).as_ref().map(|deadline| deadline.at()))
            .filter(|&at| now > at + STUCK_AFTER)
            .count()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A sandbox ready to serve, with the capture its output goes to.
type Sandbox = (Box<dyn Guest>, Arc<OutputCapture>);

/// A running pool. Dropping it closes the queue; workers finish the queued jobs and exit.
#[derive(Debug)]
pub struct Pool {
    language: Language,
    size: usize,
    queue_depth: usize,
    queue: Arc<FairQueue<Task>>,
    shared: Arc<Shared>,
    runtime: Runtime,
    /// How its sandboxes' saved states go to disk; None: they cannot.
    state_codec: Result<Arc<dyn StateCodec>, String>,
    /// The files in memory its template is mapped from.
    template_memory: Vec<MemoryFile>,
}

impl Pool {
    /// Prepares the language's template and builds the pool's first sandbox from it here and
    /// now, so that a language whose sandboxes cannot be built at all fails the start. The
    /// other sandboxes warm in the background;
    /// [`Pool::counts`] shows their progress.
    pub fn start(
        config: PoolConfig,
        watchdog: Watchdog,
        metrics: PoolMetrics,
    ) -> Result<Pool, PoolError> {
        let language = config.language;
        if let Some(prepared) = config.factory.prepare().map_err(PoolError::Build)? {
            metrics.template(prepared.source.as_str(), prepared.took);
            let name = match prepared.source {
                Source::Built => "template build",
                Source::Loaded => "template load",
            };
            let began = Instant::now()
                .checked_sub(prepared.took)
                .unwrap_or_else(Instant::now);
            config.tracer.root().record(name, began, || {
                vec![Attribute::new("hyperlightd.language", language.as_str())]
            });
            info!(
                language = %config.language,
                source = prepared.source.as_str(),
                elapsed_ms = prepared.took.as_millis() as u64,
                "template ready"
            );
        }
        let started = Instant::now();
        let first =
            worker::build_sandbox(config.factory.as_ref(), &metrics).map_err(PoolError::Build)?;
        info!(
            language = %config.language,
            elapsed_ms = started.elapsed().as_millis() as u64,
            priming = config.priming.as_str(),
            "first sandbox built from the template"
        );
        let queue = FairQueue::new(config.queue_depth);
        let shared = Arc::new(Shared::new(config.size));
        let mut first = Some(first);
        for index in 0..config.size {
            let worker = Worker {
                language: config.language,
                index,
                heap_bytes: config.heap_bytes,
                build_limit: config.build_limit,
                factory: config.factory.clone(),
                priming: config.priming,
                jobs: queue.clone(),
                shared: shared.clone(),
                watchdog: watchdog.clone(),
                metrics: metrics.clone(),
            };
            let warm = first.take();
            let name = format!("{}-{index}", config.language);
            crate::sys::seccomp::spawn(Kind::Guest, name, move || worker.run(warm))
                .map_err(PoolError::Spawn)?;
        }
        Ok(Pool {
            language: config.language,
            size: config.size,
            queue_depth: config.queue_depth,
            queue,
            shared,
            runtime: config.factory.runtime(),
            state_codec: config.factory.state_codec(),
            template_memory: config.factory.template_memory(),
        })
    }

    /// Queues `job` to run in `scope` and waits for its outcome. A full queue is refused at
    /// once; a job still waiting for a sandbox at its deadline is answered then with
    /// [`ExecError::NoSandboxAvailable`].
    pub async fn submit(&self, job: Job, scope: Scope) -> Result<Ran, ExecError> {
        let (reply, mut answer) = oneshot::channel();
        let (deadline, timeout) = (job.deadline, job.timeout);
        let running = Deadline::new(deadline);
        let claim = Arc::new(Claim::default());
        let queued = Instant::now();
        let task = Task {
            job,
            deadline: running.clone(),
            scope,
            queued,
            claim: claim.clone(),
            reply,
        };
        let caller = task.job.caller.principal();
        let key = task.resumes().map(SavedState::key);
        self.queue
            .push(caller, task, key)
            .map_err(|refused| match refused {
                Refused::Full => ExecError::Overloaded {
                    language: self.language,
                    queued: self.queue_depth,
                },
                Refused::Closed => ExecError::PoolGone(self.language),
            })?;
        let claim = AbandonOnDrop(claim);
        tokio::select! {
            answered = &mut answer => return self.answered(answered),
            () = tokio::time::sleep_until(deadline.into()) => {}
        }
        if claim.0.abandon() {
            return Err(ExecError::NoSandboxAvailable {
                language: self.language,
                timeout,
            });
        }
        // A worker has the job, and stops its guest at the deadline (later by the time the
        // program waited for tools); it answers right after.
        tokio::select! {
            answered = answer => self.answered(answered),
            () = running.passed(ANSWER_GRACE) => {
                error!(language = %self.language, "no worker answered by the deadline; the guest may be stuck");
                // When the worker took the job is not known: counted from when it was queued.
                let outcome = Outcome {
                    started: queued,
                    ran: queued.elapsed(),
                    ..timeout_outcome(timeout, Captured::default())
                };
                Ok(Ran {
                    outcome,
                    after: After::RolledBack("timeout"),
                })
            }
        }
    }

    fn answered(
        &self,
        answer: Result<Result<Ran, ExecError>, oneshot::error::RecvError>,
    ) -> Result<Ran, ExecError> {
        answer.unwrap_or_else(|_| {
            Err(ExecError::Internal(format!(
                "the {} worker stopped before answering",
                self.language
            )))
        })
    }

    /// What runs the pool's programs, as its template reported it.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// How its sandboxes' saved states go to disk, for sessions that outlive the daemon.
    pub fn state_codec(&self) -> Result<Arc<dyn StateCodec>, String> {
        self.state_codec.clone()
    }

    /// The files in memory its template is mapped from, which its sandboxes' states share.
    pub fn template_memory(&self) -> &[MemoryFile] {
        &self.template_memory
    }

    /// Sandboxes idle, in all, and the pool's size.
    pub fn counts(&self) -> PoolCounts {
        PoolCounts {
            ready: self.shared.count(|s| s == SlotState::Idle),
            total: self
                .shared
                .count(|s| matches!(s, SlotState::Idle | SlotState::Busy)),
            target: self.size,
        }
    }

    /// Whether the pool has ever been at its size.
    pub fn warmed(&self) -> bool {
        self.shared.warmed.load(Ordering::Relaxed)
    }

    /// Workers whose guest step (a call, a restore, a build) has gone on long past its limit.
    pub fn stuck_workers(&self) -> usize {
        self.shared.stuck()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.queue.close();
    }
}

#[cfg(test)]
mod tests;
