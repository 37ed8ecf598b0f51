//! A session's saved state and the ledger that counts the memory all of them hold.
//!
//! States made one from another share memory (hyperlight-host patch 0003): a checkpoint is
//! mapped from the files of the state its exec started from (the template, earlier
//! checkpoints) and one file of its own. The ledger counts each file once, for as long as any
//! image holds it, whatever dropped the image that made it: a rolled-back or expired
//! checkpoint's pages are counted as long as a later checkpoint or a fork still maps them, and
//! given back with the last. The template's files are the pool's, never a session's.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::job::{Files, MemoryFile, Saved, SavedState};

/// Bytes the images of one language hold.
#[derive(Debug, Default)]
pub struct Ledger {
    bytes: AtomicU64,
    held: Mutex<Held>,
}

/// The files the images of one language hold, and the template's, which they do not count.
#[derive(Debug, Default)]
struct Held {
    template: HashSet<(u64, u64)>,
    /// Each file some image holds: its size, and how many images hold it.
    held: HashMap<(u64, u64), (u64, u32)>,
}

impl Ledger {
    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The template's files: states map them, but the pool holds them anyway.
    pub fn template(&self, memory: &[MemoryFile]) {
        self.held().template.extend(memory.iter().map(|f| f.id));
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `fixed` bytes and the files of `memory` no other image holds.
    fn hold(&self, fixed: u64, memory: &[MemoryFile]) {
        let mut files = self.held();
        let mut added = fixed;
        for file in memory {
            if files.template.contains(&file.id) {
                continue;
            }
            let (bytes, holders) = files.held.entry(file.id).or_insert((file.bytes, 0));
            if *holders == 0 {
                added += *bytes;
            }
            *holders += 1;
        }
        self.bytes.fetch_add(added, Ordering::Relaxed);
    }

    /// Takes back what [`hold`](Self::hold) counted for the same `fixed` and `memory`.
    fn release(&self, fixed: u64, memory: &[MemoryFile]) {
        let mut files = self.held();
        let mut freed = fixed;
        for file in memory {
            let Some((bytes, holders)) = files.held.get_mut(&file.id) else {
                continue;
            };
            *holders -= 1;
            if *holders == 0 {
                freed += *bytes;
                files.held.remove(&file.id);
            }
        }
        self.bytes.fetch_sub(freed, Ordering::Relaxed);
    }
}

/// A session's state as its last exec left it. Counted in its ledger from when it is made until
/// it is dropped; sessions share one through an `Arc` (a fork and its origin, until either
/// runs an exec).
#[derive(Debug)]
pub struct Image {
    saved: Saved,
    /// What it counts beside its memory files: its working directory's files, or all of its
    /// bytes when its guest told no files.
    fixed: u64,
    ledger: Arc<Ledger>,
}

impl Image {
    /// `saved`, counted in `ledger`.
    pub fn new(saved: Saved, ledger: Arc<Ledger>) -> Self {
        let fixed = if saved.memory.is_empty() {
            saved.bytes
        } else {
            saved.files.values().map(|f| f.len() as u64).sum()
        };
        ledger.hold(fixed, &saved.memory);
        Image {
            saved,
            fixed,
            ledger,
        }
    }

    /// The state, for a worker to load.
    pub fn state(&self) -> SavedState {
        self.saved.state.clone()
    }

    /// The working directory's files.
    pub fn files(&self) -> &Arc<Files> {
        &self.saved.files
    }

    /// Host memory it holds of its own: what no state it was made from holds.
    pub fn bytes(&self) -> u64 {
        self.saved.bytes
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        self.ledger.release(self.fixed, &self.saved.memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(inode: u64, bytes: u64) -> MemoryFile {
        MemoryFile {
            id: (1, inode),
            bytes,
        }
    }

    fn image(ledger: &Arc<Ledger>, memory: Vec<MemoryFile>, files: Files) -> Image {
        let saved = Saved {
            state: SavedState::new(0u8),
            bytes: memory.last().map_or(7, |f| f.bytes),
            memory,
            files: Arc::new(files),
        };
        Image::new(saved, ledger.clone())
    }

    #[test]
    fn shared_files_count_once_until_the_last_image_that_maps_them_goes() {
        let ledger = Arc::new(Ledger::default());
        let template = file(1, 1 << 30);
        ledger.template(&[template]);
        let first = image(&ledger, vec![template, file(2, 100)], Files::new());
        assert_eq!(ledger.bytes(), 100, "the template is the pool's");
        let second = image(
            &ledger,
            vec![template, file(2, 100), file(3, 10)],
            Files::new(),
        );
        let fork = image(
            &ledger,
            vec![template, file(2, 100), file(4, 20)],
            Files::new(),
        );
        assert_eq!(ledger.bytes(), 130);
        // The checkpoint that made file 2 goes (rolled back past, or past the retention): its
        // pages live on in the two made from it, and stay counted.
        drop(first);
        assert_eq!(ledger.bytes(), 130);
        drop(second);
        assert_eq!(ledger.bytes(), 120);
        drop(fork);
        assert_eq!(ledger.bytes(), 0);
    }

    #[test]
    fn a_state_that_tells_no_files_counts_its_bytes_and_files_count_beside_memory() {
        let ledger = Arc::new(Ledger::default());
        let told_nothing = image(&ledger, Vec::new(), Files::new());
        assert_eq!(ledger.bytes(), 7);
        let files = Files::from([("a.txt".to_owned(), vec![0u8; 5])]);
        let with_files = image(&ledger, vec![file(9, 50)], files);
        assert_eq!(ledger.bytes(), 62);
        drop(told_nothing);
        drop(with_files);
        assert_eq!(ledger.bytes(), 0);
    }
}
