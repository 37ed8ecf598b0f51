//! Signals: stop requests, and keeping process-directed signals away from threads that run
//! guests.
//!
//! SIGTERM and SIGINT are stop requests from the moment [`stop_requests`] is called, which
//! `main` does before anything slow: the first one stops the daemon (during startup, at once;
//! while serving, after a drain), a second one cuts the drain short.
//!
//! The kernel delivers a signal sent to the process (SIGTERM from systemd, SIGINT from a
//! terminal) to any thread that does not block it. A thread inside `KVM_RUN` that takes one has
//! its vCPU interrupted behind Hyperlight's back, which can fail the guest call (seen: "Unknown
//! KVM VCPU exit: Shutdown" on a request in flight during SIGTERM). Threads that run guests block
//! these signals, so they reach the async runtime's threads, where the daemon handles them.
//! Hyperlight's own interrupt signal is sent to a specific thread and is not affected.

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// Turns every SIGTERM and SIGINT into a stop request (the signal's name) on the returned
/// channel, for as long as the receiver lives. Call it inside the async runtime.
pub fn stop_requests() -> std::io::Result<mpsc::Receiver<&'static str>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (requests, receiver) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let name = tokio::select! {
                Some(()) = term.recv() => "SIGTERM",
                Some(()) = int.recv() => "SIGINT",
                else => return,
            };
            if requests.send(name).await.is_err() {
                return;
            }
        }
    });
    Ok(receiver)
}

/// Signals that only the async runtime's threads should take.
const PROCESS_SIGNALS: &[Signal] = &[
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGCHLD,
    Signal::SIGPIPE,
];

/// Blocks the process-directed signals on the calling thread. Call it first thing on every
/// thread that will run guest code.
pub fn block_process_signals_on_this_thread() -> nix::Result<()> {
    let mut set = SigSet::empty();
    for signal in PROCESS_SIGNALS {
        set.add(*signal);
    }
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_signals_are_in_the_thread_mask_and_other_threads_are_unaffected() {
        let masks = std::thread::spawn(|| {
            block_process_signals_on_this_thread().unwrap();
            SigSet::thread_get_mask().unwrap()
        })
        .join()
        .unwrap();
        assert!(masks.contains(Signal::SIGTERM));
        assert!(masks.contains(Signal::SIGINT));
        let here = SigSet::thread_get_mask().unwrap();
        assert!(
            !here.contains(Signal::SIGTERM),
            "only the calling thread is changed"
        );
    }
}
