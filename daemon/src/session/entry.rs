//! One session of the table: who owns it, its limits, its checkpoints, and what reads of it
//! need without waiting for its turn.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::OwnedMutexGuard;

use super::SAVE_WAIT_LIMIT;
use super::clock;
use super::durable::SessionDisk;
use super::durable::journal::{Progress, at_millis, millis, millis_of};
use super::history::History;
use super::saving::SaveClock;
use crate::job::{Env, ExecError, Files, Labels, Language, Loss, Principal, SessionInfo};

/// One session: found by [`super::Sessions::find`], and handed back to
/// [`super::Sessions::turn`] for an exec.
#[derive(Debug)]
pub struct Session {
    pub(super) id: String,
    /// Who it belongs to: the uid, or the pod, that created it.
    pub(super) owner: Principal,
    pub(super) language: Language,
    pub(super) created_at: SystemTime,
    /// When its maximum lifetime ends, by the monotonic clock and by the wall clock.
    pub(super) lifetime_end: Instant,
    pub(super) lifetime_end_at: SystemTime,
    /// What its creator named it by; a fork has its origin's.
    pub(super) labels: Labels,
    /// The environment its execs see; a fork has its origin's.
    pub(super) env: Env,
    /// Its checkpoints: taken for a whole exec, from its turn until the state it leaves is
    /// saved.
    pub(super) history: Arc<tokio::sync::Mutex<History>>,
    /// How long it has spent saving what its execs left.
    pub(super) saving: SaveClock,
    /// What reads of the session need without waiting for its turn.
    pub(super) meta: Mutex<Meta>,
    /// Its directory in the state directory; None: it lives in memory only.
    pub(super) disk: Option<Arc<SessionDisk>>,
    /// Why its state is gone, for a session none of whose checkpoints could be brought back
    /// from disk: every exec is refused then.
    pub(super) gone: OnceLock<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Meta {
    /// How long it may be idle: as created, or as last set.
    pub(super) idle_timeout: Duration,
    /// When it was last used, and when its idle timeout ends.
    pub(super) last_used: Instant,
    pub(super) last_used_at: SystemTime,
    pub(super) idle_end: Instant,
    pub(super) execs: u64,
    /// Host memory its checkpoints hold, as of the last change to them.
    pub(super) memory_bytes: u64,
    pub(super) checkpoint: u64,
    pub(super) checkpoints: usize,
    /// Its state is on disk only.
    pub(super) parked: bool,
    /// State it lost, until an exec's answer reports it.
    pub(super) lost: Option<Loss>,
    /// An exec holds the history (reaping and parking wait for it).
    pub(super) busy: bool,
    /// The working directory of its newest checkpoint, unless only the disk has it (parked,
    /// or after a restart: its files are read from there then, and parking frees them).
    pub(super) head_files: Option<Arc<Files>>,
}

impl Meta {
    /// A session's, used last at `last_used_at` (the time `idle` ago), after `execs`.
    pub(super) fn new(idle_timeout: Duration, idle: Duration, last_used_at: SystemTime) -> Meta {
        let now = clock::now();
        Meta {
            idle_timeout,
            last_used: now.checked_sub(idle).unwrap_or(now),
            last_used_at,
            idle_end: now + idle_timeout.saturating_sub(idle),
            execs: 0,
            memory_bytes: 0,
            checkpoint: 0,
            checkpoints: 0,
            parked: false,
            lost: None,
            busy: false,
            head_files: None,
        }
    }

    /// Takes what `history` is now.
    pub(super) fn record(&mut self, history: &History) {
        let head = history.head();
        self.head_files = match (head.image(), head.disk()) {
            (Some(image), _) => Some(image.files().clone()),
            (None, Some(_)) => None,
            // A new session's start, the warm state: no files.
            (None, None) => Some(Arc::default()),
        };
        self.memory_bytes = history.resident_bytes();
        self.checkpoint = head.number();
        self.checkpoints = history.len();
        self.parked = history.is_parked();
    }

    /// One more exec's state is lost: the session is at `head`.
    pub(super) fn lose(&mut self, head: u64) {
        let lost_execs = self
            .lost
            .map_or(0, |lost| lost.lost_execs)
            .saturating_add(1);
        self.lost = Some(Loss {
            restored_from_checkpoint: head,
            lost_execs,
        });
    }

    /// Used now: its idle timeout starts again.
    pub(super) fn touch(&mut self) {
        let now = clock::now();
        self.last_used = now;
        // To the millisecond, as the journal keeps it: a restart reports the same expiry.
        self.last_used_at = at_millis(millis(SystemTime::now()));
        self.idle_end = now + self.idle_timeout;
    }
}

impl Session {
    /// The language its execs run in.
    pub fn language(&self) -> Language {
        self.language
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(super) fn meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When it expires unless used: the end of its idle timeout, or of its lifetime.
    pub(super) fn expires(&self) -> Instant {
        self.meta().idle_end.min(self.lifetime_end)
    }

    /// Why it has expired at `now` (the metrics label), if it has.
    pub(super) fn expired(&self, now: Instant) -> Option<&'static str> {
        if now >= self.lifetime_end {
            Some("lifetime")
        } else if now >= self.meta().idle_end {
            Some("idle")
        } else {
            None
        }
    }

    /// Refused when its state is gone.
    pub(super) fn usable(&self) -> Result<(), ExecError> {
        match self.gone.get() {
            Some(why) => Err(ExecError::SessionLost {
                id: self.id.clone(),
                why: why.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Waits for an exec's turn, in arrival order, until `deadline`, moved on by the time the
    /// session spends saving meanwhile (at most [`SAVE_WAIT_LIMIT`]): the history, and the
    /// deadline so moved. Past it: [`ExecError::SessionBusy`] if earlier execs' programs took
    /// the time, [`ExecError::SessionSaving`] if saving did.
    pub(super) async fn wait_turn(
        &self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(OwnedMutexGuard<History>, Instant), ExecError> {
        let lock = self.history.clone().lock_owned();
        let waited = self.saving.wait(deadline, SAVE_WAIT_LIMIT, lock).await;
        waited.map_err(|saving| {
            if saving >= SAVE_WAIT_LIMIT {
                ExecError::SessionSaving { waited: saving }
            } else {
                ExecError::SessionBusy { timeout }
            }
        })
    }

    /// Its progress as the journal keeps it, at `history`.
    pub(super) fn progress(&self, history: &History) -> Progress {
        let meta = self.meta();
        Progress {
            execs: meta.execs,
            last_used_ms: millis(meta.last_used_at),
            idle_timeout_ms: Some(millis_of(meta.idle_timeout)),
            next: history.next(),
            checkpoints: history.marks(),
            lost: meta.lost.map(Into::into),
        }
    }

    /// Writes its progress at `history` to its journal, synced, when it has a directory.
    pub(super) fn record(&self, history: &History) {
        if let Some(disk) = &self.disk {
            disk.record(&self.id, &self.progress(history));
        }
    }

    /// Whether its directory is written still.
    pub(super) fn durable(&self) -> Option<&Arc<SessionDisk>> {
        self.disk.as_ref().filter(|disk| disk.live())
    }

    pub(super) fn info(&self) -> SessionInfo {
        let meta = self.meta().clone();
        SessionInfo {
            id: self.id.clone(),
            language: self.language,
            created_at: self.created_at,
            expires_at: (meta.last_used_at + meta.idle_timeout).min(self.lifetime_end_at),
            idle_timeout: meta.idle_timeout,
            labels: self.labels.clone(),
            env: self.env.clone(),
            execs: meta.execs,
            memory_bytes: meta.memory_bytes,
            checkpoint: meta.checkpoint,
            checkpoints: meta.checkpoints,
            lost: meta.lost,
            parked: meta.parked,
            durable: self.durable().is_some(),
            gone: self.gone.get().cloned(),
        }
    }
}
