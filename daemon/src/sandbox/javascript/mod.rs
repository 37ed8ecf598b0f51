//! The JavaScript guest: hyperlight-js's QuickJS runtime, with hyperlightd's runner
//! (`guest/javascript/runner.js`) registered as a handler.
//!
//! hyperlight-js builds one sandbox per factory, the template: runtime loaded, runner
//! registered, snapshotted. Every sandbox of the pool is built from that snapshot
//! (hyperlight-host's `SandboxBuilder::from_snapshot`) with the host functions of [`host`], so a
//! sandbox costs a new micro-VM over the template's memory, not a runtime load; a request pays
//! for neither. With `--prime when-idle` the sandbox is primed after each restore with a fixed
//! program, so that the pages a request writes are already copied from the snapshot; by default
//! it is not (`GuestFactory::primes_when_idle`).
//!
//! # Design: the event loop
//! The runner (`guest/javascript/runner.js`, with `web.js`) evaluates the program, and a program
//! whose value is not a promise, that set no timer and queued no microtask, is answered at once.
//! Otherwise the daemon drives its event loop, as libuv drives Node's: the runner answers with a
//! promise for its reply, and hyperlight-js's `RunHandler` runs QuickJS's job queue until that
//! promise settles, however long the chain of reactions. When the queue runs dry first, the call
//! fails with rquickjs's `WouldBlock`, and the daemon (`sandbox/javascript/mod.rs`, `drive`) calls
//! the runner again with `{"continue": true}`: the earliest timer runs (waiting for it in the host,
//! `hyperlightd.sleep`, at most 100 ms a call and never past the deadline), then every reaction it
//! leads to; with no timer left, nothing can settle the program's promise, and the runner says so.
//! So every queued reaction runs before a timer, a microtask spin runs until its time limit, and
//! a timer callback that throws fails the program (its other timers dropped). Each continuation is
//! a guest call of its own within the same request; the clock of `performance.now()` keeps running
//! across them. Past the deadline the daemon makes no further call.
//!
//! The guest's allocator (hyperlight-guest-bin's, `buddy_system_allocator`) looks for a freed
//! block's buddy by walking that size's whole free list, which loading the runner leaves long; the
//! runner ends by allocating and keeping a few hundred KiB of the objects an event loop allocates
//! (promises, functions, small objects and arrays), in the template's shared pages, so that a
//! program's objects are split from larger blocks and freed next to their buddies.

mod declarations;
mod files;
mod host;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlight_host::{HyperlightError, MultiUseSandbox};
use hyperlight_js::{HostPrintFn, SandboxBuilder, Script, Snapshot};

use self::host::{CallClock, Host};
use super::guest;
use super::guest::{
    BuildError, Guest, GuestError, GuestFactory, GuestSizes, OutputCapture, Prepared, Program,
    RunnerReply, SavedState, Template, from_template, saved_state, seed,
};
use super::run_host::RunHost;
use super::stored::{self, Codec, Key, SnapshotStore, StateFiles, Stored};
use super::watchdog::{self, Interrupt};
use crate::job::files::FileError;
use crate::job::workspace::Workspace;
use crate::job::{Deadline, Files, Footprint, MemoryFile, Runtime, StateCodec};

/// The runner, compiled into the daemon so that the daemon and its guest protocol always match:
/// the web APIs bundled from npm (`cargo xtask js-vendor`), those built on the host functions
/// below (timers and the event loop, `crypto`, `performance`, `fetch`), how a program's text
/// becomes what the runner evaluates (`program.js`), then the runner itself, as one module.
pub const RUNNER: &str = concat!(
    include_str!("../../../../guest/javascript/web-apis.js"),
    "\n",
    include_str!("../../../../guest/javascript/web.js"),
    "\n",
    include_str!("../../../../guest/javascript/fetch.js"),
    "\n",
    include_str!("../../../../guest/javascript/program.js"),
    "\n",
    include_str!("../../../../guest/javascript/runner.js"),
);
/// Name under which the runner is registered.
const HANDLER: &str = "run";

/// The program a restored sandbox runs before its next request, its output refused: small work
/// of the kind a typical program does (an array, a loop, a closure, a string, JSON), so that
/// the runner's paths and the allocator write their pages, and the next request does not pay
/// the copy-on-write faults of those first writes. Kept light: it runs after every request,
/// and a request that arrives meanwhile waits for it. It makes no host call (each is a VM exit,
/// which priming could not pay in advance). Fixed text: nothing of any request reaches it.
const PRIME: &str = "const xs = []; for (let i = 0; i < 64; i++) xs.push(i * 2); \
                     JSON.stringify({ n: xs.length, total: xs.reduce((a, b) => a + b, 0), text: 'p' + xs[3] })";

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

/// Builds JavaScript sandboxes from one template.
#[derive(Debug)]
pub struct JavascriptFactory {
    sizes: GuestSizes,
    store: Option<Arc<SnapshotStore>>,
    template: Template<Arc<Snapshot>>,
}

impl JavascriptFactory {
    /// A factory whose sandboxes are built with `sizes`, their input buffer large enough for
    /// the runner too; its template is saved in `store`, and loaded from it when it fits.
    pub fn new(sizes: GuestSizes, store: Option<Arc<SnapshotStore>>) -> Self {
        JavascriptFactory {
            sizes: with_room_for_the_runner(sizes),
            store,
            template: Template::default(),
        }
    }

    /// What the template, and every state saved from it, depends on: the sizes.
    fn key(&self) -> std::io::Result<Key> {
        Key::new("javascript", format!("{:?}", self.sizes), &[])
    }

    fn template(&self) -> Result<(Arc<Snapshot>, Option<Prepared>), HyperlightError> {
        self.template.get_or_make(|| {
            stored::load_or_build(
                self.store.as_ref(),
                || self.key(),
                || build_template(self.sizes),
                codec(),
            )
        })
    }
}

/// The JavaScript template: a snapshot, and nothing beside it (every sandbox registers the
/// same host functions, which keep no state of the guest's).
fn codec() -> Codec<Arc<Snapshot>, Snapshot> {
    Codec {
        encode: |snapshot| {
            Ok(Stored {
                snapshot: snapshot.clone(),
                extra: Vec::new(),
            })
        },
        decode: Box::new(|stored: Stored<Snapshot>| {
            if !stored.extra.is_empty() {
                return Err("a JavaScript template keeps nothing beside its snapshot".to_owned());
            }
            Ok(stored.snapshot)
        }),
    }
}

/// Builds the template with hyperlight-js: a sandbox with the runtime loaded and the runner
/// registered, snapshotted. Its host functions write nowhere: the template runs no program.
/// The snapshot records the names and signatures of the host functions, which every sandbox
/// built from it registers again (see host.rs).
fn build_template(sizes: GuestSizes) -> Result<Arc<Snapshot>, HyperlightError> {
    let host = Host::new(Arc::new(OutputCapture::new()));
    let print_host = host.clone();
    let print = HostPrintFn::from(move |text: String| -> i32 { print_host.print(&text) });
    let mut proto = SandboxBuilder::new()
        .with_guest_heap_size(sizes.heap_bytes)
        .with_guest_scratch_size(sizes.scratch())
        .with_guest_input_buffer_size(sizes.input_buffer())
        .with_guest_output_buffer_size(sizes.output_buffer())
        .with_host_print_fn(print)
        .build()?;
    host.register_on_template(&mut proto)?;
    let mut runtime = proto.load_runtime()?;
    runtime.add_handler(HANDLER, Script::from_content(RUNNER))?;
    runtime.get_loaded_sandbox()?.snapshot()
}

/// The runner's event for `program` (see guest/javascript/runner.js).
fn event(program: &Program<'_>, max_result_bytes: usize) -> String {
    serde_json::json!({
        "code": program.code,
        "policy": program.policy,
        "max_result_bytes": max_result_bytes,
        // Every request starts from the same snapshot: Math.random is reseeded from this.
        "seed": seed(),
        "session": program.session,
        // A session's program with its declarations made the session's, where the host's scan
        // can tell them; null: the runner finds them.
        "declared": program.session.then(|| declarations::session_program(program.code)).flatten(),
        "tools": program.tool_names(),
        "env": program.env,
    })
    .to_string()
}

impl GuestFactory for JavascriptFactory {
    fn prepare(&self) -> Result<Option<Prepared>, BuildError> {
        Ok(self.template()?.1)
    }

    /// hyperlight-js's QuickJS, which does not say its version.
    fn runtime(&self) -> Runtime {
        Runtime {
            name: "quickjs",
            ..Runtime::default()
        }
    }

    /// A state is a snapshot and nothing beside it, as the template is.
    fn template_memory(&self) -> Vec<MemoryFile> {
        self.template()
            .map(|(template, _)| guest::snapshot_footprint(&template).memory)
            .unwrap_or_default()
    }

    fn state_codec(&self) -> Result<Arc<dyn StateCodec>, String> {
        StateFiles::codec(
            self.key(),
            |state| {
                let snapshot: &Arc<Snapshot> = saved_state(state).map_err(|e| e.to_string())?;
                Ok(Stored {
                    snapshot: snapshot.clone(),
                    extra: Vec::new(),
                })
            },
            |stored: Stored<Snapshot>| Ok(SavedState::new(stored.snapshot)),
        )
    }

    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, BuildError> {
        let (template, _) = self.template()?;
        let host = Host::new(output.clone());
        let sandbox = from_template(template.clone(), &self.sizes, host.functions()?)?;
        Ok(Box::new(JavascriptGuest {
            sandbox,
            warm: template,
            clock: host.clock,
            work: host.work,
            run: host.run,
            output,
            max_result_bytes: self.sizes.max_result_bytes,
            response_capacity: self.sizes.response_capacity(),
        }))
    }
}

/// A JavaScript sandbox and the snapshot it returns to after every program: the template.
struct JavascriptGuest {
    sandbox: MultiUseSandbox,
    warm: Arc<Snapshot>,
    clock: Arc<CallClock>,
    /// The working directory its host functions serve.
    work: Arc<Workspace>,
    /// The tool calls and outbound requests of the run in progress.
    run: RunHost,
    output: Arc<OutputCapture>,
    max_result_bytes: usize,
    /// The most body bytes of one HTTP response the sandbox takes (see GuestSizes).
    response_capacity: usize,
}

impl JavascriptGuest {
    /// Calls the runner with `program`, as hyperlight-js's `handle_event` would, and drives its
    /// event loop until it replies (see [`drive`]).
    fn call_runner(
        &mut self,
        program: &Program<'_>,
        deadline: &Deadline,
    ) -> Result<String, HyperlightError> {
        let event = event(program, self.max_result_bytes);
        drive(
            deadline,
            |event| {
                // No garbage collection after the call: the sandbox is restored to its snapshot
                // anyway.
                self.sandbox
                    .call("RunHandler", (HANDLER.to_owned(), event.to_owned(), false))
            },
            &event,
        )
    }
}

/// The event that continues the runner's event loop (guest/javascript/web.js).
const CONTINUE: &str = r#"{"continue":true}"#;

/// What rquickjs's `Promise::finish` fails with when QuickJS's job queue runs dry before the
/// handler's promise settles (`rquickjs::Error::WouldBlock`, which hyperlight-js's runtime
/// reports with its `Debug` form).
const QUEUE_RAN_DRY: &str = "WouldBlock";

/// Runs the runner's handler with `event` through `call`, then, for as long as the job queue
/// runs dry before its reply settles, calls it again to continue: each call runs the next timer
/// and every reaction it leads to. The daemon is the event loop, as libuv is Node's: only
/// hyperlight-js's side of the guest knows when the job queue is empty. Past `deadline` it
/// stops as the watchdog would (whose interrupt is lost should it land between two calls).
fn drive(
    deadline: &Deadline,
    mut call: impl FnMut(&str) -> Result<String, HyperlightError>,
    event: &str,
) -> Result<String, HyperlightError> {
    let mut reply = call(event);
    loop {
        match reply {
            Err(HyperlightError::GuestError(_, ref message)) if message.contains(QUEUE_RAN_DRY) => {
                if deadline.left().is_zero() {
                    return Err(HyperlightError::ExecutionCanceledByHost());
                }
                reply = call(CONTINUE);
            }
            reply => return reply,
        }
    }
}

impl Guest for JavascriptGuest {
    fn run(
        &mut self,
        program: &Program<'_>,
        deadline: &Arc<Deadline>,
    ) -> Result<String, GuestError> {
        self.clock.start(deadline.clone());
        self.work.begin(program.files, program.file_limits);
        self.run.begin(program, deadline, self.response_capacity);
        let reply = self.call_runner(program, deadline);
        self.run.end();
        Ok(reply?)
    }

    fn take_files(&mut self) -> (Files, Option<FileError>) {
        self.work.take()
    }

    fn interrupt_handle(&self) -> Arc<dyn Interrupt> {
        Arc::new(watchdog::Hyperlight(self.sandbox.interrupt_handle()))
    }

    fn save(&mut self) -> Result<(SavedState, Footprint), GuestError> {
        let snapshot = self.sandbox.snapshot()?;
        let footprint = guest::snapshot_footprint(&snapshot);
        Ok((SavedState::new(snapshot), footprint))
    }

    /// Every JavaScript sandbox registers the same host functions, which is all a restore of
    /// another sandbox's snapshot asks; the host keeps no other state for the guest.
    fn load(&mut self, state: &SavedState) -> Result<(), GuestError> {
        let snapshot: &Arc<Snapshot> = saved_state(state)?;
        Ok(self.sandbox.restore(snapshot.clone())?)
    }

    fn reset(&mut self) -> Result<(), GuestError> {
        Ok(self.sandbox.restore(self.warm.clone())?)
    }

    /// Runs [`PRIME`], its output refused, within the priming call's time limit (the watchdog
    /// stops it there; the worker restores the sandbox then).
    fn prime(&mut self) -> Result<bool, GuestError> {
        let deadline = Deadline::new(Instant::now() + PRIME_LIMIT);
        self.clock.start(deadline.clone());
        self.output.begin(0, None);
        let reply = self.call_runner(&Program::fixed(PRIME), &deadline)?;
        RunnerReply::primed(&reply)?;
        Ok(true)
    }

    fn is_poisoned(&self) -> bool {
        !self.sandbox.status().is_ready()
    }
}

/// How long the priming program may wait on a timer (it sets none).
const PRIME_LIMIT: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use hyperlight_common::flatbuffer_wrappers::guest_error::ErrorCode;

    use super::*;

    fn ran_dry() -> Result<String, HyperlightError> {
        let message = "Runtime error: Error(\n    WouldBlock,\n)".to_owned();
        Err(HyperlightError::GuestError(ErrorCode::GuestError, message))
    }

    #[test]
    fn the_loop_is_continued_each_time_the_job_queue_runs_dry_until_the_runner_replies() {
        let mut events = Vec::new();
        let mut replies = vec![ran_dry(), ran_dry(), Ok("reply".to_owned())].into_iter();
        let deadline = Deadline::new(Instant::now() + Duration::from_secs(60));
        let reply = drive(
            &deadline,
            |event| {
                events.push(event.to_owned());
                replies.next().unwrap()
            },
            "first",
        );
        assert_eq!(reply.unwrap(), "reply");
        assert_eq!(events, ["first", CONTINUE, CONTINUE]);
    }

    #[test]
    fn other_errors_end_the_loop_and_a_dry_queue_past_the_deadline_is_a_timeout() {
        let deadline = Deadline::new(Instant::now() + Duration::from_secs(60));
        let failed = |_: &str| {
            Err(HyperlightError::GuestError(
                ErrorCode::GuestError,
                "the runner threw".to_owned(),
            ))
        };
        let error = drive(&deadline, failed, "event").unwrap_err();
        assert!(matches!(error, HyperlightError::GuestError(_, m) if m == "the runner threw"));
        let mut calls = 0;
        let past = drive(
            &Deadline::new(Instant::now()),
            |_| {
                calls += 1;
                ran_dry()
            },
            "event",
        );
        assert!(matches!(
            past,
            Err(HyperlightError::ExecutionCanceledByHost())
        ));
        assert_eq!(calls, 1, "no call is made past the deadline");
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
}
