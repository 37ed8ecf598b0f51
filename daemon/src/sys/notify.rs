//! Telling the service manager how the daemon is doing (systemd's `Type=notify`, through
//! `sd-notify`): READY once it serves, STOPPING when it starts draining, each with a status line
//! for `systemctl status`. Nothing happens outside a service manager (no `NOTIFY_SOCKET`).

use sd_notify::NotifyState;
use tracing::warn;

/// The daemon serves: its socket answers and every pool has a warm sandbox.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// The daemon drains and will exit.
pub fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!("cannot notify the service manager ({e})");
    }
}
