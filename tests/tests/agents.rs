//! End-to-end tests of what agents use: `hlctl mcp` driven by the official MCP Python SDK, the
//! client crate's agent tool in a complete tool loop (the `agent_loop` example), and the
//! daemon's real answers checked against the OpenAPI document (api/openapi.json).
//!
//! Needs a KVM that runs Hyperlight guests (`cargo xtask test` runs them in the nested-KVM VM),
//! the Python guest, and the MCP SDK's virtual environment (both built by `cargo xtask test`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use hyperlightd_e2e::{
    Daemon, STEP_LIMIT, binary, exec_request, get_request, mcp_client_python,
    mcp_server_filesystem, raw_request, within,
};
use serde_json::{Value, json};

/// Runs tests/mcp/client.py (the MCP SDK as a host) against `hlctl --socket SOCKET mcp`, with
/// `calls` as the arguments of one `run_code` call each, and returns its report.
async fn mcp_report(socket: &std::path::Path, calls: &Value) -> Value {
    mcp_report_with(socket, calls, &json!([])).await
}

/// [`mcp_report`], with `mcp_args` added to `hlctl mcp`'s arguments.
async fn mcp_report_with(socket: &std::path::Path, calls: &Value, mcp_args: &Value) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/client.py");
    let mut command = Command::new(mcp_client_python());
    command
        .arg(script)
        .arg(binary("hlctl"))
        .arg(socket)
        .arg(calls.to_string())
        .arg(mcp_args.to_string());
    let run = tokio::task::spawn_blocking(move || command.output());
    let output = within("the MCP client", Duration::from_secs(300), run)
        .await
        .expect("the client thread")
        .expect("the MCP client starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the MCP client failed: {stderr}");
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("the MCP client's report is not JSON ({e}): {stderr}"))
}

fn text_of(call: &Value) -> &str {
    call["text"][0].as_str().expect("a text content block")
}

async fn both_languages() -> Daemon {
    Daemon::start_with_python(&["javascript=1", "python=1"], &[]).await
}

#[tokio::test]
async fn the_mcp_python_sdk_runs_code_through_hlctl_mcp() {
    let daemon = both_languages().await;
    // The calls share state per language (one session each, made on first use): a call waits
    // for the state the one before it left to be saved, seconds under emulation, hence the
    // generous time limits.
    let calls = json!([
        { "language": "javascript", "code": "console.log('from js'); 6 * 7" },
        { "language": "python", "code": "import statistics\nprint('from python')\nkept = 41\nstatistics.median([3, 1, 2])", "timeout_ms": 60000 },
        { "language": "python", "code": "def f():\n    raise ValueError('bad input')\nf()", "timeout_ms": 60000 },
        { "language": "javascript", "code": "for (;;) {}", "timeout_ms": 5000 },
        { "language": "python" },
        { "language": "python", "code": "kept + 1", "timeout_ms": 60000 },
    ]);
    let report = mcp_report(daemon.socket(), &calls).await;
    assert_eq!(report["server"]["name"], "hyperlightd");
    let tools = report["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["name"], "run_code");
    assert_eq!(
        tools[0]["input_schema"]["properties"]["language"]["enum"],
        json!(["javascript", "python"]),
        "the languages the daemon serves"
    );
    let description = tools[0]["description"].as_str().unwrap();
    assert!(description.contains("Limits: 5 s per run"), "{description}");

    let calls = report["calls"].as_array().unwrap();
    let [js, py, raised, endless, invalid, kept] = calls.as_slice() else {
        panic!("six results: {calls:?}");
    };
    assert_eq!(js["is_error"], false, "{js}");
    assert!(text_of(js).starts_with("status: ok (javascript"), "{js}");
    assert!(text_of(js).contains("result: 42\nstdout:\nfrom js"), "{js}");
    assert_eq!(js["structured"]["result"], 42);

    assert_eq!(py["is_error"], false, "{py}");
    assert_eq!(py["structured"]["result"], 2);
    assert_eq!(py["structured"]["stdout"], "from python\n");

    assert_eq!(raised["is_error"], true, "{raised}");
    assert_eq!(raised["structured"]["status"], "error");
    assert_eq!(raised["structured"]["error"]["kind"], "exception");
    assert!(
        text_of(raised).contains("ValueError: bad input"),
        "{raised}"
    );
    assert!(
        text_of(raised).contains("what to do: The program raised an exception"),
        "{raised}"
    );

    assert_eq!(endless["is_error"], true, "{endless}");
    assert_eq!(endless["structured"]["status"], "timeout");
    assert!(
        text_of(endless).contains("time limit of 5000 ms"),
        "{endless}"
    );
    assert!(
        text_of(endless).contains("timeout_ms (at most 60000 ms)"),
        "{endless}"
    );

    assert_eq!(invalid["is_error"], true, "{invalid}");
    assert_eq!(invalid["structured"]["status"], "invalid_arguments");
    assert!(text_of(invalid).contains("`code` is missing"), "{invalid}");

    // State carried from the second call; the timed-out one was undone.
    assert_eq!(kept["structured"]["result"], 42, "{kept}");
    assert_eq!(endless["structured"]["rolled_back"], true, "{endless}");
    assert!(
        text_of(endless).contains("this call was undone"),
        "{endless}"
    );
    assert!(
        description.contains("State carries over between calls"),
        "{description}"
    );
    // The host closed the connection: the server deleted its sessions.
    let left = within("sessions", STEP_LIMIT, daemon.client().sessions())
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");

    let unknown = report["unknown_tool_error"].as_str().unwrap_or_default();
    assert!(unknown.contains("no tool named"), "{report}");
    println!("MCP client: mcp {} (PyPI)", report["sdk_version"]);
}

/// Code mode: `hlctl mcp` given two MCP servers this project did not write (the reference time
/// server from PyPI, the filesystem server from npm over a temporary directory) exposes their
/// tools to the code `run_code` runs; one call's program uses both in a loop and returns a
/// summary, and a tool's refusal is an exception the program catches.
#[tokio::test]
async fn code_mode_gives_programs_the_tools_of_real_mcp_servers() {
    let daemon = both_languages().await;
    let shared = tempfile::tempdir().unwrap();
    for (name, number) in [("a.txt", 5), ("b.txt", 7), ("c.txt", 30)] {
        std::fs::write(shared.path().join(name), format!("{number}\n")).unwrap();
    }
    let dir = shared.path().to_str().unwrap();
    let python = mcp_client_python();
    let config = json!({"mcpServers": {
        "time": {"command": python, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "fs": {"command": "node", "args": [mcp_server_filesystem(), dir]},
    }});
    let config_dir = tempfile::tempdir().unwrap();
    let config_path = config_dir.path().join("servers.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let code = format!(
        "import tools\n\
         D = {dir:?}\n\
         listing = tools.fs_list_directory(path=D)['content']\n\
         files = sorted(l.split('] ', 1)[1] for l in listing.splitlines() if l.startswith('[FILE]'))\n\
         total = 0\n\
         for name in files:\n    total += int(tools.fs_read_text_file(path=D + '/' + name)['content'])\n\
         try:\n    tools.fs_read_text_file(path='/etc/passwd')\n    outside = 'read'\n\
         except tools.ToolError as e:\n    outside = 'denied' if 'denied' in str(e) else str(e)\n\
         now = tools.time_get_current_time(timezone='UTC')\n\
         {{'files': files, 'total': total, 'outside': outside, 'timezone': now['timezone']}}"
    );
    let calls = json!([{ "language": "python", "code": code, "timeout_ms": 60000 }]);
    let args = json!(["--servers", config_path]);
    let report = mcp_report_with(daemon.socket(), &calls, &args).await;
    let description = report["tools"][0]["description"].as_str().unwrap();
    for signature in [
        "def tools.time_get_current_time(*, timezone: str) -> Any",
        "def tools.fs_read_text_file(*, path: str",
        "tools.fs_list_directory(args: {path: string}): Promise<any>",
    ] {
        assert!(
            description.contains(signature),
            "{signature} in {description}"
        );
    }
    let call = &report["calls"][0];
    assert_eq!(call["is_error"], false, "{call}");
    assert_eq!(
        call["structured"]["result"],
        json!({"files": ["a.txt", "b.txt", "c.txt"], "total": 42, "outside": "denied", "timezone": "UTC"}),
        "{call}"
    );
}

#[tokio::test]
async fn hlctl_mcp_without_a_daemon_answers_with_tool_errors() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody-listens.sock");
    let calls = json!([{ "language": "python", "code": "1 + 1" }]);
    let report = mcp_report(&socket, &calls).await;
    assert_eq!(report["tools"][0]["name"], "run_code", "tools are listed");
    let call = &report["calls"][0];
    assert_eq!(call["is_error"], true, "{call}");
    assert_eq!(call["structured"]["error"]["kind"], "unreachable");
    assert!(text_of(call).contains("not reachable"), "{call}");
}

#[tokio::test]
async fn the_agent_loop_example_recovers_from_an_error_and_answers() {
    let daemon = Daemon::start_with_python(&["python=1"], &[]).await;
    let mut command = Command::new(binary("examples/agent_loop"));
    command.env("HYPERLIGHTD_SOCKET", daemon.socket());
    let run = tokio::task::spawn_blocking(move || command.output());
    let output = within("the agent loop", STEP_LIMIT, run)
        .await
        .unwrap()
        .expect("the example starts");
    let transcript = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{transcript}\n{}", daemon.log());
    let messages: Vec<Value> = transcript
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tool_answers: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_answers.len(), 2, "{transcript}");
    assert!(tool_answers[0].contains("NameError"), "{}", tool_answers[0]);
    assert!(
        tool_answers[0].contains("what to do:"),
        "{}",
        tool_answers[0]
    );
    assert!(
        tool_answers[1].contains("result: 3.5"),
        "{}",
        tool_answers[1]
    );
    assert_eq!(
        messages.last().unwrap()["content"],
        "The median is 3.5.",
        "{transcript}"
    );
}

/// How an answer breaks the schema the document gives for it (empty when it does not).
fn violations(
    document: &Value,
    method: &str,
    path: &str,
    status: u16,
    body: &Value,
) -> Vec<String> {
    let schema = hyperlightd_api::openapi::response_schema(document, method, path, status)
        .unwrap_or_else(|| panic!("{method} {path} answered {status}, which the document lacks"));
    // The schema's references point into the document: validate from a root that holds them.
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": document["components"],
        "allOf": [schema],
    });
    let validator = jsonschema::validator_for(&root).expect("the document's schemas compile");
    validator.iter_errors(body).map(|e| e.to_string()).collect()
}

/// Checks a real answer against the document.
fn assert_documented(document: &Value, method: &str, path: &str, status: u16, body: &[u8]) {
    let body: Value = if path == "/metrics" {
        Value::String(String::from_utf8(body.to_vec()).unwrap())
    } else {
        serde_json::from_slice(body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    };
    let errors = violations(document, method, path, status, &body);
    assert!(
        errors.is_empty(),
        "{method} {path} {status} does not match the document: {errors:?}\n{body:#}"
    );
}

#[tokio::test]
async fn real_answers_match_the_openapi_document() {
    let document: Value =
        serde_json::from_str(include_str!("../../api/openapi.json")).expect("the document");
    let daemon = Daemon::start(&[
        "--pool",
        "javascript=1",
        "--max-body-bytes",
        "2048",
        "--max-code-bytes",
        "1024",
        "--body-read-timeout-ms",
        "500",
    ])
    .await;
    let socket = daemon.socket();
    let exec = |body: Value| exec_request(body.to_string().as_bytes());
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "javascript", "code": "console.log(1); ({a: [1, 'x']})"})),
            200,
        ),
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "javascript", "code": "throw new TypeError('t')"})),
            200,
        ),
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "javascript", "code": "let x = ;"})),
            200,
        ),
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "javascript", "code": "for(;;){}", "timeout_ms": 300})),
            200,
        ),
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "python", "code": "1"})),
            400,
        ),
        ("POST", "/v1/exec", exec_request(b"{not json"), 400),
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "javascript", "code": "1".repeat(1500)})),
            413,
        ),
        (
            "POST",
            "/v1/exec",
            exec(json!({"language": "javascript", "code": "1".repeat(3000)})),
            413,
        ),
        (
            "POST",
            "/v1/exec",
            {
                // A body that never finishes arriving.
                let mut r = exec_request(&[b' '; 100]);
                r.truncate(r.len() - 90);
                r
            },
            408,
        ),
        ("GET", "/v1/exec", get_request("/v1/exec"), 405),
        ("GET", "/v1/nothing", get_request("/v1/nothing"), 404),
        ("GET", "/v1/health", get_request("/v1/health"), 200),
        (
            "GET",
            "/v1/health/live",
            get_request("/v1/health/live"),
            200,
        ),
        (
            "GET",
            "/v1/health/ready",
            get_request("/v1/health/ready"),
            200,
        ),
        ("GET", "/metrics", get_request("/metrics"), 200),
    ];
    for (method, path, request, expected) in cases {
        let (status, body) = raw_request(socket, &request).await;
        assert_eq!(
            status,
            expected,
            "{method} {path}: {}",
            String::from_utf8_lossy(&body)
        );
        assert_documented(&document, method, path, status, &body);
    }
    // The check can fail: answers the document rules out are caught.
    let ok = json!({"status": "ok", "stdout": "", "stderr": "", "truncated": false,
                    "result": null, "error": null, "duration_ms": 1.0, "queued_ms": 0.1});
    assert!(violations(&document, "POST", "/v1/exec", 200, &ok).is_empty());
    let mut missing = ok.clone();
    missing.as_object_mut().unwrap().remove("truncated");
    let mut refusal_in_a_200 = ok.clone();
    refusal_in_a_200["error"] = json!({"kind": "overloaded", "message": "m"});
    for wrong in [missing, refusal_in_a_200] {
        assert!(
            !violations(&document, "POST", "/v1/exec", 200, &wrong).is_empty(),
            "{wrong}"
        );
    }
    let busy = json!({"error": {"kind": "timeout", "message": "m"}});
    assert!(!violations(&document, "POST", "/v1/exec", 503, &busy).is_empty());
    // The limits health reports are the ones the daemon was started with.
    let health = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    assert_eq!(health.limits.max_code_bytes, 1024);
    assert_eq!(
        health.limits.memory_mib[&hyperlightd_api::Language::Javascript],
        64
    );
}
