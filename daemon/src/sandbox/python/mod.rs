//! The Python guest: CPython and its standard library as a WebAssembly component, built by
//! componentize-py from hyperlightd's runner (`guest/python/runner.py`), compiled ahead of time
//! by hyperlight-wasm-aot and run by hyperlight-wasm's runtime inside the micro-VM.
//!
//! The component imports WASI 0.2 (see [`wasi`] for what the host grants) and hyperlightd's
//! `host.write`, and exports `run(event) -> reply` with the same JSON protocol as every runner.
//! The template is built once per factory: runtime loaded, component loaded, one warm-up call so
//! that the interpreter is instantiated, then snapshotted. Every sandbox is built from it
//! (hyperlight-host's `SandboxBuilder::from_snapshot`, with the same host functions, and a copy
//! of the template's host-side resource tables).
//!
//! # Design: the Python guest
//! CPython cannot be a Hyperlight guest binary directly, and the routes that make it one download
//! their pieces from GitHub at build time. So Python runs as a WebAssembly component:
//! componentize-py (PyPI) builds one from CPython 3.14, its standard library and our runner
//! (`guest/python/runner.py`), already initialised; hyperlight-wasm-aot compiles it ahead of time;
//! hyperlight-wasm's guest runtime (Wasmtime inside the micro-VM, built for the component's WIT
//! world) runs it. `cargo xtask python-guest` builds `target/python-guest/python.aot`; the daemon
//! maps it into each sandbox copy-on-write (`--python-guest`).
//!
//! componentize-py keeps in the component only what the runner imported at build time; every other
//! module is looked up at run time in the directories the interpreter was built with, `/python` (the
//! standard library) and `/0` (the runner's directory, where pip installs the guest's pure-Python
//! packages). The build exports both, each module compiled by the guest's own interpreter, into
//! `python-lib.tar`; the daemon loads it once at startup into a `Library` (a tree over one byte
//! buffer, `sandbox/python/library.rs`) that every Python sandbox shares through an `Arc`, and
//! `wasi/files.rs` serves it as the guest's two preopened directories. Every call that would write,
//! create, rename or remove there answers `read-only`, so no request can change what another reads;
//! a third preopened directory, `work`, is the request's working directory (see Files above).
//! Modules imported at build time cost nothing per request; the others cost a few host calls each
//! (the runner keeps its import finders' directory listings from the build, see `runner.py`).
//!
//! The component imports WASI 0.2. The daemon answers those imports itself
//! (`sandbox/python/wasi/`): output into the request's capture, clocks, entropy, an empty
//! environment, the library (read-only), the working directory, and refusals for everything else
//! (no sockets, no writes outside the working directory). The
//! bindings for both sides are generated from one wasm-encoded world,
//! `guest/python/wit/component/world.wasm`: by `host_bindgen!` in the daemon, and by hyperlight-wasm's
//! build script through `WIT_WORLD` (`.cargo/config.toml`). The template is built (runtime,
//! component, one warm-up call under the watchdog so the interpreter is instantiated) and
//! snapshotted; sandboxes are built from it and from there on pooled, limited and restored like
//! JavaScript ones, and primed after each restore only with `--prime when-idle` (above). `Guest::run` carries the deadline so that
//! a sleeping program (a host call, where the interrupt handle cannot reach it) wakes at its time
//! limit; a wait that ends there stops the call itself (`CallState::out_of_time`), so the program
//! ends `timeout` rather than running on between two of the watchdog's interrupts.
//!
//! The generated bindings have no resource drop: every pollable or stream the guest is given stays
//! in a host-side table until the restore truncates the tables (and shrinks them back). So the
//! host counts what it gives during a call (`CallState`), and past `--python-max-host-handles` it
//! stops the call with the interrupt handle; the program gets `resource_limit`. `os._exit()` is
//! answered the same way (the component would trap after an exit), and reported like
//! `sys.exit()`.
//!
//! Every host call is a VM exit, so the runner keeps them few: output is buffered in the guest
//! (one call per line for a request's first 100 lines, then one per 8 KiB block, and a flush before
//! `time.sleep`; the JavaScript runner does the same, flushing before its event loop waits for a
//! timer), and `random`'s seed comes in the event instead of from `os.urandom` (which read 2.5 KB
//! in several host calls). The
//! generated bindings register `monotonic-clock.now` and `wall-clock.now` under one name
//! (hyperlight-component-util 0.17), so the runner derives `time.monotonic`/`perf_counter` from the
//! wall clock, which the host keeps from stepping back during a call (`CallState` in
//! `wasi/call.rs`).

mod event;
mod library;
mod wasi;

pub(super) use self::event::Event;

pub use self::library::{Library, LibraryError};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlight_common::resource::ResourceEntry;
use hyperlight_host::func::Registerable;
use hyperlight_host::sandbox::Callable;
use hyperlight_host::{HostFunctions, HyperlightError, MultiUseSandbox};
use hyperlight_wasm::Snapshot;

use self::bindings::root::component::RootExports;
use self::wasi::{CallState, Portable, ToPortable, WasiHost};
use super::guest;
use super::guest::{
    BuildError, Guest, GuestError, GuestFactory, GuestSizes, OutputCapture, Prepared, Program,
    RunnerReply, SavedState, Template, from_template, saved_state,
};
use super::stored::{self, Codec, Key, SnapshotStore, StateFiles, Stored};
use super::watchdog::{self, Interrupt, Watchdog};
use crate::job::files::FileError;
use crate::job::workspace::Workspace;
use crate::job::{Deadline, Files, Footprint, MemoryFile, Runtime, StateCodec};

#[allow(missing_debug_implementations, clippy::all)]
mod bindings {
    extern crate alloc;
    hyperlight_component_macro::host_bindgen!({
        path: "../guest/python/wit/component/world.wasm",
    });

    /// The host-side resource tables of the generated bindings, one field per type variable of
    /// the world: a `VecDeque` for each resource type the host owns, `()` for the rest. The
    /// bindings only ever append to them (they have no resource drop), so a restore, which
    /// takes the guest back to the handles it held at the snapshot, truncates them back to
    /// their lengths then. The list names every field of `RootResources` for this world
    /// (`resource0` to `resource72`; a name too many fails to compile, one too few would go
    /// unnoticed, hence the test `the_resource_table_list_matches_the_world`).
    macro_rules! resource_tables {
        ($($field:ident),* $(,)?) => {
            impl RootResources<super::wasi::WasiHost> {
                pub(crate) fn lengths(&self) -> Vec<usize> {
                    let RootResources { $($field,)* .. } = self;
                    vec![$(super::ResourceTable::len($field)),*]
                }

                /// A copy of every table, to go with a saved state of the guest: its handles
                /// name entries of these tables.
                pub(crate) fn copy(&self) -> Self {
                    let mut copy = Self::new();
                    $(copy.$field = super::ResourceTable::copy(&self.$field);)*
                    copy
                }

                /// Empty tables.
                #[cfg(test)]
                pub(crate) fn empty() -> Self {
                    Self::new()
                }

                /// Every table's entries as plain data (None for an empty entry), to save
                /// beside a template's snapshot.
                pub(crate) fn portable(&self) -> Vec<Vec<Option<super::wasi::Portable>>> {
                    let RootResources { $($field,)* .. } = self;
                    vec![$(super::ResourceTable::portable($field)),*]
                }

                /// Tables holding `saved` (from [`portable`](Self::portable)); None when
                /// `saved` does not fit these tables.
                pub(crate) fn from_portable(
                    saved: &[Vec<Option<super::wasi::Portable>>],
                ) -> Option<Self> {
                    let mut tables = Self::new();
                    let mut saved = saved.iter();
                    $(tables.$field = super::ResourceTable::from_portable(saved.next()?)?;)*
                    saved.next().is_none().then_some(tables)
                }

                pub(crate) fn truncate(&mut self, lengths: &[usize]) {
                    // Tables keep their capacity when truncated: give back what a call that
                    // took many resources left allocated.
                    let RootResources { $($field,)* .. } = self;
                    let mut lengths = lengths.iter().copied();
                    $(super::ResourceTable::truncate($field, lengths.next().unwrap_or(0));)*
                }
            }
        };
    }
    resource_tables!(
        resource0, resource1, resource2, resource3, resource4, resource5, resource6, resource7,
        resource8, resource9, resource10, resource11, resource12, resource13, resource14,
        resource15, resource16, resource17, resource18, resource19, resource20, resource21,
        resource22, resource23, resource24, resource25, resource26, resource27, resource28,
        resource29, resource30, resource31, resource32, resource33, resource34, resource35,
        resource36, resource37, resource38, resource39, resource40, resource41, resource42,
        resource43, resource44, resource45, resource46, resource47, resource48, resource49,
        resource50, resource51, resource52, resource53, resource54, resource55, resource56,
        resource57, resource58, resource59, resource60, resource61, resource62, resource63,
        resource64, resource65, resource66, resource67, resource68, resource69, resource70,
        resource71, resource72
    );
}

/// A field of the bindings' resource tables (see `resource_tables!`).
trait ResourceTable: Sized {
    fn len(&self) -> usize;
    fn truncate(&mut self, len: usize);
    fn copy(&self) -> Self;
    fn portable(&self) -> Vec<Option<Portable>>;
    fn from_portable(saved: &[Option<Portable>]) -> Option<Self>;
}

/// A resource type the host does not own: no table.
impl ResourceTable for () {
    fn len(&self) -> usize {
        0
    }
    fn truncate(&mut self, _: usize) {}
    fn copy(&self) -> Self {}
    fn portable(&self) -> Vec<Option<Portable>> {
        Vec::new()
    }
    fn from_portable(saved: &[Option<Portable>]) -> Option<Self> {
        saved.is_empty().then_some(())
    }
}

impl<T: Clone + ToPortable> ResourceTable for std::collections::VecDeque<ResourceEntry<T>> {
    fn len(&self) -> usize {
        std::collections::VecDeque::len(self)
    }
    /// A borrowed entry only lives during a call; between calls there is none.
    fn portable(&self) -> Vec<Option<Portable>> {
        self.iter()
            .map(|entry| match entry {
                ResourceEntry::Owned(value) => Some(value.to_portable()),
                ResourceEntry::Empty | ResourceEntry::Borrowed(..) => None,
            })
            .collect()
    }
    fn from_portable(saved: &[Option<Portable>]) -> Option<Self> {
        saved
            .iter()
            .map(|entry| match entry {
                Some(portable) => T::from_portable(portable).map(ResourceEntry::Owned),
                None => Some(ResourceEntry::Empty),
            })
            .collect()
    }
    /// Owned entries are copied; a borrowed one only lives during a call, so between calls
    /// there is none, and it would be empty anyway.
    fn copy(&self) -> Self {
        self.iter()
            .map(|entry| match entry {
                ResourceEntry::Owned(value) => ResourceEntry::Owned(value.clone()),
                ResourceEntry::Empty | ResourceEntry::Borrowed(..) => ResourceEntry::Empty,
            })
            .collect()
    }
    fn truncate(&mut self, len: usize) {
        std::collections::VecDeque::truncate(self, len);
        if self.capacity() > 4 * len.max(KEPT_TABLE_CAPACITY) {
            self.shrink_to(len.max(KEPT_TABLE_CAPACITY));
        }
    }
}

/// Entries a resource table keeps room for after a restore; a table that grew far past this
/// during a call gives the rest back.
const KEPT_TABLE_CAPACITY: usize = 1024;

/// Builds Python sandboxes from the compiled component at `component`.
#[derive(Debug)]
pub struct PythonFactory {
    sizes: GuestSizes,
    component: PathBuf,
    library: Option<Arc<Library>>,
    library_file: Option<PathBuf>,
    max_host_handles: u64,
    watchdog: Watchdog,
    store: Option<Arc<SnapshotStore>>,
    template: Template<Arc<PythonState>>,
}

impl PythonFactory {
    /// A factory whose sandboxes are built with `sizes` and run `component` (a `.aot` file),
    /// reading `library`, whose programs may each take `max_host_handles` host handles. Its
    /// warm-up call runs under `watchdog`.
    pub fn new(
        sizes: GuestSizes,
        component: PathBuf,
        library: Option<Arc<Library>>,
        max_host_handles: u64,
        watchdog: Watchdog,
    ) -> Self {
        PythonFactory {
            sizes,
            component,
            library,
            library_file: None,
            max_host_handles,
            watchdog,
            store: None,
            template: Template::default(),
        }
    }

    /// The factory saving its template in `store`, and loading it from there when it fits;
    /// `library_file` is the file `library` was read from (the template depends on it).
    pub fn with_store(self, store: Arc<SnapshotStore>, library_file: Option<PathBuf>) -> Self {
        PythonFactory {
            store: Some(store),
            library_file,
            ..self
        }
    }
}

impl PythonFactory {
    /// Builds the template from scratch: runtime loaded, component loaded (the file is mapped
    /// copy-on-write, not copied), the interpreter instantiated and primed, snapshotted with a
    /// copy of the host's resource tables, whose entries the guest's handles name.
    fn build_template(&self) -> Result<Arc<PythonState>, HyperlightError> {
        let output = Arc::new(OutputCapture::new());
        let call = CallState::new(self.max_host_handles);
        let mut proto = hyperlight_wasm::SandboxBuilder::new()
            .with_guest_heap_size(self.sizes.heap_bytes)
            .with_guest_scratch_size(self.sizes.scratch())
            .with_guest_input_buffer_size(self.sizes.input_buffer())
            .with_guest_output_buffer_size(self.sizes.output_buffer())
            .build()?;
        let work = Arc::new(Workspace::default());
        let resources = self.register_imports(&mut proto, &output, &call, &work)?;
        let runtime = proto.load_runtime()?;
        let loaded = runtime.load_module(&self.component).map_err(|e| {
            HyperlightError::Error(format!(
                "loading the Python guest {}: {e}. Is it a guest built for this hyperlightd \
                 (`cargo xtask python-guest`)?",
                self.component.display()
            ))
        })?;
        let interrupt = loaded.interrupt_handle()?;
        call.set_interrupt(interrupt.clone());
        let mut sandbox = bindings::RootSandbox {
            sb: loaded,
            rt: resources,
        };
        // Instantiate the interpreter and run the runner once, so that the snapshot holds
        // everything a request needs and no request pays for the first call. It is the
        // guest's first run of Python code: a guest that hangs there is stopped.
        let timer = self
            .watchdog
            .arm(Arc::new(watchdog::Hyperlight(interrupt)), PRIME_LIMIT);
        let warmed = prime(&mut sandbox, &call, &output, self.sizes.max_result_bytes);
        drop(timer);
        warmed.map_err(|e| HyperlightError::Error(format!("the warm-up call failed: {e}")))?;
        let snapshot = sandbox.sb.snapshot()?;
        let tables = std::sync::Mutex::new(lock(&sandbox.rt).copy());
        Ok(Arc::new(PythonState { snapshot, tables }))
    }

    /// Registers the component's imports (WASI and hyperlightd's own) on `on`, answered by a
    /// host writing to `output` for the call `call`; returns the host's resource tables.
    fn register_imports(
        &self,
        on: &mut impl Registerable,
        output: &Arc<OutputCapture>,
        call: &CallState,
        work: &Arc<Workspace>,
    ) -> Result<Arc<std::sync::Mutex<Tables>>, HyperlightError> {
        let host = WasiHost::new(
            output.clone(),
            call.clone(),
            self.library.clone(),
            work.clone(),
        );
        bindings::register_host_functions(on, host)
            .map_err(|e| HyperlightError::Error(format!("registering the WASI imports: {e}")))
    }

    fn template(&self) -> Result<(Arc<PythonState>, Option<Prepared>), HyperlightError> {
        self.template.get_or_make(|| {
            stored::load_or_build(
                self.store.as_ref(),
                || self.key(),
                || self.build_template(),
                self.codec(),
            )
        })
    }

    /// What the template depends on: the sizes and limits, the component, the library.
    fn key(&self) -> std::io::Result<Key> {
        let sizes = format!(
            "{:?}, max_host_handles {}",
            self.sizes, self.max_host_handles
        );
        let mut files = vec![self.component.as_path()];
        files.extend(self.library_file.as_deref());
        Key::new("python", sizes, &files)
    }

    /// The snapshot, and the host's resource tables as plain data (JSON); read back, every
    /// entry must name a node of this factory's library.
    fn codec(&self) -> Codec<Arc<PythonState>, Snapshot> {
        let nodes = self.library.as_ref().map_or(0, |library| library.nodes());
        Codec {
            encode: |state| {
                Ok(Stored {
                    snapshot: state.snapshot.clone(),
                    extra: encode_tables(state)?,
                })
            },
            decode: Box::new(move |stored: Stored<Snapshot>| {
                decode_state(stored, nodes).map(Arc::new)
            }),
        }
    }
}

/// The host's resource tables as plain data (JSON), for a template or a session's state on
/// disk.
fn encode_tables(state: &PythonState) -> Result<Vec<u8>, String> {
    let tables = lock(&state.tables).portable();
    serde_json::to_vec(&tables).map_err(|e| e.to_string())
}

/// A state as [`encode_tables`] and the snapshot stored it; every entry of its tables must name
/// a node of a library of `nodes`.
fn decode_state(stored: Stored<Snapshot>, nodes: usize) -> Result<PythonState, String> {
    let saved: Vec<Vec<Option<Portable>>> = serde_json::from_slice(&stored.extra)
        .map_err(|e| format!("reading the resource tables: {e}"))?;
    if let Some(node) = saved.iter().flatten().flatten().find_map(Portable::node)
        && node >= nodes
    {
        return Err(format!(
            "an entry names node {node} of a library of {nodes}"
        ));
    }
    let tables =
        Tables::from_portable(&saved).ok_or("the resource tables do not fit this guest's")?;
    Ok(PythonState {
        snapshot: stored.snapshot,
        tables: std::sync::Mutex::new(tables),
    })
}

/// The CPython componentize-py compiles into the guest (its minor version): kept in step with
/// xtask's `GUEST_PYTHON_VERSION`, which resolves packages for it.
const WASI_PYTHON_VERSION: &str = "3.14";

impl GuestFactory for PythonFactory {
    fn prepare(&self) -> Result<Option<Prepared>, BuildError> {
        Ok(self.template()?.1)
    }

    /// CPython compiled to WebAssembly, and the packages installed beside the runner.
    fn runtime(&self) -> Runtime {
        Runtime {
            name: "webassembly",
            version: Some(WASI_PYTHON_VERSION.to_owned()),
            packages: self
                .library
                .as_ref()
                .map(|library| library.packages())
                .unwrap_or_default(),
        }
    }

    /// A state is written as the template is: the snapshot, and the resource tables.
    fn template_memory(&self) -> Vec<MemoryFile> {
        self.template()
            .map(|(template, _)| guest::snapshot_footprint(&template.snapshot).memory)
            .unwrap_or_default()
    }

    fn state_codec(&self) -> Result<Arc<dyn StateCodec>, String> {
        let nodes = self.library.as_ref().map_or(0, |library| library.nodes());
        StateFiles::codec(
            self.key(),
            |state| {
                let state: &PythonState = saved_state(state).map_err(|e| e.to_string())?;
                Ok(Stored {
                    snapshot: state.snapshot.clone(),
                    extra: encode_tables(state)?,
                })
            },
            move |stored: Stored<Snapshot>| decode_state(stored, nodes).map(SavedState::new),
        )
    }

    /// A new micro-VM over the template's memory, with host functions of its own and a copy of
    /// the template's resource tables.
    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, BuildError> {
        let (template, _) = self.template()?;
        let call = CallState::new(self.max_host_handles);
        let mut functions = HostFunctions::default();
        let work = Arc::new(Workspace::default());
        let resources = self.register_imports(&mut functions, &output, &call, &work)?;
        let warm_tables = {
            let tables = lock(&template.tables);
            *lock(&resources) = tables.copy();
            tables.lengths()
        };
        let sandbox = from_template(template.snapshot.clone(), &self.sizes, functions)?;
        let interrupt = sandbox.interrupt_handle();
        call.set_interrupt(interrupt.clone());
        Ok(Box::new(PythonGuest {
            sandbox: bindings::RootSandbox {
                sb: sandbox,
                rt: resources,
            },
            warm: template.snapshot.clone(),
            warm_tables,
            interrupt: Arc::new(watchdog::Hyperlight(interrupt)),
            call,
            output,
            work,
            max_result_bytes: self.sizes.max_result_bytes,
            response_capacity: self.sizes.response_capacity(),
        }))
    }
}

/// How long the runner's priming call may take before the sandbox is given up. It runs a few
/// milliseconds of fixed code; the limit only stops a sandbox that hangs (and ends its sleeps).
const PRIME_LIMIT: Duration = Duration::from_secs(30);

/// Runs the runner's priming program (see `PRIME` in runner.py), with its output refused.
fn prime<S: Callable>(
    sandbox: &mut bindings::RootSandbox<WasiHost, S>,
    call: &CallState,
    output: &OutputCapture,
    max_result_bytes: usize,
) -> Result<(), GuestError> {
    call.begin(Deadline::new(Instant::now() + PRIME_LIMIT));
    output.begin(0, None);
    let reply = call_runner(sandbox, &Event::prime(max_result_bytes))?;
    RunnerReply::primed(&reply)
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Calls the runner's `run` export with `event` and returns its reply.
fn call_runner<S: Callable>(
    sandbox: &mut bindings::RootSandbox<WasiHost, S>,
    event: &Event<'_>,
) -> Result<String, HyperlightError> {
    let event = serde_json::to_string(event)
        .map_err(|e| HyperlightError::Error(format!("encoding the runner's event: {e}")))?;
    sandbox
        .run(event)
        .map_err(|e| match e.downcast::<HyperlightError>() {
            Ok(e) => e,
            Err(e) => HyperlightError::Error(format!("{e:#}")),
        })
}

/// The reply for a program that called `os._exit()`, as the runner would give for `sys.exit()`
/// (WASI passes only whether the status meant success). The call was stopped there, so the
/// sandbox is restored before its next use.
fn exit_reply(success: bool) -> String {
    if success {
        r#"{"ok": true, "result": null}"#.to_owned()
    } else {
        serde_json::json!({
            "ok": false,
            "error": {
                "kind": "exception",
                "message": "SystemExit: the program called os._exit() with a failure status",
            },
        })
        .to_string()
    }
}

/// The host-side resource tables of a Python sandbox.
type Tables = bindings::RootResources<WasiHost>;

/// A Python guest's state saved for a session.
struct PythonState {
    snapshot: Arc<Snapshot>,
    /// Behind a lock only to be shareable: the tables are copied out, never changed.
    tables: std::sync::Mutex<Tables>,
}

/// A warm Python sandbox and the snapshot it returns to after every program.
struct PythonGuest {
    sandbox: bindings::RootSandbox<WasiHost, MultiUseSandbox>,
    warm: Arc<Snapshot>,
    /// The lengths of the host-side resource tables when `warm` was taken.
    warm_tables: Vec<usize>,
    interrupt: Arc<dyn Interrupt>,
    call: CallState,
    output: Arc<OutputCapture>,
    /// The working directory its host functions serve.
    work: Arc<Workspace>,
    max_result_bytes: usize,
    /// The most body bytes of one HTTP response the sandbox takes (see GuestSizes).
    response_capacity: usize,
}

impl Guest for PythonGuest {
    fn run(
        &mut self,
        program: &Program<'_>,
        deadline: &Arc<Deadline>,
    ) -> Result<String, GuestError> {
        self.call.begin(deadline.clone());
        self.work.begin(program.files, program.file_limits);
        self.call
            .run()
            .begin(program, deadline, self.response_capacity);
        let reply = call_runner(
            &mut self.sandbox,
            &Event::program(program, self.max_result_bytes),
        );
        self.call.run().end();
        if let Some(success) = self.call.exited() {
            return Ok(exit_reply(success));
        }
        if self.call.over_limit() {
            return Err(GuestError::ResourceLimit(format!(
                "the program was stopped after taking {} host handles in one run (each \
                 time.sleep(), poll or stream takes one, and the host keeps them until the run \
                 ends): sleep or poll less often",
                self.call.max_resources()
            )));
        }
        Ok(reply?)
    }

    fn take_files(&mut self) -> (Files, Option<FileError>) {
        self.work.take()
    }

    fn interrupt_handle(&self) -> Arc<dyn Interrupt> {
        self.interrupt.clone()
    }

    /// The guest's memory, and a copy of the host's resource tables, whose entries the guest's
    /// handles name (a session may keep a file of the library open from one exec to the next).
    fn save(&mut self) -> Result<(SavedState, Footprint), GuestError> {
        let snapshot = self.sandbox.sb.snapshot()?;
        let footprint = guest::snapshot_footprint(&snapshot);
        let tables = std::sync::Mutex::new(lock(&self.sandbox.rt).copy());
        Ok((SavedState::new(PythonState { snapshot, tables }), footprint))
    }

    /// Every Python sandbox registers the same host functions, which is all a restore of
    /// another sandbox's snapshot asks; the host's resource tables come with the state.
    fn load(&mut self, state: &SavedState) -> Result<(), GuestError> {
        let state: &PythonState = saved_state(state)?;
        self.sandbox.sb.restore(state.snapshot.clone())?;
        *lock(&self.sandbox.rt) = lock(&state.tables).copy();
        Ok(())
    }

    fn reset(&mut self) -> Result<(), GuestError> {
        self.sandbox.sb.restore(self.warm.clone())?;
        // The guest holds the snapshot's handles again: forget what the last call added.
        lock(&self.sandbox.rt).truncate(&self.warm_tables);
        Ok(())
    }

    /// Runs the runner's priming program: the copy-on-write faults that the first writes after
    /// a restore take are paid here, off the next request's path. The program is fixed text and
    /// its output is refused, so the state it leaves holds nothing of any request.
    fn prime(&mut self) -> Result<bool, GuestError> {
        prime(
            &mut self.sandbox,
            &self.call,
            &self.output,
            self.max_result_bytes,
        )?;
        Ok(true)
    }

    fn is_poisoned(&self) -> bool {
        !self.sandbox.sb.status().is_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `resource_tables!` names `resource0` to `resource72`, the fields of the resource tables
    /// generated for this world file. Regenerating the world can change them: list them again
    /// (a `let () = &tables.resourceN;` per candidate shows which exist and which are tables),
    /// then update this fingerprint.
    #[test]
    fn the_resource_table_list_matches_the_world() {
        let world = include_bytes!("../../../../guest/python/wit/component/world.wasm");
        // FNV-1a, 64 bits.
        let fingerprint = world.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!(
            (world.len(), fingerprint),
            (9817, 15_175_009_409_586_209_978),
            "guest/python/wit/component/world.wasm changed: check resource_tables!"
        );
    }

    /// Test entries: a number, saved as a descriptor of that node.
    impl ToPortable for u32 {
        fn to_portable(&self) -> Portable {
            Portable::Descriptor {
                node: *self as usize,
            }
        }
        fn from_portable(portable: &Portable) -> Option<Self> {
            match *portable {
                Portable::Descriptor { node } => u32::try_from(node).ok(),
                _ => None,
            }
        }
    }

    #[test]
    fn a_table_saved_as_plain_data_reads_back_the_same() {
        let table: std::collections::VecDeque<ResourceEntry<u32>> = [
            ResourceEntry::Owned(3),
            ResourceEntry::Empty,
            ResourceEntry::Owned(5),
        ]
        .into();
        let saved = ResourceTable::portable(&table);
        let json = serde_json::to_string(&saved).unwrap();
        let saved: Vec<Option<Portable>> = serde_json::from_str(&json).unwrap();
        let read: std::collections::VecDeque<ResourceEntry<u32>> =
            ResourceTable::from_portable(&saved).unwrap();
        assert_eq!(owned(&read), [Some(3), None, Some(5)]);
        // An entry of another kind does not fit the table.
        let stdin = [Some(Portable::Stdin)];
        let refused: Option<std::collections::VecDeque<ResourceEntry<u32>>> =
            ResourceTable::from_portable(&stdin);
        assert!(refused.is_none());
        // A table the host does not keep holds nothing.
        assert!(<() as ResourceTable>::from_portable(&saved).is_none());
        assert!(<() as ResourceTable>::from_portable(&[]).is_some());
    }

    #[test]
    fn tables_saved_for_another_world_do_not_fit() {
        let tables = Tables::empty();
        let mut saved = tables.portable();
        assert!(Tables::from_portable(&saved).is_some());
        saved.push(Vec::new());
        assert!(
            Tables::from_portable(&saved).is_none(),
            "one table too many"
        );
        saved.truncate(saved.len() - 2);
        assert!(Tables::from_portable(&saved).is_none(), "one table too few");
    }

    fn owned(table: &std::collections::VecDeque<ResourceEntry<u32>>) -> Vec<Option<u32>> {
        table
            .iter()
            .map(|entry| match entry {
                ResourceEntry::Owned(value) => Some(*value),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn truncating_the_resource_tables_keeps_the_first_entries() {
        let mut table: std::collections::VecDeque<ResourceEntry<u32>> =
            (0..5).map(ResourceEntry::Owned).collect();
        ResourceTable::truncate(&mut table, 2);
        assert_eq!(owned(&table), [Some(0), Some(1)]);
        ResourceTable::truncate(&mut table, 4);
        assert_eq!(ResourceTable::len(&table), 2);
        let mut none = ();
        ResourceTable::truncate(&mut none, 3);
        assert_eq!(ResourceTable::len(&none), 0);
    }

    #[test]
    fn a_copy_of_a_resource_table_has_the_same_entries_and_changes_apart() {
        let mut table: std::collections::VecDeque<ResourceEntry<u32>> = [
            ResourceEntry::Owned(7),
            ResourceEntry::Empty,
            ResourceEntry::Owned(9),
        ]
        .into();
        let copy = ResourceTable::copy(&table);
        assert_eq!(owned(&copy), [Some(7), None, Some(9)]);
        table.push_back(ResourceEntry::Owned(1));
        ResourceTable::truncate(&mut table, 1);
        assert_eq!(owned(&copy), [Some(7), None, Some(9)]);
    }
}
