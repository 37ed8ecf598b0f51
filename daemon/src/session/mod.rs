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
//!
//! With a state directory (see [`durable`]) every session is also kept on disk, and outlives
//! the daemon: [`Sessions::recover`] reads them back at startup, and a session idle for a while
//! leaves memory (see [`park`]).

mod clock;
pub mod durable;
mod entry;
mod exec;
mod history;
mod image;
mod park;
mod restore;
mod saving;
mod state;
#[cfg(test)]
mod tests;
mod turn;

pub use self::durable::Durable;
use self::durable::journal::{FORMAT, Progress, SessionFile, millis};
use self::durable::{OnDisk, Write};
use self::entry::Meta;
pub use self::entry::Session;
pub use self::exec::Runner;
use self::history::{History, Retention};
pub use self::image::{Image, Ledger};
pub use self::saving::SAVE_WAIT_LIMIT;
use self::saving::SaveClock;
pub use self::turn::Turn;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tracing::info;

use crate::audit::{AuditLog, Owner, SessionRecord};
use crate::job::{
    ExecError, Language, MemoryFile, Principal, SessionCounts, SessionInfo, SessionSettings,
};
use crate::metrics::SessionMetrics;

/// The live sessions, their limits and their memory.
#[derive(Debug)]
pub struct Sessions {
    settings: SessionSettings,
    table: Mutex<BTreeMap<String, Arc<Session>>>,
    ledgers: BTreeMap<Language, Arc<Ledger>>,
    metrics: SessionMetrics,
    audit: Arc<AuditLog>,
    /// The state directory; None: sessions live in memory only.
    durable: Option<Durable>,
}

/// Where a new session starts: its checkpoint 0.
#[derive(Debug, Default)]
struct Start {
    /// Its state (None: the warm state), and its bytes.
    image: Option<Arc<Image>>,
    bytes: u64,
    /// The same state on disk, for a fork of a checkpoint that is.
    from_disk: Option<Arc<OnDisk>>,
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
            durable: None,
        }
    }

    /// The table keeping its sessions in `durable` too.
    pub fn with_durable(self, durable: Durable) -> Self {
        let settings = SessionSettings {
            park_after: Some(durable.park_after()),
            ..self.settings
        };
        Sessions {
            settings,
            durable: Some(durable),
            ..self
        }
    }

    /// The limits.
    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Session>>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn retention(&self) -> Retention {
        Retention {
            count: self.settings.max_checkpoints,
            bytes: self.settings.max_checkpoint_bytes,
        }
    }

    /// The files in memory `language`'s template is mapped from: its sessions' states map them
    /// too, but the pool holds them, and the ledger does not count them.
    pub fn template_memory(&self, language: Language, memory: &[MemoryFile]) {
        if let Some(ledger) = self.ledgers.get(&language) {
            ledger.template(memory);
        }
    }

    /// Live sessions, the memory their images hold, and those parked, per language.
    pub fn counts(&self) -> BTreeMap<Language, SessionCounts> {
        let table = self.table();
        self.ledgers
            .iter()
            .map(|(&language, ledger)| {
                let of = || table.values().filter(|s| s.language == language);
                let counts = SessionCounts {
                    live: of().count(),
                    memory_bytes: ledger.bytes(),
                    parked: of().filter(|s| s.meta().parked).count(),
                };
                (language, counts)
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
        owner: &Principal,
        language: Language,
        idle_timeout: Option<Duration>,
    ) -> Result<SessionInfo, ExecError> {
        if !self.ledgers.contains_key(&language) {
            return Err(ExecError::LanguageNotServed(language));
        }
        let idle = idle_timeout
            .unwrap_or(self.settings.default_idle)
            .min(self.settings.max_idle);
        let session = self.insert(owner, language, idle, Start::default())?;
        self.metrics.created(language, "new");
        info!(session = %session.id, %language, idle_s = idle.as_secs(), "session created");
        Ok(session.info())
    }

    /// Adds a session after checking the limits, and writes its directory when sessions are
    /// kept on disk.
    fn insert(
        &self,
        owner: &Principal,
        language: Language,
        idle_timeout: Duration,
        start: Start,
    ) -> Result<Arc<Session>, ExecError> {
        if self.memory_held() >= self.settings.memory_budget {
            // Sessions on disk may make room.
            self.park_for_memory();
        }
        let mut table = self.table();
        self.check_limits(&table, owner)?;
        let id = new_id()?;
        // To the millisecond, as its record on disk keeps it.
        let now = journal_time(SystemTime::now());
        let mut history = History::new(start.image.clone(), start.bytes, self.retention());
        let disk = self.durable.as_ref().and_then(|durable| {
            let file = SessionFile {
                format: FORMAT,
                id: id.clone(),
                owner: owner.clone(),
                language,
                created_at_ms: millis(now),
                idle_timeout_ms: u64::try_from(idle_timeout.as_millis()).unwrap_or(u64::MAX),
            };
            let progress = Progress {
                execs: 0,
                last_used_ms: file.created_at_ms,
                next: history.next(),
                checkpoints: history.marks(),
                lost: None,
            };
            durable.create(&file, &progress)
        });
        // A fork's start is written too; a new session's, the warm state, never is.
        let start_disk = match (&start.image, &disk) {
            (Some(_), Some(disk)) => Some(OnDisk::pending(disk.checkpoint_dir(0))),
            _ => None,
        };
        if let Some(start_disk) = &start_disk {
            history.set_head_disk(start_disk.clone());
        }
        let mut meta = Meta::new(idle_timeout, Duration::ZERO, now);
        meta.record(&history);
        let session = Arc::new(Session {
            id,
            owner: owner.clone(),
            language,
            created_at: now,
            lifetime_end: clock::now() + self.settings.max_lifetime,
            lifetime_end_at: now + self.settings.max_lifetime,
            idle_timeout,
            history: Arc::new(tokio::sync::Mutex::new(history)),
            saving: SaveClock::default(),
            meta: Mutex::new(meta),
            disk,
            gone: OnceLock::new(),
        });
        table.insert(session.id.clone(), session.clone());
        drop(table);
        if let (Some(image), Some(disk)) = (start.image, start_disk) {
            self.write(&session, 0, image, disk, start.from_disk, Instant::now());
        }
        Ok(session)
    }

    /// Refuses one more session of `owner` past the count, the caller's quota or the memory
    /// budget.
    fn check_limits(
        &self,
        table: &BTreeMap<String, Arc<Session>>,
        owner: &Principal,
    ) -> Result<(), ExecError> {
        if table.len() >= self.settings.max_sessions {
            self.metrics.refused("count");
            return Err(ExecError::TooManySessions {
                limit: self.settings.max_sessions,
            });
        }
        let owned = table.values().filter(|s| s.owner == *owner);
        let exempt = self
            .settings
            .exempt_uid
            .is_some_and(|uid| *owner == Principal::Uid(uid));
        if !exempt && owned.clone().count() >= self.settings.max_per_caller {
            self.metrics.refused("caller");
            let now = clock::now();
            let next_expiry = owned.map(|s| s.expires()).min();
            return Err(ExecError::SessionQuota {
                caller: owner.clone(),
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
        Ok(())
    }

    /// Hands checkpoint `number` of `session`, state `image`, to the writer, to go into `disk`
    /// (linked from `from_disk` when that is written); `answered` is when its exec was.
    fn write(
        &self,
        session: &Session,
        number: u64,
        image: Arc<Image>,
        disk: Arc<OnDisk>,
        from_disk: Option<Arc<OnDisk>>,
        answered: Instant,
    ) {
        let (Some(durable), Some(session_disk)) = (&self.durable, &session.disk) else {
            return;
        };
        let Some(codec) = durable.codec(session.language) else {
            return;
        };
        durable.write(Write {
            session: session_disk.clone(),
            id: session.id.clone(),
            number,
            disk,
            image,
            link_from: from_disk,
            codec: codec.clone(),
            language: session.language,
            answered,
        });
    }

    /// Removes the directories of `dropped` checkpoints from disk.
    fn drop_from_disk(&self, dropped: &[history::Checkpoint]) {
        let Some(durable) = &self.durable else {
            return;
        };
        for disk in dropped.iter().filter_map(|c| c.disk()) {
            durable.drop_checkpoint(disk);
        }
    }

    /// Session `id` of `owner`, unless it is unknown, another caller's, deleted or expired.
    pub fn find(&self, owner: &Principal, id: &str) -> Result<Arc<Session>, ExecError> {
        let not_found = || ExecError::SessionNotFound(id.to_owned());
        let session = self.table().get(id).cloned().ok_or_else(not_found)?;
        if session.owner != *owner {
            return Err(not_found());
        }
        let busy = session.meta().busy;
        if !busy && session.expired(clock::now()).is_some() {
            self.reap();
            return Err(not_found());
        }
        Ok(session)
    }

    /// Session `id` of `owner`.
    pub fn get(&self, owner: &Principal, id: &str) -> Result<SessionInfo, ExecError> {
        Ok(self.find(owner, id)?.info())
    }

    /// Every live session of `owner`, oldest first.
    pub fn list(&self, owner: &Principal) -> Vec<SessionInfo> {
        let mut sessions: Vec<Arc<Session>> = self
            .table()
            .values()
            .filter(|s| s.owner == *owner)
            .cloned()
            .collect();
        sessions.sort_by_key(|s| s.created_at);
        let now = clock::now();
        sessions
            .iter()
            .filter(|s| s.meta().busy || s.expired(now).is_none())
            .map(|s| s.info())
            .collect()
    }

    /// Deletes `owner`'s session `id` and drops its state. An exec already running finishes and
    /// is answered; what it leaves is dropped. Returns its language.
    pub fn delete(&self, owner: &Principal, id: &str) -> Result<Language, ExecError> {
        let not_found = || ExecError::SessionNotFound(id.to_owned());
        let mut table = self.table();
        if table.get(id).is_none_or(|s| s.owner != *owner) {
            return Err(not_found());
        }
        let session = table.remove(id).ok_or_else(not_found)?;
        drop(table);
        self.forget(&session);
        self.metrics.ended(session.language, "deleted");
        info!(session = %id, "session deleted");
        Ok(session.language)
    }

    /// Removes a session that left the table from disk.
    fn forget(&self, session: &Session) {
        if let (Some(durable), Some(disk)) = (&self.durable, &session.disk) {
            durable.remove(disk);
        }
    }

    /// Deletes every session that has expired and is not running an exec; returns how many.
    pub fn reap(&self) -> usize {
        let now = clock::now();
        let mut table = self.table();
        let expired: Vec<(Arc<Session>, &'static str)> = table
            .values()
            .filter(|s| !s.meta().busy)
            .filter_map(|s| Some((s.clone(), s.expired(now)?)))
            .collect();
        for (session, _) in &expired {
            table.remove(&session.id);
        }
        drop(table);
        for (session, reason) in &expired {
            self.forget(session);
            self.metrics.ended(session.language, reason);
            info!(session = %session.id, reason, "session expired");
            self.audit.session(
                "session_expired",
                &SessionRecord {
                    request_id: None,
                    caller: None,
                    owner: Owner(&session.owner),
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

    /// Reaps expired sessions, and parks idle ones, every `period`, on `runtime`, until the
    /// table is dropped.
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
                sessions.park_idle();
            }
        });
    }

    /// Waits, at most `limit`, until every exec's state is saved and every checkpoint is on
    /// disk: what a daemon that stops does last. False past the limit.
    pub fn flush(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let busy = self.table().values().any(|s| s.meta().busy);
            if !busy {
                break;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        self.durable
            .as_ref()
            .is_none_or(|durable| durable.flush(left))
    }
}

/// `at`, to the millisecond, as the state directory keeps times.
fn journal_time(at: SystemTime) -> SystemTime {
    durable::journal::at_millis(millis(at))
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
