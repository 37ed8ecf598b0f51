//! A running program's deadline, which stands still while the program waits for something its
//! time limit does not cover (a tool's result: the caller's time, not the program's).
//!
//! The watchdog that stops a program, and the host functions that bound a wait by the deadline,
//! read it here rather than keep an `Instant` of their own: a pause moves the deadline on by
//! the time it lasted, for all of them at once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// A deadline that can be paused. Shared between the thread that runs the program and the
/// watchdog's timer.
#[derive(Debug)]
pub struct Deadline {
    state: Mutex<State>,
    /// Told every time a pause ends (the deadline moved) or begins.
    changed: Notify,
}

#[derive(Debug, Clone, Copy)]
struct State {
    /// When the program's time is up, as of the last pause's end.
    at: Instant,
    /// Since when the clock has stood still, while it does.
    paused_since: Option<Instant>,
}

/// What the deadline is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// The clock runs: the program's time is up at this instant.
    Runs(Instant),
    /// The clock stands still: the program waits for something its limit does not cover.
    Paused,
}

impl Deadline {
    /// A deadline at `at`, running.
    pub fn new(at: Instant) -> Arc<Deadline> {
        Arc::new(Deadline {
            state: Mutex::new(State {
                at,
                paused_since: None,
            }),
            changed: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The deadline now: when it falls, or that it stands still.
    pub fn now(&self) -> Now {
        let state = self.state();
        match state.paused_since {
            Some(_) => Now::Paused,
            None => Now::Runs(state.at),
        }
    }

    /// When the program's time is up, as it stands: while paused, as if the pause ended now.
    pub fn at(&self) -> Instant {
        let state = self.state();
        match state.paused_since {
            Some(since) => state.at + since.elapsed(),
            None => state.at,
        }
    }

    /// The time left before the deadline (none once it has passed).
    pub fn left(&self) -> Duration {
        self.at().saturating_duration_since(Instant::now())
    }

    /// The program's time is up now, whatever was left (the exec's wall-clock cap passed).
    pub fn expire(&self) {
        {
            let mut state = self.state();
            state.at = Instant::now();
            state.paused_since = None;
        }
        self.changed.notify_waiters();
    }

    /// Stops the clock until the returned guard is dropped; the deadline then moves on by the
    /// time it stood still. Pauses do not nest: one is taken at a time.
    pub fn pause(self: &Arc<Self>) -> Paused {
        self.state().paused_since.get_or_insert_with(Instant::now);
        self.changed.notify_waiters();
        Paused(self.clone())
    }

    /// Waits until the deadline, plus `grace`, has passed with the clock running: a pause
    /// holds it back, and moves it on.
    pub async fn passed(&self, grace: Duration) {
        loop {
            let changed = self.on_change();
            match self.now() {
                Now::Paused => changed.await,
                Now::Runs(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until((at + grace).into()) => {
                            if self.now() == Now::Runs(at) {
                                return;
                            }
                        }
                        () = changed => {}
                    }
                }
            }
        }
    }

    /// A future that waits until the deadline changes (a pause begins or ends), registered
    /// now: a change between this call and the await is not missed.
    pub fn on_change(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

/// The clock of a [`Deadline`], stopped until this is dropped.
#[derive(Debug)]
#[must_use = "dropping the pause starts the clock again at once"]
pub struct Paused(Arc<Deadline>);

impl Drop for Paused {
    fn drop(&mut self) {
        {
            let mut state = self.0.state();
            if let Some(since) = state.paused_since.take() {
                state.at += since.elapsed();
            }
        }
        self.0.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passed_waits_out_a_pause() {
        let start = Instant::now();
        let deadline = Deadline::new(start + Duration::from_millis(30));
        let paused = deadline.pause();
        let waiter = deadline.clone();
        let passed = tokio::spawn(async move { waiter.passed(Duration::ZERO).await });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!passed.is_finished(), "not while the clock stands still");
        drop(paused);
        passed.await.unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_pause_moves_the_deadline_on_by_its_length() {
        let start = Instant::now();
        let deadline = Deadline::new(start + Duration::from_millis(50));
        assert_eq!(deadline.now(), Now::Runs(start + Duration::from_millis(50)));
        let paused = deadline.pause();
        assert_eq!(deadline.now(), Now::Paused);
        std::thread::sleep(Duration::from_millis(30));
        assert!(deadline.at() >= start + Duration::from_millis(80));
        drop(paused);
        let Now::Runs(at) = deadline.now() else {
            panic!("running again");
        };
        assert!(at >= start + Duration::from_millis(80), "{:?}", at - start);
        assert!(deadline.left() > Duration::from_millis(40));
    }
}
