//! The native Python guest: Debian's CPython 3.11 with the scientific stack on a Unikraft kernel
//! in a Hyperlight micro-VM, run by hyperlight-unikraft (library only) from the root filesystem
//! `cargo xtask native-python` builds. The runner (`guest/python-native/hyperlightd_native.py`,
//! in the rootfs) answers the event every language's runner answers, with the program code the
//! WebAssembly guest's runner uses; [`host`] serves its calls.
//!
//! The template is a snapshot taken after the runner is imported and `warm()` has imported the
//! packages most programs use; sandboxes are made from it and restored to it after every
//! answer, as the other guests are. With `--snapshot-dir` it is saved, with what the guest
//! reported of itself, and loaded at the next start (see `stored`). hyperlight-unikraft sits on
//! hyperlight-host 0.18 (the other guests on 0.17): its errors are mapped into the pool's here,
//! and nothing else names them.

mod host;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlight_unikraft::hyperlight_host::HyperlightError as Hyperlight18;
use hyperlight_unikraft::hyperlight_host::sandbox::snapshot::{OciDigest, OciTag};
use hyperlight_unikraft::{
    AppSandbox, Error as UnikraftError, Exec, SNAPSHOT_KEY, SandboxBuilder, Snapshot, Yield,
};
use serde::{Deserialize, Serialize};

use self::host::{Host, PIECE};
use super::guest;
use super::guest::{
    BuildError, Guest, GuestError, GuestFactory, GuestSizes, OutputCapture, Prepared, Program,
    RunnerReply, SavedState, Template, saved_state,
};
use super::python::Event;
use super::stored::{self, Codec, Key, Persist, SnapshotStore, StateFiles, Stored};
use super::watchdog::Interrupt;
use crate::job::packages::Wheel;
use crate::job::{
    Deadline, ExistingBlob, Files, Footprint, MemoryFile, Runtime, StateCodec, Stream,
    files::FileError,
};

/// What the guest says it has: its Python and its packages, with versions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct About {
    pub python: String,
    pub packages: std::collections::BTreeMap<String, String>,
}

/// The environment every native Python program runs in: matplotlib draws without a display
/// from the font cache the build made, BLAS and joblib use the one vCPU there is.
const ENV: &[(&str, &str)] = &[
    ("HOME", "/root"),
    ("MPLBACKEND", "Agg"),
    ("MPLCONFIGDIR", "/usr/lib/hyperlightd/matplotlib"),
    ("OPENBLAS_NUM_THREADS", "1"),
    ("OMP_NUM_THREADS", "1"),
    ("JOBLIB_MULTIPROCESSING", "0"),
    ("TZ", "UTC"),
];

/// What the template's guest runs first: the runner, from the rootfs.
const LOAD_RUNNER: &str =
    "import sys\nsys.path.insert(0, '/usr/lib/hyperlightd')\nimport hyperlightd_native\n";

/// The exit status of a guest whose kernel ran out of memory (128 + SIGKILL, as Linux's OOM
/// killer leaves it).
const OUT_OF_MEMORY_EXIT: i32 = 137;

/// How long the runner's priming call may take before the sandbox is given up.
const PRIME_LIMIT: Duration = Duration::from_secs(60);

/// The most the guest's console keeps between calls (what C code writes to its descriptors
/// directly; the program's Python output goes through the runner).
const CONSOLE_LIMIT: usize = 64 * 1024;

/// An event of this many bytes or fewer goes in the call; a larger one in pieces.
const INLINE_EVENT: usize = 60_000;

/// Builds native Python sandboxes from one template.
#[derive(Debug)]
pub struct NativePythonFactory {
    rootfs: PathBuf,
    sizes: GuestSizes,
    store: Option<Arc<SnapshotStore>>,
    template: Template<Arc<NativeTemplate>>,
}

struct NativeTemplate {
    snapshot: Arc<Snapshot>,
    about: About,
}

impl std::fmt::Debug for NativeTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeTemplate")
            .field("about", &self.about)
            .finish_non_exhaustive()
    }
}

impl NativePythonFactory {
    /// A factory whose sandboxes boot `rootfs` with `sizes`; its template is saved in `store`,
    /// and loaded from it when it fits.
    pub fn new(rootfs: PathBuf, sizes: GuestSizes, store: Option<Arc<SnapshotStore>>) -> Self {
        NativePythonFactory {
            rootfs,
            sizes,
            store,
            template: Template::default(),
        }
    }

    /// The guest's memory: the program's, the interpreter's and the packages' together.
    fn scratch_mb(&self) -> usize {
        usize::try_from(self.sizes.heap_bytes >> 20).unwrap_or(usize::MAX)
    }

    fn template(&self) -> Result<(Arc<NativeTemplate>, Option<Prepared>), BuildError> {
        self.template.get_or_make(|| {
            stored::load_or_build(
                self.store.as_ref(),
                || self.key(),
                || self.build_template().map(Arc::new),
                codec(),
            )
        })
    }

    /// What the template depends on: the sizes and limits, the rootfs (the runner and every
    /// package are in it), hyperlight-unikraft's kernel and host contract.
    fn key(&self) -> std::io::Result<Key> {
        let sizes = format!("{:?}, unikraft {SNAPSHOT_KEY}", self.sizes);
        Key::new("python", sizes, &[self.rootfs.as_path()])
    }

    /// Boots the rootfs, loads the runner, imports the warm packages and snapshots the guest.
    fn build_template(&self) -> Result<NativeTemplate, BuildError> {
        if !self.rootfs.is_file() {
            return Err(BuildError(format!(
                "the native Python rootfs {} does not exist: build it with `cargo xtask \
                 native-python`",
                self.rootfs.display()
            )));
        }
        let host = Host::new(Arc::new(OutputCapture::new()));
        let builder = SandboxBuilder::from_initrd(&self.rootfs).scratch_mb(self.scratch_mb());
        let mut sandbox = configure(builder, &host).boot().map_err(build_error)?;
        let loaded = sandbox.run(LOAD_RUNNER);
        let about = loaded.and_then(|()| sandbox.call("hyperlightd_warm", ""));
        let about = about.map_err(|e| {
            BuildError(format!(
                "loading the runner and the packages failed: {e}: {}",
                sandbox.drain_stderr()
            ))
        })?;
        let about: About = serde_json::from_str(&about)
            .map_err(|e| BuildError(format!("the guest's description is not valid: {e}")))?;
        sandbox.drain_output();
        let snapshot = sandbox.snapshot().map_err(build_error)?;
        Ok(NativeTemplate { snapshot, about })
    }
}

/// `builder` as every native sandbox is built: its output kept, not echoed, its environment,
/// its host functions, no network (hyperlight-unikraft's default).
fn configure(builder: SandboxBuilder, host: &Arc<Host>) -> SandboxBuilder {
    let builder = ENV
        .iter()
        .fold(builder, |builder, (key, value)| builder.env(*key, *value));
    host.register(builder.echo_output(false).output_limit(CONSOLE_LIMIT))
}

/// The template on disk: the snapshot, and what the guest reported of itself (JSON).
fn codec() -> Codec<Arc<NativeTemplate>, Snapshot> {
    Codec {
        encode: |template| {
            Ok(Stored {
                snapshot: template.snapshot.clone(),
                extra: serde_json::to_vec(&template.about).map_err(|e| e.to_string())?,
            })
        },
        decode: Box::new(|stored: Stored<Snapshot>| {
            let about = serde_json::from_slice(&stored.extra)
                .map_err(|e| format!("reading what the guest reported: {e}"))?;
            Ok(Arc::new(NativeTemplate {
                snapshot: stored.snapshot,
                about,
            }))
        }),
    }
}

/// hyperlight-unikraft's snapshot, named in its layout by [`SNAPSHOT_KEY`] (a load refuses
/// another kernel or host contract). Written as hyperlight-unikraft's `save_snapshot` writes
/// it, through hyperlight-host's `save_sharing` so that a state shares the files of the one it
/// was made from; the tag's first part, the release that saved it, is this daemon's instead.
impl Persist for Snapshot {
    fn write_to(&self, dir: &Path, existing: ExistingBlob<'_>) -> Result<(), String> {
        let tag = format!("hyperlightd-{SNAPSHOT_KEY}");
        let tag = OciTag::new(tag).map_err(|e| e.to_string())?;
        let existing = |digest: &OciDigest| existing(digest.as_str().strip_prefix("sha256:")?);
        self.save_sharing(dir, &tag, &existing)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn read_from(dir: &Path) -> Result<Arc<Self>, String> {
        hyperlight_unikraft::load_snapshot(dir).map_err(|e| e.to_string())
    }
}

fn build_error(error: UnikraftError) -> BuildError {
    BuildError(error.to_string())
}

impl GuestFactory for NativePythonFactory {
    fn prepare(&self) -> Result<Option<Prepared>, BuildError> {
        Ok(self.template()?.1)
    }

    /// A request writes about 2200 pages, each a copy-on-write fault after the restore: primed,
    /// a paced request took half as long in the benchmark, and back to back as many executions
    /// a second.
    fn primes_when_idle(&self) -> bool {
        true
    }

    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, BuildError> {
        let (template, _) = self.template()?;
        let host = Host::new(output);
        let builder = SandboxBuilder::from_snapshot(template.snapshot.clone());
        let sandbox = configure(builder, &host).boot().map_err(build_error)?;
        let interrupt = Arc::new(Kill(sandbox.interrupt_handle()));
        Ok(Box::new(NativePythonGuest {
            sandbox,
            warm: template.snapshot.clone(),
            host,
            interrupt,
            poisoned: false,
            max_result_bytes: self.sizes.max_result_bytes,
            response_capacity: self.sizes.response_capacity(),
        }))
    }

    /// What the runner reported when the template was made: Python's version, and every
    /// package of the rootfs with its version.
    fn runtime(&self) -> Runtime {
        let about = self
            .template()
            .map(|(template, _)| template.about.clone())
            .unwrap_or_default();
        Runtime {
            name: "native",
            version: Some(about.python).filter(|v| !v.is_empty()),
            packages: about.packages,
        }
    }

    fn template_memory(&self) -> Vec<MemoryFile> {
        let Ok((template, _)) = self.template() else {
            return Vec::new();
        };
        let files = template.snapshot.memory_files();
        let files = files
            .iter()
            .map(|f| (f.device, f.inode, f.bytes, f.in_memory));
        guest::footprint(0, files).memory
    }

    /// A state is the guest's snapshot (its working directory included) and nothing beside.
    fn state_codec(&self) -> Result<Arc<dyn StateCodec>, String> {
        StateFiles::codec(
            self.key(),
            |state| {
                let NativeState(snapshot) = saved_state(state).map_err(|e| e.to_string())?;
                Ok(Stored {
                    snapshot: snapshot.clone(),
                    extra: Vec::new(),
                })
            },
            |stored: Stored<Snapshot>| Ok(SavedState::new(NativeState(stored.snapshot))),
        )
    }
}

/// hyperlight-unikraft's interrupt handle as an [`Interrupt`].
struct Kill(Arc<dyn hyperlight_unikraft::hyperlight_host::hypervisor::InterruptHandle>);

impl Interrupt for Kill {
    fn interrupt(&self) {
        self.0.kill();
    }
}

/// A native Python sandbox and the snapshot it returns to after every program.
struct NativePythonGuest {
    sandbox: AppSandbox,
    warm: Arc<Snapshot>,
    host: Arc<Host>,
    interrupt: Arc<Kill>,
    /// The last call did not return (stopped, exited, failed): the guest needs a restore.
    poisoned: bool,
    max_result_bytes: usize,
    /// The most body bytes of one HTTP response the sandbox takes (see GuestSizes).
    response_capacity: usize,
}

impl NativePythonGuest {
    /// Calls the runner with `event`, driving the guest until it answers or `deadline` passes
    /// (a program asleep is not in the VM, so the interrupt alone would not end it), and
    /// returns its reply.
    fn call_runner(
        &mut self,
        event: &Event<'_>,
        (files, wheels): (&Files, &[Wheel]),
        deadline: &Deadline,
    ) -> Result<String, GuestError> {
        let text = serde_json::to_vec(event)
            .map_err(|e| GuestError::Failed(format!("encoding the runner's event: {e}")))?;
        let input = if text.len() <= INLINE_EVENT {
            self.host.begin(files, wheels, Vec::new());
            String::from_utf8_lossy(&text).into_owned()
        } else {
            let pieces = text.len().div_ceil(PIECE);
            self.host.begin(files, wheels, text);
            format!("{{\"pieces\": {pieces}}}")
        };
        self.poisoned = true;
        let call = Exec::Call {
            function: "hyperlightd_run".to_owned(),
            input,
        };
        self.sandbox.submit(call).map_err(|e| self.failed(e))?;
        loop {
            let left = deadline.left();
            if left.is_zero() {
                return Err(GuestError::Interrupted);
            }
            match self.sandbox.step(left).map_err(|e| self.failed(e))? {
                Yield::Blocked { .. } => continue,
                Yield::CallDone => break,
                Yield::CallFailed { status } => {
                    return Err(GuestError::Failed(format!(
                        "the runner failed (status {status}): {}",
                        self.sandbox.drain_stderr()
                    )));
                }
                Yield::Exited { status } => return Err(exited(status)),
            }
        }
        self.poisoned = false;
        self.console();
        match self.sandbox.take_result() {
            Some(result) => serde_json::from_slice::<String>(&result)
                .map_err(|e| GuestError::Failed(format!("the runner's reply is not text: {e}"))),
            None => String::from_utf8(self.host.take_reply())
                .map_err(|e| GuestError::Failed(format!("the runner's reply is not UTF-8: {e}"))),
        }
    }

    /// What C code wrote to the console's descriptors during the call, into the output: its
    /// standard error to stderr; the rest, which interleaves both streams, to stdout when
    /// there was no standard error, else to stderr, in the order written.
    fn console(&self) {
        let stderr = self.sandbox.take_stderr().text;
        let all = self.sandbox.take_output().text;
        let stream = if stderr.is_empty() {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        if !all.is_empty() {
            self.host.output.write(stream, &all);
        }
    }

    /// A hyperlight-unikraft error in the pool's terms.
    fn failed(&self, error: UnikraftError) -> GuestError {
        match error {
            UnikraftError::Hyperlight(Hyperlight18::ExecutionCanceledByHost()) => {
                GuestError::Interrupted
            }
            UnikraftError::GuestExited { status } => exited(status),
            UnikraftError::Deadlocked => GuestError::Raised(
                "the program blocked with nothing left that could wake it (every thread waits, \
                 and no timer or socket is pending)"
                    .to_owned(),
            ),
            other => GuestError::Failed(other.to_string()),
        }
    }
}

/// The guest process ended during a call.
fn exited(status: i32) -> GuestError {
    match status {
        OUT_OF_MEMORY_EXIT => GuestError::OutOfMemory(
            "the guest's kernel ended the program: its memory was used up".to_owned(),
        ),
        status => GuestError::Raised(format!(
            "SystemExit: the program ended the interpreter's process with status {status} \
             (os._exit or a fatal error)"
        )),
    }
}

impl Guest for NativePythonGuest {
    fn run(
        &mut self,
        program: &Program<'_>,
        deadline: &Arc<Deadline>,
    ) -> Result<String, GuestError> {
        self.host.work.begin(program.files, program.file_limits);
        self.host
            .run
            .begin(program, deadline, self.response_capacity);
        let event = Event::program(program, self.max_result_bytes).with_files(program.files);
        let reply = self.call_runner(&event, (program.files, program.packages), deadline);
        self.host.run.end();
        reply
    }

    fn take_files(&mut self) -> (Files, Option<FileError>) {
        self.host.work.take()
    }

    fn interrupt_handle(&self) -> Arc<dyn Interrupt> {
        self.interrupt.clone()
    }

    /// The guest's memory, its working directory included.
    fn save(&mut self) -> Result<(SavedState, Footprint), GuestError> {
        let snapshot = self.sandbox.snapshot().map_err(|e| self.failed(e))?;
        let files = snapshot.memory_files();
        let files = files
            .iter()
            .map(|f| (f.device, f.inode, f.bytes, f.in_memory));
        let footprint = guest::footprint(snapshot.memory_bytes(), files);
        Ok((SavedState::new(NativeState(snapshot)), footprint))
    }

    fn load(&mut self, state: &SavedState) -> Result<(), GuestError> {
        let NativeState(snapshot) = saved_state(state)?;
        self.sandbox
            .restore(snapshot.clone())
            .map_err(|e| self.failed(e))?;
        self.poisoned = false;
        Ok(())
    }

    fn reset(&mut self) -> Result<(), GuestError> {
        self.sandbox
            .restore(self.warm.clone())
            .map_err(|e| self.failed(e))?;
        self.poisoned = false;
        Ok(())
    }

    /// Runs the runner's priming program (numpy and pandas at work) with its output refused:
    /// the pages a request writes are copied here, off its path.
    fn prime(&mut self) -> Result<bool, GuestError> {
        self.host.output.begin(0, None);
        self.host.work.begin(&Files::new(), Default::default());
        let event = Event::prime(self.max_result_bytes);
        let deadline = Deadline::new(Instant::now() + PRIME_LIMIT);
        let reply = self.call_runner(&event, (&Files::new(), &[]), &deadline)?;
        self.host.work.take();
        RunnerReply::primed(&reply)?;
        Ok(true)
    }

    fn is_poisoned(&self) -> bool {
        self.poisoned
    }
}

/// A native Python guest's state saved for a session.
struct NativeState(Arc<Snapshot>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_its_kernel_killed_for_memory_is_out_of_memory_and_other_exits_are_raised() {
        assert!(matches!(
            exited(OUT_OF_MEMORY_EXIT),
            GuestError::OutOfMemory(_)
        ));
        let GuestError::Raised(message) = exited(3) else {
            panic!("exit status 3 is not raised");
        };
        assert!(message.contains("status 3"), "{message}");
    }
}
