//! `hyperlightd-egress`: the egress helper. Resolves names and makes TCP connections for a
//! daemon that has no network, handing each connection over as a descriptor (see
//! `hyperlightd::egress::helper`). Listens on the socket systemd passes it
//! (`hyperlightd-egress.socket`), or on `--socket`.

use std::os::unix::net::UnixListener;
use std::process::ExitCode;

use hyperlightd::config::{HelperConfig as Args, command_line};
use hyperlightd::egress::helper;
use hyperlightd::sys::seccomp::{self, Kind};
use tracing_subscriber::EnvFilter;

/// Exit codes (sysexits), besides a command line's (64): no socket to listen on (EX_OSERR), a
/// failure after that (EX_SOFTWARE).
const NO_SOCKET: u8 = 71;
const FAILED: u8 = 70;

fn main() -> ExitCode {
    let args = match command_line::<Args>() {
        Ok(args) => args,
        Err(exit) => return exit,
    };
    let filter =
        EnvFilter::try_from_env("HYPERLIGHTD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let listener = match listener(&args) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(NO_SOCKET);
        }
    };
    // Every thread it starts inherits the filter: the egress client's list (sockets, no
    // hypervisor).
    if let Err(e) = seccomp::confine(&args.seccomp, Kind::Egress) {
        tracing::error!("system call filters: {e}");
        return ExitCode::from(FAILED);
    }
    tracing::info!(
        max_connections = args.max_connections,
        "answering the daemon"
    );
    let error = helper::serve(listener, args.max_connections);
    tracing::error!("the socket failed: {error}");
    ExitCode::from(FAILED)
}

/// The socket systemd passed, or `--socket`'s, bound here.
fn listener(args: &Args) -> Result<UnixListener, String> {
    let mut passed = listenfd::ListenFd::from_env();
    if let Some(listener) = passed
        .take_unix_listener(0)
        .map_err(|e| format!("the socket systemd passed: {e}"))?
    {
        return Ok(listener);
    }
    let Some(path) = &args.socket else {
        return Err("no socket: systemd passed none, and --socket names none".to_owned());
    };
    UnixListener::bind(path).map_err(|e| format!("binding {}: {e}", path.display()))
}
