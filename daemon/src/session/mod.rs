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
//!
//! # Design: sessions
//! A session is a row in a table (`daemon/src/session/`) and its *checkpoints*
//! (`session/history.rs`, `History`): an *image* for each exec whose state was kept, the guest's
//! state as that exec left it, numbered, newest last; checkpoint 0 is where it started (the warm
//! state, or the image a fork copied). No sandbox belongs to a session, and the pool
//! knows nothing of sessions. A session's exec is written once, in `session/exec.rs`
//! (`Sessions::exec`): wait for the session's turn, resume its state, lay the request's files over
//! the session's and check the caps, run the job from that state with a `Runner`, and give the
//! turn the answer. The daemon's runner is the language's pool (`executor/hyperlight.rs`,
//! `PoolRunner`); the stub executor's answers from its closure; the session tests' is a fake worker,
//! so that the whole lifecycle runs in host unit tests. The table reads time through
//! `session/clock.rs` (tokio's clock), so that those tests run on tokio's paused clock, with no
//! real sleeps.
//!
//! - **Where the state lives.** An image is what `Guest::save` returns: a Hyperlight snapshot
//!   (`MultiUseSandbox::snapshot` through hyperlight-js's and hyperlight-wasm's pass-throughs: every
//!   mapped guest page copied into an immutable blob, with the vCPU state) and, for Python, a copy
//!   of the host's resource tables, whose entries the guest's handles name (a file of the library
//!   kept open across execs). Inside the guest, the runner keeps the session's scope: Python's
//!   globals dict; in JavaScript the body of a suspended generator, in which a direct eval declares
//!   the program's `var`s and functions (see `guest/README.md`).
//! - **An exec** waits for its turn (`Sessions::turn`, the session's lock, fair, so arrival
//!   order), then goes through the same pool and the same worker path as a plain exec, with
//!   `Scope::Session(state)`: the worker restores the image into its sandbox (`load`: a remap, the
//!   pages shared read-only with the image and copied on write), runs the program, answers, and
//!   only then saves the state the program left (`save`, timed, one at a time, see below) and hands
//!   it to the session (`Turn::finish`); then it restores its warm snapshot, as after any request.
//!   `Turn::finish` reserves the next checkpoint number before the answer goes (the answer names
//!   it) and pushes the image under it once saved. The lock is held until the new image is in, so
//!   the next exec starts from it. Once its turn has
//!   come, an exec runs to its end in a task of its own, whether or not its caller still waits.
//! - **Waiting for a save is not the program's time.** Waiting for an earlier exec's *program*
//!   counts against an exec's time limit (the two really overlap: `session_busy` past it). Waiting
//!   for the daemon to *save* what an earlier exec left does not: each session keeps a clock of its
//!   saving (`session/saving.rs`, `SaveClock`), and a waiting exec's deadline moves on by the
//!   saving it waited for, bounded on its own (`SAVE_WAIT_LIMIT`, a minute; past it,
//!   `ExecError::SessionSaving`, 409 `session_busy`). So an agent that sends each exec when the
//!   last answer arrives always has its whole limit for its program. The response reports the wait
//!   in `queued_ms`; `duration_ms` is the program's time in its sandbox (`Outcome::started`,
//!   `Outcome::ran`, recorded by the worker).
//! - **Rollback.** What a call left its sandbox (`Fate`) decides: a call that poisoned it (time
//!   limit, out of memory, guest abort or fault, a host limit) is not saved, and the session keeps
//!   the image from before it: rolled back. An exception is a normal answer, and is saved. A program
//!   that does not parse saves nothing. Saving can fail (the host out of memory); the reserved
//!   number is then never used, the session stays at its newest checkpoint, and records a `Loss`
//!   (`restored_from_checkpoint`, `lost_execs`), which its description reports until the next
//!   exec's answer carries it; `hyperlightd_session_save_failures_total` counts it.
//! - **Checkpoints** (`session/state.rs`): listing, a rollback to N (drops the later ones, O(1):
//!   the images are already there) and a fork from N each wait for the session to settle (its
//!   lock), like reading its files. Numbers are never reused; a session keeps its newest
//!   `--session-checkpoints` within `--session-checkpoint-mib`, dropping the oldest on each push
//!   (never the newest). Without a state directory they live in memory only.
//! - **Hot sandboxes** (`sandbox/pool/worker.rs`, `queue.rs`). After a session exec whose state it
//!   saved, the worker does not restore its sandbox: the sandbox holds that state exactly (the
//!   snapshot copies; it changes nothing), and the worker remembers which (`StateRef`, a weak
//!   reference to the saved state, so that it keeps no memory alive and no other state can take
//!   its address). The session's next exec resumes that very state, and the queue hands it to this
//!   worker first (`FairQueue::take` with the worker's key): nothing is loaded and the pages the
//!   program writes are already the sandbox's own, which is what made a loaded session's exec 8 to
//!   12 times a plain one. Other jobs go to a worker that is not hot when one is idle; otherwise
//!   the hot worker restores to warm first, on that job's path. An exec that saved nothing (rolled
//!   back, did not parse) leaves the sandbox to be restored as usual: only a just-saved state is
//!   kept, so a session's next exec always starts from exactly its newest checkpoint, loaded or
//!   not. A hot sandbox's next save shares what its last one copied and the exec did not change
//!   (hyperlight-host's `since_restore`, patch 0003).
//! - **Fork** waits for the session to settle too, then makes a new row whose checkpoint 0 is the
//!   same image (the newest, or the one named): O(1), no copy. Images are immutable, so the two can
//!   never see each other's later changes.
//! - **Memory.** An image's snapshot is mapped from files in memory it shares with the images it
//!   was made from and those made from it, and one of its own (`Snapshot::memory_files`, patches
//!   0003, 0005 and 0006). Its language's ledger (`session/image.rs`) counts each file once, from
//!   the first image that maps it until the last one goes, whatever deleted, expired, forked or
//!   rolled back what: a dropped checkpoint's pages are counted as long as a later checkpoint or a
//!   fork maps them, and given back with the last. The template's files are the pool's, not
//!   counted. An image's own bytes (`Snapshot::memory_bytes`: the pages its exec changed and the
//!   page tables it changed) are what a checkpoint's listing and the retention's
//!   `--session-checkpoint-mib` count; a state read back from disk is mapped from files on disk
//!   (the kernel's cache, which it can take back) and counts its own bytes. Creating or forking a session is
//!   refused once the ledgers hold `--session-memory-mib`; an exec in an existing session is not.
//! - **Expiry.** A reaper task looks every second for sessions past their idle timeout or maximum
//!   lifetime and not running an exec, and deletes them; a lookup treats an expired session as gone
//!   even before the reaper gets to it.
//! - **Outliving the daemon** (`session/durable/`, `--state-dir`). Each session has a directory:
//!   `session.json` (owner, language, limits), `journal` (each line the session's whole progress:
//!   checkpoints, execs, last use, a loss not yet reported; `journal.rs`) and
//!   `checkpoints/<N>/` (`checkpoint.rs`: the state written by the guest's `StateCodec`, the
//!   same layout as a saved template; `files.json`; `checkpoint.json` with the writer's
//!   `StateKey` and every file's XXH64 and size). A state's memory is one file per file its
//!   snapshot is mapped from, named by its SHA-256 (hyperlight-host patch 0004): the template's,
//!   the parent checkpoints', its own pages. The writer hard-links those another checkpoint or the
//!   saved template already has (`blobs.rs`, which also counts the disk once per file however
//!   many checkpoints link it), so a checkpoint writes what its exec changed, and every directory
//!   stays a whole layout that loads on its own; a damaged file is damaged in every checkpoint
//!   that links it, and each is refused when checked. The order of writes is what makes a loss never
//!   silent: `Turn::finish` appends and syncs the journal line naming the exec's checkpoint
//!   *before* the answer goes; the worker saves the state; `Sessions::keep` pushes the image and
//!   hands it to the writer thread (`writer.rs`), which writes the directory under a hidden name,
//!   syncs it (pages of zeros are holes), and renames it into place; the checkpoint is
//!   durable from then on (`OnDisk`). A drop (rollback, retention, delete) and a write of the same
//!   checkpoint race safely: whichever comes second removes it. At startup (`recover.rs`,
//!   `session/restore.rs`) each journal's last whole line says which checkpoints the session must
//!   have; each is checked cheaply (record, key, sizes), the failures refused by reason and
//!   removed, and the session is at its newest that passed, with every newer answered one counted
//!   lost (`Loss`, said once, then written back so that another restart does not say it again).
//!   States stay on disk until used: `Turn::resume` brings the head back (`park.rs`,
//!   `bring_back`: every byte against its checksum, then the codec, which maps the file), and a
//!   head that fails there is refused too, the session going back one more checkpoint. A session
//!   with no checkpoint left is kept, `gone`, and refuses every exec (`SessionLost`, 410).
//! - **Parked.** A checkpoint on disk may drop its image (`History::park`): the reaper parks
//!   sessions idle past `--session-park-after-s`, and `insert` parks the least recently used when
//!   the images in memory hold the memory budget. The ledger counts images in memory only.
//! - **Why a snapshot per session, not a parked sandbox.** The alternative keeps each idle session
//!   in a sandbox of its own, parked off the pool: its dirty pages over a shared base, plus a VM.
//!   But rollback needs the state from before every exec, and fork a copy that the origin's later
//!   execs cannot touch: both are a snapshot, which a parked sandbox would need anyway. With a
//!   snapshot per session, an idle session costs its snapshot and nothing else, creating and
//!   forking cost nothing, and the pool's warm sandboxes serve sessions and plain execs alike. An
//!   image holds only the pages its exec changed (a page written back as it was is not copied)
//!   and the page tables it changed; the rest it shares, by reference to the files of the
//!   snapshot it was loaded from (hyperlight-host patches 0003, 0005 and 0008, in
//!   `patches/README.md`). After a load, every page the program writes is
//!   first copied from the image, which priming (where a pool primes) pays off a plain exec's path and which cannot
//!   be paid in advance for a session without running code in it: hence hot sandboxes, which keep
//!   a session's state in the sandbox that just saved it for as long as no other request needs
//!   that sandbox, and take the load and the copies off the session's next exec. A session's
//!   first exec starts from the warm snapshot as it is: a primed sandbox is restored first, so
//!   that nothing the priming program left becomes part of the session's state.

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
    Env, ExecError, Labels, Language, MemoryFile, Principal, SessionCounts, SessionInfo,
    SessionSettings,
};
use crate::metrics::SessionMetrics;
use crate::telemetry::Trace;

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

    /// The state directory and whether writes reach it, when sessions are kept on disk.
    pub fn durable_health(&self) -> Option<crate::job::DurableHealth> {
        self.durable.as_ref().map(Durable::health)
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
    /// default when None, capped at the maximum), with `labels` and `env`. Refused past the
    /// session limits; nothing else changes then.
    pub fn create(
        &self,
        owner: &Principal,
        language: Language,
        idle_timeout: Option<Duration>,
        labels: Labels,
        env: Env,
    ) -> Result<SessionInfo, ExecError> {
        if !self.ledgers.contains_key(&language) {
            return Err(ExecError::LanguageNotServed(language));
        }
        let idle = idle_timeout
            .unwrap_or(self.settings.default_idle)
            .min(self.settings.max_idle);
        let session = self.insert(owner, language, labels, env, idle, Start::default())?;
        self.metrics.created(language, "new");
        info!(session = %session.id, %language, idle_s = idle.as_secs(), "session created");
        Ok(session.info())
    }

    /// Sets `owner`'s session `id`'s idle timeout to `idle` (capped at the maximum), counted
    /// from now: it expires once idle that long, or at the end of its lifetime. A durable
    /// session's journal keeps it (at once, or when an exec running meanwhile ends).
    pub fn set_idle_timeout(
        &self,
        owner: &Principal,
        id: &str,
        idle: Duration,
    ) -> Result<SessionInfo, ExecError> {
        let session = self.find(owner, id)?;
        let idle = idle.min(self.settings.max_idle);
        {
            let mut meta = session.meta();
            meta.idle_timeout = idle;
            meta.touch();
        }
        if let Ok(history) = session.history.try_lock() {
            session.record(&history);
        }
        info!(session = %id, idle_s = idle.as_secs(), "session idle timeout set");
        Ok(session.info())
    }

    /// Adds a session after checking the limits, and writes its directory when sessions are
    /// kept on disk.
    fn insert(
        &self,
        owner: &Principal,
        language: Language,
        labels: Labels,
        env: Env,
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
                labels: labels.clone(),
                env: env.clone(),
            };
            let progress = Progress {
                execs: 0,
                last_used_ms: file.created_at_ms,
                idle_timeout_ms: None,
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
            labels,
            env,
            history: Arc::new(tokio::sync::Mutex::new(history)),
            saving: SaveClock::default(),
            meta: Mutex::new(meta),
            disk,
            gone: OnceLock::new(),
        });
        table.insert(session.id.clone(), session.clone());
        drop(table);
        if let (Some(image), Some(disk)) = (start.image, start_disk) {
            self.write(
                &session,
                0,
                image,
                disk,
                start.from_disk,
                (Instant::now(), Trace::off()),
            );
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
    /// (linked from `from_disk` when that is written); `answered` is when its exec was, `trace`
    /// its place in a trace.
    fn write(
        &self,
        session: &Session,
        number: u64,
        image: Arc<Image>,
        disk: Arc<OnDisk>,
        from_disk: Option<Arc<OnDisk>>,
        (answered, trace): (Instant, Trace),
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
            trace,
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

    /// Every live session of `owner` that has all of `labels`, oldest first.
    pub fn list(&self, owner: &Principal, labels: &Labels) -> Vec<SessionInfo> {
        let mut sessions: Vec<Arc<Session>> = self
            .table()
            .values()
            .filter(|s| s.owner == *owner && s.labels.has_all(labels))
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
