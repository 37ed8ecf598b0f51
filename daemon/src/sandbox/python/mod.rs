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
use std::time::Instant;

use hyperlight_host::HyperlightError;
use hyperlight_host::hypervisor::InterruptHandle;
use hyperlight_wasm::{LoadedWasmSandbox, Snapshot};

use self::bindings::root::component::RootExports;
use self::wasi::{Deadline, WasiHost};
use super::guest::{Guest, GuestFactory, GuestSizes, OutputCapture};

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
        let deadline = Deadline::default();
        let mut proto = hyperlight_wasm::SandboxBuilder::new()
            .with_guest_heap_size(self.sizes.heap_bytes)
            .with_guest_scratch_size(self.sizes.scratch())
            .with_guest_input_buffer_size(self.sizes.input_buffer())
            .with_guest_output_buffer_size(self.sizes.output_buffer())
            .build()?;
        let resources = bindings::register_host_functions(
            &mut proto,
            WasiHost::new(output.clone(), deadline.clone()),
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
        deadline.set(Instant::now() + std::time::Duration::from_secs(60));
        output.begin(0);
        let warm_up = serde_json::json!({ "code": "None", "max_result_bytes": 64 }).to_string();
        sandbox
            .run(warm_up)
            .map_err(|e| HyperlightError::Error(format!("the warm-up call failed: {e}")))?;
        let warm = sandbox.sb.snapshot()?;
        Ok(Box::new(PythonGuest {
            sandbox,
            warm,
            interrupt,
            deadline,
            max_result_bytes: self.sizes.max_result_bytes,
        }))
    }
}

/// A warm Python sandbox and the snapshot it returns to after every program.
struct PythonGuest {
    sandbox: bindings::RootSandbox<WasiHost, LoadedWasmSandbox>,
    warm: Arc<Snapshot>,
    interrupt: Arc<dyn InterruptHandle>,
    deadline: Deadline,
    max_result_bytes: usize,
}

impl Guest for PythonGuest {
    fn run(&mut self, code: &str, deadline: Instant) -> Result<String, HyperlightError> {
        self.deadline.set(deadline);
        let event = serde_json::json!({
            "code": code,
            "max_result_bytes": self.max_result_bytes,
        })
        .to_string();
        self.sandbox
            .run(event)
            .map_err(|e| match e.downcast::<HyperlightError>() {
                Ok(e) => e,
                Err(e) => HyperlightError::Error(format!("{e:#}")),
            })
    }

    fn interrupt_handle(&self) -> Arc<dyn InterruptHandle> {
        self.interrupt.clone()
    }

    fn reset(&mut self) -> Result<(), HyperlightError> {
        self.sandbox.sb.restore(self.warm.clone())
    }

    fn is_poisoned(&self) -> bool {
        self.sandbox
            .sb
            .status()
            .map_or(true, |status| !status.is_ready())
    }
}
