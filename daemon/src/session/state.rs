//! What callers do with a session's state between execs: fork it, read its files, list its
//! checkpoints, roll it back. Each waits for the execs that arrived before it (their turns,
//! and the saving of what they left), so that it sees the state they left.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tracing::info;

use super::history::History;
use super::{Session, Sessions};
use crate::job::{CheckpointInfo, ExecError, Files, SessionInfo};

impl Sessions {
    /// A new session of `owner` whose checkpoint 0 is its session `id`'s checkpoint
    /// `checkpoint` (its newest when None), after the execs that arrived before (waiting at
    /// most `wait` for them). The origin is not changed.
    pub async fn fork(
        &self,
        owner: u32,
        id: &str,
        checkpoint: Option<u64>,
        wait: Duration,
    ) -> Result<SessionInfo, ExecError> {
        let (origin, history) = self.settled(owner, id, wait).await?;
        let start = match checkpoint {
            Some(number) => history.get(number)?,
            None => history.head(),
        };
        let (image, from) = (start.image().cloned(), start.number());
        drop(history);
        let fork = self.insert(owner, origin.language, origin.idle_timeout, image)?;
        self.metrics.created(origin.language, "fork");
        info!(session = %fork.id, origin = %id, checkpoint = from, "session forked");
        Ok(fork.info(&self.settings))
    }

    /// The working directory of `owner`'s session `id` as its last exec left it, after the
    /// execs that arrived before (waiting at most `wait` for them).
    pub async fn files(
        &self,
        owner: u32,
        id: &str,
        wait: Duration,
    ) -> Result<Arc<Files>, ExecError> {
        let (_, history) = self.settled(owner, id, wait).await?;
        Ok(history
            .head()
            .image()
            .map(|image| image.files().clone())
            .unwrap_or_default())
    }

    /// The checkpoints `owner`'s session `id` keeps, oldest first, after the execs that
    /// arrived before (waiting at most `wait` for them).
    pub async fn checkpoints(
        &self,
        owner: u32,
        id: &str,
        wait: Duration,
    ) -> Result<Vec<CheckpointInfo>, ExecError> {
        let (_, history) = self.settled(owner, id, wait).await?;
        Ok(history.list())
    }

    /// Returns `owner`'s session `id` to its checkpoint `checkpoint`, dropping the later ones,
    /// after the execs that arrived before (waiting at most `wait` for them). Its next exec
    /// starts from that state.
    pub async fn rollback(
        &self,
        owner: u32,
        id: &str,
        checkpoint: u64,
        wait: Duration,
    ) -> Result<SessionInfo, ExecError> {
        let (session, mut history) = self.settled(owner, id, wait).await?;
        let dropped = history.rollback(checkpoint)?;
        session.meta().record(&history);
        drop(history);
        self.metrics.rolled_back(session.language, "request");
        info!(session = %id, checkpoint, dropped, "session rolled back on request");
        Ok(session.info(&self.settings))
    }

    /// `owner`'s session `id` and its history, once the execs that arrived before have saved
    /// what they left (waiting at most `wait`); the session may have gone meanwhile.
    async fn settled(
        &self,
        owner: u32,
        id: &str,
        wait: Duration,
    ) -> Result<(Arc<Session>, OwnedMutexGuard<History>), ExecError> {
        let session = self.find(owner, id)?;
        let turn = tokio::time::timeout(wait, session.history.clone().lock_owned());
        let Ok(history) = turn.await else {
            return Err(ExecError::SessionBusy { timeout: wait });
        };
        self.find(owner, id)?;
        Ok((session, history))
    }
}
