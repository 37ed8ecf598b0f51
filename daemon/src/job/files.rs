//! A working directory's files and the rules they live under: which paths are allowed, and
//! the caps on entries and bytes. The same rules check a request's files before it runs (the
//! service), a session's files laid under an exec's (the executor), and every write a program
//! makes (the working directory a sandbox keeps, `job/workspace.rs`).
//!
//! # Design: a working directory in the host's memory
//! A request's `files` are decoded at the API (`http/files.rs`: text, or base64) and checked by the
//! service with the vocabulary's rules (`job/files.rs`: plain relative paths, no path both a file
//! and a directory, within `--max-files` and `--max-file-bytes`); they travel in the `Job` as
//! `Files` (bytes by path). The worker hands them to the guest with the program
//! (`Program::files`); each sandbox owns a `Workspace` (`job/workspace.rs`), filled from them
//! at the start of a call and emptied after it (`Guest::take_files`). Every path a guest names is
//! resolved lexically by `job::files::resolve`, against the directory a call starts from; an
//! absolute path, `..` above the working directory, a control character or an over-long name is
//! refused before anything is looked up, links cannot be made, and the caps are checked on every
//! write (the first refusal is remembered, so that a program that then fails is answered
//! `file_limit`). Python reaches it through wasi:filesystem: the host preopens it as `work` beside
//! the library (`python/wasi/work.rs`, dispatched from `wasi/files.rs` by descriptor) and the
//! runner makes `/work` its current directory on its first call, before the template is taken.
//! JavaScript reaches it through the runner's `files` object, host functions
//! `hyperlightd.file_*` (`javascript/files.rs`; contents as base64). The outcome carries the files
//! the program created or changed; a session keeps the whole directory with its saved state
//! (`Saved::files`): an exec's files are laid over the session's (`files::overlay`, checked against
//! the caps by the same `files::check_fits`) before it runs, and what the exec leaves is saved with
//! its image, so rollback, fork and the memory budget cover files as they cover the interpreter.

use std::collections::{BTreeMap, BTreeSet};

/// A working directory's files: contents by path (`data.csv`, `out/a.txt`), paths checked
/// with [`check_given`].
pub type Files = BTreeMap<String, Vec<u8>>;

/// A change to a session's working directory made between its execs (`POST
/// /v1/sessions/{id}/files`), by the rules a program's own writes follow. Paths are given in
/// resolved form ([`check_given`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// Writes `bytes` to the file `path`, replacing it, making its directories.
    Write { path: String, bytes: Vec<u8> },
    /// Removes the file or the directory (with all it holds) `path`.
    Remove { path: String },
    /// Renames `from` to `to`, replacing a file (or an empty directory, for a directory) there,
    /// as POSIX's `rename` does; `to`'s directory must exist.
    Move { from: String, to: String },
}

/// A [`FileChange`] refused: the path it was refused at, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?}: {error}")]
pub struct FileRefused {
    pub path: String,
    pub error: FileError,
}

/// What a program's working directory may hold; the default, nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileLimits {
    /// Files and directories.
    pub max_entries: usize,
    /// Bytes of all files together.
    pub max_bytes: u64,
}

/// The longest path, in bytes.
pub const MAX_PATH: usize = 1024;
/// The longest name of one entry, in bytes.
pub const MAX_NAME: usize = 255;
/// The deepest directory nesting.
pub const MAX_DEPTH: usize = 32;

/// Why a file operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotDirectory,
    #[error("is a directory")]
    IsDirectory,
    #[error("already exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    /// An absolute path, or `..` above the working directory.
    #[error("outside the working directory (absolute paths and .. above it are refused)")]
    Escapes,
    /// An empty component, a control character, or a path or name too long.
    #[error("not a name the working directory allows")]
    BadName,
    /// Past the cap on files and directories.
    #[error("the working directory holds as many files as it may")]
    TooManyFiles,
    /// Past the cap on bytes.
    #[error("the working directory's files hold as many bytes as they may")]
    TooLarge,
    /// A link was asked for: the working directory has none.
    #[error("links are not supported")]
    NoLinks,
}

/// Resolves `path` from the directory `dir` (a resolved path; "" is the working directory) to
/// the resolved path it names: components joined by `/`, with no `.`, `..` or empty ones.
pub fn resolve(dir: &str, path: &str) -> Result<String, FileError> {
    if path.starts_with('/') {
        return Err(FileError::Escapes);
    }
    if path.is_empty() || path.len() > MAX_PATH {
        return Err(FileError::BadName);
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in path.split('/') {
        match part {
            // `a//b` and a trailing `/` are accepted, as POSIX does.
            "" | "." => {}
            ".." => {
                parts.pop().ok_or(FileError::Escapes)?;
            }
            name if !allowed_name(name) => return Err(FileError::BadName),
            name => parts.push(name),
        }
    }
    if parts.len() > MAX_DEPTH {
        return Err(FileError::BadName);
    }
    Ok(parts.join("/"))
}

fn allowed_name(name: &str) -> bool {
    name.len() <= MAX_NAME && !name.chars().any(char::is_control)
}

/// Checks a path a caller gives a file under: it must already be in resolved form (what comes
/// back is then what went in) and name a file, not the working directory itself.
pub fn check_given(path: &str) -> Result<(), FileError> {
    let resolved = resolve("", path)?;
    if resolved.is_empty() || resolved != path {
        return Err(FileError::BadName);
    }
    Ok(())
}

/// `base` with `over` laid on it: a file of `over` replaces what `base` has at its path, and
/// anything of `base` in its way (a file where `over` needs a directory, or files under a path
/// `over` makes a file).
pub fn overlay(base: &Files, over: &Files) -> Files {
    let mut files: Files = base
        .iter()
        .filter(|(path, _)| {
            !over.keys().any(|new| {
                ancestors(new).any(|dir| dir == path.as_str())
                    || ancestors(path).any(|dir| dir == new.as_str())
            })
        })
        .map(|(path, bytes)| (path.clone(), bytes.clone()))
        .collect();
    files.extend(
        over.iter()
            .map(|(path, bytes)| (path.clone(), bytes.clone())),
    );
    files
}

/// Whether `files` fit in `limits` (each file's directories count as entries too); if not,
/// which cap they pass.
pub fn check_fits(files: &Files, limits: FileLimits) -> Result<(), FileError> {
    let dirs: BTreeSet<&str> = files.keys().flat_map(|path| ancestors(path)).collect();
    if files.len() + dirs.len() > limits.max_entries {
        return Err(FileError::TooManyFiles);
    }
    let bytes: u64 = files.values().map(|bytes| bytes.len() as u64).sum();
    if bytes > limits.max_bytes {
        return Err(FileError::TooLarge);
    }
    Ok(())
}

/// The cap `cap` (`TooManyFiles` or `TooLarge`) of `limits`, in words, for messages.
pub fn cap_in_words(cap: FileError, limits: FileLimits) -> String {
    match cap {
        FileError::TooManyFiles => format!("{} files and directories", limits.max_entries),
        _ => format!("{} bytes of files", limits.max_bytes),
    }
}

/// Whether some path of `files` is a directory of another (`a` and `a/b`): they cannot both be.
pub fn clash(files: &Files) -> Option<(&str, &str)> {
    files.keys().find_map(|path| {
        ancestors(path)
            .find(|dir| files.contains_key(*dir))
            .map(|dir| (dir, path.as_str()))
    })
}

/// The directory holding `path`.
pub(crate) fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The directories `path` is in, outermost first (not the working directory itself).
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: FileLimits = FileLimits {
        max_entries: 5,
        max_bytes: 10,
    };

    fn files(entries: &[(&str, &str)]) -> Files {
        entries
            .iter()
            .map(|(path, text)| ((*path).to_owned(), text.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn paths_resolve_inside_the_working_directory_or_not_at_all() {
        assert_eq!(resolve("", "a/./b//c/"), Ok("a/b/c".into()));
        assert_eq!(resolve("a/b", "../c"), Ok("a/c".into()));
        assert_eq!(resolve("a", ".."), Ok(String::new()));
        for escape in ["..", "../x", "a/../../x", "/etc/passwd", "/work/x"] {
            assert_eq!(resolve("", escape), Err(FileError::Escapes), "{escape}");
        }
        assert_eq!(resolve("a", "../../etc"), Err(FileError::Escapes));
        for bad in [
            "",
            "a\0b",
            "a\nb",
            &"x".repeat(MAX_NAME + 1),
            &"a/".repeat(MAX_DEPTH + 1),
        ] {
            assert_eq!(resolve("", bad), Err(FileError::BadName), "{bad:?}");
        }
        assert_eq!(resolve("", &"a/".repeat(MAX_PATH)), Err(FileError::BadName));
    }

    #[test]
    fn given_paths_must_be_plain_relative_names() {
        assert_eq!(check_given("data.csv"), Ok(()));
        assert_eq!(check_given("in/a b.json"), Ok(()));
        for bad in ["./a", "a//b", "a/", ".", ""] {
            assert_eq!(check_given(bad), Err(FileError::BadName), "{bad:?}");
        }
        assert_eq!(check_given("../a"), Err(FileError::Escapes));
        assert_eq!(check_given("/a"), Err(FileError::Escapes));
    }

    #[test]
    fn overlay_replaces_what_is_in_the_way() {
        let base = files(&[("a", "old"), ("d/x", "1"), ("keep", "k"), ("f", "file")]);
        let over = files(&[("a", "new"), ("d", "now a file"), ("f/g", "f is a dir now")]);
        let merged = overlay(&base, &over);
        assert_eq!(
            merged,
            files(&[
                ("a", "new"),
                ("d", "now a file"),
                ("f/g", "f is a dir now"),
                ("keep", "k"),
            ])
        );
        assert_eq!(clash(&merged), None);
        assert_eq!(clash(&files(&[("a", ""), ("a/b", "")])), Some(("a", "a/b")));
    }

    #[test]
    fn fitting_counts_directories_and_bytes() {
        assert_eq!(check_fits(&files(&[("a/b/c", "12345")]), LIMITS), Ok(()));
        let deep = files(&[("a/b/c/d/e", "")]);
        assert_eq!(check_fits(&deep, LIMITS), Ok(()));
        let deeper = files(&[("a/b/c/d/e/f", "")]);
        assert_eq!(check_fits(&deeper, LIMITS), Err(FileError::TooManyFiles));
        let big = files(&[("a", "12345678901")]);
        assert_eq!(check_fits(&big, LIMITS), Err(FileError::TooLarge));
    }
}
