//! A session's checkpoints: its state after each exec that changed it, numbered, oldest first.
//!
//! Checkpoint 0 is where the session started: the warm state for a new session, the state it
//! was forked from for a fork. Each exec whose state is kept adds the next number; numbers are
//! never reused, so that a number names one state for the session's whole life. The newest
//! checkpoint is the session's state, the one its next exec starts from.
//!
//! A rollback to checkpoint N drops every later one: the session is at N again, and its next
//! exec makes a new number (after rolling back from 7 to 3, the next is 8; its `parent` says 3).
//! To keep the later states, fork from the checkpoint instead. Checkpoints beyond the
//! retention (a count, and bytes) are dropped oldest first; the newest is never dropped.
//!
//! With a state directory each checkpoint but the warm state also has a directory on disk
//! ([`OnDisk`]), and its state may leave memory once it is written there (it is *parked*):
//! [`History::park`], and [`History::unpark`] when it is needed again.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use super::Image;
use super::durable::OnDisk;
use super::durable::journal::{Mark, millis};
use crate::job::{CheckpointInfo, ExecError};

/// How many checkpoints a session keeps, the newest included, and the bytes they may hold
/// together (the newest is kept whatever its size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub count: usize,
    pub bytes: u64,
}

/// One state of the session.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    number: u64,
    /// The checkpoint the exec that made it started from (None for where the session started).
    parent: Option<u64>,
    made_at: SystemTime,
    /// The request id of the exec that made it (None for where the session started).
    request_id: Option<u64>,
    /// Host memory its state holds when it is in memory.
    bytes: u64,
    /// Its state in memory: None for the warm state, and for a parked one (on disk only).
    image: Option<Arc<Image>>,
    /// Its directory in the state directory; None for the warm state, and without one.
    disk: Option<Arc<OnDisk>>,
}

impl Checkpoint {
    /// A checkpoint of state `image` (None: the warm state), kept in `disk` if that is given.
    pub fn new(
        mark: &Mark,
        bytes: u64,
        image: Option<Arc<Image>>,
        disk: Option<Arc<OnDisk>>,
    ) -> Self {
        Checkpoint {
            number: mark.number,
            parent: mark.parent,
            made_at: super::durable::journal::at_millis(mark.made_at_ms),
            request_id: mark.request_id,
            bytes,
            image,
            disk,
        }
    }

    /// Its state in memory, for an exec to start from or a fork to share; None for the warm
    /// state and for a parked one (whose [`disk`](Self::disk) has it).
    pub fn image(&self) -> Option<&Arc<Image>> {
        self.image.as_ref()
    }

    /// Its directory on disk, if it has one.
    pub fn disk(&self) -> Option<&Arc<OnDisk>> {
        self.disk.as_ref()
    }

    /// Its number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// How the journal names it.
    pub fn mark(&self) -> Mark {
        Mark {
            number: self.number,
            parent: self.parent,
            made_at_ms: millis(self.made_at),
            request_id: self.request_id,
            warm: self.image.is_none() && self.disk.is_none(),
        }
    }

    fn info(&self) -> CheckpointInfo {
        CheckpointInfo {
            number: self.number,
            parent: self.parent,
            made_at: self.made_at,
            request_id: self.request_id,
            bytes: self.bytes,
            durable: self.disk.as_ref().is_some_and(|disk| disk.is_written()),
        }
    }
}

/// A checkpoint an answered exec makes, while its state is being saved.
#[derive(Debug, Clone)]
struct Pending {
    mark: Mark,
}

/// The checkpoints a session keeps, never empty.
#[derive(Debug)]
pub struct History {
    checkpoints: VecDeque<Checkpoint>,
    /// The checkpoint being saved, once its exec is answered.
    pending: Option<Pending>,
    /// The number the next checkpoint takes.
    next: u64,
    retention: Retention,
}

impl History {
    /// A history whose checkpoint 0 is `start` (None: the warm state), of `bytes`.
    pub fn new(start: Option<Arc<Image>>, bytes: u64, retention: Retention) -> History {
        let mark = Mark {
            number: 0,
            parent: None,
            made_at_ms: millis(SystemTime::now()),
            request_id: None,
            warm: start.is_none(),
        };
        History::of(
            vec![Checkpoint::new(&mark, bytes, start, None)],
            1,
            retention,
        )
    }

    /// A history of `checkpoints` (oldest first, at least one), whose next number is `next`.
    pub fn of(checkpoints: Vec<Checkpoint>, next: u64, retention: Retention) -> History {
        History {
            checkpoints: checkpoints.into(),
            pending: None,
            next,
            retention,
        }
    }

    /// The newest checkpoint: the session's state.
    pub fn head(&self) -> &Checkpoint {
        // Never empty: `new` makes one, and nothing removes the newest but `refuse_head`, which
        // keeps one.
        &self.checkpoints[self.checkpoints.len() - 1]
    }

    fn head_mut(&mut self) -> &mut Checkpoint {
        let last = self.checkpoints.len() - 1;
        &mut self.checkpoints[last]
    }

    /// The number the next checkpoint takes.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Takes the next number for the exec `request_id`, whose state is being saved; the
    /// checkpoint exists once [`push`](Self::push)ed, and the journal names it from now on. A
    /// number whose save failed ([`cancel`](Self::cancel)) is never used.
    pub fn reserve(&mut self, request_id: u64) -> u64 {
        let number = self.next;
        self.next += 1;
        self.pending = Some(Pending {
            mark: Mark {
                number,
                parent: Some(self.head().number),
                made_at_ms: millis(SystemTime::now()),
                request_id: Some(request_id),
                warm: false,
            },
        });
        number
    }

    /// Adds the reserved checkpoint with its state `image` (and its directory), then drops the
    /// oldest beyond the retention; returns those dropped.
    pub fn push(&mut self, image: Arc<Image>, disk: Option<Arc<OnDisk>>) -> Vec<Checkpoint> {
        let Some(pending) = self.pending.take() else {
            return Vec::new();
        };
        let bytes = image.bytes();
        self.checkpoints
            .push_back(Checkpoint::new(&pending.mark, bytes, Some(image), disk));
        self.retain()
    }

    /// The reserved checkpoint will not come (its save failed).
    pub fn cancel(&mut self) {
        self.pending = None;
    }

    /// Drops the oldest checkpoints until the retention holds (the newest always stays);
    /// returns those dropped.
    fn retain(&mut self) -> Vec<Checkpoint> {
        let mut dropped = Vec::new();
        while self.checkpoints.len() > 1
            && (self.checkpoints.len() > self.retention.count
                || self.bytes() > self.retention.bytes)
        {
            dropped.extend(self.checkpoints.pop_front());
        }
        dropped
    }

    /// Checkpoint `number`, if it is kept.
    pub fn get(&self, number: u64) -> Result<&Checkpoint, ExecError> {
        self.checkpoints
            .iter()
            .find(|c| c.number == number)
            .ok_or_else(|| self.not_found(number))
    }

    /// Makes checkpoint `number` the newest again; returns the later ones, dropped.
    pub fn rollback(&mut self, number: u64) -> Result<Vec<Checkpoint>, ExecError> {
        let at = self
            .checkpoints
            .iter()
            .position(|c| c.number == number)
            .ok_or_else(|| self.not_found(number))?;
        Ok(self.checkpoints.drain(at + 1..).collect())
    }

    /// Drops the newest checkpoint, whose state could not be brought back, unless it is the
    /// only one; returns it.
    pub fn refuse_head(&mut self) -> Option<Checkpoint> {
        if self.checkpoints.len() > 1 {
            self.checkpoints.pop_back()
        } else {
            None
        }
    }

    fn not_found(&self, number: u64) -> ExecError {
        ExecError::CheckpointNotFound {
            checkpoint: number,
            kept: self.checkpoints.iter().map(|c| c.number).collect(),
        }
    }

    /// Every checkpoint kept, oldest first.
    pub fn list(&self) -> Vec<CheckpointInfo> {
        self.checkpoints.iter().map(Checkpoint::info).collect()
    }

    /// How the journal names the checkpoints, the one being saved included.
    pub fn marks(&self) -> Vec<Mark> {
        let kept = self.checkpoints.iter().map(Checkpoint::mark);
        kept.chain(self.pending.iter().map(|p| p.mark.clone()))
            .collect()
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.checkpoints.len()
    }

    /// Bytes the checkpoints kept hold together, in memory or not. Saturating: a checkpoint
    /// on disk counts what its record says, which a damaged record may put at any value.
    pub fn bytes(&self) -> u64 {
        let bytes = self.checkpoints.iter().map(|c| c.bytes);
        bytes.fold(0, u64::saturating_add)
    }

    /// Host memory the states in memory hold.
    pub fn resident_bytes(&self) -> u64 {
        let held = self.checkpoints.iter().filter(|c| c.image.is_some());
        held.map(|c| c.bytes).fold(0, u64::saturating_add)
    }

    /// Lets every state that is on disk leave memory; returns whether none is left in memory.
    pub fn park(&mut self) -> bool {
        for checkpoint in &mut self.checkpoints {
            if checkpoint.disk.as_ref().is_some_and(|d| d.is_written()) {
                checkpoint.image = None;
            }
        }
        self.is_parked()
    }

    /// Whether no state is in memory (and at least one is on disk).
    pub fn is_parked(&self) -> bool {
        self.checkpoints.iter().all(|c| c.image.is_none())
            && self.checkpoints.iter().any(|c| c.disk.is_some())
    }

    /// Puts `image`, brought back from disk, in checkpoint `number`.
    pub fn unpark(&mut self, number: u64, image: Arc<Image>) {
        if let Some(checkpoint) = self.checkpoints.iter_mut().find(|c| c.number == number) {
            checkpoint.image = Some(image);
        }
    }

    /// Gives the newest checkpoint its directory on disk.
    pub fn set_head_disk(&mut self, disk: Arc<OnDisk>) {
        self.head_mut().disk = Some(disk);
    }
}
