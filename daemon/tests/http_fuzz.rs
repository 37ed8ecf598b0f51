//! Property-based fuzzing of everything the daemon parses from outside: HTTP requests (through
//! the real server and API, against a stub executor, over an in-memory stream), the wire types
//! clients decode, and the runner replies a guest returns. Every input must be answered or
//! refused without a panic, within a time bound, and within a memory budget: this binary's
//! allocator (`cap`) makes any allocation past the budget fail, which aborts the test.
//!
//! `./x test` runs a short pass (`PROPTEST_CASES`, default 256 per property). A longer one:
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test --release -p hyperlightd --test http_fuzz
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cap::Cap;
use hyperlightd::http::Api;
use hyperlightd::metrics::Metrics;
use hyperlightd::sandbox::guest::RunnerReply;
use hyperlightd::server::{self, ServerConfig};
use hyperlightd::service::{Limits, Service};
use hyperlightd_api::{ErrorResponse, ExecRequest, ExecResponse, HealthResponse};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::Stub;

#[global_allocator]
static ALLOCATOR: Cap<System> = Cap::new(System, usize::MAX);

/// What one input may allocate beyond what was allocated before it: the body limit below many
/// times over, for buffers, the parsed request and the answer.
const BUDGET: usize = 16 * 1024 * 1024;

const MAX_BODY: usize = 64 * 1024;
const MAX_HEADER: usize = 8 * 1024;

/// Runs `work` with allocations capped at [`BUDGET`] more than now.
fn within_budget<T>(work: impl FnOnce() -> T) -> T {
    // Only this test's thread allocates meanwhile: the properties run one at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    ALLOCATOR
        .set_limit(ALLOCATOR.allocated().saturating_add(BUDGET))
        .unwrap();
    let result = work();
    ALLOCATOR.set_limit(usize::MAX).unwrap();
    result
}

fn api() -> Arc<Api<Stub>> {
    let limits = Limits {
        default_timeout: Duration::from_secs(1),
        max_timeout: Duration::from_secs(2),
        max_body_bytes: MAX_BODY,
        max_code_bytes: MAX_BODY / 2,
        max_output_bytes: 1024,
        max_result_bytes: 1024,
        body_read_timeout: Duration::from_secs(1),
        files: hyperlightd::job::FileLimits {
            max_entries: 16,
            max_bytes: 1024,
        },
        tools: hyperlightd::service::ToolGrants::default(),
    };
    Arc::new(Api::of(Service::new(
        Arc::new(Stub::new()),
        Metrics::new().unwrap(),
        limits,
        BTreeMap::new(),
    )))
}

const CONFIG: ServerConfig = ServerConfig {
    max_connections: 1,
    max_header_bytes: MAX_HEADER,
    idle_timeout: Duration::from_secs(1),
    drain: Duration::from_secs(1),
    identify: hyperlightd::caller::Identify::BY_CREDENTIALS,
};

/// Serves one connection that receives `input`, as a client that then waits for the daemon to
/// close it, and returns all the daemon wrote back. The runtime's clock is paused, so the
/// daemon's timeouts (1 s for a head, a body, the next request) pass at once once it idles;
/// serving must end within 10 s of that virtual time.
fn serve(runtime: &tokio::runtime::Runtime, input: &[u8]) -> Vec<u8> {
    runtime.block_on(async {
        let (mut client, daemon) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(async move {
            let caller = hyperlightd::job::Caller {
                uid: 1000,
                gid: 1000,
                pid: None,
                pod: hyperlightd::job::PodOf::Unread,
                on_behalf_of: None,
            };
            let _ = server::serve_one(daemon, api(), &CONFIG, caller).await;
        });
        let exchange = async {
            let (mut from_daemon, mut to_daemon) = tokio::io::split(&mut client);
            let writing = async {
                // The daemon may stop reading early (413, 431); that is fine. The write side
                // stays open, as a real client's does: hyper takes its end for the client
                // going away.
                let _ = to_daemon.write_all(input).await;
            };
            let mut answer = Vec::new();
            let reading = from_daemon.read_to_end(&mut answer);
            let (_, read) = tokio::join!(writing, reading);
            let _ = read;
            answer
        };
        let answer = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("the daemon answered and closed within 10 s");
        tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("the connection ended within 10 s")
            .expect("serving the connection did not panic");
        answer
    })
}

/// Checks every answer in `bytes`: a status the API documents, and for the API's own errors a
/// JSON error body. Returns the statuses.
fn check_answers(bytes: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(bytes);
    let mut statuses = Vec::new();
    for answer in text.split("HTTP/1.1 ").skip(1) {
        let status: u16 = answer
            .get(..3)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not a status line: {:?}", &answer[..answer.len().min(40)]));
        // 100: the interim answer to `Expect: 100-continue`.
        assert!(
            [100, 200, 400, 404, 405, 408, 413, 414, 431, 503, 505].contains(&status),
            "undocumented status {status}: {answer:?}"
        );
        let api_error = (400..=405).contains(&status) || status == 413 || status == 503;
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| &body[..body.find("HTTP/1.1 ").unwrap_or(body.len())]);
        // hyper's own answers (a 400 for a request it cannot parse) have no body.
        if let Some(body) = body.filter(|body| api_error && !body.is_empty()) {
            serde_json::from_str::<ErrorResponse>(body)
                .unwrap_or_else(|e| panic!("an error without the error body ({e}): {body:?}"));
        }
        statuses.push(status);
    }
    statuses
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The harness itself: a good request, a bad one and an oversized head get their answers, so
/// that the properties below cannot pass on silence.
#[test]
fn the_harness_sees_the_daemons_answers() {
    let runtime = runtime();
    let good = br#"{"language":"javascript","code":"1+1"}"#;
    let mut request = format!(
        "POST /v1/exec HTTP/1.1\r\nHost: d\r\nContent-Length: {}\r\n\r\n",
        good.len()
    )
    .into_bytes();
    request.extend_from_slice(good);
    let bad = b"POST /v1/exec HTTP/1.1\r\nHost: d\r\nContent-Length: 2\r\n\r\n{}";
    let mut pipelined = request.clone();
    pipelined.extend_from_slice(bad);
    let answer = within_budget(|| serve(&runtime, &pipelined));
    assert_eq!(
        check_answers(&answer),
        [200, 400],
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let text = String::from_utf8_lossy(&answer);
    let body = text.split("\r\n\r\n").nth(1).unwrap();
    let first: ExecResponse =
        serde_json::from_str(&body[..body.find("HTTP/1.1").unwrap()]).unwrap();
    assert_eq!(first.result, serde_json::json!(3));

    let mut huge = b"GET /v1/health HTTP/1.1\r\nHost: d\r\nX: ".to_vec();
    huge.resize(huge.len() + 2 * MAX_HEADER, b'a');
    assert_eq!(check_answers(&serve(&runtime, &huge)), [431]);
}

/// A request line, headers and body assembled from parts that are each plausible or broken.
fn structured_request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("PUT".to_owned()),
        "[A-Z]{1,8}",
        ".{0,8}",
    ];
    let path = prop_oneof![
        Just("/v1/exec".to_owned()),
        Just("/v1/health".to_owned()),
        Just("/v1/health/live".to_owned()),
        Just("/v1/health/ready".to_owned()),
        Just("/metrics".to_owned()),
        "/[a-z0-9/?=&%.]{0,40}",
        ".{0,20}",
    ];
    let header = prop_oneof![
        (0u64..200_000).prop_map(|n| format!("Content-Length: {n}")),
        Just("Content-Length: -1".to_owned()),
        Just("Content-Length: 99999999999999999999999".to_owned()),
        Just("Transfer-Encoding: chunked".to_owned()),
        Just("Expect: 100-continue".to_owned()),
        Just("Connection: close".to_owned()),
        Just("Content-Type: application/json".to_owned()),
        "[A-Za-z-]{1,20}: [ -~]{0,60}",
        ".{0,40}",
    ];
    let exec = (
        prop_oneof![
            Just("javascript".to_owned()),
            Just("py".to_owned()),
            ".{0,10}"
        ],
        prop_oneof![".{0,200}", Just("overload".to_owned())],
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(language, code, timeout_ms, max_output_bytes)| {
            let mut body = serde_json::json!({ "language": language, "code": code });
            if let Some(t) = timeout_ms {
                body["timeout_ms"] = t.into();
            }
            if let Some(m) = max_output_bytes {
                body["max_output_bytes"] = m.into();
            }
            body.to_string().into_bytes()
        });
    let body = prop_oneof![
        exec.clone(),
        proptest::collection::vec(any::<u8>(), 0..2048),
        "[{}\\[\\]\":,0-9a-z ]{0,300}".prop_map(String::into_bytes),
        exec.prop_map(|body| {
            // As chunks.
            let mut chunked = Vec::new();
            for piece in body.chunks(7) {
                chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                chunked.extend_from_slice(piece);
                chunked.extend_from_slice(b"\r\n");
            }
            chunked.extend_from_slice(b"0\r\n\r\n");
            chunked
        }),
    ];
    (
        method,
        path,
        proptest::collection::vec(header, 0..8),
        body,
        any::<bool>(),
        1usize..3,
    )
        .prop_map(|(method, path, headers, body, declare, repeat)| {
            let mut one = format!("{method} {path} HTTP/1.1\r\nHost: d\r\n");
            for header in headers {
                one.push_str(&header);
                one.push_str("\r\n");
            }
            if declare {
                one.push_str(&format!("Content-Length: {}\r\n", body.len()));
            }
            one.push_str("\r\n");
            let mut one = one.into_bytes();
            one.extend_from_slice(&body);
            // Pipelined: the same request again on the connection.
            one.repeat(repeat)
        })
}

proptest! {
    #[test]
    fn any_bytes_on_a_connection_are_answered_or_refused(
        input in proptest::collection::vec(any::<u8>(), 0..4096)
    ) {
        let runtime = runtime();
        let answer = within_budget(|| serve(&runtime, &input));
        check_answers(&answer);
    }

    #[test]
    fn any_request_is_answered_with_a_documented_status(input in structured_request()) {
        let runtime = runtime();
        let answer = within_budget(|| serve(&runtime, &input));
        check_answers(&answer);
    }

    #[test]
    fn the_wire_types_decode_any_input_without_panicking(
        input in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..1024),
            "[{}\\[\\]\":,0-9a-z_ .eE+-]{0,400}".prop_map(String::into_bytes),
        ]
    ) {
        within_budget(|| {
            let _ = serde_json::from_slice::<ExecRequest>(&input);
            let _ = serde_json::from_slice::<ExecResponse>(&input);
            let _ = serde_json::from_slice::<HealthResponse>(&input);
            let _ = serde_json::from_slice::<ErrorResponse>(&input);
        });
    }

    #[test]
    fn any_runner_reply_is_parsed_or_refused_without_panicking(
        input in prop_oneof![
            ".{0,300}",
            "\\{\"ok\":(true|false|1|null)(,\"result\":[0-9\\[\\]{}\"a-z,:]{0,40})?(,\"error\":\\{\"kind\":\"[a-z_]{0,20}\",\"message\":\".{0,20}\"\\})?\\}",
        ]
    ) {
        within_budget(|| {
            let _ = RunnerReply::parse(&input);
        });
    }
}

/// Deeply nested JSON must not blow the stack of the thread that parses a request.
#[test]
fn a_deeply_nested_body_is_refused_not_a_crash() {
    let runtime = runtime();
    let mut body = "[".repeat(30_000);
    body.push_str(&"]".repeat(30_000));
    let body = format!(r#"{{"language":"javascript","code":"1","timeout_ms":{body}}}"#);
    let request = format!(
        "POST /v1/exec HTTP/1.1\r\nHost: d\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = within_budget(|| serve(&runtime, request.as_bytes()));
    assert_eq!(
        check_answers(&answer),
        [400],
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
