//! A worker's steps for a task: where its interpreter starts (the warm snapshot, or a session's
//! saved state), and, for a session, what becomes of the state the task leaves. The worker
//! restores its sandbox to the warm snapshot after every task either way (see [`worker`]).
//!
//! [`worker`]: super::worker

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::Scope;
use super::Task;
use super::worker::{Fate, RESET_LIMIT, Worker};
use crate::job::{After, ExecError, FailureKind, Files, Outcome, Ran, Saved, SavedState, StateRef};
use crate::metrics::{Phase, PhaseStart};
use crate::sandbox::guest::{Guest, GuestError, OutputCapture};
use crate::telemetry::Trace;

impl Worker {
    /// Runs `task` from its scope and answers it; for a session, saves the state it leaves
    /// after the answer has gone. `hot` is the session state the sandbox still holds, if any
    /// (then a task resuming that state loads nothing; the caller has restored the sandbox
    /// for any task that starts warm). Returns what the task left the sandbox fit for, and the
    /// state it holds when that is a session's just saved, exactly (the sandbox stays *hot*).
    pub(super) fn run_task(
        &self,
        guest: &mut dyn Guest,
        output: &OutputCapture,
        task: Task,
        hot: Option<StateRef>,
    ) -> (Fate, Option<StateRef>) {
        let Task {
            job,
            deadline,
            scope,
            reply,
            ..
        } = task;
        let session = matches!(scope, Scope::Session(_));
        if let Err(e) = self.resume(guest, &scope, hot, &job.trace) {
            let _ = reply.send(Err(ExecError::Internal(format!(
                "loading the session's state into a sandbox failed: {e}; nothing ran, and the \
                 session keeps its state"
            ))));
            return (Fate::of(&e), None);
        }
        let (outcome, fate, files) = self.execute(guest, output, (&job, &deadline), session);
        if !session {
            let _ = reply.send(Ok(Ran {
                outcome,
                after: After::Unchanged,
            }));
            return (fate, None);
        }
        match after_session_exec(&outcome, fate) {
            Some(after) => {
                let _ = reply.send(Ok(Ran { outcome, after }));
                (fate, None)
            }
            None => {
                // The request's span ends with its answer; the save's is still in its trace.
                let trace = job.trace.detached();
                drop(job);
                let (handing, saving) = oneshot::channel();
                let _ = reply.send(Ok(Ran {
                    outcome,
                    after: After::Saving(saving),
                }));
                let span = trace.span("checkpoint save", Vec::new);
                let saved = self.save(guest, files);
                if saved.is_none() {
                    span.fail("save_failed");
                }
                span.end();
                let kept = saved.as_ref().map(|saved| saved.state.downgrade());
                let _ = handing.send(saved);
                (fate, kept)
            }
        }
    }

    /// Puts the guest where a task of `scope` starts: a session's state is loaded unless the
    /// sandbox holds it already (`hot`).
    fn resume(
        &self,
        guest: &mut dyn Guest,
        scope: &Scope,
        hot: Option<StateRef>,
        trace: &Trace,
    ) -> Result<(), GuestError> {
        match scope {
            Scope::Fresh => Ok(()),
            Scope::Session(None) => {
                self.metrics.session_resumed("warm");
                Ok(())
            }
            Scope::Session(Some(state)) if hot.is_some_and(|hot| hot.is(state)) => {
                self.metrics.session_resumed("sandbox");
                Ok(())
            }
            Scope::Session(Some(state)) => {
                self.metrics.session_resumed("snapshot");
                let span = trace.span("checkpoint load", Vec::new);
                let loaded = self.load(guest, state);
                if loaded.is_err() {
                    span.fail("load_failed");
                }
                loaded
            }
        }
    }

    /// Loads a session's saved state into the guest.
    fn load(&self, guest: &mut dyn Guest, state: &SavedState) -> Result<(), GuestError> {
        let started = PhaseStart::now();
        let loaded = self.guarded(guest, RESET_LIMIT, |guest| guest.load(state));
        let took = self.metrics.workers.ended(Phase::SessionLoad, started);
        loaded?;
        if guest.is_poisoned() {
            return Err(GuestError::Failed(
                "the sandbox is not ready after loading the state".to_owned(),
            ));
        }
        self.metrics.session_load.observe(took.as_secs_f64());
        Ok(())
    }

    /// Saves the state the session's exec left, and its working directory's `files`; None if
    /// that failed (the session keeps its state from before the exec).
    fn save(&self, guest: &mut dyn Guest, files: Files) -> Option<Saved> {
        let started = PhaseStart::now();
        let state = self.guarded(guest, RESET_LIMIT, |guest| guest.save());
        let took = self.metrics.workers.ended(Phase::SessionSave, started);
        self.metrics.session_save.observe(took.as_secs_f64());
        match state {
            Ok((state, footprint)) => {
                let bytes = footprint.own + files.values().map(|f| f.len() as u64).sum::<u64>();
                debug!(bytes, "session state saved");
                Some(Saved {
                    state,
                    bytes,
                    memory: footprint.memory,
                    files: Arc::new(files),
                })
            }
            Err(e) => {
                warn!("saving the session's state failed: {e}");
                None
            }
        }
    }
}

/// What becomes of a session's state after an exec that ended with `outcome` and left its
/// sandbox `fate`; None: save the state it left.
fn after_session_exec(outcome: &Outcome, fate: Fate) -> Option<After> {
    match fate {
        Fate::Poisoned(reason) | Fate::Broken(reason) => Some(After::RolledBack(reason.as_str())),
        Fate::Sound
            if outcome.error.as_ref().is_some_and(|e| {
                matches!(
                    e.kind,
                    FailureKind::SyntaxError | FailureKind::InstallFailed
                )
            }) =>
        {
            Some(After::Unchanged)
        }
        Fate::Sound => None,
    }
}
