//! The JavaScript guest: hyperlight-js's QuickJS runtime, with hyperlightd's runner
//! (`guest/javascript/runner.js`) registered as a handler and snapshotted once loaded, so a
//! request pays neither for the runtime nor for the runner.

use std::sync::Arc;

use hyperlight_host::HyperlightError;
use hyperlight_host::hypervisor::InterruptHandle;
use hyperlight_js::{HostPrintFn, LoadedJSSandbox, SandboxBuilder, Script, Snapshot};

use super::guest::{Guest, GuestFactory, OutputCapture, Stream};

/// The runner, compiled into the daemon so that the daemon and its guest protocol always match.
const RUNNER: &str = include_str!("../../../guest/javascript/runner.js");
/// Name under which the runner is registered.
const HANDLER: &str = "run";
/// Host module the runner imports for its output.
const HOST_MODULE: &str = "hyperlightd";

/// Builds JavaScript sandboxes.
#[derive(Debug, Clone)]
pub struct JavascriptFactory {
    heap_bytes: u64,
}

impl JavascriptFactory {
    /// A factory whose sandboxes get a guest heap of `heap_bytes`.
    pub fn new(heap_bytes: u64) -> Self {
        JavascriptFactory { heap_bytes }
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
            .with_guest_heap_size(self.heap_bytes)
            .with_host_print_fn(print)
            .build()?;
        proto.register(HOST_MODULE, "write", move |stream: u8, text: String| {
            output.write(Stream::from_number(stream), &text);
        })?;
        let mut runtime = proto.load_runtime()?;
        runtime.add_handler(HANDLER, Script::from_content(RUNNER))?;
        let mut sandbox = runtime.get_loaded_sandbox()?;
        let warm = sandbox.snapshot()?;
        Ok(Box::new(JavascriptGuest { sandbox, warm }))
    }
}

/// A loaded JavaScript sandbox and the snapshot it returns to after every program.
struct JavascriptGuest {
    sandbox: LoadedJSSandbox,
    warm: Arc<Snapshot>,
}

impl Guest for JavascriptGuest {
    fn run(&mut self, code: &str) -> Result<String, HyperlightError> {
        let event = serde_json::json!({ "code": code }).to_string();
        // No garbage collection after the call: the sandbox is restored to its snapshot anyway.
        self.sandbox.handle_event(HANDLER, event, Some(false))
    }

    fn interrupt_handle(&self) -> Arc<dyn InterruptHandle> {
        self.sandbox.interrupt_handle()
    }

    fn reset(&mut self) -> Result<(), HyperlightError> {
        self.sandbox.restore(self.warm.clone())
    }
}
