//! (h) Sessions, side by side with plain warm execs in one daemon: a session exec's latency
//! beside a plain one's, a fork's latency, the time to save and load a session's state, host
//! memory per idle session after a typical cell, the most idle sessions the default budget holds,
//! and, for the alternative of keeping each idle session in a parked sandbox, host memory per
//! sandbox.

use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};
use hyperlightd_client::{
    CreateSessionRequest, ExecRequest, ExecStatus, Language, SessionExecRequest,
};
use serde::Serialize;

use crate::python_library::resident_mib;
use crate::targets::Target;
use crate::{Args, BODY, Latency, PYTHON_BODY, histogram_totals, start_daemon, wait_until_idle};

/// The daemon's default budget for session state (`--session-memory-mib`).
const DEFAULT_BUDGET_MIB: f64 = 4096.0;

/// Idle sessions created to measure memory per session.
const IDLE_SESSIONS: usize = 8;

/// Timed session execs and forks per language: each session exec waits for the state the last
/// one left to be saved (seconds for Python under emulation), so fewer than plain execs.
const SESSION_ITERATIONS: usize = 30;

/// (h)'s figures for one language.
#[derive(Debug, Serialize)]
pub struct SessionFigures {
    language: Language,
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
}

/// What one language's run needs.
struct Subject {
    language: Language,
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
        program: BODY,
        cell: "const graph = Array.from({length: 10000}, (_, i) => ({id: i, name: 'node ' + i, \
               edges: [i + 1, i + 2]})); graph.length",
        pool: Box::new(move |n| (n, daemon_args.clone())),
    }];
    if let Some(guest) = args.python_guest.clone() {
        let daemon_args = args.daemon_args.clone();
        subjects.push(Subject {
            language: Language::Python,
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
    let mut figures = Vec::new();
    for subject in &subjects {
        eprintln!("(h) sessions: {} ...", subject.language);
        figures.push(measure(args, subject).await?);
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
    for _ in 0..n {
        wait_until_idle(client).await?;
        let started = Instant::now();
        check(client.exec(&plain).await?.status, &plain.code)?;
        samples.push(started.elapsed());
    }
    let plain_warm = Latency::of(samples);

    let id = client
        .create_session(&CreateSessionRequest::new(subject.language))
        .await?
        .id;
    let exec = SessionExecRequest::new(subject.program);
    let n = n.min(SESSION_ITERATIONS);
    let mut samples = Vec::with_capacity(n);
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

    let before = resident_mib(daemon.child.id())?;
    let cell = SessionExecRequest::new(subject.cell);
    for _ in 0..IDLE_SESSIONS {
        let id = client
            .create_session(&CreateSessionRequest::new(subject.language))
            .await?
            .id;
        check(client.session_exec(&id, &cell).await?.status, subject.cell)?;
    }
    wait_until_idle(client).await?;
    let after = resident_mib(daemon.child.id())?;
    let health = client.health().await?;
    let accounted = health.sessions[&subject.language].memory_bytes as f64
        / f64::from(1 << 20)
        / IDLE_SESSIONS as f64;
    Ok(SessionFigures {
        language: subject.language,
        cell: subject.cell,
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

/// Issue 31's target: a session exec sent the moment the last answer arrives costs at most 1.5
/// times a plain warm exec, at p50 and at p99, in both languages.
pub fn targets(figures: &[SessionFigures]) -> Vec<Target> {
    figures
        .iter()
        .flat_map(|f| {
            let what = |at: &str| {
                format!(
                    "{} session exec at once after the last / plain warm, {at}",
                    f.language
                )
            };
            [
                Target::at_most(
                    &format!("S31 {} p50", f.language),
                    &what("p50"),
                    f.back_to_back.p50_ms / f.plain_warm.p50_ms,
                    1.5,
                ),
                Target::at_most(
                    &format!("S31 {} p99", f.language),
                    &what("p99"),
                    f.back_to_back.p99_ms / f.plain_warm.p99_ms,
                    1.5,
                ),
            ]
        })
        .collect()
}

fn check(status: ExecStatus, program: &str) -> Result<()> {
    if status != ExecStatus::Ok {
        bail!("{program:?} ended {status:?}");
    }
    Ok(())
}

/// Prints (h)'s rows.
pub fn print(figures: &[SessionFigures], row: impl Fn(&str, &Latency)) {
    println!(
        "\n(h) sessions (one daemon per language, a pool of one; idle sessions ran the cell below)"
    );
    for f in figures {
        println!("  {}: cell {:?}", f.language, f.cell);
        row(&format!("  {} plain warm exec", f.language), &f.plain_warm);
        row(&format!("  {} session exec", f.language), &f.session_exec);
        row(
            &format!("  {} session exec, at once after the last", f.language),
            &f.back_to_back,
        );
        row(
            "    of which queued (its queued_ms)",
            &f.back_to_back_queued,
        );
        row(&format!("  {} fork", f.language), &f.fork);
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
