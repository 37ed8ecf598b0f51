//! The Python guest's imports, implemented deny-by-default: the WASI 0.2 interfaces CPython
//! imports (as listed in `guest/python/wit/component/world.wit`) and hyperlightd's own `host`.
//!
//! What works: stdout and stderr (into the request's [`OutputCapture`]), the wall clock (the
//! monotonic one has a defect, see the clocks section), sleeping (never past the request's
//! deadline), random bytes from the host's entropy, an empty environment, reading the guest's
//! library, the modules it imports at run time ([`files`]), and the program's working directory,
//! files in the host's memory ([`work`]). What does not, by design: nothing outside the working
//! directory can be written; a network capability exists but creating a socket or
//! resolving a name is refused with `access-denied`; stdin is at its end; there is no terminal.
//! Each of these reaches the program as an ordinary Python exception (`OSError` and kin).
//!
//! Resources the guest can never obtain (sockets, terminals) have the uninhabited type [`Never`]
//! as their representation, so their methods cannot be reached. Sockets, which only ever
//! refuse, are in [`denied`].

mod call;
mod denied;
mod files;
mod portable;
mod work;

pub use self::call::CallState;
pub use self::portable::{Portable, ToPortable};

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlight_common::component::Negative as N;
use hyperlight_common::resource::BorrowedResourceGuard as B;

use self::files::FileStream;
use self::work::{WorkReader, WorkWriter};
use super::bindings::hyperlightd::guest as hl;
use super::bindings::root::component::RootImports;
use super::bindings::wasi::{cli, clocks, io, random};
use super::library::Library;
use crate::job::workspace::Workspace;
use crate::sandbox::guest::{OutputCapture, Stream};

use io::streams::StreamError;

/// A value that cannot exist: the rep of every resource the guest can never obtain (sockets,
/// terminals).
#[derive(Clone)]
pub enum Never {}

/// A pollable: ready now, or once the monotonic clock reaches a point.
#[derive(Clone)]
pub enum Pollable {
    Ready,
    At(Instant),
}

/// An input stream: stdin, always at its end, or a file of the library or of the working
/// directory being read.
#[derive(Clone)]
pub enum Input {
    Stdin,
    File(FileStream),
    /// Boxed: every table entry stays within the size the handle limit assumes.
    Work(Box<WorkReader>),
}

/// stdout or stderr, or a file of the working directory being written.
#[derive(Clone)]
pub enum Output {
    Std(Stream),
    /// Boxed, as `Input::Work`.
    File(Box<WorkWriter>),
}

/// An I/O error. Never produced: stdout and stderr do not fail, and nothing else exists.
#[derive(Clone)]
pub struct IoError;

/// The network capability: handed out, good for nothing.
#[derive(Clone)]
pub struct Network;

/// The host side of one Python sandbox.
pub struct WasiHost {
    output: Arc<OutputCapture>,
    call: CallState,
    /// What the guest can read through wasi:filesystem; None: only the working directory.
    library: Option<Arc<Library>>,
    /// The program's working directory.
    work: Arc<Workspace>,
    /// Zero of the monotonic clock the guest sees.
    epoch: Instant,
}

impl WasiHost {
    /// Host state writing into `output`, sleeping no later than `call`'s deadline, serving
    /// `library` to read and `work` as the working directory.
    pub fn new(
        output: Arc<OutputCapture>,
        call: CallState,
        library: Option<Arc<Library>>,
        work: Arc<Workspace>,
    ) -> Self {
        WasiHost {
            output,
            call,
            library,
            work,
            epoch: Instant::now(),
        }
    }

    /// Sleeps until `at`, or until the call's deadline if that comes first: then the program
    /// is out of time, and the call is stopped before the guest runs on (a wait that ended at
    /// the deadline must not let the program finish as if its time limit had not passed).
    fn sleep_until(&self, at: Instant) {
        let limit = self.call.deadline();
        let (at, out_of_time) = match limit {
            Some(limit) if limit <= at => (limit, true),
            _ => (at, false),
        };
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        if out_of_time {
            self.call.out_of_time();
        }
    }
}

/// The most bytes the guest may write to stdout or stderr in one host call (see `check_write`).
const MAX_STREAM_WRITE: u64 = 32 * 1024;

/// The most random bytes one call hands out.
const MAX_RANDOM_BYTES: u64 = 1 << 20;

// --- hyperlightd:guest/host ---------------------------------------------------------------

impl hl::Host<N> for WasiHost {
    fn write(&mut self, stream: u8, text: String) -> bool {
        self.output.write(Stream::from_number(stream), &text)
    }

    fn tool_call(&mut self, name: String, arguments: String) -> String {
        self.call.run().call(&name, &arguments).to_string()
    }

    fn tool_wait(&mut self, ms: f64) -> String {
        self.call.run().wait(ms).to_string()
    }

    fn fetch(&mut self, request: String) -> String {
        self.call.run().fetch(&request).to_string()
    }
}

// --- wasi:io ------------------------------------------------------------------------------

impl io::error::Error<N> for WasiHost {
    type T = IoError;
}
impl io::Error<N> for WasiHost {}

impl io::poll::Pollable<N> for WasiHost {
    type T = Pollable;
    fn block(&mut self, this: B<'_, Pollable>) {
        if let Pollable::At(at) = *this {
            self.sleep_until(at);
        }
    }
}

impl io::Poll<N> for WasiHost {
    fn poll(&mut self, pollables: Vec<B<'_, Pollable>>) -> Vec<u32> {
        // Ready ones now; otherwise wait for the earliest.
        let now = Instant::now();
        let ready: Vec<u32> = pollables
            .iter()
            .enumerate()
            .filter(|(_, p)| match ***p {
                Pollable::Ready => true,
                Pollable::At(at) => at <= now,
            })
            .map(|(i, _)| i as u32)
            .collect();
        if !ready.is_empty() {
            return ready;
        }
        let earliest = pollables
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match **p {
                Pollable::At(at) => Some((at, i)),
                Pollable::Ready => None,
            })
            .min();
        match earliest {
            Some((at, i)) => {
                self.sleep_until(at);
                vec![i as u32]
            }
            None => Vec::new(),
        }
    }
}

impl<E> io::streams::InputStream<N, E, Pollable> for WasiHost {
    type T = Input;
    fn read(&mut self, this: B<'_, Input>, len: u64) -> Result<Vec<u8>, StreamError<E>> {
        match (&*this, &self.library) {
            (Input::File(file), Some(library)) => {
                file.read(library, len).ok_or(StreamError::Closed)
            }
            (Input::Work(file), _) => file.read(&self.work, len).ok_or(StreamError::Closed),
            _ => Err(StreamError::Closed),
        }
    }
    fn subscribe(&mut self, _this: B<'_, Input>) -> Pollable {
        self.call.resource_given();
        Pollable::Ready
    }
}

impl<E> io::streams::OutputStream<N, E, Pollable> for WasiHost {
    type T = Output;
    /// How much one `write` may carry. The bytes travel to the host through the guest's output
    /// buffer, which holds 64 KiB beyond the result limit: a larger write (`os.write(1, ...)`
    /// of megabytes, say) would abort the guest, so the guest is told to write in pieces.
    fn check_write(&mut self, _this: B<'_, Output>) -> Result<u64, StreamError<E>> {
        Ok(MAX_STREAM_WRITE)
    }
    fn write(&mut self, this: B<'_, Output>, contents: Vec<u8>) -> Result<(), StreamError<E>> {
        self.put(&this, &contents)
    }
    fn blocking_write_and_flush(
        &mut self,
        this: B<'_, Output>,
        contents: Vec<u8>,
    ) -> Result<(), StreamError<E>> {
        self.put(&this, &contents)
    }
    fn blocking_flush(&mut self, _this: B<'_, Output>) -> Result<(), StreamError<E>> {
        Ok(())
    }
    fn subscribe(&mut self, _this: B<'_, Output>) -> Pollable {
        self.call.resource_given();
        Pollable::Ready
    }
}

impl<E> io::Streams<N, E, Pollable> for WasiHost {}

impl WasiHost {
    /// Writes to stdout, stderr or a file. A file's write refused (at a cap of the working
    /// directory) closes the stream: the guest sees an I/O error, and the outcome says which
    /// cap it was (see `Workspace::take`).
    fn put<E>(&self, output: &Output, contents: &[u8]) -> Result<(), StreamError<E>> {
        match output {
            Output::Std(stream) => {
                self.output
                    .write(*stream, &String::from_utf8_lossy(contents));
                Ok(())
            }
            Output::File(file) => file
                .write(&self.work, contents)
                .map_err(|_| StreamError::Closed),
        }
    }
}

// --- wasi:cli ---------------------------------------------------------------------------

impl cli::Environment<N> for WasiHost {
    fn get_environment(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
    fn get_arguments(&mut self) -> Vec<String> {
        vec!["python".to_owned()]
    }
}

impl cli::Exit<N> for WasiHost {
    /// `os._exit()`: the program ends here. The call is stopped before the guest runs on (the
    /// component would trap), and the reply says how it ended (see `PythonGuest::run`).
    fn exit(&mut self, status: Result<(), ()>) {
        self.call.exit(status.is_ok());
    }
}

impl cli::Stdin<N, Input> for WasiHost {
    fn get_stdin(&mut self) -> Input {
        self.call.resource_given();
        Input::Stdin
    }
}
impl cli::Stdout<N, Output> for WasiHost {
    fn get_stdout(&mut self) -> Output {
        self.call.resource_given();
        Output::Std(Stream::Stdout)
    }
}
impl cli::Stderr<N, Output> for WasiHost {
    fn get_stderr(&mut self) -> Output {
        self.call.resource_given();
        Output::Std(Stream::Stderr)
    }
}

impl cli::terminal_input::TerminalInput<N> for WasiHost {
    type T = Never;
}
impl cli::TerminalInput<N> for WasiHost {}
impl cli::terminal_output::TerminalOutput<N> for WasiHost {
    type T = Never;
}
impl cli::TerminalOutput<N> for WasiHost {}
impl cli::TerminalStdin<N, Never> for WasiHost {
    fn get_terminal_stdin(&mut self) -> Option<Never> {
        None
    }
}
impl cli::TerminalStdout<N, Never> for WasiHost {
    fn get_terminal_stdout(&mut self) -> Option<Never> {
        None
    }
}
impl cli::TerminalStderr<N, Never> for WasiHost {
    fn get_terminal_stderr(&mut self) -> Option<Never> {
        None
    }
}

// --- wasi:clocks ------------------------------------------------------------------------
//
// A defect to know about: hyperlight-component-util 0.17 names a host function after its
// package and function only ("wasi::clocks::now"), not its interface, so `monotonic-clock.now`
// and `wall-clock.now` (and both `resolution`s) are registered under one name, and the later
// registration, the wall clock's, answers both. The guest reads the first eight bytes of the
// wall clock's answer, its whole seconds, as the monotonic clock's nanoseconds. So:
// - `time.time()` and `datetime.now()` are right;
// - the interpreter's own monotonic clock advances one nanosecond per second. The runner
//   replaces `time.monotonic()`, `time.perf_counter()` and their `_ns` forms with readings of
//   the wall clock, which this host keeps from stepping back during a call (see `CallState`);
// - sleeps still last as long as asked: a sleep until a monotonic instant is read back in the
//   same units the guest computed it in (see `subscribe_instant`).
// The implementations below are what each function should do; only the wall clock's run.

/// The guest's reading of its monotonic clock (see above): whole wall-clock seconds.
fn guest_monotonic_now(call: &CallState) -> u64 {
    call.wall().as_secs()
}

impl clocks::MonotonicClock<N, Pollable> for WasiHost {
    fn now(&mut self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    fn resolution(&mut self) -> u64 {
        1
    }
    /// `when` is the guest's monotonic reading plus a duration in nanoseconds; the duration is
    /// what counts.
    fn subscribe_instant(&mut self, when: u64) -> Pollable {
        self.call.resource_given();
        let wait = when.saturating_sub(guest_monotonic_now(&self.call));
        Pollable::At(Instant::now() + Duration::from_nanos(wait))
    }
    fn subscribe_duration(&mut self, when: u64) -> Pollable {
        self.call.resource_given();
        Pollable::At(Instant::now() + Duration::from_nanos(when))
    }
}

impl clocks::WallClock<N> for WasiHost {
    fn now(&mut self) -> clocks::wall_clock::Datetime {
        let since = self.call.wall();
        clocks::wall_clock::Datetime {
            seconds: since.as_secs(),
            nanoseconds: since.subsec_nanos(),
        }
    }
    fn resolution(&mut self) -> clocks::wall_clock::Datetime {
        clocks::wall_clock::Datetime {
            seconds: 0,
            nanoseconds: 1,
        }
    }
}

// --- wasi:random ------------------------------------------------------------------------

impl random::Random<N> for WasiHost {
    fn get_random_bytes(&mut self, len: u64) -> Vec<u8> {
        // CPython asks for a few bytes at a time; a cap keeps a hostile request from making the
        // host allocate without bound.
        let mut bytes = vec![0u8; usize::try_from(len.min(MAX_RANDOM_BYTES)).unwrap_or(0)];
        if let Err(e) = getrandom::fill(&mut bytes) {
            // Zeros would be a silent weakness. A short answer makes the guest trap, and the
            // sandbox is replaced.
            tracing::error!("the host has no entropy: {e}");
            return Vec::new();
        }
        bytes
    }
}

// --- the world ---------------------------------------------------------------------------

impl RootImports<N> for WasiHost {
    type Poll = Self;
    fn poll(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type MonotonicClock = Self;
    fn monotonic_clock(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type WallClock = Self;
    fn wall_clock(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Random = Self;
    fn random(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Error = Self;
    fn error(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Streams = Self;
    fn streams(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Stdout = Self;
    fn stdout(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Stderr = Self;
    fn stderr(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Stdin = Self;
    fn stdin(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Environment = Self;
    fn environment(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Exit = Self;
    fn exit(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type TerminalInput = Self;
    fn terminal_input(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type TerminalOutput = Self;
    fn terminal_output(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type TerminalStdin = Self;
    fn terminal_stdin(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type TerminalStdout = Self;
    fn terminal_stdout(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type TerminalStderr = Self;
    fn terminal_stderr(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Types = Self;
    fn types(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Preopens = Self;
    fn preopens(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Network = Self;
    fn network(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type InstanceNetwork = Self;
    fn instance_network(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Udp = Self;
    fn udp(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type UdpCreateSocket = Self;
    fn udp_create_socket(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Tcp = Self;
    fn tcp(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type TcpCreateSocket = Self;
    fn tcp_create_socket(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type IpNameLookup = Self;
    fn ip_name_lookup(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
    type Host = Self;
    fn host(&mut self) -> impl std::borrow::BorrowMut<Self> {
        self
    }
}
