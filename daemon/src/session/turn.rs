//! A session's exec, as the executor drives it: wait for the session's turn, run the job from
//! the state the turn hands out, and give the turn the worker's answer. The turn keeps the
//! session locked until the state the exec left is saved; its next exec is let in then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use tracing::{debug, error};

use super::{Image, Session, Sessions};
use crate::job::{After, ExecError, Outcome, Ran, Resume, SessionRef};

/// A session exec's turn: the session is its alone until [`finish`](Turn::finish) has saved
/// what the exec left (or until the turn is dropped, for an exec that never ran).
#[derive(Debug)]
pub struct Turn {
    sessions: Arc<Sessions>,
    session: Arc<Session>,
    /// None once finished.
    image: Option<OwnedMutexGuard<Option<Arc<Image>>>>,
    deadline: Instant,
}

impl Sessions {
    /// Waits for an exec's turn in `session`, in arrival order, until `deadline`, moved on by
    /// the time the session spends saving meanwhile (see [`super::SaveClock`]). The session may
    /// have been deleted, or have expired, meanwhile: then it is not found.
    pub async fn turn(
        self: &Arc<Self>,
        session: Arc<Session>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Turn, ExecError> {
        let (image, deadline) = session.wait_turn(deadline, timeout).await?;
        let session = self.find(session.owner, &session.id)?;
        session.meta().busy = true;
        Ok(Turn {
            sessions: self.clone(),
            session,
            image: Some(image),
            deadline,
        })
    }
}

impl Turn {
    /// The job's deadline: the one it was given, moved on by the saving it waited for.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Where the exec starts: the state and files the session's last exec left (None: the warm
    /// state, for its first).
    pub fn resume(&self) -> Option<Resume> {
        let image = self.image.as_ref()?.as_ref()?;
        Some(Resume {
            state: image.state(),
            files: image.files().clone(),
        })
    }

    /// Takes the worker's answer: the outcome goes back at once, naming the session; the
    /// session stays locked until the state the exec left is saved.
    pub fn finish(mut self, ran: Result<Ran, ExecError>) -> Result<Outcome, ExecError> {
        let (sessions, session) = (self.sessions.clone(), self.session.clone());
        let Some(mut image) = self.image.take() else {
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
        let rolled_back = matches!(after, After::RolledBack(_));
        sessions
            .metrics
            .exec(session.language, outcome.status.as_str());
        outcome.session = Some(SessionRef {
            id: session.id.clone(),
            rolled_back,
        });
        {
            let mut meta = session.meta();
            meta.execs += 1;
            meta.last_used = Instant::now();
        }
        match after {
            After::Unchanged => session.meta().busy = false,
            After::RolledBack(reason) => {
                sessions.metrics.rolled_back(session.language, reason);
                debug!(session = %session.id, reason, "session rolled back");
                session.meta().busy = false;
            }
            After::Saving(saved) => {
                let saving = session.saving.start();
                tokio::spawn(async move {
                    match saved.await {
                        Ok(Some(saved)) => {
                            let ledger = sessions.ledgers[&session.language].clone();
                            let new = Image::new(saved, ledger);
                            session.meta().memory_bytes = new.bytes();
                            *image = Some(Arc::new(new));
                        }
                        _ => {
                            sessions.metrics.save_failed(session.language);
                            error!(session = %session.id, "saving the session's state after an exec failed; the session keeps its state from before that exec");
                        }
                    }
                    let mut meta = session.meta();
                    meta.busy = false;
                    meta.last_used = Instant::now();
                    drop(meta);
                    drop(saving);
                    drop(image);
                });
            }
        }
        Ok(outcome)
    }
}

impl Drop for Turn {
    /// A turn dropped unfinished ran nothing: the session is free again, as it was.
    fn drop(&mut self) {
        if self.image.take().is_some() {
            self.session.meta().busy = false;
        }
    }
}
