//! A pool of warm sandboxes of one language: one worker thread per sandbox, fed from a bounded
//! queue, answering through a oneshot channel.
//!
//! Guest calls block their thread for their whole run, so they never run on the async runtime's
//! workers. A worker sends its answer *before* it restores its sandbox to the warm snapshot, so
//! the restore is off the request's path. Time limits are enforced from outside the guest, with
//! the sandbox's interrupt handle.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use hyperlight_host::HyperlightError;
use hyperlightd_api::{ErrorBody, ErrorKind, ExecStatus, Language, SandboxCounts};
use tokio::sync::oneshot;
use tracing::{debug, error, info, warn};

use super::guest::{Captured, Guest, GuestFactory, OutputCapture, RunnerReply};
use crate::executor::{ExecError, Job, Outcome};

/// How long past a job's deadline the caller waits for its worker before answering "timeout"
/// itself. A worker stops its guest at the deadline; this only bounds the wait should a guest
/// not stop (a hypervisor fault), so that no request waits forever.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// What a pool is built from.
#[derive(Clone)]
pub struct PoolConfig {
    /// The pool's language.
    pub language: Language,
    /// Sandboxes (and worker threads).
    pub size: usize,
    /// Jobs that may wait for a sandbox.
    pub queue_depth: usize,
    /// Cap on the output of one execution.
    pub max_output_bytes: usize,
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
    reply: oneshot::Sender<Outcome>,
}

/// Counts shared by a pool's workers.
#[derive(Debug, Default)]
struct Counts {
    total: AtomicUsize,
    idle: AtomicUsize,
}

/// A running pool. Dropping it closes the queue; workers finish the queued jobs and exit.
#[derive(Debug)]
pub struct Pool {
    language: Language,
    queue_depth: usize,
    queue: Sender<Task>,
    counts: Arc<Counts>,
}

impl Pool {
    /// Builds every sandbox of the pool, in parallel, and returns once all are warm. The first
    /// sandbox that fails to build fails the whole pool.
    pub fn start(
        config: PoolConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<Pool, HyperlightError> {
        let (queue, jobs) = crossbeam_channel::bounded::<Task>(config.queue_depth);
        let counts = Arc::new(Counts::default());
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(config.size);
        for index in 0..config.size {
            let worker = Worker {
                language: config.language,
                index,
                factory: config.factory.clone(),
                jobs: jobs.clone(),
                counts: counts.clone(),
                runtime: runtime.clone(),
                max_output_bytes: config.max_output_bytes,
            };
            let ready = ready_tx.clone();
            thread::Builder::new()
                .name(format!("{}-{index}", config.language))
                .spawn(move || worker.run(ready))
                .map_err(|e| HyperlightError::Error(format!("spawning a worker thread: {e}")))?;
        }
        drop(ready_tx);
        for _ in 0..config.size {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(HyperlightError::Error(
                        "a worker thread exited before its sandbox was ready".into(),
                    ));
                }
            }
        }
        Ok(Pool {
            language: config.language,
            queue_depth: config.queue_depth,
            queue,
            counts,
        })
    }

    /// Queues `job` and waits for its outcome. A full queue is refused at once.
    pub async fn submit(&self, job: Job) -> Result<Outcome, ExecError> {
        let (reply, answer) = oneshot::channel();
        let deadline = job.deadline;
        let timeout = job.timeout;
        self.queue
            .try_send(Task { job, reply })
            .map_err(|e| match e {
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

    /// Sandboxes ready and in all.
    pub fn counts(&self) -> SandboxCounts {
        SandboxCounts {
            ready: self.counts.idle.load(Ordering::Relaxed),
            total: self.counts.total.load(Ordering::Relaxed),
        }
    }
}

/// One worker thread and the sandbox it owns.
struct Worker {
    language: Language,
    index: usize,
    factory: Arc<dyn GuestFactory>,
    jobs: Receiver<Task>,
    counts: Arc<Counts>,
    runtime: tokio::runtime::Handle,
    max_output_bytes: usize,
}

impl Worker {
    fn run(self, ready: crossbeam_channel::Sender<Result<(), HyperlightError>>) {
        let output = Arc::new(OutputCapture::new(self.max_output_bytes));
        let started = Instant::now();
        let mut guest = match self.factory.create(output.clone()) {
            Ok(guest) => guest,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        debug!(language = %self.language, index = self.index, elapsed_ms = started.elapsed().as_millis() as u64, "sandbox warm");
        self.counts.total.fetch_add(1, Ordering::Relaxed);
        self.counts.idle.fetch_add(1, Ordering::Relaxed);
        let _ = ready.send(Ok(()));
        drop(ready);

        for task in self.jobs.iter() {
            self.counts.idle.fetch_sub(1, Ordering::Relaxed);
            let span = task.job.span.clone();
            let _entered = span.enter();
            if task.reply.is_closed() {
                debug!("caller went away while queued; not running");
                self.counts.idle.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let outcome = self.execute(guest.as_mut(), &output, &task.job);
            let _ = task.reply.send(outcome);
            // The answer is on its way; now return the sandbox to its warm state.
            let reset = Instant::now();
            match guest.reset() {
                Ok(()) => debug!(
                    reset_ms = reset.elapsed().as_secs_f64() * 1e3,
                    "sandbox reset"
                ),
                Err(e) => {
                    warn!("restoring the sandbox failed ({e}); building a new one");
                    output.take();
                    match self.factory.create(output.clone()) {
                        Ok(fresh) => guest = fresh,
                        Err(e) => {
                            error!("building a replacement sandbox failed: {e}; this worker stops");
                            self.counts.total.fetch_sub(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            }
            self.counts.idle.fetch_add(1, Ordering::Relaxed);
        }
        info!(language = %self.language, index = self.index, "queue closed; worker exits");
        self.counts.total.fetch_sub(1, Ordering::Relaxed);
        self.counts.idle.fetch_sub(1, Ordering::Relaxed);
    }

    /// Runs one job under its deadline and turns what happened into an outcome.
    fn execute(&self, guest: &mut dyn Guest, output: &OutputCapture, job: &Job) -> Outcome {
        let budget = job.deadline.saturating_duration_since(Instant::now());
        if budget.is_zero() {
            return timeout_outcome(job.timeout, Captured::default());
        }
        let interrupt = guest.interrupt_handle();
        let watchdog = self.runtime.spawn(async move {
            tokio::time::sleep(budget).await;
            interrupt.kill();
        });
        let result = guest.run(&job.code);
        watchdog.abort();
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
        error: Some(ErrorBody::new(
            ErrorKind::Timeout,
            format!(
                "the program did not finish within its time limit of {} ms",
                timeout.as_millis()
            ),
        )),
        ..error_outcome(ErrorBody::new(ErrorKind::Timeout, ""), captured)
    }
}
