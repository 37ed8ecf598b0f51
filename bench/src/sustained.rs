//! Sustained: back to back on a pool of one, each request sent as soon as the last is answered,
//! so that the restore (and priming) after each request is on the next one's way; the two
//! languages take turns in rounds, so that a slower stretch of the machine falls on both.

use anyhow::Result;
use hyperlightd_client::{ExecRequest, Language};
use serde_json::json;

use crate::common::{back_to_back, python_pool, rate_over, start_daemon, warm};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, PYTHON_BODY};

/// Rounds of the two languages in turn.
const ROUNDS: usize = 5;

pub async fn run(args: &Args) -> Result<PartReport> {
    let Some(guest) = &args.python_guest else {
        println!("\n(sustained) NOT RUN: it compares Python with JavaScript (no --python-guest)");
        return Ok(PartReport {
            part: "sustained".into(),
            figures: serde_json::Value::Null,
            targets: Vec::new(),
        });
    };
    let (daemon, _) =
        start_daemon(&args.daemon, 1, &python_pool(guest, 1, &args.daemon_args)).await?;
    let client = &daemon.client;
    let js = ExecRequest::new(Language::Javascript, BODY);
    let py = ExecRequest::new(Language::Python, PYTHON_BODY);
    warm(client, &js, 10).await?;
    warm(client, &py, 10).await?;
    let n = args.iterations.div_ceil(4);
    // Each round's executions/s, JavaScript then Python.
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        eprintln!("(sustained) round {round} of {ROUNDS}: JavaScript, then Python ...");
        rounds.push((
            back_to_back(client, &js, n).await?,
            back_to_back(client, &py, n).await?,
        ));
    }
    // Over all rounds: executions over the time they took.
    let rate = |of: fn(&(f64, f64)) -> f64| rate_over(rounds.iter().map(|r| (n, of(r))));
    let (js_per_s, py_per_s) = (rate(|r| r.0), rate(|r| r.1));
    println!("\n== Sustained: back to back, pool of one, {ROUNDS} rounds in turn ==");
    for (i, (js, py)) in rounds.iter().enumerate() {
        println!(
            "round {}: JavaScript {js:.1} executions/s, Python {py:.1} ({:.3})",
            i + 1,
            py / js
        );
    }
    println!(
        "all rounds: JavaScript {js_per_s:.1} executions/s, Python {py_per_s:.1} executions/s \
         ({} each)",
        n * ROUNDS
    );
    Ok(PartReport {
        part: "sustained".into(),
        figures: json!({
            "javascript_per_s": js_per_s,
            "python_per_s": py_per_s,
            "rounds": rounds,
        }),
        targets: vec![Target::at_least(
            "Sustained",
            "Python executions/s / JavaScript executions/s, back to back",
            py_per_s / js_per_s,
            0.5,
        )],
    })
}
