//! Durable sessions (`--state-dir`), side by side in one VM boot, per language: how long after
//! an exec's answer its checkpoint reaches the disk; a session exec with the state directory
//! beside a plain warm exec; a daemon's start with N sessions on disk beside one with none; and
//! a parked session's first exec (its state read back from disk) beside a session exec whose
//! state is still in its sandbox.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hyperlightd_client::SessionExecRequest;
use hyperlightd_client::{Client, CreateSessionRequest, ExecRequest, ExecStatus, Language};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

use crate::common::{Daemon, Latency, print_row, python_pool, start_daemon};
use crate::sessions::{TRIVIAL_EXECS, trivial_exec};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, PYTHON_BODY, histogram_totals, wait_until_idle};

/// Execs timed per row (each waits for the last one's checkpoint to reach the disk).
const EXECS: usize = 20;

/// The runtimes measured, and the sessions on disk for their restart rows.
const RUNTIMES: &[(Runtime, usize)] = &[
    (Runtime::Javascript, 20),
    (Runtime::Wasm, 5),
    (Runtime::Native, 3),
];

/// A runtime of the part: JavaScript, or Python on WebAssembly or native.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Runtime {
    Javascript,
    Wasm,
    Native,
}

impl Runtime {
    fn language(self) -> Language {
        match self {
            Runtime::Javascript => Language::Javascript,
            Runtime::Wasm | Runtime::Native => Language::Python,
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Runtime::Javascript => "javascript",
            Runtime::Wasm => "wasm",
            Runtime::Native => "native",
        })
    }
}

/// The part's figures for one language.
#[derive(Debug, Serialize)]
pub struct DurableFigures {
    runtime: Runtime,
    plain_warm: Latency,
    /// A session exec sent once the last one's checkpoint is on disk: its state is still in
    /// the sandbox, and its journal line is synced before the answer.
    session_exec: Latency,
    /// From an exec's answer until the listing says its checkpoint is durable.
    answer_to_disk: Latency,
    /// The daemon's own histogram mean of the same, and of saving the state (which comes first).
    durable_mean_ms: f64,
    save_mean_ms: f64,
    /// Disk one more session's checkpoint takes (beside what the sessions share: the
    /// template's file, linked once): its first, after the body above.
    disk_per_checkpoint_mib: f64,
    /// Disk a trivial exec's checkpoint (`n += 1`) takes, the median of [`TRIVIAL_EXECS`].
    trivial_disk_mib: f64,
    sessions: usize,
    /// Start to ready with no session on disk, and with `sessions` on disk.
    start_empty: Latency,
    start_with_sessions: Latency,
    /// Each session's first exec after the restart: its state read back from disk (every byte
    /// checked), loaded, run; against its second, whose state is then in the sandbox.
    parked_first_exec: Latency,
    hot_exec: Latency,
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let mut figures = Vec::new();
    for &(runtime, sessions) in RUNTIMES {
        let missing = match runtime {
            Runtime::Javascript => None,
            Runtime::Wasm => args.python_guest.is_none().then_some("--python-guest"),
            Runtime::Native => args.python_rootfs.is_none().then_some("--python-rootfs"),
        };
        if let Some(missing) = missing {
            println!("\n(durable) {runtime} NOT RUN (needs {missing})");
            continue;
        }
        eprintln!("(durable) {runtime} ...");
        figures.push(measure(args, runtime, sessions).await?);
    }
    print(&figures);
    Ok(PartReport {
        part: "durable".into(),
        targets: targets(&figures),
        figures: serde_json::to_value(&figures)?,
    })
}

/// Issue 54's targets: an answer's checkpoint on disk within 10 times a plain warm exec (p50),
/// and at most 2 MiB of disk a trivial exec's checkpoint.
fn targets(figures: &[DurableFigures]) -> Vec<Target> {
    figures
        .iter()
        .flat_map(|f| {
            let r = f.runtime;
            [
                Target::at_most(
                    &format!("S54 {r} durable"),
                    &format!("{r} answer to checkpoint on disk / plain warm exec, p50"),
                    f.answer_to_disk.p50_ms / f.plain_warm.p50_ms,
                    10.0,
                ),
                Target::at_most(
                    &format!("S54 {r} disk"),
                    &format!("{r} disk a trivial exec's checkpoint takes, MiB"),
                    f.trivial_disk_mib,
                    2.0,
                ),
            ]
        })
        .collect()
}

/// The program of `language` the rows run, and its answer.
fn program(language: Language) -> &'static str {
    match language {
        Language::Python => PYTHON_BODY,
        _ => BODY,
    }
}

/// Daemon arguments for `runtime` with its state in `state` and templates in `snapshots`.
fn daemon_args(args: &Args, runtime: Runtime, state: &Path, snapshots: &Path) -> Vec<String> {
    let mut extra = vec![
        "--state-dir".to_owned(),
        state.to_string_lossy().into_owned(),
        "--snapshot-dir".to_owned(),
        snapshots.to_string_lossy().into_owned(),
        "--max-sessions".to_owned(),
        "1000".to_owned(),
    ];
    match (runtime, &args.python_guest, &args.python_rootfs) {
        (Runtime::Wasm, Some(guest), _) => {
            extra.extend(args.daemon_args.iter().cloned());
            python_pool(guest, 1, &extra)
        }
        (Runtime::Native, _, Some(rootfs)) => {
            let mut native = crate::native::native_args(args, rootfs, 1);
            native.extend(extra);
            native
        }
        _ => {
            extra.extend(args.daemon_args.iter().cloned());
            extra
        }
    }
}

/// Starts a daemon with `extra` (one JavaScript sandbox, and the Python pool `extra` names).
async fn start(args: &Args, extra: &[String]) -> Result<(Daemon, Duration)> {
    start_daemon(&args.daemon, 1, extra).await
}

/// Stops `daemon` as a supervisor does (SIGTERM), and waits until it has exited.
async fn stop(mut daemon: Daemon) -> Result<()> {
    let pid = Pid::from_raw(i32::try_from(daemon.child.id())?);
    kill(pid, Signal::SIGTERM)?;
    let give_up = Instant::now() + Duration::from_secs(180);
    while daemon.child.try_wait()?.is_none() {
        if Instant::now() > give_up {
            bail!("the daemon did not stop within 180 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Waits until `dir` holds `count` saved templates.
async fn wait_saved(dir: &Path, count: usize) -> Result<()> {
    let give_up = Instant::now() + Duration::from_secs(300);
    loop {
        let saved = std::fs::read_dir(dir)?
            .flatten()
            .filter(|entry| entry.path().join("key.json").is_file())
            .count();
        if saved >= count {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!("the templates were not saved within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `code` in session `id`; its checkpoint number.
async fn session_exec(client: &Client, id: &str, code: &str) -> Result<u64> {
    let response = client
        .session_exec(id, &SessionExecRequest::new(code))
        .await?;
    if response.status != ExecStatus::Ok {
        bail!("{code:?} ended {:?}: {response:?}", response.status);
    }
    Ok(response.session.map_or(0, |s| s.checkpoint))
}

/// The disk the checkpoints take, as the daemon's gauge says.
async fn disk_bytes(client: &Client) -> Result<f64> {
    let metrics = client.metrics().await?;
    Ok(metrics
        .lines()
        .find_map(|l| l.strip_prefix("hyperlightd_session_checkpoint_disk_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(f64::NAN))
}

/// The disk a trivial exec's checkpoint takes in a session of `language`, in MiB: the median
/// growth of the daemon's gauge over [`TRIVIAL_EXECS`] execs of `n += 1`, each on disk.
async fn trivial_disk(client: &Client, language: Language) -> Result<f64> {
    let (start, step) = trivial_exec(language);
    let id = client
        .create_session(&CreateSessionRequest::new(language))
        .await?
        .id;
    let number = session_exec(client, &id, start).await?;
    durable(client, &id, number).await?;
    let mut grown = Vec::with_capacity(TRIVIAL_EXECS);
    for _ in 0..TRIVIAL_EXECS {
        let before = disk_bytes(client).await?;
        let number = session_exec(client, &id, step).await?;
        durable(client, &id, number).await?;
        grown.push((disk_bytes(client).await? - before) / f64::from(1 << 20));
    }
    client.delete_session(&id).await?;
    grown.sort_by(f64::total_cmp);
    Ok(grown[TRIVIAL_EXECS / 2])
}

/// Waits until checkpoint `number` of session `id` is durable.
async fn durable(client: &Client, id: &str, number: u64) -> Result<()> {
    let give_up = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = client.session_checkpoints(id).await?;
        if listed.iter().any(|c| c.checkpoint == number && c.durable) {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!("checkpoint {number} of {id} was not on disk within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn measure(args: &Args, runtime: Runtime, sessions: usize) -> Result<DurableFigures> {
    let language = runtime.language();
    let (state, snapshots) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let extra = daemon_args(args, runtime, state.path(), snapshots.path());
    let (daemon, _) = start(args, &extra).await?;
    let client = daemon.client.clone();
    let code = program(language);
    // The templates are saved in the background once the daemon serves: not while timing.
    let templates = if runtime == Runtime::Javascript { 1 } else { 2 };
    wait_saved(snapshots.path(), templates).await?;
    wait_until_idle(&client).await?;
    let plain = ExecRequest::new(language, code);
    let mut samples = Vec::with_capacity(EXECS);
    for _ in 0..EXECS {
        wait_until_idle(&client).await?;
        let started = Instant::now();
        let response = client.exec(&plain).await?;
        samples.push(started.elapsed());
        if response.status != ExecStatus::Ok {
            bail!("a plain exec ended {:?}", response.status);
        }
    }
    let plain_warm = Latency::of(samples);
    eprintln!("(durable) {runtime}: session execs, each until its checkpoint is on disk ...");

    let id = client
        .create_session(&CreateSessionRequest::new(language))
        .await?
        .id;
    let (mut execs, mut to_disk) = (Vec::new(), Vec::new());
    for _ in 0..EXECS {
        let started = Instant::now();
        let number = session_exec(&client, &id, code).await?;
        let answered = Instant::now();
        execs.push(answered - started);
        durable(&client, &id, number).await?;
        to_disk.push(answered.elapsed());
    }
    let metrics = client.metrics().await?;
    let labels = format!("{{language=\"{language}\"");
    let mean_ms = |name: &str| {
        let (sum, count) = histogram_totals(&metrics, name, &labels);
        sum / count * 1e3
    };
    let durable_mean_ms = mean_ms("hyperlightd_session_checkpoint_durable_seconds");
    let save_mean_ms = mean_ms("hyperlightd_session_save_seconds");
    client.delete_session(&id).await?;

    // Sessions on disk, then a restart. What one more takes on disk is the growth after the
    // first: the first links the template's file, which all share.
    eprintln!("(durable) {runtime}: {sessions} sessions on disk ...");
    let mut ids = Vec::with_capacity(sessions);
    let mut first_disk = f64::NAN;
    for n in 0..sessions {
        if n % 5 == 4 {
            eprintln!("(durable) {runtime}: {} sessions on disk", n + 1);
        }
        let id = client
            .create_session(&CreateSessionRequest::new(language))
            .await?
            .id;
        let number = session_exec(&client, &id, code).await?;
        durable(&client, &id, number).await?;
        ids.push(id);
        if n == 0 {
            first_disk = disk_bytes(&client).await?;
        }
    }
    let disk_per_checkpoint_mib =
        (disk_bytes(&client).await? - first_disk) / (sessions - 1) as f64 / f64::from(1 << 20);
    let trivial_disk_mib = trivial_disk(&client, language).await?;
    stop(daemon).await?;
    eprintln!("(durable) {runtime}: starts with and without the sessions ...");
    let empty_state = tempfile::tempdir()?;
    let empty = daemon_args(args, runtime, empty_state.path(), snapshots.path());
    let mut start_empty = Vec::new();
    let mut start_with_sessions = Vec::new();
    for _ in 0..args.starts.max(1) {
        let (daemon, took) = start(args, &empty).await?;
        start_empty.push(took);
        stop(daemon).await?;
    }
    for _ in 0..args.starts.max(1) - 1 {
        let (daemon, took) = start(args, &extra).await?;
        start_with_sessions.push(took);
        stop(daemon).await?;
    }
    // The last start serves the parked sessions' first execs.
    let (daemon, took) = start(args, &extra).await?;
    start_with_sessions.push(took);
    let client = daemon.client.clone();
    eprintln!("(durable) {runtime}: each parked session's first exec, and its next ...");
    let (mut first, mut hot) = (Vec::new(), Vec::new());
    for (n, id) in ids.iter().enumerate() {
        if n % 5 == 4 {
            eprintln!("(durable) {runtime}: {} parked sessions run", n + 1);
        }
        wait_until_idle(&client).await?;
        let started = Instant::now();
        session_exec(&client, id, code).await?;
        first.push(started.elapsed());
        wait_until_idle(&client).await?;
        let started = Instant::now();
        session_exec(&client, id, code).await?;
        hot.push(started.elapsed());
    }
    stop(daemon).await?;
    Ok(DurableFigures {
        runtime,
        plain_warm,
        session_exec: Latency::of(execs),
        answer_to_disk: Latency::of(to_disk),
        durable_mean_ms,
        save_mean_ms,
        disk_per_checkpoint_mib,
        trivial_disk_mib,
        sessions,
        start_empty: Latency::of(start_empty),
        start_with_sessions: Latency::of(start_with_sessions),
        parked_first_exec: Latency::of(first),
        hot_exec: Latency::of(hot),
    })
}

fn print(figures: &[DurableFigures]) {
    println!("\n(durable) sessions kept in --state-dir (one daemon per language, a pool of one)");
    for f in figures {
        let l = f.runtime;
        print_row(&format!("  {l} plain warm exec"), &f.plain_warm);
        print_row(
            &format!("  {l} session exec (journal synced first)"),
            &f.session_exec,
        );
        print_row(
            &format!("  {l} answer -> checkpoint on disk"),
            &f.answer_to_disk,
        );
        println!(
            "    daemon's means: saving the state {:.1} ms, answer to disk {:.1} ms; disk one more \
             session's first checkpoint takes {:.2} MiB, a trivial exec's checkpoint {:.2} MiB",
            f.save_mean_ms, f.durable_mean_ms, f.disk_per_checkpoint_mib, f.trivial_disk_mib
        );
        print_row(&format!("  {l} start, no session on disk"), &f.start_empty);
        print_row(
            &format!("  {l} start, {} sessions on disk", f.sessions),
            &f.start_with_sessions,
        );
        print_row(
            &format!("  {l} parked session's first exec"),
            &f.parked_first_exec,
        );
        print_row(
            &format!("  {l} its next (state in the sandbox)"),
            &f.hot_exec,
        );
        println!(
            "    session exec p50 / plain warm p50: {:.2}; parked first exec p50 / next p50: \
             {:.2}; start with {} sessions p50 / with none: {:.2}",
            f.session_exec.p50_ms / f.plain_warm.p50_ms,
            f.parked_first_exec.p50_ms / f.hot_exec.p50_ms,
            f.sessions,
            f.start_with_sessions.p50_ms / f.start_empty.p50_ms
        );
    }
}
