//! R1: a warm request through the socket against hyperlight-js called in this process (call,
//! then restore), and Python's warm request against JavaScript's, in one daemon.

use std::time::Instant;

use anyhow::{Context, Result};
use hyperlightd_client::{ExecRequest, Language};
use serde_json::json;

use crate::common::{
    Breakdown, Latency, daemon_args, exec_checked, language_label, print_row, start_daemon, warm,
};
use crate::direct::{direct, direct_runner};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, PYTHON_BODY};

pub async fn run(args: &Args) -> Result<PartReport> {
    eprintln!("(a) hyperlight-js in-process, the system's transparent huge page policy ...");
    let (_, _, both_system_thp) = direct(args.iterations)?;
    // The daemon turns transparent huge pages off (daemon/src/sys/memory.rs); so does the rest
    // of this run, so that both sides manage memory alike.
    nix::sys::prctl::set_thp_disable(true).context("turning transparent huge pages off")?;
    eprintln!("(a) hyperlight-js in-process ...");
    let (call, restore, both) = direct(args.iterations)?;
    eprintln!("(a') hyperlight-js in-process with hyperlightd's runner ...");
    let (runner, runner_restore) = direct_runner(args.iterations)?;

    eprintln!("(b) through the daemon ...");
    let extra = daemon_args(args, 1);
    let (daemon, _) = start_daemon(&args.daemon, args.pool, &extra).await?;
    let client = &daemon.client;
    let js = ExecRequest::new(Language::Javascript, BODY);
    let py = ExecRequest::new(Language::Python, PYTHON_BODY);
    warm(client, &js, 20).await?;
    let before = client.metrics().await?;
    let js_warm = warm(client, &js, args.iterations).await?;
    let after = client.metrics().await?;
    let js_breakdown = Breakdown::between(&before, &after, &language_label(Language::Javascript));
    eprintln!("(b) back to back, the next request sent as soon as the last is answered ...");
    let mut samples = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let start = Instant::now();
        exec_checked(client, &js).await?;
        samples.push(start.elapsed());
    }
    let js_sequential = Latency::of(samples);
    let python = match &args.python_guest {
        Some(_) => {
            eprintln!("(b) Python through the daemon ...");
            warm(client, &py, 10).await?;
            let before = client.metrics().await?;
            let py_warm = warm(client, &py, args.iterations).await?;
            let after = client.metrics().await?;
            let breakdown = Breakdown::between(&before, &after, &language_label(Language::Python));
            Some((py_warm, breakdown))
        }
        None => None,
    };

    println!("\n== R1: latency ==");
    print_row("(a) hyperlight-js direct: call", &call);
    print_row("(a) hyperlight-js direct: restore", &restore);
    print_row("(a) hyperlight-js direct: call + restore", &both);
    print_row(
        "(a) ... call + restore, system's huge page policy",
        &both_system_thp,
    );
    print_row(
        "(a') hyperlight-js direct, hyperlightd's runner: call",
        &runner,
    );
    print_row("(a') ... restore", &runner_restore);
    print_row("(b) daemon, JavaScript, warm (sandboxes idle)", &js_warm);
    print_row(
        "(b) daemon, JavaScript, back to back (pool of 2)",
        &js_sequential,
    );
    js_breakdown.print("(b) JavaScript warm");
    let mut targets = vec![Target::at_most(
        "R1",
        "JavaScript warm p50 / direct call + restore p50",
        js_warm.p50_ms / both.p50_ms,
        0.8,
    )];
    if let Some((py_warm, breakdown)) = &python {
        print_row("(b) daemon, Python, warm (sandboxes idle)", py_warm);
        breakdown.print("(b) Python warm");
        targets.push(Target::at_most(
            "R1 Python",
            "Python warm p50 / JavaScript warm p50",
            py_warm.p50_ms / js_warm.p50_ms,
            1.5,
        ));
    }
    Ok(PartReport {
        part: "latency".into(),
        figures: json!({
            "direct_call": call,
            "direct_restore": restore,
            "direct_call_and_restore": both,
            "direct_call_and_restore_system_thp": both_system_thp,
            "runner_call": runner,
            "runner_restore": runner_restore,
            "javascript_warm": js_warm,
            "javascript_back_to_back": js_sequential,
            "javascript_breakdown": js_breakdown,
            "python_warm": python.as_ref().map(|p| &p.0),
            "python_breakdown": python.as_ref().map(|p| &p.1),
        }),
        targets,
    })
}
