//! The thread that writes checkpoints to disk, one after another, in the order they were handed
//! over, off every request's path; and removes the directories of checkpoints and sessions
//! that are gone (in that same order, so that a removal never overtakes a write). It alone
//! adds files to the state directory and removes them, so that the files checkpoints share
//! ([`Blobs`]) are found where they are when a checkpoint links them.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tracing::{debug, error, warn};

use super::blobs::Blobs;
use super::checkpoint::{self, Source};
use super::{OnDisk, SessionDisk};
use crate::job::{Language, StateCodec};
use crate::metrics::DurableMetrics;
use crate::session::Image;
use crate::sys::durable;
use crate::sys::seccomp::{self, Kind};
use crate::telemetry::Trace;

/// A checkpoint to write.
#[derive(Debug)]
pub struct Write {
    pub session: Arc<SessionDisk>,
    pub id: String,
    pub number: u64,
    pub disk: Arc<OnDisk>,
    /// Its state and files.
    pub image: Arc<Image>,
    /// The same state, already written by another checkpoint (a fork's start): linked from
    /// there when it is on disk.
    pub link_from: Option<Arc<OnDisk>>,
    pub codec: Arc<dyn StateCodec>,
    pub language: Language,
    /// When the exec that made it was answered.
    pub answered: Instant,
    /// That exec's place in a trace.
    pub trace: Trace,
}

#[derive(Debug)]
enum Job {
    Write(Box<Write>),
    /// A checkpoint's or a session's directory to remove.
    Discard(PathBuf),
}

/// The jobs handed over and not yet done.
#[derive(Debug, Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// A job is being done.
    busy: bool,
    closed: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// A job was handed over, or the queue ran dry.
    changed: Condvar,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The writer: its queue, and its thread, which ends when the writer is dropped (after the
/// jobs already handed over).
#[derive(Debug)]
pub struct Writer {
    shared: Arc<Shared>,
}

impl Writer {
    /// Starts the thread, which links the files of `blobs` and keeps it up to date.
    pub fn start(metrics: DurableMetrics, blobs: Arc<Mutex<Blobs>>) -> std::io::Result<Writer> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        seccomp::spawn(Kind::Writer, "checkpoints".to_owned(), move || {
            run(&theirs, &metrics, &blobs)
        })?;
        Ok(Writer { shared })
    }

    fn push(&self, job: Job) {
        self.shared.queue().jobs.push_back(job);
        self.shared.changed.notify_all();
    }

    /// Hands a checkpoint over.
    pub fn write(&self, write: Write) {
        self.push(Job::Write(Box::new(write)));
    }

    /// Hands over the removal of `dir`.
    pub fn discard(&self, dir: PathBuf) {
        self.push(Job::Discard(dir));
    }

    /// Waits until every job handed over is done, at most `limit`; false past it.
    pub fn flush(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut queue = self.shared.queue();
        while !queue.jobs.is_empty() || queue.busy {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            queue = self
                .shared
                .changed
                .wait_timeout(queue, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shared.queue().closed = true;
        self.shared.changed.notify_all();
    }
}

/// The thread's body: does each job in turn until the writer is dropped and nothing is left.
fn run(shared: &Shared, metrics: &DurableMetrics, blobs: &Mutex<Blobs>) {
    let held = || blobs.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let job = {
            let mut queue = shared.queue();
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    queue.busy = true;
                    break job;
                }
                if queue.closed {
                    return;
                }
                queue = shared
                    .changed
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        match job {
            Job::Write(write) => {
                let mut existing = |sha256: &str| held().find(sha256);
                if let Some((dir, record)) = write_one(&write, metrics, &mut existing) {
                    let added = held().hold(&dir, &record);
                    metrics.disk_bytes.add(i64::try_from(added).unwrap_or(0));
                    debug!(session = %write.id, checkpoint = write.number, added_bytes = added, "checkpoint on disk");
                }
            }
            Job::Discard(dir) => {
                let freed = held().release(&dir);
                durable::discard(&dir);
                metrics.disk_bytes.sub(i64::try_from(freed).unwrap_or(0));
            }
        }
        shared.queue().busy = false;
        shared.changed.notify_all();
    }
}

/// Writes one checkpoint, unless its session or the checkpoint itself is gone by now, linking
/// the blobs `existing` finds; its directory and record once it is on disk.
fn write_one(
    write: &Write,
    metrics: &DurableMetrics,
    existing: checkpoint::Existing<'_>,
) -> Option<(PathBuf, checkpoint::Record)> {
    if !write.session.live() || write.disk.is_dropped() {
        debug!(session = %write.id, checkpoint = write.number, "not writing a checkpoint that is gone");
        return None;
    }
    let dir = write.disk.dir().to_owned();
    let linked = write.link_from.as_ref().filter(|from| from.is_written());
    let source = match linked {
        Some(from) => Source::Written(from.dir()),
        None => Source::Memory {
            state: &write.image.state(),
            files: write.image.files(),
            codec: write.codec.as_ref(),
        },
    };
    let header = (write.id.as_str(), write.number, write.image.bytes());
    let started = Instant::now();
    let span = write.trace.span("checkpoint write", Vec::new);
    let written = checkpoint::write(&dir, header, write.codec.key(), source, existing);
    if written.is_err() {
        span.fail("write_failed");
    }
    span.end();
    if let Err(why) = written {
        metrics.write_failed(write.language, &format!("writing {}: {why}", dir.display()));
        error!(session = %write.id, checkpoint = write.number, "writing the checkpoint failed ({why}): it is kept in memory only, and a restart loses it");
        write.disk.mark_failed(why.to_string());
        return None;
    }
    let record = checkpoint::check(&dir, &write.id, write.number, write.codec.key());
    let record = match record {
        Ok(record) => record,
        Err(why) => {
            let read_back = format!("{} does not read back: {why}", dir.display());
            metrics.write_failed(write.language, &read_back);
            warn!(session = %write.id, checkpoint = write.number, "the checkpoint just written does not read back ({why}): it is kept in memory only");
            durable::discard(&dir);
            write
                .disk
                .mark_failed(format!("it does not read back: {why}"));
            return None;
        }
    };
    if !write.disk.mark_written(record.clone()) || !write.session.live() {
        durable::discard(&dir);
        return None;
    }
    metrics.written(write.language, write.answered.elapsed().as_secs_f64());
    let write_ms = started.elapsed().as_millis() as u64;
    debug!(session = %write.id, checkpoint = write.number, write_ms, "checkpoint written");
    Some((dir, record))
}
