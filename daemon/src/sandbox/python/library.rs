//! The Python guest's library: the modules it imports at run time, served read-only from memory.
//!
//! componentize-py keeps in the component only what the runner imported while the interpreter
//! was pre-initialised; any other module is looked up at run time in the directories it was
//! built with, `/python` (the standard library) and `/0` (the runner's directory and any
//! packages). `cargo xtask python-guest` exports both, each module compiled to bytecode, into
//! one tar file (`python-lib.tar`, beside `python.aot`). The daemon loads it once, into one
//! [`Library`] that every Python sandbox shares, and the guest sees its top-level directories as
//! preopened directories (see `wasi/files.rs`). Nothing can write to it.

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A node: a directory or a file.
#[derive(Debug)]
pub enum Node {
    /// Entries sorted by name, each with its node's index.
    Dir(Vec<(String, usize)>),
    /// The file's bytes, a range of [`Library::data`].
    File(Range<usize>),
}

/// The library: a tree of directories and files, the top level of which are the preopened
/// directories.
#[derive(Debug)]
pub struct Library {
    /// Node 0 is the root, whose entries are the preopened directories.
    nodes: Vec<Node>,
    /// Each node's parent (the root is its own).
    parents: Vec<usize>,
    data: Vec<u8>,
}

/// Why a path names nothing the guest may use (each maps to a WASI error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// No such entry.
    NotFound,
    /// A component before the last is a file, or a trailing `/` follows a file.
    NotDirectory,
    /// An absolute path, or `..` above the directory the lookup starts from.
    Escapes,
}

/// The library file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the Python library {path:?} cannot be loaded: {why}")]
pub struct LibraryError {
    path: PathBuf,
    why: String,
}

const ROOT: usize = 0;

impl Library {
    /// Loads the library from the tar file at `path`.
    pub fn load(path: &Path) -> Result<Library, LibraryError> {
        let error = |why: String| LibraryError {
            path: path.to_owned(),
            why,
        };
        let archive = std::fs::read(path).map_err(|e| error(e.to_string()))?;
        Library::from_tar(archive).map_err(error)
    }

    /// Reads a tar archive of directories and regular files with relative paths. The archive
    /// stays whole in memory, each file a range of it: reading it is one read and a walk over
    /// its headers, with no file's bytes copied.
    pub fn from_tar(archive: Vec<u8>) -> Result<Library, String> {
        let mut builder = Builder::default();
        let mut reader = tar::Archive::new(std::io::Cursor::new(&archive[..]));
        for entry in reader.entries_with_seek().map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let path = entry.path().map_err(|e| e.to_string())?.into_owned();
            let names = components(&path)?;
            match entry.header().entry_type() {
                tar::EntryType::Directory => {
                    builder.dir(&names);
                }
                tar::EntryType::Regular => {
                    let range = file_range(&entry, archive.len())
                        .ok_or_else(|| format!("{}: the archive ends inside it", path.display()))?;
                    builder.file(&names, range)?;
                }
                other => {
                    return Err(format!(
                        "{}: only directories and regular files may be in it, not {other:?}",
                        path.display()
                    ));
                }
            }
        }
        Ok(builder.finish(archive))
    }

    /// The preopened directories: the root's entries.
    pub fn preopens(&self) -> &[(String, usize)] {
        match &self.nodes[ROOT] {
            Node::Dir(entries) => entries,
            Node::File(_) => &[],
        }
    }

    /// The node at `index`.
    pub fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }

    /// How many nodes (files and directories) there are: every index is below this.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The bytes of the file at `index`, or None for a directory.
    pub fn file(&self, index: usize) -> Option<&[u8]> {
        match &self.nodes[index] {
            Node::File(range) => Some(&self.data[range.clone()]),
            Node::Dir(_) => None,
        }
    }

    /// Files, and their bytes in all.
    pub fn size(&self) -> (usize, usize) {
        self.nodes
            .iter()
            .fold((0, 0), |(files, bytes), node| match node {
                Node::File(range) => (files + 1, bytes + range.len()),
                Node::Dir(_) => (files, bytes),
            })
    }

    /// The packages installed beside the runner (each preopened directory's `*.dist-info`), by
    /// name as published, with their versions: what `/v1/health` tells a model it may import.
    pub fn packages(&self) -> BTreeMap<String, String> {
        let mut packages = BTreeMap::new();
        for &(_, dir) in self.preopens() {
            let Node::Dir(entries) = &self.nodes[dir] else {
                continue;
            };
            for (name, index) in entries {
                if !name.ends_with(".dist-info") {
                    continue;
                }
                let metadata = self.lookup(*index, "METADATA").ok();
                let text = metadata.and_then(|m| self.file(m)).unwrap_or_default();
                if let Some((name, version)) = name_and_version(&String::from_utf8_lossy(text)) {
                    packages.insert(name, version);
                }
            }
        }
        packages
    }

    /// The node `path` names, relative to the directory `from`. As in WASI: `.` and empty
    /// components are skipped, `..` may not climb above `from`, and no path is absolute.
    pub fn lookup(&self, from: usize, path: &str) -> Result<usize, Lookup> {
        if path.starts_with('/') {
            return Err(Lookup::Escapes);
        }
        let mut at = from;
        let mut depth = 0usize;
        for name in path.split('/') {
            let Node::Dir(entries) = &self.nodes[at] else {
                return Err(Lookup::NotDirectory);
            };
            match name {
                "" | "." => {}
                ".." => {
                    depth = depth.checked_sub(1).ok_or(Lookup::Escapes)?;
                    at = self.parents[at];
                }
                name => {
                    let found = entries
                        .binary_search_by(|(entry, _)| entry.as_str().cmp(name))
                        .map_err(|_| Lookup::NotFound)?;
                    at = entries[found].1;
                    depth += 1;
                }
            }
        }
        if path.ends_with('/') && matches!(self.nodes[at], Node::File(_)) {
            return Err(Lookup::NotDirectory);
        }
        Ok(at)
    }
}

/// A package's `Name` and `Version` from its core metadata (email-style headers, which end at
/// the first empty line).
/// Where `entry`'s bytes are in an archive of `len` bytes, if they are all in it.
fn file_range<R: Read>(entry: &tar::Entry<'_, R>, len: usize) -> Option<Range<usize>> {
    let start = usize::try_from(entry.raw_file_position()).ok()?;
    let end = start.checked_add(usize::try_from(entry.size()).ok()?)?;
    (end <= len).then_some(start..end)
}

fn name_and_version(metadata: &str) -> Option<(String, String)> {
    let header = |key: &str| {
        metadata
            .lines()
            .take_while(|line| !line.is_empty())
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
            .map(|value| value.trim().to_owned())
    };
    Some((header("Name")?, header("Version")?))
}

/// The names along a relative path with no `..` (a path in the archive).
fn components(path: &Path) -> Result<Vec<String>, String> {
    use std::path::Component;
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(name) => name
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{}: a name that is not UTF-8", path.display())),
            _ => Err(format!(
                "{}: paths in it must be relative, without `..`",
                path.display()
            )),
        })
        .collect()
}

/// Builds a [`Library`] entry by entry, creating directories as paths need them.
#[derive(Default)]
struct Builder {
    /// Each directory's entries by name, and each file's bytes.
    dirs: Vec<std::collections::BTreeMap<String, usize>>,
    kinds: Vec<Option<Range<usize>>>,
    parents: Vec<usize>,
}

impl Builder {
    fn ensure_root(&mut self) {
        if self.kinds.is_empty() {
            self.dirs.push(Default::default());
            self.kinds.push(None);
            self.parents.push(ROOT);
        }
    }

    /// The directory at `names`, created with its parents if need be.
    fn dir(&mut self, names: &[String]) -> usize {
        self.ensure_root();
        let mut at = ROOT;
        for name in names {
            at = match self.dirs[at].get(name) {
                Some(&child) => child,
                None => {
                    let child = self.kinds.len();
                    self.dirs.push(Default::default());
                    self.kinds.push(None);
                    self.parents.push(at);
                    self.dirs[at].insert(name.clone(), child);
                    child
                }
            };
        }
        at
    }

    fn file(&mut self, names: &[String], range: Range<usize>) -> Result<(), String> {
        let Some((name, parent)) = names.split_last() else {
            return Err("a file with an empty name".into());
        };
        let parent = self.dir(parent);
        if self.kinds[parent].is_some() || self.dirs[parent].contains_key(name) {
            return Err(format!("{} is in it twice", names.join("/")));
        }
        let index = self.kinds.len();
        self.dirs.push(Default::default());
        self.kinds.push(Some(range));
        self.parents.push(parent);
        self.dirs[parent].insert(name.clone(), index);
        Ok(())
    }

    fn finish(mut self, data: Vec<u8>) -> Library {
        self.ensure_root();
        let nodes = self
            .dirs
            .into_iter()
            .zip(self.kinds)
            .map(|(entries, kind)| match kind {
                Some(range) => Node::File(range),
                None => Node::Dir(entries.into_iter().collect()),
            })
            .collect();
        Library {
            nodes,
            parents: self.parents,
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(files: &[(&str, &str)]) -> Library {
        let mut archive = tar::Builder::new(Vec::new());
        for (path, text) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(text.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            archive
                .append_data(&mut header, path, text.as_bytes())
                .unwrap();
        }
        Library::from_tar(archive.into_inner().unwrap()).unwrap()
    }

    #[test]
    fn paths_resolve_within_the_directory_they_start_from() {
        let lib = library(&[
            ("python/os.py", "import sys"),
            ("python/json/__init__.py", "x = 1"),
            ("0/runner.py", "run"),
        ]);
        let names: Vec<&str> = lib.preopens().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["0", "python"]);
        let python = lib.preopens()[1].1;
        let os = lib.lookup(python, "os.py").unwrap();
        assert_eq!(lib.file(os), Some(&b"import sys"[..]));
        let init = lib.lookup(python, "./json//__init__.py").unwrap();
        assert_eq!(lib.lookup(python, "json/../json/__init__.py"), Ok(init));
        let json = lib.lookup(python, "json").unwrap();
        assert_eq!(lib.lookup(json, "../os.py"), Err(Lookup::Escapes));
        assert_eq!(lib.lookup(python, "../0/runner.py"), Err(Lookup::Escapes));
        assert_eq!(lib.lookup(python, "/python/os.py"), Err(Lookup::Escapes));
        assert_eq!(lib.lookup(python, "nope.py"), Err(Lookup::NotFound));
        assert_eq!(lib.lookup(python, "os.py/x"), Err(Lookup::NotDirectory));
        assert_eq!(lib.lookup(python, "os.py/"), Err(Lookup::NotDirectory));
        assert_eq!(lib.lookup(python, ""), Ok(python));
        assert_eq!(lib.size(), (3, "import sysx = 1run".len()));
    }

    #[test]
    fn packages_are_read_from_their_metadata() {
        let lib = library(&[
            ("python/os.py", "import sys"),
            (
                "0/python_dateutil-2.9.0.post0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: python-dateutil\nVersion: 2.9.0.post0\n\nName: not this\n",
            ),
            ("0/dateutil/__init__.py", ""),
            ("0/broken-1.0.dist-info/METADATA", "Name: broken\n"),
            ("0/runner.py", "run"),
        ]);
        let packages = lib.packages();
        assert_eq!(
            packages.into_iter().collect::<Vec<_>>(),
            [("python-dateutil".to_owned(), "2.9.0.post0".to_owned())]
        );
    }

    #[test]
    fn an_archive_with_links_or_escaping_paths_is_refused() {
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_cksum();
        archive
            .append_link(&mut header, "python/evil", "/etc/passwd")
            .unwrap();
        let err = Library::from_tar(archive.into_inner().unwrap()).unwrap_err();
        assert!(err.contains("python/evil"), "{err}");

        // A path with `..` cannot even be written by the tar crate's builder; write the name
        // into the header by hand.
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..9].copy_from_slice(b"../escape");
        header.set_size(0);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(&[0u8; 1024]);
        let err = Library::from_tar(bytes).unwrap_err();
        assert!(err.contains("without `..`"), "{err}");
    }

    #[test]
    fn a_truncated_archive_is_refused() {
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        let text = vec![b'x'; 2000];
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        archive
            .append_data(&mut header, "python/big.py", &text[..])
            .unwrap();
        let mut bytes = archive.into_inner().unwrap();
        bytes.truncate(512 + 1000);
        let err = Library::from_tar(bytes).unwrap_err();
        assert!(err.contains("python/big.py"), "{err}");
    }

    #[test]
    fn its_size_counts_the_files_bytes_not_the_archive_s() {
        let lib = library(&[("python/a.py", "12345"), ("0/b.py", "678")]);
        assert_eq!(lib.size(), (2, 8));
    }
}
