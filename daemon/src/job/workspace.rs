//! A program's working directory: files in the host's memory, never on its disk, that both
//! guests reach only through their host calls (Python through wasi:filesystem, JavaScript
//! through the runner's `files` functions).
//!
//! Every path a guest names is resolved here, lexically, against the directory it starts from:
//! an absolute path, a `..` above the working directory, an empty component, a NUL or other
//! control character, or a name too long is refused before anything is looked up. There are no
//! links (creating one is refused), no devices, no other special files: only directories and
//! regular files, all in one map. The caps on entries and bytes are checked on every write.
//!
//! The rules of paths and caps are the job vocabulary's ([`crate::job::files`]), so that a
//! request's files are checked by the same rules before they get here.
//!
//! One [`Workspace`] belongs to one sandbox. [`Workspace::begin`] fills it for a call from the
//! job's files; [`Workspace::take`] empties it afterwards, so nothing of one request is left for
//! the next. A session's files changed between its execs ([`changed`]) go through one of its
//! own, so that they follow the same rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::job::files::{
    FileChange, FileError, FileLimits, FileRefused, Files, ancestors, check_given, parent,
};

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Dir,
    File { size: u64 },
}

/// At most `len` bytes of `bytes` from `offset` (none past the end).
pub fn window(bytes: &[u8], offset: u64, len: u64) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
    &bytes[start..end.min(bytes.len())]
}

#[derive(Debug, Default)]
struct Tree {
    files: Files,
    dirs: BTreeSet<String>,
    bytes: u64,
    /// Zero until a call begins: nothing may be made.
    limits: FileLimits,
    /// The first write refused at a cap during the call, for the outcome's message.
    over: Option<FileError>,
}

impl Tree {
    fn entry(&self, path: &str) -> Result<Entry, FileError> {
        if path.is_empty() || self.dirs.contains(path) {
            return Ok(Entry::Dir);
        }
        match self.files.get(path) {
            Some(bytes) => Ok(Entry::File {
                size: bytes.len() as u64,
            }),
            None => Err(self.missing(path)),
        }
    }

    /// Why `path` is not there: a file on its way, or nothing.
    fn missing(&self, path: &str) -> FileError {
        if ancestors(path).any(|dir| self.files.contains_key(dir)) {
            FileError::NotDirectory
        } else {
            FileError::NotFound
        }
    }

    /// `path`'s directory exists; `path` itself is a new entry, within the cap.
    fn check_new(&self, path: &str) -> Result<(), FileError> {
        if path.is_empty() {
            return Err(FileError::Exists);
        }
        if self.entry(parent(path))? != Entry::Dir {
            return Err(FileError::NotDirectory);
        }
        if self.files.len() + self.dirs.len() >= self.limits.max_entries {
            return Err(FileError::TooManyFiles);
        }
        Ok(())
    }

    /// A file's content becomes `new_len` bytes long: within the cap?
    fn check_size(&self, old_len: usize, new_len: u64) -> Result<(), FileError> {
        let bytes = self.bytes - old_len as u64 + new_len;
        if new_len > old_len as u64 && bytes > self.limits.max_bytes {
            return Err(FileError::TooLarge);
        }
        Ok(())
    }

    fn file_mut(&mut self, path: &str) -> Result<&mut Vec<u8>, FileError> {
        if self.dirs.contains(path) || path.is_empty() {
            return Err(FileError::IsDirectory);
        }
        if !self.files.contains_key(path) {
            return Err(self.missing(path));
        }
        self.files.get_mut(path).ok_or(FileError::NotFound)
    }
}

/// A sandbox's working directory (see the module's documentation).
#[derive(Debug, Default)]
pub struct Workspace(Mutex<Tree>);

impl Workspace {
    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call starts with `files` (paths checked by [`check_given`]; their directories are
    /// made), within `limits`.
    pub fn begin(&self, files: &Files, limits: FileLimits) {
        let mut tree = self.tree();
        *tree = Tree {
            files: files.clone(),
            dirs: files
                .keys()
                .flat_map(|path| ancestors(path))
                .map(str::to_owned)
                .collect(),
            bytes: files.values().map(|bytes| bytes.len() as u64).sum(),
            limits,
            over: None,
        };
    }

    /// Ends the call: its files, and the first write it refused at a cap, if any.
    pub fn take(&self) -> (Files, Option<FileError>) {
        let tree = std::mem::take(&mut *self.tree());
        (tree.files, tree.over)
    }

    /// What `path` (resolved) names.
    pub fn entry(&self, path: &str) -> Result<Entry, FileError> {
        self.tree().entry(path)
    }

    /// At most `len` bytes of the file at `path` from `offset`, and whether they reach its end.
    pub fn read(&self, path: &str, offset: u64, len: u64) -> Result<(Vec<u8>, bool), FileError> {
        let mut tree = self.tree();
        let bytes = tree.file_mut(path)?;
        let slice = window(bytes, offset, len);
        let end = offset.saturating_add(slice.len() as u64) >= bytes.len() as u64;
        Ok((slice.to_vec(), end))
    }

    /// Opens the file at `path`, creating it (empty) if it is not there and `create` says so;
    /// `exclusive`: it must not be there; `truncate`: it is emptied.
    pub fn open(
        &self,
        path: &str,
        create: bool,
        exclusive: bool,
        truncate: bool,
    ) -> Result<Entry, FileError> {
        let mut tree = self.tree();
        let tree = &mut *tree;
        match tree.entry(path) {
            Ok(_) if create && exclusive => Err(FileError::Exists),
            Ok(Entry::File { .. }) if truncate => {
                let bytes = tree.file_mut(path)?;
                let len = bytes.len() as u64;
                bytes.clear();
                tree.bytes -= len;
                Ok(Entry::File { size: 0 })
            }
            Ok(entry) => Ok(entry),
            Err(FileError::NotFound) if create => {
                tree.check_new(path).map_err(|e| tree.note(e))?;
                tree.files.insert(path.to_owned(), Vec::new());
                Ok(Entry::File { size: 0 })
            }
            Err(e) => Err(e),
        }
    }

    /// Writes `bytes` into the file at `path` at `offset` (None: at its end), growing it with
    /// zeros if need be; the file's new length.
    pub fn write(&self, path: &str, offset: Option<u64>, bytes: &[u8]) -> Result<u64, FileError> {
        let mut tree = self.tree();
        let tree = &mut *tree;
        let old_len = tree.file_mut(path)?.len();
        let at = offset.unwrap_or(old_len as u64);
        let end = at.saturating_add(bytes.len() as u64);
        let new_len = end.max(old_len as u64);
        tree.check_size(old_len, new_len)
            .map_err(|e| tree.note(e))?;
        let at = usize::try_from(at).map_err(|_| FileError::TooLarge)?;
        let file = tree.file_mut(path)?;
        if file.len() < at {
            file.resize(at, 0);
        }
        let overlap = (file.len() - at).min(bytes.len());
        file[at..at + overlap].copy_from_slice(&bytes[..overlap]);
        file.extend_from_slice(&bytes[overlap..]);
        tree.bytes = tree.bytes - old_len as u64 + new_len;
        Ok(new_len)
    }

    /// Cuts or extends (with zeros) the file at `path` to `size` bytes.
    pub fn set_size(&self, path: &str, size: u64) -> Result<(), FileError> {
        let mut tree = self.tree();
        let tree = &mut *tree;
        let old_len = tree.file_mut(path)?.len();
        tree.check_size(old_len, size).map_err(|e| tree.note(e))?;
        let size = usize::try_from(size).map_err(|_| FileError::TooLarge)?;
        tree.file_mut(path)?.resize(size, 0);
        tree.bytes = tree.bytes - old_len as u64 + size as u64;
        Ok(())
    }

    /// Replaces the file at `path` with `bytes`, making its directories as needed (what
    /// JavaScript's `files.write` does).
    pub fn put(&self, path: &str, bytes: &[u8]) -> Result<(), FileError> {
        for dir in ancestors(path) {
            match self.make_dir(dir) {
                Ok(()) | Err(FileError::Exists) => {}
                Err(e) => return Err(e),
            }
        }
        self.open(path, true, false, true)?;
        self.write(path, Some(0), bytes).map(drop)
    }

    /// Makes the directory `path`.
    pub fn make_dir(&self, path: &str) -> Result<(), FileError> {
        let mut tree = self.tree();
        let tree = &mut *tree;
        if tree.entry(path).is_ok() {
            return Err(FileError::Exists);
        }
        tree.check_new(path).map_err(|e| tree.note(e))?;
        tree.dirs.insert(path.to_owned());
        Ok(())
    }

    /// Removes the file at `path`.
    pub fn remove_file(&self, path: &str) -> Result<(), FileError> {
        let mut tree = self.tree();
        let len = tree.file_mut(path)?.len();
        tree.files.remove(path);
        tree.bytes -= len as u64;
        Ok(())
    }

    /// Removes the file or the directory `path` with everything in it (not the working
    /// directory itself).
    pub fn remove_all(&self, path: &str) -> Result<(), FileError> {
        let mut tree = self.tree();
        let tree = &mut *tree;
        match tree.entry(path)? {
            Entry::Dir if path.is_empty() => return Err(FileError::BadName),
            Entry::Dir | Entry::File { .. } => {}
        }
        let prefix = format!("{path}/");
        let gone = |p: &str| p == path || p.starts_with(&prefix);
        let freed: u64 = tree
            .files
            .iter()
            .filter(|(p, _)| gone(p))
            .map(|(_, bytes)| bytes.len() as u64)
            .sum();
        tree.files.retain(|p, _| !gone(p));
        tree.dirs.retain(|p| !gone(p));
        tree.bytes -= freed;
        Ok(())
    }

    /// Removes the empty directory `path`.
    pub fn remove_dir(&self, path: &str) -> Result<(), FileError> {
        let mut tree = self.tree();
        match tree.entry(path)? {
            Entry::File { .. } => return Err(FileError::NotDirectory),
            Entry::Dir if path.is_empty() => return Err(FileError::NotEmpty),
            Entry::Dir => {}
        }
        if !children(&tree, path).is_empty() {
            return Err(FileError::NotEmpty);
        }
        tree.dirs.remove(path);
        Ok(())
    }

    /// Renames `from` to `to`, replacing a file (or an empty directory, for a directory) there.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        let mut tree = self.tree();
        let tree = &mut *tree;
        let moving = tree.entry(from)?;
        if from.is_empty() || to.is_empty() || to.starts_with(&format!("{from}/")) {
            return Err(FileError::BadName);
        }
        if from == to {
            return Ok(());
        }
        match (moving, tree.entry(to)) {
            (_, Err(FileError::NotFound)) => {
                if tree.entry(parent(to))? != Entry::Dir {
                    return Err(FileError::NotDirectory);
                }
            }
            (Entry::File { .. }, Ok(Entry::File { size })) => {
                tree.files.remove(to);
                tree.bytes -= size;
            }
            (Entry::Dir, Ok(Entry::Dir)) if children(tree, to).is_empty() => {
                tree.dirs.remove(to);
            }
            (Entry::Dir, Ok(Entry::Dir)) => return Err(FileError::NotEmpty),
            (Entry::File { .. }, Ok(Entry::Dir)) => return Err(FileError::IsDirectory),
            (Entry::Dir, Ok(Entry::File { .. })) => return Err(FileError::NotDirectory),
            (_, Err(e)) => return Err(e),
        }
        match moving {
            Entry::File { .. } => {
                let bytes = tree.files.remove(from).unwrap_or_default();
                tree.files.insert(to.to_owned(), bytes);
            }
            Entry::Dir => {
                let prefix = format!("{from}/");
                let moved = |path: &String| path == from || path.starts_with(&prefix);
                let dirs: Vec<String> = tree.dirs.iter().filter(|p| moved(p)).cloned().collect();
                for dir in dirs {
                    tree.dirs.remove(&dir);
                    tree.dirs.insert(format!("{to}{}", &dir[from.len()..]));
                }
                let files: Vec<String> = tree.files.keys().filter(|p| moved(p)).cloned().collect();
                for file in files {
                    let bytes = tree.files.remove(&file).unwrap_or_default();
                    tree.files
                        .insert(format!("{to}{}", &file[from.len()..]), bytes);
                }
            }
        }
        Ok(())
    }

    /// The entries of the directory `path`: each name, and whether it is a directory.
    pub fn list(&self, path: &str) -> Result<Vec<(String, bool)>, FileError> {
        let tree = self.tree();
        match tree.entry(path)? {
            Entry::Dir => Ok(children(&tree, path)),
            Entry::File { .. } => Err(FileError::NotDirectory),
        }
    }

    /// Every file's path, and size.
    pub fn files(&self) -> Vec<(String, u64)> {
        let tree = self.tree();
        tree.files
            .iter()
            .map(|(path, bytes)| (path.clone(), bytes.len() as u64))
            .collect()
    }
}

/// `files` with `changes` made to them in order, each by the rules a program's own writes
/// follow and within `limits`. The first change refused refuses them all: `files` are as they
/// were.
pub fn changed(
    files: &Files,
    changes: &[FileChange],
    limits: FileLimits,
) -> Result<Files, FileRefused> {
    let work = Workspace::default();
    work.begin(files, limits);
    for change in changes {
        let refused = |path: &str, error| FileRefused {
            path: path.to_owned(),
            error,
        };
        match change {
            FileChange::Write { path, bytes } => {
                check_given(path).map_err(|e| refused(path, e))?;
                work.put(path, bytes).map_err(|e| refused(path, e))?;
            }
            FileChange::Remove { path } => {
                check_given(path).map_err(|e| refused(path, e))?;
                work.remove_all(path).map_err(|e| refused(path, e))?;
            }
            FileChange::Move { from, to } => {
                check_given(from).map_err(|e| refused(from, e))?;
                check_given(to).map_err(|e| refused(to, e))?;
                work.rename(from, to).map_err(|e| refused(from, e))?;
            }
        }
    }
    Ok(work.take().0)
}

impl Tree {
    /// Keeps the first refusal at a cap for the outcome, and passes every error on.
    fn note(&mut self, e: FileError) -> FileError {
        if matches!(e, FileError::TooManyFiles | FileError::TooLarge) && self.over.is_none() {
            self.over = Some(e);
        }
        e
    }
}

/// The names directly in the directory `dir`, sorted, each with whether it is a directory.
fn children(tree: &Tree, dir: &str) -> Vec<(String, bool)> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let direct = |path: &String| {
        path.strip_prefix(&prefix)
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .map(str::to_owned)
    };
    let mut entries: BTreeMap<String, bool> = BTreeMap::new();
    entries.extend(tree.dirs.iter().filter_map(direct).map(|name| (name, true)));
    entries.extend(
        tree.files
            .keys()
            .filter_map(direct)
            .map(|name| (name, false)),
    );
    entries.into_iter().collect()
}

#[cfg(test)]
mod tests;
