//! Sessions: an interpreter whose state carries over from one exec to the next, held off the
//! pool between execs.
//!
//! A session is a record in the table and its *checkpoints* (see [`history`]): the state after
//! each exec that changed it, an *image* each (a Hyperlight snapshot, immutable, plus what the
//! host keeps beside it). No sandbox belongs to a session. An exec takes any worker of its
//! language's pool, which loads the newest image, runs the program, answers, and only then, off
//! the answer's path, saves the new image, which becomes the next checkpoint; the worker goes
//! back to its warm snapshot for whatever comes next. Images being immutable, a fork is a
//! second record whose checkpoint 0 is the same image, and an exec that is rolled back simply
//! makes no checkpoint. Checkpoint 0 of a new session is the warm snapshot.
//!
//! Execs of one session run one at a time, in arrival order: each holds the session's lock from
//! its turn until the image it leaves is saved. Waiting for an earlier exec's program counts
//! against an exec's time limit (the two overlap: `session_busy` if the limit passes); waiting
//! for the daemon to save what an earlier exec left does not: the session keeps a clock of its
//! saving (see [`SaveClock`]), and a waiting exec's deadline moves on by the saving it waited
//! for, up to [`SAVE_WAIT_LIMIT`]. So a caller that sends one exec at a time, each after the
//! last answer, has all of its time limit for its program. An exec, once its turn has come,
//! runs to the end even if its client goes away, so that the session's state is always that of
//! every exec it accepted.
//!
//! A session belongs to the uid that created it (or forked it): every other caller is told it
//! does not exist, and lists only its own. Each uid may hold at most `max_per_caller` sessions.
//!
//! A save that fails loses the exec's state: the session stays at its newest checkpoint, and
//! says so ([`Loss`]) in its description and in the answer of its next exec.
//!
//! The memory images hold is counted by language in a ledger: an image adds its bytes when it is
//! made and takes them back when its last holder drops it, so the count is right whatever
//! deleted, expired, forked or rolled back what.

mod history;
mod image;
mod saving;
mod state;
#[cfg(test)]
mod tests;
mod turn;

use self::history::{History, Retention};
pub use self::image::{Image, Ledger};
pub use self::saving::SAVE_WAIT_LIMIT;
use self::saving::SaveClock;
pub use self::turn::Turn;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::OwnedMutexGuard;
use tracing::info;

use crate::audit::{AuditLog, SessionRecord};
use crate::job::{ExecError, Language, Loss, SessionCounts, SessionInfo, SessionSettings};
use crate::metrics::SessionMetrics;

/// One session: found by [`Sessions::find`], and handed back to [`Sessions::turn`] for an
/// exec.
#[derive(Debug)]
pub struct Session {
    id: String,
    /// The uid it belongs to.
    owner: u32,
    language: Language,
    created_at: SystemTime,
    created: Instant,
    idle_timeout: Duration,
    /// Its checkpoints: taken for a whole exec, from its turn until the state it leaves is
    /// saved.
    history: Arc<tokio::sync::Mutex<History>>,
    /// How long it has spent saving what its execs left.
    saving: SaveClock,
    /// What reads of the session need without waiting for its turn.
    meta: Mutex<Meta>,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    last_used: Instant,
    execs: u64,
    /// What its checkpoints hold, as of the last change to them.
    memory_bytes: u64,
    checkpoint: u64,
    checkpoints: usize,
    /// State it lost, until an exec's answer reports it.
    lost: Option<Loss>,
    /// An exec holds the history (reaping waits for it).
    busy: bool,
}

impl Meta {
    /// Takes what `history` is now.
    fn record(&mut self, history: &History) {
        self.memory_bytes = history.bytes();
        self.checkpoint = history.head().number();
        self.checkpoints = history.len();
    }

    /// One more exec's state is lost: the session is at `head`.
    fn lose(&mut self, head: u64) {
        let lost_execs = self.lost.map_or(0, |lost| lost.lost_execs) + 1;
        self.lost = Some(Loss {
            restored_from_checkpoint: head,
            lost_execs,
        });
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

    fn meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When it expires unless used: the end of its idle timeout, or of its lifetime.
    fn expires(&self, settings: &SessionSettings) -> Instant {
        (self.meta().last_used + self.idle_timeout).min(self.created + settings.max_lifetime)
    }

    /// Why it has expired at `now` (the metrics label), if it has.
    fn expired(&self, settings: &SessionSettings, now: Instant) -> Option<&'static str> {
        if now >= self.created + settings.max_lifetime {
            Some("lifetime")
        } else if now >= self.meta().last_used + self.idle_timeout {
            Some("idle")
        } else {
            None
        }
    }

    /// Waits for an exec's turn, in arrival order, until `deadline`, moved on by the time the
    /// session spends saving meanwhile (at most [`SAVE_WAIT_LIMIT`]): the history, and the
    /// deadline so moved. Past it: [`ExecError::SessionBusy`] if earlier execs' programs took
    /// the time, [`ExecError::SessionSaving`] if saving did.
    async fn wait_turn(
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

    fn info(&self, settings: &SessionSettings) -> SessionInfo {
        let meta = *self.meta();
        let expires = self.expires(settings);
        SessionInfo {
            id: self.id.clone(),
            language: self.language,
            created_at: self.created_at,
            expires_at: self.created_at + expires.saturating_duration_since(self.created),
            idle_timeout: self.idle_timeout,
            execs: meta.execs,
            memory_bytes: meta.memory_bytes,
            checkpoint: meta.checkpoint,
            checkpoints: meta.checkpoints,
            lost: meta.lost,
        }
    }
}

/// The live sessions, their limits and their memory.
#[derive(Debug)]
pub struct Sessions {
    settings: SessionSettings,
    table: Mutex<BTreeMap<String, Arc<Session>>>,
    ledgers: BTreeMap<Language, Arc<Ledger>>,
    metrics: SessionMetrics,
    audit: Arc<AuditLog>,
}

impl Sessions {
    /// An empty table for sessions of `languages`; expiries are written to `audit`.
    pub fn new(
        settings: SessionSettings,
        languages: &[Language],
        metrics: SessionMetrics,
        audit: Arc<AuditLog>,
    ) -> Self {
        Sessions {
            settings,
            table: Mutex::new(BTreeMap::new()),
            ledgers: languages
                .iter()
                .map(|&language| (language, Arc::new(Ledger::default())))
                .collect(),
            metrics,
            audit,
        }
    }

    /// The limits.
    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Session>>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Live sessions and the memory their images hold, per language.
    pub fn counts(&self) -> BTreeMap<Language, SessionCounts> {
        let table = self.table();
        self.ledgers
            .iter()
            .map(|(&language, ledger)| {
                let live = table.values().filter(|s| s.language == language).count();
                let memory_bytes = ledger.bytes();
                (language, SessionCounts { live, memory_bytes })
            })
            .collect()
    }

    fn memory_held(&self) -> u64 {
        self.ledgers.values().map(|ledger| ledger.bytes()).sum()
    }

    /// Creates a session of `language` for `owner`, idle for at most `idle_timeout` (the
    /// default when None, capped at the maximum). Refused past the session limits; nothing else
    /// changes then.
    pub fn create(
        &self,
        owner: u32,
        language: Language,
        idle_timeout: Option<Duration>,
    ) -> Result<SessionInfo, ExecError> {
        if !self.ledgers.contains_key(&language) {
            return Err(ExecError::LanguageNotServed(language));
        }
        let idle = idle_timeout
            .unwrap_or(self.settings.default_idle)
            .min(self.settings.max_idle);
        let session = self.insert(owner, language, idle, None)?;
        self.metrics.created(language, "new");
        info!(session = %session.id, %language, idle_s = idle.as_secs(), "session created");
        Ok(session.info(&self.settings))
    }

    /// Adds a session after checking the limits.
    fn insert(
        &self,
        owner: u32,
        language: Language,
        idle_timeout: Duration,
        start: Option<Arc<Image>>,
    ) -> Result<Arc<Session>, ExecError> {
        let mut table = self.table();
        if table.len() >= self.settings.max_sessions {
            self.metrics.refused("count");
            return Err(ExecError::TooManySessions {
                limit: self.settings.max_sessions,
            });
        }
        let owned = table.values().filter(|s| s.owner == owner);
        if self.settings.exempt_uid != Some(owner)
            && owned.clone().count() >= self.settings.max_per_caller
        {
            self.metrics.refused("caller");
            let now = Instant::now();
            let next_expiry = owned.map(|s| s.expires(&self.settings)).min();
            return Err(ExecError::SessionQuota {
                uid: owner,
                limit: self.settings.max_per_caller,
                retry_after: next_expiry
                    .map_or(Duration::ZERO, |at| at.saturating_duration_since(now)),
            });
        }
        let held = self.memory_held();
        if held >= self.settings.memory_budget {
            self.metrics.refused("memory");
            return Err(ExecError::SessionMemoryFull {
                held,
                budget: self.settings.memory_budget,
            });
        }
        let now = Instant::now();
        let retention = Retention {
            count: self.settings.max_checkpoints,
            bytes: self.settings.max_checkpoint_bytes,
        };
        let history = History::new(start, retention);
        let mut meta = Meta {
            last_used: now,
            execs: 0,
            memory_bytes: 0,
            checkpoint: 0,
            checkpoints: 0,
            lost: None,
            busy: false,
        };
        meta.record(&history);
        let session = Arc::new(Session {
            id: new_id()?,
            owner,
            language,
            created_at: SystemTime::now(),
            created: now,
            idle_timeout,
            history: Arc::new(tokio::sync::Mutex::new(history)),
            saving: SaveClock::default(),
            meta: Mutex::new(meta),
        });
        table.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    /// Session `id` of `owner`, unless it is unknown, another caller's, deleted or expired.
    pub fn find(&self, owner: u32, id: &str) -> Result<Arc<Session>, ExecError> {
        let not_found = || ExecError::SessionNotFound(id.to_owned());
        let session = self.table().get(id).cloned().ok_or_else(not_found)?;
        if session.owner != owner {
            return Err(not_found());
        }
        let meta = *session.meta();
        if !meta.busy && session.expired(&self.settings, Instant::now()).is_some() {
            self.reap();
            return Err(not_found());
        }
        Ok(session)
    }

    /// Session `id` of `owner`.
    pub fn get(&self, owner: u32, id: &str) -> Result<SessionInfo, ExecError> {
        Ok(self.find(owner, id)?.info(&self.settings))
    }

    /// Every live session of `owner`, oldest first.
    pub fn list(&self, owner: u32) -> Vec<SessionInfo> {
        let mut sessions: Vec<Arc<Session>> = self
            .table()
            .values()
            .filter(|s| s.owner == owner)
            .cloned()
            .collect();
        sessions.sort_by_key(|s| s.created);
        let now = Instant::now();
        sessions
            .iter()
            .filter(|s| s.meta().busy || s.expired(&self.settings, now).is_none())
            .map(|s| s.info(&self.settings))
            .collect()
    }

    /// Deletes `owner`'s session `id` and drops its state. An exec already running finishes and
    /// is answered; what it leaves is dropped. Returns its language.
    pub fn delete(&self, owner: u32, id: &str) -> Result<Language, ExecError> {
        let not_found = || ExecError::SessionNotFound(id.to_owned());
        let mut table = self.table();
        if table.get(id).is_none_or(|s| s.owner != owner) {
            return Err(not_found());
        }
        let session = table.remove(id).ok_or_else(not_found)?;
        drop(table);
        self.metrics.ended(session.language, "deleted");
        info!(session = %id, "session deleted");
        Ok(session.language)
    }

    /// Deletes every session that has expired and is not running an exec; returns how many.
    pub fn reap(&self) -> usize {
        let now = Instant::now();
        let mut table = self.table();
        let expired: Vec<(Arc<Session>, &'static str)> = table
            .values()
            .filter(|s| !s.meta().busy)
            .filter_map(|s| Some((s.clone(), s.expired(&self.settings, now)?)))
            .collect();
        for (session, _) in &expired {
            table.remove(&session.id);
        }
        drop(table);
        for (session, reason) in &expired {
            self.metrics.ended(session.language, reason);
            info!(session = %session.id, reason, "session expired");
            self.audit.session(
                "session_expired",
                &SessionRecord {
                    request_id: None,
                    caller: None,
                    owner_uid: session.owner,
                    session: &session.id,
                    language: session.language,
                    from: None,
                    reason: Some(reason),
                    checkpoint: None,
                },
            );
        }
        expired.len()
    }

    /// Reaps expired sessions every `period`, on `runtime`, until the table is dropped.
    pub fn reap_every(self: &Arc<Self>, period: Duration, runtime: &tokio::runtime::Handle) {
        let sessions = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                sessions.reap();
            }
        });
    }
}

/// A new session id: 128 bits from the host's entropy, in hex. No session is made without
/// one: an id that could be guessed would open the session to anyone.
fn new_id() -> Result<String, ExecError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        ExecError::Internal(format!(
            "the host's entropy source failed, no session id: {e}"
        ))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
