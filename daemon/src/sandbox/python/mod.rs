//! The Python guest: CPython and its standard library as a WebAssembly component, built by
//! componentize-py from hyperlightd's runner (`guest/python/runner.py`), compiled ahead of time
//! by hyperlight-wasm-aot and run by hyperlight-wasm's runtime inside the micro-VM.
//!
//! The component imports WASI 0.2 (see [`wasi`] for what the host grants) and hyperlightd's
//! `host.write`, and exports `run(event) -> reply` with the same JSON protocol as every runner.
//! A sandbox is built once: runtime loaded, component loaded (the file is mapped copy-on-write,
//! not copied), one warm-up call so that the interpreter is instantiated, then snapshotted.

mod wasi;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlight_host::HyperlightError;
use hyperlight_host::hypervisor::InterruptHandle;
use hyperlight_wasm::{LoadedWasmSandbox, Snapshot};
use serde::Serialize;

use self::bindings::root::component::RootExports;
use self::wasi::{CallTime, WasiHost};
use super::guest::{Guest, GuestFactory, GuestSizes, OutputCapture, RunnerReply};

#[allow(missing_debug_implementations, clippy::all)]
mod bindings {
    extern crate alloc;
    hyperlight_component_macro::host_bindgen!({
        path: "../guest/python/wit/component/world.wasm",
    });
}

/// Builds Python sandboxes from the compiled component at `component`.
#[derive(Debug, Clone)]
pub struct PythonFactory {
    sizes: GuestSizes,
    component: PathBuf,
}

impl PythonFactory {
    /// A factory whose sandboxes are built with `sizes` and run `component` (a `.aot` file).
    pub fn new(sizes: GuestSizes, component: PathBuf) -> Self {
        PythonFactory { sizes, component }
    }
}

impl GuestFactory for PythonFactory {
    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, HyperlightError> {
        let call = CallTime::default();
        let mut proto = hyperlight_wasm::SandboxBuilder::new()
            .with_guest_heap_size(self.sizes.heap_bytes)
            .with_guest_scratch_size(self.sizes.scratch())
            .with_guest_input_buffer_size(self.sizes.input_buffer())
            .with_guest_output_buffer_size(self.sizes.output_buffer())
            .build()?;
        let resources = bindings::register_host_functions(
            &mut proto,
            WasiHost::new(output.clone(), call.clone()),
        )
        .map_err(|e| HyperlightError::Error(format!("registering the WASI imports: {e}")))?;
        let runtime = proto.load_runtime()?;
        let loaded = runtime.load_module(&self.component)?;
        let interrupt = loaded.interrupt_handle()?;
        let mut sandbox = bindings::RootSandbox {
            sb: loaded,
            rt: resources,
        };
        // Instantiate the interpreter and run the runner once, so that the snapshot holds
        // everything a request needs and no request pays for the first call.
        prime(&mut sandbox, &call, &output, self.sizes.max_result_bytes)
            .map_err(|e| HyperlightError::Error(format!("the warm-up call failed: {e}")))?;
        let warm = sandbox.sb.snapshot()?;
        Ok(Box::new(PythonGuest {
            sandbox,
            warm,
            interrupt,
            call,
            output,
            max_result_bytes: self.sizes.max_result_bytes,
        }))
    }
}

/// How long the runner's priming call may take before the sandbox is given up. It runs a few
/// milliseconds of fixed code; the limit only stops a sandbox that hangs.
const PRIME_LIMIT: Duration = Duration::from_secs(30);

/// The runner's event (see guest/python/runner.py).
#[derive(Serialize)]
struct Event<'a> {
    code: &'a str,
    max_result_bytes: usize,
    /// 128 bits from the host's getrandom, in hex: the seed of the program's `random`.
    seed: String,
    /// Run the runner's priming program instead of `code`.
    prime: bool,
}

impl<'a> Event<'a> {
    fn program(code: &'a str, max_result_bytes: usize) -> Event<'a> {
        Event {
            code,
            max_result_bytes,
            seed: seed(),
            prime: false,
        }
    }

    fn prime(max_result_bytes: usize) -> Event<'static> {
        Event {
            code: "",
            max_result_bytes,
            seed: seed(),
            prime: true,
        }
    }
}

/// A fresh seed for the program's `random`. Should the host's entropy source fail (it does not
/// once the system is up), the seed falls back to the clock: `random` is not for secrets, and
/// `os.urandom` reports its own failure to the program.
fn seed() -> String {
    let mut bytes = [0u8; 16];
    let value = match getrandom::fill(&mut bytes) {
        Ok(()) => u128::from_le_bytes(bytes),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    };
    format!("{value:032x}")
}

/// Runs the runner's priming program (see `PRIME` in runner.py), with its output refused.
fn prime(
    sandbox: &mut bindings::RootSandbox<WasiHost, LoadedWasmSandbox>,
    call: &CallTime,
    output: &OutputCapture,
    max_result_bytes: usize,
) -> Result<(), HyperlightError> {
    call.begin(Instant::now() + PRIME_LIMIT);
    output.begin(0);
    let event = serde_json::to_string(&Event::prime(max_result_bytes))
        .map_err(|e| HyperlightError::Error(format!("encoding the runner's event: {e}")))?;
    let reply = sandbox.run(event).map_err(into_hyperlight_error)?;
    match RunnerReply::parse(&reply) {
        Ok(RunnerReply::Completed { .. }) => Ok(()),
        _ => Err(HyperlightError::Error(format!(
            "the runner's priming program failed: {reply}"
        ))),
    }
}

fn into_hyperlight_error(e: anyhow::Error) -> HyperlightError {
    match e.downcast::<HyperlightError>() {
        Ok(e) => e,
        Err(e) => HyperlightError::Error(format!("{e:#}")),
    }
}

/// A warm Python sandbox and the snapshot it returns to after every program.
struct PythonGuest {
    sandbox: bindings::RootSandbox<WasiHost, LoadedWasmSandbox>,
    warm: Arc<Snapshot>,
    interrupt: Arc<dyn InterruptHandle>,
    call: CallTime,
    output: Arc<OutputCapture>,
    max_result_bytes: usize,
}

impl Guest for PythonGuest {
    fn run(&mut self, code: &str, deadline: Instant) -> Result<String, HyperlightError> {
        self.call.begin(deadline);
        let event = serde_json::to_string(&Event::program(code, self.max_result_bytes))
            .map_err(|e| HyperlightError::Error(format!("encoding the runner's event: {e}")))?;
        self.sandbox.run(event).map_err(into_hyperlight_error)
    }

    fn interrupt_handle(&self) -> Arc<dyn InterruptHandle> {
        self.interrupt.clone()
    }

    fn reset(&mut self) -> Result<(), HyperlightError> {
        self.sandbox.sb.restore(self.warm.clone())
    }

    /// Runs the runner's priming program: the copy-on-write faults that the first writes after
    /// a restore take are paid here, off the next request's path. The program is fixed text and
    /// its output is refused, so the state it leaves holds nothing of any request.
    fn prime(&mut self) -> Result<bool, HyperlightError> {
        prime(
            &mut self.sandbox,
            &self.call,
            &self.output,
            self.max_result_bytes,
        )?;
        Ok(true)
    }

    fn is_poisoned(&self) -> bool {
        self.sandbox
            .sb
            .status()
            .map_or(true, |status| !status.is_ready())
    }
}
