//! End-to-end tests of traces (issue 60), in the tools binary's VM boots: a daemon sending spans
//! over OTLP to a collector on the VM's loopback (`hyperlightd_e2e::otlp`), an exec with a tool
//! call and an outbound request sent under a caller's `traceparent`, and what the collector
//! receives: the request's span under the caller's, its steps under it, the restore in a trace
//! of its own linked to it, and none of the program's data.

use std::path::Path;
use std::time::Duration;

use hyperlightd_e2e::otlp::{Collector, Received};
use hyperlightd_e2e::{Daemon, audit_lines, js};
use serde_json::json;

use super::{ToolAnswer, egress, run_with_tools};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// How long the collector may wait for a batch: the daemon sends every 200 ms here.
const EXPORT_LIMIT: Duration = Duration::from_secs(60);

fn named<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span {name:?}: {spans:#?}"))
}

#[tokio::test]
async fn an_exec_is_traced_under_the_callers_span_with_its_tool_call_and_request() {
    let collector = Collector::start().await;
    let servers = egress::servers().await;
    let endpoint = collector.endpoint();
    let mut args: Vec<&str> = vec![
        "--pool",
        "javascript=1",
        "--default-timeout-ms",
        "30000",
        "--tool-timeout-ms",
        "5000",
        "--otlp-endpoint",
        &endpoint,
    ];
    args.extend(servers.args.iter().map(String::as_str));
    let env = [
        ("OTEL_BSP_SCHEDULE_DELAY", Path::new("200")),
        ("OTEL_SERVICE_NAME", Path::new("hyperlightd-e2e")),
    ];
    let daemon = Daemon::start_with_env(&args, &env).await;
    let port = servers.http.port();
    // Data the spans must not carry: in the code, the query, the tool's arguments and result,
    // the response's body, and the secret the daemon adds to the request.
    let code = format!(
        "const marker = 'CODE_MARKER';\n\
         const r = await fetch('http://127.0.0.1:{port}/echo?q=QUERY_MARKER');\n\
         const echo = await r.json();\n\
         const w = await tools.get_weather({{city: 'ARGUMENT_MARKER'}});\n\
         ({{status: r.status, temp: w.temp, authorized: echo.authorized}})"
    );
    let client = daemon.client().with_traceparent(TRACEPARENT).unwrap();
    let (_, calls, response) = run_with_tools(&client, js(&code), |call| {
        Some(ToolAnswer::ok(
            &call.id,
            json!({"temp": 21, "note": "RESULT_MARKER"}),
        ))
    })
    .await;
    assert_eq!(
        response.status,
        hyperlightd_client::ExecStatus::Ok,
        "{response:?}"
    );
    assert_eq!(
        response.result,
        json!({"status": 200, "temp": 21, "authorized": true})
    );
    assert_eq!(calls.len(), 1);

    let names = [
        "POST /v1/exec",
        "queue wait",
        "guest call",
        "execute_tool get_weather",
        "tool wait",
        "GET",
        "restore",
    ];
    let spans = collector
        .wait_for("the exec's spans", EXPORT_LIMIT, |spans| {
            names
                .iter()
                .all(|name| spans.iter().any(|s| s.name == *name))
        })
        .await;

    let request = named(&spans, "POST /v1/exec");
    assert_eq!(request.kind, Received::SERVER);
    assert_eq!(request.trace_id, TRACE_ID, "in the caller's trace");
    assert_eq!(
        request.parent_span_id, PARENT_SPAN,
        "under the caller's span"
    );
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", "/v1/exec"),
        ("http.response.status_code", "200"),
        ("hyperlightd.language", "javascript"),
        ("hyperlightd.exec.status", "ok"),
    ] {
        assert_eq!(request.attribute(key), Some(value), "{key}: {request:#?}");
    }
    assert_eq!(
        request.resource.get("service.name").map(String::as_str),
        Some("hyperlightd-e2e"),
        "OTEL_SERVICE_NAME names the service"
    );
    assert!(request.resource.contains_key("service.version"));

    let child_of = |name: &str, parent: &Received| {
        let span = named(&spans, name);
        assert_eq!(span.trace_id, TRACE_ID, "{name}");
        assert_eq!(span.parent_span_id, parent.span_id, "{name}'s parent");
        span
    };
    child_of("queue wait", request);
    let call = child_of("guest call", request);
    let tool = child_of("execute_tool get_weather", call);
    assert_eq!(tool.attribute("gen_ai.tool.name"), Some("get_weather"));
    assert_eq!(
        tool.attribute("gen_ai.tool.call.id"),
        Some(calls[0].id.as_str())
    );
    child_of("tool wait", call);
    let outbound = child_of("GET", call);
    assert_eq!(outbound.kind, Received::CLIENT);
    assert_eq!(outbound.attribute("server.address"), Some("127.0.0.1"));
    assert_eq!(
        outbound.attribute("server.port"),
        Some(port.to_string().as_str())
    );
    assert_eq!(outbound.attribute("http.response.status_code"), Some("200"));
    assert_eq!(
        outbound.attribute("url.full"),
        Some(format!("http://127.0.0.1:{port}/echo").as_str()),
        "no query"
    );
    assert!(
        call.start <= tool.start && tool.end <= call.end,
        "the call holds its steps"
    );

    let restore = named(&spans, "restore");
    assert_ne!(
        restore.trace_id, TRACE_ID,
        "after the answer: a trace of its own"
    );
    assert!(restore.parent_span_id.is_empty());
    assert_eq!(
        restore.links,
        vec![(TRACE_ID.to_owned(), request.span_id.clone())],
        "linked to the request"
    );

    let everything = format!("{spans:?}");
    for marker in [
        "CODE_MARKER",
        "QUERY_MARKER",
        "ARGUMENT_MARKER",
        "RESULT_MARKER",
        hyperlightd_e2e::web::SECRET,
    ] {
        assert!(
            !everything.contains(marker),
            "{marker} in a span: {everything}"
        );
    }
    assert!(collector.refused().is_empty(), "{:?}", collector.refused());
    let lines = audit_lines(&servers.audit);
    let exec = lines
        .iter()
        .find(|line| line["audit"] == "exec")
        .expect("the exec's audit line");
    assert_eq!(exec["trace_id"], TRACE_ID, "{exec}");
}
