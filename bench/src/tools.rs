//! (t) Tool calls from code, side by side in one daemon: a warm exec against the same program
//! that also calls one tool, answered at once by the client's handler (the stream, the call's
//! event, the answer's request, the guest's wait), alternating so that both see the same
//! machine. Per language: JavaScript, and WebAssembly Python when its guest is given.

use std::time::{Duration, Instant};

use anyhow::Result;
use hyperlightd_client::{Client, ExecRequest, Language, ToolSpec, Tools};
use serde::Serialize;
use serde_json::json;

use crate::capacity::{WorkerCost, worker_cost_over};
use crate::common::{check_answer, daemon_args, print_header, print_row, warm_once};
use crate::targets::PartReport;
use crate::{Args, BODY, Latency, PYTHON_BODY, start_daemon, wait_until_idle};

/// (t)'s figures for one language.
#[derive(Debug, Serialize)]
pub struct ToolFigures {
    language: Language,
    plain_warm: Latency,
    one_tool_call: Latency,
    ten_tool_calls: Latency,
    /// JavaScript: the plain program with a top-level await and no tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    plain_with_await: Option<Latency>,
    /// one_tool_call's p50 less plain_warm's: what declaring tools and making one call cost.
    first_call_cost_p50_ms: f64,
    /// ten_tool_calls' p50 less one_tool_call's, over nine: each call after the first.
    next_call_cost_p50_ms: f64,
    /// The one-call program right after the plain program, and right after itself.
    order: AfterAnother,
}

/// The same request (the one-call program) right after the plain program and right after
/// itself, with the worker's time and page faults in each: a run pays for every scratch page it
/// writes beyond those the run before it left resident (the restore keeps only those;
/// docs/BENCHMARKS.md, issue 32), which a part that repeats one program never shows.
#[derive(Debug, Serialize)]
pub struct AfterAnother {
    after_plain: Latency,
    after_plain_worker: WorkerCost,
    after_itself: Latency,
    after_itself_worker: WorkerCost,
}

/// The same work, then one call whose answer the program checks.
const JS_WITH_CALL: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
    const n = await tools.add_one({n: xs.reduce((a, b) => a + b, 0) - 1}); JSON.stringify(n)";
const PYTHON_WITH_CALL: &str = "import json\nxs = []\nfor i in range(100):\n    \
    xs.append(i * i)\njson.dumps(tools.add_one(n=sum(xs) - 1))";
/// JavaScript's plain program with a top-level await and no tool: the runner parses such a
/// program (acorn, in the guest) to run it as an async function, whatever it awaits.
const JS_WITH_AWAIT: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
    const n = await Promise.resolve(xs.reduce((a, b) => a + b, 0)); JSON.stringify(n)";
/// The same, with ten calls in a row, each on the last one's answer.
const JS_WITH_TEN_CALLS: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
    let n = xs.reduce((a, b) => a + b, 0) - 10; \
    for (let i = 0; i < 10; i++) n = await tools.add_one({n}); JSON.stringify(n)";
const PYTHON_WITH_TEN_CALLS: &str = "import json\nxs = []\nfor i in range(100):\n    \
    xs.append(i * i)\nn = sum(xs) - 10\nfor _ in range(10):\n    n = tools.add_one(n=n)\n\
    json.dumps(n)";

pub async fn run(args: &Args) -> Result<PartReport> {
    let (daemon, _) = start_daemon(&args.daemon, 1, &daemon_args(args, 1)).await?;
    let client = &daemon.client;
    let mut languages = vec![(
        Language::Javascript,
        [BODY, JS_WITH_CALL, JS_WITH_TEN_CALLS],
    )];
    if args.python_guest.is_some() {
        let programs = [PYTHON_BODY, PYTHON_WITH_CALL, PYTHON_WITH_TEN_CALLS];
        languages.push((Language::Python, programs));
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
    print_header();
    let mut figures = Vec::new();
    for (language, [plain, one, ten]) in languages {
        let plain = ExecRequest::new(language, plain);
        let (one, ten) = (
            ExecRequest::new(language, one),
            ExecRequest::new(language, ten),
        );
        let n = args.iterations.min(100);
        let mut samples = [(); 3].map(|()| Vec::with_capacity(n));
        for _ in 0..n {
            samples[0].push(timed(client, &plain, None).await?);
            samples[1].push(timed(client, &one, Some(&tools)).await?);
            samples[2].push(timed(client, &ten, Some(&tools)).await?);
        }
        let [plain_warm, one_tool_call, ten_tool_calls] = samples.map(Latency::of);
        print_row(&format!("{language}: plain warm exec"), &plain_warm);
        print_row(&format!("{language}: with one tool call"), &one_tool_call);
        print_row(
            &format!("{language}: with ten tool calls in a row"),
            &ten_tool_calls,
        );
        let first_call_cost_p50_ms = one_tool_call.p50_ms - plain_warm.p50_ms;
        let next_call_cost_p50_ms = (ten_tool_calls.p50_ms - one_tool_call.p50_ms) / 9.0;
        let cost = |what: &str| format!("{language}: {what} (p50)");
        println!(
            "{:<52} {first_call_cost_p50_ms:>10.3}",
            cost("tools and the first call")
        );
        println!(
            "{:<52} {next_call_cost_p50_ms:>10.3}",
            cost("each call after it")
        );
        let plain_with_await = match language {
            Language::Javascript => {
                let request = ExecRequest::new(language, JS_WITH_AWAIT);
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    samples.push(timed(client, &request, None).await?);
                }
                let latency = Latency::of(samples);
                print_row(
                    &format!("{language}: plain, with a top-level await"),
                    &latency,
                );
                Some(latency)
            }
            Language::Python => None,
        };
        let order = after_another(client, &plain, &one, &tools, n).await?;
        figures.push(ToolFigures {
            language,
            plain_warm,
            one_tool_call,
            ten_tool_calls,
            plain_with_await,
            first_call_cost_p50_ms,
            next_call_cost_p50_ms,
            order,
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
    let Some(tools) = tools else {
        return warm_once(client, request).await;
    };
    wait_until_idle(client).await?;
    let started = Instant::now();
    let response = client.exec_with_tools(request, tools).await?;
    let elapsed = started.elapsed();
    check_answer(&response)?;
    Ok(elapsed)
}

/// [`AfterAnother`]: `n` times the plain program, then `one` twice, each with the daemon's
/// metrics read once the sandbox is idle again (its restore counted).
async fn after_another(
    client: &Client,
    plain: &ExecRequest,
    one: &ExecRequest,
    tools: &Tools,
    n: usize,
) -> Result<AfterAnother> {
    let mut latencies = [Vec::with_capacity(n), Vec::with_capacity(n)];
    let mut spans = [Vec::with_capacity(n), Vec::with_capacity(n)];
    for _ in 0..n {
        timed(client, plain, None).await?;
        wait_until_idle(client).await?;
        let mut before = client.metrics().await?;
        for (latency, span) in latencies.iter_mut().zip(&mut spans) {
            latency.push(timed(client, one, Some(tools)).await?);
            wait_until_idle(client).await?;
            let after = client.metrics().await?;
            span.push((before, after.clone()));
            before = after;
        }
    }
    let worker = |spans: &[(String, String)], mode| {
        let spans: Vec<(&str, &str)> = spans
            .iter()
            .map(|(b, a)| (b.as_str(), a.as_str()))
            .collect();
        worker_cost_over(one.language, mode, &spans, None)
    };
    let [after_plain, after_itself] = latencies.map(Latency::of);
    let order = AfterAnother {
        after_plain_worker: worker(&spans[0], "after_plain")?,
        after_itself_worker: worker(&spans[1], "after_itself")?,
        after_plain,
        after_itself,
    };
    let language = one.language;
    print_row(
        &format!("{language}: one call, after the plain program"),
        &order.after_plain,
    );
    order.after_plain_worker.print();
    print_row(
        &format!("{language}: one call, after itself"),
        &order.after_itself,
    );
    order.after_itself_worker.print();
    Ok(order)
}
