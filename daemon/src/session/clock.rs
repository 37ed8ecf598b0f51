//! The session table's clock: the tokio runtime's, which runs in real time in the daemon and
//! which tests stop and move on at will (tokio's paused clock,
//! `#[tokio::test(start_paused = true)]`), so that expiry, parking, waiting for a turn and the
//! saving clock are tested without real sleeps. Its instants are `std::time::Instant`s, as
//! every deadline in the daemon is; what only measures (metrics, logs) keeps the real clock.

use std::time::{Duration, Instant};

/// Now, on the session table's clock.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Time since `then`, on the session table's clock.
pub fn since(then: Instant) -> Duration {
    now().saturating_duration_since(then)
}
