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

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use super::Image;
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
    /// The guest's state and files; None: the warm state.
    image: Option<Arc<Image>>,
}

impl Checkpoint {
    /// The state, for an exec to start from or a fork to share.
    pub fn image(&self) -> Option<&Arc<Image>> {
        self.image.as_ref()
    }

    /// Its number.
    pub fn number(&self) -> u64 {
        self.number
    }

    fn bytes(&self) -> u64 {
        self.image.as_ref().map_or(0, |image| image.bytes())
    }

    fn info(&self) -> CheckpointInfo {
        CheckpointInfo {
            number: self.number,
            parent: self.parent,
            made_at: self.made_at,
            request_id: self.request_id,
            bytes: self.bytes(),
        }
    }
}

/// The checkpoints a session keeps, never empty.
#[derive(Debug)]
pub struct History {
    checkpoints: VecDeque<Checkpoint>,
    /// The number the next checkpoint takes.
    next: u64,
    retention: Retention,
}

impl History {
    /// A history whose checkpoint 0 is `start` (None: the warm state).
    pub fn new(start: Option<Arc<Image>>, retention: Retention) -> History {
        let start = Checkpoint {
            number: 0,
            parent: None,
            made_at: SystemTime::now(),
            request_id: None,
            image: start,
        };
        History {
            checkpoints: VecDeque::from([start]),
            next: 1,
            retention,
        }
    }

    /// The newest checkpoint: the session's state.
    pub fn head(&self) -> &Checkpoint {
        // Never empty: `new` makes one, and nothing removes the newest.
        &self.checkpoints[self.checkpoints.len() - 1]
    }

    /// Takes the next number, for an exec whose state is being saved. The checkpoint exists
    /// once [`push`](Self::push)ed; a number whose save failed is never used.
    pub fn reserve(&mut self) -> u64 {
        let number = self.next;
        self.next += 1;
        number
    }

    /// Adds checkpoint `number` (from [`reserve`](Self::reserve)), the exec `request_id`
    /// made from the current head, then drops the oldest beyond the retention.
    pub fn push(&mut self, number: u64, request_id: u64, image: Arc<Image>) {
        let parent = self.head().number;
        self.checkpoints.push_back(Checkpoint {
            number,
            parent: Some(parent),
            made_at: SystemTime::now(),
            request_id: Some(request_id),
            image: Some(image),
        });
        self.retain();
    }

    /// Drops the oldest checkpoints until the retention holds (the newest always stays).
    fn retain(&mut self) {
        while self.checkpoints.len() > 1
            && (self.checkpoints.len() > self.retention.count
                || self.bytes() > self.retention.bytes)
        {
            self.checkpoints.pop_front();
        }
    }

    /// Checkpoint `number`, if it is kept.
    pub fn get(&self, number: u64) -> Result<&Checkpoint, ExecError> {
        self.checkpoints
            .iter()
            .find(|c| c.number == number)
            .ok_or_else(|| self.not_found(number))
    }

    /// Makes checkpoint `number` the newest again, dropping the later ones; returns how many
    /// were dropped.
    pub fn rollback(&mut self, number: u64) -> Result<usize, ExecError> {
        let at = self
            .checkpoints
            .iter()
            .position(|c| c.number == number)
            .ok_or_else(|| self.not_found(number))?;
        Ok(self.checkpoints.drain(at + 1..).count())
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

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.checkpoints.len()
    }

    /// Bytes the checkpoints kept hold together.
    pub fn bytes(&self) -> u64 {
        self.checkpoints.iter().map(Checkpoint::bytes).sum()
    }
}
