//! One checkpoint on disk: a directory `checkpoints/<number>` of its session's directory,
//! holding the guest's state as its [`StateCodec`] writes it (`state/`), the working
//! directory's files (`files.json`), and `checkpoint.json`: which checkpoint it is, the key of
//! the guest that saved it, and the checksum and size of every other file. It is written whole
//! under a hidden name, synced, then renamed into place, so that a checkpoint that is there
//! was written whole.
//!
//! Nothing read back is trusted: a checkpoint is refused, and why is said, when its record
//! cannot be read or names another checkpoint, when it was saved by another build, guest or
//! sizes, when a file is missing or of another size (`truncated`), when a byte differs
//! (`corrupt`), or when the guest's own loader refuses it (`unloadable`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::job::{ExistingBlob, Files, KeyMismatch, SavedState, StateCodec, StateKey};
use crate::sys::durable::{self, Digest};

/// Bumped when the shape of a checkpoint's directory changes.
const FORMAT: u32 = 1;

/// `checkpoint.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    /// The session it belongs to.
    pub session: String,
    pub number: u64,
    /// Host memory its state held when it was saved (counted again once it is loaded).
    pub bytes: u64,
    /// What the state fits.
    pub key: StateKey,
    /// Every other file of the directory, by path.
    pub files: BTreeMap<String, Digest>,
}

/// Why a checkpoint on disk is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its directory is not there (the daemon stopped before writing it).
    Missing,
    /// Its record cannot be read, or names another checkpoint.
    Unreadable,
    /// Saved by another build, guest or guest sizes.
    Mismatch(KeyMismatch),
    /// A file is missing, or not of the size written.
    Truncated,
    /// A file's bytes are not those written.
    Corrupt,
    /// The guest's loader refused the state.
    Unloadable,
}

impl Refusal {
    /// The reason, as metrics and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Unreadable => "unreadable",
            Refusal::Mismatch(mismatch) => mismatch.as_str(),
            Refusal::Truncated => "truncated",
            Refusal::Corrupt => "corrupt",
            Refusal::Unloadable => "unloadable",
        }
    }
}

/// A checkpoint refused, and the details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reason: Refusal,
    pub detail: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.detail)
    }
}

fn refused(reason: Refusal, detail: impl Into<String>) -> Refused {
    Refused {
        reason,
        detail: detail.into(),
    }
}

/// What a new checkpoint directory is written from.
#[derive(Debug)]
pub enum Source<'a> {
    /// The state and files in memory, written by the language's codec.
    Memory {
        state: &'a SavedState,
        files: &'a Files,
        codec: &'a dyn StateCodec,
    },
    /// The same state already written in another checkpoint directory (a fork's start): its
    /// files are linked, not copied.
    Written(&'a Path),
}

/// Where a blob of a state is on disk already, by its SHA-256, with its checksum.
pub type Existing<'a> = &'a mut dyn FnMut(&str) -> Option<(PathBuf, Digest)>;

/// Writes checkpoint `number` of `session` into `dir` (which must not exist) from `source`;
/// `bytes` is the host memory its state holds. The blobs of its state that `existing` finds
/// are hard-linked (see [`super::blobs`]). A crash leaves the directory whole or absent.
pub fn write(
    dir: &Path,
    (session, number, bytes): (&str, u64, u64),
    key: &StateKey,
    source: Source<'_>,
    existing: Existing<'_>,
) -> Result<(), String> {
    let parent = dir.parent().ok_or("a checkpoint directory has a parent")?;
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let partial = durable::partial(parent, &name);
    let _ = fs::remove_dir_all(&partial);
    // Linked files keep the digests they were written with: damage to them stays visible.
    let linked = match source {
        Source::Written(from) => Some(read_record(from).map_err(|e| e.to_string())?.files),
        Source::Memory { .. } => None,
    };
    // The blobs linked, with the checksums they were written with.
    let shared = RefCell::new(HashMap::new());
    let found = RefCell::new(existing);
    let existing = |sha256: &str| {
        let (path, digest) = (found.borrow_mut())(sha256)?;
        shared.borrow_mut().insert(sha256.to_owned(), digest);
        Some(path)
    };
    let written = fill(&partial, source, &existing).and_then(|()| {
        let files = match linked {
            Some(files) => files,
            None => {
                let shared = shared.borrow();
                // A blob linked (a file with another name) keeps the checksum it was written
                // with; the others are read.
                let known = |name: &str, meta: &fs::Metadata| {
                    let sha256 = blob_name(name)?;
                    (meta.nlink() > 1).then(|| shared.get(sha256).cloned())?
                };
                let (files, _) = durable::digests_with(&partial, &["checkpoint.json"], known)
                    .map_err(|e| format!("digesting the checkpoint's files: {e}"))?;
                // After the digests: on some filesystems (tmpfs) reading a hole through a
                // mapping fills it again.
                sparse(&partial.join("state"));
                files
            }
        };
        let record = Record {
            format: FORMAT,
            session: session.to_owned(),
            number,
            bytes,
            key: key.clone(),
            files,
        };
        let record = serde_json::to_vec_pretty(&record).map_err(|e| e.to_string())?;
        durable::write_synced(&partial.join("checkpoint.json"), &record)
            .map_err(|e| format!("writing checkpoint.json: {e}"))?;
        durable::commit(&partial, dir).map_err(|e| format!("committing {}: {e}", dir.display()))
    });
    if written.is_err() {
        let _ = fs::remove_dir_all(&partial);
    }
    written
}

/// Fills the new directory `partial` with the state and files of `source`, linking the blobs
/// `existing` finds.
fn fill(partial: &Path, source: Source<'_>, existing: ExistingBlob<'_>) -> Result<(), String> {
    fs::create_dir(partial).map_err(|e| format!("creating {}: {e}", partial.display()))?;
    match source {
        Source::Memory {
            state,
            files,
            codec,
        } => {
            codec.write(state, &partial.join("state"), existing)?;
            let encoded: BTreeMap<&String, String> = files
                .iter()
                .map(|(path, bytes)| (path, STANDARD.encode(bytes)))
                .collect();
            let encoded = serde_json::to_vec(&encoded).map_err(|e| e.to_string())?;
            durable::write_synced(&partial.join("files.json"), &encoded)
                .map_err(|e| format!("writing files.json: {e}"))
        }
        Source::Written(from) => link_tree(from, partial)
            .map_err(|e| format!("linking the files of {}: {e}", from.display())),
    }
}

/// Files of a state at least this big have their pages of zeros made holes.
const SPARSE_FROM: u64 = 1 << 20;

/// Makes the pages of zeros of the big files under `dir` holes: most of a guest's memory is
/// pages it never wrote (89 % of a JavaScript session's state after a typical cell). Files
/// linked from elsewhere are left alone: they were made sparse when they were written.
fn sparse(dir: &Path) {
    for (path, meta) in durable::files_under(dir) {
        if meta.len() >= SPARSE_FROM
            && meta.nlink() == 1
            && let Err(e) = durable::punch_zero_pages(&path)
        {
            tracing::debug!(file = %path.display(), "cannot make the pages of zeros holes: {e}");
        }
    }
}

/// Hard-links every file under `from` but its record into `to`, making its directories.
fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut pending = vec![std::path::PathBuf::new()];
    while let Some(relative) = pending.pop() {
        for entry in fs::read_dir(from.join(&relative))? {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                fs::create_dir(to.join(&path))?;
                pending.push(path);
            } else if path != Path::new("checkpoint.json") {
                fs::hard_link(from.join(&path), to.join(&path))?;
            }
        }
    }
    Ok(())
}

/// The record of checkpoint `number` of `session` in `dir`, checked cheaply (no byte read but
/// the record's): it names this checkpoint, fits `key`, and every file it names is there with
/// its size.
pub fn check(dir: &Path, session: &str, number: u64, key: &StateKey) -> Result<Record, Refused> {
    if !dir.is_dir() {
        return Err(refused(Refusal::Missing, "not on disk"));
    }
    let record = read_record(dir)?;
    if record.format != FORMAT || record.session != session || record.number != number {
        return Err(refused(
            Refusal::Unreadable,
            format!(
                "checkpoint.json is of format {}, for checkpoint {} of session {}",
                record.format, record.number, record.session
            ),
        ));
    }
    if let Some(mismatch) = key.mismatch(&record.key) {
        return Err(refused(
            Refusal::Mismatch(mismatch),
            format!(
                "saved by hyperlightd {} ({}), for {} with {}",
                record.key.daemon,
                record.key.executable.path.display(),
                record.key.language,
                record.key.sizes
            ),
        ));
    }
    for (name, digest) in &record.files {
        let size = fs::metadata(dir.join(name)).map(|m| m.len());
        if size.as_ref().ok() != Some(&digest.bytes) {
            let found = size.map_or_else(|e| e.to_string(), |n| format!("{n} bytes"));
            return Err(refused(
                Refusal::Truncated,
                format!("{name}: {} bytes written, {found} found", digest.bytes),
            ));
        }
    }
    Ok(record)
}

/// The record of the checkpoint in `dir`, as it says.
fn read_record(dir: &Path) -> Result<Record, Refused> {
    let bytes = fs::read(dir.join("checkpoint.json"))
        .map_err(|e| refused(Refusal::Unreadable, format!("checkpoint.json: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| refused(Refusal::Unreadable, format!("checkpoint.json: {e}")))
}

/// Every byte of the checkpoint in `dir` (whose record is `record`) checked, then its state read
/// by `codec` and its files.
pub fn load(
    dir: &Path,
    record: &Record,
    codec: &dyn StateCodec,
) -> Result<(SavedState, Files), Refused> {
    verify(dir, record)?;
    let files = read_files(dir)?;
    let state = codec
        .read(&dir.join("state"))
        .map_err(|e| refused(Refusal::Unloadable, e))?;
    Ok((state, files))
}

/// The working directory's files of the checkpoint in `dir`, that file's bytes checked.
pub fn load_files(dir: &Path, record: &Record) -> Result<Files, Refused> {
    let expected = record
        .files
        .get("files.json")
        .ok_or_else(|| refused(Refusal::Unreadable, "checkpoint.json names no files.json"))?;
    let found = durable::digest_of_file(&dir.join("files.json"))
        .map_err(|e| refused(Refusal::Truncated, format!("files.json: {e}")))?;
    compare("files.json", expected, &found)?;
    read_files(dir)
}

/// Every file of `dir` is one the record names, of its size and checksum.
fn verify(dir: &Path, record: &Record) -> Result<(), Refused> {
    let (found, _) = durable::digests(dir, &["checkpoint.json"])
        .map_err(|e| refused(Refusal::Truncated, e.to_string()))?;
    for (name, expected) in &record.files {
        let found = found
            .get(name)
            .ok_or_else(|| refused(Refusal::Truncated, format!("{name} is gone")))?;
        compare(name, expected, found)?;
    }
    if let Some(extra) = found.keys().find(|name| !record.files.contains_key(*name)) {
        return Err(refused(
            Refusal::Corrupt,
            format!("{extra} is not a file the checkpoint wrote"),
        ));
    }
    Ok(())
}

fn compare(name: &str, expected: &Digest, found: &Digest) -> Result<(), Refused> {
    if found.bytes != expected.bytes {
        Err(refused(
            Refusal::Truncated,
            format!(
                "{name}: {} bytes written, {} found",
                expected.bytes, found.bytes
            ),
        ))
    } else if found.checksum != expected.checksum {
        Err(refused(
            Refusal::Corrupt,
            format!("{name}: its bytes are not those written"),
        ))
    } else {
        Ok(())
    }
}

fn read_files(dir: &Path) -> Result<Files, Refused> {
    let bytes = fs::read(dir.join("files.json"))
        .map_err(|e| refused(Refusal::Truncated, format!("files.json: {e}")))?;
    let encoded: BTreeMap<String, String> = serde_json::from_slice(&bytes)
        .map_err(|e| refused(Refusal::Corrupt, format!("files.json: {e}")))?;
    encoded
        .into_iter()
        .map(|(path, data)| {
            let data = STANDARD
                .decode(data)
                .map_err(|e| refused(Refusal::Corrupt, format!("files.json: {path}: {e}")))?;
            Ok((path, data))
        })
        .collect()
}

/// The directory of a state's blobs, relative to its checkpoint's directory.
const BLOBS: &str = "state/oci/blobs/sha256";

/// The SHA-256 a checkpoint's file is named by, when it is a blob of its state (`name` is
/// relative to the checkpoint's directory).
pub fn blob_name(name: &str) -> Option<&str> {
    let sha256 = name.strip_prefix(BLOBS)?.strip_prefix('/')?;
    (sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit())).then_some(sha256)
}
