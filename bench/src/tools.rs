//! (t) Tool calls from code, side by side in one daemon: a warm exec against the same program
//! that also calls one tool, answered at once by the client's handler (the stream, the call's
//! event, the answer's request, the guest's wait), alternating so that both see the same
//! machine. Per language: JavaScript, and WebAssembly Python when its guest is given.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hyperlightd_client::{Client, ExecRequest, ExecStatus, Language, ToolSpec, Tools};
use serde::Serialize;
use serde_json::json;

use crate::common::{daemon_args, print_row};
use crate::targets::PartReport;
use crate::{Args, BODY, EXPECTED, Latency, PYTHON_BODY, start_daemon, wait_until_idle};

/// (t)'s figures for one language.
#[derive(Debug, Serialize)]
pub struct ToolFigures {
    language: Language,
    plain_warm: Latency,
    one_tool_call: Latency,
    /// one_tool_call's p50 less plain_warm's: what one call costs.
    call_cost_p50_ms: f64,
}

/// The same work, then one call whose answer the program checks.
const JS_WITH_CALL: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
    const n = await tools.add_one({n: xs.reduce((a, b) => a + b, 0) - 1}); JSON.stringify(n)";
const PYTHON_WITH_CALL: &str = "import json\nxs = []\nfor i in range(100):\n    \
    xs.append(i * i)\njson.dumps(tools.add_one(n=sum(xs) - 1))";

pub async fn run(args: &Args) -> Result<PartReport> {
    let (daemon, _) = start_daemon(&args.daemon, 1, &daemon_args(args, 1)).await?;
    let client = &daemon.client;
    let mut languages = vec![(Language::Javascript, BODY, JS_WITH_CALL)];
    if args.python_guest.is_some() {
        languages.push((Language::Python, PYTHON_BODY, PYTHON_WITH_CALL));
    }
    let tools = Tools::new().with(
        ToolSpec::new(
            "add_one",
            "n + 1",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ),
        |arguments| async move { Ok(json!(arguments["n"].as_i64().unwrap_or_default() + 1)) },
    );
    println!("\n(t) tool calls: a warm exec, and the same with one tool call answered at once");
    println!(
        "{:<52} {:>10} {:>10} {:>10} {:>6}",
        "", "p50 ms", "p99 ms", "mean ms", "n"
    );
    let mut figures = Vec::new();
    for (language, plain, with_call) in languages {
        let plain = ExecRequest::new(language, plain);
        let with_call = ExecRequest::new(language, with_call);
        let n = args.iterations.min(100);
        let (mut a, mut b) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            a.push(timed(client, &plain, None).await?);
            b.push(timed(client, &with_call, Some(&tools)).await?);
        }
        let (plain_warm, one_tool_call) = (Latency::of(a), Latency::of(b));
        print_row(&format!("{language}: plain warm exec"), &plain_warm);
        print_row(&format!("{language}: with one tool call"), &one_tool_call);
        let call_cost_p50_ms = one_tool_call.p50_ms - plain_warm.p50_ms;
        println!(
            "{:<52} {call_cost_p50_ms:>10.3}",
            format!("{language}: one call's cost (p50)")
        );
        figures.push(ToolFigures {
            language,
            plain_warm,
            one_tool_call,
            call_cost_p50_ms,
        });
    }
    Ok(PartReport {
        part: "tools".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}

/// One warm exec, with `tools` when given, checked.
async fn timed(client: &Client, request: &ExecRequest, tools: Option<&Tools>) -> Result<Duration> {
    wait_until_idle(client).await?;
    let started = Instant::now();
    let response = match tools {
        Some(tools) => client.exec_with_tools(request, tools).await?,
        None => client.exec(request).await?,
    };
    let elapsed = started.elapsed();
    let expected = serde_json::Value::String(EXPECTED.to_owned());
    if response.status != ExecStatus::Ok || response.result != expected {
        bail!("{:?} answered {response:?}", request.code);
    }
    Ok(elapsed)
}
