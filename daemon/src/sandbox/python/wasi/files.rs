//! wasi:filesystem over the Python guest's [`Library`]: its top-level directories are the
//! preopened directories (`python`, the standard library, and `0`, the runner's directory with
//! any packages), and everything in them can be listed, stat-ed and read. Nothing can be
//! written, created, renamed or removed: each such call answers `read-only`. Every sandbox reads
//! the one library the daemon loaded; no request can change what another sees.
//!
//! Every descriptor, directory listing and file stream the guest opens is a host handle, kept
//! until the restore after the call and counted against `--python-max-host-handles`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hyperlight_common::component::Negative as N;
use hyperlight_common::resource::BorrowedResourceGuard as B;

use super::{Input, Output, Portable, ToPortable, WasiHost};
use crate::sandbox::python::bindings::wasi::clocks::wall_clock::Datetime;
use crate::sandbox::python::bindings::wasi::filesystem;
use crate::sandbox::python::library::{Library, Lookup, Node};

use filesystem::types::{
    Advice, DescriptorFlags, DescriptorStat, DescriptorType, DirectoryEntry, ErrorCode as FsError,
    MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};

/// The most bytes one read hands the guest; it reads on for more.
const MAX_READ: u64 = 64 * 1024;

/// An open file or directory of the library: its node.
#[derive(Clone)]
pub struct Descriptor(usize);

/// A directory being listed: its node, and the index of the next entry.
pub struct Listing {
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
impl Clone for Listing {
    fn clone(&self) -> Self {
        Listing {
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
        Portable::Descriptor { node: self.0 }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match *portable {
            Portable::Descriptor { node } => Some(Descriptor(node)),
            _ => None,
        }
    }
}

impl ToPortable for Listing {
    fn to_portable(&self) -> Portable {
        Portable::Listing {
            node: self.dir,
            next: self.next.load(Ordering::Relaxed),
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match *portable {
            Portable::Listing { node, next } => Some(Listing {
                dir: node,
                next: AtomicUsize::new(next),
            }),
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

/// At most `len` bytes of `bytes` from `offset`.
fn window(bytes: &[u8], offset: u64, len: u64) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
    &bytes[start..end.min(bytes.len())]
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

    fn lookup(&self, dir: &Descriptor, path: &str) -> Result<usize, FsError> {
        Ok(self.library()?.lookup(dir.0, path)?)
    }

    fn stat_of(&self, node: usize) -> Result<DescriptorStat<Datetime>, FsError> {
        let (kind, size) = match self.library()?.node(node) {
            Node::Dir(_) => (DescriptorType::Directory, 0),
            Node::File(range) => (DescriptorType::RegularFile, range.len() as u64),
        };
        // No times: the guest reads them as 0, the same on every run (the runner relies on
        // that to keep its import caches; see runner.py).
        Ok(DescriptorStat {
            r#type: kind,
            link_count: 1,
            size,
            data_access_timestamp: None,
            data_modification_timestamp: None,
            status_change_timestamp: None,
        })
    }

    fn file_bytes(&self, node: usize) -> Result<&[u8], FsError> {
        self.library()?.file(node).ok_or(FsError::IsDirectory)
    }
}

/// The inode the guest sees: the node's index.
fn hash_of(node: usize) -> MetadataHashValue {
    MetadataHashValue {
        lower: node as u64,
        upper: 0,
    }
}

impl filesystem::types::Descriptor<N, Datetime, Listing, Input, Output> for WasiHost {
    type T = Descriptor;
    fn read_via_stream(&mut self, this: B<'_, Descriptor>, offset: u64) -> Result<Input, FsError> {
        self.file_bytes(this.0)?;
        self.call.resource_given();
        Ok(Input::File(FileStream {
            file: this.0,
            at: AtomicU64::new(offset),
        }))
    }
    fn write_via_stream(&mut self, _: B<'_, Descriptor>, _: u64) -> Result<Output, FsError> {
        Err(FsError::ReadOnly)
    }
    fn append_via_stream(&mut self, _: B<'_, Descriptor>) -> Result<Output, FsError> {
        Err(FsError::ReadOnly)
    }
    fn advise(&mut self, _: B<'_, Descriptor>, _: u64, _: u64, _: Advice) -> Result<(), FsError> {
        Ok(())
    }
    fn sync_data(&mut self, _: B<'_, Descriptor>) -> Result<(), FsError> {
        Ok(())
    }
    fn get_flags(&mut self, _: B<'_, Descriptor>) -> Result<DescriptorFlags, FsError> {
        Ok(DescriptorFlags {
            read: true,
            write: false,
            file_integrity_sync: false,
            data_integrity_sync: false,
            requested_write_sync: false,
            mutate_directory: false,
        })
    }
    fn set_size(&mut self, _: B<'_, Descriptor>, _: u64) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn set_times(
        &mut self,
        _: B<'_, Descriptor>,
        _: NewTimestamp<Datetime>,
        _: NewTimestamp<Datetime>,
    ) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn read(
        &mut self,
        this: B<'_, Descriptor>,
        len: u64,
        offset: u64,
    ) -> Result<(Vec<u8>, bool), FsError> {
        let bytes = self.file_bytes(this.0)?;
        let slice = window(bytes, offset, len.min(MAX_READ));
        let end = offset.saturating_add(slice.len() as u64) >= bytes.len() as u64;
        Ok((slice.to_vec(), end))
    }
    fn write(&mut self, _: B<'_, Descriptor>, _: Vec<u8>, _: u64) -> Result<u64, FsError> {
        Err(FsError::ReadOnly)
    }
    fn read_directory(&mut self, this: B<'_, Descriptor>) -> Result<Listing, FsError> {
        if !matches!(self.library()?.node(this.0), Node::Dir(_)) {
            return Err(FsError::NotDirectory);
        }
        self.call.resource_given();
        Ok(Listing {
            dir: this.0,
            next: AtomicUsize::new(0),
        })
    }
    fn sync(&mut self, _: B<'_, Descriptor>) -> Result<(), FsError> {
        Ok(())
    }
    fn create_directory_at(&mut self, _: B<'_, Descriptor>, _: String) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn stat(&mut self, this: B<'_, Descriptor>) -> Result<DescriptorStat<Datetime>, FsError> {
        self.stat_of(this.0)
    }
    fn stat_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
    ) -> Result<DescriptorStat<Datetime>, FsError> {
        let node = self.lookup(&this, &path)?;
        self.stat_of(node)
    }
    fn set_times_at(
        &mut self,
        _: B<'_, Descriptor>,
        _: PathFlags,
        _: String,
        _: NewTimestamp<Datetime>,
        _: NewTimestamp<Datetime>,
    ) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn link_at(
        &mut self,
        _: B<'_, Descriptor>,
        _: PathFlags,
        _: String,
        _: B<'_, Descriptor>,
        _: String,
    ) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn open_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
        open: OpenFlags,
        flags: DescriptorFlags,
    ) -> Result<Descriptor, FsError> {
        let found = self.lookup(&this, &path);
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
        Ok(Descriptor(node))
    }
    fn readlink_at(&mut self, this: B<'_, Descriptor>, path: String) -> Result<String, FsError> {
        // The library has no links.
        self.lookup(&this, &path)?;
        Err(FsError::Invalid)
    }
    fn remove_directory_at(&mut self, _: B<'_, Descriptor>, _: String) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn rename_at(
        &mut self,
        _: B<'_, Descriptor>,
        _: String,
        _: B<'_, Descriptor>,
        _: String,
    ) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn symlink_at(&mut self, _: B<'_, Descriptor>, _: String, _: String) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn unlink_file_at(&mut self, _: B<'_, Descriptor>, _: String) -> Result<(), FsError> {
        Err(FsError::ReadOnly)
    }
    fn metadata_hash(&mut self, this: B<'_, Descriptor>) -> Result<MetadataHashValue, FsError> {
        Ok(hash_of(this.0))
    }
    fn metadata_hash_at(
        &mut self,
        this: B<'_, Descriptor>,
        _: PathFlags,
        path: String,
    ) -> Result<MetadataHashValue, FsError> {
        Ok(hash_of(self.lookup(&this, &path)?))
    }
}

impl filesystem::types::DirectoryEntryStream<N> for WasiHost {
    type T = Listing;
    fn read_directory_entry(
        &mut self,
        this: B<'_, Listing>,
    ) -> Result<Option<DirectoryEntry>, FsError> {
        let library = self.library()?;
        let Node::Dir(entries) = library.node(this.dir) else {
            return Err(FsError::NotDirectory);
        };
        let next = this.next.fetch_add(1, Ordering::Relaxed);
        Ok(entries.get(next).map(|(name, node)| DirectoryEntry {
            r#type: match library.node(*node) {
                Node::Dir(_) => DescriptorType::Directory,
                Node::File(_) => DescriptorType::RegularFile,
            },
            name: name.clone(),
        }))
    }
}

impl filesystem::Types<N, Datetime, Input, Output> for WasiHost {}

impl filesystem::Preopens<N, Descriptor> for WasiHost {
    fn get_directories(&mut self) -> Vec<(Descriptor, String)> {
        let Some(library) = &self.library else {
            return Vec::new();
        };
        let preopens: Vec<_> = library
            .preopens()
            .iter()
            .map(|(name, node)| (Descriptor(*node), name.clone()))
            .collect();
        for _ in &preopens {
            self.call.resource_given();
        }
        preopens
    }
}
