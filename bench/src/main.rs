//! Side-by-side benchmark of hyperlightd, one program, one run, so that the figures compare:
//!
//! - (a) hyperlight-js called directly in this process: call, then restore to the snapshot,
//!   with transparent huge pages off as in the daemon (and once more with the system's policy);
//!   (a') the same, but running the program through hyperlightd's runner (what the daemon's
//!   sandboxes run), which tells the runner's cost from the daemon's;
//! - (b) warm execution through the daemon: the client over the Unix socket;
//! - (c) daemon throughput at concurrency 1 and 2;
//! - (d) a fresh `node -e` process per execution, the way a subprocess runner works;
//! - (e) daemon start to ready with a pool of N;
//! - (f) Python beside JavaScript in one daemon (a pool of one each): warm executions of the
//!   same program in each language, taken in turns, each once the daemon's sandboxes are all
//!   idle again (restored, and for Python primed); then each language back to back, where the
//!   restore and priming are paid before the next request; and what a Python sandbox costs to
//!   build;
//! - (g) the Python guest's library and packages: the same guest with an empty library (as
//!   before the library), with the standard library, and a guest with packages; warm requests,
//!   imports, sandbox build and host memory per sandbox (see python_library.rs).
//!
//! - (h) sessions: a session exec beside a plain warm one, a fork, saving and loading a
//!   session's state, host memory per idle session and per sandbox (see sessions.rs).
//!
//! Prints a table and writes the figures as JSON. Run it where KVM runs Hyperlight guests:
//! `cargo xtask bench` builds it in release mode and runs it in the nested-KVM VM if need be.

#![forbid(unsafe_code)]

mod python_library;
mod sessions;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use std::sync::Arc;

use hyperlight_js::{LoadedJSSandbox, SandboxBuilder, Script, Snapshot};
use hyperlightd_client::{Client, ExecRequest, ExecStatus, Language};
use serde::Serialize;

/// The work every contender does: build an array of 100 squares, sum it, stringify the sum.
const BODY: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
                    JSON.stringify(xs.reduce((a, b) => a + b, 0))";
/// What BODY evaluates to.
const EXPECTED: &str = "328350";
/// BODY in Python, for (f).
const PYTHON_BODY: &str =
    "import json\nxs = []\nfor i in range(100):\n    xs.append(i * i)\njson.dumps(sum(xs))";

#[derive(Debug, Parser)]
#[command(name = "hyperlightd-bench")]
struct Args {
    /// The hyperlightd binary to benchmark.
    #[arg(long)]
    daemon: PathBuf,
    /// Timed executions for (a) and (b), after a warm-up.
    #[arg(long, default_value_t = 300)]
    iterations: usize,
    /// Executions per concurrency level for (c).
    #[arg(long, default_value_t = 300)]
    throughput_requests: usize,
    /// Processes started for (d); each costs hundreds of milliseconds.
    #[arg(long, default_value_t = 20)]
    node_iterations: usize,
    /// Pool size for (b), (c) and (e).
    #[arg(long, default_value_t = 2)]
    pool: usize,
    /// Daemon starts timed for (e).
    #[arg(long, default_value_t = 3)]
    starts: usize,
    /// The compiled Python guest for (f) and (g); without it, neither is run and the table
    /// says so.
    #[arg(long)]
    python_guest: Option<PathBuf>,
    /// The Python guest built with sympy, networkx and python-dateutil, for (g); without it,
    /// (g) is not run and the table says so.
    #[arg(long)]
    python_packages_guest: Option<PathBuf>,
    /// Extra arguments for the daemon (repeat), e.g. `--daemon-arg=--guest-heap-mib=16`.
    #[arg(long = "daemon-arg", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    /// Where to write the figures as JSON.
    #[arg(long, default_value = "bench.json")]
    json: PathBuf,
    /// Run (h), sessions, alone: its rows compare within themselves (a session exec beside a
    /// plain one in the same daemon).
    #[arg(long)]
    only_sessions: bool,
}

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Serialize)]
struct Latency {
    samples: usize,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
        Latency {
            samples: samples.len(),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            mean_ms: samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64,
        }
    }
}

#[derive(Debug, Serialize)]
struct Report {
    program: &'static str,
    direct_call: Latency,
    direct_restore: Latency,
    direct_call_and_restore: Latency,
    /// (a) call + restore with the system's transparent huge page policy, before turning it off.
    direct_call_and_restore_system_thp: Latency,
    runner_call: Latency,
    runner_restore: Latency,
    daemon_warm: Latency,
    /// Where (b)'s time goes inside the daemon, from its metrics over the timed requests.
    daemon_breakdown: Breakdown,
    throughput_per_s: Vec<(usize, f64)>,
    direct_throughput_per_s: Vec<(usize, f64)>,
    node_process: Latency,
    daemon_start_to_ready: Latency,
    /// (f), when a Python guest was given.
    python: Option<PythonFigures>,
    /// (g), when both Python guests were given.
    python_library: Option<Vec<python_library::LibraryFigures>>,
    /// (h), JavaScript, and Python when its guest was given.
    sessions: Vec<sessions::SessionFigures>,
    pool: usize,
    ratios: Ratios,
}

/// (f): Python and JavaScript warm through one daemon, taken in turns, and Python's build cost.
#[derive(Debug, Serialize)]
struct PythonFigures {
    javascript_warm: Latency,
    python_warm: Latency,
    /// Where the warm requests' time went inside the daemon, by language.
    javascript_breakdown: Breakdown,
    python_breakdown: Breakdown,
    /// Back to back (the next request sent when the last is answered), pool of one: restore
    /// and priming are on the way of the next request.
    javascript_back_to_back_per_s: f64,
    python_back_to_back_per_s: f64,
    /// Python warm p50 / JavaScript warm p50; target at most 2.
    python_p50_over_javascript_p50: f64,
    /// Building one warm Python sandbox (runtime, component, warm-up call, snapshot), from the
    /// daemon's histogram: the startup probe's.
    python_sandbox_create_ms: f64,
    /// Daemon start to ready with one Python sandbox.
    python_start_to_ready_ms: f64,
}

/// Means over (b)'s timed requests, from the daemon's histograms, in milliseconds.
#[derive(Debug, Default, Serialize)]
struct Breakdown {
    /// Arrival to the end of the execution, without the client and the socket.
    server_side_mean_ms: f64,
    /// Waiting for a sandbox.
    queue_wait_mean_ms: f64,
    /// Inside the guest.
    guest_call_mean_ms: f64,
    /// Restoring after the answer went out (off the request's path).
    restore_mean_ms: f64,
    /// Priming after the restore (Python; off the next request's path).
    prime_mean_ms: f64,
}

impl Breakdown {
    /// The means of what the daemon recorded between two scrapes, for series whose labels start
    /// with `labels` (empty for the first series of each name).
    fn between(before: &str, after: &str, labels: &str) -> Breakdown {
        let mean = |name: &str| {
            let (sum0, count0) = histogram_totals(before, name, labels);
            let (sum1, count1) = histogram_totals(after, name, labels);
            if count1 == count0 {
                return 0.0;
            }
            (sum1 - sum0) / (count1 - count0) * 1e3
        };
        Breakdown {
            server_side_mean_ms: mean("hyperlightd_execution_duration_seconds"),
            queue_wait_mean_ms: mean("hyperlightd_queue_wait_seconds"),
            guest_call_mean_ms: mean("hyperlightd_guest_call_seconds"),
            restore_mean_ms: mean("hyperlightd_sandbox_restore_seconds"),
            prime_mean_ms: mean("hyperlightd_sandbox_prime_seconds"),
        }
    }

    fn print(&self, label: &str) {
        println!(
            "    {label} inside the daemon, means: arrival to answer {:.3} ms = queue wait {:.3} + \
             guest call {:.3} + the daemon's own {:.3}; after the answer: restore {:.3}, prime {:.3}",
            self.server_side_mean_ms,
            self.queue_wait_mean_ms,
            self.guest_call_mean_ms,
            self.server_side_mean_ms - self.queue_wait_mean_ms - self.guest_call_mean_ms,
            self.restore_mean_ms,
            self.prime_mean_ms,
        );
    }
}

/// The sum and count of a Prometheus histogram: the first series of that name whose labels
/// start with `labels` (e.g. `{language="python"`, or empty for any).
fn histogram_totals(metrics: &str, name: &str, labels: &str) -> (f64, f64) {
    let value = |suffix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_{suffix}{labels}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (value("sum"), value("count"))
}

#[derive(Debug, Serialize)]
struct Ratios {
    /// (b) p50 / (a) p50; target at most 0.8.
    daemon_warm_p50_over_direct_p50: f64,
    /// (c) at concurrency 2 / at concurrency 1; target at least 1.8.
    throughput_2_over_1: f64,
    /// (d) p50 / (b) p50; target at least 50.
    node_p50_over_daemon_p50: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.only_sessions {
        return sessions_alone(&args);
    }
    eprintln!("(a) hyperlight-js in-process, the system's transparent huge page policy ...");
    let (_, _, both_system_thp) = direct(args.iterations)?;
    // The daemon turns transparent huge pages off (daemon/src/sys/memory.rs); so does the rest
    // of this run, so that both sides manage memory alike.
    nix::sys::prctl::set_thp_disable(true).context("turning transparent huge pages off")?;
    eprintln!("(a) hyperlight-js in-process ...");
    let (call, restore, both) = direct(args.iterations)?;
    eprintln!("(a') hyperlight-js in-process with hyperlightd's runner ...");
    let (runner, runner_restore) = direct_runner(args.iterations)?;
    eprintln!("(c') hyperlight-js in-process, 1 and 2 threads ...");
    let direct_throughput = [1, 2]
        .into_iter()
        .map(|threads| direct_threads(threads, args.throughput_requests).map(|r| (threads, r)))
        .collect::<Result<Vec<_>>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    eprintln!("(b, c) through the daemon ...");
    let (warm, breakdown, throughput) = runtime.block_on(through_daemon(&args))?;
    eprintln!("(d) node -e per execution ...");
    let node = node_processes(args.node_iterations)?;
    eprintln!("(e) daemon start to ready ...");
    let starts = runtime.block_on(start_to_ready(&args))?;
    let python = match &args.python_guest {
        Some(guest) => {
            eprintln!("(f) Python beside JavaScript ...");
            Some(runtime.block_on(python_beside_javascript(&args, guest))?)
        }
        None => None,
    };
    let python_library = match (&args.python_guest, &args.python_packages_guest) {
        (Some(guest), Some(packages)) => {
            Some(runtime.block_on(python_library::library_costs(&args, guest, packages))?)
        }
        _ => None,
    };
    let sessions = runtime.block_on(sessions::session_costs(&args))?;

    let per_s = |c: usize| -> f64 {
        throughput
            .iter()
            .find(|(n, _)| *n == c)
            .map_or(f64::NAN, |(_, r)| *r)
    };
    let report = Report {
        program: BODY,
        ratios: Ratios {
            daemon_warm_p50_over_direct_p50: warm.p50_ms / both.p50_ms,
            throughput_2_over_1: per_s(2) / per_s(1),
            node_p50_over_daemon_p50: node.p50_ms / warm.p50_ms,
        },
        direct_call: call,
        direct_restore: restore,
        direct_call_and_restore: both,
        direct_call_and_restore_system_thp: both_system_thp,
        runner_call: runner,
        runner_restore,
        daemon_warm: warm,
        daemon_breakdown: breakdown,
        throughput_per_s: throughput,
        direct_throughput_per_s: direct_throughput,
        node_process: node,
        daemon_start_to_ready: starts,
        python,
        python_library,
        sessions,
        pool: args.pool,
    };
    print_table(&report);
    std::fs::write(&args.json, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", args.json.display()))?;
    println!("\nfigures written to {}", args.json.display());
    Ok(())
}

/// Runs (h) alone and prints its rows.
fn sessions_alone(args: &Args) -> Result<()> {
    nix::sys::prctl::set_thp_disable(true).context("turning transparent huge pages off")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let figures = runtime.block_on(sessions::session_costs(args))?;
    sessions::print(&figures, print_row);
    std::fs::write(&args.json, serde_json::to_string_pretty(&figures)?)
        .with_context(|| format!("writing {}", args.json.display()))?;
    println!("\nfigures written to {}", args.json.display());
    Ok(())
}

/// A sandbox with hyperlight-js's defaults and the program registered as the handler `bench`,
/// loaded, with the snapshot to restore it to.
fn bench_sandbox() -> Result<(LoadedJSSandbox, Arc<Snapshot>)> {
    let handler = format!(
        "function handler(event) {{ return {{ result: (() => {{ {} }})() }}; }}",
        BODY.replacen("JSON.stringify", "return JSON.stringify", 1)
    );
    let mut runtime = SandboxBuilder::new().build()?.load_runtime()?;
    runtime.add_handler("bench", Script::from_content(handler))?;
    let mut sandbox = runtime.get_loaded_sandbox()?;
    let snapshot = sandbox.snapshot()?;
    Ok((sandbox, snapshot))
}

/// (a): one sandbox, the program as a registered handler, called then restored each time.
fn direct(iterations: usize) -> Result<(Latency, Latency, Latency)> {
    let (mut sandbox, snapshot) = bench_sandbox()?;
    let (mut calls, mut restores, mut both) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations + 20 {
        let start = Instant::now();
        let reply = sandbox.handle_event("bench", "{}".to_owned(), Some(false))?;
        let called = Instant::now();
        sandbox.restore(snapshot.clone())?;
        let restored = Instant::now();
        if !reply.contains(EXPECTED) {
            bail!("direct call answered {reply}");
        }
        if i >= 20 {
            calls.push(called - start);
            restores.push(restored - called);
            both.push(restored - start);
        }
    }
    Ok((Latency::of(calls), Latency::of(restores), Latency::of(both)))
}

/// (c'): `threads` threads, each with its own sandbox, calling and restoring as fast as they
/// can: how far Hyperlight itself scales on this machine, without the daemon.
fn direct_threads(threads: usize, requests: usize) -> Result<f64> {
    let per_thread = requests / threads;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || -> Result<()> {
                let (mut sandbox, snapshot) = bench_sandbox()?;
                barrier.wait();
                for _ in 0..per_thread {
                    sandbox.handle_event("bench", "{}".to_owned(), Some(false))?;
                    sandbox.restore(snapshot.clone())?;
                }
                Ok(())
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for worker in workers {
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))??;
    }
    Ok((per_thread * threads) as f64 / start.elapsed().as_secs_f64())
}

/// (a'): hyperlightd's runner in a sandbox with the daemon's default sizes, called directly
/// with the program: the runner's own cost, without the daemon.
fn direct_runner(iterations: usize) -> Result<(Latency, Latency)> {
    // The daemon's default sizes: a 64 MiB heap, an input buffer that carries the runner when
    // it is registered, and scratch for both and the runtime's own memory.
    let heap: usize = 64 << 20;
    let input_buffer =
        (2 * hyperlightd::JAVASCRIPT_RUNNER.len() + (64 << 10)).next_multiple_of(4096);
    let mut proto = SandboxBuilder::new()
        .with_guest_heap_size(heap as u64)
        .with_guest_input_buffer_size(input_buffer)
        .with_guest_scratch_size(heap + input_buffer + (2 << 20) + (16 << 20))
        .build()?;
    proto.register("hyperlightd", "write", |_stream: u8, _text: String| true)?;
    let started = Instant::now();
    proto.register("hyperlightd", "now", move |_: u8| {
        started.elapsed().as_secs_f64() * 1e3
    })?;
    proto.register("hyperlightd", "sleep", |ms: f64| {
        std::thread::sleep(Duration::from_secs_f64(ms.clamp(0.0, 100.0) / 1e3));
    })?;
    proto.register("hyperlightd", "random", |bytes: usize| {
        "00".repeat(bytes.min(4096))
    })?;
    let mut runtime = proto.load_runtime()?;
    runtime.add_handler("run", Script::from_content(hyperlightd::JAVASCRIPT_RUNNER))?;
    let mut sandbox = runtime.get_loaded_sandbox()?;
    let snapshot = sandbox.snapshot()?;
    let event = serde_json::json!({
        "code": BODY,
        "max_result_bytes": 1 << 20,
        "seed": "0123456789abcdef0123456789abcdef",
    })
    .to_string();
    let mut calls = Vec::new();
    let mut restores = Vec::new();
    for i in 0..iterations + 20 {
        let start = Instant::now();
        let reply = sandbox.handle_event("run", event.clone(), Some(false))?;
        let called = start.elapsed();
        let restoring = Instant::now();
        sandbox.restore(snapshot.clone())?;
        if i >= 20 {
            restores.push(restoring.elapsed());
        }
        if !reply.contains(EXPECTED) {
            bail!("the runner answered {reply}");
        }
        if i >= 20 {
            calls.push(called);
        }
    }
    Ok((Latency::of(calls), Latency::of(restores)))
}

/// A daemon on a temporary socket, killed when dropped.
struct Daemon {
    child: Child,
    client: Client,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the daemon and returns it once ready, with the time that took.
async fn start_daemon(binary: &Path, pool: usize, extra: &[String]) -> Result<(Daemon, Duration)> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("bench.sock");
    let started = Instant::now();
    let child = Command::new(binary)
        .arg("--socket")
        .arg(&socket)
        .args([
            "--pool",
            &format!("javascript={pool}"),
            "--queue-depth",
            "1024",
        ])
        .args(extra)
        .env("HYPERLIGHTD_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut daemon = Daemon {
        child,
        client: Client::connect(&socket),
        _dir: dir,
    };
    loop {
        if let Ok(health) = daemon.client.health().await
            && health.ready
        {
            return Ok((daemon, started.elapsed()));
        }
        if let Some(status) = daemon.child.try_wait()? {
            bail!("the daemon exited during startup ({status})");
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the daemon was not ready within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn exec_checked(client: &Client, request: &ExecRequest) -> Result<()> {
    let response = client.exec(request).await?;
    if response.status != ExecStatus::Ok || response.result != serde_json::json!(EXPECTED) {
        bail!("the daemon answered {response:?}");
    }
    Ok(())
}

/// (b), where its time went inside the daemon, and (c).
async fn through_daemon(args: &Args) -> Result<(Latency, Breakdown, Vec<(usize, f64)>)> {
    let (daemon, _) = start_daemon(&args.daemon, args.pool, &args.daemon_args).await?;
    let request = ExecRequest::new(Language::Javascript, BODY);
    for _ in 0..20 {
        exec_checked(&daemon.client, &request).await?;
    }
    let before = daemon.client.metrics().await?;
    let mut samples = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let start = Instant::now();
        exec_checked(&daemon.client, &request).await?;
        samples.push(start.elapsed());
    }
    let after = daemon.client.metrics().await?;
    let breakdown = Breakdown::between(&before, &after, "");
    let mut throughput = Vec::new();
    for concurrency in [1, 2] {
        let per_task = args.throughput_requests / concurrency;
        let start = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let client = daemon.client.clone();
                let request = request.clone();
                tokio::spawn(async move {
                    for _ in 0..per_task {
                        exec_checked(&client, &request).await?;
                    }
                    anyhow::Ok(())
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        let done = per_task * concurrency;
        throughput.push((concurrency, done as f64 / start.elapsed().as_secs_f64()));
    }
    Ok((Latency::of(samples), breakdown, throughput))
}

/// (f).
async fn python_beside_javascript(args: &Args, guest: &Path) -> Result<PythonFigures> {
    let mut extra = vec![
        "--pool".to_owned(),
        "python=1".to_owned(),
        "--python-guest".to_owned(),
        guest.to_string_lossy().into_owned(),
    ];
    extra.extend(args.daemon_args.iter().cloned());
    let (daemon, start_to_ready) = start_daemon(&args.daemon, 1, &extra).await?;
    let client = &daemon.client;
    let js = ExecRequest::new(Language::Javascript, BODY);
    let py = ExecRequest::new(Language::Python, PYTHON_BODY);
    // Times one request sent once every sandbox is idle (restored, and primed).
    let warm = |request: &ExecRequest| {
        let request = request.clone();
        async move {
            wait_until_idle(client).await?;
            let start = Instant::now();
            exec_checked(client, &request).await?;
            anyhow::Ok(start.elapsed())
        }
    };
    for _ in 0..10 {
        warm(&js).await?;
        warm(&py).await?;
    }
    let before = client.metrics().await?;
    let (mut js_samples, mut py_samples) = (Vec::new(), Vec::new());
    for _ in 0..args.iterations {
        js_samples.push(warm(&js).await?);
        py_samples.push(warm(&py).await?);
    }
    let after = client.metrics().await?;
    let back_to_back = |request: &ExecRequest| {
        let request = request.clone();
        async move {
            wait_until_idle(client).await?;
            let n = args.iterations.div_ceil(3);
            let start = Instant::now();
            for _ in 0..n {
                exec_checked(client, &request).await?;
            }
            anyhow::Ok(n as f64 / start.elapsed().as_secs_f64())
        }
    };
    let javascript_back_to_back_per_s = back_to_back(&js).await?;
    let python_back_to_back_per_s = back_to_back(&py).await?;
    let metrics = client.metrics().await?;
    let (create_sum, create_count) = histogram_totals(
        &metrics,
        "hyperlightd_sandbox_create_seconds",
        "{language=\"python\"",
    );
    let javascript_warm = Latency::of(js_samples);
    let python_warm = Latency::of(py_samples);
    Ok(PythonFigures {
        python_p50_over_javascript_p50: python_warm.p50_ms / javascript_warm.p50_ms,
        javascript_warm,
        python_warm,
        javascript_breakdown: Breakdown::between(&before, &after, "{language=\"javascript\""),
        python_breakdown: Breakdown::between(&before, &after, "{language=\"python\""),
        javascript_back_to_back_per_s,
        python_back_to_back_per_s,
        python_sandbox_create_ms: create_sum / create_count * 1e3,
        python_start_to_ready_ms: start_to_ready.as_secs_f64() * 1e3,
    })
}

/// Polls the daemon's health until every sandbox is idle: restored, primed, and not running
/// anything that would share the CPUs with the request about to be timed.
async fn wait_until_idle(client: &Client) -> Result<()> {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let health = client.health().await?;
        if health.sandboxes.values().all(|c| c.ready == c.target) {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!("the daemon's sandboxes were not all idle after 30 s: {health:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// (d): a new node process per execution.
fn node_processes(iterations: usize) -> Result<Latency> {
    let program = BODY.replacen("JSON.stringify", "console.log(JSON.stringify", 1) + ")";
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let out = Command::new("node")
            .args(["-e", &program])
            .output()
            .context("running node (is Node.js installed?)")?;
        samples.push(start.elapsed());
        if String::from_utf8_lossy(&out.stdout).trim() != EXPECTED {
            bail!("node printed {:?}", String::from_utf8_lossy(&out.stdout));
        }
    }
    Ok(Latency::of(samples))
}

/// (e).
async fn start_to_ready(args: &Args) -> Result<Latency> {
    let mut samples = Vec::with_capacity(args.starts);
    for _ in 0..args.starts {
        let (_daemon, elapsed) = start_daemon(&args.daemon, args.pool, &args.daemon_args).await?;
        samples.push(elapsed);
    }
    Ok(Latency::of(samples))
}

/// One latency row of the table.
fn print_row(name: &str, l: &Latency) {
    println!(
        "{name:<52} {:>10.3} {:>10.3} {:>10.3} {:>6}",
        l.p50_ms, l.p99_ms, l.mean_ms, l.samples
    );
}

fn print_table(r: &Report) {
    let row = print_row;
    println!("\nprogram: {}\n", r.program);
    println!(
        "{:<52} {:>10} {:>10} {:>10} {:>6}",
        "", "p50 ms", "p99 ms", "mean ms", "n"
    );
    row("(a) hyperlight-js direct: call", &r.direct_call);
    row("(a) hyperlight-js direct: restore", &r.direct_restore);
    row(
        "(a) hyperlight-js direct: call + restore",
        &r.direct_call_and_restore,
    );
    row(
        "(a) ... call + restore, system's huge page policy",
        &r.direct_call_and_restore_system_thp,
    );
    row(
        "(a') hyperlight-js direct, hyperlightd's runner: call",
        &r.runner_call,
    );
    row("(a') ... restore", &r.runner_restore);
    row("(b) daemon, warm, client over the socket", &r.daemon_warm);
    row("(d) node -e, a process per execution", &r.node_process);
    row(
        &format!("(e) daemon start to ready, pool of {}", r.pool),
        &r.daemon_start_to_ready,
    );
    r.daemon_breakdown.print("(b)");
    println!();
    for (concurrency, per_s) in &r.throughput_per_s {
        println!("(c) daemon throughput at concurrency {concurrency}: {per_s:.1} executions/s");
    }
    for (threads, per_s) in &r.direct_throughput_per_s {
        println!("(c') hyperlight-js in-process, {threads} thread(s): {per_s:.1} calls+restores/s");
    }
    match &r.python {
        Some(p) => {
            println!();
            row("(f) JavaScript warm, beside Python", &p.javascript_warm);
            row("(f) Python warm, beside JavaScript", &p.python_warm);
            p.javascript_breakdown.print("(f) JavaScript");
            p.python_breakdown.print("(f) Python");
            println!(
                "(f) back to back, pool of one: JavaScript {:.1} executions/s, Python {:.1} executions/s",
                p.javascript_back_to_back_per_s, p.python_back_to_back_per_s
            );
            println!(
                "(f) Python sandbox build (mean): {:.1} ms; daemon start to ready with javascript=1, python=1: {:.1} ms",
                p.python_sandbox_create_ms, p.python_start_to_ready_ms
            );
        }
        None => println!("\n(f) Python: NOT RUN (no --python-guest)"),
    }
    match &r.python_library {
        Some(figures) => python_library::print(figures, row),
        None => println!(
            "\n(g) Python library: NOT RUN (needs --python-guest and --python-packages-guest)"
        ),
    }
    sessions::print(&r.sessions, row);
    let check = |ok: bool| if ok { "met" } else { "NOT met" };
    let ratios = &r.ratios;
    println!(
        "\n(b) p50 / (a) p50 = {:.2}  (target <= 0.8: {})",
        ratios.daemon_warm_p50_over_direct_p50,
        check(ratios.daemon_warm_p50_over_direct_p50 <= 0.8)
    );
    println!(
        "(c) concurrency 2 / concurrency 1 = {:.2}  (target >= 1.8: {})",
        ratios.throughput_2_over_1,
        check(ratios.throughput_2_over_1 >= 1.8)
    );
    println!(
        "(d) p50 / (b) p50 = {:.1}  (target >= 50: {})",
        ratios.node_p50_over_daemon_p50,
        check(ratios.node_p50_over_daemon_p50 >= 50.0)
    );
    if let Some(p) = &r.python {
        println!(
            "(f) Python p50 / JavaScript p50 = {:.2}  (target <= 2: {})",
            p.python_p50_over_javascript_p50,
            check(p.python_p50_over_javascript_p50 <= 2.0)
        );
    }
}
