//! Sessions whose state leaves memory once it is on disk (*parked*): those idle for
//! `--session-park-after-s`, and, when the states in memory hold the memory budget, the least
//! recently used; or one its caller parks now ([`Sessions::park_now`], E2B's pause). A parked
//! state comes back when it is needed (an exec, a fork, its files), read from disk with every
//! byte checked: [`Sessions::bring_back`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::clock;
use super::durable::OnDisk;
use super::durable::checkpoint::{self, Refused};
use super::{Image, Session, Sessions};
use crate::job::{ExecError, Files, Principal, Saved, SessionInfo};

impl Sessions {
    /// Parks the sessions idle for the state directory's `park_after`.
    pub fn park_idle(&self) {
        self.park(false);
    }

    /// Parks the least recently used sessions until the states in memory are within the memory
    /// budget (or none is left to park).
    pub fn park_for_memory(&self) {
        self.park(true);
    }

    fn park(&self, for_memory: bool) {
        let Some(durable) = &self.durable else {
            return;
        };
        let mut candidates: Vec<Arc<Session>> = self
            .table()
            .values()
            .filter(|s| s.durable().is_some())
            .filter(|s| {
                let meta = s.meta();
                !meta.busy && !meta.parked
            })
            .cloned()
            .collect();
        candidates.sort_by_key(|s| s.meta().last_used);
        let now = clock::now();
        for session in candidates {
            let idle = now.saturating_duration_since(session.meta().last_used);
            let wanted = if for_memory {
                self.memory_held() > self.settings.memory_budget
            } else {
                idle >= durable.park_after()
            };
            if !wanted {
                // Oldest first: once one is not wanted, the later ones are not either.
                break;
            }
            // A session busy with an exec or a fork is left alone; the next round parks it.
            let Ok(mut history) = session.history.try_lock() else {
                continue;
            };
            let parked = history.park();
            session.meta().record(&history);
            if parked {
                debug!(session = %session.id, idle_s = idle.as_secs(), "session parked: its state is on disk only");
            }
        }
        self.count_parked();
    }

    /// Parks `owner`'s session `id` now, after the execs that arrived before (waiting at most
    /// `wait` for them, and as long again for its newest checkpoint to reach the disk): every
    /// state of it leaves memory, and its next use brings the newest back. A session that has
    /// run nothing holds nothing and stays as it is.
    pub async fn park_now(
        &self,
        owner: &Principal,
        id: &str,
        wait: Duration,
    ) -> Result<SessionInfo, ExecError> {
        self.find(owner, id)?;
        if self.durable.is_none() {
            return Err(ExecError::NotParkable(
                "this daemon keeps no sessions on disk: start it with --state-dir DIR to park \
                 them"
                    .to_owned(),
            ));
        }
        let (session, mut history) = self.settled(owner, id, wait).await?;
        if session.durable().is_none() {
            return Err(ExecError::NotParkable(format!(
                "session {id} is not kept on disk (its directory could not be written): it \
                 cannot be parked"
            )));
        }
        if let Some(disk) = history.head().disk().cloned() {
            disk.wait_written(wait).await.map_err(|why| {
                ExecError::ParkFailed(format!(
                    "session {id}'s newest checkpoint is not on disk: {why}; it stays in memory"
                ))
            })?;
        }
        if history.park() {
            info!(session = %id, "session parked: its state is on disk only");
        }
        session.meta().record(&history);
        drop(history);
        self.count_parked();
        Ok(session.info())
    }

    /// Says how many sessions are parked.
    fn count_parked(&self) {
        if let Some(durable) = &self.durable {
            let parked = self.table().values().filter(|s| s.meta().parked).count();
            let parked = i64::try_from(parked).unwrap_or(i64::MAX);
            durable.metrics().parked.set(parked);
        }
    }

    /// The state of `session`'s checkpoint on `disk`, brought back from disk: every byte
    /// checked, the state read by its guest's codec (which maps it, not copies it). Counted in
    /// the memory of its language from now on.
    pub(super) async fn bring_back(
        &self,
        session: &Session,
        disk: &Arc<OnDisk>,
    ) -> Result<Arc<Image>, Refused> {
        let missing = |detail: &str| Refused {
            reason: checkpoint::Refusal::Missing,
            detail: detail.to_owned(),
        };
        let codec = self
            .durable
            .as_ref()
            .and_then(|durable| durable.codec(session.language))
            .cloned()
            .ok_or_else(|| missing("this daemon keeps no sessions on disk"))?;
        let record = disk.record().ok_or_else(|| missing("not on disk (yet)"))?;
        let dir = disk.dir().to_owned();
        let started = Instant::now();
        let loaded = tokio::task::spawn_blocking(move || {
            checkpoint::load(&dir, &record, codec.as_ref()).map(|loaded| (loaded, record.bytes))
        })
        .await
        .map_err(|e| missing(&format!("the reading thread failed: {e}")))?;
        let ((state, files), bytes) = loaded.inspect_err(|why| self.refused(session, why))?;
        if let Some(durable) = &self.durable {
            let elapsed = started.elapsed().as_secs_f64();
            durable.metrics().restored(session.language, elapsed);
        }
        let saved = Saved {
            state,
            bytes,
            memory: Vec::new(),
            files: Arc::new(files),
        };
        let ledger = self.ledgers[&session.language].clone();
        Ok(Arc::new(Image::new(saved, ledger)))
    }

    /// The working directory of `session`'s checkpoint on `disk`, read from disk.
    pub(super) async fn files_from_disk(
        &self,
        session: &Session,
        disk: &Arc<OnDisk>,
    ) -> Result<Arc<Files>, Refused> {
        let record = disk.record().ok_or_else(|| Refused {
            reason: checkpoint::Refusal::Missing,
            detail: "not on disk (yet)".to_owned(),
        })?;
        let dir = disk.dir().to_owned();
        let files = tokio::task::spawn_blocking(move || checkpoint::load_files(&dir, &record))
            .await
            .map_err(|e| Refused {
                reason: checkpoint::Refusal::Missing,
                detail: format!("the reading thread failed: {e}"),
            })?;
        files
            .map(Arc::new)
            .inspect_err(|why| self.refused(session, why))
    }

    /// Counts and says that a checkpoint of `session` was refused.
    fn refused(&self, session: &Session, why: &Refused) {
        if let Some(durable) = &self.durable {
            durable.metrics().load_failed(why.reason.as_str());
        }
        warn!(session = %session.id, reason = why.reason.as_str(), "a checkpoint on disk is refused: {why}");
    }
}
