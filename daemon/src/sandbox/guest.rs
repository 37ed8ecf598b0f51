//! What the pool needs of a language's guest: a factory that builds a warm sandbox, and the
//! sandbox's operations (run a program, interrupt it, return to the warm snapshot, prime it).
//!
//! Every language's runner answers with the same JSON reply (see `guest/README.md`), parsed here,
//! and writes its output into an [`OutputCapture`] through host functions.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hyperlight_host::HyperlightError;
use serde::Deserialize;

use super::watchdog::Interrupt;
use crate::job::egress::Outbound;
use crate::job::files::FileError;
use crate::job::packages::Wheel;
use crate::job::tools::ToolExchange;
use crate::job::{
    Deadline, Env, FailureKind, FileLimits, Files, Footprint, MemoryFile, Policy, Runtime,
    StateCodec, Violation,
};
use crate::telemetry::Trace;

/// What a guest is asked to run.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// The program's source.
    pub code: &'a str,
    /// Checked first, by the runner: a program that names what it refuses does not run.
    pub policy: Option<&'a Policy>,
    /// Run in the session's scope (see [`Guest::load`]).
    pub session: bool,
    /// Its working directory's files, and what the directory may hold.
    pub files: &'a Files,
    pub file_limits: FileLimits,
    /// Its environment variables, which the runner sets before it runs and puts back after.
    pub env: &'a Env,
    /// The tools it may call, and the exchange its calls go through; None: none.
    pub tools: Option<&'a Arc<ToolExchange>>,
    /// Its way out over HTTP; None: it may reach nothing.
    pub egress: Option<&'a Arc<dyn Outbound>>,
    /// Wheels to install before it runs (the native Python guest's only).
    pub packages: &'a [Wheel],
    /// Where the spans of its tool calls and outbound requests go (under its guest call's).
    pub trace: &'a Trace,
}

impl Program<'_> {
    /// The names and descriptions of the tools it may call, as the runners take them.
    pub fn tool_names(&self) -> Vec<serde_json::Value> {
        self.tools
            .iter()
            .flat_map(|exchange| exchange.tools())
            .map(|tool| serde_json::json!({"name": tool.name, "description": tool.description}))
            .collect()
    }
}

impl Program<'static> {
    /// A fixed program of the daemon's own: no policy, no files, not in a session.
    pub fn fixed(code: &'static str) -> Self {
        static NO_FILES: Files = Files::new();
        static NO_ENV: Env = Env::EMPTY;
        static NO_WHEELS: [Wheel; 0] = [];
        static NO_TRACE: std::sync::LazyLock<Trace> = std::sync::LazyLock::new(Trace::off);
        Program {
            code,
            policy: None,
            session: false,
            files: &NO_FILES,
            file_limits: FileLimits::default(),
            env: &NO_ENV,
            tools: None,
            egress: None,
            packages: &NO_WHEELS,
            trace: &NO_TRACE,
        }
    }
}

/// A sandbox with a language runtime loaded and its runner registered, snapshotted warm.
/// Lives on one worker thread.
pub trait Guest: Send {
    /// Runs `program` and returns the runner's JSON reply. `deadline` is when the call will be
    /// interrupted (its clock stops while the program waits for a tool); a guest whose host
    /// functions can block (a sleep) ends them there.
    fn run(
        &mut self,
        program: &Program<'_>,
        deadline: &Arc<Deadline>,
    ) -> Result<String, GuestError>;

    /// The working directory the last call left (its files, and the first write it refused at
    /// a cap), emptied: called after every call, whatever its end.
    fn take_files(&mut self) -> (Files, Option<FileError>);

    /// The guest's state now, for a session: memory, vCPU and what the host keeps beside them.
    /// Any sandbox of the same factory can [`load`](Self::load) it. With it, the host memory it
    /// holds: of its own, what it does not share with the state the guest was loaded from (the
    /// warm snapshot, or a session's earlier state), and the files it is mapped from.
    fn save(&mut self) -> Result<(SavedState, Footprint), GuestError>;

    /// Puts the guest in `state` (saved by a sandbox of the same factory) instead of its warm
    /// snapshot, for a session's exec. [`reset`](Self::reset) afterwards returns it to warm.
    fn load(&mut self, state: &SavedState) -> Result<(), GuestError>;

    /// A handle that stops a running call from another thread.
    fn interrupt_handle(&self) -> Arc<dyn Interrupt>;

    /// Returns the sandbox to its warm snapshot: nothing the last program did survives. This
    /// also clears a poisoned sandbox (Hyperlight's restore replaces memory, mappings and vCPU
    /// state); afterwards [`is_poisoned`](Self::is_poisoned) says whether it worked.
    fn reset(&mut self) -> Result<(), GuestError>;

    /// After a reset, runs fixed code of the guest's own that makes the next request cheaper,
    /// and says whether there was any. Nothing of any request may reach that code, so the state
    /// it leaves is the same after every reset. Python primes its interpreter here.
    fn prime(&mut self) -> Result<bool, GuestError> {
        Ok(false)
    }

    /// Whether the last call left the sandbox poisoned (interrupted, aborted, faulted).
    fn is_poisoned(&self) -> bool;
}

/// The host memory a snapshot holds: `own` bytes of its own, within the `files` its memory is
/// mapped from, given as (device, inode, bytes, in memory); only the files in memory count (a
/// file on disk mapped is a cache the kernel can take back). Each Hyperlight version's guests
/// give theirs.
pub fn footprint(own: usize, files: impl IntoIterator<Item = (u64, u64, u64, bool)>) -> Footprint {
    Footprint {
        own: own as u64,
        memory: files
            .into_iter()
            .filter(|&(.., in_memory)| in_memory)
            .map(|(device, inode, bytes, _)| MemoryFile {
                id: (device, inode),
                bytes,
            })
            .collect(),
    }
}

/// [`footprint`] of a snapshot of the hyperlight-host that hyperlight-js and hyperlight-wasm
/// build on.
pub fn snapshot_footprint(snapshot: &hyperlight_host::sandbox::snapshot::Snapshot) -> Footprint {
    let files = snapshot.memory_files();
    footprint(
        snapshot.memory_bytes(),
        files
            .iter()
            .map(|f| (f.device, f.inode, f.bytes, f.in_memory)),
    )
}

/// The state in `state`, if a guest of this kind saved it.
pub fn saved_state<T: Any>(state: &SavedState) -> Result<&T, GuestError> {
    state
        .get()
        .ok_or_else(|| GuestError::Failed("the saved state is not this kind of guest's".to_owned()))
}

/// Why a call into a guest failed, in the terms the pool acts on. Each guest kind says which of
/// its runtime's errors is which (for the hyperlight-host that hyperlight-js and hyperlight-wasm
/// build on, `From<HyperlightError>`), so that nothing above the guests depends on one version of
/// Hyperlight.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The call was stopped from another thread: the watchdog, at a time limit or because
    /// nobody waits any more.
    #[error("the call was stopped by the host")]
    Interrupted,
    /// The guest ran out of memory and aborted: the program dirtied more memory than its
    /// sandbox has.
    #[error("the guest ran out of memory: {0}")]
    OutOfMemory(String),
    /// The guest's code reported an error of its own through the call, and the sandbox is
    /// sound.
    #[error("{0}")]
    Raised(String),
    /// The program used up a limit the host keeps on it (beyond time, memory and output), and
    /// the host stopped it. The message says which limit and what uses it up.
    #[error("{0}")]
    ResourceLimit(String),
    /// A host function panicked during the call. Hyperlight's own state may be left half
    /// updated by the unwinding, so the sandbox is never reused, not even after a restore.
    #[error("a host function panicked during the call: {0}")]
    HostPanic(String),
    /// The sandbox failed otherwise (the guest aborted, faulted, exited): the message says how.
    #[error("{0}")]
    Failed(String),
}

/// Hyperlight's guest error code for a failed physical page allocation ("Out of physical
/// memory"): the program dirtied more memory than the sandbox has.
const GUEST_OUT_OF_MEMORY: u8 = 13;

impl From<HyperlightError> for GuestError {
    fn from(error: HyperlightError) -> Self {
        match error {
            HyperlightError::ExecutionCanceledByHost() => GuestError::Interrupted,
            HyperlightError::GuestAborted(GUEST_OUT_OF_MEMORY, message) => {
                GuestError::OutOfMemory(message)
            }
            HyperlightError::GuestError(_, message) => GuestError::Raised(message),
            other => GuestError::Failed(other.to_string()),
        }
    }
}

/// Why a sandbox or its template could not be built: what failed, in words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

impl From<HyperlightError> for BuildError {
    fn from(error: HyperlightError) -> Self {
        BuildError(error.to_string())
    }
}

impl From<GuestError> for BuildError {
    fn from(error: GuestError) -> Self {
        BuildError(error.to_string())
    }
}

/// A fresh seed for a program's random numbers: 128 bits of the host's entropy, in hex. Every
/// request starts from the same snapshot, so without it every program would draw the same
/// sequence. Should the host's entropy source fail (it does not once the system is up), the seed
/// falls back to the clock: these generators are not for secrets.
pub fn seed() -> String {
    let mut bytes = [0u8; 16];
    let value = match getrandom::fill(&mut bytes) {
        Ok(()) => u128::from_le_bytes(bytes),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    };
    format!("{value:032x}")
}

/// Room for the runner protocol around a program or a result in the guest's I/O buffers.
const IO_SLACK: usize = 64 * 1024;

/// Memory for the language runtime itself beyond its heap: stack growth, page tables,
/// exception stack.
const RUNTIME_OVERHEAD: usize = 16 * 1024 * 1024;

/// Guest memory is mapped in pages; hyperlight-host requires (and debug builds assert) that
/// buffer and region sizes are whole pages.
const PAGE_SIZE: usize = 4096;

fn whole_pages(bytes: usize) -> usize {
    bytes.div_ceil(PAGE_SIZE).saturating_mul(PAGE_SIZE)
}

/// The sizes a guest is built with, derived from the daemon's limits. All are whole pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestSizes {
    /// Guest heap: what a program can allocate.
    pub heap_bytes: u64,
    /// Largest request body; the program in it must fit the guest's input buffer.
    pub max_body_bytes: usize,
    /// Largest result, as JSON, that the runner returns.
    pub max_result_bytes: usize,
}

impl GuestSizes {
    /// The input buffer carries the program JSON-encoded, which at worst (control characters
    /// written as `\u00XX`) is six times its size.
    pub fn input_buffer(&self) -> usize {
        whole_pages(
            self.max_body_bytes
                .saturating_mul(6)
                .saturating_add(IO_SLACK),
        )
    }

    /// The output buffer carries the runner's reply, whose result the runner keeps within
    /// `max_result_bytes`.
    pub fn output_buffer(&self) -> usize {
        whole_pages(self.max_result_bytes.saturating_add(IO_SLACK))
    }

    /// The most body bytes of one HTTP response the sandbox can take: the host function's
    /// answer carries the body in base64 through the input buffer, beside the headers.
    pub fn response_capacity(&self) -> usize {
        self.input_buffer().saturating_sub(2 * IO_SLACK) / 4 * 3
    }

    /// Every page a program dirties (heap, stack: copy-on-write from the snapshot) and the I/O
    /// buffers are taken from the sandbox's scratch region, so it must hold them all; otherwise
    /// the guest aborts with "Out of physical memory" long before its heap is full. Only pages
    /// actually used cost host memory.
    pub fn scratch(&self) -> usize {
        whole_pages(usize::try_from(self.heap_bytes).unwrap_or(usize::MAX))
            .saturating_add(self.input_buffer())
            .saturating_add(self.output_buffer())
            .saturating_add(RUNTIME_OVERHEAD)
    }
}

/// A sandbox built from `template` (a snapshot of a guest built with `sizes`) with `functions`.
/// The template fixes the memory layout; the builder is told the same sizes, so that
/// hyperlight-host has nothing to override (and warn about).
pub fn from_template(
    template: Arc<hyperlight_host::sandbox::snapshot::Snapshot>,
    sizes: &GuestSizes,
    functions: hyperlight_host::HostFunctions,
) -> Result<hyperlight_host::MultiUseSandbox, HyperlightError> {
    hyperlight_host::SandboxBuilder::from_snapshot(template)
        .input_data_size(sizes.input_buffer())
        .output_data_size(sizes.output_buffer())
        .heap_size(sizes.heap_bytes)
        .scratch_size(sizes.scratch())
        .host_functions(functions)
        .build()
}

/// Builds warm sandboxes of one language.
pub trait GuestFactory: Send + Sync + 'static {
    /// Makes ready, once, the template every sandbox is built from (a snapshot of a guest with
    /// its runtime loaded and its runner ready), and says how long that took and how, when this
    /// call did it. [`create`](Self::create) prepares too; a pool prepares first, to time it.
    fn prepare(&self) -> Result<Option<Prepared>, BuildError> {
        Ok(None)
    }

    /// Builds a sandbox whose output goes to `output`.
    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, BuildError>;

    /// What runs the programs: the runtime, the language's version, the packages. Asked once
    /// the template is ready (what the guest reports may be known only then).
    fn runtime(&self) -> Runtime;

    /// How its sandboxes' saved states go to disk and come back, for sessions that outlive
    /// the daemon; `Err`: why they cannot.
    fn state_codec(&self) -> Result<Arc<dyn StateCodec>, String> {
        Err("this guest's states cannot be written to disk".to_owned())
    }

    /// The files in memory its template is mapped from (see [`Footprint`]), which every state
    /// of its sandboxes shares and the pool holds: asked once the template is ready.
    fn template_memory(&self) -> Vec<MemoryFile> {
        Vec::new()
    }

    /// Whether its sandboxes are primed ([`Guest::prime`]) after a restore that finds no job
    /// waiting, unless the operator says otherwise (`--prime`). Only where the benchmark says
    /// priming pays for the CPU it takes: a runtime whose request writes few pages gains little
    /// from it, and a request sent while it runs waits for all of it.
    fn primes_when_idle(&self) -> bool {
        false
    }
}

/// How a template was made ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Built from scratch.
    Built,
    /// Loaded from a snapshot saved on disk.
    Loaded,
}

impl Source {
    /// The `source` label of the template metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Built => "built",
            Source::Loaded => "loaded",
        }
    }
}

/// A template made ready: how, and how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Prepared {
    pub source: Source,
    pub took: Duration,
}

/// What every sandbox of a factory is built from, made ready once, on first use. Callers that
/// find it being made wait for it rather than make their own.
pub struct Template<T>(Mutex<Option<T>>);

impl<T> Default for Template<T> {
    fn default() -> Self {
        Template(Mutex::new(None))
    }
}

impl<T> std::fmt::Debug for Template<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ready = self.0.lock().is_ok_and(|t| t.is_some());
        f.debug_struct("Template").field("ready", &ready).finish()
    }
}

impl<T: Clone> Template<T> {
    /// The template, made with `make` if there is none yet, and how when this call made it. A
    /// failure leaves none, for the next call to try again.
    pub fn get_or_make<E>(
        &self,
        make: impl FnOnce() -> Result<(T, Source), E>,
    ) -> Result<(T, Option<Prepared>), E> {
        let mut template = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ready) = template.as_ref() {
            return Ok((ready.clone(), None));
        }
        let started = Instant::now();
        let (ready, source) = make()?;
        *template = Some(ready.clone());
        let took = started.elapsed();
        Ok((ready, Some(Prepared { source, took })))
    }
}

pub use crate::job::{Display, OutputChunk, OutputSink, SavedState, Stream};

/// Output of the current execution, shared between the host functions a guest writes through
/// and the worker that owns the guest. Holds at most the execution's limit of stdout and stderr
/// together, so that an output flood costs the host nothing past the cap.
#[derive(Debug, Default)]
pub struct OutputCapture {
    state: Mutex<CaptureState>,
}

#[derive(Debug, Default)]
struct CaptureState {
    limit: usize,
    captured: Captured,
    /// Bytes of display data kept.
    display_bytes: usize,
    /// Where what is kept also goes as it is written.
    sink: Option<OutputSink>,
}

impl CaptureState {
    /// Bytes the cap has left.
    fn room(&self) -> usize {
        let used = self.captured.stdout.len() + self.captured.stderr.len() + self.display_bytes;
        self.limit.saturating_sub(used)
    }

    fn send(&self, chunk: OutputChunk) {
        if let Some(sink) = &self.sink {
            // A caller that went away is the watchdog's business: the program is stopped.
            let _ = sink.send(chunk);
        }
    }
}

/// What one execution wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Rich output, in the order it was shown.
    pub display: Vec<Display>,
    /// Whether anything was cut, or left out, at the cap.
    pub truncated: bool,
}

impl OutputCapture {
    /// An empty capture that keeps nothing until [`begin`](Self::begin) sets a limit.
    pub fn new() -> Self {
        OutputCapture::default()
    }

    fn state(&self) -> MutexGuard<'_, CaptureState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts an execution: empties the capture and keeps at most `limit` bytes from now on,
    /// each write's kept part also sent to `sink` when there is one.
    pub fn begin(&self, limit: usize, sink: Option<OutputSink>) {
        *self.state() = CaptureState {
            limit,
            sink,
            ..CaptureState::default()
        };
    }

    /// Appends `text` to `stream`, cut at a character boundary once the cap is reached.
    /// Returns whether there is room for more, so a runner can stop sending output early.
    pub fn write(&self, stream: Stream, text: &str) -> bool {
        let mut state = self.state();
        let room = state.room();
        let take = if text.len() <= room {
            text.len()
        } else {
            state.captured.truncated = true;
            text.floor_char_boundary(room)
        };
        let target = match stream {
            Stream::Stdout => &mut state.captured.stdout,
            Stream::Stderr => &mut state.captured.stderr,
        };
        target.push_str(&text[..take]);
        if take > 0 {
            let text = text[..take].to_owned();
            state.send(OutputChunk::Text { stream, text });
        }
        !state.captured.truncated
    }

    /// Writes `line` to `stream` on a line of its own: after a line break, if what the stream
    /// holds does not end with one.
    pub fn write_line(&self, stream: Stream, line: &str) -> bool {
        let open = {
            let state = self.state();
            let text = match stream {
                Stream::Stdout => &state.captured.stdout,
                Stream::Stderr => &state.captured.stderr,
            };
            !text.is_empty() && !text.ends_with('\n')
        };
        if open {
            self.write(stream, "\n");
        }
        self.write(stream, line)
    }

    /// Keeps `item` when it fits in what the cap has left; one that does not is left out
    /// whole (never half a picture), and the output is marked cut. Returns whether there is
    /// room for more.
    pub fn display(&self, item: Display) -> bool {
        let mut state = self.state();
        let size = item.size();
        if size > state.room() {
            state.captured.truncated = true;
            return false;
        }
        state.display_bytes += size;
        state.send(OutputChunk::Display(item.clone()));
        state.captured.display.push(item);
        !state.captured.truncated
    }

    /// Bytes the cap has left: a runner sending an item in pieces gives up past it.
    pub fn room(&self) -> usize {
        self.state().room()
    }

    /// Records that output was left out at the cap.
    pub fn mark_truncated(&self) {
        self.state().captured.truncated = true;
    }

    /// Takes what was written since `begin`, leaving the capture empty with no room (and no
    /// sink).
    pub fn take(&self) -> Captured {
        std::mem::take(&mut *self.state()).captured
    }
}

/// The runner's reply to one program, as every language's runner writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum RunnerReply {
    /// The program completed.
    Completed {
        /// The value of its last expression (null when none).
        result: serde_json::Value,
    },
    /// The program failed in a way the runner caught.
    Failed {
        /// What failed.
        error: RunnerError,
    },
}

/// A failure the runner caught.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RunnerError {
    /// `syntax_error`, `exception` or `result_too_large`.
    pub kind: RunnerErrorKind,
    /// Exception type and message.
    pub message: String,
    /// For `policy_violation`: what the program names that its policy refuses.
    #[serde(default)]
    pub violations: Vec<Violation>,
}

/// The failure kinds a runner reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerErrorKind {
    /// The program does not parse.
    SyntaxError,
    /// The program raised and did not catch it.
    Exception,
    /// The program's result is over the limit.
    ResultTooLarge,
    /// The language runtime ran out of memory and said so.
    OutOfMemory,
    /// The program names what its policy refuses; it did not run.
    PolicyViolation,
    /// A package the job carried could not be installed; the program did not run.
    InstallFailed,
}

impl From<RunnerErrorKind> for FailureKind {
    fn from(kind: RunnerErrorKind) -> Self {
        match kind {
            RunnerErrorKind::SyntaxError => FailureKind::SyntaxError,
            RunnerErrorKind::Exception => FailureKind::Exception,
            RunnerErrorKind::ResultTooLarge => FailureKind::ResultTooLarge,
            RunnerErrorKind::OutOfMemory => FailureKind::OutOfMemory,
            RunnerErrorKind::PolicyViolation => FailureKind::PolicyViolation,
            RunnerErrorKind::InstallFailed => FailureKind::InstallFailed,
        }
    }
}

impl RunnerReply {
    /// Checks the reply to a runner's priming program: it must have completed.
    pub fn primed(json: &str) -> Result<(), GuestError> {
        match RunnerReply::parse(json) {
            Ok(RunnerReply::Completed { .. }) => Ok(()),
            _ => Err(GuestError::Failed(format!(
                "the runner's priming program failed: {json}"
            ))),
        }
    }

    /// Parses a runner's reply. Spelled out by hand because serde's enum tags are strings and
    /// the protocol's tag is a bool.
    pub fn parse(json: &str) -> Result<RunnerReply, String> {
        #[derive(Deserialize)]
        struct Raw {
            ok: bool,
            #[serde(default)]
            result: serde_json::Value,
            error: Option<RunnerError>,
        }
        let raw: Raw = serde_json::from_str(json)
            .map_err(|e| format!("the runner's reply is not valid: {e}"))?;
        match (raw.ok, raw.error) {
            (true, _) => Ok(RunnerReply::Completed { result: raw.result }),
            (false, Some(error)) => Ok(RunnerReply::Failed { error }),
            (false, None) => Err("the runner reported a failure without an error".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_sizes_are_whole_pages_and_scratch_holds_heap_and_buffers() {
        let sizes = GuestSizes {
            heap_bytes: 64 * 1024 * 1024 + 1,
            max_body_bytes: 1000,
            max_result_bytes: 1000,
        };
        for size in [sizes.input_buffer(), sizes.output_buffer(), sizes.scratch()] {
            assert_eq!(size % PAGE_SIZE, 0, "{size}");
        }
        assert!(sizes.input_buffer() >= 6 * 1000);
        assert!(sizes.output_buffer() >= 1000);
        assert!(
            sizes.scratch() as u64
                > sizes.heap_bytes + (sizes.input_buffer() + sizes.output_buffer()) as u64
        );
    }

    #[test]
    fn capture_keeps_streams_apart() {
        let capture = OutputCapture::new();
        capture.begin(100, None);
        assert!(capture.write(Stream::Stdout, "out\n"));
        assert!(capture.write(Stream::Stderr, "err\n"));
        let captured = capture.take();
        assert_eq!(captured.stdout, "out\n");
        assert_eq!(captured.stderr, "err\n");
        assert!(!captured.truncated);
        assert_eq!(capture.take(), Captured::default());
    }

    #[test]
    fn capture_past_limit_is_cut_at_char_boundary_and_flagged() {
        let capture = OutputCapture::new();
        capture.begin(5, None);
        assert!(capture.write(Stream::Stdout, "abc"));
        // 4 bytes; only 2 fit, which is one character.
        assert!(!capture.write(Stream::Stderr, "дд"));
        assert!(!capture.write(Stream::Stdout, "more"));
        let captured = capture.take();
        assert_eq!(captured.stdout, "abc");
        assert_eq!(captured.stderr, "д");
        assert!(captured.truncated);
    }

    #[test]
    fn a_sink_gets_each_write_s_kept_part_as_it_is_written() {
        let capture = OutputCapture::new();
        let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
        capture.begin(6, Some(sink));
        capture.write(Stream::Stdout, "ab");
        capture.write(Stream::Stderr, "");
        capture.write(Stream::Stderr, "cdefgh");
        capture.write(Stream::Stdout, "past the cap");
        let chunk = |stream, text: &str| OutputChunk::Text {
            stream,
            text: text.to_owned(),
        };
        assert_eq!(chunks.try_recv(), Ok(chunk(Stream::Stdout, "ab")));
        assert_eq!(chunks.try_recv(), Ok(chunk(Stream::Stderr, "cdef")));
        assert!(
            chunks.try_recv().is_err(),
            "nothing empty, nothing past the cap"
        );
        let captured = capture.take();
        assert_eq!(
            (captured.stdout.as_str(), captured.stderr.as_str()),
            ("ab", "cdef")
        );
        assert_eq!(
            chunks.try_recv(),
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected),
            "the capture lets go of the sink once the execution's output is taken"
        );
    }

    #[test]
    fn display_items_share_the_cap_and_one_past_it_is_left_out_whole() {
        let capture = OutputCapture::new();
        let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
        capture.begin(40, Some(sink));
        let item = |text: &str| Display {
            data: [("text/plain".to_owned(), text.to_owned())].into(),
            result: false,
        };
        capture.write(Stream::Stdout, "0123456789");
        // 10 bytes of the type's name and 10 of content: 30 of 40 used.
        assert!(capture.display(item("abcdefghij")));
        assert!(!capture.display(item("too large for the rest")));
        assert!(
            !capture.write(Stream::Stdout, "0123456789ab"),
            "10 bytes were left"
        );
        let captured = capture.take();
        assert_eq!(captured.display, vec![item("abcdefghij")]);
        assert_eq!(captured.stdout, "01234567890123456789");
        assert!(captured.truncated);
        let sent: Vec<OutputChunk> = std::iter::from_fn(|| chunks.try_recv().ok()).collect();
        assert_eq!(
            sent[1],
            OutputChunk::Display(item("abcdefghij")),
            "{sent:?}"
        );
        assert_eq!(sent.len(), 3, "nothing of the item left out: {sent:?}");
    }

    #[test]
    fn capture_begin_resets_the_previous_execution() {
        let capture = OutputCapture::new();
        capture.begin(3, None);
        capture.write(Stream::Stdout, "abcdef");
        capture.begin(10, None);
        assert!(capture.write(Stream::Stdout, "xyz"));
        let captured = capture.take();
        assert_eq!(captured.stdout, "xyz");
        assert!(!captured.truncated);
        assert!(
            !capture.write(Stream::Stdout, "after take"),
            "no room until the next begin"
        );
    }

    #[test]
    fn unknown_stream_number_goes_to_stderr() {
        assert_eq!(Stream::from_number(1), Stream::Stdout);
        assert_eq!(Stream::from_number(2), Stream::Stderr);
        assert_eq!(Stream::from_number(9), Stream::Stderr);
    }

    #[test]
    fn reply_parses_completed_and_failed() {
        assert_eq!(
            RunnerReply::parse(r#"{"ok":true,"result":[1,2]}"#).unwrap(),
            RunnerReply::Completed {
                result: serde_json::json!([1, 2])
            }
        );
        assert_eq!(
            RunnerReply::parse(r#"{"ok":true}"#).unwrap(),
            RunnerReply::Completed {
                result: serde_json::Value::Null
            }
        );
        let failed =
            RunnerReply::parse(r#"{"ok":false,"error":{"kind":"syntax_error","message":"m"}}"#)
                .unwrap();
        assert!(matches!(
            failed,
            RunnerReply::Failed { error } if error.kind == RunnerErrorKind::SyntaxError
        ));
    }

    #[test]
    fn reply_that_is_not_the_protocol_is_an_error() {
        assert!(RunnerReply::parse("42").is_err());
        assert!(RunnerReply::parse(r#"{"ok":false}"#).is_err());
    }
}
