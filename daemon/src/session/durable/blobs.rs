//! The files checkpoints share on disk, and the disk they take.
//!
//! A state's memory is written as files named by their SHA-256 (hyperlight-host's OCI layout,
//! `state/oci/blobs/sha256/<hex>`), one per file its memory is mapped from: the template it
//! started from, the checkpoints it was made from, and its own pages (hyperlight-host patches
//! 0003 and 0004). A checkpoint's directory hard-links the files an earlier checkpoint (or the
//! saved template) already has, so that writing it costs the pages its exec changed. Every
//! checkpoint directory stays whole on its own: the file system's link counts say when a file
//! is no longer any checkpoint's, and a damaged file is damaged in every checkpoint that has
//! it, which each refuses when it is checked.
//!
//! [`Blobs`] knows, for each such file, the checkpoint files that hold it, with the checksum
//! each was written with (so that a link is not read again to be checked); and counts the
//! disk the checkpoints take, each file once however many checkpoints link it.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::checkpoint::{Record, blob_name};
use crate::sys::durable::{self, Digest};

/// Where a blob is, by its SHA-256, beyond the checkpoints (the saved templates).
pub type Elsewhere = Box<dyn Fn(&str) -> Option<(PathBuf, Digest)> + Send + Sync>;

/// The files of the checkpoints on disk, by digest and by inode.
#[derive(Default)]
pub struct Blobs {
    /// For each blob's SHA-256, the checkpoint files that are that blob, newest last.
    by_digest: HashMap<String, Vec<(PathBuf, Digest)>>,
    /// Each file some checkpoint directory has: the disk it takes and how many have it.
    held: HashMap<(u64, u64), Held>,
    /// Where else a blob may be.
    elsewhere: Option<Elsewhere>,
}

impl std::fmt::Debug for Blobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blobs")
            .field("digests", &self.by_digest.len())
            .field("files", &self.held.len())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    bytes: u64,
    holders: u32,
}

impl Blobs {
    /// Blobs that may also be found by `elsewhere`.
    pub fn new(elsewhere: Option<Elsewhere>) -> Self {
        Blobs {
            elsewhere,
            ..Blobs::default()
        }
    }

    /// A file on disk that is the blob `sha256`, and its checksum: a checkpoint's, else one
    /// `elsewhere` knows. Only a regular file of the size it was written with is offered.
    pub fn find(&mut self, sha256: &str) -> Option<(PathBuf, Digest)> {
        let fits = |path: &Path, digest: &Digest| {
            fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == digest.bytes)
        };
        if let Some(known) = self.by_digest.get_mut(sha256) {
            known.retain(|(path, digest)| fits(path, digest));
            if let Some(found) = known.last() {
                return Some(found.clone());
            }
            self.by_digest.remove(sha256);
        }
        let (path, digest) = self.elsewhere.as_ref()?(sha256)?;
        fits(&path, &digest).then_some((path, digest))
    }

    /// Takes note of the checkpoint written (or found at startup) in `dir`, with `record`:
    /// its blobs can be linked from now on, and its files are held. Returns the disk its files
    /// take that no other checkpoint's did.
    pub fn hold(&mut self, dir: &Path, record: &Record) -> u64 {
        let mut added = 0;
        for (name, digest) in &record.files {
            let path = dir.join(name);
            if let Some(sha256) = blob_name(name) {
                self.by_digest
                    .entry(sha256.to_owned())
                    .or_default()
                    .push((path.clone(), digest.clone()));
            }
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let held = self.held.entry((meta.dev(), meta.ino())).or_insert(Held {
                bytes: meta.blocks() * 512,
                holders: 0,
            });
            if held.holders == 0 {
                added += held.bytes;
            }
            held.holders += 1;
        }
        added
    }

    /// Lets go of the files under `dir` (a checkpoint's or a session's directory, about to be
    /// removed). Returns the disk that no checkpoint takes any more.
    pub fn release(&mut self, dir: &Path) -> u64 {
        let mut freed = 0;
        for (_, meta) in durable::files_under(dir) {
            let key = (meta.dev(), meta.ino());
            if let Some(held) = self.held.get_mut(&key) {
                held.holders = held.holders.saturating_sub(1);
                if held.holders == 0 {
                    freed += held.bytes;
                    self.held.remove(&key);
                }
            }
        }
        for known in self.by_digest.values_mut() {
            known.retain(|(path, _)| !path.starts_with(dir));
        }
        self.by_digest.retain(|_, known| !known.is_empty());
        freed
    }
}
