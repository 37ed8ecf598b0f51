//! R3: throughput at concurrency 2 against concurrency 1 on a pool of two, three times, beside
//! hyperlight-js in this process on one and two threads (how far Hyperlight itself scales on
//! this machine), with the machine's CPUs each kept busy and the workers' time per execution.

use anyhow::Result;
use hyperlightd_client::{Client, ExecRequest, Language};
use serde::Serialize;
use serde_json::json;

use crate::capacity::{WorkerCost, worker_cost};
use crate::common::{CpuUse, concurrent, exec_checked, start_daemon, wait_until_idle};
use crate::direct::direct_threads;
use crate::targets::{PartReport, Target};
use crate::{Args, BODY};

/// Runs of the pair (concurrency 1, concurrency 2): R3 asks for its ratio in three of three.
const RUNS: usize = 3;

pub async fn run(args: &Args) -> Result<PartReport> {
    eprintln!("(c') hyperlight-js in-process, 1 and 2 threads ...");
    let direct: Vec<(usize, f64, CpuUse)> = [1, 2]
        .into_iter()
        .map(|threads| {
            direct_threads(threads, args.throughput_requests).map(|(r, cpu)| (threads, r, cpu))
        })
        .collect::<Result<_>>()?;
    let (daemon, _) = start_daemon(&args.daemon, 2, &args.daemon_args).await?;
    let request = ExecRequest::new(Language::Javascript, BODY);
    for _ in 0..20 {
        exec_checked(&daemon.client, &request).await?;
    }
    let mut runs = Vec::with_capacity(RUNS);
    let mut repeated = Vec::new();
    for run in 1..=RUNS {
        let mut attempt = 1;
        let pair = loop {
            eprintln!("(c) through the daemon, run {run} of {RUNS} ...");
            match pair(&daemon.client, &request, args.throughput_requests).await {
                Ok(pair) => break pair,
                // With a host thread per vCPU, the emulator now and then leaves a guest looping
                // on a trivial program until its time limit (see xtask/src/vm/mod.rs): the run's
                // figures are spoilt, not the daemon's answer wrong. Run it again, and say so.
                Err(e) if attempt < ATTEMPTS => {
                    eprintln!("(c) run {run} failed ({e:#}); running it again");
                    repeated.push(format!("run {run}, attempt {attempt}: {e:#}"));
                    attempt += 1;
                }
                Err(e) => return Err(e.context(format!("run {run}, {ATTEMPTS} attempts"))),
            }
        };
        runs.push(pair);
    }
    println!("\n== R3: concurrency (pool of 2, two vCPUs) ==");
    for (threads, per_s, cpu) in &direct {
        println!(
            "(c') hyperlight-js in-process, {threads} thread(s): {per_s:.1} calls+restores/s; {cpu}"
        );
    }
    for why in &repeated {
        println!("(c) repeated: {why}");
    }
    let direct_ratio = direct[1].1 / direct[0].1;
    println!("(c') 2 threads / 1 thread = {direct_ratio:.2}");
    let mut targets = Vec::new();
    for (i, [one, two]) in runs.iter().enumerate() {
        for (concurrency, level) in [(1, one), (2, two)] {
            println!(
                "(c) run {}, concurrency {concurrency}: {:.1} executions/s; {}",
                i + 1,
                level.per_s,
                level.cpu
            );
            level.worker.print();
        }
        // If an execution costs the machine the same CPU time at both levels, concurrency 2 can
        // gain at most what concurrency 1 left idle.
        println!(
            "(c) run {}: concurrency 1 left {:.2} of {} CPUs idle: at most {:.2} x from concurrency 2",
            i + 1,
            one.cpu.cpus as f64 - one.cpu.cpus_busy,
            one.cpu.cpus,
            one.cpu.cpus as f64 / one.cpu.cpus_busy
        );
        targets.push(Target::at_least(
            &format!("R3 run {}", i + 1),
            "daemon throughput, concurrency 2 / concurrency 1",
            two.per_s / one.per_s,
            1.8,
        ));
    }
    Ok(PartReport {
        part: "concurrency".into(),
        figures: json!({
            "direct": direct,
            "direct_2_over_1": direct_ratio,
            "daemon_runs": runs,
            "repeated": repeated,
        }),
        targets,
    })
}

/// Attempts per run before the part fails.
const ATTEMPTS: usize = 3;

/// One concurrency level of a run.
#[derive(Debug, Serialize)]
struct Level {
    per_s: f64,
    cpu: CpuUse,
    worker: WorkerCost,
}

/// Throughput at concurrency 1, then 2.
async fn pair(client: &Client, request: &ExecRequest, requests: usize) -> Result<[Level; 2]> {
    let one = throughput(client, request, 1, requests).await?;
    let two = throughput(client, request, 2, requests).await?;
    Ok([one, two])
}

/// Executions per second with `concurrency` clients each sending requests back to back, the
/// CPUs they kept busy, and the workers' time per execution (their last restore and priming
/// included).
async fn throughput(
    client: &Client,
    request: &ExecRequest,
    concurrency: usize,
    requests: usize,
) -> Result<Level> {
    wait_until_idle(client).await?;
    let before = client.metrics().await?;
    let run = concurrent(client, std::slice::from_ref(request), concurrency, requests).await?;
    wait_until_idle(client).await?;
    let after = client.metrics().await?;
    let mode = if concurrency == 1 {
        "concurrency_1"
    } else {
        "concurrency_2"
    };
    Ok(Level {
        per_s: run.per_s,
        cpu: run.cpu,
        worker: worker_cost(request.language, mode, &before, &after, Some(run.per_s))?,
    })
}
