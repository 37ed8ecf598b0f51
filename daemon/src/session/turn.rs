//! A session's exec, as the executor drives it: wait for the session's turn, run the job from
//! the state the turn hands out, and give the turn the worker's answer. The turn keeps the
//! session locked until the state the exec left is saved; its next exec is let in then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use tracing::{debug, error};

use super::history::History;
use super::{Image, Session, Sessions};
use crate::job::{After, ExecError, Outcome, Ran, Resume, SessionRef};

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
}

impl Sessions {
    /// Waits for an exec's turn in `session`, in arrival order, until `deadline`, moved on by
    /// the time the session spends saving meanwhile (see [`super::SaveClock`]). The session may
    /// have been deleted, or have expired, meanwhile: then it is not found. `request_id` is
    /// the exec's.
    pub async fn turn(
        self: &Arc<Self>,
        session: Arc<Session>,
        deadline: Instant,
        timeout: Duration,
        request_id: u64,
    ) -> Result<Turn, ExecError> {
        let (history, deadline) = session.wait_turn(deadline, timeout).await?;
        let session = self.find(session.owner, &session.id)?;
        session.meta().busy = true;
        Ok(Turn {
            sessions: self.clone(),
            session,
            history: Some(history),
            deadline,
            request_id,
        })
    }
}

impl Turn {
    /// The job's deadline: the one it was given, moved on by the saving it waited for.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Where the exec starts: the state and files of the session's newest checkpoint (None:
    /// the warm state).
    pub fn resume(&self) -> Option<Resume> {
        let image = self.history.as_ref()?.head().image()?;
        Some(Resume {
            state: image.state(),
            files: image.files().clone(),
        })
    }

    /// Takes the worker's answer: the outcome goes back at once, naming the session and the
    /// checkpoint the exec left it at (one still being saved, for an exec whose state is
    /// kept); the session stays locked until that state is saved.
    pub fn finish(mut self, ran: Result<Ran, ExecError>) -> Result<Outcome, ExecError> {
        let (sessions, session) = (self.sessions.clone(), self.session.clone());
        let Some(mut history) = self.history.take() else {
            return Err(ExecError::Internal(
                "a session's turn finished twice".to_owned(),
            ));
        };
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
            After::Saving(_) => history.reserve(),
            After::Unchanged | After::RolledBack(_) => history.head().number(),
        };
        let lost = {
            let mut meta = session.meta();
            meta.execs += 1;
            meta.last_used = Instant::now();
            meta.lost.take()
        };
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
                let request_id = self.request_id;
                tokio::spawn(async move {
                    match saved.await {
                        Ok(Some(saved)) => {
                            let ledger = sessions.ledgers[&session.language].clone();
                            let image = Arc::new(Image::new(saved, ledger));
                            history.push(checkpoint, request_id, image);
                        }
                        _ => {
                            sessions.metrics.save_failed(session.language);
                            let head = history.head().number();
                            session.meta().lose(head);
                            error!(session = %session.id, checkpoint, head, "saving the session's state after an exec failed: that exec's state is lost, the session is at its checkpoint from before it");
                        }
                    }
                    let mut meta = session.meta();
                    meta.record(&history);
                    meta.busy = false;
                    meta.last_used = Instant::now();
                    drop(meta);
                    drop(saving);
                    drop(history);
                });
            }
        }
        Ok(outcome)
    }
}

impl Drop for Turn {
    /// A turn dropped unfinished ran nothing: the session is free again, as it was.
    fn drop(&mut self) {
        if self.history.take().is_some() {
            self.session.meta().busy = false;
        }
    }
}
