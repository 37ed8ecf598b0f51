//! Wheels kept on the host by their SHA-256, in a directory the operator names: shared by every
//! session, kept across restarts, bounded in size (the least recently used go first). A wheel
//! is written whole under a temporary name, then renamed; one read back is checked against its
//! name before it is used, so a file changed on disk is fetched again, not installed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use sha2::{Digest, Sha256};

/// The wheels' directory.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
    /// Held while a wheel is added and the oldest dropped.
    lock: Mutex<()>,
    /// The bytes its wheels hold: counted when it opens and when a wheel is added, and
    /// lowered when a changed one is dropped (health reads it without listing the directory).
    held: AtomicU64,
}

/// A SHA-256 in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Cache {
    /// The cache in `dir` (made if missing, mode 0700), at most `max_bytes`; else why not.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Cache, String> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot make the package cache {}: {e}", dir.display()))?;
        let cache = Cache {
            dir: dir.to_owned(),
            max_bytes,
            lock: Mutex::new(()),
            held: AtomicU64::new(0),
        };
        // A write cut short by a crash leaves a temporary file: not a wheel.
        let mut held = 0;
        for (path, bytes, _) in cache.entries()? {
            if path.extension().is_some_and(|e| e == "part") {
                let _ = fs::remove_file(&path);
            } else {
                held += bytes;
            }
        }
        cache.held.store(held, Ordering::Relaxed);
        Ok(cache)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.whl"))
    }

    /// The wheel of this SHA-256, if the cache has it whole.
    pub fn get(&self, sha256: &str) -> Option<Bytes> {
        if !is_digest(sha256) {
            return None;
        }
        let path = self.path(sha256);
        let bytes = fs::read(&path).ok()?;
        if sha256_hex(&bytes) != sha256 {
            if fs::remove_file(&path).is_ok() {
                let len = bytes.len() as u64;
                let lower = |held: u64| Some(held.saturating_sub(len));
                let _ = self
                    .held
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, lower);
            }
            return None;
        }
        // Its time of use, for the bound's order.
        if let Ok(file) = fs::File::options().append(true).open(&path) {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(Bytes::from(bytes))
    }

    /// Keeps `bytes` (whose SHA-256 the caller checked), then drops the least recently used
    /// wheels past the bound; else why it could not be written.
    pub fn put(&self, sha256: &str, bytes: &[u8]) -> Result<(), String> {
        if !is_digest(sha256) {
            return Err(format!("{sha256:?} is not a SHA-256"));
        }
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let path = self.path(sha256);
        let part = path.with_extension("part");
        // Not synced: a wheel cut short by a crash fails its hash when read, and is fetched
        // again (see `get`).
        let written = fs::File::create(&part)
            .and_then(|mut file| file.write_all(bytes))
            .and_then(|()| fs::rename(&part, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&part);
            return Err(format!("cannot write {}: {e}", path.display()));
        }
        self.trim()
    }

    /// The bytes it holds, as of its last change.
    pub fn bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Drops the least recently used wheels until the rest fit the bound.
    fn trim(&self) -> Result<(), String> {
        let mut entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.2);
        for (path, bytes, _) in entries {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= bytes;
            }
        }
        self.held.store(total, Ordering::Relaxed);
        Ok(())
    }

    /// Its files: path, size and time of last use.
    fn entries(&self) -> Result<Vec<(PathBuf, u64, SystemTime)>, String> {
        let read = fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot read the package cache {}: {e}", self.dir.display()))?;
        Ok(read
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let meta = entry.metadata().ok()?;
                meta.is_file().then(|| {
                    let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    (entry.path(), meta.len(), used)
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheels_come_back_by_hash_and_a_changed_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let digest = sha256_hex(b"wheel");
        assert_eq!(cache.get(&digest), None);
        cache.put(&digest, b"wheel").unwrap();
        assert_eq!(cache.get(&digest).unwrap(), Bytes::from_static(b"wheel"));
        assert_eq!(cache.bytes(), 5);
        fs::write(dir.path().join(format!("{digest}.whl")), b"other").unwrap();
        assert_eq!(cache.get(&digest), None, "a changed file is not given");
        assert_eq!(cache.bytes(), 0);
        assert!(!dir.path().join(format!("{digest}.whl")).exists());
        assert_eq!(cache.get("../../etc/passwd"), None);
        assert!(cache.put("not-a-digest", b"x").is_err());
    }

    #[test]
    fn the_least_recently_used_go_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 10).unwrap();
        let (a, b, c) = (
            sha256_hex(b"aaaa"),
            sha256_hex(b"bbbb"),
            sha256_hex(b"cccc"),
        );
        cache.put(&a, b"aaaa").unwrap();
        let old = SystemTime::now() - std::time::Duration::from_secs(60);
        fs::File::options()
            .append(true)
            .open(dir.path().join(format!("{a}.whl")))
            .unwrap()
            .set_modified(old)
            .unwrap();
        cache.put(&b, b"bbbb").unwrap();
        cache.put(&c, b"cccc").unwrap();
        assert!(cache.get(&a).is_none(), "the oldest went");
        assert!(cache.get(&b).is_some() && cache.get(&c).is_some());
        assert_eq!(cache.bytes(), 8);
        fs::write(dir.path().join("x.part"), b"cut").unwrap();
        let reopened = Cache::open(dir.path(), 10).unwrap();
        assert!(!dir.path().join("x.part").exists());
        assert_eq!(reopened.bytes(), 8, "counted when it opens");
    }
}
