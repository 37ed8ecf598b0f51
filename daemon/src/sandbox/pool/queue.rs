//! A pool's queue, shared fairly between callers: work-conserving, so a caller alone may keep
//! every sandbox busy, and fair, so that when several callers wait the next free sandbox goes
//! to the one with the fewest jobs running (the one served longest ago among equals). A caller
//! at its share waits behind the others instead of being refused while sandboxes sit idle.
//!
//! Each caller (a uid, or a pod: see `Principal`) may have at most `depth` jobs waiting; past it, its next job is refused
//! ([`Full`]), so one caller's flood fills its own line, never another's. Hard caps on what one
//! caller may have in flight are the service layer's (`--max-execs-per-caller`).
//!
//! A job may name a [`Key`]: the state it resumes (a session's). A worker whose sandbox still
//! holds that state (*hot*, after the session's last exec) runs it without loading anything,
//! so the queue hands it that job first; other idle workers leave such a job to it, and a hot
//! worker leaves the other jobs to a worker that is not hot when one is idle (it would have to
//! restore its sandbox first). Which idle worker takes a job is all this changes: a job is
//! never left waiting while a worker that may take it is idle.

use std::collections::{BTreeMap, VecDeque};

use crate::job::Principal;

/// What a job resumes and a hot worker holds: the same number for the same state.
pub type Key = u64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The queue, its callers' lines and what each has running.
pub struct FairQueue<T, C = Principal> {
    state: Mutex<State<T, C>>,
    /// Told when a job is queued or the queue closes.
    changed: Condvar,
    depth: usize,
}

struct State<T, C> {
    /// Jobs waiting, per caller, in arrival order, with what each resumes.
    waiting: BTreeMap<C, VecDeque<(T, Option<Key>)>>,
    /// What each worker waiting for a job holds (None: it is not hot).
    idle: Vec<Option<Key>>,
    /// Per caller: jobs taken and not yet done, and when it was last served.
    callers: BTreeMap<C, Served>,
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
pub struct Running<T, C: Ord = Principal> {
    queue: Arc<FairQueue<T, C>>,
    caller: C,
}

impl<T, C: Ord> Drop for Running<T, C> {
    fn drop(&mut self) {
        let mut state = self.queue.state();
        if let Some(served) = state.callers.get_mut(&self.caller) {
            served.running = served.running.saturating_sub(1);
        }
    }
}

impl<T, C> std::fmt::Debug for FairQueue<T, C> {
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

impl<T, C: Ord + std::fmt::Debug> std::fmt::Debug for Running<T, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("caller", &self.caller)
            .finish()
    }
}

impl<T, C> FairQueue<T, C> {
    fn state(&self) -> MutexGuard<'_, State<T, C>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T, C: Ord + Clone> FairQueue<T, C> {
    /// A queue where each caller may have `depth` jobs waiting.
    pub fn new(depth: usize) -> Arc<Self> {
        Arc::new(FairQueue {
            state: Mutex::new(State {
                waiting: BTreeMap::new(),
                idle: Vec::new(),
                callers: BTreeMap::new(),
                takes: 0,
                closed: false,
            }),
            changed: Condvar::new(),
            depth,
        })
    }

    /// Queues `job` of `caller`, which resumes the state `key` (None: none).
    pub fn push(&self, caller: C, job: T, key: Option<Key>) -> Result<(), Refused> {
        let mut state = self.state();
        if state.closed {
            return Err(Refused::Closed);
        }
        let line = state.waiting.entry(caller).or_default();
        if line.len() >= self.depth {
            return Err(Refused::Full);
        }
        line.push_back((job, key));
        drop(state);
        // Every idle worker looks: which one takes it depends on what each holds.
        self.changed.notify_all();
        Ok(())
    }

    /// Takes the next job for a worker whose sandbox holds `hot` (None: its warm state),
    /// waiting for one: a job resuming `hot` first; otherwise the first of the caller with the
    /// fewest jobs running (served longest ago among equals) that no other idle worker is better
    /// placed to run. Returns what counts it as running until the taker drops it; None once
    /// the queue is closed and empty.
    pub fn take(self: &Arc<Self>, hot: Option<Key>) -> Option<(T, Running<T, C>)> {
        let mut state = self.state();
        state.idle.push(hot);
        let taken = loop {
            if let Some((caller, at)) = state.choose(hot) {
                break state.pop(&caller, at).map(|job| (job, caller));
            }
            if state.closed && state.waiting.is_empty() {
                break None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        };
        if let Some(at) = state.idle.iter().position(|&h| h == hot) {
            state.idle.swap_remove(at);
        }
        drop(state);
        // One idle worker fewer: the others may now take what they left to it.
        self.changed.notify_all();
        let (job, caller) = taken?;
        let running = Running {
            queue: self.clone(),
            caller,
        };
        Some((job, running))
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

impl<T, C: Ord + Clone> State<T, C> {
    /// The callers with jobs waiting, the next by fairness first.
    fn callers_in_turn(&self) -> Vec<&C> {
        let mut callers: Vec<(&C, Served)> = self
            .waiting
            .keys()
            .map(|c| (c, self.callers.get(c).copied().unwrap_or_default()))
            .collect();
        callers.sort_by_key(|(_, served)| (served.running, served.last));
        callers.into_iter().map(|(c, _)| c).collect()
    }

    /// The job (its caller, and its place in the caller's line) a worker holding `hot` takes
    /// now, if any: one resuming `hot`; else, in fairness order, the first that no other idle
    /// worker holds, unless this worker is hot and one that is not is idle.
    fn choose(&self, hot: Option<Key>) -> Option<(C, usize)> {
        let callers = self.callers_in_turn();
        if let Some(hot) = hot {
            for &caller in &callers {
                if let Some(at) = self.waiting[caller]
                    .iter()
                    .position(|(_, k)| *k == Some(hot))
                {
                    return Some((caller.clone(), at));
                }
            }
        }
        // The other idle workers: this one is in `idle` too, once.
        let mut others = self.idle.clone();
        if let Some(at) = others.iter().position(|&h| h == hot) {
            others.swap_remove(at);
        }
        if hot.is_some() && others.contains(&None) {
            return None;
        }
        for &caller in &callers {
            let line = &self.waiting[caller];
            let held_elsewhere = |key: &Option<Key>| key.is_some() && others.contains(key);
            if let Some(at) = line.iter().position(|(_, key)| !held_elsewhere(key)) {
                return Some((caller.clone(), at));
            }
        }
        None
    }

    /// Takes the job at `at` in `caller`'s line, counting it as running.
    fn pop(&mut self, caller: &C, at: usize) -> Option<T> {
        let line = self.waiting.get_mut(caller)?;
        let (job, _) = line.remove(at)?;
        if line.is_empty() {
            self.waiting.remove(caller);
        }
        self.takes += 1;
        let served = self.callers.entry(caller.clone()).or_default();
        served.running += 1;
        served.last = self.takes;
        // Callers with nothing running or waiting are forgotten: the map stays as small as
        // the callers that are busy.
        let takes = self.takes;
        self.callers
            .retain(|c, s| s.running > 0 || s.last == takes || self.waiting.contains_key(c));
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
            queue.push(1, n, None).unwrap();
        }
        let taken: Vec<_> = (0..3).map(|_| queue.take(None).unwrap()).collect();
        let jobs: Vec<i32> = taken.iter().map(|(job, _)| *job).collect();
        assert_eq!(jobs, [0, 1, 2], "all three run at once, in arrival order");
        assert!(queue.is_empty());
    }

    #[test]
    fn the_next_job_goes_to_the_caller_with_the_fewest_running() {
        let queue = FairQueue::new(8);
        for n in 0..6 {
            queue.push(1, ("flood", n), None).unwrap();
        }
        // Two sandboxes take two of the flood; then another caller's job arrives.
        let first = queue.take(None).unwrap();
        let second = queue.take(None).unwrap();
        queue.push(2, ("other", 0), None).unwrap();
        drop(first);
        assert_eq!(queue.take(None).unwrap().0, ("other", 0), "served next");
        drop(second);
        assert_eq!(queue.take(None).unwrap().0, ("flood", 2));
    }

    #[test]
    fn callers_with_as_many_running_take_turns() {
        let queue = FairQueue::new(8);
        for n in 0..3 {
            queue.push(1, (1, n), None).unwrap();
            queue.push(2, (2, n), None).unwrap();
        }
        let mut order = Vec::new();
        for _ in 0..6 {
            let (job, _running) = queue.take(None).unwrap();
            order.push(job.0);
            // Each finishes before the next is taken: nobody has anything running.
        }
        assert_eq!(order, [1, 2, 1, 2, 1, 2]);
    }

    #[test]
    fn a_caller_s_line_is_bounded_and_others_still_queue() {
        let queue = FairQueue::new(2);
        queue.push(1, 0, None).unwrap();
        queue.push(1, 1, None).unwrap();
        assert_eq!(queue.push(1, 2, None), Err(Refused::Full));
        assert_eq!(queue.push(2, 0, None), Ok(()));
        queue.close();
        assert_eq!(queue.push(3, 0, None), Err(Refused::Closed));
        // What was queued before the close is still taken, then nothing.
        assert_eq!((0..3).filter_map(|_| queue.take(None)).count(), 3);
        assert!(queue.take(None).is_none());
    }

    #[test]
    fn a_taker_waits_for_a_job_and_wakes_when_one_comes() {
        let queue = FairQueue::<u8, u32>::new(1);
        let taker = {
            let queue = queue.clone();
            std::thread::spawn(move || queue.take(None).map(|(job, _)| job))
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        queue.push(7, 42, None).unwrap();
        assert_eq!(taker.join().unwrap(), Some(42));
    }

    /// Takes a job on another thread for a worker holding `hot`, and gives it back.
    fn taker(
        queue: &Arc<FairQueue<&'static str, u32>>,
        hot: Option<Key>,
    ) -> std::thread::JoinHandle<Option<&'static str>> {
        let queue = queue.clone();
        std::thread::spawn(move || queue.take(hot).map(|(job, _)| job))
    }

    /// Waits until `n` workers wait in `queue`.
    fn idle(queue: &FairQueue<&'static str, u32>, n: usize) {
        while queue.state().idle.len() < n {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_job_resuming_a_state_goes_to_the_worker_that_holds_it() {
        let queue = FairQueue::new(8);
        let (cold, hot) = (taker(&queue, None), taker(&queue, Some(7)));
        idle(&queue, 2);
        queue.push(1, "session", Some(7)).unwrap();
        assert_eq!(
            hot.join().unwrap(),
            Some("session"),
            "the hot worker, not the cold one"
        );
        queue.push(1, "plain", None).unwrap();
        assert_eq!(cold.join().unwrap(), Some("plain"));
    }

    #[test]
    fn a_hot_worker_leaves_other_jobs_to_an_idle_cold_one_and_takes_them_when_none_is() {
        let queue = FairQueue::new(8);
        let (hot, cold) = (taker(&queue, Some(7)), taker(&queue, None));
        idle(&queue, 2);
        queue.push(1, "plain", None).unwrap();
        assert_eq!(cold.join().unwrap(), Some("plain"), "the cold worker");
        // The cold one busy: the hot one takes what comes, and a job resuming a state nobody
        // holds.
        queue.push(1, "other session", Some(9)).unwrap();
        assert_eq!(hot.join().unwrap(), Some("other session"));
    }

    #[test]
    fn a_job_whose_state_a_busy_worker_held_is_not_left_waiting() {
        let queue = FairQueue::new(8);
        queue.push(1, "session", Some(7)).unwrap();
        // Nobody idle holds 7: any worker takes it.
        assert_eq!(queue.take(Some(3)).map(|(job, _)| job), Some("session"));
        queue.push(1, "next", Some(7)).unwrap();
        assert_eq!(queue.take(None).map(|(job, _)| job), Some("next"));
    }
}
