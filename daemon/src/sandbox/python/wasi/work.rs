//! wasi:filesystem over the program's working directory, the preopened directory `work` (the
//! runner makes `/work` the current directory): the request's files, in a [`Workspace`] in the
//! host's memory. Everything a program does to files there (create, write, truncate, rename,
//! remove, make and remove directories, list, stat) is done to the workspace; every path is
//! resolved by it, so nothing outside the working directory can be named, and nothing reaches
//! the host's disk.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::job::files::FileError;
use crate::job::workspace::{self, Entry};
use crate::sandbox::python::bindings::wasi::filesystem;

use filesystem::types::{DescriptorType, DirectoryEntry, ErrorCode as FsError, MetadataHashValue};

/// The most bytes one read hands the guest, from the library or the working directory; it
/// reads on for more.
pub(super) const MAX_READ: u64 = 64 * 1024;

/// The name the working directory is preopened under.
pub const PREOPEN: &str = "work";

impl From<FileError> for FsError {
    fn from(e: FileError) -> FsError {
        match e {
            FileError::NotFound => FsError::NoEntry,
            FileError::NotDirectory => FsError::NotDirectory,
            FileError::IsDirectory => FsError::IsDirectory,
            FileError::Exists => FsError::Exist,
            FileError::NotEmpty => FsError::NotEmpty,
            FileError::Escapes | FileError::NoLinks => FsError::NotPermitted,
            FileError::BadName => FsError::Invalid,
            FileError::TooManyFiles => FsError::Quota,
            FileError::TooLarge => FsError::InsufficientSpace,
        }
    }
}

/// A file of the working directory being read through a stream: its path, and where the next
/// read starts.
#[derive(Debug)]
pub struct WorkReader {
    pub path: String,
    pub at: AtomicU64,
}

/// A file of the working directory being written through a stream: its path, and where the
/// next write goes (None: at its end, whatever that is then).
#[derive(Debug)]
pub struct WorkWriter {
    pub path: String,
    pub at: Option<AtomicU64>,
}

/// A copy reads on from where the original was (a session's saved state keeps one).
impl Clone for WorkReader {
    fn clone(&self) -> Self {
        WorkReader {
            path: self.path.clone(),
            at: AtomicU64::new(self.at.load(Ordering::Relaxed)),
        }
    }
}

impl Clone for WorkWriter {
    fn clone(&self) -> Self {
        WorkWriter {
            path: self.path.clone(),
            at: self
                .at
                .as_ref()
                .map(|at| AtomicU64::new(at.load(Ordering::Relaxed))),
        }
    }
}

/// A directory of the working directory being listed: its entries when the listing began.
#[derive(Debug)]
pub struct WorkListing {
    pub entries: Vec<(String, bool)>,
    pub next: AtomicUsize,
}

impl Clone for WorkListing {
    fn clone(&self) -> Self {
        WorkListing {
            entries: self.entries.clone(),
            next: AtomicUsize::new(self.next.load(Ordering::Relaxed)),
        }
    }
}

impl WorkReader {
    /// The next at most `len` bytes, or None at the end.
    pub fn read(&self, work: &workspace::Workspace, len: u64) -> Option<Vec<u8>> {
        let at = self.at.load(Ordering::Relaxed);
        let (bytes, _) = work.read(&self.path, at, len.min(MAX_READ)).ok()?;
        if bytes.is_empty() && len > 0 {
            return None;
        }
        self.at.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Some(bytes)
    }
}

impl WorkWriter {
    /// Writes `bytes` where the stream is, and moves on past them.
    pub fn write(&self, work: &workspace::Workspace, bytes: &[u8]) -> Result<(), FileError> {
        let at = self.at.as_ref().map(|at| at.load(Ordering::Relaxed));
        work.write(&self.path, at, bytes)?;
        if let Some(at) = &self.at {
            at.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl WorkListing {
    /// The next entry, or None at the end.
    pub fn next(&self) -> Option<DirectoryEntry> {
        let next = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries.get(next).map(|(name, dir)| DirectoryEntry {
            r#type: kind(*dir),
            name: name.clone(),
        })
    }
}

/// A directory or a regular file.
pub fn kind(dir: bool) -> DescriptorType {
    if dir {
        DescriptorType::Directory
    } else {
        DescriptorType::RegularFile
    }
}

/// What the guest sees of an entry: its type and size.
pub fn type_and_size(entry: Entry) -> (DescriptorType, u64) {
    match entry {
        Entry::Dir => (DescriptorType::Directory, 0),
        Entry::File { size } => (DescriptorType::RegularFile, size),
    }
}

/// The inode the guest sees for a path of the working directory (`upper` 1 keeps it apart from
/// the library's, whose `upper` is 0).
pub fn hash_of(path: &str) -> MetadataHashValue {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    MetadataHashValue {
        lower: hasher.finish(),
        upper: 1,
    }
}
