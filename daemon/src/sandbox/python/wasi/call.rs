//! The state of the call in progress, shared between the worker (which begins each call) and the
//! host functions the guest calls during it.
//!
//! - Its deadline: a sleep ends there at the latest, and stops the call when it does, so that
//!   the time limit, which the watchdog can only enforce while the guest runs, also bounds a
//!   program that sleeps.
//! - The wall clock as it read when the call began, and the monotonic instant it did: the
//!   guest's wall clock advances from there with the monotonic one, so it never steps back
//!   during a call (the program's monotonic clocks are derived from it; see the clocks section
//!   of the module above).
//! - How many host resources (pollables, streams) the guest has been given during the call. The
//!   generated bindings cannot free one before the sandbox is restored (they have no resource
//!   drop), so a program that sleeps or polls in a loop grows the host's tables with every
//!   iteration. Past a limit (`--python-max-host-handles`) the call is stopped.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyperlight_host::hypervisor::InterruptHandle;

use crate::job::Deadline;
use crate::sandbox::run_host::RunHost;

/// The call in progress (see the module's documentation). Cheap to clone; the clones share it.
#[derive(Debug, Clone)]
pub struct CallState(Arc<Mutex<Inner>>, RunHost);

#[derive(Debug)]
struct Inner {
    /// The most resources one call may be given. Each is an entry of a host-side table (32
    /// bytes, in a table that grows by doubling), kept until the restore after the call.
    max_resources: u64,
    start: Option<CallStart>,
    /// Resources the guest has been given during this call.
    resources: u64,
    /// Set once `resources` passed the limit and the call was stopped.
    over_limit: bool,
    /// Set when the program exited (`os._exit()`), with whether its status said success.
    exited: Option<bool>,
    /// Stops the call; set once the sandbox exists.
    interrupt: Option<Arc<dyn InterruptHandle>>,
}

#[derive(Debug, Clone)]
struct CallStart {
    deadline: Arc<Deadline>,
    wall: SystemTime,
    at: Instant,
}

impl CallState {
    /// No call yet; each may be given at most `max_resources` resources.
    pub fn new(max_resources: u64) -> Self {
        let inner = Inner {
            max_resources,
            start: None,
            resources: 0,
            over_limit: false,
            exited: None,
            interrupt: None,
        };
        CallState(Arc::new(Mutex::new(inner)), RunHost::default())
    }

    /// The tool calls and outbound requests of the call in progress.
    pub fn run(&self) -> &RunHost {
        &self.1
    }

    /// The most resources one call may be given.
    pub fn max_resources(&self) -> u64 {
        self.lock().max_resources
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives the state the handle that stops the sandbox's calls.
    pub fn set_interrupt(&self, interrupt: Arc<dyn InterruptHandle>) {
        self.lock().interrupt = Some(interrupt);
    }

    /// Begins a call that ends at `deadline`.
    pub fn begin(&self, deadline: Arc<Deadline>) {
        let mut inner = self.lock();
        inner.start = Some(CallStart {
            deadline,
            wall: SystemTime::now(),
            at: Instant::now(),
        });
        inner.resources = 0;
        inner.over_limit = false;
        inner.exited = None;
    }

    /// The program exits (`os._exit()`): the call is stopped before the guest runs on, which it
    /// cannot do (the component traps after an exit).
    pub fn exit(&self, success: bool) {
        let interrupt = {
            let mut inner = self.lock();
            inner.exited = Some(success);
            inner.interrupt.clone()
        };
        if let Some(interrupt) = interrupt {
            interrupt.kill();
        }
    }

    /// Whether the program exited during the call, and if so whether with success.
    pub fn exited(&self) -> Option<bool> {
        self.lock().exited
    }

    /// Whether the call was stopped for having been given too many resources.
    pub fn over_limit(&self) -> bool {
        self.lock().over_limit
    }

    /// Counts one resource given to the guest. The one that passes the limit stops the call: it
    /// ends as soon as the host function returns (Hyperlight checks for a kill before it
    /// re-enters the guest).
    pub fn resource_given(&self) {
        let interrupt = {
            let mut inner = self.lock();
            inner.resources += 1;
            if inner.resources <= inner.max_resources || inner.over_limit {
                return;
            }
            inner.over_limit = true;
            inner.interrupt.clone()
        };
        tracing::info!("the program used up its host handles; stopping it");
        if let Some(interrupt) = interrupt {
            interrupt.kill();
        }
    }

    /// The program waited until the call's deadline: the call is stopped, as the watchdog
    /// would, before the guest runs on (the watchdog's interrupt cannot reach a guest that is
    /// in a host call, and a program whose wait ends at the deadline could otherwise finish
    /// past its time limit, between two of the watchdog's interrupts).
    pub fn out_of_time(&self) {
        let interrupt = self.lock().interrupt.clone();
        if let Some(interrupt) = interrupt {
            interrupt.kill();
        }
    }

    fn start(&self) -> Option<CallStart> {
        self.lock().start.clone()
    }

    /// When the call must end, as it stands (a tool wait moves it on).
    pub fn deadline(&self) -> Option<Instant> {
        self.start().map(|call| call.deadline.at())
    }

    /// The wall clock, as time since the Unix epoch.
    pub fn wall(&self) -> Duration {
        let now = match self.start() {
            Some(call) => call.wall + call.at.elapsed(),
            None => SystemTime::now(),
        };
        now.duration_since(UNIX_EPOCH).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_past_the_limit_marks_the_call_and_a_new_call_starts_afresh() {
        let call = CallState::new(1000);
        call.begin(Deadline::new(Instant::now() + Duration::from_secs(1)));
        for _ in 0..1000 {
            call.resource_given();
        }
        assert!(!call.over_limit());
        call.resource_given();
        assert!(call.over_limit());
        call.begin(Deadline::new(Instant::now() + Duration::from_secs(1)));
        assert!(!call.over_limit());
    }

    #[test]
    fn a_table_entry_is_as_small_as_the_limit_assumes() {
        use hyperlight_common::resource::ResourceEntry;
        assert!(std::mem::size_of::<ResourceEntry<super::super::Pollable>>() <= 32);
        assert!(std::mem::size_of::<ResourceEntry<super::super::Output>>() <= 32);
        assert!(std::mem::size_of::<ResourceEntry<super::super::Input>>() <= 32);
    }
}
