//! (h) Sessions, side by side with plain warm execs in one daemon, in every runtime given
//! (JavaScript, WebAssembly Python, native Python): a session exec's latency paced and sent the
//! moment the last answer arrives beside a plain one's, a fork's latency, the time to save and
//! load a session's state, what a checkpoint holds after a trivial exec and after one that
//! writes 8 MiB, host memory per idle session after a typical cell (a 10,000-row DataFrame for
//! native Python), the most idle sessions the default budget holds, and, for the alternative of
//! keeping each idle session in a parked sandbox, host memory per sandbox. Issue 54's targets.

use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};
use hyperlightd_client::{
    Client, CreateSessionRequest, ExecRequest, ExecStatus, Language, SessionExecRequest,
};
use serde::Serialize;

use crate::capacity::{KvmCounts, WorkerCost, worker_cost};
use crate::python_library::{resident_mib, status_mib};
use crate::targets::Target;
use crate::{Args, BODY, Latency, PYTHON_BODY, histogram_totals, start_daemon, wait_until_idle};

/// The daemon's default budget for session state (`--session-memory-mib`).
const DEFAULT_BUDGET_MIB: f64 = 4096.0;

/// Idle sessions created to measure memory per session.
const IDLE_SESSIONS: usize = 20;

/// Sessions one daemon serves in the native runtime's row of issue 54 (the idle ones included).
const SERVED_SESSIONS: usize = 100;

/// Trivial execs whose checkpoints are measured.
pub const TRIVIAL_EXECS: usize = 5;

/// What the exec that writes N MiB writes.
const WRITTEN_MIB: f64 = 8.0;

/// Execs of the long chain: a session exec after them is timed beside one after the first.
const LONG_CHAIN: usize = 1000;

/// Forks made, run once and deleted, to see that the daemon's memory stays flat.
const FORK_CHURN: usize = 1000;
/// What "flat" allows of the daemon's resident memory over the second half of the forks: the
/// allocator's and the kernel's own noise, not a fork's worth of pages each.
const FLAT_MIB: f64 = 4.0;

/// Paced session execs timed after the first exec, and after the long chain.
const CHAIN_SAMPLES: usize = 10;

/// Timed session execs and forks per language: each session exec waits for the state the last
/// one left to be saved (seconds for Python under emulation), so fewer than plain execs.
const SESSION_ITERATIONS: usize = 30;

/// (h)'s figures for one language.
#[derive(Debug, Serialize)]
pub struct SessionFigures {
    language: Language,
    /// The runtime: "javascript", "wasm" or "native".
    runtime: &'static str,
    /// The typical cell each idle session ran.
    cell: &'static str,
    plain_warm: Latency,
    session_exec: Latency,
    /// A session exec sent the moment the previous one's answer arrived, as an agent sends
    /// them: it waits for the state the previous exec left to be saved.
    back_to_back: Latency,
    /// The `queued_ms` those back-to-back execs reported: waiting for the save, which their
    /// time limits leave out.
    back_to_back_queued: Latency,
    fork: Latency,
    /// Saving a session's state after an exec (off the answer's path), daemon's histogram mean.
    save_mean_ms: f64,
    /// Loading it into a sandbox before an exec, daemon's histogram mean.
    load_mean_ms: f64,
    /// Growth of the daemon's resident memory per idle session after the cell.
    resident_per_idle_session_mib: f64,
    /// What the daemon accounts per idle session (its budget counts this).
    accounted_per_idle_session_mib: f64,
    /// The default budget over the accounted memory per session.
    idle_sessions_in_default_budget: f64,
    /// A parked sandbox per session instead: daemon resident memory with three sandboxes of the
    /// language less with one, halved.
    resident_per_pool_sandbox_mib: f64,
    /// What a checkpoint holds of its own after a trivial exec (`n += 1`), median of
    /// [`TRIVIAL_EXECS`], as the listing counts it.
    trivial_checkpoint_mib: f64,
    /// The same after an exec that writes [`WRITTEN_MIB`] of fresh bytes.
    written_checkpoint_mib: f64,
    /// What the memory the sessions hold grew by with a fork of each idle session (nothing
    /// until a fork writes).
    fork_added_mib: f64,
    /// Sessions that ran the cell and answered, of [`SERVED_SESSIONS`] (native Python only).
    sessions_served: Option<usize>,
    /// Where a worker's time goes per plain warm exec and per paced session exec (its save
    /// included), from the daemon's worker counters and KVM's; None if not counted.
    plain_cost: Option<WorkerCost>,
    paced_cost: Option<WorkerCost>,
    /// A paced session exec after its session's first exec, and after [`LONG_CHAIN`].
    after_first_exec: Latency,
    after_long_chain: Latency,
    /// The daemon's resident memory's growth over the long chain, and over [`FORK_CHURN`]
    /// forks each run once and deleted, in MiB.
    long_chain_growth_mib: f64,
    fork_churn_growth_mib: f64,
    /// The growth over the second half of the forks alone: about none once what the daemon
    /// keeps for reuse (scratch pages a sandbox keeps mapped, snapshot pages read) is there.
    fork_churn_second_half_mib: f64,
    /// The same growth over the forks, by kind of memory.
    fork_churn_growth: ProcessMemory,
}

/// What one language's run needs.
struct Subject {
    language: Language,
    runtime: &'static str,
    /// The warm-latency program and its result.
    program: &'static str,
    /// The typical cell for idle sessions.
    cell: &'static str,
    /// For a pool of `n` of this language: the JavaScript pool's size and the daemon's other
    /// arguments.
    pool: Box<dyn Fn(usize) -> (usize, Vec<String>)>,
}

/// Runs (h) for JavaScript, and for Python when its guest is given.
pub async fn session_costs(args: &Args) -> Result<Vec<SessionFigures>> {
    let daemon_args = args.daemon_args.clone();
    let mut subjects = vec![Subject {
        language: Language::Javascript,
        runtime: "javascript",
        program: BODY,
        cell: "const graph = Array.from({length: 10000}, (_, i) => ({id: i, name: 'node ' + i, \
               edges: [i + 1, i + 2]})); graph.length",
        pool: Box::new(move |n| (n, daemon_args.clone())),
    }];
    if let Some(guest) = args.python_guest.clone() {
        let daemon_args = args.daemon_args.clone();
        subjects.push(Subject {
            language: Language::Python,
            runtime: "wasm",
            program: PYTHON_BODY,
            cell: "rows = [i * i for i in range(10000)]\nlen(rows)",
            pool: Box::new(move |n| {
                let mut extra = daemon_args.clone();
                extra.extend([
                    "--pool".into(),
                    format!("python={n}"),
                    "--python-guest".into(),
                    guest.to_string_lossy().into_owned(),
                ]);
                (1, extra)
            }),
        });
    }
    if let Some(rootfs) = args.python_rootfs.clone() {
        let daemon_args = args.daemon_args.clone();
        subjects.push(Subject {
            language: Language::Python,
            runtime: "native",
            program: PYTHON_BODY,
            cell: "import pandas as pd\nframe = pd.DataFrame({'k': [i % 7 for i in \
                   range(10000)], 'v': range(10000)})\nlen(frame)",
            pool: Box::new(move |n| (1, crate::native::native_pool(&rootfs, n, &daemon_args))),
        });
    }
    let mut figures = Vec::new();
    for subject in &subjects {
        eprintln!("(h) sessions: {} ...", subject.runtime);
        let measured = measure(args, subject).await?;
        print(std::slice::from_ref(&measured), crate::common::print_row);
        figures.push(measured);
    }
    Ok(figures)
}

async fn measure(args: &Args, subject: &Subject) -> Result<SessionFigures> {
    let n = args.iterations.min(100);
    let pool_memory = pool_sandbox_memory(&args.daemon, subject).await?;
    let (daemon, _) = start(&args.daemon, subject, 1).await?;
    let client = &daemon.client;
    wait_until_idle(client).await?;
    let plain = ExecRequest::new(subject.language, subject.program);
    let mut samples = Vec::with_capacity(n);
    let counted = Counted::start(client).await?;
    for _ in 0..n {
        wait_until_idle(client).await?;
        let started = Instant::now();
        check(client.exec(&plain).await?.status, &plain.code)?;
        samples.push(started.elapsed());
    }
    let plain_warm = Latency::of(samples);
    let plain_cost = counted.cost(client, subject, "plain").await?;

    let id = client
        .create_session(&CreateSessionRequest::new(subject.language))
        .await?
        .id;
    let exec = SessionExecRequest::new(subject.program);
    let n = n.min(SESSION_ITERATIONS);
    let mut samples = Vec::with_capacity(n);
    let counted = Counted::start(client).await?;
    for _ in 0..n {
        // The state the last exec left is saved and the worker back to warm.
        wait_until_idle(client).await?;
        let started = Instant::now();
        check(
            client.session_exec(&id, &exec).await?.status,
            subject.program,
        )?;
        samples.push(started.elapsed());
    }
    let session_exec = Latency::of(samples);
    wait_until_idle(client).await?;
    let paced_cost = counted.cost(client, subject, "session").await?;
    let (mut samples, mut queued) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let started = Instant::now();
        let response = client.session_exec(&id, &exec).await?;
        samples.push(started.elapsed());
        check(response.status, subject.program)?;
        queued.push(std::time::Duration::from_secs_f64(response.queued_ms / 1e3));
    }
    let (back_to_back, back_to_back_queued) = (Latency::of(samples), Latency::of(queued));
    wait_until_idle(client).await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let fork = client.fork_session(&id).await?;
        samples.push(started.elapsed());
        client.delete_session(&fork.id).await?;
    }
    let fork = Latency::of(samples);
    client.delete_session(&id).await?;

    let metrics = client.metrics().await?;
    let labels = format!("{{language=\"{}\"", subject.language);
    let mean_ms = |name: &str| {
        let (sum, count) = histogram_totals(&metrics, name, &labels);
        sum / count * 1e3
    };
    let (save_mean_ms, load_mean_ms) = (
        mean_ms("hyperlightd_session_save_seconds"),
        mean_ms("hyperlightd_session_load_seconds"),
    );

    let (trivial_checkpoint_mib, written_checkpoint_mib) =
        checkpoint_sizes(client, subject).await?;
    let chain = long_chain(client, subject, daemon.child.id()).await?;

    let before = resident_mib(daemon.child.id())?;
    let cell = SessionExecRequest::new(subject.cell);
    let mut idle = Vec::with_capacity(IDLE_SESSIONS);
    for _ in 0..IDLE_SESSIONS {
        let id = client
            .create_session(&CreateSessionRequest::new(subject.language))
            .await?
            .id;
        check(client.session_exec(&id, &cell).await?.status, subject.cell)?;
        idle.push(id);
    }
    wait_until_idle(client).await?;
    let after = resident_mib(daemon.child.id())?;
    let held = |health: &hyperlightd_client::HealthResponse| {
        health.sessions[&subject.language].memory_bytes as f64 / f64::from(1 << 20)
    };
    let health = client.health().await?;
    let accounted = held(&health) / IDLE_SESSIONS as f64;
    for id in &idle {
        client.fork_session(id).await?;
    }
    let fork_added_mib = held(&client.health().await?) - held(&health);
    let sessions_served = if subject.runtime == "native" {
        Some(
            serve_many(client, subject, SERVED_SESSIONS - 2 * IDLE_SESSIONS).await?
                + 2 * IDLE_SESSIONS,
        )
    } else {
        None
    };
    Ok(SessionFigures {
        language: subject.language,
        runtime: subject.runtime,
        trivial_checkpoint_mib,
        written_checkpoint_mib,
        fork_added_mib,
        sessions_served,
        after_first_exec: chain.after_first,
        after_long_chain: chain.after_long,
        long_chain_growth_mib: chain.chain_growth_mib,
        fork_churn_growth_mib: chain.churn_growth_mib,
        fork_churn_second_half_mib: chain.churn_second_half_mib,
        fork_churn_growth: chain.churn_growth,
        cell: subject.cell,
        plain_cost,
        paced_cost,
        plain_warm,
        session_exec,
        back_to_back,
        back_to_back_queued,
        fork,
        save_mean_ms,
        load_mean_ms,
        resident_per_idle_session_mib: (after - before) / IDLE_SESSIONS as f64,
        accounted_per_idle_session_mib: accounted,
        idle_sessions_in_default_budget: DEFAULT_BUDGET_MIB / accounted,
        resident_per_pool_sandbox_mib: pool_memory,
    })
}

/// A trivial exec of `language` (`n += 1`), and the exec that sets `n` before it.
pub fn trivial_exec(language: Language) -> (&'static str, &'static str) {
    match language {
        Language::Python => ("n = 0", "n += 1"),
        _ => ("globalThis.n = 0", "n += 1"),
    }
}

/// What a checkpoint holds of its own, in MiB: after a trivial exec (the median of
/// [`TRIVIAL_EXECS`]) and after an exec that writes [`WRITTEN_MIB`] of fresh bytes.
async fn checkpoint_sizes(client: &Client, subject: &Subject) -> Result<(f64, f64)> {
    let (start, step) = trivial_exec(subject.language);
    let write = match subject.language {
        Language::Python => "blob = bytes(range(1, 256)) * (8 * 1024 * 1024 // 255)\nlen(blob)",
        _ => "globalThis.blob = new Uint8Array(8 * 1024 * 1024).fill(7); blob.length",
    };
    let id = client
        .create_session(&CreateSessionRequest::new(subject.language))
        .await?
        .id;
    let own = |checkpoints: &[hyperlightd_client::CheckpointInfo], number: u64| {
        checkpoints
            .iter()
            .find(|c| c.checkpoint == number)
            .map_or(f64::NAN, |c| c.bytes as f64 / f64::from(1 << 20))
    };
    run_in(client, &id, start).await?;
    let mut trivial = Vec::with_capacity(TRIVIAL_EXECS);
    for _ in 0..TRIVIAL_EXECS {
        wait_until_idle(client).await?;
        let number = run_in(client, &id, step).await?;
        trivial.push(own(&client.session_checkpoints(&id).await?, number));
    }
    trivial.sort_by(f64::total_cmp);
    wait_until_idle(client).await?;
    let number = run_in(client, &id, write).await?;
    let written = own(&client.session_checkpoints(&id).await?, number);
    client.delete_session(&id).await?;
    Ok((trivial[TRIVIAL_EXECS / 2], written))
}

/// What the long chain measured.
struct Chain {
    after_first: Latency,
    after_long: Latency,
    chain_growth_mib: f64,
    churn_growth_mib: f64,
    churn_second_half_mib: f64,
    churn_growth: ProcessMemory,
}

/// A session of [`LONG_CHAIN`] trivial execs: paced execs timed after its first and after the
/// chain, the daemon's (`pid`) resident memory over the chain; then [`FORK_CHURN`] forks of it,
/// each run once and deleted, and the memory over them.
async fn long_chain(client: &Client, subject: &Subject, pid: u32) -> Result<Chain> {
    let step = match subject.language {
        Language::Python => "n = globals().get('n', 0) + 1",
        _ => "globalThis.n = (globalThis.n || 0) + 1",
    };
    let id = client
        .create_session(&CreateSessionRequest::new(subject.language))
        .await?
        .id;
    run_in(client, &id, step).await?;
    let after_first = paced(client, &id, step).await?;
    wait_until_idle(client).await?;
    let before = resident_mib(pid)?;
    for n in CHAIN_SAMPLES + 1..LONG_CHAIN {
        if n % 200 == 0 {
            eprintln!("(h) sessions: {n} of {LONG_CHAIN} execs of the long chain");
        }
        run_in(client, &id, step).await?;
    }
    wait_until_idle(client).await?;
    let chain_growth_mib = resident_mib(pid)? - before;
    let after_long = paced(client, &id, step).await?;
    wait_until_idle(client).await?;
    let before = resident_mib(pid)?;
    let parts_before = ProcessMemory::read(pid)?;
    let mut half = 0.0;
    for n in 0..FORK_CHURN {
        if n == FORK_CHURN / 2 {
            wait_until_idle(client).await?;
            half = resident_mib(pid)?;
        }
        if n % 200 == 199 {
            eprintln!(
                "(h) sessions: {} of {FORK_CHURN} forks run and deleted",
                n + 1
            );
        }
        let fork = client.fork_session(&id).await?;
        run_in(client, &fork.id, step).await?;
        client.delete_session(&fork.id).await?;
    }
    wait_until_idle(client).await?;
    let after = resident_mib(pid)?;
    let churn_growth_mib = after - before;
    let churn_second_half_mib = after - half;
    let churn_growth = ProcessMemory::read(pid)?.minus(&parts_before);
    client.delete_session(&id).await?;
    Ok(Chain {
        after_first,
        after_long,
        chain_growth_mib,
        churn_growth_mib,
        churn_second_half_mib,
        churn_growth,
    })
}

/// A process's resident memory by kind (`/proc/PID/status`), in MiB, and its mappings
/// (`/proc/PID/maps`): what grew tells a heap from mapped snapshot memory from mappings kept.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ProcessMemory {
    anonymous_mib: f64,
    shared_mib: f64,
    file_mib: f64,
    mappings: f64,
}

impl ProcessMemory {
    fn read(pid: u32) -> Result<ProcessMemory> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let mib = |key: &str| status_mib(&status, key).unwrap_or(f64::NAN);
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        Ok(ProcessMemory {
            anonymous_mib: mib("RssAnon:"),
            shared_mib: mib("RssShmem:"),
            file_mib: mib("RssFile:"),
            mappings: maps.lines().count() as f64,
        })
    }

    fn minus(&self, before: &ProcessMemory) -> ProcessMemory {
        ProcessMemory {
            anonymous_mib: self.anonymous_mib - before.anonymous_mib,
            shared_mib: self.shared_mib - before.shared_mib,
            file_mib: self.file_mib - before.file_mib,
            mappings: self.mappings - before.mappings,
        }
    }
}

/// [`CHAIN_SAMPLES`] execs of `code` in session `id`, each once the daemon is idle, timed.
async fn paced(client: &Client, id: &str, code: &str) -> Result<Latency> {
    let mut samples = Vec::with_capacity(CHAIN_SAMPLES);
    for _ in 0..CHAIN_SAMPLES {
        wait_until_idle(client).await?;
        let started = Instant::now();
        run_in(client, id, code).await?;
        samples.push(started.elapsed());
    }
    Ok(Latency::of(samples))
}

/// Runs `code` in session `id` (within a minute: writing 8 MiB takes seconds under emulation);
/// the checkpoint it left.
async fn run_in(client: &Client, id: &str, code: &str) -> Result<u64> {
    let request = SessionExecRequest {
        timeout_ms: Some(60_000),
        ..SessionExecRequest::new(code)
    };
    let response = client.session_exec(id, &request).await?;
    check(response.status, code)?;
    Ok(response.session.map_or(0, |s| s.checkpoint))
}

/// Creates `count` more sessions that each run the subject's cell; how many answered.
async fn serve_many(client: &Client, subject: &Subject, count: usize) -> Result<usize> {
    let cell = SessionExecRequest::new(subject.cell);
    let mut served = 0;
    for n in 0..count {
        if n % 10 == 9 {
            eprintln!("(h) sessions: {} more sessions served", n + 1);
        }
        let id = client
            .create_session(&CreateSessionRequest::new(subject.language))
            .await?
            .id;
        if client.session_exec(&id, &cell).await?.status == ExecStatus::Ok {
            served += 1;
        }
    }
    Ok(served)
}

/// A daemon with `sandboxes` of the subject's language (`start_daemon` names the JavaScript
/// pool itself).
async fn start(
    binary: &Path,
    subject: &Subject,
    sandboxes: usize,
) -> Result<(crate::Daemon, std::time::Duration)> {
    let (javascript, extra) = (subject.pool)(sandboxes);
    start_daemon(binary, javascript, &extra).await
}

/// Daemon resident memory with three sandboxes of the language less with one, halved.
async fn pool_sandbox_memory(binary: &Path, subject: &Subject) -> Result<f64> {
    let mut resident = Vec::new();
    for sandboxes in [3, 1] {
        let (daemon, _) = start(binary, subject, sandboxes).await?;
        wait_until_idle(&daemon.client).await?;
        resident.push(resident_mib(daemon.child.id())?);
    }
    Ok((resident[0] - resident[1]) / 2.0)
}

/// Issue 31's target (a session exec sent the moment the last answer arrives costs at most 1.5
/// times a plain warm exec, at p50 and p99) and issue 54's (that at p50, a paced session exec
/// at most 1.2 times, a fork at most 1.5 times, a trivial exec's checkpoint at most 2 MiB and
/// one that writes N MiB at most 1.25 N + 2, the daemon's memory flat over the second half of
/// the forks; natively, at most 64 MiB of the daemon's memory per idle DataFrame session, and
/// 100 sessions served), in every runtime.
pub fn targets(figures: &[SessionFigures]) -> Vec<Target> {
    let mut targets = Vec::new();
    for f in figures {
        let r = f.runtime;
        let ratio = |l: &Latency, p99: bool| match p99 {
            false => l.p50_ms / f.plain_warm.p50_ms,
            true => l.p99_ms / f.plain_warm.p99_ms,
        };
        targets.extend([
            Target::at_most(
                &format!("S31 {r} p50"),
                &format!("{r} session exec at once after the last / plain warm, p50"),
                ratio(&f.back_to_back, false),
                1.5,
            ),
            Target::at_most(
                &format!("S31 {r} p99"),
                &format!("{r} session exec at once after the last / plain warm, p99"),
                ratio(&f.back_to_back, true),
                1.5,
            ),
            Target::at_most(
                &format!("S54 {r} paced"),
                &format!("{r} paced session exec / plain warm, p50"),
                ratio(&f.session_exec, false),
                1.2,
            ),
            Target::at_most(
                &format!("S54 {r} fork"),
                &format!("{r} fork / plain warm exec, p50"),
                ratio(&f.fork, false),
                1.5,
            ),
            Target::at_most(
                &format!("S54 {r} checkpoint"),
                &format!("{r} a trivial exec's checkpoint, MiB"),
                f.trivial_checkpoint_mib,
                2.0,
            ),
            Target::at_most(
                &format!("S54 {r} written"),
                &format!("{r} checkpoint of an exec that writes {WRITTEN_MIB} MiB, MiB"),
                f.written_checkpoint_mib,
                1.25 * WRITTEN_MIB + 2.0,
            ),
        ]);
        targets.push(Target::at_most(
            &format!("S54 {r} chain"),
            &format!("{r} paced session exec after {LONG_CHAIN} execs / after one, p50"),
            f.after_long_chain.p50_ms / f.after_first_exec.p50_ms,
            1.2,
        ));
        targets.push(Target::at_most(
            &format!("S54 {r} flat"),
            &format!(
                "{r} daemon resident memory's growth over the last {} of {FORK_CHURN} forks, MiB",
                FORK_CHURN / 2
            ),
            f.fork_churn_second_half_mib,
            FLAT_MIB,
        ));
        if let Some(served) = f.sessions_served {
            targets.push(Target::at_most(
                &format!("S54 {r} memory"),
                &format!("{r} daemon resident memory per idle DataFrame session, MiB"),
                f.resident_per_idle_session_mib,
                64.0,
            ));
            targets.push(Target::at_least(
                &format!("S54 {r} served"),
                &format!("{r} DataFrame sessions one daemon served"),
                served as f64,
                SERVED_SESSIONS as f64,
            ));
        }
    }
    targets
}

fn check(status: ExecStatus, program: &str) -> Result<()> {
    if status != ExecStatus::Ok {
        bail!("{program:?} ended {status:?}");
    }
    Ok(())
}

/// The daemon's worker counters and KVM's at the start of a run of execs.
struct Counted {
    metrics: String,
    kvm: Option<KvmCounts>,
}

impl Counted {
    async fn start(client: &Client) -> Result<Counted> {
        Ok(Counted {
            metrics: client.metrics().await?,
            kvm: KvmCounts::read(),
        })
    }

    /// The worker's cost per exec since the start; None when no exec was counted.
    async fn cost(
        self,
        client: &Client,
        subject: &Subject,
        mode: &'static str,
    ) -> Result<Option<WorkerCost>> {
        let after = client.metrics().await?;
        let cost = worker_cost(subject.language, mode, &self.metrics, &after, None).ok();
        Ok(cost.map(|mut cost| {
            cost.kvm = KvmCounts::since(self.kvm, cost.executions);
            cost
        }))
    }
}

/// Prints (h)'s rows.
pub fn print(figures: &[SessionFigures], row: impl Fn(&str, &Latency)) {
    println!(
        "\n(h) sessions (one daemon per language, a pool of one; idle sessions ran the cell below)"
    );
    for f in figures {
        let r = f.runtime;
        println!("  {r}: cell {:?}", f.cell);
        row(&format!("  {r} plain warm exec"), &f.plain_warm);
        row(&format!("  {r} session exec, paced"), &f.session_exec);
        row(
            &format!("  {r} session exec, at once after the last"),
            &f.back_to_back,
        );
        row(
            "    of which queued (its queued_ms)",
            &f.back_to_back_queued,
        );
        for cost in [&f.plain_cost, &f.paced_cost].into_iter().flatten() {
            print!("    ");
            cost.print();
        }
        row(&format!("  {r} fork"), &f.fork);
        println!(
            "    a checkpoint holds {:.2} MiB after a trivial exec, {:.2} MiB after one that \
             writes {WRITTEN_MIB} MiB; forking each idle session added {:.2} MiB",
            f.trivial_checkpoint_mib, f.written_checkpoint_mib, f.fork_added_mib
        );
        row(
            &format!("  {r} paced session exec after its first"),
            &f.after_first_exec,
        );
        row(
            &format!("  {r} ... after {LONG_CHAIN} execs"),
            &f.after_long_chain,
        );
        println!(
            "    the daemon's resident memory grew {:.1} MiB over the {LONG_CHAIN} execs, {:.1} \
             MiB over {FORK_CHURN} forks each run once and deleted ({:.1} MiB over their second \
             half)",
            f.long_chain_growth_mib, f.fork_churn_growth_mib, f.fork_churn_second_half_mib
        );
        let g = &f.fork_churn_growth;
        println!(
            "    over the forks: anonymous {:+.1} MiB, shared memory {:+.1} MiB, files {:+.1} MiB; \
             {:+.0} mappings",
            g.anonymous_mib, g.shared_mib, g.file_mib, g.mappings
        );
        if let Some(served) = f.sessions_served {
            println!("    sessions one daemon served: {served} of {SERVED_SESSIONS}");
        }
        println!(
            "    session exec p50 / plain warm p50: {:.2} (at once after the last: {:.2}); saving \
             the state after an exec {:.1} ms, loading it before one {:.1} ms (means, off / on \
             the exec's path)",
            f.session_exec.p50_ms / f.plain_warm.p50_ms,
            f.back_to_back.p50_ms / f.plain_warm.p50_ms,
            f.save_mean_ms,
            f.load_mean_ms
        );
        println!(
            "    memory per idle session: {:.1} MiB resident, {:.1} MiB accounted; the default \
             budget of {DEFAULT_BUDGET_MIB:.0} MiB holds {:.0} idle sessions. A parked sandbox per \
             session instead: {:.1} MiB each",
            f.resident_per_idle_session_mib,
            f.accounted_per_idle_session_mib,
            f.idle_sessions_in_default_budget,
            f.resident_per_pool_sandbox_mib
        );
    }
}
