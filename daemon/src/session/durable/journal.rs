//! What a session directory says of its session: `session.json`, written once when the session
//! is made (who owns it, its language, its limits), and `journal`, one line per change of its
//! progress (its checkpoints, execs, last use, a loss not yet reported), each line the whole
//! progress, so that the last whole line is the session's state. A line is synced before the
//! change is answered; a line cut short by a crash is one nobody was told of, and is skipped.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::job::{Env, Labels, Language, Loss, Principal};
use crate::sys::durable;

/// Bumped when the shape of `session.json` or of a journal line changes.
pub const FORMAT: u32 = 1;

/// The largest checkpoint number a journal may name (2^53, exact in any JSON reader): far past
/// what a session reaches, so that numbering never runs out.
const MAX_NUMBER: u64 = 1 << 53;

/// Lines after which the journal is rewritten as one.
const COMPACT_AFTER: usize = 512;

/// `session.json`: what does not change in a session's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFile {
    pub format: u32,
    pub id: String,
    /// Who it belongs to: a uid (a number), or a pod (a string).
    pub owner: Principal,
    pub language: Language,
    pub created_at_ms: u64,
    pub idle_timeout_ms: u64,
    /// Its labels, checked again when read back: a record whose labels break the rules does
    /// not read.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
    /// The environment its execs see, checked again when read back.
    #[serde(default, skip_serializing_if = "Env::is_empty")]
    pub env: Env,
}

/// One line of the journal: the session's progress after a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub execs: u64,
    pub last_used_ms: u64,
    /// Its idle timeout as last set (`PATCH /v1/sessions/{id}`); absent: as created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// The number its next checkpoint takes.
    pub next: u64,
    /// Its checkpoints, oldest first: the last is its state. A checkpoint an answered exec made
    /// is here from its answer on, whether or not it reached the disk yet.
    pub checkpoints: Vec<Mark>,
    /// State it lost that no answer has reported yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<LostRecord>,
}

/// A checkpoint, as the journal names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub number: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    pub made_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<u64>,
    /// Where a new session started: the warm state, which is never written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
}

/// A [`Loss`] as the journal keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostRecord {
    pub restored_from_checkpoint: u64,
    pub lost_execs: u64,
}

impl From<Loss> for LostRecord {
    fn from(loss: Loss) -> Self {
        LostRecord {
            restored_from_checkpoint: loss.restored_from_checkpoint,
            lost_execs: loss.lost_execs,
        }
    }
}

impl From<LostRecord> for Loss {
    fn from(lost: LostRecord) -> Self {
        Loss {
            restored_from_checkpoint: lost.restored_from_checkpoint,
            lost_execs: lost.lost_execs,
        }
    }
}

/// Milliseconds since the epoch.
pub fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `duration` in milliseconds, as the journal keeps durations.
pub fn millis_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The time `ms` milliseconds after the epoch.
pub fn at_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A session's journal, open for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    lines: usize,
}

impl Journal {
    /// Writes `session` and its first `progress` into the new directory `dir` (its parent must
    /// exist), synced.
    pub fn create(dir: &Path, session: &SessionFile, progress: &Progress) -> io::Result<Journal> {
        let partial = durable::partial(
            dir.parent().unwrap_or(Path::new(".")),
            &dir.file_name().unwrap_or_default().to_string_lossy(),
        );
        let _ = fs::remove_dir_all(&partial);
        fs::create_dir(&partial)?;
        fs::create_dir(partial.join("checkpoints"))?;
        durable::write_synced(&partial.join("session.json"), &json(session)?)?;
        durable::write_synced(&partial.join("journal"), &line(progress)?)?;
        durable::commit(&partial, dir)?;
        Journal::open(dir, 1)
    }

    /// The journal of the session directory `dir`, which holds `lines` lines, for appending.
    pub fn open(dir: &Path, lines: usize) -> io::Result<Journal> {
        let path = dir.join("journal");
        let file = OpenOptions::new().append(true).open(&path)?;
        Ok(Journal { path, file, lines })
    }

    /// Appends `progress` and waits until it is on disk; past [`COMPACT_AFTER`] lines the
    /// journal is rewritten as this one line.
    pub fn append(&mut self, progress: &Progress) -> io::Result<()> {
        let line = line(progress)?;
        if self.lines >= COMPACT_AFTER {
            durable::replace_synced(&self.path, &line)?;
            self.file = OpenOptions::new().append(true).open(&self.path)?;
            self.lines = 1;
            return Ok(());
        }
        self.file.write_all(&line)?;
        self.file.sync_data()?;
        self.lines += 1;
        Ok(())
    }
}

/// What a session directory says: its `session.json`, its last whole journal line, and how
/// many lines the journal holds.
pub fn read(dir: &Path) -> Result<(SessionFile, Progress, usize), String> {
    let session =
        fs::read(dir.join("session.json")).map_err(|e| format!("reading session.json: {e}"))?;
    let session: SessionFile =
        serde_json::from_slice(&session).map_err(|e| format!("reading session.json: {e}"))?;
    if session.format != FORMAT {
        return Err(format!(
            "session.json is of format {}, this daemon reads {FORMAT}",
            session.format
        ));
    }
    let journal = fs::read(dir.join("journal")).map_err(|e| format!("reading journal: {e}"))?;
    let lines: Vec<&[u8]> = journal
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    // A line cut short (the daemon stopped while writing it) was never answered: the one before
    // it is the session's state.
    let progress = lines
        .iter()
        .rev()
        .find_map(|l| serde_json::from_slice::<Progress>(l).ok())
        .ok_or("the journal holds no whole line")?;
    let numbers = progress.checkpoints.iter().map(|m| m.number);
    if numbers.chain([progress.next]).any(|n| n > MAX_NUMBER) {
        return Err(format!(
            "the journal names a checkpoint number past {MAX_NUMBER}, which no session reaches"
        ));
    }
    Ok((session, progress, lines.len()))
}

fn json(value: &impl Serialize) -> io::Result<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(io::Error::other)
}

fn line(progress: &Progress) -> io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(progress).map_err(io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionFile {
        SessionFile {
            format: FORMAT,
            id: "ab".to_owned(),
            owner: Principal::Uid(1000),
            language: Language::Javascript,
            created_at_ms: 1,
            idle_timeout_ms: 600_000,
            labels: Labels::default(),
            env: Env::default(),
        }
    }

    fn progress(execs: u64) -> Progress {
        Progress {
            execs,
            last_used_ms: 2 + execs,
            idle_timeout_ms: None,
            next: execs + 1,
            checkpoints: vec![Mark {
                number: execs,
                parent: None,
                made_at_ms: 3,
                request_id: Some(execs),
                warm: execs == 0,
            }],
            lost: None,
        }
    }

    #[test]
    fn an_owner_is_a_uid_or_a_pod_and_earlier_records_read_as_uids() {
        let pod = SessionFile {
            owner: Principal::Pod("pod-a".into()),
            ..session()
        };
        let text = serde_json::to_string(&pod).unwrap();
        assert!(text.contains(r#""owner":"pod-a""#), "{text}");
        assert_eq!(serde_json::from_str::<SessionFile>(&text).unwrap(), pod);
        // As the daemon wrote it before pods owned sessions.
        let earlier = r#"{"format":1,"id":"ab","owner":1000,"language":"javascript","created_at_ms":1,"idle_timeout_ms":600000}"#
            .replace(r#""format":1"#, &format!(r#""format":{FORMAT}"#));
        assert_eq!(
            serde_json::from_str::<SessionFile>(&earlier).unwrap(),
            session()
        );
    }

    #[test]
    fn labels_are_kept_and_a_record_without_them_has_none() {
        let labelled = SessionFile {
            labels: Labels::new(
                [("conversation".to_owned(), "c-1".to_owned())]
                    .into_iter()
                    .collect(),
            )
            .unwrap(),
            ..session()
        };
        let text = serde_json::to_string(&labelled).unwrap();
        assert!(
            text.contains(r#""labels":{"conversation":"c-1"}"#),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<SessionFile>(&text).unwrap(),
            labelled
        );
        let plain = serde_json::to_string(&session()).unwrap();
        assert!(!plain.contains("labels"), "{plain}");
    }

    #[test]
    fn the_last_whole_line_is_the_state_and_a_torn_one_is_skipped() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ab");
        let mut journal = Journal::create(&dir, &session(), &progress(0)).unwrap();
        journal.append(&progress(1)).unwrap();
        journal.append(&progress(2)).unwrap();
        assert_eq!(read(&dir).unwrap(), (session(), progress(2), 3));
        // A crash in the middle of a line.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join("journal"))
            .unwrap();
        file.write_all(br#"{"execs":3,"last_u"#).unwrap();
        assert_eq!(read(&dir).unwrap().1, progress(2));
        assert!(dir.join("checkpoints").is_dir());
        let left: Vec<_> = fs::read_dir(root.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "no partial directory is left: {left:?}");
    }

    #[test]
    fn a_long_journal_is_rewritten_as_its_last_line() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ab");
        let mut journal = Journal::create(&dir, &session(), &progress(0)).unwrap();
        for execs in 1..=(COMPACT_AFTER as u64 + 3) {
            journal.append(&progress(execs)).unwrap();
        }
        let (_, last, lines) = read(&dir).unwrap();
        assert_eq!(last, progress(COMPACT_AFTER as u64 + 3));
        assert!(lines < 10, "{lines} lines");
    }

    #[test]
    fn a_directory_without_a_whole_line_or_of_another_format_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ab");
        Journal::create(&dir, &session(), &progress(0)).unwrap();
        fs::write(dir.join("journal"), b"{\"exe").unwrap();
        assert!(read(&dir).unwrap_err().contains("no whole line"));
        let other = SessionFile {
            format: FORMAT + 1,
            ..session()
        };
        fs::write(
            dir.join("session.json"),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        assert!(read(&dir).unwrap_err().contains("format"));
    }
}
