//! Templates saved on disk (`--snapshot-dir`), so that a daemon starts without building them.
//!
//! A template is saved under a key: everything that makes a snapshot fit a daemon (the daemon's
//! own executable, which holds the runner and the Hyperlight versions; the guest's sizes; for
//! Python the component and its library). The key's SHA-256 names the directory, so a daemon
//! finds only snapshots made for it; the others of its language are removed once it has saved
//! its own. Each directory holds:
//! - `oci/`: the snapshot, in its Hyperlight's OCI layout ([`Persist`]: hyperlight-host's
//!   `Snapshot::save` for the JavaScript and WebAssembly guests, hyperlight-unikraft's
//!   `save_snapshot` for native Python);
//! - `extra`: what the language keeps beside the guest's memory (the WebAssembly guest's
//!   resource tables, what the native guest reported of itself);
//! - `key.json`: the key in full, and the checksum of every other file.
//!
//! Nothing on disk is trusted: every byte is checked against `key.json`, then the snapshot is
//! loaded (hyperlight-host refuses one of another hypervisor, CPU or Hyperlight format), and the
//! key is compared with the directory's name and `key.json`. The checksum is XXH64 (the frame
//! checksum of zstd) over the file mapped into memory, rather than the layout's own SHA-256
//! (`Snapshot::checked_load`): what it must catch is accidental damage (a disk error, a file
//! cut short), and reading every byte is most of what a start from disk costs: XXH64 is tens of
//! times faster than SHA-256 and the file is mapped rather than read into a buffer (see
//! `sys::mapped`; the figures are on the benchmark page). No digest could stop a deliberate
//! edit anyway: whoever can write the directory (its owner, the daemon's user) can write
//! `key.json` too.
//! A directory that fails is logged, removed, and the template built again. A directory is
//! written whole under a temporary name, then renamed, so a crash leaves no half snapshot; one
//! removed is first renamed aside, under a name no reader takes for a template (see
//! [`discard`]), so it disappears at once, whole, however long deleting its files takes.
//!
//! # Design: templates and saved snapshots
//! A template (`sandbox/guest.rs`: `Template`, `GuestFactory::prepare`) is made once per language
//! and start; every sandbox of the pool, and every replacement, is built from it.
//!
//! - **JavaScript** (`sandbox/javascript/`). hyperlight-js 0.4 keeps the sandbox inside a
//!   `LoadedJSSandbox` private and cannot build one from a snapshot, so hyperlight-js builds only
//!   the template: runtime loaded, the runner registered, snapshot taken. The sandboxes are then built by hyperlight-host directly, and `host.rs` answers the
//!   guest itself with the three host functions hyperlight-js registers (`HostPrint`,
//!   `CurrentTimeMicros`, and `CallHostJsFunction`, which carries a call of the runner's host
//!   module `hyperlightd` with JSON arguments and answers in hyperlight-js's tagged format). A
//!   snapshot records the names and signatures of its host functions, and
//!   `SandboxBuilder::from_snapshot` refuses host functions that do not cover them; the runner's
//!   module functions are registered on the template and answered on every sandbox from one list
//!   in `host.rs`. Calls go straight to the guest's `RunHandler`, as `handle_event` does.
//! - **Python** (`sandbox/python/mod.rs`). hyperlight-wasm builds the template (runtime, the
//!   component mapped copy-on-write, the warm-up call); the snapshot holds the component's pages
//!   too, so a sandbox built from it needs neither the file nor the runtime's start. The guest's
//!   resource handles name entries of host-side tables, so the template carries a copy of those
//!   tables, and each new sandbox starts with its own copy.
//! - **What it costs, what it saves.** A sandbox from the template is a new micro-VM over the
//!   template's memory, read-only and shared, its pages copied on first write: far cheaper than a
//!   runtime load, and a small part of a snapshot's memory per sandbox. The template itself is held once per language for the daemon's life.
//!   The restore after each request goes back to the template.
//! - **Native Python** (`sandbox/native_python/`). hyperlight-unikraft boots the rootfs, the runner
//!   imports the packages most programs use and reports Python's version and the packages; the
//!   snapshot is taken then. Sandboxes boot from it and are restored to it, as the others.
//! - **Saved on disk** (`sandbox/stored.rs`, `--snapshot-dir`). A template built from scratch is
//!   saved in the background (its snapshot through `stored::Persist`, which each Hyperlight
//!   implements: hyperlight-host 0.17's `Snapshot::save` for JavaScript and WebAssembly Python,
//!   hyperlight-unikraft's `save_snapshot` for native Python, whose load refuses another kernel or
//!   host contract; plus the language's `extra`: the WebAssembly guest's resource tables as plain
//!   data, `python/wasi/portable.rs`, or what the native runner reported), under a key: the
//!   daemon's version and executable (size and modification time: a new build may carry another
//!   runner or Hyperlight), the guest's sizes and limits, and the files the guest's state depends
//!   on (the WebAssembly guest's component and library, the native guest's rootfs). A daemon has
//!   one Python template: switching runtimes replaces it. The key's SHA-256 names the directory; files are written
//!   under a temporary name, synced, and renamed, so a crash leaves a whole template or none; one
//!   that is removed is renamed aside first, under a name no reader takes for a template, then
//!   deleted, so nobody sees a template half deleted. At the
//!   next start a saved template is used only if its directory is the key's, its `key.json` says
//!   the same key, every file's bytes match the checksum `key.json` records for it (and no file is
//!   there that it does not name), hyperlight-host loads the layout (and refuses another
//!   hypervisor, CPU vendor or format version), and every resource entry names a node of the
//!   library in memory. Anything else is logged, removed, and the template built again and saved
//!   again; templates of the language saved under other keys are removed once the new one is
//!   saved. Reading every byte is most of what a start from disk costs (the benchmark's `start`
//!   part prints where it goes), which is why the checksum is XXH64 (zstd's frame checksum) over
//!   the file mapped with its pages populated (`sys/mapped.rs`, the workspace's one `unsafe`, with
//!   the reason it is sound there), not the layout's own SHA-256 (`Snapshot::checked_load`) nor a
//!   `read` into a buffer, each many times slower on the same bytes (the benchmark page, "Saved
//!   templates"). What must be caught is accidental damage (a disk error, a file cut short); a
//!   deliberate edit no digest could stop, since whoever can write the directory (mode 0700, the
//!   daemon's user) can write `key.json` too. Saves wait until the
//!   daemon serves, so that writing hundreds of MiB never slows the start.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use hyperlight_host::sandbox::snapshot::{OciDigest, OciTag, Snapshot};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::guest::Source;
use crate::job::{ExistingBlob, SavedState, StateCodec, StateKey};
use crate::sys::durable::{self, discard};
use crate::sys::seccomp::{self, Kind};

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

/// What a template's fitness depends on, for one language (see [`StateKey`]): serialized,
/// hashed into the directory's name, and compared.
pub type Key = StateKey;

impl Key {
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
    /// The checksum of every file of the template (`oci/...` and `extra`), by path.
    files: BTreeMap<String, String>,
}

/// A template as saved: the snapshot, and what the language keeps beside it.
#[allow(missing_debug_implementations)]
pub struct Stored<S> {
    pub snapshot: Arc<S>,
    pub extra: Vec<u8>,
}

/// A snapshot the store writes into a directory and reads back. Each Hyperlight has its own
/// snapshot type and its own way to name it in its layout; each refuses, when it reads, a
/// snapshot of another format, hypervisor or CPU.
pub trait Persist: Sized + Send + Sync + 'static {
    /// Writes the snapshot into the layout `dir`, hard-linking the files of its memory that
    /// `existing` finds on disk already.
    fn write_to(&self, dir: &Path, existing: ExistingBlob<'_>) -> Result<(), String>;
    fn read_from(dir: &Path) -> Result<Arc<Self>, String>;
}

/// hyperlight-host's snapshot (the JavaScript and WebAssembly guests), under the tag
/// `template`.
impl Persist for Snapshot {
    fn write_to(&self, dir: &Path, existing: ExistingBlob<'_>) -> Result<(), String> {
        let tag = OciTag::new(TAG).map_err(|e| e.to_string())?;
        let existing = |digest: &OciDigest| existing(digest.as_str().strip_prefix("sha256:")?);
        self.save_sharing(dir, &tag, &existing)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn read_from(dir: &Path) -> Result<Arc<Self>, String> {
        let tag = OciTag::new(TAG).map_err(|e| e.to_string())?;
        Snapshot::load(dir, tag)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    }
}

impl SnapshotStore {
    /// The store in `dir`, created (mode 0700: snapshots hold the guests' memory) if need be.
    pub fn open(dir: &Path) -> io::Result<SnapshotStore> {
        // Saves a daemon did not finish, and removals it did not finish (it stopped mid-way),
        // are of no use to anyone: opening clears them.
        durable::open_private_dir(dir)?;
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
    pub fn load<S: Persist>(&self, key: &Key) -> Option<Stored<S>> {
        let dir = self.dir.join(key.dir_name());
        if !dir.exists() {
            info!(language = %key.language, dir = %dir.display(), "no saved template for this daemon");
            return None;
        }
        let started = std::time::Instant::now();
        match read(&dir, key) {
            Ok((stored, read)) => {
                let elapsed_ms = started.elapsed().as_millis() as u64;
                info!(
                    language = %key.language,
                    elapsed_ms,
                    checked_bytes = read.bytes,
                    checking_ms = read.checking.as_millis() as u64,
                    mapping_ms = read.mapping.as_millis() as u64,
                    "saved template read and checked"
                );
                Some(stored)
            }
            Err(why) => {
                warn!(language = %key.language, dir = %dir.display(), "the saved template is not used, and is removed: {why}");
                discard(&dir);
                None
            }
        }
    }

    /// Saves `snapshot` and `extra` under `key`, then removes the other templates of its
    /// language (saved for other builds or settings).
    pub fn save<S: Persist>(&self, key: &Key, snapshot: &S, extra: &[u8]) -> Result<(), String> {
        let name = key.dir_name();
        let partial = durable::partial(&self.dir, &name);
        let _ = fs::remove_dir_all(&partial);
        let written = write(&partial, key, snapshot, extra);
        let renamed = written.and_then(|()| {
            let dir = self.dir.join(&name);
            discard(&dir);
            durable::commit(&partial, &dir)
                .map_err(|e| format!("renaming {}: {e}", partial.display()))
        });
        if let Err(why) = renamed {
            let _ = fs::remove_dir_all(&partial);
            return Err(why);
        }
        self.remove_others(&key.language, &name);
        Ok(())
    }

    /// A file of a saved template that is the blob `sha256` of its snapshot's layout, with the
    /// checksum `key.json` records for it: a session's state made from the template links it
    /// instead of writing it again (see `session::durable::blobs`).
    pub fn find_blob(&self, sha256: &str) -> Option<(PathBuf, durable::Digest)> {
        let name = format!("oci/blobs/sha256/{sha256}");
        for entry in fs::read_dir(&self.dir).ok()?.flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path().join(&name);
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let stamp = fs::read(entry.path().join("key.json")).ok();
            let stamp: Option<Stamp> = stamp.and_then(|s| serde_json::from_slice(&s).ok());
            if let Some(checksum) = stamp.and_then(|mut stamp| stamp.files.remove(&name))
                && meta.is_file()
            {
                let bytes = meta.len();
                return Some((path, durable::Digest { checksum, bytes }));
            }
        }
        None
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
                discard(&entry.path());
            }
        }
    }
}

/// How a language saves its template, and reads it back.
#[allow(missing_debug_implementations)]
pub struct Codec<T, S> {
    /// The snapshot, and what the language keeps beside it, as bytes.
    pub encode: fn(&T) -> Result<Stored<S>, String>,
    /// A template from what was saved; an error says why it does not fit.
    pub decode: Box<dyn FnOnce(Stored<S>) -> Result<T, String>>,
}

/// How a language's session states go to disk, laid out as its templates are: the snapshot
/// in `oci/` (through [`Persist`]), what the language keeps beside it in `extra`. The session
/// table checks the files and the key; this only writes and reads them.
pub struct StateFiles<S> {
    key: Key,
    encode: Box<Encode<S>>,
    decode: Box<Decode<S>>,
}

/// What turns a saved state into what is stored.
type Encode<S> = dyn Fn(&SavedState) -> Result<Stored<S>, String> + Send + Sync;
/// What turns what was stored back into a state.
type Decode<S> = dyn Fn(Stored<S>) -> Result<SavedState, String> + Send + Sync;

impl<S> std::fmt::Debug for StateFiles<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateFiles")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<S: Persist> StateFiles<S> {
    /// States of the guest whose key `key` gives, turned into what is stored by `encode` and
    /// back by `decode`. `Err` when the key cannot be told (the daemon's executable or a guest
    /// file cannot be read), saying so: a daemon asked to keep sessions on disk does not start
    /// without it.
    pub fn codec(
        key: io::Result<Key>,
        encode: impl Fn(&SavedState) -> Result<Stored<S>, String> + Send + Sync + 'static,
        decode: impl Fn(Stored<S>) -> Result<SavedState, String> + Send + Sync + 'static,
    ) -> Result<Arc<dyn StateCodec>, String> {
        let key = key.map_err(|e| {
            format!("cannot tell which saved session states fit this guest and daemon ({e})")
        })?;
        Ok(Arc::new(StateFiles {
            key,
            encode: Box::new(encode),
            decode: Box::new(decode),
        }))
    }
}

impl<S: Persist> StateCodec for StateFiles<S> {
    fn key(&self) -> &StateKey {
        &self.key
    }

    fn write(
        &self,
        state: &SavedState,
        dir: &Path,
        existing: ExistingBlob<'_>,
    ) -> Result<(), String> {
        let stored = (self.encode)(state)?;
        fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        stored
            .snapshot
            .write_to(&dir.join("oci"), existing)
            .map_err(|e| format!("saving the snapshot: {e}"))?;
        durable::write_synced(&dir.join("extra"), &stored.extra)
            .map_err(|e| format!("writing extra: {e}"))
    }

    fn read(&self, dir: &Path) -> Result<SavedState, String> {
        let extra = fs::read(dir.join("extra")).map_err(|e| format!("reading extra: {e}"))?;
        let snapshot =
            S::read_from(&dir.join("oci")).map_err(|e| format!("loading the snapshot: {e}"))?;
        (self.decode)(Stored { snapshot, extra })
    }
}

/// The template saved under the key `key` gives, when `store` has a fitting one; otherwise one
/// from `build`, then saved in the background once the daemon serves (a save is not on the way
/// of the daemon's start).
pub fn load_or_build<T, S: Persist, E>(
    store: Option<&Arc<SnapshotStore>>,
    key: impl FnOnce() -> io::Result<Key>,
    build: impl FnOnce() -> Result<T, E>,
    codec: Codec<T, S>,
) -> Result<(T, Source), E> {
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
    if let Some(stored) = store.load::<S>(&key) {
        match (codec.decode)(stored) {
            Ok(template) => {
                info!(language = %key.language, "template loaded from {}", store.dir.display());
                return Ok((template, Source::Loaded));
            }
            Err(why) => {
                warn!(language = %key.language, "the saved template does not fit ({why}); building one");
                discard(&store.dir.join(key.dir_name()));
            }
        }
    }
    let template = build()?;
    match (codec.encode)(&template) {
        Ok(Stored { snapshot, extra }) => {
            let store = store.clone();
            let name = format!("save-{}", key.language);
            let spawned = seccomp::spawn(Kind::Writer, name, move || {
                store.wait_serving();
                let started = std::time::Instant::now();
                match store.save(&key, snapshot.as_ref(), &extra) {
                    Ok(()) => {
                        info!(language = %key.language, elapsed_ms = started.elapsed().as_millis() as u64, "template saved in {}", store.dir.display())
                    }
                    Err(why) => {
                        warn!(language = %key.language, "saving the template failed: {why}")
                    }
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

fn write<S: Persist>(dir: &Path, key: &Key, snapshot: &S, extra: &[u8]) -> Result<(), String> {
    fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    snapshot
        .write_to(&dir.join("oci"), &|_| None)
        .map_err(|e| format!("saving the snapshot: {e}"))?;
    durable::write_synced(&dir.join("extra"), extra).map_err(|e| format!("writing extra: {e}"))?;
    let stamp = Stamp {
        key: key.clone(),
        files: checksums(dir)
            .map_err(|e| format!("digesting the template's files: {e}"))?
            .0,
    };
    let stamp = serde_json::to_vec_pretty(&stamp).map_err(|e| e.to_string())?;
    durable::write_synced(&dir.join("key.json"), &stamp)
        .map_err(|e| format!("writing key.json: {e}"))
}

/// The checksum of every file of the template in `dir` but `key.json`, by path, and the bytes
/// checked.
fn checksums(dir: &Path) -> io::Result<(BTreeMap<String, String>, u64)> {
    let (digests, bytes) = durable::digests(dir, &["key.json"])?;
    let checksums = digests.into_iter().map(|(name, d)| (name, d.checksum));
    Ok((checksums.collect(), bytes))
}

/// What reading a saved template took: its bytes checked, the time checking them, the time
/// hyperlight-host took to map the snapshot.
struct ReadCost {
    bytes: u64,
    checking: std::time::Duration,
    mapping: std::time::Duration,
}

fn read<S: Persist>(dir: &Path, key: &Key) -> Result<(Stored<S>, ReadCost), String> {
    let stamp = fs::read(dir.join("key.json")).map_err(|e| format!("reading key.json: {e}"))?;
    let stamp: Stamp =
        serde_json::from_slice(&stamp).map_err(|e| format!("reading key.json: {e}"))?;
    if stamp.key != *key {
        return Err("its key.json is for another daemon build or other settings".to_owned());
    }
    // Every byte is checked, with a checksum far cheaper than the layout's own SHA-256 (which
    // `Snapshot::checked_load` would check again): see the module's header.
    let started = std::time::Instant::now();
    let extra = fs::read(dir.join("extra")).map_err(|e| format!("reading extra: {e}"))?;
    let (mut files, bytes) =
        checksums(dir).map_err(|e| format!("reading the template's files: {e}"))?;
    // `extra` as read here, not as it may be on disk by now.
    files.insert("extra".to_owned(), durable::checksum(&extra));
    if files != stamp.files {
        return Err("its files do not match the digests in key.json".to_owned());
    }
    let checking = started.elapsed();
    let snapshot =
        S::read_from(&dir.join("oci")).map_err(|e| format!("loading the snapshot: {e}"))?;
    let cost = ReadCost {
        bytes,
        checking,
        mapping: started.elapsed() - checking,
    };
    let stored = Stored { snapshot, extra };
    Ok((stored, cost))
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

    /// A stamp for `key` naming these files' contents.
    fn stamp(key: &Key, files: &[(&str, &[u8])]) -> Vec<u8> {
        let files = files
            .iter()
            .map(|(name, bytes)| ((*name).to_owned(), durable::checksum(bytes)))
            .collect();
        serde_json::to_vec(&Stamp {
            key: key.clone(),
            files,
        })
        .unwrap()
    }

    #[test]
    fn a_missing_or_broken_template_is_not_loaded_and_a_broken_one_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(&root.path().join("snapshots")).unwrap();
        let key = key("heap 64 MiB");
        assert!(store.load::<Snapshot>(&key).is_none(), "nothing saved yet");
        let dir = store.dir.join(key.dir_name());
        // Each case: the files of a directory of the right name that is not a whole template
        // (a crash, a disk error, a hand edit). Each is refused, and removed.
        let other = super::tests::key("heap 1 MiB");
        type Files<'a> = Vec<(&'a str, Vec<u8>)>;
        let cases: Vec<(&str, Files)> = vec![
            (
                "key.json is not JSON",
                vec![("key.json", b"{not json".to_vec())],
            ),
            (
                "a stamp for another key",
                vec![
                    ("key.json", stamp(&other, &[("extra", b"")])),
                    ("extra", Vec::new()),
                ],
            ),
            (
                "extra does not match",
                vec![
                    ("key.json", stamp(&key, &[("extra", b"tables")])),
                    ("extra", b"tablez".to_vec()),
                ],
            ),
            (
                "a file the stamp does not name",
                vec![
                    ("key.json", stamp(&key, &[("extra", b"tables")])),
                    ("extra", b"tables".to_vec()),
                    ("junk", b"x".to_vec()),
                ],
            ),
            (
                "everything right but the snapshot, which is not there",
                vec![
                    ("key.json", stamp(&key, &[("extra", b"tables")])),
                    ("extra", b"tables".to_vec()),
                ],
            ),
        ];
        for (case, files) in cases {
            fs::create_dir(&dir).unwrap();
            for (name, bytes) in files {
                fs::write(dir.join(name), bytes).unwrap();
            }
            assert!(store.load::<Snapshot>(&key).is_none(), "{case}");
            assert!(!dir.exists(), "{case}: the broken template is removed");
            let left: Vec<_> = fs::read_dir(&store.dir).unwrap().flatten().collect();
            assert!(left.is_empty(), "{case}: nothing is left aside: {left:?}");
        }
    }

    #[test]
    fn a_removed_template_goes_in_one_step_and_leftovers_are_cleared_at_open() {
        let root = tempfile::tempdir().unwrap();
        let snapshots = root.path().join("snapshots");
        let store = SnapshotStore::open(&snapshots).unwrap();
        let dir = store.dir.join(key("heap 64 MiB").dir_name());
        fs::create_dir_all(dir.join("oci/blobs")).unwrap();
        fs::write(dir.join("key.json"), b"{}").unwrap();
        discard(&dir);
        assert!(!dir.exists());
        discard(&dir); // nothing there: nothing happens
        // What a daemon stopped mid-way leaves (a save, a removal) is cleared by the next one;
        // templates and other files stay.
        for name in [
            ".javascript-ab.partial-12",
            ".javascript-cd.removed-12-0",
            "javascript-ef",
        ] {
            fs::create_dir_all(snapshots.join(name).join("oci")).unwrap();
        }
        drop(store);
        let _store = SnapshotStore::open(&snapshots).unwrap();
        let mut left: Vec<String> = fs::read_dir(&snapshots)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["javascript-ef"]);
    }

    mod fuzz {
        //! Property-based fuzzing of a saved template's `key.json`, which the daemon reads at
        //! every start (`PROPTEST_CASES` sets the cases): any bytes, or a right stamp damaged,
        //! are refused without a panic, and the directory is removed.

        use proptest::prelude::*;

        use super::*;

        proptest! {
            #[test]
            fn any_key_json_is_refused_and_its_template_removed(
                bytes in any::<Vec<u8>>(),
                flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
                cut in any::<usize>(),
                damaged in any::<bool>(),
            ) {
                let root = tempfile::tempdir().unwrap();
                let store = SnapshotStore::open(&root.path().join("snapshots")).unwrap();
                let key = key("heap 64 MiB");
                let dir = store.dir.join(key.dir_name());
                let json = match damaged {
                    false => bytes,
                    true => {
                        let mut json = stamp(&key, &[("extra", b"tables")]);
                        let len = json.len();
                        for (at, value) in flips {
                            json[at % len] = value;
                        }
                        json.truncate(cut % (len + 1));
                        json
                    }
                };
                fs::create_dir(&dir).unwrap();
                fs::write(dir.join("key.json"), json).unwrap();
                fs::write(dir.join("extra"), b"tables").unwrap();
                prop_assert!(store.load::<Snapshot>(&key).is_none());
                prop_assert!(!dir.exists());
            }
        }
    }
}
