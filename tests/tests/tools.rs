//! End-to-end tests of tool calls from code (issue 28) on a KVM that runs Hyperlight guests: a
//! program calls the tools its exec declared, each call arrives in the stream, and the test
//! answers it through `POST /v1/executions/{id}/tool-results`, as an agent's host would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hyperlightd_client::{
    Client, CreateSessionRequest, ErrorKind, ExecEvent, ExecRequest, ExecResponse, ExecStatus,
    Language, SessionExecRequest, ToolAnswer, ToolSpec, Tools,
};
use hyperlightd_e2e::{Daemon, STEP_LIMIT, audit_lines, js, raw_request_as, within};
use serde_json::{Value, json};

#[path = "tools/egress.rs"]
mod egress;
#[path = "tools/traces.rs"]
mod traces;

/// A JavaScript pool of one. Programs get 30 s unless they ask otherwise: their time limit
/// counts waiting for the sandbox, which a session's save or a restore may hold for seconds under
/// emulation on a busy machine.
async fn daemon() -> Daemon {
    Daemon::start(&[
        "--pool",
        "javascript=1",
        "--tool-timeout-ms",
        "5000",
        "--default-timeout-ms",
        "30000",
    ])
    .await
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_weather",
            "The temperature in a city, in °C.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolSpec::new(
            "population",
            "How many people live in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolSpec::new("fail", "Always fails.", json!({"type": "object"})),
        ToolSpec::new("echo", "Answers its arguments.", json!({"type": "object"})),
    ]
}

/// A call as it arrived: its id, the tool, its arguments, and the daemon's refusal of the
/// answer given, if it refused it.
#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: String,
    arguments: Value,
    refused: Option<String>,
}

/// Runs `request` (with the tools above), answering each call with `answer` (None: no answer
/// for now; the call waits). Returns the execution's id, the calls in order, the response.
async fn run_with_tools(
    client: &Client,
    request: ExecRequest,
    mut answer: impl FnMut(&Call) -> Option<ToolAnswer>,
) -> (String, Vec<Call>, ExecResponse) {
    let request = ExecRequest {
        tools: tools(),
        ..request
    };
    let mut stream = client.exec_stream(&request).await.unwrap();
    let (mut execution, mut calls) = (None, Vec::new());
    loop {
        let event = within("the next event", STEP_LIMIT, stream.next())
            .await
            .expect("the stream ends with the response")
            .unwrap();
        match event {
            ExecEvent::Started { execution_id } => execution = Some(execution_id),
            ExecEvent::ToolCall {
                id,
                name,
                arguments,
            } => {
                let mut call = Call {
                    id,
                    name,
                    arguments,
                    refused: None,
                };
                let execution = execution.as_deref().expect("started comes first");
                if let Some(reply) = answer(&call) {
                    let answered = client.answer_tool(execution, &reply).await;
                    call.refused = answered.err().map(|e| e.to_string());
                }
                calls.push(call);
            }
            ExecEvent::Result(response) => {
                return (execution.expect("a started event"), calls, response);
            }
            ExecEvent::Error { error } => panic!("the stream failed: {error:?}"),
            ExecEvent::Stdout { .. } | ExecEvent::Stderr { .. } | ExecEvent::Display { .. } => {}
        }
    }
}

/// The answer the tools above give: a temperature and a population per city; `fail` fails.
fn answer(call: &Call) -> ToolAnswer {
    let city = call.arguments["city"].as_str().unwrap_or_default();
    match call.name.as_str() {
        "get_weather" => ToolAnswer::ok(&call.id, json!({"temp": city.len() * 2})),
        "population" => ToolAnswer::ok(&call.id, json!(city.len() * 1000)),
        "echo" => ToolAnswer::ok(&call.id, call.arguments.clone()),
        _ => ToolAnswer::error(&call.id, "the service is down"),
    }
}

#[tokio::test]
async fn a_program_calls_tools_in_a_loop_and_aggregates_their_results() {
    let daemon = daemon().await;
    let code = "console.log('asking');\n\
        let total = 0, people = 0;\n\
        for (const city of ['Paris', 'Oslo', 'Lima']) {\n\
          total += (await tools.get_weather({city})).temp;\n\
          people += await tools.population({city});\n\
        }\n\
        ({total, people})";
    let (_, calls, response) =
        run_with_tools(&daemon.client(), js(code), |c| Some(answer(c))).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.result, json!({"total": 26, "people": 13000}));
    assert_eq!(response.stdout, "asking\n");
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["get_weather", "population"].repeat(3));
    assert_eq!(calls[2].arguments, json!({"city": "Oslo"}));
}

#[tokio::test]
async fn a_tool_error_can_be_caught_and_a_malformed_call_never_reaches_the_caller() {
    let daemon = daemon().await;
    let code = "const seen = [];\n\
        try { await tools.fail({}); } catch (e) { seen.push(e.name + ': ' + e.message); }\n\
        try { await tools.get_weather({town: 'Paris'}); } catch (e) { seen.push(e.message); }\n\
        try { await tools.nope({}); } catch (e) { seen.push(e.message); }\n\
        seen";
    let (_, calls, response) =
        run_with_tools(&daemon.client(), js(code), |c| Some(answer(c))).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    let seen = response.result.as_array().unwrap();
    assert_eq!(seen[0], json!("ToolError: tools.fail: the service is down"));
    assert_eq!(
        seen[1],
        json!("tools.get_weather: \"city\" is a required property")
    );
    let unknown = seen[2].as_str().unwrap();
    assert!(
        unknown.starts_with("tools.nope: there is no tool \"nope\"")
            && unknown.contains("get_weather"),
        "{unknown}"
    );
    assert_eq!(
        calls.len(),
        1,
        "only the well-formed call was sent: {calls:?}"
    );

    // Not caught: the program fails with the tool's error.
    let (_, _, response) = run_with_tools(&daemon.client(), js("await tools.fail({})"), |c| {
        Some(answer(c))
    })
    .await;
    assert_eq!(response.status, ExecStatus::Error);
    let error = response.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Exception);
    assert!(error.message.contains("the service is down"), "{error:?}");
}

#[tokio::test]
async fn parallel_calls_are_answered_in_any_order_and_a_wait_is_not_the_program_s_time() {
    let daemon = daemon().await;
    let client = daemon.client();
    let code = "const [a, b, c] = await Promise.all(['A', 'BB', 'CCC'].map((city) => \
        tools.population({city})));\n[a, b, c]";
    // Answered only once all three have arrived, last first, after longer than the program's
    // time limit: waiting for tools does not count against it. (The limit leaves room for the
    // program's own work under emulation on a busy machine.)
    const LIMIT_MS: u64 = 5000;
    let request = ExecRequest {
        timeout_ms: Some(LIMIT_MS),
        tool_timeout_ms: Some(4 * LIMIT_MS),
        ..js(code)
    };
    let request = ExecRequest {
        tools: tools(),
        ..request
    };
    let mut stream = client.exec_stream(&request).await.unwrap();
    let (mut execution, mut pending) = (String::new(), Vec::new());
    let response = loop {
        match within("an event", STEP_LIMIT, stream.next())
            .await
            .unwrap()
            .unwrap()
        {
            ExecEvent::Started { execution_id } => execution = execution_id,
            ExecEvent::ToolCall {
                id,
                name,
                arguments,
            } => {
                pending.push(Call {
                    id,
                    name,
                    arguments,
                    refused: None,
                });
                if pending.len() == 3 {
                    tokio::time::sleep(Duration::from_millis(LIMIT_MS + 1000)).await;
                    for call in pending.iter().rev() {
                        client.answer_tool(&execution, &answer(call)).await.unwrap();
                    }
                }
            }
            ExecEvent::Result(response) => break response,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.result, json!([1000, 2000, 3000]));

    // The call was answered, and the execution has ended: both refused, nothing changes.
    let again = client.answer_tool(&execution, &answer(&pending[0])).await;
    let refused = again.unwrap_err();
    assert!(
        format!("{refused}").contains("execution_ended"),
        "{refused}"
    );
    let unknown = client
        .answer_tool(
            "exec_00000000000000000000000000000000",
            &answer(&pending[0]),
        )
        .await
        .unwrap_err();
    assert!(
        format!("{unknown}").contains("execution_not_found"),
        "{unknown}"
    );
}

#[tokio::test]
async fn a_call_without_an_answer_times_out_in_the_program_and_a_second_answer_is_refused() {
    let daemon = daemon().await;
    let client = daemon.client();
    let code = "let first;\n\
        try { await tools.population({city: 'X'}); } catch (e) { first = e.message; }\n\
        const second = await tools.population({city: 'YY'});\n\
        [first, second]";
    let request = ExecRequest {
        tool_timeout_ms: Some(3000),
        ..js(code)
    };
    let mut first = true;
    let mut answered = Vec::new();
    let (execution, calls, response) = run_with_tools(&client, request, |call| {
        if std::mem::take(&mut first) {
            return None;
        }
        answered.push(call.clone());
        Some(answer(call))
    })
    .await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    let message = response.result[0].as_str().unwrap();
    assert!(message.contains("no answer within 3000 ms"), "{message}");
    assert_eq!(response.result[1], json!(2000));
    assert_eq!(calls.len(), 2);
    let late = client
        .answer_tool(&execution, &answer(&calls[0]))
        .await
        .unwrap_err();
    assert!(format!("{late}").contains("execution_ended"), "{late}");
}

#[tokio::test]
async fn a_caller_that_goes_away_mid_wait_frees_the_sandbox_at_once() {
    let daemon = daemon().await;
    let waiting = js("await tools.population({city: 'Z'})");
    goes_away_mid_wait(&daemon.client(), waiting, js("6 * 7")).await;
}

/// Runs `waiting` (its call waits two minutes for an answer), goes away once the call arrives,
/// and then runs `next`, whose answer must be 42: with one sandbox, only the caller's going away
/// can free it within the next request's step limit.
async fn goes_away_mid_wait(client: &Client, waiting: ExecRequest, next: ExecRequest) {
    let request = ExecRequest {
        tools: tools(),
        tool_timeout_ms: Some(120_000),
        ..waiting
    };
    let mut stream = client.exec_stream(&request).await.unwrap();
    loop {
        if let ExecEvent::ToolCall { .. } = within("the call", STEP_LIMIT, stream.next())
            .await
            .unwrap()
            .unwrap()
        {
            break;
        }
    }
    drop(stream);
    let next = within("the next request", STEP_LIMIT, client.exec(&next))
        .await
        .unwrap();
    assert_eq!(next.result, json!(42), "{next:?}");
}

/// Python, in either runtime: tools are functions of the module `tools` (also importable by
/// name), a failed call raises `tools.ToolError`, arguments and answers larger than one host
/// call carries (with text beyond ASCII) travel whole, a call without an answer fails at its
/// limit, a caller gone mid-wait frees the sandbox, and an uncaught tool error fails the program.
async fn python_calls_tools(daemon: &Daemon) {
    let code = "from tools import population\n\
        import tools\n\
        total = sum(tools.get_weather(city=c)['temp'] for c in ['Paris', 'Oslo'])\n\
        try:\n    tools.fail()\nexcept tools.ToolError as e:\n    failed = str(e)\n\
        try:\n    tools.get_weather(town='x')\nexcept tools.ToolError as e:\n    bad = str(e)\n\
        text = 'é€' * 20000\n\
        echoed = tools.echo(text=text)['text'] == text\n\
        [total, population({'city': 'Lima'}), failed, bad, echoed]";
    let request = ExecRequest::new(Language::Python, code);
    let (_, calls, response) = run_with_tools(&daemon.client(), request, |c| Some(answer(c))).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(
        response.result,
        json!([
            18,
            4000,
            "tools.fail: the service is down",
            "tools.get_weather: \"city\" is a required property",
            true
        ])
    );
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["get_weather", "get_weather", "fail", "echo", "population"]
    );
    // A call without an answer fails at its own limit; the next call is answered.
    let code = "import tools\n\
        try:\n    tools.population(city='X')\nexcept tools.ToolError as e:\n    first = str(e)\n\
        [first, tools.population(city='YY')]";
    let request = ExecRequest {
        tool_timeout_ms: Some(3000),
        ..ExecRequest::new(Language::Python, code)
    };
    let mut first = true;
    let answered = |call: &Call| (!std::mem::take(&mut first)).then(|| answer(call));
    let (_, _, response) = run_with_tools(&daemon.client(), request, answered).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    let message = response.result[0].as_str().unwrap_or_default();
    assert!(message.contains("no answer within 3000 ms"), "{response:?}");
    assert_eq!(response.result[1], json!(2000), "{response:?}");
    // A caller gone mid-wait frees the sandbox.
    let waiting = ExecRequest::new(Language::Python, "import tools\ntools.population(city='Z')");
    let next = ExecRequest::new(Language::Python, "6 * 7");
    goes_away_mid_wait(&daemon.client(), waiting, next).await;
    // Not caught: the program fails with the tool's error in its traceback.
    let request = ExecRequest::new(Language::Python, "import tools\ntools.fail()");
    let (_, _, response) = run_with_tools(&daemon.client(), request, |c| Some(answer(c))).await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    assert!(
        response
            .stderr
            .contains("ToolError: tools.fail: the service is down"),
        "{response:?}"
    );
}

#[tokio::test]
async fn native_python_calls_tools_and_fetches_through_the_host() {
    // One daemon for both (the native guest takes long to start under emulation).
    let servers = egress::servers().await;
    let mut args = vec!["--default-timeout-ms", "30000"];
    args.extend(servers.args.iter().map(String::as_str));
    let daemon = Daemon::start_with_native_python(&["python=1"], &args).await;
    python_calls_tools(&daemon).await;
    egress::python_fetches_through_urllib(&daemon, &servers).await;
}

#[tokio::test]
async fn webassembly_python_calls_tools_and_fetches_through_the_host() {
    let servers = egress::servers().await;
    let mut args = vec!["--default-timeout-ms", "30000"];
    args.extend(servers.args.iter().map(String::as_str));
    let daemon = Daemon::start_with_python(&["python=1"], &args).await;
    python_calls_tools(&daemon).await;
    egress::python_fetches_through_urllib(&daemon, &servers).await;
}

#[tokio::test]
async fn answers_only_from_the_caller_once_each_and_the_audit_line_counts_the_calls() {
    const ALICE: (u32, u32) = (1000, 1000);
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.log");
    let audit_arg = audit.to_string_lossy().into_owned();
    let daemon = Daemon::start(&[
        "--pool",
        "javascript=1",
        "--audit-log",
        &audit_arg,
        "--default-timeout-ms",
        "30000",
    ])
    .await;
    daemon.open_socket_to_everyone();
    let client = daemon.client();
    let request = ExecRequest {
        tools: tools(),
        ..js("const a = await tools.population({city: 'Rome'});\n\
              const b = await tools.population({city: 'Oslo'});\n\
              a + b")
    };
    let mut stream = client.exec_stream(&request).await.unwrap();
    let mut execution = String::new();
    let mut refusals = Vec::new();
    let response = loop {
        match within("the next event", STEP_LIMIT, stream.next())
            .await
            .unwrap()
            .unwrap()
        {
            ExecEvent::Started { execution_id } => execution = execution_id,
            ExecEvent::ToolCall { id, .. } if id == "call_1" => {
                // Another user: for them the execution does not exist.
                let path = hyperlightd_api::paths::tool_results(&execution);
                let body = json!({"id": id, "result": 1}).to_string();
                let request = hyperlightd_e2e::post_request(&path, body.as_bytes());
                let (status, body) = raw_request_as(ALICE, daemon.socket(), &request).await;
                let body: Value = serde_json::from_slice(&body).unwrap();
                refusals.push((status, body["error"]["kind"].clone()));
                // A call it never made, then the answer twice (the program still waits for
                // its second call, so the second answer finds the execution running).
                let unknown = ToolAnswer::ok("call_9", json!(0));
                let unknown = client.answer_tool(&execution, &unknown).await;
                refusals.push((0, json!(unknown.unwrap_err().to_string())));
                let ours = ToolAnswer::ok(&id, json!(4000));
                client.answer_tool(&execution, &ours).await.unwrap();
                let again = client.answer_tool(&execution, &ours).await;
                refusals.push((0, json!(again.unwrap_err().to_string())));
            }
            ExecEvent::ToolCall { id, .. } => {
                let ours = ToolAnswer::ok(&id, json!(3000));
                client.answer_tool(&execution, &ours).await.unwrap();
            }
            ExecEvent::Result(response) => break response,
            other => panic!("unexpected event {other:?}"),
        }
    };
    // None of the refused answers changed anything: the program got only the caller's.
    assert_eq!(response.result, json!(7000), "{response:?}");
    assert_eq!(
        refusals[0],
        (404, json!("execution_not_found")),
        "{refusals:?}"
    );
    let kind = |i: usize| refusals[i].1.as_str().unwrap().to_owned();
    assert!(kind(1).contains("tool_call_not_found"), "{refusals:?}");
    assert!(kind(2).contains("tool_call_answered"), "{refusals:?}");
    // The audit line names the tools called and how often, never arguments or results.
    let line = within("the audit line", STEP_LIMIT, async {
        loop {
            let lines = audit_lines(&audit);
            if let Some(line) = lines.into_iter().find(|l| l["audit"] == "exec") {
                break line;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(line["tool_calls"], json!({"population": 2}), "{line}");
    assert!(!line.to_string().contains("Rome"), "{line}");
}

#[tokio::test]
async fn calls_past_the_limits_fail_in_the_program_and_never_reach_the_caller() {
    let daemon = Daemon::start(&[
        "--pool",
        "javascript=1",
        "--max-tool-calls",
        "3",
        "--max-tool-bytes",
        "2000",
        "--default-timeout-ms",
        "30000",
    ])
    .await;
    let client = daemon.client();
    let code = "const out = [];\n\
        for (let i = 0; i < 4; i++) {\n\
          try { out.push(await tools.population({city: 'C' + i})); } catch (e) { out.push(e.message); }\n\
        }\n\
        out";
    let (_, calls, response) = run_with_tools(&client, js(code), |c| Some(answer(c))).await;
    assert_eq!(
        calls.len(),
        3,
        "the fourth never reached the caller: {calls:?}"
    );
    let first = &response.result.as_array().unwrap()[..3];
    assert_eq!(
        first,
        [json!(2000), json!(2000), json!(2000)],
        "{response:?}"
    );
    let fourth = response.result[3].as_str().unwrap();
    assert!(fourth.contains("made its 3 tool calls"), "{fourth}");

    // Arguments over the byte limit fail at the call; an answer over it is refused to the
    // caller (413) and fails in the program.
    let code = "let big, huge;\n\
        try { await tools.echo({text: 'x'.repeat(3000)}); } catch (e) { big = e.message; }\n\
        try { await tools.get_weather({city: 'Big'}); } catch (e) { huge = e.message; }\n\
        [big, huge]";
    let huge = |call: &Call| Some(ToolAnswer::ok(&call.id, json!({"text": "z".repeat(5000)})));
    let (_, calls, response) = run_with_tools(&client, js(code), huge).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["get_weather"]);
    let refused = calls[0].refused.as_deref().unwrap_or_default();
    assert!(refused.contains("payload_too_large"), "{refused}");
    let big = response.result[0].as_str().unwrap();
    assert!(big.contains("over the limit of 2000 bytes"), "{big}");
    let huge = response.result[1].as_str().unwrap();
    assert!(
        huge.contains("answer was") && huge.contains("2000 bytes"),
        "{huge}"
    );
}

#[tokio::test]
async fn an_execution_past_its_wall_clock_cap_ends_and_the_sandbox_serves_the_next() {
    let daemon = Daemon::start(&[
        "--pool",
        "javascript=1",
        "--max-tool-wall-clock-ms",
        "6000",
        "--default-timeout-ms",
        "30000",
    ])
    .await;
    let client = daemon.client();
    // The call may wait a minute, but the execution as a whole only six seconds (room for
    // the program to reach its call on a busy machine).
    let request = ExecRequest {
        tool_timeout_ms: Some(60_000),
        ..js("try { await tools.population({city: 'Z'}); } catch (e) { 'caught' }")
    };
    let (_, calls, response) = run_with_tools(&client, request, |_| None).await;
    assert_eq!(calls.len(), 1);
    assert_eq!(response.status, ExecStatus::Timeout, "{response:?}");
    let error = response.error.unwrap();
    assert_eq!(error.kind, ErrorKind::WallClock, "{error:?}");
    let next = within("the next request", STEP_LIMIT, client.exec(&js("6 * 7")))
        .await
        .unwrap();
    assert_eq!(next.result, json!(42), "{next:?}");
}

#[tokio::test]
async fn the_client_answers_through_its_handlers_and_a_session_keeps_its_state() {
    let daemon = daemon().await;
    let client = daemon.client();
    let handlers = Tools::new()
        .with(tools().remove(0), |arguments| async move {
            let city = arguments["city"].as_str().unwrap_or_default().to_owned();
            Ok(json!({"temp": city.len() * 2}))
        })
        .with(tools().remove(2), |_| async {
            Err("the service is down".to_owned())
        });
    let session = client
        .create_session(&CreateSessionRequest::new(Language::Javascript))
        .await
        .unwrap();
    let exec = |code: &str| SessionExecRequest::new(code);
    client
        .session_exec(&session.id, &exec("var seen = [];"))
        .await
        .unwrap();
    let code = "for (const c of ['Paris', 'Oslo', 'Lima']) seen.push((await tools.get_weather({city: c})).temp);\n\
        try { await tools.fail({}); } catch (e) { seen.push(e.message); }\n\
        seen.length";
    let response = client
        .session_exec_with_tools(&session.id, &exec(code), &handlers)
        .await
        .unwrap();
    assert_eq!(response.result, json!(4), "{response:?}");
    // The next exec, without tools, sees what the one with tools left.
    let response = client
        .session_exec(&session.id, &exec("seen"))
        .await
        .unwrap();
    assert_eq!(
        response.result,
        json!([10, 8, 8, "tools.fail: the service is down"]),
        "{response:?}"
    );
    // And a plain exec with the same handlers.
    let response = client
        .exec_with_tools(
            &js("(await tools.get_weather({city: 'Rome'})).temp"),
            &handlers,
        )
        .await
        .unwrap();
    assert_eq!(response.result, json!(8), "{response:?}");

    // This daemon allows no destination: fetch reaches nothing, and a request cannot ask for one.
    let code = "let got = 'reached';\n\
                try { await fetch('http://127.0.0.1:1/'); } catch (e) { got = [e.cause.kind, e.message]; }\n\
                got";
    let response = client.exec(&js(code)).await.unwrap();
    assert_eq!(response.result[0], "refused", "{response:?}");
    assert!(
        response.result[1]
            .as_str()
            .unwrap()
            .contains("reach nothing")
    );
    let asking = ExecRequest {
        network: Some(hyperlightd_client::Network { allow: Vec::new() }),
        ..js("1")
    };
    let refused = client.exec(&asking).await.unwrap_err().to_string();
    assert!(refused.contains("reach nothing"), "{refused}");
    assert!(client.health().await.unwrap().egress.is_none());
}
