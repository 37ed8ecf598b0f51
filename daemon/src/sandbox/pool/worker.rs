//! One worker thread and the sandbox it owns: take a job, run it under its deadline, answer,
//! restore the sandbox (and prime it when nothing waits), and go again.
//!
//! After every call the sandbox is restored to its warm snapshot, whatever the call did to it:
//! a restore replaces the guest's memory, mappings and vCPU state and clears a poisoned
//! sandbox (hyperlight-host's `MultiUseSandbox::restore`). Only a sandbox whose restore fails,
//! or one a host function panicked in (Hyperlight's own state may be half updated then), is
//! dropped and rebuilt. A panic anywhere else in the worker ends its sandbox, not the worker:
//! the thread starts over with a new one, and says so.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::job::{
    Deadline, ExecError, Failure, FailureKind, FileLimits, Files, Job, Language, Outcome,
    OutputChunk, StateRef, Status, panic_message, tools::ToolExchange,
};
use tracing::{debug, error, info, warn};

use super::queue::FairQueue;
use super::{Priming, Sandbox, Shared, SlotState, Task};
use crate::job::files::{FileError, cap_in_words};
use crate::metrics::{Phase, PhaseStart, PoolMetrics};
use crate::sandbox::guest::{
    BuildError, Captured, Guest, GuestError, GuestFactory, OutputCapture, OutputSink, Program,
    RunnerReply, Stream,
};
use crate::sandbox::watchdog::Watchdog;
use crate::sys::signals::block_process_signals_on_this_thread;
use crate::telemetry::Attribute;

/// How long a restore, or a priming call (fixed code, milliseconds), may take before the
/// sandbox is stopped and replaced.
pub(super) const RESET_LIMIT: Duration = Duration::from_secs(30);

/// First and longest pause between failed attempts to build a replacement sandbox.
const REBUILD_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(10));

/// What left a sandbox poisoned or unusable: the `reason` label of the restore-after-poison and
/// recycle metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recycle {
    /// Stopped at its time limit.
    Timeout,
    /// The program exhausted the sandbox's memory.
    OutOfMemory,
    /// The guest aborted, faulted, or answered with something that is not the protocol.
    GuestFailure,
    /// The program used up a host-side limit and was stopped.
    ResourceLimit,
    /// Restoring the snapshot failed.
    RestoreFailed,
    /// A host function panicked during a call.
    HostPanic,
}

impl Recycle {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Recycle::Timeout => "timeout",
            Recycle::OutOfMemory => "out_of_memory",
            Recycle::GuestFailure => "guest_failure",
            Recycle::ResourceLimit => "resource_limit",
            Recycle::RestoreFailed => "restore_failed",
            Recycle::HostPanic => "host_panic",
        }
    }
}

/// What a call left its sandbox fit for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// Nothing wrong: restore as after every call.
    Sound,
    /// Poisoned: a restore clears it, and is counted.
    Poisoned(Recycle),
    /// Not to be trusted even after a restore: rebuild.
    Broken(Recycle),
}

impl Fate {
    /// The fate of a sandbox whose step (a priming call, say) failed with `error`.
    pub(super) fn of(error: &GuestError) -> Fate {
        match error {
            GuestError::HostPanic(_) => Fate::Broken(Recycle::HostPanic),
            _ => Fate::Poisoned(Recycle::GuestFailure),
        }
    }
}

/// One worker thread and what it needs.
pub(super) struct Worker {
    pub(super) language: Language,
    pub(super) index: usize,
    pub(super) heap_bytes: u64,
    pub(super) build_limit: Duration,
    pub(super) factory: Arc<dyn GuestFactory>,
    pub(super) priming: Priming,
    pub(super) jobs: Arc<FairQueue<Task>>,
    pub(super) shared: Arc<Shared>,
    pub(super) watchdog: Watchdog,
    pub(super) metrics: PoolMetrics,
}

impl Worker {
    /// The thread's body: serves until the queue closes. A panic outside a guest call is a bug;
    /// it costs the sandbox in hand, is logged and counted, and the worker starts over.
    pub(super) fn run(self, warm: Option<Sandbox>) {
        if let Err(e) = block_process_signals_on_this_thread() {
            warn!(
                "cannot block signals on a worker thread ({e}); a signal may interrupt a guest call"
            );
        }
        let mut warm = warm;
        while let Err(panic) =
            panic::catch_unwind(AssertUnwindSafe(|| self.serve_until_closed(warm.take())))
        {
            error!(
                language = %self.language,
                index = self.index,
                "the worker panicked ({}); it starts again with a new sandbox",
                panic_message(&panic)
            );
            self.metrics.worker_restarted();
            self.shared.step_ended(self.index);
            self.shared.set_state(self.index, SlotState::Building);
        }
        self.shared.set_state(self.index, SlotState::Exited);
        info!(language = %self.language, index = self.index, "queue closed; worker exits");
    }

    /// Serves with `warm` (or a sandbox of its own), replacing every sandbox that has to go,
    /// until the queue closes or the pool does.
    fn serve_until_closed(&self, warm: Option<Sandbox>) {
        let mut warm = warm;
        while let Some((mut guest, output)) = warm.take().or_else(|| self.build()) {
            let Some(reason) = self.serve(guest.as_mut(), &output) else {
                return;
            };
            info!(language = %self.language, index = self.index, reason = reason.as_str(), "dropping the sandbox; building a replacement");
            self.metrics.recycled(reason.as_str());
            self.shared.set_state(self.index, SlotState::Building);
        }
    }

    /// Builds a sandbox, retrying with backoff until it succeeds or the pool closes.
    fn build(&self) -> Option<Sandbox> {
        let mut pause = REBUILD_BACKOFF.0;
        loop {
            if self
                .shared
                .closed
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                return None;
            }
            self.shared.step_started(
                self.index,
                &Deadline::new(Instant::now() + self.build_limit),
            );
            let built = build_sandbox(self.factory.as_ref(), &self.metrics);
            self.shared.step_ended(self.index);
            match built {
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
    ///
    /// After a session's exec whose state was saved, the sandbox keeps that state (it is
    /// *hot*) instead of going back to warm: the session's next exec, which the queue hands to
    /// this worker first, then runs with nothing to load and its pages already copied. Any
    /// other task restores the sandbox first (a job resuming another state loads it anyway).
    /// So does a new session's first exec on a primed sandbox: a session starts from the warm
    /// snapshot, not from what the priming program left (its imports, caches and counts), which
    /// its first checkpoint would otherwise hold, and only when no job had waited for priming.
    fn serve(&self, guest: &mut dyn Guest, output: &OutputCapture) -> Option<Recycle> {
        self.shared.set_state(self.index, SlotState::Idle);
        // A new sandbox's first call maps into the VM every page it touches, which costs many
        // times a warm call: its priming program pays for most of that here, whatever
        // `--prime` says of the calls after each restore.
        let mut primed = match self.prime_unless_a_job_waits(guest) {
            Ok(primed) => primed,
            Err(reason) => return Some(reason),
        };
        let mut hot: Option<StateRef> = None;
        while let Some((task, running)) = self.jobs.take(hot.as_ref().map(StateRef::key)) {
            if !task.claim.take() || task.reply.is_closed() || task.job.watcher_gone() {
                debug!("the caller stopped waiting while the job was queued; not running it");
                continue;
            }
            self.metrics
                .queue_wait
                .observe(task.queued.elapsed().as_secs_f64());
            let language = self.language;
            task.job.trace.record("queue wait", task.queued, || {
                vec![Attribute::new("hyperlightd.language", language.as_str())]
            });
            // The restore follows the answer: its span is linked to the request's, not in it.
            let after = task.job.trace.detached();
            let span = task.job.span.clone();
            let _entered = span.enter();
            if Instant::now() >= task.job.deadline {
                // Its whole time limit went on waiting: nothing runs, nothing needs restoring.
                let _ = task.reply.send(Err(ExecError::NoSandboxAvailable {
                    language: self.language,
                    timeout: task.job.timeout,
                }));
                continue;
            }
            self.shared.set_state(self.index, SlotState::Busy);
            if let Some(sink) = &task.job.output {
                // A streamed answer begins: the caller's wait for its head ends here.
                let _ = sink.send(OutputChunk::Running);
            }
            if (hot.is_some() && task.starts_warm()) || (primed && task.starts_session()) {
                // On this task's path (no job found a warm sandbox idle, or a new session
                // found one primed).
                hot = None;
                let restore = task.job.trace.span("restore", Vec::new);
                if let Err(reason) = self.recover(guest, Fate::Sound) {
                    restore.fail(reason.as_str());
                    return Some(reason);
                }
                restore.end();
            }
            // The answer goes out first; whatever happens to the sandbox is off its path.
            let (fate, kept) = self.run_task(guest, output, task, hot.take());
            // Its caller's share of the pool is free again as soon as the job is done.
            drop(running);
            primed = false;
            if let (Fate::Sound, Some(kept)) = (fate, kept) {
                hot = Some(kept);
                self.shared.set_state(self.index, SlotState::Idle);
                continue;
            }
            let restore = after.linked("restore", || {
                vec![Attribute::new("hyperlightd.language", language.as_str())]
            });
            if let Err(reason) = self.recover(guest, fate) {
                restore.fail(reason.as_str());
                return Some(reason);
            }
            restore.end();
            if self.priming == Priming::WhenIdle {
                primed = match self.prime_unless_a_job_waits(guest) {
                    Ok(primed) => primed,
                    Err(reason) => return Some(reason),
                };
            }
            self.shared.set_state(self.index, SlotState::Idle);
        }
        None
    }

    /// Restores `guest` to its warm snapshot after a call that left it `fate`. An error says the
    /// sandbox must be dropped and rebuilt, and why.
    fn recover(&self, guest: &mut dyn Guest, fate: Fate) -> Result<(), Recycle> {
        let poisoned = match fate {
            Fate::Sound => None,
            Fate::Poisoned(reason) => Some(reason),
            Fate::Broken(reason) => return Err(reason),
        };
        let started = PhaseStart::now();
        let restored = self.guarded(guest, RESET_LIMIT, |guest| guest.reset());
        let took = self.metrics.workers.ended(Phase::Restore, started);
        match restored {
            Ok(()) if !guest.is_poisoned() => {
                self.metrics.restore.observe(took.as_secs_f64());
                if let Some(reason) = poisoned {
                    debug!(
                        reason = reason.as_str(),
                        "the poisoned sandbox is restored and back in service"
                    );
                    self.metrics.restored_after_poison(reason.as_str());
                }
                Ok(())
            }
            Ok(()) => {
                warn!("the sandbox is still poisoned after its restore");
                Err(Recycle::RestoreFailed)
            }
            Err(e) => {
                warn!("restoring the sandbox failed: {e}");
                Err(match Fate::of(&e) {
                    Fate::Broken(reason) => reason,
                    _ => Recycle::RestoreFailed,
                })
            }
        }
    }

    /// Priming moves the cost of a sandbox's first writes (and, on a new sandbox, first
    /// touches) off the next request's path, but a job already waiting would wait for all of
    /// it: that job gets the sandbox as it is.
    /// Whether it primed the sandbox.
    fn prime_unless_a_job_waits(&self, guest: &mut dyn Guest) -> Result<bool, Recycle> {
        if self.jobs.is_empty() {
            self.prime(guest)
        } else {
            Ok(false)
        }
    }

    /// Primes a new or freshly restored sandbox: whether a priming program ran in it. A priming
    /// call that fails is undone by another restore; an error says the sandbox must be rebuilt.
    fn prime(&self, guest: &mut dyn Guest) -> Result<bool, Recycle> {
        let started = PhaseStart::now();
        let primed = self.guarded(guest, RESET_LIMIT, |guest| guest.prime());
        let took = self.metrics.workers.ended(Phase::Prime, started);
        match primed {
            Ok(true) => {
                self.metrics.prime.observe(took.as_secs_f64());
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                warn!("priming the sandbox failed: {e}");
                self.recover(guest, Fate::of(&e)).map(|()| false)
            }
        }
    }

    /// Runs `step` on the guest (a request, a restore, a priming call), stopping the guest with
    /// its interrupt handle once `limit` has passed. A panic in a host function (generated
    /// bindings panic on a resource handle they do not know) must not take the worker down: it
    /// fails the step with [`GuestError::HostPanic`].
    pub(super) fn guarded<T>(
        &self,
        guest: &mut dyn Guest,
        limit: Duration,
        step: impl FnOnce(&mut dyn Guest) -> Result<T, GuestError>,
    ) -> Result<T, GuestError> {
        self.guarded_for(guest, &Deadline::new(Instant::now() + limit), None, step)
    }

    /// [`guarded`](Self::guarded) until `deadline` (whose clock a tool wait stops), stopping
    /// the guest as soon as `caller` is closed too.
    fn guarded_for<T>(
        &self,
        guest: &mut dyn Guest,
        deadline: &Arc<Deadline>,
        caller: Option<OutputSink>,
        step: impl FnOnce(&mut dyn Guest) -> Result<T, GuestError>,
    ) -> Result<T, GuestError> {
        self.shared.step_started(self.index, deadline);
        let timer = self
            .watchdog
            .arm_until(guest.interrupt_handle(), deadline.clone(), caller);
        let result = panic::catch_unwind(AssertUnwindSafe(|| step(guest)))
            .unwrap_or_else(|panic| Err(GuestError::HostPanic(panic_message(&panic))));
        drop(timer);
        self.shared.step_ended(self.index);
        result
    }

    /// Runs one job under its deadline (in the session's scope with `session`) and turns what
    /// happened into an outcome, what it did to the sandbox, and the working directory it left.
    pub(super) fn execute(
        &self,
        guest: &mut dyn Guest,
        output: &OutputCapture,
        (job, deadline): (&Job, &Arc<Deadline>),
        session: bool,
    ) -> (Outcome, Fate, Files) {
        output.begin(job.max_output_bytes, job.output.clone());
        let language = self.language;
        let call = job.trace.span("guest call", || {
            vec![Attribute::new("hyperlightd.language", language.as_str())]
        });
        let started = Instant::now();
        let phase = PhaseStart::now();
        let result = self.guarded_for(guest, deadline, job.output.clone(), |guest| {
            let program = Program {
                code: &job.code,
                policy: job.policy.as_ref(),
                session,
                files: &job.files,
                file_limits: job.file_limits,
                env: &job.env,
                tools: job.tools.as_ref(),
                egress: job.egress.as_ref(),
                packages: &job.packages,
                trace: call.trace(),
            };
            guest.run(&program, deadline)
        });
        let (files, over) = guest.take_files();
        let ran = self.metrics.workers.ended(Phase::Call, phase);
        self.metrics.guest_call.observe(ran.as_secs_f64());
        debug!(call_ms = ran.as_secs_f64() * 1e3, "guest call returned");
        let result = result.map(|reply| RunnerReply::parse(&reply));
        if let (Ok(Ok(RunnerReply::Completed { .. })), Some(cap)) = (&result, over) {
            // Said through the output, so that a streaming caller sees it too.
            output.write_line(Stream::Stderr, &refusal(cap, job.file_limits));
        }
        let captured = output.take();
        // Stopped at the cap, whether the watchdog interrupted the guest first or the guest
        // returned first (its runner ends the program as it sees the cap).
        let capped = job.tools.as_deref().filter(|t| t.stopped_at_wall_clock());
        let (mut outcome, fate) = match (capped, result) {
            (Some(tools), _) => wall_clock_stop(tools, captured),
            (None, result) => match result {
                Ok(parsed) => match parsed {
                    Ok(RunnerReply::Completed { result }) => (
                        Outcome {
                            status: Status::Ok,
                            stdout: captured.stdout,
                            stderr: captured.stderr,
                            truncated: captured.truncated,
                            result,
                            display: captured.display,
                            error: None,
                            session: None,
                            files: changed(&job.files, &files),
                            started,
                            ran,
                        },
                        Fate::Sound,
                    ),
                    Ok(RunnerReply::Failed { error }) => {
                        let mut body = Failure::new(error.kind.into(), error.message);
                        body.violations = error.violations;
                        if let Some(cap) = over
                            && body.kind == FailureKind::Exception
                        {
                            body = file_limit(body, cap, job.file_limits);
                        }
                        (error_outcome(body, captured), Fate::Sound)
                    }
                    Err(message) => (
                        error_outcome(Failure::new(FailureKind::SandboxFailure, message), captured),
                        Fate::Poisoned(Recycle::GuestFailure),
                    ),
                },
                Err(e) => self.failed(e, job, captured),
            },
        };
        (outcome.started, outcome.ran) = (started, ran);
        if let Some(error) = &outcome.error {
            call.fail(error.kind.as_str());
        }
        // Hyperlight knows best whether a sandbox that answered is still sound.
        let fate = match fate {
            Fate::Sound if guest.is_poisoned() => Fate::Poisoned(Recycle::GuestFailure),
            fate => fate,
        };
        (outcome, fate, files)
    }

    /// The outcome of a call that failed with `error`, and what it left the sandbox fit for.
    fn failed(&self, error: GuestError, job: &Job, captured: Captured) -> (Outcome, Fate) {
        if let GuestError::Interrupted = error
            && let Some(tools) = job.tools.as_deref().filter(|t| t.past_wall_clock())
        {
            return wall_clock_stop(tools, captured);
        }
        let (kind, message, fate) = match error {
            GuestError::Interrupted => {
                let mut outcome = timeout_outcome(job.timeout, captured);
                if job.watcher_gone() {
                    // Stopped by the watchdog like a time limit, but because nobody waits:
                    // what the audit line and the log say.
                    info!("the client watching the program's output went away: it was stopped");
                    if let Some(error) = outcome.error.as_mut() {
                        error.message =
                            "the program was stopped: the client watching its output went away"
                                .to_owned();
                    }
                }
                return (outcome, Fate::Poisoned(Recycle::Timeout));
            }
            GuestError::OutOfMemory(_) => (
                FailureKind::OutOfMemory,
                format!(
                    "the program ran out of memory: its sandbox has {} MiB",
                    self.heap_bytes / (1024 * 1024)
                ),
                Fate::Poisoned(Recycle::OutOfMemory),
            ),
            GuestError::Raised(message) => (FailureKind::Exception, message, Fate::Sound),
            GuestError::ResourceLimit(message) => (
                FailureKind::ResourceLimit,
                message,
                Fate::Poisoned(Recycle::ResourceLimit),
            ),
            GuestError::HostPanic(message) => {
                error!("a host function panicked: {message}");
                (
                    FailureKind::SandboxFailure,
                    "the sandbox failed: a fault in the daemon's side of it (see its log)"
                        .to_owned(),
                    Fate::Broken(Recycle::HostPanic),
                )
            }
            GuestError::Failed(e) => {
                warn!("the guest failed: {e}");
                (
                    FailureKind::SandboxFailure,
                    format!("the sandbox failed: {e}"),
                    Fate::Poisoned(Recycle::GuestFailure),
                )
            }
        };
        (error_outcome(Failure::new(kind, message), captured), fate)
    }
}

/// Builds one warm sandbox with an output capture of its own, and records how long it took.
pub(super) fn build_sandbox(
    factory: &dyn GuestFactory,
    metrics: &PoolMetrics,
) -> Result<Sandbox, BuildError> {
    let output = Arc::new(OutputCapture::new());
    let started = Instant::now();
    let guest = factory.create(output.clone())?;
    metrics.create.observe(started.elapsed().as_secs_f64());
    Ok((guest, output))
}

/// The outcome of a program that failed with `error`, with the output it wrote (timed by the
/// caller).
fn error_outcome(error: Failure, captured: Captured) -> Outcome {
    Outcome {
        display: captured.display,
        ..Outcome::failed(error, captured.stdout, captured.stderr, captured.truncated)
    }
}

/// The files of `after` that are not in `before` as they are there.
fn changed(before: &Files, after: &Files) -> Files {
    after
        .iter()
        .filter(|(path, bytes)| before.get(*path) != Some(*bytes))
        .map(|(path, bytes)| (path.clone(), bytes.clone()))
        .collect()
}

/// The line a completed program's stderr ends with when a write of its was refused at a cap
/// (a program may not notice: Python drops an error closing a file it never closed itself, and
/// the native guest's files meet the caps only when they are sent back).
fn refusal(cap: FileError, limits: FileLimits) -> String {
    format!(
        "hyperlightd: a write was refused: the working directory's cap is {}; what was refused \
         is not in the files returned\n",
        cap_in_words(cap, limits)
    )
}

/// An exception after a write was refused at the working directory's `cap`: the program failed
/// for the cap, and the error says so first.
fn file_limit(error: Failure, cap: FileError, limits: FileLimits) -> Failure {
    let which = cap_in_words(cap, limits);
    Failure::new(
        FailureKind::FileLimit,
        format!(
            "the program wrote past its working directory's cap of {which} (the write was \
             refused, and the program failed): {}",
            error.message
        ),
    )
}

pub(super) fn timeout_outcome(timeout: Duration, captured: Captured) -> Outcome {
    let message = format!(
        "the program did not finish within its time limit of {} ms",
        timeout.as_millis()
    );
    error_outcome(Failure::new(FailureKind::Timeout, message), captured)
}

/// The outcome of an exec stopped at the wall-clock cap of executions with tools: a time-out,
/// and a sandbox to replace (the program did not end on its own).
fn wall_clock_stop(tools: &ToolExchange, captured: Captured) -> (Outcome, Fate) {
    let message = format!(
        "the execution ran past the wall-clock cap of executions with tools, {} ms from its \
         arrival (waiting for tools included), and was stopped",
        tools.limits().wall_clock.as_millis()
    );
    let failure = Failure::new(FailureKind::WallClock, message);
    (
        error_outcome(failure, captured),
        Fate::Poisoned(Recycle::Timeout),
    )
}
