//! The host side of the JavaScript guest, without hyperlight-js: the host functions its
//! runtime calls, registered on sandboxes built from the template snapshot.
//!
//! hyperlight-js keeps the sandbox of a `LoadedJSSandbox` private and has no way to build one
//! from a snapshot, so the daemon builds the template with hyperlight-js once (runtime loaded,
//! runner registered) and every sandbox from that template itself. What hyperlight-js does on
//! the host for a loaded sandbox is small, and is all here:
//! - `HostPrint(text) -> i32`, where the runtime's own `print` writes;
//! - `CurrentTimeMicros() -> u64`, the clock behind `Date.now()`;
//! - `CallHostJsFunction(module, function, args_json, binaries) -> bytes`: a call of a host
//!   module's function, its arguments a JSON array, its answer JSON tagged as hyperlight-js's
//!   bridge tags it (`hyperlight_js_common::encode_json_return`).
//!
//! The runner's host module is `hyperlightd`: [`Host::register_on_template`] registers its
//! functions on the template, which tells the guest their names, and [`Host::call`] answers
//! them on every sandbox built from it; the two sit side by side below.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use hyperlight_host::func::Registerable;
use hyperlight_host::{HostFunctions, HyperlightError};
use hyperlight_js::ProtoJSSandbox;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::files;
use crate::job::Deadline;
use crate::job::workspace::Workspace;
use crate::sandbox::guest::{OutputCapture, Stream};
use crate::sandbox::run_host::RunHost;

/// Host module the runner imports.
pub const MODULE: &str = "hyperlightd";

/// The state the host functions of one sandbox share: where its output goes, the clock of
/// the call in progress, and the program's working directory.
#[derive(Debug, Clone)]
pub struct Host {
    pub output: Arc<OutputCapture>,
    pub clock: Arc<CallClock>,
    pub work: Arc<Workspace>,
    pub run: RunHost,
}

impl Host {
    /// A host writing to `output`, with a clock and a working directory of its own.
    pub fn new(output: Arc<OutputCapture>) -> Self {
        Host {
            output,
            clock: Arc::new(CallClock::default()),
            work: Arc::new(Workspace::default()),
            run: RunHost::default(),
        }
    }

    /// `hyperlightd.write(stream, text)`: false once the request's output cap is reached.
    pub fn write(&self, stream: u8, text: &str) -> bool {
        self.output.write(Stream::from_number(stream), text)
    }

    /// What the runtime's own `print` writes goes to stdout.
    pub fn print(&self, text: &str) -> i32 {
        self.output.write(Stream::Stdout, text);
        i32::try_from(text.len()).unwrap_or(i32::MAX)
    }

    /// Registers the runner's host module on the template's sandbox (hyperlight-js then
    /// registers `CallHostJsFunction` and tells the guest the module's function names). Every
    /// name here is answered by [`call`](Self::call).
    pub fn register_on_template(&self, proto: &mut ProtoJSSandbox) -> Result<(), HyperlightError> {
        let host = self.clone();
        proto.register(MODULE, "write", move |stream: u8, text: String| {
            host.write(stream, &text)
        })?;
        let host = self.clone();
        proto.register(MODULE, "now", move |_: u8| host.clock.elapsed_ms())?;
        let host = self.clone();
        proto.register(MODULE, "sleep", move |ms: f64| host.clock.sleep(ms))?;
        proto.register(MODULE, "random", random_hex)?;
        let host = self.clone();
        proto.register(MODULE, "tool_call", move |name: String, args: String| {
            host.run.call(&name, &args)
        })?;
        let host = self.clone();
        proto.register(MODULE, "tool_wait", move |ms: f64| host.run.wait(ms))?;
        let host = self.clone();
        proto.register(MODULE, "fetch", move |request: String| {
            host.run.fetch(&request)
        })?;
        // The files functions take up to two strings (unused ones are passed as "").
        for &function in files::FUNCTIONS {
            let host = self.clone();
            proto.register(MODULE, function, move |a: String, b: String| {
                let args = serde_json::json!([a, b]).to_string();
                let answer = host.call(MODULE, function, &args).unwrap_or_default();
                serde_json::from_str::<serde_json::Value>(&answer).unwrap_or_default()
            })?;
        }
        Ok(())
    }

    /// Answers a call of `function` of `module` with its JSON-array arguments, as JSON.
    pub fn call(&self, module: &str, function: &str, args: &str) -> Result<String, String> {
        if module != MODULE {
            return Err(format!("there is no host module {module:?}"));
        }
        match function {
            "write" => answer(args, |(stream, text): (u8, String)| {
                self.write(stream, &text)
            }),
            // hyperlight-js's bridge passes arguments as a JSON array, which `()` cannot be
            // read from: `now` takes a placeholder, which the runner passes as 0.
            "now" => answer(args, |(_,): (u8,)| self.clock.elapsed_ms()),
            "sleep" => answer(args, |(ms,): (f64,)| self.clock.sleep(ms)),
            "random" => answer(args, |(bytes,): (usize,)| random_hex(bytes)),
            "tool_call" => answer(args, |(name, arguments): (String, String)| {
                self.run.call(&name, &arguments)
            }),
            "tool_wait" => answer(args, |(ms,): (f64,)| self.run.wait(ms)),
            "fetch" => answer(args, |(request,): (String,)| self.run.fetch(&request)),
            _ => files::call(&self.work, function, args).unwrap_or_else(|| {
                Err(format!(
                    "the host module {MODULE} has no function {function:?}"
                ))
            }),
        }
    }

    /// The host functions of a sandbox built from the template: the same names and signatures
    /// hyperlight-js registered on the template's sandbox.
    pub fn functions(&self) -> Result<HostFunctions, HyperlightError> {
        let mut functions = HostFunctions::empty();
        let host = self.clone();
        functions.register_host_function("HostPrint", move |text: String| {
            Ok::<_, HyperlightError>(host.print(&text))
        })?;
        functions.register_host_function("CurrentTimeMicros", || {
            Ok::<_, HyperlightError>(micros_since_epoch())
        })?;
        let host = self.clone();
        functions.register_host_function(
            "CallHostJsFunction",
            move |module: String, function: String, args: String, binaries: Vec<u8>| {
                host.bridge(&module, &function, &args, &binaries)
                    .map_err(HyperlightError::Error)
            },
        )?;
        Ok(functions)
    }

    /// `CallHostJsFunction`: the runner's functions take no binary arguments.
    fn bridge(
        &self,
        module: &str,
        function: &str,
        args: &str,
        binaries: &[u8],
    ) -> Result<Vec<u8>, String> {
        // The guest sends a sidecar with a count of 0 when there are no binary arguments.
        let blobs = match binaries {
            [] => Vec::new(),
            _ => hyperlight_js_common::decode_binaries(binaries).map_err(|e| e.to_string())?,
        };
        if !blobs.is_empty() {
            return Err(format!("{module}.{function} takes no binary arguments"));
        }
        let json = self.call(module, function, args)?;
        Ok(hyperlight_js_common::encode_json_return(&json))
    }
}

/// Reads `args` as `A`, applies `f`, and gives its answer as JSON.
fn answer<A: DeserializeOwned, R: Serialize>(
    args: &str,
    f: impl FnOnce(A) -> R,
) -> Result<String, String> {
    let args = serde_json::from_str(args).map_err(|e| format!("bad arguments {args:?}: {e}"))?;
    serde_json::to_string(&f(args)).map_err(|e| e.to_string())
}

/// The clock behind `Date.now()`, as hyperlight-js gives it: microseconds since the epoch.
fn micros_since_epoch() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The clock of the call in progress, for the runner's `performance.now()` and timers.
#[derive(Debug)]
pub struct CallClock {
    /// When the call started, and its deadline.
    span: Mutex<(Instant, Arc<Deadline>)>,
}

impl Default for CallClock {
    fn default() -> Self {
        let now = Instant::now();
        CallClock {
            span: Mutex::new((now, Deadline::new(now))),
        }
    }
}

/// The longest one `sleep` host call lasts: the guest asks again for a longer wait, and comes
/// back into the micro-VM, where the watchdog can stop it, at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(100);

impl CallClock {
    /// A call starts now and is stopped at `deadline`.
    pub fn start(&self, deadline: Arc<Deadline>) {
        *self.span.lock().unwrap_or_else(PoisonError::into_inner) = (Instant::now(), deadline);
    }

    fn span(&self) -> (Instant, Arc<Deadline>) {
        self.span
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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
        std::thread::sleep(asked.min(MAX_SLEEP).min(deadline.left()));
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
        clock.start(Deadline::new(Instant::now() + Duration::from_millis(30)));
        let started = Instant::now();
        clock.sleep(10_000.0);
        let slept = started.elapsed();
        assert!(slept < MAX_SLEEP, "{slept:?}");
        clock.start(Deadline::new(Instant::now() + Duration::from_secs(60)));
        let started = Instant::now();
        clock.sleep(f64::NAN);
        clock.sleep(-5.0);
        clock.sleep(f64::INFINITY);
        assert!(started.elapsed() < MAX_SLEEP * 2, "{:?}", started.elapsed());
        assert!(clock.elapsed_ms() >= 0.0);
    }

    #[test]
    fn random_bytes_are_hex_and_capped() {
        assert_eq!(random_hex(16).unwrap().len(), 32);
        assert_eq!(random_hex(1 << 20).unwrap().len(), 2 * MAX_RANDOM_BYTES);
        assert_ne!(random_hex(16), random_hex(16));
    }

    #[test]
    fn every_function_of_the_module_answers_json() {
        let output = Arc::new(OutputCapture::new());
        output.begin(5, None);
        let host = Host::new(output.clone());
        host.clock
            .start(Deadline::new(Instant::now() + Duration::from_secs(1)));
        let args = ["[1, \"hello world\"]", "[0]", "[1]", "[4]"];
        let answers: Vec<String> = ["write", "now", "sleep", "random"]
            .into_iter()
            .zip(args)
            .map(|(function, args)| host.call(MODULE, function, args).unwrap())
            .collect();
        assert_eq!(answers[0], "false", "over the cap of 5 bytes");
        assert_eq!(output.take().stdout, "hello");
        assert!(answers[1].parse::<f64>().unwrap() >= 0.0);
        assert_eq!(answers[2], "null");
        assert_eq!(
            serde_json::from_str::<String>(&answers[3]).unwrap().len(),
            8
        );
    }

    #[test]
    fn bad_calls_are_errors_not_panics() {
        let host = Host::new(Arc::new(OutputCapture::new()));
        assert!(host.call("fs", "write", "[1, \"x\"]").is_err());
        assert!(host.call(MODULE, "exec", "[]").is_err());
        assert!(host.call(MODULE, "write", "{\"stream\": 1}").is_err());
        assert!(host.call(MODULE, "sleep", "not json").is_err());
        let blob = hyperlight_js_common::encode_binaries(&[b"x"]).unwrap();
        assert!(host.bridge(MODULE, "now", "[0]", &blob).is_err());
        let none = hyperlight_js_common::encode_binaries::<&[u8]>(&[]).unwrap();
        for binaries in [&none[..], &[]] {
            let tagged = host.bridge(MODULE, "sleep", "[0]", binaries).unwrap();
            assert_eq!(tagged, hyperlight_js_common::encode_json_return("null"));
        }
    }
}
