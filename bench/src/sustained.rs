//! Sustained: back to back on a pool of one, each request sent as soon as the last is answered,
//! so that the restore (and priming) after each request is on the next one's way.

use anyhow::Result;
use hyperlightd_client::{ExecRequest, Language};
use serde_json::json;

use crate::common::{back_to_back, python_pool, start_daemon, warm};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, PYTHON_BODY};

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
    let n = args.iterations.div_ceil(3);
    eprintln!("(sustained) JavaScript ...");
    let js_per_s = back_to_back(client, &js, n).await?;
    eprintln!("(sustained) Python ...");
    let py_per_s = back_to_back(client, &py, n).await?;
    println!("\n== Sustained: back to back, pool of one ==");
    println!("JavaScript {js_per_s:.1} executions/s, Python {py_per_s:.1} executions/s ({n} each)");
    Ok(PartReport {
        part: "sustained".into(),
        figures: json!({ "javascript_per_s": js_per_s, "python_per_s": py_per_s }),
        targets: vec![Target::at_least(
            "Sustained",
            "Python executions/s / JavaScript executions/s, back to back",
            py_per_s / js_per_s,
            0.5,
        )],
    })
}
