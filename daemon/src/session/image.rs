//! A session's saved state and the ledger that counts the memory all of them hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::job::{Files, Saved, SavedState};

/// Bytes the images of one language hold.
#[derive(Debug, Default)]
pub struct Ledger(AtomicU64);

impl Ledger {
    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A session's state as its last exec left it. Counted in its ledger from when it is made until
/// it is dropped; sessions share one through an `Arc` (a fork and its origin, until either
/// runs an exec).
#[derive(Debug)]
pub struct Image {
    saved: Saved,
    ledger: Arc<Ledger>,
}

impl Image {
    /// `saved`, counted in `ledger`.
    pub fn new(saved: Saved, ledger: Arc<Ledger>) -> Self {
        ledger.0.fetch_add(saved.bytes, Ordering::Relaxed);
        Image { saved, ledger }
    }

    /// The state, for a worker to load.
    pub fn state(&self) -> SavedState {
        self.saved.state.clone()
    }

    /// The working directory's files.
    pub fn files(&self) -> &Arc<Files> {
        &self.saved.files
    }

    /// Host memory it holds.
    pub fn bytes(&self) -> u64 {
        self.saved.bytes
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        self.ledger.0.fetch_sub(self.saved.bytes, Ordering::Relaxed);
    }
}
