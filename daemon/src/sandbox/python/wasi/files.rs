//! wasi:filesystem: the Python guest's [`Library`] and the program's working directory.
//!
//! The library's top-level directories are preopened directories (`python`, the standard
//! library, and `0`, the runner's directory with any packages), and everything in them can be
//! listed, stat-ed and read. Nothing there can be written, created, renamed or removed: each
//! such call answers `read-only`. Every sandbox reads the one library the daemon loaded; no
//! request can change what another sees.
//!
//! The working directory, preopened as `work`, is the request's files (see [`super::work`]):
//! each call below answers for a descriptor of either, and refuses what would cross from one
//! to the other.
//!
//! Every descriptor, directory listing and file stream the guest opens is a host handle, kept
//! until the restore after the call and counted against `--python-max-host-handles`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hyperlight_common::component::Negative as N;
use hyperlight_common::resource::BorrowedResourceGuard as B;

use super::work::{self, MAX_READ, WorkListing, WorkReader, WorkWriter};
use super::{Input, Output, Portable, ToPortable, WasiHost};
use crate::job::files::{self, FileError};
use crate::job::workspace::{Entry, window};
use crate::sandbox::python::bindings::wasi::clocks::wall_clock::Datetime;
use crate::sandbox::python::bindings::wasi::filesystem;
use crate::sandbox::python::library::{Library, Lookup, Node};

use filesystem::types::{
    Advice, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode as FsError,
    MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};

/// An open file or directory: a node of the library, or a path of the working directory.
#[derive(Clone)]
pub enum Descriptor {
    Library(usize),
    Work(String),
}

/// A directory being listed.
#[derive(Clone)]
pub enum Listing {
    Library(LibraryListing),
    Work(WorkListing),
}

/// A directory of the library being listed: its node, and the index of the next entry.
pub struct LibraryListing {
    dir: usize,
    next: AtomicUsize,
}

/// A file being read through a stream: its node, and where the next read starts.
pub struct FileStream {
    file: usize,
    at: AtomicU64,
}

/// A copy reads on from where the original was (a session's saved state keeps one).
impl Clone for FileStream {
    fn clone(&self) -> Self {
        FileStream {
            file: self.file,
            at: AtomicU64::new(self.at.load(Ordering::Relaxed)),
        }
    }
}

/// A copy lists on from where the original was.
impl Clone for LibraryListing {
    fn clone(&self) -> Self {
        LibraryListing {
            dir: self.dir,
            next: AtomicUsize::new(self.next.load(Ordering::Relaxed)),
        }
    }
}

impl ToPortable for FileStream {
    fn to_portable(&self) -> Portable {
        Portable::File {
            node: self.file,
            at: self.at.load(Ordering::Relaxed),
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match *portable {
            Portable::File { node, at } => Some(FileStream {
                file: node,
                at: AtomicU64::new(at),
            }),
            _ => None,
        }
    }
}

impl ToPortable for Descriptor {
    fn to_portable(&self) -> Portable {
        match self {
            Descriptor::Library(node) => Portable::Descriptor { node: *node },
            Descriptor::Work(path) => Portable::WorkDescriptor { path: path.clone() },
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match portable {
            Portable::Descriptor { node } => Some(Descriptor::Library(*node)),
            Portable::WorkDescriptor { path } => Some(Descriptor::Work(path.clone())),
            _ => None,
        }
    }
}

impl ToPortable for Listing {
    fn to_portable(&self) -> Portable {
        match self {
            Listing::Library(listing) => Portable::Listing {
                node: listing.dir,
                next: listing.next.load(Ordering::Relaxed),
            },
            Listing::Work(listing) => Portable::WorkListing {
                entries: listing.entries.clone(),
                next: listing.next.load(Ordering::Relaxed),
            },
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match portable {
            Portable::Listing { node, next } => Some(Listing::Library(LibraryListing {
                dir: *node,
                next: AtomicUsize::new(*next),
            })),
            Portable::WorkListing { entries, next } => Some(Listing::Work(WorkListing {
                entries: entries.clone(),
                next: AtomicUsize::new(*next),
            })),
            _ => None,
        }
    }
}

impl FileStream {
    /// The next at most `len` bytes, or None at the end.
    pub fn read(&self, library: &Library, len: u64) -> Option<Vec<u8>> {
        let bytes = library.file(self.file)?;
        let at = self.at.load(Ordering::Relaxed);
        let slice = window(bytes, at, len.min(MAX_READ));
        if slice.is_empty() && len > 0 {
            return None;
        }
        self.at.fetch_add(slice.len() as u64, Ordering::Relaxed);
        Some(slice.to_vec())
    }
}

impl From<Lookup> for FsError {
    fn from(lookup: Lookup) -> FsError {
        match lookup {
            Lookup::NotFound => FsError::NoEntry,
            Lookup::NotDirectory => FsError::NotDirectory,
            Lookup::Escapes => FsError::NotPermitted,
        }
    }
}

impl WasiHost {
    fn library(&self) -> Result<&Arc<Library>, FsError> {
        self.library.as_ref().ok_or(FsError::BadDescriptor)
    }

    fn lookup(&self, dir: usize, path: &str) -> Result<usize, FsError> {
        Ok(self.library()?.lookup(dir, path)?)
    }

    fn stat_of(&self, node: usize) -> Result<DescriptorStat<Datetime>, FsError> {
        Ok(match self.library()?.node(node) {
            Node::Dir(_) => stat(DescriptorType::Directory, 0),
            Node::File(range) => stat(DescriptorType::RegularFile, range.len() as u64),
        })
    }

    fn file_bytes(&self, node: usize) -> Result<&[u8], FsError> {
        self.library()?.file(node).ok_or(FsError::IsDirectory)
    }
}

/// What the guest sees of a file or directory. No times: the guest reads them as 0, the same
/// on every run (the runner relies on that to keep its import caches; see runner.py).
fn stat(kind: DescriptorType, size: u64) -> DescriptorStat<Datetime> {
    DescriptorStat {
        r#type: kind,
        link_count: 1,
        size,
        data_access_timestamp: None,
        data_modification_timestamp: None,
        status_change_timestamp: None,
    }
}

/// The inode the guest sees: the node's index.
fn hash_of(node: usize) -> MetadataHashValue {
    MetadataHashValue {
        lower: node as u64,
        upper: 0,
    }
}

/// A descriptor of the working directory, or the error a library one gets for a change.
fn work_dir(this: &Descriptor) -> Result<&str, FsError> {
    match this {
        Descriptor::Work(path) => Ok(path),
        Descriptor::Library(_) => Err(FsError::ReadOnly),
    }
}

/// `path` from the working directory's descriptor `dir`, resolved.
fn work_path(dir: &str, path: &str) -> Result<String, FsError> {
    Ok(files::resolve(dir, path)?)
}

impl WasiHost {
    fn work_stat(&self, path: &str) -> Result<DescriptorStat<Datetime>, FsError> {
        let (kind, size) = work::type_and_size(self.work.entry(path)?);
        Ok(stat(kind, size))
    }

    /// `open-at` in the working directory.
    fn work_open(
        &mut self,
        dir: &str,
        path: &str,
        open: OpenFlags,
        flags: DescriptorFlags,
    ) -> Result<Descriptor, FsError> {
        let path = work_path(dir, path)?;
        let writes = flags.write || open.truncate;
        let entry = match self.work.entry(&path) {
            Ok(_) if open.create && open.exclusive => return Err(FileError::Exists.into()),
            Ok(Entry::Dir) if writes => return Err(FsError::IsDirectory),
            Ok(Entry::Dir) => Entry::Dir,
            Ok(Entry::File { .. }) | Err(FileError::NotFound) => {
                self.work
                    .open(&path, open.create, open.exclusive, open.truncate)?
            }
            Err(e) => return Err(e.into()),
        };
        if open.directory && entry != Entry::Dir {
            return Err(FsError::NotDirectory);
        }
        self.call.resource_given();
        Ok(Descriptor::Work(path))
    }
}

impl filesystem::types::Descriptor<N, Datetime, Listing, Input, Output> for WasiHost {
    type T = Descriptor;
    fn read_via_stream(&mut self, this: B<'_, Descriptor>, offset: u64) -> Result<Input, FsError> {
        let input = match &*this {
            Descriptor::Library(node) => {
                self.file_bytes(*node)?;
                Input::File(FileStream {
                    file: *node,
                    at: AtomicU64::new(offset),
                })
            }
            Descriptor::Work(path) => {
                if self.work.entry(path)? == Entry::Dir {
                    return Err(FsError::IsDirectory);
                }
                Input::Work(Box::new(WorkReader {
                    path: path.clone(),
                    at: AtomicU64::new(offset),
                }))
            }
        };
        self.call.resource_given();
        Ok(input)
    }
    fn write_via_stream(
        &mut self,
        this: B<'_, Descriptor>,
        offset: u64,
    ) -> Result<Output, FsError> {
        let path = work_dir(&this)?.to_owned();
        if self.work.entry(&path)? == Entry::Dir {
            return Err(FsError::IsDirectory);
        }
        self.call.resource_given();
        Ok(Output::File(Box::new(WorkWriter {
            path,
            at: Some(AtomicU64::new(offset)),
        })))
    }
    fn append_via_stream(&mut self, this: B<'_, Descriptor>) -> Result<Output, FsError> {
        let path = work_dir(&this)?.to_owned();
        if self.work.entry(&path)? == Entry::Dir {
            return Err(FsError::IsDirectory);
        }
        self.call.resource_given();
        Ok(Output::File(Box::new(WorkWriter { path, at: None })))
    }
    fn advise(&mut self, _: B<'_, Descriptor>, _: u64, _: u64, _: Advice) -> Result<(), FsError> {
        Ok(())
    }
    fn sync_data(&mut self, _: B<'_, Descriptor>) -> Result<(), FsError> {
        Ok(())
    }
    fn get_flags(&mut self, this: B<'_, Descriptor>) -> Result<DescriptorFlags, FsError> {
        let work = matches!(&*this, Descriptor::Work(_));
        Ok(DescriptorFlags {
            read: true,
            write: work,
            file_integrity_sync: false,
            data_integrity_sync: false,
            requested_write_sync: false,
            mutate_directory: work,
        })
    }
    fn set_size(&mut self, this: B<'_, Descriptor>, size: u64) -> Result<(), FsError> {
        Ok(self.work.set_size(work_dir(&this)?, size)?)
    }
    fn set_times(
        &mut self,
        this: B<'_, Descriptor>,
        _: NewTimestamp<Datetime>,
        _: NewTimestamp<Datetime>,
    ) -> Result<(), FsError> {
        // Files keep no times: setting them changes nothing.
        work_dir(&this).map(drop)
    }
    fn read(
        &mut self,
        this: B<'_, Descriptor>,
        len: u64,
        offset: u64,
    ) -> Result<(Vec<u8>, bool), FsError> {
        match &*this {
            Descriptor::Library(node) => {
                let bytes = self.file_bytes(*node)?;
                let slice = window(bytes, offset, len.min(MAX_READ));
                let end = offset.saturating_add(slice.len() as u64) >= bytes.len() as u64;
                Ok((slice.to_vec(), end))
            }
            Descriptor::Work(path) => Ok(self.work.read(path, offset, len.min(MAX_READ))?),
        }
    }
    fn write(
        &mut self,
        this: B<'_, Descriptor>,
        bytes: Vec<u8>,
        offset: u64,
    ) -> Result<u64, FsError> {
        self.work.write(work_dir(&this)?, Some(offset), &bytes)?;
        Ok(bytes.len() as u64)
    }
    fn read_directory(&mut self, this: B<'_, Descriptor>) -> Result<Listing, FsError> {
        let listing = match &*this {
            Descriptor::Library(node) => {
                if !matches!(self.library()?.node(*node), Node::Dir(_)) {
                    return Err(FsError::NotDirectory);
                }
                Listing::Library(LibraryListing {
                    dir: *node,
                    next: AtomicUsize::new(0),
                })
            }
            Descriptor::Work(path) => Listing::Work(WorkListing {
                entries: self.work.list(path)?,
                next: AtomicUsize::new(0),
            }),
        };
        self.call.resource_given();
        Ok(listing)
    }
    fn sync(&mut self, _: B<'_, Descriptor>) -> Result<(), FsError> {
        Ok(())
    }
    fn create_directory_at(
        &mut self,
        this: B<'_, Descriptor>,
        path: String,
    ) -> Result<(), FsError> {
        let path = work_path(work_dir(&this)?, &path)?;
        Ok(self.work.make_dir(&path)?)
    }
    fn stat(&mut self, this: B<'_, Descriptor>) -> Result<DescriptorStat<Datetime>, FsError> {
        match &*this {
            Descriptor::Library(node) => self.stat_of(*node),
            Descriptor::Work(path) => self.work_stat(path),
        }
    }
    fn stat_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
    ) -> Result<DescriptorStat<Datetime>, FsError> {
        match &*this {
            Descriptor::Library(node) => {
                let node = self.lookup(*node, &path)?;
                self.stat_of(node)
            }
            Descriptor::Work(dir) => self.work_stat(&work_path(dir, &path)?),
        }
    }
    fn set_times_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
        _: NewTimestamp<Datetime>,
        _: NewTimestamp<Datetime>,
    ) -> Result<(), FsError> {
        let path = work_path(work_dir(&this)?, &path)?;
        self.work.entry(&path)?;
        Ok(())
    }
    fn link_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        _: String,
        _: B<'_, Descriptor>,
        _: String,
    ) -> Result<(), FsError> {
        work_dir(&this)?;
        Err(FileError::NoLinks.into())
    }
    fn open_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
        open: OpenFlags,
        flags: DescriptorFlags,
    ) -> Result<Descriptor, FsError> {
        let dir = match &*this {
            Descriptor::Work(dir) => return self.work_open(dir, &path, open, flags),
            Descriptor::Library(dir) => *dir,
        };
        let found = self.lookup(dir, &path);
        if open.create && open.exclusive && found.is_ok() {
            return Err(FsError::Exist);
        }
        if open.create || open.truncate || flags.write || flags.mutate_directory {
            return Err(FsError::ReadOnly);
        }
        let node = found?;
        if open.directory && !matches!(self.library()?.node(node), Node::Dir(_)) {
            return Err(FsError::NotDirectory);
        }
        self.call.resource_given();
        Ok(Descriptor::Library(node))
    }
    fn readlink_at(&mut self, this: B<'_, Descriptor>, path: String) -> Result<String, FsError> {
        // Neither has links.
        match &*this {
            Descriptor::Library(node) => {
                self.lookup(*node, &path)?;
            }
            Descriptor::Work(dir) => {
                self.work.entry(&work_path(dir, &path)?)?;
            }
        }
        Err(FsError::Invalid)
    }
    fn remove_directory_at(
        &mut self,
        this: B<'_, Descriptor>,
        path: String,
    ) -> Result<(), FsError> {
        let path = work_path(work_dir(&this)?, &path)?;
        Ok(self.work.remove_dir(&path)?)
    }
    fn rename_at(
        &mut self,
        this: B<'_, Descriptor>,
        from: String,
        to_dir: B<'_, Descriptor>,
        to: String,
    ) -> Result<(), FsError> {
        let from = work_path(work_dir(&this)?, &from)?;
        let to = match &*to_dir {
            Descriptor::Work(dir) => work_path(dir, &to)?,
            Descriptor::Library(_) => return Err(FsError::CrossDevice),
        };
        Ok(self.work.rename(&from, &to)?)
    }
    fn symlink_at(&mut self, this: B<'_, Descriptor>, _: String, _: String) -> Result<(), FsError> {
        work_dir(&this)?;
        Err(FileError::NoLinks.into())
    }
    fn unlink_file_at(&mut self, this: B<'_, Descriptor>, path: String) -> Result<(), FsError> {
        let path = work_path(work_dir(&this)?, &path)?;
        Ok(self.work.remove_file(&path)?)
    }
    fn metadata_hash(&mut self, this: B<'_, Descriptor>) -> Result<MetadataHashValue, FsError> {
        Ok(match &*this {
            Descriptor::Library(node) => hash_of(*node),
            Descriptor::Work(path) => work::hash_of(path),
        })
    }
    fn metadata_hash_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
    ) -> Result<MetadataHashValue, FsError> {
        Ok(match &*this {
            Descriptor::Library(node) => hash_of(self.lookup(*node, &path)?),
            Descriptor::Work(dir) => {
                let path = work_path(dir, &path)?;
                self.work.entry(&path)?;
                work::hash_of(&path)
            }
        })
    }
}

impl filesystem::types::DirectoryEntryStream<N> for WasiHost {
    type T = Listing;
    fn read_directory_entry(
        &mut self,
        this: B<'_, Listing>,
    ) -> Result<Option<DirectoryEntry>, FsError> {
        let listing = match &*this {
            Listing::Library(listing) => listing,
            Listing::Work(listing) => return Ok(listing.next()),
        };
        let library = self.library()?;
        let Node::Dir(entries) = library.node(listing.dir) else {
            return Err(FsError::NotDirectory);
        };
        let next = listing.next.fetch_add(1, Ordering::Relaxed);
        Ok(entries.get(next).map(|(name, node)| DirectoryEntry {
            r#type: work::kind(matches!(library.node(*node), Node::Dir(_))),
            name: name.clone(),
        }))
    }
}

impl filesystem::Types<N, Datetime, Input, Output> for WasiHost {}

/// The library's top-level directories, and the working directory.
impl filesystem::Preopens<N, Descriptor> for WasiHost {
    fn get_directories(&mut self) -> Vec<(Descriptor, String)> {
        let mut preopens: Vec<_> = self
            .library
            .iter()
            .flat_map(|library| library.preopens())
            .map(|(name, node)| (Descriptor::Library(*node), name.clone()))
            .collect();
        preopens.push((Descriptor::Work(String::new()), work::PREOPEN.to_owned()));
        for _ in &preopens {
            self.call.resource_given();
        }
        preopens
    }
}
