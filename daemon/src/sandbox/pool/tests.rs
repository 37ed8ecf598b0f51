//! The pool against fake guests: queueing, deadlines, restores after poison, rebuilds and worker
//! restarts, with no hypervisor. A fake guest runs a tiny script named by the job's code.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use super::*;
use crate::job::files::FileError;
use crate::job::tools::{Tool, ToolExchange, ToolLimits, Waited};
use crate::job::{
    Caller, FailureKind, FileLimits, Files, Footprint, Outcome, Policy, Runtime, SavedState,
    Status, Violation,
};
use crate::metrics::Metrics;
use crate::sandbox::guest::{BuildError, GuestError, OutputChunk, Program, Stream};
use crate::sandbox::watchdog::Interrupt;

mod sessions;

/// What the test controls and observes, shared by every fake sandbox of a pool.
#[derive(Default)]
struct Control {
    builds: AtomicUsize,
    resets: AtomicUsize,
    primes: AtomicUsize,
    /// Upcoming resets that fail.
    failing_resets: AtomicUsize,
    /// Upcoming `is_poisoned` calls that panic: a bug in the worker outside any guest call.
    panicking_checks: AtomicUsize,
    /// `mark` programs running now, and the most that ran at once.
    marks_running: AtomicUsize,
    most_marks_running: AtomicUsize,
    /// The names of the `mark` programs, in the order they started.
    marks: Mutex<Vec<String>>,
    /// The `held` programs the test has let go (`*`: all of them), and the news of it.
    released: Mutex<Vec<String>>,
    release: Condvar,
}

impl Control {
    /// Lets the `held` program `name` end (`*`: every one).
    fn release(&self, name: &str) {
        self.released.lock().unwrap().push(name.to_owned());
        self.release.notify_all();
    }

    /// Waits until the `held` program `name` is let go; false after `limit`.
    fn wait_released(&self, name: &str, limit: Duration) -> bool {
        let released = self.released.lock().unwrap();
        let (released, _) = self
            .release
            .wait_timeout_while(released, limit, |released| {
                !released.iter().any(|r| r == name || r == "*")
            })
            .unwrap();
        released.iter().any(|r| r == name || r == "*")
    }

    /// Waits until `n` `mark` or `held` programs have started.
    async fn wait_for_marks(&self, n: usize) {
        let started = Instant::now();
        while self.marks.lock().unwrap().len() < n {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{n} programs never started: {:?}",
                self.marks.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// Interrupts a fake call the way Hyperlight does: a flag the call waits on, cleared when a
/// call begins.
#[derive(Default)]
struct FakeInterrupt {
    killed: Mutex<bool>,
    woken: Condvar,
}

impl Interrupt for FakeInterrupt {
    fn interrupt(&self) {
        *self.killed.lock().unwrap() = true;
        self.woken.notify_all();
    }
}

impl FakeInterrupt {
    /// Waits until interrupted or `limit` passes; true when interrupted.
    fn wait(&self, limit: Duration) -> bool {
        let killed = self.killed.lock().unwrap();
        let (killed, _) = self
            .woken
            .wait_timeout_while(killed, limit, |k| !*k)
            .unwrap();
        *killed
    }
}

struct FakeGuest {
    control: Arc<Control>,
    output: Arc<OutputCapture>,
    interrupt: Arc<FakeInterrupt>,
    poisoned: bool,
    /// Programs run since the last reset: what a program would see of the ones before it.
    runs_since_reset: usize,
    /// Whether the priming program ran since the last reset (or load).
    primed: bool,
    /// The working directory of the last call.
    files: Files,
}

impl Guest for FakeGuest {
    /// `ok:JSON` answers JSON; `spin` runs until interrupted; `sleep:MS` takes MS milliseconds
    /// unless interrupted; `abort` fails as a guest abort; `host-panic` panics as a host
    /// function would; `print:TEXT` writes TEXT to stdout, `print-spin:TEXT` too, then spins;
    /// `seen` answers how many programs ran before it since the last reset; `primed` whether the
    /// priming program did; `mark:NAME:MS`
    /// notes NAME as started and takes MS milliseconds; `held:NAME` notes NAME as started and
    /// ends when the test lets it go (see [`Control::release`]);
    /// with a policy, `refused:NAME` is refused as a runner refuses a program naming NAME;
    /// `tool-capped` calls the tool `now`, waits for its answer, and, as the JavaScript runner
    /// does when the wait ends at the wall-clock cap, returns an exception of its own at once.
    fn run(
        &mut self,
        program: &Program<'_>,
        deadline: &Arc<Deadline>,
    ) -> Result<String, GuestError> {
        let code = program.code;
        if let (Some(_), Some(name)) = (program.policy, code.strip_prefix("refused:")) {
            return Ok(serde_json::json!({
                "ok": false,
                "error": {
                    "kind": "policy_violation",
                    "message": format!("the program names {name}"),
                    "violations": [{"line": 1, "rule": "blocked_functions", "name": name}],
                },
            })
            .to_string());
        }
        *self.interrupt.killed.lock().unwrap() = false;
        self.runs_since_reset += 1;
        self.files = program.files.clone();
        let ok = |result: &str| Ok(format!(r#"{{"ok":true,"result":{result}}}"#));
        let cancelled = || Err(GuestError::Interrupted);
        match code.split_once(':').unwrap_or((code, "")) {
            ("ok", json) => ok(json),
            ("print", text) => {
                self.output.write(Stream::Stdout, text);
                ok("null")
            }
            ("print-spin", text) => {
                self.output.write(Stream::Stdout, text);
                self.poisoned = true;
                assert!(
                    self.interrupt.wait(Duration::from_secs(30)),
                    "never interrupted"
                );
                cancelled()
            }
            ("seen", _) => ok(&(self.runs_since_reset - 1).to_string()),
            ("primed", _) => ok(&self.primed.to_string()),
            ("mark", mark) => {
                let (name, ms) = mark.split_once(':').unwrap();
                let control = &self.control;
                control.marks.lock().unwrap().push(name.to_owned());
                let now = control.marks_running.fetch_add(1, Ordering::SeqCst) + 1;
                control.most_marks_running.fetch_max(now, Ordering::SeqCst);
                let interrupted = self
                    .interrupt
                    .wait(Duration::from_millis(ms.parse().unwrap()));
                control.marks_running.fetch_sub(1, Ordering::SeqCst);
                assert!(!interrupted, "{name} was interrupted");
                ok("\"marked\"")
            }
            ("held", name) => {
                self.control.marks.lock().unwrap().push(name.to_owned());
                let released = self.control.wait_released(name, Duration::from_secs(30));
                assert!(released, "{name} was never let go");
                ok("\"released\"")
            }
            ("write", file) => {
                let (path, text) = file.split_once('=').unwrap();
                self.files.insert(path.to_owned(), text.as_bytes().to_vec());
                ok("null")
            }
            ("spin", _) => {
                self.poisoned = true;
                assert!(
                    self.interrupt.wait(Duration::from_secs(30)),
                    "never interrupted"
                );
                cancelled()
            }
            ("sleep", ms) => {
                if self
                    .interrupt
                    .wait(Duration::from_millis(ms.parse().unwrap()))
                {
                    self.poisoned = true;
                    return cancelled();
                }
                ok("\"slept\"")
            }
            ("abort", _) => {
                self.poisoned = true;
                Err(GuestError::Failed("the guest aborted: boom".into()))
            }
            ("host-panic", _) => panic!("a host function panicked"),
            ("tool-capped", _) => {
                let tools = program.tools.expect("a job with tools");
                tools
                    .call("now", "{}", &crate::telemetry::Trace::off())
                    .unwrap();
                assert_eq!(tools.wait(deadline, None), Waited::WallClock);
                Ok(r#"{"ok":false,"error":{"kind":"exception","message":"capped"}}"#.to_owned())
            }
            ("syntax", _) => {
                Ok(r#"{"ok":false,"error":{"kind":"syntax_error","message":"m"}}"#.to_owned())
            }
            _ => panic!("unknown fake program {code:?}"),
        }
    }

    fn take_files(&mut self) -> (Files, Option<FileError>) {
        (std::mem::take(&mut self.files), None)
    }

    fn interrupt_handle(&self) -> Arc<dyn Interrupt> {
        self.interrupt.clone()
    }

    /// The state is the count of programs run since the last reset.
    fn save(&mut self) -> Result<(SavedState, Footprint), GuestError> {
        let footprint = Footprint {
            own: 100,
            memory: Vec::new(),
        };
        Ok((SavedState::new(self.runs_since_reset), footprint))
    }

    fn load(&mut self, state: &SavedState) -> Result<(), GuestError> {
        self.runs_since_reset = *crate::sandbox::guest::saved_state::<usize>(state)?;
        self.primed = false;
        Ok(())
    }

    fn reset(&mut self) -> Result<(), GuestError> {
        self.control.resets.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.control.failing_resets) {
            return Err(GuestError::Failed("restore failed".into()));
        }
        self.poisoned = false;
        self.runs_since_reset = 0;
        self.primed = false;
        Ok(())
    }

    fn prime(&mut self) -> Result<bool, GuestError> {
        self.control.primes.fetch_add(1, Ordering::SeqCst);
        self.primed = true;
        Ok(true)
    }

    fn is_poisoned(&self) -> bool {
        if take_one(&self.control.panicking_checks) {
            panic!("a bug in the worker");
        }
        self.poisoned
    }
}

struct FakeFactory(Arc<Control>);

impl GuestFactory for FakeFactory {
    fn runtime(&self) -> Runtime {
        Runtime {
            name: "fake",
            ..Runtime::default()
        }
    }

    fn create(&self, output: Arc<OutputCapture>) -> Result<Box<dyn Guest>, BuildError> {
        self.0.builds.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(FakeGuest {
            control: self.0.clone(),
            output,
            interrupt: Arc::default(),
            poisoned: false,
            runs_since_reset: 0,
            primed: false,
            files: Files::new(),
        }))
    }
}

/// A pool of `size` fake sandboxes, with its control and metrics.
fn pool(size: usize) -> (Pool, Arc<Control>, Metrics) {
    pool_priming(size, Priming::WhenIdle)
}

/// [`pool`], its workers priming as `priming` says.
fn pool_priming(size: usize, priming: Priming) -> (Pool, Arc<Control>, Metrics) {
    let control = Arc::new(Control::default());
    let metrics = Metrics::new().unwrap();
    let config = PoolConfig {
        language: Language::Javascript,
        size,
        queue_depth: 8,
        heap_bytes: 1 << 20,
        build_limit: Duration::from_secs(10),
        factory: Arc::new(FakeFactory(control.clone())),
        priming,
        tracer: crate::telemetry::Tracer::default(),
    };
    let watchdog = Watchdog::new(tokio::runtime::Handle::current());
    let pool = Pool::start(config, watchdog, metrics.pool(Language::Javascript)).unwrap();
    (pool, control, metrics)
}

fn job(code: &str, timeout_ms: u64) -> Job {
    job_of(1000, code, timeout_ms)
}

/// A job of the caller `uid`.
fn job_of(uid: u32, code: &str, timeout_ms: u64) -> Job {
    let timeout = Duration::from_millis(timeout_ms);
    Job {
        request_id: 1,
        language: Language::Javascript,
        code: code.to_owned(),
        timeout,
        deadline: Instant::now() + timeout,
        max_output_bytes: 1000,
        policy: None,
        output: None,
        files: Files::new(),
        file_changes: Vec::new(),
        fresh_interpreter: false,
        packages: Vec::new(),
        env: Default::default(),
        file_limits: FileLimits {
            max_entries: 10,
            max_bytes: 100,
        },
        span: tracing::Span::none(),
        trace: crate::telemetry::Trace::off(),
        tools: None,
        egress: None,
        caller: Caller {
            uid,
            gid: 1000,
            pid: None,
            pod: crate::job::PodOf::Unread,
            on_behalf_of: None,
        },
    }
}

/// Runs `job` on a fresh interpreter.
async fn submit(pool: &Pool, job: Job) -> Result<Outcome, ExecError> {
    pool.submit(job, Scope::Fresh).await.map(|ran| ran.outcome)
}

/// Runs `job` in a session whose state is `state`; the state it leaves, or what became of it.
async fn in_session(pool: &Pool, job: Job, state: Option<SavedState>) -> (Outcome, After) {
    let ran = pool.submit(job, Scope::Session(state)).await.unwrap();
    (ran.outcome, ran.after)
}

async fn saved(after: After) -> SavedState {
    match after {
        After::Saving(saving) => saving.await.unwrap().expect("saved").state,
        other => panic!("nothing saved: {other:?}"),
    }
}

/// The value of one series in the pool's metrics (0 when absent).
fn metric(pool: &Pool, metrics: &Metrics, series: &str) -> f64 {
    let sandboxes = BTreeMap::from([(Language::Javascript, pool.counts())]);
    metrics
        .render(&sandboxes, &BTreeMap::new())
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits (bounded) until the pool has `idle` idle sandboxes: the worker has restored (and
/// counted) after the last answer.
async fn settle(pool: &Pool, idle: usize) {
    eventually(
        || pool.counts().ready == idle,
        || format!("the pool never settled: {:?}", pool.counts()),
    )
    .await;
}

/// Waits (bounded: 5 s) until `reached`; fails with `why_not` otherwise.
async fn eventually(reached: impl Fn() -> bool, why_not: impl Fn() -> String) {
    for _ in 0..500 {
        if reached() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{}", why_not());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_still_queued_at_its_deadline_is_answered_then_and_costs_no_restore() {
    let (pool, control, _) = pool(1);
    let pool = Arc::new(pool);
    let busy = tokio::spawn({
        let pool = pool.clone();
        async move { submit(&pool, job("sleep:1500", 10_000)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let waited = submit(&pool, job("ok:1", 300)).await;
    let answered_after = started.elapsed();
    assert!(
        matches!(waited, Err(ExecError::NoSandboxAvailable { timeout, .. }) if timeout == Duration::from_millis(300)),
        "{waited:?}"
    );
    // At its deadline, not ANSWER_GRACE (2 s) past it.
    assert!(
        answered_after < Duration::from_millis(300) + ANSWER_GRACE / 2,
        "answered after {answered_after:?}"
    );
    assert_eq!(
        busy.await.unwrap().unwrap().result,
        serde_json::json!("slept")
    );
    settle(&pool, 1).await;
    assert_eq!(
        control.resets.load(Ordering::SeqCst),
        1,
        "only the job that ran costs a restore"
    );
    // The sandbox was left as it was: the next program sees nothing before it.
    let next = submit(&pool, job("seen", 5_000)).await.unwrap();
    assert_eq!(next.result, serde_json::json!(0));
}

/// Waits until the guests were primed `count` times.
async fn primed(control: &Control, count: usize) {
    let primes = || control.primes.load(Ordering::SeqCst);
    eventually(
        || primes() >= count,
        || format!("the sandboxes were primed {} times, not {count}", primes()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_sandbox_is_primed_once_then_after_each_restore_only_when_idle_priming_says_so() {
    for (priming, primes) in [(Priming::WhenIdle, 4), (Priming::Never, 1)] {
        let (pool, control, _) = pool_priming(1, priming);
        // The new sandbox, before its first job: whatever the priming after restores.
        primed(&control, 1).await;
        assert_eq!(control.resets.load(Ordering::SeqCst), 0, "{priming:?}");
        for _ in 0..3 {
            let answered = submit(&pool, job("ok:1", 5_000)).await.unwrap();
            assert_eq!(answered.status, Status::Ok);
            settle(&pool, 1).await;
        }
        assert_eq!(control.resets.load(Ordering::SeqCst), 3, "{priming:?}");
        assert_eq!(control.primes.load(Ordering::SeqCst), primes, "{priming:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poisoned_sandbox_is_restored_and_serves_again_without_a_rebuild() {
    let (pool, control, metrics) = pool(1);
    let looped = submit(&pool, job("spin", 200)).await.unwrap();
    assert_eq!(looped.status, Status::Timeout);
    let aborted = submit(&pool, job("abort", 5_000)).await.unwrap();
    assert_eq!(aborted.error.unwrap().kind, FailureKind::SandboxFailure);
    let next = submit(&pool, job("seen", 5_000)).await.unwrap();
    assert_eq!(
        next.result,
        serde_json::json!(0),
        "nothing of the poisoned calls is left"
    );
    assert_eq!(control.builds.load(Ordering::SeqCst), 1, "no rebuild");
    settle(&pool, 1).await;
    for reason in ["timeout", "guest_failure"] {
        let series = format!(
            r#"hyperlightd_sandboxes_restored_after_poison_total{{language="javascript",reason="{reason}"}}"#
        );
        assert_eq!(metric(&pool, &metrics, &series), 1.0, "{series}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_whose_restore_fails_is_rebuilt_and_counted() {
    let (pool, control, metrics) = pool(1);
    control.failing_resets.store(1, Ordering::SeqCst);
    let first = submit(&pool, job("spin", 100)).await.unwrap();
    assert_eq!(first.status, Status::Timeout);
    let next = submit(&pool, job("seen", 10_000)).await.unwrap();
    assert_eq!(next.result, serde_json::json!(0));
    assert_eq!(control.builds.load(Ordering::SeqCst), 2);
    settle(&pool, 1).await;
    assert_eq!(
        metric(
            &pool,
            &metrics,
            r#"hyperlightd_sandboxes_recycled_total{language="javascript",reason="restore_failed"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_host_function_panics_the_sandbox_is_rebuilt_not_restored() {
    let (pool, control, metrics) = pool(1);
    let failed = submit(&pool, job("host-panic", 5_000)).await.unwrap();
    assert_eq!(failed.error.unwrap().kind, FailureKind::SandboxFailure);
    let next = submit(&pool, job("ok:2", 10_000)).await.unwrap();
    assert_eq!(next.result, serde_json::json!(2));
    assert_eq!(control.builds.load(Ordering::SeqCst), 2);
    settle(&pool, 1).await;
    assert_eq!(
        control.resets.load(Ordering::SeqCst),
        1,
        "one restore, after the second job on the new sandbox; none after the panic"
    );
    assert_eq!(
        metric(
            &pool,
            &metrics,
            r#"hyperlightd_sandboxes_recycled_total{language="javascript",reason="host_panic"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_panics_outside_a_guest_call_starts_again_and_is_counted() {
    let (pool, control, metrics) = pool(1);
    control.panicking_checks.store(1, Ordering::SeqCst);
    let lost = submit(&pool, job("ok:1", 5_000)).await;
    assert!(matches!(lost, Err(ExecError::Internal(_))), "{lost:?}");
    let next = submit(&pool, job("ok:3", 10_000)).await.unwrap();
    assert_eq!(next.result, serde_json::json!(3));
    settle(&pool, 1).await;
    assert_eq!(pool.counts().total, 1, "the pool is back at its size");
    assert_eq!(control.builds.load(Ordering::SeqCst), 2);
    assert_eq!(
        metric(
            &pool,
            &metrics,
            r#"hyperlightd_worker_restarts_total{language="javascript"}"#
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_with_almost_no_time_left_is_still_stopped() {
    // The watchdog fires at once; Hyperlight forgets an interrupt that comes before the call
    // begins, so the watchdog must repeat it.
    let (pool, _, _) = pool(1);
    let started = Instant::now();
    let spun = submit(&pool, job("spin", 1)).await;
    match spun {
        Ok(outcome) => assert_eq!(outcome.status, Status::Timeout),
        Err(e) => assert!(matches!(e, ExecError::NoSandboxAvailable { .. }), "{e:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let next = submit(&pool, job("ok:4", 10_000)).await.unwrap();
    assert_eq!(next.result, serde_json::json!(4));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_that_returns_as_its_tool_wait_ends_at_the_wall_clock_cap_is_stopped_there() {
    // The runner may return before the watchdog interrupts it: the outcome is the cap's all
    // the same, and the sandbox is restored as after any stop.
    let (pool, control, _) = pool(1);
    let (sink, _calls) = tokio::sync::mpsc::unbounded_channel();
    let now = Tool {
        name: "now".into(),
        description: String::new(),
        parameters: serde_json::json!({"type": "object"}),
        validator: Arc::new(jsonschema::validator_for(&serde_json::json!({})).unwrap()),
    };
    let limits = ToolLimits {
        call_timeout: Duration::from_secs(10),
        max_calls: 1,
        max_bytes: 100,
        wall_clock: Duration::from_millis(50),
    };
    let exchange = ToolExchange::new(vec![now], limits, sink, Instant::now());
    let capped = Job {
        tools: Some(Arc::new(exchange)),
        ..job("tool-capped", 10_000)
    };
    let outcome = submit(&pool, capped).await.unwrap();
    assert_eq!(outcome.status, Status::Timeout, "{outcome:?}");
    let error = outcome.error.unwrap();
    assert_eq!(error.kind, FailureKind::WallClock, "{error:?}");
    assert!(error.message.contains("50 ms"), "{error:?}");
    settle(&pool, 1).await;
    assert_eq!(control.resets.load(Ordering::SeqCst), 1);
    let next = submit(&pool, job("seen", 5_000)).await.unwrap();
    assert_eq!(next.result, serde_json::json!(0), "a restored sandbox");
}

#[test]
fn a_worker_whose_step_ran_far_past_its_limit_is_stuck() {
    let shared = Shared::new(2);
    assert_eq!(shared.stuck(), 0);
    shared.step_started(0, &Deadline::new(Instant::now() + Duration::from_secs(1)));
    assert_eq!(shared.stuck(), 0, "a step within its limit");
    // A step that should have ended twice STUCK_AFTER ago.
    let long_ago = Instant::now()
        .checked_sub(STUCK_AFTER * 2)
        .expect("the clock has run long enough");
    let deadline = Deadline::new(long_ago);
    shared.step_started(1, &deadline);
    assert_eq!(shared.stuck(), 1);
    shared.step_ended(1);
    assert_eq!(shared.stuck(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_s_policy_reaches_the_guest_and_its_violations_reach_the_outcome() {
    let (pool, _control, _metrics) = pool(1);
    let mut checked = job("refused:eval", 5_000);
    checked.policy = Some(Policy {
        blocked_functions: vec!["eval".into()],
        ..Default::default()
    });
    let refused = submit(&pool, checked).await.unwrap();
    assert_eq!(refused.status, Status::Error);
    let error = refused.error.unwrap();
    assert_eq!(error.kind, FailureKind::PolicyViolation);
    assert_eq!(
        error.violations,
        [Violation {
            line: 1,
            rule: "blocked_functions".into(),
            name: "eval".into(),
        }]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn output_reaches_a_watching_caller_as_it_is_written_and_its_going_away_stops_the_program() {
    let (pool, _control, _metrics) = pool(1);
    let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let mut printed = job("print:hello", 5_000);
    printed.output = Some(sink);
    let outcome = submit(&pool, printed).await.unwrap();
    assert_eq!(
        outcome.stdout, "hello",
        "the outcome keeps the whole output"
    );
    assert_eq!(
        chunks.recv().await.unwrap(),
        OutputChunk::Running,
        "the program's start comes first"
    );
    assert_eq!(
        chunks.recv().await.unwrap(),
        OutputChunk::Text {
            stream: Stream::Stdout,
            text: "hello".to_owned()
        }
    );

    let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let mut spinning = job("print-spin:working", 60_000);
    spinning.output = Some(sink);
    let running = tokio::spawn(async move { submit(&pool, spinning).await });
    assert_eq!(chunks.recv().await.unwrap(), OutputChunk::Running);
    assert_eq!(
        chunks.recv().await.unwrap(),
        OutputChunk::Text {
            stream: Stream::Stdout,
            text: "working".to_owned()
        }
    );
    drop(chunks);
    // The program spins until interrupted, and its limit is a minute away: only the caller's
    // going away can end it within the bound of this wait.
    let ended = tokio::time::timeout(Duration::from_secs(20), running).await;
    let outcome = ended
        .expect("the program was not stopped when its caller went away")
        .unwrap()
        .unwrap();
    let message = outcome.error.unwrap().message;
    assert!(message.contains("went away"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_files_created_or_changed_come_back() {
    let (pool, _control, _metrics) = pool(1);
    let mut job = job("write:out.txt=new", 5000);
    job.files = [
        ("in.txt".to_owned(), b"same".to_vec()),
        ("out.txt".to_owned(), b"old".to_vec()),
    ]
    .into();
    let outcome = submit(&pool, job).await.unwrap();
    assert_eq!(outcome.status, Status::Ok);
    assert_eq!(
        outcome.files,
        [("out.txt".to_owned(), b"new".to_vec())].into()
    );
}

#[tokio::test]
async fn a_caller_alone_keeps_every_sandbox_busy() {
    let (pool, control, _) = pool(3);
    settle(&pool, 3).await;
    let (a, b, c) = tokio::join!(
        submit(&pool, job("mark:a:1000", 20_000)),
        submit(&pool, job("mark:b:1000", 20_000)),
        submit(&pool, job("mark:c:1000", 20_000)),
    );
    for outcome in [a, b, c] {
        assert_eq!(outcome.unwrap().status, Status::Ok);
    }
    assert_eq!(control.most_marks_running.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_flooding_caller_does_not_keep_another_waiting_behind_its_flood() {
    let (pool, control, _) = pool(2);
    settle(&pool, 2).await;
    let pool = Arc::new(pool);
    let submitted = |uid: u32, code: String| {
        let pool = pool.clone();
        tokio::spawn(async move { submit(&pool, job_of(uid, &code, 60_000)).await })
    };
    // Six jobs of one caller, each held until the test lets it go: two take both sandboxes,
    // four wait (the test's runtime has one thread: every task spawned ran, and queued its
    // job, before the test's next step).
    let flood: Vec<_> = (0..6).map(|n| submitted(1, format!("held:a{n}"))).collect();
    control.wait_for_marks(2).await;
    // Then another caller's job comes, and waits behind them.
    let other = submitted(2, "mark:b:10".to_owned());
    tokio::time::sleep(Duration::from_millis(10)).await;
    // A sandbox comes free: the other caller's job is the next to start, before the four of
    // the flood that waited longer.
    control.release("a0");
    control.wait_for_marks(3).await;
    let mut marks = control.marks.lock().unwrap().clone();
    assert_eq!(marks.pop().as_deref(), Some("b"), "{marks:?}");
    marks.sort();
    assert_eq!(marks, ["a0", "a1"]);
    control.release("*");
    assert_eq!(other.await.unwrap().unwrap().status, Status::Ok);
    for job in flood {
        assert_eq!(job.await.unwrap().unwrap().status, Status::Ok);
    }
}
