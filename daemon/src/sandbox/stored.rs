//! Templates saved on disk (`--snapshot-dir`), so that a daemon starts without building them.
//!
//! A template is saved under a key: everything that makes a snapshot fit a daemon (the daemon's
//! own executable, which holds the runner and the Hyperlight versions; the guest's sizes; for
//! Python the component and its library). The key's SHA-256 names the directory, so a daemon
//! finds only snapshots made for it; the others of its language are removed once it has saved
//! its own. Each directory holds:
//! - `oci/`: the snapshot, in hyperlight-host's OCI layout (`Snapshot::save`);
//! - `extra`: what the language keeps beside the guest's memory (Python's resource tables);
//! - `key.json`: the key in full, and the SHA-256 of `extra`.
//!
//! Nothing on disk is trusted: the snapshot is loaded with its digests checked
//! (`Snapshot::checked_load`, which also refuses a snapshot of another hypervisor, CPU or
//! Hyperlight format), `extra` against its digest, and the key against the directory's name.
//! A directory that fails is logged, removed, and the template built again. A directory is
//! written whole under a temporary name, then renamed, so a crash leaves no half snapshot.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use hyperlight_host::HyperlightError;
use hyperlight_host::sandbox::snapshot::{OciTag, Snapshot};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::guest::Source;

/// The tag of the template in each layout.
const TAG: &str = "template";

/// Where templates are saved.
#[derive(Debug)]
pub struct SnapshotStore {
    dir: PathBuf,
    /// Opened once the daemon serves: saves wait for it, so that writing hundreds of MiB never
    /// slows the start it would speed up next time.
    serving: (Mutex<bool>, Condvar),
}

/// What a template's fitness depends on, for one language. Serialized, hashed, and compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// Bumped when what is saved beside the snapshot changes shape.
    pub format: u32,
    pub language: String,
    /// The daemon's version and executable (size and modification time): a new build may run
    /// another runner, or another Hyperlight.
    pub daemon: String,
    pub executable: FileIdentity,
    /// The guest's sizes and limits, as `Debug` prints them.
    pub sizes: String,
    /// Files the guest's state depends on (Python's component and library).
    pub files: Vec<FileIdentity>,
}

/// A file, as far as telling it changed goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIdentity {
    pub path: PathBuf,
    pub bytes: u64,
    pub modified_ns: u128,
}

impl FileIdentity {
    pub fn of(path: &Path) -> io::Result<FileIdentity> {
        let meta = fs::metadata(path)?;
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

impl Key {
    /// The key of `language`'s template with `sizes`, depending on `files` too.
    pub fn new(language: &str, sizes: String, files: &[&Path]) -> io::Result<Key> {
        Ok(Key {
            format: 1,
            language: language.to_owned(),
            daemon: env!("CARGO_PKG_VERSION").to_owned(),
            executable: FileIdentity::of(&std::env::current_exe()?)?,
            sizes,
            files: files
                .iter()
                .map(|path| FileIdentity::of(path))
                .collect::<io::Result<_>>()?,
        })
    }

    /// The directory name: the language and the key's digest.
    fn dir_name(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{}-{}", self.language, &hex(&Sha256::digest(&json))[..32])
    }
}

/// `key.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Stamp {
    key: Key,
    extra_sha256: String,
}

/// A template as saved: the snapshot, and what the language keeps beside it.
#[allow(missing_debug_implementations)]
pub struct Stored {
    pub snapshot: Arc<Snapshot>,
    pub extra: Vec<u8>,
}

impl SnapshotStore {
    /// The store in `dir`, created (mode 0700: snapshots hold the guests' memory) if need be.
    pub fn open(dir: &Path) -> io::Result<SnapshotStore> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        // Saves a daemon did not finish (it stopped mid-way) are of no use to anyone.
        for entry in fs::read_dir(dir)?.flatten() {
            if entry.file_name().to_string_lossy().contains(".partial-") {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        Ok(SnapshotStore {
            dir: dir.to_owned(),
            serving: (Mutex::new(false), Condvar::new()),
        })
    }

    /// The daemon serves: saves waiting for it may go.
    pub fn serving(&self) {
        let (serving, changed) = &self.serving;
        *serving.lock().unwrap_or_else(PoisonError::into_inner) = true;
        changed.notify_all();
    }

    /// Waits until the daemon serves.
    fn wait_serving(&self) {
        let (serving, changed) = &self.serving;
        let mut serving = serving.lock().unwrap_or_else(PoisonError::into_inner);
        while !*serving {
            serving = changed
                .wait(serving)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The template saved under `key`, if one is and it passes every check. One that fails is
    /// removed, and says why in the log.
    pub fn load(&self, key: &Key) -> Option<Stored> {
        let dir = self.dir.join(key.dir_name());
        if !dir.exists() {
            info!(language = %key.language, dir = %dir.display(), "no saved template for this daemon");
            return None;
        }
        let started = std::time::Instant::now();
        match read(&dir, key) {
            Ok(stored) => {
                let elapsed_ms = started.elapsed().as_millis() as u64;
                info!(language = %key.language, elapsed_ms, "saved template read and checked");
                Some(stored)
            }
            Err(why) => {
                warn!(language = %key.language, dir = %dir.display(), "the saved template is not used, and is removed: {why}");
                let _ = fs::remove_dir_all(&dir);
                None
            }
        }
    }

    /// Saves `snapshot` and `extra` under `key`, then removes the other templates of its
    /// language (saved for other builds or settings).
    pub fn save(&self, key: &Key, snapshot: &Snapshot, extra: &[u8]) -> Result<(), String> {
        let name = key.dir_name();
        let partial = self
            .dir
            .join(format!(".{name}.partial-{}", std::process::id()));
        let _ = fs::remove_dir_all(&partial);
        let written = write(&partial, key, snapshot, extra);
        let renamed = written.and_then(|()| {
            let dir = self.dir.join(&name);
            let _ = fs::remove_dir_all(&dir);
            fs::rename(&partial, &dir)
                .and_then(|()| fs::File::open(&self.dir)?.sync_all())
                .map_err(|e| format!("renaming {}: {e}", partial.display()))
        });
        if let Err(why) = renamed {
            let _ = fs::remove_dir_all(&partial);
            return Err(why);
        }
        self.remove_others(&key.language, &name);
        Ok(())
    }

    /// Removes `language`'s templates other than `keep`.
    fn remove_others(&self, language: &str, keep: &str) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let prefix = format!("{language}-");
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name != keep {
                info!(dir = %entry.path().display(), "removing a template saved for another build or settings");
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// How a language saves its template, and reads it back.
#[allow(missing_debug_implementations)]
pub struct Codec<T> {
    /// The snapshot, and what the language keeps beside it, as bytes.
    pub encode: fn(&T) -> Result<Stored, String>,
    /// A template from what was saved; an error says why it does not fit.
    pub decode: Box<dyn FnOnce(Stored) -> Result<T, String>>,
}

/// The template saved under the key `key` gives, when `store` has a fitting one; otherwise one
/// from `build`, then saved in the background once the daemon serves (a save is not on the way
/// of the daemon's start).
pub fn load_or_build<T>(
    store: Option<&Arc<SnapshotStore>>,
    key: impl FnOnce() -> io::Result<Key>,
    build: impl FnOnce() -> Result<T, HyperlightError>,
    codec: Codec<T>,
) -> Result<(T, Source), HyperlightError> {
    let Some(store) = store else {
        return Ok((build()?, Source::Built));
    };
    let key = match key() {
        Ok(key) => key,
        Err(e) => {
            warn!("cannot tell which saved template fits ({e}); building one, not saving it");
            return Ok((build()?, Source::Built));
        }
    };
    if let Some(stored) = store.load(&key) {
        match (codec.decode)(stored) {
            Ok(template) => {
                info!(language = %key.language, "template loaded from {}", store.dir.display());
                return Ok((template, Source::Loaded));
            }
            Err(why) => {
                warn!(language = %key.language, "the saved template does not fit ({why}); building one");
                let _ = fs::remove_dir_all(store.dir.join(key.dir_name()));
            }
        }
    }
    let template = build()?;
    match (codec.encode)(&template) {
        Ok(Stored { snapshot, extra }) => {
            let store = store.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("save-{}", key.language))
                .spawn(move || {
                    store.wait_serving();
                    let started = std::time::Instant::now();
                    match store.save(&key, &snapshot, &extra) {
                        Ok(()) => info!(language = %key.language, elapsed_ms = started.elapsed().as_millis() as u64, "template saved in {}", store.dir.display()),
                        Err(why) => warn!(language = %key.language, "saving the template failed: {why}"),
                    }
                });
            if let Err(e) = spawned {
                warn!("cannot start the thread that saves the template: {e}");
            }
        }
        Err(why) => warn!(language = %key.language, "this template cannot be saved: {why}"),
    }
    Ok((template, Source::Built))
}

fn write(dir: &Path, key: &Key, snapshot: &Snapshot, extra: &[u8]) -> Result<(), String> {
    let tag = OciTag::new(TAG).map_err(|e| e.to_string())?;
    fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    snapshot
        .save(dir.join("oci"), &tag)
        .map_err(|e| format!("saving the snapshot: {e}"))?;
    write_synced(&dir.join("extra"), extra).map_err(|e| format!("writing extra: {e}"))?;
    let stamp = Stamp {
        key: key.clone(),
        extra_sha256: hex(&Sha256::digest(extra)),
    };
    let stamp = serde_json::to_vec_pretty(&stamp).map_err(|e| e.to_string())?;
    write_synced(&dir.join("key.json"), &stamp).map_err(|e| format!("writing key.json: {e}"))?;
    // The directory's entries are on disk before it is renamed into place: a crash leaves a
    // whole template or none.
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("syncing {}: {e}", dir.display()))
}

/// Writes `bytes` to a new file at `path` and waits until they are on disk.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn read(dir: &Path, key: &Key) -> Result<Stored, String> {
    let stamp = fs::read(dir.join("key.json")).map_err(|e| format!("reading key.json: {e}"))?;
    let stamp: Stamp =
        serde_json::from_slice(&stamp).map_err(|e| format!("reading key.json: {e}"))?;
    if stamp.key != *key {
        return Err("its key.json is for another daemon build or other settings".to_owned());
    }
    let extra = fs::read(dir.join("extra")).map_err(|e| format!("reading extra: {e}"))?;
    if hex(&Sha256::digest(&extra)) != stamp.extra_sha256 {
        return Err("extra does not match its digest".to_owned());
    }
    let tag = OciTag::new(TAG).map_err(|e| e.to_string())?;
    let snapshot = Snapshot::checked_load(dir.join("oci"), tag)
        .map_err(|e: HyperlightError| format!("loading the snapshot: {e}"))?;
    Ok(Stored {
        snapshot: Arc::new(snapshot),
        extra,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sizes: &str) -> Key {
        Key::new("javascript", sizes.to_owned(), &[]).unwrap()
    }

    #[test]
    fn a_key_names_its_directory_and_any_change_renames_it() {
        let a = key("heap 64 MiB");
        assert_eq!(a.dir_name(), key("heap 64 MiB").dir_name());
        assert_ne!(a.dir_name(), key("heap 128 MiB").dir_name());
        assert!(a.dir_name().starts_with("javascript-"));
    }

    #[test]
    fn a_missing_or_broken_template_is_not_loaded_and_a_broken_one_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(&root.path().join("snapshots")).unwrap();
        let key = key("heap 64 MiB");
        assert!(store.load(&key).is_none(), "nothing saved yet");
        // A directory of the right name whose files are not a template (a crash, a disk
        // error, a hand edit): refused, and removed.
        let dir = store.dir.join(key.dir_name());
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("key.json"), b"{not json").unwrap();
        assert!(store.load(&key).is_none());
        assert!(!dir.exists(), "the broken template is removed");
        // A stamp for another key under this key's name.
        fs::create_dir(&dir).unwrap();
        let other = Stamp {
            key: super::tests::key("heap 1 MiB"),
            extra_sha256: hex(&Sha256::digest(b"")),
        };
        fs::write(dir.join("key.json"), serde_json::to_vec(&other).unwrap()).unwrap();
        fs::write(dir.join("extra"), b"").unwrap();
        assert!(store.load(&key).is_none());
        assert!(!dir.exists());
        // The right stamp, an extra that does not match it.
        fs::create_dir(&dir).unwrap();
        let stamp = Stamp {
            key: key.clone(),
            extra_sha256: hex(&Sha256::digest(b"tables")),
        };
        fs::write(dir.join("key.json"), serde_json::to_vec(&stamp).unwrap()).unwrap();
        fs::write(dir.join("extra"), b"tablez").unwrap();
        assert!(store.load(&key).is_none());
        assert!(!dir.exists());
        // Everything right but the snapshot, which is not there.
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("key.json"), serde_json::to_vec(&stamp).unwrap()).unwrap();
        fs::write(dir.join("extra"), b"tables").unwrap();
        assert!(store.load(&key).is_none());
        assert!(!dir.exists());
    }

    #[test]
    fn the_store_is_private_to_the_daemon() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        SnapshotStore::open(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
