//! A guest's state as a session keeps it, and what a worker did about it after a session's
//! exec.

use std::any::Any;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::{ExecError, Files, Outcome};

/// A guest's saved state: immutable, and cheap to clone (a clone shares it). What is inside is
/// the guest's own business; only a sandbox of the guest that saved it can load it.
#[derive(Clone)]
pub struct SavedState(Arc<dyn Any + Send + Sync>);

impl SavedState {
    /// Wraps a guest's state.
    pub fn new<T: Any + Send + Sync>(state: T) -> Self {
        SavedState(Arc::new(state))
    }

    /// The state, if it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }

    /// A number for this state alone, as long as a [`StateRef`] to it or a clone of it lives.
    pub fn key(&self) -> u64 {
        Arc::as_ptr(&self.0).cast::<()>() as usize as u64
    }

    /// A reference that tells this state again without keeping it alive.
    pub fn downgrade(&self) -> StateRef {
        StateRef(Arc::downgrade(&self.0))
    }
}

/// Which state a sandbox holds, told without keeping the state's memory: while it lives, no
/// other state takes its [`key`](SavedState::key).
#[derive(Clone)]
pub struct StateRef(std::sync::Weak<dyn Any + Send + Sync>);

impl StateRef {
    /// Whether `state` is the state referred to.
    pub fn is(&self, state: &SavedState) -> bool {
        std::sync::Weak::ptr_eq(&self.0, &Arc::downgrade(&state.0))
    }

    /// The referred state's key.
    pub fn key(&self) -> u64 {
        self.0.as_ptr().cast::<()>() as usize as u64
    }
}

impl std::fmt::Debug for StateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateRef({:#x})", self.key())
    }
}

impl std::fmt::Debug for SavedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SavedState")
    }
}

/// A guest state a worker saved after a session exec, and the host memory it holds.
#[derive(Clone)]
pub struct Saved {
    /// The state.
    pub state: SavedState,
    /// Host memory it holds of its own, in bytes (its files' included).
    pub bytes: u64,
    /// The files in memory its snapshot is mapped from (see [`Footprint`]).
    pub memory: Vec<MemoryFile>,
    /// The working directory the exec left.
    pub files: Arc<Files>,
}

/// A file in the host's memory that a guest's state is mapped from: states made one from
/// another share most of theirs (hyperlight-host patch 0003).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryFile {
    /// Its device and inode numbers, which tell it from every other file while it exists.
    pub id: (u64, u64),
    pub bytes: u64,
}

/// The host memory a guest's saved state holds: `own` bytes that no state it was made from
/// holds (the pages its exec changed), within the `memory` files its snapshot is mapped from,
/// each once. Empty `memory`: the guest cannot tell, and `own` is what it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Footprint {
    pub own: u64,
    pub memory: Vec<MemoryFile>,
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Saved").field("bytes", &self.bytes).finish()
    }
}

/// Where a session's exec starts: the state and working directory its last exec left.
#[derive(Debug, Clone)]
pub struct Resume {
    pub state: SavedState,
    pub files: Arc<Files>,
}

/// What a worker did about a session's state after running one of its execs.
#[derive(Debug)]
pub enum After {
    /// Nothing to save: the program did not get to run (it does not parse, or a package it
    /// carried could not be installed).
    Unchanged,
    /// The exec timed out, ran out of memory or brought its sandbox down: its effects are
    /// dropped. The reason is the metrics label.
    RolledBack(&'static str),
    /// The worker is saving the state the exec left; None if saving failed.
    Saving(oneshot::Receiver<Option<Saved>>),
}

/// A job as a worker answers it: its outcome, and what became of the state it ran in.
#[derive(Debug)]
pub struct Ran {
    /// What the program did.
    pub outcome: Outcome,
    /// What becomes of the session's state (always [`After::Unchanged`] outside a session).
    pub after: After,
}

/// What a worker answers for a job: how it ran, or why it did not.
pub type Answer = Result<Ran, ExecError>;

/// What a guest's saved state fits: the daemon's build, the guest's sizes and the files its
/// state depends on. A template is saved under it, and each checkpoint a session writes to
/// disk records it; one whose key is not the daemon's own is refused, and
/// [`mismatch`](Self::mismatch) says why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateKey {
    /// Bumped when what is saved beside the snapshot changes shape.
    pub format: u32,
    pub language: String,
    /// The daemon's version and executable (size and modification time): a new build may run
    /// another runner, or another Hyperlight.
    pub daemon: String,
    pub executable: FileIdentity,
    /// The guest's sizes and limits, as `Debug` prints them.
    pub sizes: String,
    /// Files the guest's state depends on (Python's component and library, its rootfs).
    pub files: Vec<FileIdentity>,
}

/// A file, as far as telling it changed goes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    pub path: std::path::PathBuf,
    pub bytes: u64,
    pub modified_ns: u128,
}

impl FileIdentity {
    pub fn of(path: &std::path::Path) -> std::io::Result<FileIdentity> {
        let meta = std::fs::metadata(path)?;
        let modified_ns = meta
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(FileIdentity {
            path: path.canonicalize()?,
            bytes: meta.len(),
            modified_ns,
        })
    }
}

/// Why a saved state does not fit the daemon: what differs, first found first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMismatch {
    /// Another daemon build (version or executable), or another format of what is saved.
    Build,
    /// Another guest: another language, or other files it depends on.
    Guest,
    /// Other sizes or limits of the guest (its heap, its buffers).
    Sizes,
}

impl KeyMismatch {
    /// The reason, as metrics and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyMismatch::Build => "other_build",
            KeyMismatch::Guest => "other_guest",
            KeyMismatch::Sizes => "other_sizes",
        }
    }
}

impl StateKey {
    /// The key of `language`'s guest with `sizes`, depending on `files` too, for this daemon.
    pub fn new(
        language: &str,
        sizes: String,
        files: &[&std::path::Path],
    ) -> std::io::Result<StateKey> {
        Ok(StateKey {
            format: 1,
            language: language.to_owned(),
            daemon: env!("CARGO_PKG_VERSION").to_owned(),
            executable: FileIdentity::of(&std::env::current_exe()?)?,
            sizes,
            files: files
                .iter()
                .map(|path| FileIdentity::of(path))
                .collect::<std::io::Result<_>>()?,
        })
    }

    /// What makes a state saved under `saved` unfit for a guest of this key; None: it fits.
    pub fn mismatch(&self, saved: &StateKey) -> Option<KeyMismatch> {
        if self.format != saved.format
            || self.daemon != saved.daemon
            || self.executable != saved.executable
        {
            Some(KeyMismatch::Build)
        } else if self.language != saved.language || self.files != saved.files {
            Some(KeyMismatch::Guest)
        } else if self.sizes != saved.sizes {
            Some(KeyMismatch::Sizes)
        } else {
            None
        }
    }
}

/// Where a file with this SHA-256 (lowercase hex) is on disk already, if the caller knows of
/// one: a state written to disk shares the files of the states it was made from.
pub type ExistingBlob<'a> = &'a dyn Fn(&str) -> Option<std::path::PathBuf>;

/// How a language's saved states go to disk and come back, for sessions that outlive the
/// daemon. Each guest kind implements it (its state is its own business); the session table
/// only stores what it writes.
pub trait StateCodec: Send + Sync + std::fmt::Debug + 'static {
    /// What the states of this guest fit.
    fn key(&self) -> &StateKey;

    /// Writes `state` into `dir`, a directory that does not exist yet (its parent does). A
    /// file of it that `existing` finds on disk already (an earlier checkpoint's, by its
    /// SHA-256) is hard-linked from there rather than written again.
    fn write(
        &self,
        state: &SavedState,
        dir: &std::path::Path,
        existing: ExistingBlob<'_>,
    ) -> Result<(), String>;

    /// Reads back a state [`write`](Self::write) wrote into `dir`, whose files have been
    /// checked; an error says why it cannot be used.
    fn read(&self, dir: &std::path::Path) -> Result<SavedState, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> StateKey {
        StateKey {
            format: 1,
            language: "python".to_owned(),
            daemon: "0.1.0".to_owned(),
            executable: FileIdentity {
                path: "/usr/bin/hyperlightd".into(),
                bytes: 10,
                modified_ns: 1,
            },
            sizes: "heap 128 MiB".to_owned(),
            files: vec![FileIdentity {
                path: "/usr/lib/hyperlightd/python.aot".into(),
                bytes: 20,
                modified_ns: 2,
            }],
        }
    }

    #[test]
    fn a_saved_state_fits_only_the_same_build_guest_and_sizes_and_says_which_differs() {
        let mine = key();
        assert_eq!(mine.mismatch(&key()), None);
        let mut rebuilt = key();
        rebuilt.executable.modified_ns = 3;
        assert_eq!(mine.mismatch(&rebuilt), Some(KeyMismatch::Build));
        let mut upgraded = key();
        upgraded.daemon = "0.2.0".to_owned();
        upgraded.sizes = "heap 64 MiB".to_owned();
        assert_eq!(
            mine.mismatch(&upgraded),
            Some(KeyMismatch::Build),
            "the build first"
        );
        let mut guest = key();
        guest.files[0].bytes = 21;
        assert_eq!(mine.mismatch(&guest), Some(KeyMismatch::Guest));
        let mut language = key();
        language.language = "javascript".to_owned();
        assert_eq!(mine.mismatch(&language), Some(KeyMismatch::Guest));
        let mut sizes = key();
        sizes.sizes = "heap 64 MiB".to_owned();
        assert_eq!(mine.mismatch(&sizes), Some(KeyMismatch::Sizes));
        let reasons: Vec<&str> = [KeyMismatch::Build, KeyMismatch::Guest, KeyMismatch::Sizes]
            .iter()
            .map(|m| m.as_str())
            .collect();
        assert_eq!(reasons, ["other_build", "other_guest", "other_sizes"]);
    }

    #[test]
    fn a_state_is_told_again_by_its_reference_and_no_other_is() {
        let state = SavedState::new(7u32);
        let other = SavedState::new(7u32);
        let seen = state.downgrade();
        assert!(seen.is(&state) && seen.is(&state.clone()));
        assert!(!seen.is(&other));
        assert_eq!(seen.key(), state.key());
        assert_ne!(state.key(), other.key());
        drop(state);
        assert!(
            !seen.is(&other),
            "its address is not reused while the reference lives"
        );
    }
}
