//! A session's clock of its saving: how long it has spent saving what its execs left, so that
//! an exec waiting behind a save can leave that time out of its time limit.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::clock;

/// The longest an exec waits for earlier execs' states to be saved, all saves it waits for
/// together, beyond its own time limit. Saving copies what the exec changed, one save at a time
/// in the daemon: a minute means something is wrong, and the exec is refused rather than kept
/// waiting.
pub const SAVE_WAIT_LIMIT: Duration = Duration::from_secs(60);

/// How long a session has spent saving, its current save included.
#[derive(Debug, Default)]
pub struct SaveClock(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    /// Told when a save ends.
    ended: Notify,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// Saves that have ended, together.
    total: Duration,
    /// When the save in progress started.
    since: Option<Instant>,
}

/// A save in progress: it ends when this is dropped.
#[derive(Debug)]
pub struct Saving(Arc<Inner>);

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SaveClock {
    /// A save starts now (saves of one session never overlap: each holds its lock).
    pub fn start(&self) -> Saving {
        self.0.state().since = Some(clock::now());
        Saving(self.0.clone())
    }

    /// Time spent saving so far, the save in progress included.
    pub fn total(&self) -> Duration {
        let state = *self.0.state();
        state.total + state.since.map_or(Duration::ZERO, clock::since)
    }

    /// Waits until `deadline` (a time limit that excludes saving) has passed outside saves, or
    /// `done` completes first. `deadline` is moved on by the saving done meanwhile, by at most
    /// `limit`. Returns what `done` gave and the deadline as moved; or, when the deadline
    /// passed, how long saving took meanwhile.
    pub async fn wait<T>(
        &self,
        deadline: Instant,
        limit: Duration,
        done: impl Future<Output = T>,
    ) -> Result<(T, Instant), Duration> {
        let before = self.total();
        let saved = || self.total().saturating_sub(before);
        let moved = || deadline + saved().min(limit);
        tokio::pin!(done);
        loop {
            // Made before looking, so that a save ending in between is not missed.
            let ended = self.0.ended.notified();
            let saving = self.0.state().since.is_some();
            let until = if saving {
                // The time limit stands still: wait for the save, within its own bound.
                clock::now() + limit.saturating_sub(saved())
            } else {
                moved()
            };
            tokio::select! {
                // What the caller waits for wins a tie with the deadline.
                biased;
                value = &mut done => return Ok((value, moved())),
                () = ended, if saving => continue,
                () = tokio::time::sleep_until(until.into()) => {}
            }
            // A save that ran during the sleep moved the deadline on.
            if saved() >= limit || moved() <= clock::now() {
                return Err(saved());
            }
        }
    }
}

impl Drop for Saving {
    fn drop(&mut self) {
        let mut state = self.0.state();
        if let Some(since) = state.since.take() {
            state.total += clock::since(since);
        }
        drop(state);
        self.0.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    //! On tokio's paused clock: the sleeps take no real time, and every figure is exact.

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A save of `clock` from `after` to `after + length`, in a task.
    fn save(
        clock: &Arc<SaveClock>,
        after: Duration,
        length: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let clock = clock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let saving = clock.start();
            tokio::time::sleep(length).await;
            drop(saving);
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_does_not_pass_while_the_session_saves() {
        let clock = Arc::new(SaveClock::default());
        let saver = save(&clock, Duration::ZERO, 600 * MS);
        tokio::time::sleep(10 * MS).await;
        let deadline = clock::now() + 200 * MS;
        // Done 100 ms after the save: within 200 ms outside it, though 700 ms after the start.
        let done = tokio::time::sleep(700 * MS);
        let (_, moved) = clock.wait(deadline, SAVE_WAIT_LIMIT, done).await.unwrap();
        assert!(moved - deadline >= 500 * MS, "{:?}", moved - deadline);
        saver.await.unwrap();
        assert!(clock.total() >= 600 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_save_that_starts_and_ends_while_waiting_moves_the_deadline() {
        let clock = Arc::new(SaveClock::default());
        let saver = save(&clock, 50 * MS, 500 * MS);
        let deadline = clock::now() + 200 * MS;
        // 200 ms of limit and 500 ms of saving: done at 600 ms is within it.
        let done = tokio::time::sleep(600 * MS);
        let (_, moved) = clock.wait(deadline, SAVE_WAIT_LIMIT, done).await.unwrap();
        assert!(moved - deadline >= 500 * MS, "{:?}", moved - deadline);
        saver.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn time_outside_saves_runs_out_and_saves_have_their_own_bound() {
        let clock = Arc::new(SaveClock::default());
        let never = std::future::pending::<()>();
        let started = clock::now();
        let waited = clock.wait(started + 100 * MS, SAVE_WAIT_LIMIT, never).await;
        assert_eq!(
            waited.unwrap_err(),
            Duration::ZERO,
            "no save: the limit ran out"
        );
        assert!(clock::since(started) >= 100 * MS);

        let saver = save(&clock, Duration::ZERO, Duration::from_secs(30));
        tokio::time::sleep(10 * MS).await;
        let started = clock::now();
        let never = std::future::pending::<()>();
        let waited = clock.wait(started + 100 * MS, 300 * MS, never).await;
        assert!(waited.unwrap_err() >= 300 * MS, "the bound on saving");
        assert!(clock::since(started) >= 300 * MS);
        saver.abort();
    }
}
