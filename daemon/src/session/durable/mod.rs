//! Sessions that outlive the daemon (`--state-dir`): each session has a directory holding what
//! it is (`session.json`), its progress (`journal`, see [`journal`]) and its checkpoints
//! (`checkpoints/<number>`, see [`checkpoint`]), so that a daemon started again serves the same
//! sessions, at the same checkpoints, with the same owners, limits and expiry.
//!
//! When it is written:
//! - the session's directory, whole, before its creation (or fork) is answered;
//! - a journal line naming an exec's checkpoint, synced, *before* the exec is answered: a
//!   daemon that stops before the checkpoint itself is on disk knows, when it starts again,
//!   that an answered exec's state is missing, and says so instead of coming back older in
//!   silence;
//! - the checkpoint, by a writer thread of its own, after the answer and after the worker has
//!   saved it ([`writer`]): off every request's path. An exec is durable once its checkpoint
//!   is on disk; a listing says which are (`durable`).
//!
//! A session whose state is on disk may leave memory (it is *parked*) and come back on its next
//! use, read from disk and checked again, every byte.

pub mod blobs;
pub mod checkpoint;
pub mod journal;
pub mod recover;
mod writer;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tracing::error;

use self::blobs::{Blobs, Elsewhere};
use self::checkpoint::Record;
use self::journal::{Journal, Progress, SessionFile};
pub use self::writer::Write;
use self::writer::Writer;
use crate::job::{DurableHealth, Language, StateCodec};
use crate::metrics::DurableMetrics;
use crate::sys::durable;

/// The state directory's sessions, and what writes them.
#[derive(Debug)]
pub struct Durable {
    /// `<state dir>/sessions`.
    root: PathBuf,
    codecs: BTreeMap<Language, Arc<dyn StateCodec>>,
    writer: Writer,
    /// The files checkpoints share on disk, and the disk they take.
    blobs: Arc<Mutex<Blobs>>,
    metrics: DurableMetrics,
    /// How long a session stays idle before it is parked.
    park_after: Duration,
}

impl Durable {
    /// The sessions under `dir` (created, private to the daemon's user, if need be), written
    /// with the `codecs` of the languages whose states can go to disk; sessions idle for
    /// `park_after` leave memory. A state's files that `elsewhere` finds on disk (the saved
    /// templates) are linked from there.
    pub fn open(
        dir: &Path,
        codecs: BTreeMap<Language, Arc<dyn StateCodec>>,
        metrics: DurableMetrics,
        park_after: Duration,
        elsewhere: Option<Elsewhere>,
    ) -> io::Result<Durable> {
        let root = dir.join("sessions");
        durable::open_private_dir(dir)?;
        durable::open_private_dir(&root)?;
        let blobs = Arc::new(Mutex::new(Blobs::new(elsewhere)));
        Ok(Durable {
            root,
            codecs,
            writer: Writer::start(metrics.clone(), blobs.clone())?,
            blobs,
            metrics,
            park_after,
        })
    }

    /// The files checkpoints share on disk.
    fn blobs(&self) -> MutexGuard<'_, Blobs> {
        self.blobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How `language`'s states are written; None: its sessions stay in memory.
    pub fn codec(&self, language: Language) -> Option<&Arc<dyn StateCodec>> {
        self.codecs.get(&language)
    }

    /// How long a session stays idle before it is parked.
    pub fn park_after(&self) -> Duration {
        self.park_after
    }

    /// The metrics.
    pub fn metrics(&self) -> &DurableMetrics {
        &self.metrics
    }

    /// The state directory, and whether writes reach it.
    pub fn health(&self) -> DurableHealth {
        DurableHealth {
            dir: self.root.parent().unwrap_or(&self.root).to_owned(),
            writes: self.metrics.write_health(),
        }
    }

    /// The directory of session `id`.
    fn session_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Writes the directory of a new session, `session` at `progress`; None (said in the log)
    /// when it cannot be written or its language's states cannot: the session lives in memory
    /// only.
    pub fn create(&self, session: &SessionFile, progress: &Progress) -> Option<Arc<SessionDisk>> {
        self.codec(session.language)?;
        let dir = self.session_dir(&session.id);
        match Journal::create(&dir, session, progress) {
            Ok(journal) => Some(Arc::new(SessionDisk::new(
                dir,
                journal,
                self.metrics.clone(),
            ))),
            Err(e) => {
                self.metrics
                    .unwritten(&format!("writing {}: {e}", dir.display()));
                error!(session = %session.id, dir = %dir.display(), "cannot write the session's directory ({e}): it lives in memory only, and a restart loses it");
                durable::discard(&dir);
                None
            }
        }
    }

    /// Hands a checkpoint to the writer.
    pub fn write(&self, write: Write) {
        self.writer.write(write);
    }

    /// Removes a session's directory, after the writes already handed over (which see it gone).
    pub fn remove(&self, session: &SessionDisk) {
        session.removed.store(true, Ordering::Relaxed);
        self.writer.discard(session.dir.clone());
    }

    /// Drops a checkpoint from disk: now if it is written, or its write when it comes.
    pub fn drop_checkpoint(&self, disk: &OnDisk) {
        if disk.drop_it() {
            self.writer.discard(disk.dir.clone());
        }
    }

    /// Waits until every checkpoint handed over is written, at most `limit`; false past it.
    pub fn flush(&self, limit: Duration) -> bool {
        self.writer.flush(limit)
    }
}

/// A session's directory: where its checkpoints go, and its journal.
#[derive(Debug)]
pub struct SessionDisk {
    dir: PathBuf,
    /// None once a line could not be written: the directory is gone then.
    journal: Mutex<Option<Journal>>,
    /// Deleted: writes still queued skip it.
    removed: AtomicBool,
    /// Where a journal that cannot be written is reported.
    metrics: DurableMetrics,
}

impl SessionDisk {
    /// The session in `dir`, whose journal is `journal`; its failures go to `metrics`.
    pub fn new(dir: PathBuf, journal: Journal, metrics: DurableMetrics) -> Self {
        SessionDisk {
            dir,
            journal: Mutex::new(Some(journal)),
            removed: AtomicBool::new(false),
            metrics,
        }
    }

    /// The directory of its checkpoint `number`.
    pub fn checkpoint_dir(&self, number: u64) -> PathBuf {
        self.dir.join("checkpoints").join(number.to_string())
    }

    /// Appends `progress` to the journal, synced. A journal that cannot be written could bring
    /// the session back older than answers said, in silence: its directory is removed instead
    /// (the session lives on in memory, and a restart does not know it). False then.
    pub fn record(&self, id: &str, progress: &Progress) -> bool {
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(open) = journal.as_mut() else {
            return false;
        };
        match open.append(progress) {
            Ok(()) => true,
            Err(e) => {
                let journal_of = self.dir.display();
                self.metrics
                    .unwritten(&format!("writing the journal of {journal_of}: {e}"));
                error!(session = %id, dir = %self.dir.display(), "cannot write the session's journal ({e}): its directory is removed, it lives in memory only, and a restart does not know it");
                *journal = None;
                self.removed.store(true, Ordering::Relaxed);
                durable::discard(&self.dir);
                false
            }
        }
    }

    /// Whether it is still written (not deleted, its journal sound).
    pub fn live(&self) -> bool {
        !self.removed.load(Ordering::Relaxed)
    }
}

/// A checkpoint's directory, written or to be written; dropped checkpoints are removed by
/// whichever comes second, the drop or the write.
#[derive(Debug)]
pub struct OnDisk {
    dir: PathBuf,
    state: Mutex<DiskState>,
    /// Told when its state changes: written, failed, dropped.
    changed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct DiskState {
    /// Its record, once it is on disk.
    record: Option<Record>,
    dropped: bool,
    /// Why writing it failed: it is in memory only.
    failed: Option<String>,
}

impl OnDisk {
    /// A checkpoint to be written into `dir`.
    pub fn pending(dir: PathBuf) -> Arc<OnDisk> {
        Arc::new(OnDisk {
            dir,
            state: Mutex::default(),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// A checkpoint found on disk in `dir`, with `record`.
    pub fn written(dir: PathBuf, record: Record) -> Arc<OnDisk> {
        Arc::new(OnDisk {
            dir,
            state: Mutex::new(DiskState {
                record: Some(record),
                ..DiskState::default()
            }),
            changed: tokio::sync::Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its record, once it is on disk.
    pub fn record(&self) -> Option<Record> {
        self.state().record.clone()
    }

    /// Whether it is on disk.
    pub fn is_written(&self) -> bool {
        self.state().record.is_some()
    }

    /// Waits until it is on disk, at most `limit`; otherwise why it is not.
    pub async fn wait_written(&self, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let state = self.state();
                if state.record.is_some() {
                    return Ok(());
                }
                if let Some(why) = &state.failed {
                    return Err(format!("writing it failed ({why})"));
                }
                if state.dropped {
                    return Err("it was dropped".to_owned());
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!("it was not written within {} s", limit.as_secs()));
            }
        }
    }

    /// Marks it failed: it stays in memory only, for `why`.
    fn mark_failed(&self, why: String) {
        self.state().failed = Some(why);
        self.changed.notify_waiters();
    }

    /// Whether it has been dropped.
    fn is_dropped(&self) -> bool {
        self.state().dropped
    }

    /// Marks it written with `record`; false if it was dropped meanwhile (the caller removes
    /// it then).
    fn mark_written(&self, record: Record) -> bool {
        let mut state = self.state();
        if state.dropped {
            return false;
        }
        state.record = Some(record);
        drop(state);
        self.changed.notify_waiters();
        true
    }

    /// Marks it dropped; true if it is written (the caller removes it then).
    fn drop_it(&self) -> bool {
        let mut state = self.state();
        state.dropped = true;
        let written = state.record.take().is_some();
        drop(state);
        self.changed.notify_waiters();
        written
    }
}
