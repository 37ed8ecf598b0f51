//! Time limits enforced from outside the guest: a timer on the async runtime that interrupts a
//! sandbox's call once its limit has passed.
//!
//! A guest call blocks its worker thread, and nothing inside the guest can be trusted to stop by
//! itself; the interrupt comes from another thread. The pool arms one for every step that runs
//! guest code (a request, a restore, a priming call), and a factory arms one for the warm-up call
//! it makes while building a sandbox.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::job::{Deadline, OutputSink};
use tokio::task::JoinHandle;

/// How often an expired timer interrupts its target again, until it is disarmed. Hyperlight
/// forgets an interrupt that lands before a call has started (it clears stale ones as the call
/// begins), so with a limit of a millisecond or two a single interrupt could come too early and
/// leave the call unbounded.
const REPEAT: Duration = Duration::from_millis(100);

/// Stops a running guest call from another thread. Implemented over Hyperlight's interrupt
/// handle for real sandboxes, and by fakes in tests.
pub trait Interrupt: Send + Sync {
    /// Interrupts the call in progress; the call returns an error. Does nothing when no call
    /// is running, except that a call the guest is in the middle of (a host function) ends
    /// as soon as it returns to the guest.
    fn interrupt(&self);
}

/// A Hyperlight sandbox's interrupt handle as an [`Interrupt`].
#[derive(Debug)]
pub struct Hyperlight(pub Arc<dyn hyperlight_host::hypervisor::InterruptHandle>);

impl Interrupt for Hyperlight {
    fn interrupt(&self) {
        self.0.kill();
    }
}

/// Arms timers on the async runtime.
#[derive(Debug, Clone)]
pub struct Watchdog {
    runtime: Handle,
}

/// An armed timer. Dropping it disarms it.
#[derive(Debug)]
#[must_use = "dropping the timer disarms it at once"]
pub struct Armed(JoinHandle<()>);

impl Drop for Armed {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Watchdog {
    /// A watchdog whose timers run on `runtime`.
    pub fn new(runtime: Handle) -> Self {
        Watchdog { runtime }
    }

    /// Interrupts `target` once `limit` has passed, and again every [`REPEAT`] until the
    /// returned timer is dropped.
    pub fn arm(&self, target: Arc<dyn Interrupt>, limit: Duration) -> Armed {
        Armed(self.runtime.spawn(async move {
            tokio::time::sleep(limit).await;
            keep_interrupting(target.as_ref()).await;
        }))
    }

    /// Interrupts `target` once `deadline` has passed (a pause of its clock holds the timer
    /// back), or as soon as `caller` is closed (the caller that watches the output went away:
    /// nobody waits for the program any more), and again every [`REPEAT`] until the returned
    /// timer is dropped.
    pub fn arm_until(
        &self,
        target: Arc<dyn Interrupt>,
        deadline: Arc<Deadline>,
        caller: Option<OutputSink>,
    ) -> Armed {
        Armed(self.runtime.spawn(async move {
            match caller {
                Some(caller) => tokio::select! {
                    () = deadline.passed(Duration::ZERO) => {}
                    () = caller.closed() => {}
                },
                None => deadline.passed(Duration::ZERO).await,
            }
            keep_interrupting(target.as_ref()).await;
        }))
    }
}

/// Interrupts `target` now, and again every [`REPEAT`], until the task is aborted.
async fn keep_interrupting(target: &dyn Interrupt) {
    loop {
        target.interrupt();
        tokio::time::sleep(REPEAT).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Interrupt for Count {
        fn interrupt(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn armed_timer_interrupts_after_its_limit_and_again_until_dropped() {
        let watchdog = Watchdog::new(Handle::current());
        let fired = Arc::new(Count::default());
        let kept = watchdog.arm(fired.clone(), Duration::from_millis(20));
        let disarmed = Arc::new(Count::default());
        drop(watchdog.arm(disarmed.clone(), Duration::from_millis(20)));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(fired.0.load(Ordering::SeqCst), 0, "not before its limit");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(fired.0.load(Ordering::SeqCst), 1);
        tokio::time::sleep(REPEAT * 2).await;
        assert_eq!(
            fired.0.load(Ordering::SeqCst),
            3,
            "an interrupt that came too early is repeated"
        );
        drop(kept);
        tokio::time::sleep(REPEAT * 2).await;
        assert_eq!(fired.0.load(Ordering::SeqCst), 3, "nothing once disarmed");
        assert_eq!(disarmed.0.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_for_a_caller_fires_as_soon_as_the_caller_goes_away() {
        let watchdog = Watchdog::new(Handle::current());
        let fired = Arc::new(Count::default());
        let (caller, watching) = tokio::sync::mpsc::unbounded_channel();
        let deadline = Deadline::new(std::time::Instant::now() + Duration::from_secs(60));
        let _armed = watchdog.arm_until(fired.clone(), deadline, Some(caller));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            fired.0.load(Ordering::SeqCst),
            0,
            "the caller still watches"
        );
        drop(watching);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(fired.0.load(Ordering::SeqCst), 1, "long before the limit");
    }

    #[tokio::test]
    async fn a_paused_deadline_holds_the_timer_back() {
        let watchdog = Watchdog::new(Handle::current());
        let fired = Arc::new(Count::default());
        let deadline = Deadline::new(std::time::Instant::now() + Duration::from_millis(30));
        let paused = deadline.pause();
        let _armed = watchdog.arm_until(fired.clone(), deadline, None);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(fired.0.load(Ordering::SeqCst), 0, "not while paused");
        drop(paused);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            fired.0.load(Ordering::SeqCst),
            0,
            "the deadline moved on by the pause"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(fired.0.load(Ordering::SeqCst), 1);
    }
}
