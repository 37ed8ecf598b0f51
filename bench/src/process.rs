//! R2: a fresh process per execution (`node -e`, `python3 -c`: what a subprocess runner does)
//! against the daemon's warm request for the same program.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use hyperlightd_client::{ExecRequest, Language};
use serde_json::json;

use crate::common::{Latency, daemon_args, print_row, start_daemon, warm};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, EXPECTED, PYTHON_BODY};

pub async fn run(args: &Args) -> Result<PartReport> {
    let extra = daemon_args(args, 1);
    let (daemon, _) = start_daemon(&args.daemon, 1, &extra).await?;
    let n = args.iterations.min(100);
    eprintln!("(b) the daemon, warm ...");
    let js = ExecRequest::new(Language::Javascript, BODY);
    warm(&daemon.client, &js, 10).await?;
    let js_warm = warm(&daemon.client, &js, n).await?;
    eprintln!("(d) node -e per execution ...");
    let node_program = BODY.replacen("JSON.stringify", "console.log(JSON.stringify", 1) + ")";
    let node = processes("node", &["-e", &node_program], args.node_iterations)?;
    println!("\n== R2: a process per execution ==");
    print_row("(b) daemon, JavaScript, warm", &js_warm);
    print_row("(d) node -e, a process per execution", &node);
    let mut targets = vec![Target::at_least(
        "R2",
        "node -e p50 / daemon JavaScript warm p50",
        node.p50_ms / js_warm.p50_ms,
        50.0,
    )];
    let mut python = None;
    if args.python_guest.is_some() {
        eprintln!("(b) the daemon, Python, warm ...");
        let py = ExecRequest::new(Language::Python, PYTHON_BODY);
        warm(&daemon.client, &py, 10).await?;
        let py_warm = warm(&daemon.client, &py, n).await?;
        eprintln!("(d) python3 -c per execution ...");
        let program = PYTHON_BODY.replacen("json.dumps(", "print(json.dumps(", 1) + ")";
        let cpython = processes("python3", &["-c", &program], args.node_iterations)?;
        print_row("(b) daemon, Python, warm", &py_warm);
        print_row("(d) python3 -c, a process per execution", &cpython);
        targets.push(Target::at_least(
            "R2 Python",
            "python3 -c p50 / daemon Python warm p50",
            cpython.p50_ms / py_warm.p50_ms,
            50.0,
        ));
        python = Some((py_warm, cpython));
    }
    Ok(PartReport {
        part: "process".into(),
        figures: json!({
            "javascript_warm": js_warm,
            "node_process": node,
            "python_warm": python.as_ref().map(|p| &p.0),
            "python3_process": python.as_ref().map(|p| &p.1),
        }),
        targets,
    })
}

/// `program` with `args` started `iterations` times, each run to its end; each must print
/// the expected result.
fn processes(program: &str, args: &[&str], iterations: usize) -> Result<Latency> {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let out = Command::new(program)
            .args(args)
            .output()
            .with_context(|| format!("running {program} (is it installed?)"))?;
        samples.push(start.elapsed());
        if String::from_utf8_lossy(&out.stdout).trim() != EXPECTED {
            bail!(
                "{program} printed {:?} {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(Latency::of(samples))
}
