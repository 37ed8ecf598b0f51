//! The JavaScript guest: hyperlight-js's QuickJS runtime, with hyperlightd's runner
//! (`guest/javascript/runner.js`) registered as a handler and snapshotted once loaded, so a
//! request pays neither for the runtime nor for the runner.

use std::sync::Arc;
use std::time::Instant;

use hyperlight_host::HyperlightError;
use hyperlight_js::{HostPrintFn, LoadedJSSandbox, SandboxBuilder, Script, Snapshot};

use super::guest::{Guest, GuestError, GuestFactory, GuestSizes, OutputCapture, Stream, seed};
use super::watchdog::{self, Interrupt};

/// The runner, compiled into the daemon so that the daemon and its guest protocol always match.
const RUNNER: &str = include_str!("../../../guest/javascript/runner.js");
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

/// Builds JavaScript sandboxes.
#[derive(Debug, Clone)]
pub struct JavascriptFactory {
    sizes: GuestSizes,
}

impl JavascriptFactory {
    /// A factory whose sandboxes are built with `sizes`.
    pub fn new(sizes: GuestSizes) -> Self {
        JavascriptFactory { sizes }
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
        let mut runtime = proto.load_runtime()?;
        runtime.add_handler(HANDLER, Script::from_content(RUNNER))?;
        let mut sandbox = runtime.get_loaded_sandbox()?;
        let warm = sandbox.snapshot()?;
        Ok(Box::new(JavascriptGuest {
            sandbox,
            warm,
            max_result_bytes: self.sizes.max_result_bytes,
        }))
    }
}

/// A loaded JavaScript sandbox and the snapshot it returns to after every program.
struct JavascriptGuest {
    sandbox: LoadedJSSandbox,
    warm: Arc<Snapshot>,
    max_result_bytes: usize,
}

impl Guest for JavascriptGuest {
    fn run(&mut self, code: &str, _deadline: Instant) -> Result<String, GuestError> {
        let event = serde_json::json!({
            "code": code,
            "max_result_bytes": self.max_result_bytes,
            // Every request starts from the same snapshot: Math.random is reseeded from this.
            "seed": seed(),
        })
        .to_string();
        // No garbage collection after the call: the sandbox is restored to its snapshot anyway.
        Ok(self.sandbox.handle_event(HANDLER, event, Some(false))?)
    }

    fn interrupt_handle(&self) -> Arc<dyn Interrupt> {
        Arc::new(watchdog::Hyperlight(self.sandbox.interrupt_handle()))
    }

    fn reset(&mut self) -> Result<(), GuestError> {
        Ok(self.sandbox.restore(self.warm.clone())?)
    }

    fn is_poisoned(&self) -> bool {
        !self.sandbox.status().is_ready()
    }
}
