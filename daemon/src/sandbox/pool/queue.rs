//! A pool's queue, shared fairly between callers: work-conserving, so a caller alone may keep
//! every sandbox busy, and fair, so that when several callers wait the next free sandbox goes
//! to the one with the fewest jobs running (the one served longest ago among equals). A caller
//! at its share waits behind the others instead of being refused while sandboxes sit idle.
//!
//! Each caller (uid) may have at most `depth` jobs waiting; past it, its next job is refused
//! ([`Full`]), so one caller's flood fills its own line, never another's. Hard caps on what one
//! caller may have in flight are the service layer's (`--max-execs-per-caller`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The queue, its callers' lines and what each has running.
pub struct FairQueue<T> {
    state: Mutex<State<T>>,
    /// Told when a job is queued or the queue closes.
    changed: Condvar,
    depth: usize,
}

struct State<T> {
    /// Jobs waiting, per caller, in arrival order.
    waiting: BTreeMap<u32, VecDeque<T>>,
    /// Per caller: jobs taken and not yet done, and when it was last served.
    callers: BTreeMap<u32, Served>,
    /// Counts every take, to tell who was served longest ago.
    takes: u64,
    closed: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Served {
    running: usize,
    last: u64,
}

/// Why a job was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its caller already has the most jobs waiting that a caller may.
    Full,
    /// The queue is closed: the pool is gone.
    Closed,
}

/// Counts a job taken from the queue as its caller's, running, until dropped.
pub struct Running<T> {
    queue: Arc<FairQueue<T>>,
    uid: u32,
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        let mut state = self.queue.state();
        if let Some(served) = state.callers.get_mut(&self.uid) {
            served.running = served.running.saturating_sub(1);
        }
    }
}

impl<T> std::fmt::Debug for FairQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        let waiting: usize = state.waiting.values().map(VecDeque::len).sum();
        f.debug_struct("FairQueue")
            .field("depth", &self.depth)
            .field("waiting", &waiting)
            .field("callers", &state.callers.len())
            .finish()
    }
}

impl<T> std::fmt::Debug for Running<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("uid", &self.uid).finish()
    }
}

impl<T> FairQueue<T> {
    /// A queue where each caller may have `depth` jobs waiting.
    pub fn new(depth: usize) -> Arc<Self> {
        Arc::new(FairQueue {
            state: Mutex::new(State {
                waiting: BTreeMap::new(),
                callers: BTreeMap::new(),
                takes: 0,
                closed: false,
            }),
            changed: Condvar::new(),
            depth,
        })
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job` of caller `uid`.
    pub fn push(&self, uid: u32, job: T) -> Result<(), Refused> {
        let mut state = self.state();
        if state.closed {
            return Err(Refused::Closed);
        }
        let line = state.waiting.entry(uid).or_default();
        if line.len() >= self.depth {
            return Err(Refused::Full);
        }
        line.push_back(job);
        drop(state);
        self.changed.notify_one();
        Ok(())
    }

    /// Takes the next job, waiting for one: the first of the caller with the fewest jobs
    /// running (served longest ago among equals), and what counts it as running until the
    /// taker drops it. None once the queue is closed and empty.
    pub fn take(self: &Arc<Self>) -> Option<(T, Running<T>)> {
        let mut state = self.state();
        loop {
            if let Some(uid) = state.next_caller() {
                let job = state.pop(uid)?;
                let running = Running {
                    queue: self.clone(),
                    uid,
                };
                return Some((job, running));
            }
            if state.closed {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Whether no job waits.
    pub fn is_empty(&self) -> bool {
        self.state().waiting.is_empty()
    }

    /// Closes the queue: nothing more is queued, and takers get None once it is empty.
    pub fn close(&self) {
        self.state().closed = true;
        self.changed.notify_all();
    }
}

impl<T> State<T> {
    /// The caller whose job goes next, if any waits.
    fn next_caller(&self) -> Option<u32> {
        self.waiting
            .keys()
            .map(|&uid| (uid, self.callers.get(&uid).copied().unwrap_or_default()))
            .min_by_key(|(_, served)| (served.running, served.last))
            .map(|(uid, _)| uid)
    }

    /// Takes `uid`'s first job, counting it as running.
    fn pop(&mut self, uid: u32) -> Option<T> {
        let line = self.waiting.get_mut(&uid)?;
        let job = line.pop_front()?;
        if line.is_empty() {
            self.waiting.remove(&uid);
        }
        self.takes += 1;
        let served = self.callers.entry(uid).or_default();
        served.running += 1;
        served.last = self.takes;
        // Callers with nothing running or waiting are forgotten: the map stays as small as
        // the callers that are busy.
        let takes = self.takes;
        self.callers
            .retain(|uid, s| s.running > 0 || s.last == takes || self.waiting.contains_key(uid));
        Some(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_alone_takes_every_job_in_order() {
        let queue = FairQueue::new(8);
        for n in 0..3 {
            queue.push(1, n).unwrap();
        }
        let taken: Vec<_> = (0..3).map(|_| queue.take().unwrap()).collect();
        let jobs: Vec<i32> = taken.iter().map(|(job, _)| *job).collect();
        assert_eq!(jobs, [0, 1, 2], "all three run at once, in arrival order");
        assert!(queue.is_empty());
    }

    #[test]
    fn the_next_job_goes_to_the_caller_with_the_fewest_running() {
        let queue = FairQueue::new(8);
        for n in 0..6 {
            queue.push(1, ("flood", n)).unwrap();
        }
        // Two sandboxes take two of the flood; then another caller's job arrives.
        let first = queue.take().unwrap();
        let second = queue.take().unwrap();
        queue.push(2, ("other", 0)).unwrap();
        drop(first);
        assert_eq!(queue.take().unwrap().0, ("other", 0), "served next");
        drop(second);
        assert_eq!(queue.take().unwrap().0, ("flood", 2));
    }

    #[test]
    fn callers_with_as_many_running_take_turns() {
        let queue = FairQueue::new(8);
        for n in 0..3 {
            queue.push(1, (1, n)).unwrap();
            queue.push(2, (2, n)).unwrap();
        }
        let mut order = Vec::new();
        for _ in 0..6 {
            let (job, _running) = queue.take().unwrap();
            order.push(job.0);
            // Each finishes before the next is taken: nobody has anything running.
        }
        assert_eq!(order, [1, 2, 1, 2, 1, 2]);
    }

    #[test]
    fn a_caller_s_line_is_bounded_and_others_still_queue() {
        let queue = FairQueue::new(2);
        queue.push(1, 0).unwrap();
        queue.push(1, 1).unwrap();
        assert_eq!(queue.push(1, 2), Err(Refused::Full));
        assert_eq!(queue.push(2, 0), Ok(()));
        queue.close();
        assert_eq!(queue.push(3, 0), Err(Refused::Closed));
        // What was queued before the close is still taken, then nothing.
        assert_eq!((0..3).filter_map(|_| queue.take()).count(), 3);
        assert!(queue.take().is_none());
    }

    #[test]
    fn a_taker_waits_for_a_job_and_wakes_when_one_comes() {
        let queue = FairQueue::<u8>::new(1);
        let taker = {
            let queue = queue.clone();
            std::thread::spawn(move || queue.take().map(|(job, _)| job))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        queue.push(7, 42).unwrap();
        assert_eq!(taker.join().unwrap(), Some(42));
    }
}
