//! A session's exec, as the executor drives it: wait for the session's turn, run the job from
//! the state the turn hands out, and give the turn the worker's answer. The turn keeps the
//! session locked until the state the exec left is saved; its next exec is let in then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use tracing::{debug, error, warn};

use super::durable::OnDisk;
use super::history::History;
use super::{Image, Session, Sessions};
use crate::job::{After, ExecError, Outcome, Ran, Resume, Saved, SessionRef};
use crate::telemetry::Trace;

/// A session exec's turn: the session is its alone until [`finish`](Turn::finish) has saved
/// what the exec left (or until the turn is dropped, for an exec that never ran).
#[derive(Debug)]
pub struct Turn {
    sessions: Arc<Sessions>,
    session: Arc<Session>,
    /// None once finished.
    history: Option<OwnedMutexGuard<History>>,
    deadline: Instant,
    /// The exec's request id, which the checkpoint it makes records.
    request_id: u64,
    /// The exec's place in a trace, for the spans of what follows its answer (the checkpoint's
    /// write), which do not keep its request's span open.
    trace: Trace,
}

impl Sessions {
    /// Waits for an exec's turn in `session`, in arrival order, until `deadline`, moved on by
    /// the time the session spends saving meanwhile (see [`super::SaveClock`]). The session may
    /// have been deleted, or have expired, meanwhile: then it is not found. `request_id` and
    /// `trace` are the exec's.
    pub async fn turn(
        self: &Arc<Self>,
        session: Arc<Session>,
        (deadline, timeout): (Instant, Duration),
        request_id: u64,
        trace: &Trace,
    ) -> Result<Turn, ExecError> {
        session.usable()?;
        let (history, deadline) = session.wait_turn(deadline, timeout).await?;
        let session = self.find(&session.owner, &session.id)?;
        session.meta().busy = true;
        Ok(Turn {
            sessions: self.clone(),
            session,
            history: Some(history),
            deadline,
            request_id,
            trace: trace.detached(),
        })
    }
}

impl Turn {
    /// The job's deadline: the one it was given, moved on by the saving it waited for.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Where the exec starts: the state and files of the session's newest checkpoint (None:
    /// the warm state), brought back from disk if it is parked there. A checkpoint that cannot
    /// be brought back is dropped, and the session goes back to the one before it, saying so
    /// (its answer carries the loss); when none is left, the session's state is gone.
    pub async fn resume(&mut self) -> Result<Option<Resume>, ExecError> {
        loop {
            let history = self.history.as_mut().ok_or_else(finished_twice)?;
            let head = history.head();
            if let Some(image) = head.image() {
                return Ok(Some(Resume {
                    state: image.state(),
                    files: image.files().clone(),
                }));
            }
            let Some(disk) = head.disk().cloned() else {
                return Ok(None);
            };
            let number = head.number();
            match self.sessions.bring_back(&self.session, &disk).await {
                Ok(image) => {
                    let history = self.history.as_mut().ok_or_else(finished_twice)?;
                    history.unpark(number, image);
                    self.session.meta().record(history);
                }
                Err(why) => self.refuse_head(&why.to_string())?,
            }
        }
    }

    /// Drops the newest checkpoint, which could not be brought back (`why`): the session is at
    /// the one before, and has lost the exec that made it. An error when none is left.
    fn refuse_head(&mut self, why: &str) -> Result<(), ExecError> {
        let (sessions, session) = (&self.sessions, &self.session);
        let history = self.history.as_mut().ok_or_else(finished_twice)?;
        let number = history.head().number();
        let Some(refused) = history.refuse_head() else {
            let why = format!("checkpoint {number}: {why}");
            let _ = session.gone.set(why.clone());
            error!(session = %session.id, "no checkpoint of the session can be brought back: its state is lost ({why})");
            return Err(ExecError::SessionLost {
                id: session.id.clone(),
                why,
            });
        };
        sessions.drop_from_disk(std::slice::from_ref(&refused));
        let head = history.head().number();
        let mut meta = session.meta();
        meta.lose(head);
        meta.record(history);
        drop(meta);
        session.record(history);
        warn!(session = %session.id, refused = number, head, "the session is back at an older checkpoint, and says so");
        Ok(())
    }

    /// Takes the worker's answer: the outcome goes back at once, naming the session and the
    /// checkpoint the exec left it at (one still being saved, for an exec whose state is
    /// kept; the journal names it before the answer goes); the session stays locked until that
    /// state is saved.
    pub fn finish(mut self, ran: Result<Ran, ExecError>) -> Result<Outcome, ExecError> {
        let (sessions, session) = (self.sessions.clone(), self.session.clone());
        let mut history = self.history.take().ok_or_else(finished_twice)?;
        let Ran { mut outcome, after } = match ran {
            Ok(ran) => ran,
            Err(e) => {
                session.meta().busy = false;
                return Err(e);
            }
        };
        sessions
            .metrics
            .exec(session.language, outcome.status.as_str());
        let checkpoint = match &after {
            After::Saving(_) => history.reserve(self.request_id),
            After::Unchanged | After::RolledBack(_) => history.head().number(),
        };
        let lost = {
            let mut meta = session.meta();
            meta.execs = meta.execs.saturating_add(1);
            meta.touch();
            meta.lost.take()
        };
        // On disk before the answer goes: a daemon that stops before the checkpoint itself is
        // written knows, when it starts again, that this exec was answered.
        session.record(&history);
        outcome.session = Some(SessionRef {
            id: session.id.clone(),
            rolled_back: matches!(after, After::RolledBack(_)),
            checkpoint,
            lost,
        });
        match after {
            After::Unchanged => session.meta().busy = false,
            After::RolledBack(reason) => {
                sessions.metrics.rolled_back(session.language, reason);
                debug!(session = %session.id, reason, "session rolled back");
                session.meta().busy = false;
            }
            After::Saving(saved) => {
                let saving = session.saving.start();
                let answered = Instant::now();
                let trace = self.trace.clone();
                tokio::spawn(async move {
                    let saved = saved.await.ok().flatten();
                    let made = (answered, trace);
                    sessions.keep(&session, &mut history, checkpoint, saved, made);
                    let mut meta = session.meta();
                    meta.record(&history);
                    meta.touch();
                    drop(meta);
                    // Its idle timeout counts from now on, on disk too.
                    session.record(&history);
                    session.meta().busy = false;
                    drop(saving);
                    drop(history);
                });
            }
        }
        Ok(outcome)
    }
}

impl Sessions {
    /// Keeps the state an answered exec left as `session`'s checkpoint `number` (and hands it
    /// to the writer), or, when saving it failed (None), records the loss.
    fn keep(
        &self,
        session: &Session,
        history: &mut History,
        number: u64,
        saved: Option<Saved>,
        (answered, trace): (Instant, Trace),
    ) {
        let Some(saved) = saved else {
            self.metrics.save_failed(session.language);
            history.cancel();
            let head = history.head().number();
            session.meta().lose(head);
            session.record(history);
            error!(session = %session.id, checkpoint = number, head, "saving the session's state after an exec failed: that exec's state is lost, the session is at its checkpoint from before it");
            return;
        };
        let ledger = self.ledgers[&session.language].clone();
        let image = Arc::new(Image::new(saved, ledger));
        let disk = session
            .durable()
            .map(|disk| OnDisk::pending(disk.checkpoint_dir(number)));
        let dropped = history.push(image.clone(), disk.clone());
        self.drop_from_disk(&dropped);
        if let Some(disk) = disk {
            self.write(session, number, image, disk, None, (answered, trace));
        }
    }
}

fn finished_twice() -> ExecError {
    ExecError::Internal("a session's turn was used after it finished".to_owned())
}

impl Drop for Turn {
    /// A turn dropped unfinished ran nothing: the session is free again, as it was.
    fn drop(&mut self) {
        if self.history.take().is_some() {
            self.session.meta().busy = false;
        }
    }
}
