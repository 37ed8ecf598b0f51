//! The JavaScript guest: hyperlight-js's QuickJS runtime, with hyperlightd's runner
//! (`guest/javascript/runner.js`) registered as a handler and snapshotted once loaded, so a
//! request pays neither for the runtime nor for the runner.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyperlight_host::HyperlightError;
use hyperlight_js::{HostPrintFn, LoadedJSSandbox, SandboxBuilder, Script, Snapshot};

use super::guest::{
    Guest, GuestError, GuestFactory, GuestSizes, OutputCapture, SavedState, Stream, seed,
};
use super::watchdog::{self, Interrupt};

/// The runner, compiled into the daemon so that the daemon and its guest protocol always match:
/// the web APIs bundled from npm (`cargo xtask js-vendor`), those built on the host functions
/// below (timers and the event loop, `crypto`, `performance`), then the runner itself, as one
/// module.
pub const RUNNER: &str = concat!(
    include_str!("../../../guest/javascript/web-apis.js"),
    "\n",
    include_str!("../../../guest/javascript/web.js"),
    "\n",
    include_str!("../../../guest/javascript/runner.js"),
);
/// Name under which the runner is registered.
const HANDLER: &str = "run";
/// Host module the runner imports for its output.
const HOST_MODULE: &str = "hyperlightd";

/// Builds the smallest JavaScript sandbox there is and starts its runtime, which runs guest
/// code: whether this works tells whether the hypervisor can run Hyperlight guests at all,
/// apart from any pool's settings or guest files. The guest is hyperlight-js's own, built into
/// the daemon.
pub fn probe_hypervisor() -> Result<(), HyperlightError> {
    SandboxBuilder::new().build()?.load_runtime()?;
    Ok(())
}

/// `sizes` with an input buffer that also carries the runner, once, when it is registered (at
/// most twice its size, JSON-encoded), whatever the request limits: the input buffer holds six
/// times the largest body.
fn with_room_for_the_runner(sizes: GuestSizes) -> GuestSizes {
    GuestSizes {
        max_body_bytes: sizes.max_body_bytes.max((2 * RUNNER.len()).div_ceil(6)),
        ..sizes
    }
}

/// Builds JavaScript sandboxes.
#[derive(Debug, Clone)]
pub struct JavascriptFactory {
    sizes: GuestSizes,
}

impl JavascriptFactory {
    /// A factory whose sandboxes are built with `sizes`, their input buffer large enough for
    /// the runner too.
    pub fn new(sizes: GuestSizes) -> Self {
        JavascriptFactory {
            sizes: with_room_for_the_runner(sizes),
        }
    }
}

impl GuestFactory for JavascriptFactory {
    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, HyperlightError> {
        // The runtime's own `print` and frozen global `console.log` write through the print
        // function; the runner's console writes through `hyperlightd.write`.
        let print_output = output.clone();
        let print = HostPrintFn::from(move |text: String| -> i32 {
            print_output.write(Stream::Stdout, &text);
            i32::try_from(text.len()).unwrap_or(i32::MAX)
        });
        let mut proto = SandboxBuilder::new()
            .with_guest_heap_size(self.sizes.heap_bytes)
            .with_guest_scratch_size(self.sizes.scratch())
            .with_guest_input_buffer_size(self.sizes.input_buffer())
            .with_guest_output_buffer_size(self.sizes.output_buffer())
            .with_host_print_fn(print)
            .build()?;
        proto.register(HOST_MODULE, "write", move |stream: u8, text: String| {
            output.write(Stream::from_number(stream), &text)
        })?;
        let clock = Arc::new(CallClock::default());
        let now = clock.clone();
        // hyperlight-js passes a host function its arguments as a JSON array, which `()` cannot
        // be read from: `now` takes a placeholder, which the runner passes as 0.
        proto.register(HOST_MODULE, "now", move |_: u8| now.elapsed_ms())?;
        let sleep = clock.clone();
        proto.register(HOST_MODULE, "sleep", move |ms: f64| sleep.sleep(ms))?;
        proto.register(HOST_MODULE, "random", random_hex)?;
        let mut runtime = proto.load_runtime()?;
        runtime.add_handler(HANDLER, Script::from_content(RUNNER))?;
        let mut sandbox = runtime.get_loaded_sandbox()?;
        let warm = sandbox.snapshot()?;
        Ok(Box::new(JavascriptGuest {
            sandbox,
            warm,
            clock,
            max_result_bytes: self.sizes.max_result_bytes,
        }))
    }
}

/// A loaded JavaScript sandbox and the snapshot it returns to after every program.
struct JavascriptGuest {
    sandbox: LoadedJSSandbox,
    warm: Arc<Snapshot>,
    clock: Arc<CallClock>,
    max_result_bytes: usize,
}

impl Guest for JavascriptGuest {
    fn run(&mut self, code: &str, deadline: Instant, session: bool) -> Result<String, GuestError> {
        self.clock.start(deadline);
        let event = serde_json::json!({
            "code": code,
            "max_result_bytes": self.max_result_bytes,
            // Every request starts from the same snapshot: Math.random is reseeded from this.
            "seed": seed(),
            "session": session,
        })
        .to_string();
        // No garbage collection after the call: the sandbox is restored to its snapshot anyway.
        Ok(self.sandbox.handle_event(HANDLER, event, Some(false))?)
    }

    fn interrupt_handle(&self) -> Arc<dyn Interrupt> {
        Arc::new(watchdog::Hyperlight(self.sandbox.interrupt_handle()))
    }

    fn save(&mut self) -> Result<SavedState, GuestError> {
        Ok(SavedState::new(self.sandbox.snapshot()?))
    }

    /// Every JavaScript sandbox registers the same host functions, which is all a restore of
    /// another sandbox's snapshot asks; the host keeps no other state for the guest.
    fn load(&mut self, state: &SavedState) -> Result<(), GuestError> {
        let snapshot: &Arc<Snapshot> = state.get()?;
        Ok(self.sandbox.restore(snapshot.clone())?)
    }

    fn reset(&mut self) -> Result<(), GuestError> {
        Ok(self.sandbox.restore(self.warm.clone())?)
    }

    fn is_poisoned(&self) -> bool {
        !self.sandbox.status().is_ready()
    }
}

/// The clock of the call in progress, for the runner's `performance.now()` and timers.
#[derive(Debug)]
struct CallClock {
    /// When the call started, and its deadline.
    span: Mutex<(Instant, Instant)>,
}

impl Default for CallClock {
    fn default() -> Self {
        let now = Instant::now();
        CallClock {
            span: Mutex::new((now, now)),
        }
    }
}

/// The longest one `sleep` host call lasts: the guest asks again for a longer wait, and comes
/// back into the micro-VM, where the watchdog can stop it, at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(100);

impl CallClock {
    fn start(&self, deadline: Instant) {
        *self.span.lock().unwrap_or_else(PoisonError::into_inner) = (Instant::now(), deadline);
    }

    fn span(&self) -> (Instant, Instant) {
        *self.span.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Milliseconds since the call started, monotonic, to the microsecond.
    fn elapsed_ms(&self) -> f64 {
        self.span().0.elapsed().as_secs_f64() * 1000.0
    }

    /// Waits `ms` milliseconds, at most [`MAX_SLEEP`] and never past the call's deadline; a
    /// wait that is not a positive number returns at once.
    fn sleep(&self, ms: f64) {
        let (_, deadline) = self.span();
        let asked = Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::ZERO);
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(asked.min(MAX_SLEEP).min(left));
    }
}

/// The most random bytes one `random` host call gives: `crypto.getRandomValues` asks again
/// for more (it gives at most 65536 bytes).
const MAX_RANDOM_BYTES: usize = 4096;

/// `bytes` bytes (at most [`MAX_RANDOM_BYTES`]) from the host's entropy, as hex; None if the
/// host has none to give, and the guest throws.
fn random_hex(bytes: usize) -> Option<String> {
    let mut buffer = vec![0u8; bytes.min(MAX_RANDOM_BYTES)];
    getrandom::fill(&mut buffer).ok()?;
    Some(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_is_bounded_by_the_deadline_and_by_its_cap() {
        let clock = CallClock::default();
        clock.start(Instant::now() + Duration::from_millis(30));
        let started = Instant::now();
        clock.sleep(10_000.0);
        let slept = started.elapsed();
        assert!(slept < MAX_SLEEP, "{slept:?}");
        clock.start(Instant::now() + Duration::from_secs(60));
        let started = Instant::now();
        clock.sleep(f64::NAN);
        clock.sleep(-5.0);
        clock.sleep(f64::INFINITY);
        assert!(started.elapsed() < MAX_SLEEP * 2, "{:?}", started.elapsed());
        assert!(clock.elapsed_ms() >= 0.0);
    }

    #[test]
    fn the_input_buffer_holds_the_runner_whatever_the_largest_body() {
        let small = GuestSizes {
            heap_bytes: 1 << 20,
            max_body_bytes: 1,
            max_result_bytes: 1,
        };
        assert!(with_room_for_the_runner(small).input_buffer() >= 2 * RUNNER.len());
        let large = GuestSizes {
            max_body_bytes: 64 << 20,
            ..small
        };
        assert_eq!(with_room_for_the_runner(large), large);
    }

    #[test]
    fn random_bytes_are_hex_and_capped() {
        assert_eq!(random_hex(16).unwrap().len(), 32);
        assert_eq!(random_hex(1 << 20).unwrap().len(), 2 * MAX_RANDOM_BYTES);
        assert_ne!(random_hex(16), random_hex(16));
    }
}
