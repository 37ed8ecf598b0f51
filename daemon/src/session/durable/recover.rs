//! Reading the state directory back at startup: each session's record, its journal's last whole
//! line, and a first check of each checkpoint it names (its record, its key, the size of every
//! file: no byte of a state is read until the session is used, when every byte is).
//!
//! A checkpoint that fails is refused, said in the log and counted by reason, and removed. The
//! session is then at its newest checkpoint that passes; checkpoints newer than that one were
//! answered execs' states, and the session reports them lost. A session none of whose
//! checkpoints passes is kept, lost, so that its caller is told rather than finding it gone.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use tracing::{info, warn};

use super::checkpoint::{self, Refused};
use super::journal::{self, Journal, Mark, Progress, SessionFile};
use super::{Durable, OnDisk, SessionDisk};
use crate::job::Loss;
use crate::sys::durable;

/// A session read back.
#[derive(Debug)]
pub struct Recovered {
    pub file: SessionFile,
    /// Its progress, as recovery left it (and wrote it).
    pub progress: Progress,
    pub disk: Arc<SessionDisk>,
    /// The checkpoints kept, oldest first, each with its directory (None: the warm state) and
    /// the memory its state holds once loaded.
    pub checkpoints: Vec<(Mark, Option<Arc<OnDisk>>, u64)>,
    /// Why none of its checkpoints can be used, when none can.
    pub gone: Option<String>,
}

impl Durable {
    /// Every session of the state directory that this daemon serves (a session of a language
    /// it does not serve is left on disk, untouched). A session whose own record cannot be read
    /// is removed.
    pub fn recover(&self) -> Vec<Recovered> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if let Some(recovered) = self.recover_one(&entry.path(), &name) {
                found.push(recovered);
            }
        }
        found
    }

    fn recover_one(&self, dir: &Path, name: &str) -> Option<Recovered> {
        let (file, progress, lines) = match journal::read(dir) {
            Ok(read) if read.0.id == name => read,
            Ok(_) => return self.unreadable(dir, "session.json names another session"),
            Err(why) => return self.unreadable(dir, &why),
        };
        let Some(codec) = self.codec(file.language) else {
            info!(session = %name, language = %file.language, "a saved session of a language this daemon does not serve: left on disk");
            return None;
        };
        let journal = match Journal::open(dir, lines) {
            Ok(journal) => journal,
            Err(e) => return self.unreadable(dir, &format!("opening its journal: {e}")),
        };
        let disk = Arc::new(SessionDisk::new(
            dir.to_owned(),
            journal,
            self.metrics().clone(),
        ));
        let mut kept = Vec::new();
        let mut refused: Vec<(u64, Refused)> = Vec::new();
        for mark in &progress.checkpoints {
            if mark.warm {
                kept.push((mark.clone(), None, 0));
                continue;
            }
            let at = disk.checkpoint_dir(mark.number);
            match checkpoint::check(&at, name, mark.number, codec.key()) {
                Ok(record) => {
                    let bytes = record.bytes;
                    let on_disk = self.blobs().hold(&at, &record);
                    self.metrics()
                        .disk_bytes
                        .add(i64::try_from(on_disk).unwrap_or(0));
                    let disk = OnDisk::written(at, record);
                    kept.push((mark.clone(), Some(disk), bytes));
                }
                Err(why) => {
                    self.metrics().load_failed(why.reason.as_str());
                    warn!(session = %name, checkpoint = mark.number, reason = why.reason.as_str(), "a checkpoint is refused: {why}");
                    refused.push((mark.number, why));
                }
            }
        }
        remove_others(&disk, &kept);
        let recovered = settle(file, progress, disk, kept, &refused);
        let outcome = match (&recovered.gone, refused.is_empty()) {
            (Some(_), _) => "lost",
            (None, true) => "intact",
            (None, false) => "rolled_back",
        };
        self.metrics().recovered(outcome);
        if !recovered.disk.record(name, &recovered.progress) {
            return None;
        }
        Some(recovered)
    }

    /// Says why the session directory `dir` cannot be read, counts it, and removes it.
    fn unreadable(&self, dir: &Path, why: &str) -> Option<Recovered> {
        warn!(dir = %dir.display(), "a saved session cannot be read ({why}): it is removed");
        self.metrics().recovered("unreadable");
        durable::discard(dir);
        None
    }
}

/// The session's progress once the `refused` checkpoints are gone from it: at its newest kept
/// checkpoint, with the answered execs newer than that one reported lost.
fn settle(
    file: SessionFile,
    mut progress: Progress,
    disk: Arc<SessionDisk>,
    kept: Vec<(Mark, Option<Arc<OnDisk>>, u64)>,
    refused: &[(u64, Refused)],
) -> Recovered {
    progress.checkpoints = kept.iter().map(|(mark, ..)| mark.clone()).collect();
    let Some(head) = kept.last().map(|(mark, ..)| mark.number) else {
        let why: Vec<String> = refused
            .iter()
            .map(|(number, why)| format!("checkpoint {number}: {why}"))
            .collect();
        return Recovered {
            file,
            progress,
            disk,
            checkpoints: kept,
            gone: Some(why.join("; ")),
        };
    };
    let lost = refused.iter().filter(|(number, _)| *number > head).count() as u64;
    if lost > 0 {
        let before = progress.lost.map_or(0, |lost| lost.lost_execs);
        progress.lost = Some(
            Loss {
                restored_from_checkpoint: head,
                lost_execs: before + lost,
            }
            .into(),
        );
    }
    Recovered {
        file,
        progress,
        disk,
        checkpoints: kept,
        gone: None,
    }
}

/// Removes the session's checkpoint directories that are not among `kept`: refused ones, and
/// those a daemon dropped (rolled back, past the retention) but stopped before removing.
fn remove_others(disk: &SessionDisk, kept: &[(Mark, Option<Arc<OnDisk>>, u64)]) {
    let dir = disk.checkpoint_dir(0);
    let Some(checkpoints) = dir.parent() else {
        return;
    };
    let _ = durable::clear_leftovers(checkpoints);
    let Ok(entries) = fs::read_dir(checkpoints) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let known = name.parse::<u64>().is_ok_and(|n| {
            kept.iter()
                .any(|(mark, disk, _)| mark.number == n && disk.is_some())
        });
        if !known {
            durable::discard(&entry.path());
        }
    }
}
