//! A pool of warm sandboxes of one language: one worker thread per sandbox, fed from a bounded
//! queue, answering through a oneshot channel.
//!
//! Guest calls block their thread for their whole run, so they never run on the async runtime's
//! workers. A worker sends its answer *before* it restores its sandbox to the warm snapshot, so
//! the restore is off the request's path. Time limits are enforced from outside the guest, with
//! the sandbox's interrupt handle. A sandbox whose call poisoned it (time limit, guest abort,
//! memory fault) is never restored and reused: its worker drops it and builds a new one while
//! the other workers serve.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use hyperlight_host::HyperlightError;
use hyperlightd_api::{ErrorBody, ErrorKind, ExecStatus, Language, SandboxCounts};
use tokio::sync::oneshot;
use tracing::{debug, error, info, warn};

use super::guest::{Captured, Guest, GuestFactory, OutputCapture, RunnerReply};
use crate::executor::{ExecError, Job, Outcome};
use crate::metrics::PoolMetrics;
use crate::sys::signals::block_process_signals_on_this_thread;

/// How long past a job's deadline the caller waits for its worker before answering "timeout"
/// itself. A worker stops its guest at the deadline; this only bounds the wait should a guest
/// not stop (a hypervisor fault), so that no request waits forever.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// How long a restore, or a priming call (fixed code, milliseconds), may take before the
/// sandbox is stopped and replaced.
const RESET_LIMIT: Duration = Duration::from_secs(30);

/// First and longest pause between failed attempts to build a replacement sandbox.
const REBUILD_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(10));

/// Hyperlight's guest error code for a failed physical page allocation ("Out of physical
/// memory"): the program dirtied more memory than the sandbox has.
const GUEST_OUT_OF_MEMORY: u8 = 13;

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
    /// Builds the sandboxes.
    pub factory: Arc<dyn GuestFactory>,
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

/// A job handed to a worker, with the channel its outcome goes back on.
struct Task {
    job: Job,
    queued: Instant,
    reply: oneshot::Sender<Outcome>,
}

/// State shared by a pool's workers and its handle.
#[derive(Debug, Default)]
struct Shared {
    /// Sandboxes built and not yet dropped.
    total: AtomicUsize,
    /// Sandboxes waiting for a job.
    idle: AtomicUsize,
    /// Set once the pool has been at its size.
    warmed: AtomicBool,
    /// Set when the pool is dropped: workers stop building.
    closed: AtomicBool,
}

/// Why a sandbox is dropped instead of restored: the `reason` label of the recycle metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recycle {
    /// Stopped at its time limit.
    Timeout,
    /// The program exhausted the sandbox's memory.
    OutOfMemory,
    /// The guest aborted or faulted.
    GuestFailure,
    /// Restoring the snapshot, or priming after it, failed.
    RestoreFailed,
}

impl Recycle {
    fn as_str(self) -> &'static str {
        match self {
            Recycle::Timeout => "timeout",
            Recycle::OutOfMemory => "out_of_memory",
            Recycle::GuestFailure => "guest_failure",
            Recycle::RestoreFailed => "restore_failed",
        }
    }
}

/// A running pool. Dropping it closes the queue; workers finish the queued jobs and exit.
#[derive(Debug)]
pub struct Pool {
    language: Language,
    size: usize,
    queue_depth: usize,
    queue: Sender<Task>,
    shared: Arc<Shared>,
}

impl Pool {
    /// Builds the pool's first sandbox here and now: it is the probe that tells whether this
    /// host can run the language's guest at all, and its error fails the start. The other
    /// sandboxes warm in the background; [`Pool::counts`] shows their progress.
    pub fn start(
        config: PoolConfig,
        runtime: tokio::runtime::Handle,
        metrics: PoolMetrics,
    ) -> Result<Pool, HyperlightError> {
        let first = build_sandbox(config.factory.as_ref(), &metrics)?;

        let (queue, jobs) = crossbeam_channel::bounded::<Task>(config.queue_depth);
        let shared = Arc::new(Shared::default());
        let mut first = Some(first);
        for index in 0..config.size {
            let worker = Worker {
                language: config.language,
                index,
                size: config.size,
                heap_bytes: config.heap_bytes,
                factory: config.factory.clone(),
                jobs: jobs.clone(),
                shared: shared.clone(),
                runtime: runtime.clone(),
                metrics: metrics.clone(),
            };
            let warm = first.take();
            thread::Builder::new()
                .name(format!("{}-{index}", config.language))
                .spawn(move || worker.run(warm))
                .map_err(|e| HyperlightError::Error(format!("spawning a worker thread: {e}")))?;
        }
        Ok(Pool {
            language: config.language,
            size: config.size,
            queue_depth: config.queue_depth,
            queue,
            shared,
        })
    }

    /// Queues `job` and waits for its outcome. A full queue is refused at once.
    pub async fn submit(&self, job: Job) -> Result<Outcome, ExecError> {
        let (reply, answer) = oneshot::channel();
        let deadline = job.deadline;
        let timeout = job.timeout;
        let task = Task {
            job,
            queued: Instant::now(),
            reply,
        };
        self.queue.try_send(task).map_err(|e| match e {
            TrySendError::Full(_) => ExecError::Overloaded {
                language: self.language,
                queued: self.queue_depth,
            },
            TrySendError::Disconnected(_) => ExecError::ShuttingDown,
        })?;
        match tokio::time::timeout_at((deadline + ANSWER_GRACE).into(), answer).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(ExecError::Internal(format!(
                "the {} worker stopped before answering",
                self.language
            ))),
            Err(_) => {
                error!(language = %self.language, "no worker answered by the deadline; the guest may be stuck");
                Ok(timeout_outcome(timeout, Captured::default()))
            }
        }
    }

    /// Sandboxes idle, in all, and the pool's size.
    pub fn counts(&self) -> SandboxCounts {
        SandboxCounts {
            ready: self.shared.idle.load(Ordering::Relaxed),
            total: self.shared.total.load(Ordering::Relaxed),
            target: self.size,
        }
    }

    /// Whether the pool has ever been at its size.
    pub fn warmed(&self) -> bool {
        self.shared.warmed.load(Ordering::Relaxed)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
    }
}

/// One worker thread and the sandbox it owns.
struct Worker {
    language: Language,
    index: usize,
    size: usize,
    heap_bytes: u64,
    factory: Arc<dyn GuestFactory>,
    jobs: Receiver<Task>,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Handle,
    metrics: PoolMetrics,
}

impl Worker {
    /// Serves with `warm` (or a sandbox of its own), replacing every sandbox that has to go,
    /// until the queue closes.
    fn run(self, warm: Option<(Box<dyn Guest>, Arc<OutputCapture>)>) {
        if let Err(e) = block_process_signals_on_this_thread() {
            warn!(
                "cannot block signals on a worker thread ({e}); a signal may interrupt a guest call"
            );
        }
        let mut warm = warm;
        loop {
            let (mut guest, output) = match warm.take() {
                Some(ready) => ready,
                None => match self.build() {
                    Some(built) => built,
                    None => return,
                },
            };
            let total = self.shared.total.fetch_add(1, Ordering::Relaxed) + 1;
            if total >= self.size {
                self.shared.warmed.store(true, Ordering::Relaxed);
            }
            self.shared.idle.fetch_add(1, Ordering::Relaxed);
            let recycle = self.serve(guest.as_mut(), &output);
            self.shared.total.fetch_sub(1, Ordering::Relaxed);
            match recycle {
                Some(reason) => {
                    info!(language = %self.language, index = self.index, reason = reason.as_str(), "dropping the sandbox; building a replacement");
                    self.metrics.recycled(reason.as_str());
                }
                None => {
                    info!(language = %self.language, index = self.index, "queue closed; worker exits");
                    return;
                }
            }
        }
    }

    /// Builds a sandbox, retrying with backoff until it succeeds or the pool closes.
    fn build(&self) -> Option<(Box<dyn Guest>, Arc<OutputCapture>)> {
        let mut pause = REBUILD_BACKOFF.0;
        loop {
            if self.shared.closed.load(Ordering::Relaxed) {
                return None;
            }
            match build_sandbox(self.factory.as_ref(), &self.metrics) {
                Ok(built) => {
                    debug!(language = %self.language, index = self.index, "sandbox warm");
                    return Some(built);
                }
                Err(e) => {
                    error!(language = %self.language, index = self.index, "building a sandbox failed: {e}; retrying in {pause:?}");
                    thread::sleep(pause);
                    pause = (pause * 2).min(REBUILD_BACKOFF.1);
                }
            }
        }
    }

    /// Runs jobs on `guest` until it must be dropped (and says why), or the queue closes (None).
    fn serve(&self, guest: &mut dyn Guest, output: &OutputCapture) -> Option<Recycle> {
        for task in self.jobs.iter() {
            self.shared.idle.fetch_sub(1, Ordering::Relaxed);
            self.metrics
                .queue_wait
                .observe(task.queued.elapsed().as_secs_f64());
            let span = task.job.span.clone();
            let _entered = span.enter();
            if task.reply.is_closed() {
                debug!("caller went away while queued; not running");
                self.shared.idle.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let outcome = self.execute(guest, output, &task.job);
            let recycle = self.recycle_reason(guest, &outcome);
            // The answer goes out first; whatever happens to the sandbox is off its path.
            let _ = task.reply.send(outcome);
            if recycle.is_some() {
                return recycle;
            }
            let started = Instant::now();
            if let Err(e) = self.guarded(guest, RESET_LIMIT, |guest| guest.reset()) {
                warn!("restoring the sandbox failed: {e}");
                return Some(Recycle::RestoreFailed);
            }
            self.metrics
                .restore
                .observe(started.elapsed().as_secs_f64());
            // Priming moves the cost of the first writes after the restore off the next
            // request's path, but a job already waiting would wait for all of it: that job
            // gets the sandbox as it is.
            if self.jobs.is_empty() {
                let started = Instant::now();
                match self.guarded(guest, RESET_LIMIT, |guest| guest.prime()) {
                    Ok(true) => self.metrics.prime.observe(started.elapsed().as_secs_f64()),
                    Ok(false) => {}
                    Err(e) => {
                        warn!("priming the sandbox failed: {e}");
                        return Some(Recycle::RestoreFailed);
                    }
                }
            }
            self.shared.idle.fetch_add(1, Ordering::Relaxed);
        }
        self.shared.idle.fetch_sub(1, Ordering::Relaxed);
        None
    }

    /// Runs `step` on the guest (a request, a restore, a priming call), stopping the guest with
    /// its interrupt handle once `limit` has passed. A panic in a host function (generated
    /// bindings panic on a resource handle they do not know) must not take the worker down: it
    /// fails the step, and the sandbox, whose host-side state it may have left half-updated, is
    /// replaced.
    fn guarded<T>(
        &self,
        guest: &mut dyn Guest,
        limit: Duration,
        step: impl FnOnce(&mut dyn Guest) -> Result<T, HyperlightError>,
    ) -> Result<T, HyperlightError> {
        let interrupt = guest.interrupt_handle();
        let watchdog = self.runtime.spawn(async move {
            tokio::time::sleep(limit).await;
            interrupt.kill();
        });
        let result = panic::catch_unwind(AssertUnwindSafe(|| step(guest)))
            .unwrap_or_else(|panic| Err(panicked(&panic)));
        watchdog.abort();
        result
    }

    /// Whether the call left the sandbox unfit for reuse, and why.
    fn recycle_reason(&self, guest: &dyn Guest, outcome: &Outcome) -> Option<Recycle> {
        let kind = outcome.error.as_ref().map(|e| e.kind);
        // A failure the runtime caught and reported (an exception, even its own out-of-memory
        // error) leaves the sandbox sound, and the restore undoes it. A poisoned sandbox, or one
        // that failed in a way nobody explained, is not trusted again.
        if !guest.is_poisoned() && kind != Some(ErrorKind::SandboxFailure) {
            return None;
        }
        Some(match kind {
            Some(ErrorKind::Timeout) => Recycle::Timeout,
            Some(ErrorKind::OutOfMemory) => Recycle::OutOfMemory,
            _ => Recycle::GuestFailure,
        })
    }

    /// Runs one job under its deadline and turns what happened into an outcome.
    fn execute(&self, guest: &mut dyn Guest, output: &OutputCapture, job: &Job) -> Outcome {
        let budget = job.deadline.saturating_duration_since(Instant::now());
        if budget.is_zero() {
            return timeout_outcome(job.timeout, Captured::default());
        }
        output.begin(job.max_output_bytes);
        let call = Instant::now();
        let result = self.guarded(guest, budget, |guest| guest.run(&job.code, job.deadline));
        let call = call.elapsed();
        self.metrics.guest_call.observe(call.as_secs_f64());
        debug!(call_ms = call.as_secs_f64() * 1e3, "guest call returned");
        let captured = output.take();
        match result {
            Ok(reply) => match RunnerReply::parse(&reply) {
                Ok(RunnerReply::Completed { result }) => Outcome {
                    status: ExecStatus::Ok,
                    stdout: captured.stdout,
                    stderr: captured.stderr,
                    truncated: captured.truncated,
                    result,
                    error: None,
                },
                Ok(RunnerReply::Failed { error }) => {
                    error_outcome(ErrorBody::new(error.kind.into(), error.message), captured)
                }
                Err(message) => {
                    error_outcome(ErrorBody::new(ErrorKind::SandboxFailure, message), captured)
                }
            },
            Err(HyperlightError::ExecutionCanceledByHost()) => {
                timeout_outcome(job.timeout, captured)
            }
            Err(HyperlightError::GuestAborted(GUEST_OUT_OF_MEMORY, _)) => error_outcome(
                ErrorBody::new(
                    ErrorKind::OutOfMemory,
                    format!(
                        "the program ran out of memory: its sandbox has {} MiB",
                        self.heap_bytes / (1024 * 1024)
                    ),
                ),
                captured,
            ),
            Err(HyperlightError::GuestError(_, message)) => {
                error_outcome(ErrorBody::new(ErrorKind::Exception, message), captured)
            }
            Err(e) => {
                warn!("the guest failed: {e}");
                error_outcome(
                    ErrorBody::new(
                        ErrorKind::SandboxFailure,
                        format!("the sandbox failed: {e}"),
                    ),
                    captured,
                )
            }
        }
    }
}

/// The error for a call during which a host function panicked.
fn panicked(panic: &Box<dyn std::any::Any + Send>) -> HyperlightError {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    HyperlightError::Error(format!("a host function panicked during the call: {what}"))
}

/// Builds one warm sandbox with an output capture of its own, and records how long it took.
fn build_sandbox(
    factory: &dyn GuestFactory,
    metrics: &PoolMetrics,
) -> Result<(Box<dyn Guest>, Arc<OutputCapture>), HyperlightError> {
    let output = Arc::new(OutputCapture::new());
    let started = Instant::now();
    let guest = factory.create(output.clone())?;
    metrics.create.observe(started.elapsed().as_secs_f64());
    Ok((guest, output))
}

fn error_outcome(error: ErrorBody, captured: Captured) -> Outcome {
    Outcome {
        status: ExecStatus::Error,
        stdout: captured.stdout,
        stderr: captured.stderr,
        truncated: captured.truncated,
        result: serde_json::Value::Null,
        error: Some(error),
    }
}

fn timeout_outcome(timeout: Duration, captured: Captured) -> Outcome {
    Outcome {
        status: ExecStatus::Timeout,
        ..error_outcome(
            ErrorBody::new(
                ErrorKind::Timeout,
                format!(
                    "the program did not finish within its time limit of {} ms",
                    timeout.as_millis()
                ),
            ),
            captured,
        )
    }
}
