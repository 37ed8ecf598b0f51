//! End-to-end tests on a KVM that runs Hyperlight guests: the real daemon, driven through the
//! client library and `hlctl`. `cargo xtask test` runs them in the nested-KVM VM on hosts whose
//! own KVM cannot run guests. Without a working KVM every test here fails, with the daemon's
//! startup error in the message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hyperlightd_client::{Error, ErrorKind, ExecStatus, Language};
use hyperlightd_e2e::{
    Daemon, STEP_LIMIT, assert_capped_and_finished, audit_lines, exec_request, get_request, js,
    js_with_timeout, metric, raw_request, run, within,
};
use nix::sys::signal::Signal;
use serde_json::json;

#[path = "kvm/callers.rs"]
mod callers;
#[path = "kvm/pool.rs"]
mod pool;
#[path = "kvm/service.rs"]
mod service;

#[tokio::test]
async fn hello_world_goes_to_stdout() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let response = run(&daemon, js("console.log('hello, world')")).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.stdout, "hello, world\n");
    assert_eq!(response.stderr, "");
    assert_eq!(response.result, serde_json::Value::Null);
    assert!(response.error.is_none());
    assert!(response.duration_ms > 0.0);
}

#[tokio::test]
async fn result_is_the_value_of_the_last_expression() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let response = run(
        &daemon,
        js("function square(x) { return x * x; }\nconst xs = [1, 2, 3].map(square);\n({ xs, sum: xs.reduce((a, b) => a + b) })"),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.result, json!({ "xs": [1, 4, 9], "sum": 14 }));

    let awaited = run(&daemon, js("(async () => 6 * 7)()")).await;
    assert_eq!(awaited.result, json!(42), "{awaited:?}");

    let unrepresentable = run(&daemon, js("10n ** 20n")).await;
    assert_eq!(unrepresentable.result, json!("100000000000000000000n"));
}

#[tokio::test]
async fn console_error_goes_to_stderr() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let response = run(
        &daemon,
        js("console.log('out'); console.error('err', {a: 1}); console.warn('warn')"),
    )
    .await;
    assert_eq!(response.stdout, "out\n");
    assert_eq!(response.stderr, "err {\"a\":1}\nwarn\n");
}

#[tokio::test]
async fn thrown_exception_is_an_error_with_message_and_stack() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let response = run(
        &daemon,
        js("console.log('before');\nfunction fail() { throw new TypeError('bad thing'); }\nfail();"),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    let error = response.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Exception);
    assert_eq!(error.message, "TypeError: bad thing");
    assert_eq!(response.stdout, "before\n");
    assert!(
        response.stderr.contains("TypeError: bad thing"),
        "{}",
        response.stderr
    );
    assert!(
        response.stderr.contains("at fail (<input>:2:"),
        "the stack names the function and its line: {}",
        response.stderr
    );
    assert!(
        !response.stderr.contains("run.js"),
        "the runner's own frames are not shown: {}",
        response.stderr
    );

    let thrown_value = run(&daemon, js("throw 42")).await;
    assert_eq!(thrown_value.status, ExecStatus::Error);
    assert_eq!(thrown_value.error.unwrap().message, "Uncaught 42");
}

#[tokio::test]
async fn syntax_error_is_reported_as_such() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let response = run(&daemon, js("let x = ;")).await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    let error = response.error.unwrap();
    assert_eq!(error.kind, ErrorKind::SyntaxError);
    assert!(
        error.message.starts_with("SyntaxError"),
        "{}",
        error.message
    );

    // The parse error's position is in stderr.
    let later = run(&daemon, js("const a = 1;\nconst b = 2;\nlet c = ;")).await;
    assert_eq!(later.error.unwrap().kind, ErrorKind::SyntaxError);
    assert!(later.stderr.contains("<input>:3:"), "{}", later.stderr);

    // A SyntaxError thrown while running is the program's exception, not a syntax error.
    for code in [
        "JSON.parse('{')",
        "console.log('ran'); eval('let y = ;')",
        "new Function('1 +')",
    ] {
        let runtime = run(&daemon, js(code)).await;
        assert_eq!(
            runtime.error.as_ref().unwrap().kind,
            ErrorKind::Exception,
            "{code}: {runtime:?}"
        );
    }
}

#[tokio::test]
async fn non_ascii_text_round_trips() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let text = "héllo, 世界 🚀 — Ωmega";
    let response = run(
        &daemon,
        js(&format!(
            "const s = {}; console.log(s); console.error(s); [s, s.length]",
            json!(text)
        )),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.stdout, format!("{text}\n"));
    assert_eq!(response.stderr, format!("{text}\n"));
    assert_eq!(response.result, json!([text, text.encode_utf16().count()]));
}

#[tokio::test]
async fn two_requests_run_at_the_same_time() {
    let daemon = Daemon::start(&["--pool", "javascript=2"]).await;
    // Both programs spin until the same instant, a moment from now on the host's clock (which
    // `Date.now()` reads), and say when they started. With two sandboxes both start before that
    // instant; a daemon running one at a time would start the second only once the first had
    // spun to it. An ordering of the programs' own clock readings, not a duration: a slow or
    // stalled VM cannot make it fail unless it holds the second request back for all of
    // `SPIN_MS`.
    const SPIN_MS: f64 = 2000.0;
    let until = now_ms() + SPIN_MS;
    let busy = format!(
        "const started = Date.now(); let n = 0; while (Date.now() < {until}) n++; [started, Date.now()]"
    );
    let client = daemon.client();
    let request = js(&busy);
    let (a, b) = within("two concurrent execs", STEP_LIMIT, async {
        tokio::join!(client.exec(&request), client.exec(&request))
    })
    .await;
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        (a.status, b.status),
        (ExecStatus::Ok, ExecStatus::Ok),
        "{a:?} {b:?}"
    );
    let [a_started, a_ended]: [f64; 2] = serde_json::from_value(a.result.clone()).unwrap();
    let [b_started, b_ended]: [f64; 2] = serde_json::from_value(b.result.clone()).unwrap();
    assert!(
        a_started.max(b_started) < until && a_ended.min(b_ended) >= until,
        "the programs did not run at the same time: one ran from {a_started} to {a_ended}, \
         the other from {b_started} to {b_ended}, and both spun until {until}"
    );
}

#[tokio::test]
async fn state_does_not_leak_between_requests() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let first = run(
        &daemon,
        js("globalThis.secret = 'leaked'; var counter = 41; Object.prototype.polluted = true; String.prototype.shout = function () { return 'x' }; counter + 1"),
    )
    .await;
    assert_eq!(first.result, json!(42), "{first:?}");
    // With one sandbox, the second request runs in the very same micro-VM, restored.
    let second = run(
        &daemon,
        js("[typeof globalThis.secret, typeof counter, ({}).polluted === undefined, typeof ''.shout]"),
    )
    .await;
    assert_eq!(second.status, ExecStatus::Ok, "{second:?}");
    assert_eq!(
        second.result,
        json!(["undefined", "undefined", true, "undefined"])
    );

    // Every request starts from the same snapshot, yet draws its own random numbers, and reads
    // the host's clock.
    let draw = js("[Math.random(), Math.random(), Math.random(), Date.now()]");
    let mut draws = Vec::new();
    for _ in 0..3 {
        let before = now_ms();
        let response = run(&daemon, draw.clone()).await;
        let after = now_ms();
        let values: Vec<f64> = serde_json::from_value(response.result.clone()).unwrap();
        assert!(
            values[..3].iter().all(|x| (0.0..1.0).contains(x)),
            "{values:?}"
        );
        assert!(
            (before..=after).contains(&values[3]),
            "Date.now() {} is not the host's time ({before}..{after})",
            values[3]
        );
        draws.push(values[..3].to_vec());
    }
    assert_ne!(draws[0], draws[1]);
    assert_ne!(draws[1], draws[2]);
}

/// The host's clock in milliseconds since the Unix epoch.
fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64
}

#[tokio::test]
async fn malformed_request_gets_4xx_and_the_next_one_succeeds() {
    let daemon = Daemon::start(&[
        "--pool",
        "javascript=1",
        "--body-read-timeout-ms",
        "1000",
        "--max-header-bytes",
        "16384",
    ])
    .await;
    for (body, kind) in [
        (
            "{\"language\": \"javascript\", \"code\": ",
            "invalid_request",
        ),
        ("{\"language\": \"javascript\"}", "invalid_request"),
        (
            "{\"language\": \"brainfuck\", \"code\": \"+\"}",
            "invalid_request",
        ),
    ] {
        let (status, bytes) = raw_request(daemon.socket(), &exec_request(body.as_bytes())).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&bytes));
        let error: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(error["error"]["kind"], kind);
    }
    let big = vec![b'x'; 2 * 1024 * 1024];
    let (status, _) = raw_request(daemon.socket(), &exec_request(&big)).await;
    assert_eq!(status, 413);

    // A 300 KB header is refused with 431.
    let mut huge_head = b"GET /v1/health HTTP/1.1\r\nHost: d\r\nX-Big: ".to_vec();
    huge_head.resize(huge_head.len() + 300_000, b'a');
    huge_head.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    let (status, _) = raw_request(daemon.socket(), &huge_head).await;
    assert_eq!(status, 431);

    // A body that stops coming is answered 408 after --body-read-timeout-ms.
    let started = Instant::now();
    let stalled = b"POST /v1/exec HTTP/1.1\r\nHost: d\r\nContent-Length: 100\r\n\r\n{\"language\"";
    let (status, bytes) = within(
        "stalled body",
        STEP_LIMIT,
        raw_request_keeping_open(daemon.socket(), stalled),
    )
    .await;
    assert_eq!(status, 408, "{}", String::from_utf8_lossy(&bytes));
    let error: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(error["error"]["kind"], "request_timeout");
    assert!(started.elapsed() >= Duration::from_millis(1000));

    let good = run(&daemon, js("'still serving'")).await;
    assert_eq!(good.result, json!("still serving"));
}

/// Sends `request` and waits for the answer without closing the sending side: a client whose
/// body stalls. The status code and the body of the answer.
async fn raw_request_keeping_open(socket: &std::path::Path, request: &[u8]) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.as_bytes().to_vec();
    (status, body)
}

#[tokio::test]
async fn infinite_loop_times_out_and_the_sandbox_serves_again() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let request = js_with_timeout("console.log('spinning'); while (true) {}", 300);
    let response = run(&daemon, request).await;
    assert_eq!(response.status, ExecStatus::Timeout, "{response:?}");
    assert_eq!(response.error.unwrap().kind, ErrorKind::Timeout);
    assert_eq!(
        response.stdout, "spinning\n",
        "output written before the timeout is kept"
    );
    // The interrupted sandbox is replaced, not reused: with a pool of one, the next request
    // waits for the new sandbox, which takes seconds under emulation.
    let after = js_with_timeout("1 + 1", 60_000);
    let after = run(&daemon, after).await;
    assert_eq!(after.result, json!(2), "{after:?}");
}

#[tokio::test]
async fn health_and_metrics_describe_the_daemon() {
    let daemon = Daemon::start(&["--pool", "javascript=2"]).await;
    let client = daemon.client();
    let health = within("health", STEP_LIMIT, client.health()).await.unwrap();
    assert_eq!(health.status, "ok");
    assert!(
        health.hypervisor.starts_with("kvm") || health.hypervisor.starts_with("mshv"),
        "{}",
        health.hypervisor
    );
    assert_eq!(health.sandboxes[&Language::Javascript].total, 2);
    assert!(health.versions.contains_key("hyperlightd"));
    assert!(health.live && health.ready);
    for path in ["/v1/health/live", "/v1/health/ready"] {
        let (status, body) = raw_request(daemon.socket(), &get_request(path)).await;
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    }
    let live = daemon.hlctl(&["health", "--live"], "").await;
    assert_eq!(live.status.code(), Some(0), "{live:?}");

    run(&daemon, js("1")).await;
    run(&daemon, js("throw new Error('x')")).await;
    let metrics = within("metrics", STEP_LIMIT, client.metrics())
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"hyperlightd_executions_total{language="javascript",status="ok"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"hyperlightd_executions_total{language="javascript",status="error"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("hyperlightd_execution_duration_seconds_count{language=\"javascript\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"hyperlightd_pool_sandboxes{language="javascript"} 2"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn hlctl_runs_code_from_flag_file_and_stdin() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;

    let out = daemon
        .hlctl(&["exec", "--lang", "js", "-e", "console.log(1+1)"], "")
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prog.js");
    std::fs::write(&file, "console.error('to stderr'); ({answer: 42})").unwrap();
    let out = daemon.hlctl(&["exec", file.to_str().unwrap()], "").await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{\"answer\":42}\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "to stderr\n");

    let out = daemon
        .hlctl(
            &["exec", "--lang", "javascript"],
            "console.log('from stdin')",
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\n");

    let out = daemon
        .hlctl(&["exec", "--json", "--lang", "js", "-e", "'x'"], "")
        .await;
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(response["status"], "ok");
    assert_eq!(response["result"], "x");
}

#[tokio::test]
async fn hlctl_exit_status_tells_error_timeout_and_unreachable_apart() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    // Health first: after the timeout below, the pool rebuilds its sandbox and is not ready.
    let out = daemon.hlctl(&["health"], "").await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let health: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["ready"], true);

    let out = daemon
        .hlctl(
            &["exec", "--lang", "js", "-e", "throw new Error('boom')"],
            "",
        )
        .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Error: boom"));

    let out = daemon
        .hlctl(
            &[
                "exec",
                "--lang",
                "js",
                "--timeout-ms",
                "200",
                "-e",
                "for(;;){}",
            ],
            "",
        )
        .await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");

    let missing = daemon.socket().with_file_name("nobody-here.sock");
    let out = tokio::task::spawn_blocking(move || {
        hyperlightd_e2e::run_hlctl(&missing, &["health".to_owned()], "")
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("nobody-here.sock"), "{stderr}");
}

#[tokio::test]
async fn sigterm_lets_in_flight_requests_finish_then_exits_zero() {
    let mut daemon = Daemon::start(&["--pool", "javascript=2"]).await;
    let client = daemon.client();
    let slow = "const end = Date.now() + 1000; while (Date.now() < end) {} 'finished'";
    // Two run at once on the two sandboxes; two more wait in the queue.
    let in_flight: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.exec(&js(slow)).await })
        })
        .collect();
    // The signal goes once the daemon holds all four (running, queued or answered): a
    // request still on its way when the drain starts is a new one, and is refused.
    received(&daemon, 4).await;
    daemon.signal(Signal::SIGTERM);
    // A request arriving while the daemon drains is told so.
    tokio::time::sleep(Duration::from_millis(100)).await;
    match within(
        "request during the drain",
        STEP_LIMIT,
        daemon.client().exec(&js("1")),
    )
    .await
    {
        Err(Error::Rejected { status, error, .. }) => {
            assert_eq!(status, 503);
            assert_eq!(error.kind, ErrorKind::ShuttingDown);
        }
        other => panic!("expected 503 shutting_down, got {other:?}"),
    }
    for handle in in_flight {
        let response = within("in-flight request during shutdown", STEP_LIMIT, handle)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("in-flight request lost: {e}\n{}", daemon.log()));
        assert_eq!(response.result, json!("finished"), "{response:?}");
    }
    assert_eq!(
        daemon.wait_exit(STEP_LIMIT).await,
        Some(0),
        "{}",
        daemon.log()
    );
    assert!(
        !daemon.socket().exists(),
        "the socket file is removed on exit"
    );
    // And nothing answers any more.
    assert!(matches!(
        client.health().await,
        Err(Error::Unreachable { .. })
    ));
}

#[tokio::test]
async fn a_second_signal_ends_the_drain_at_once() {
    let mut daemon =
        Daemon::start(&["--pool", "javascript=1", "--drain-timeout-ms", "60000"]).await;
    let client = daemon.client();
    let long = tokio::spawn(async move {
        client
            .exec(&js_with_timeout(
                "const end = Date.now() + 30000; while (Date.now() < end) {}",
                40_000,
            ))
            .await
    });
    received(&daemon, 1).await;
    daemon.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    daemon.signal(Signal::SIGINT);
    assert_eq!(
        daemon.wait_exit(STEP_LIMIT).await,
        Some(0),
        "{}",
        daemon.log()
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "exited {:?} after the second signal, with 30 s of work in flight",
        signalled.elapsed()
    );
    assert!(
        daemon.log().contains("again: stopping now"),
        "{}",
        daemon.log()
    );
    assert!(!daemon.socket().exists());
    let lost = within("the request cut off", STEP_LIMIT, long)
        .await
        .unwrap();
    assert!(
        matches!(lost, Err(Error::ConnectionLost { .. })),
        "{lost:?}"
    );
}

#[tokio::test]
async fn second_daemon_on_a_live_socket_refuses_to_start() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let out = within("second daemon", STEP_LIMIT, async {
        tokio::process::Command::new(hyperlightd_e2e::binary("hyperlightd"))
            .arg("--socket")
            .arg(daemon.socket())
            .arg("--pool")
            .arg("javascript=1")
            .output()
            .await
            .unwrap()
    })
    .await;
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already serving"));
    // The first daemon is untouched.
    assert_eq!(run(&daemon, js("'alive'")).await.result, json!("alive"));
}

#[tokio::test]
async fn program_can_use_tens_of_megabytes_of_its_heap() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    // 24 MiB written: far past what a sandbox with a small scratch region can dirty.
    let response = run(
        &daemon,
        js("const bufs = []; for (let i = 0; i < 24; i++) bufs.push(new Uint8Array(1 << 20).fill(i + 1)); bufs.reduce((n, b) => n + b[12345], 0)"),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.result, json!((1..=24).sum::<u32>()));
}

#[tokio::test]
async fn large_program_and_large_result_round_trip() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    // A 300 KiB program (a long literal with characters JSON must escape) and a 500 KiB result.
    let literal = "ab\"c\\\n".repeat(50_000);
    let code = format!(
        "const s = {}; console.log(s.length); 'y'.repeat(500000)",
        json!(literal)
    );
    assert!(code.len() > 300_000);
    // Sizes are the point here, not speed: a debug build under emulation takes seconds.
    let request = js_with_timeout(&code, 30_000);
    let response = run(&daemon, request).await;
    assert_eq!(response.status, ExecStatus::Ok, "{:?}", response.error);
    assert_eq!(response.stdout, "300000\n");
    assert_eq!(response.result.as_str().map(str::len), Some(500_000));
}

#[tokio::test]
async fn result_over_the_limit_is_a_clear_error() {
    // 64 KiB: a daemon with a 1000-byte limit (an output buffer of 17 pages) froze the
    // emulated VM three times in this test, and never elsewhere; under investigation.
    let daemon = Daemon::start(&["--pool", "javascript=1", "--max-result-bytes", "65536"]).await;
    let response = run(&daemon, js("console.log('made it'); 'z'.repeat(100000)")).await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    let error = response.error.unwrap();
    assert_eq!(error.kind, ErrorKind::ResultTooLarge);
    assert!(error.message.contains("65536"), "{}", error.message);
    assert_eq!(response.stdout, "made it\n");
    // The sandbox is fine afterwards.
    assert_eq!(run(&daemon, js("'ok'")).await.result, json!("ok"));
}

async fn health(daemon: &Daemon) -> hyperlightd_client::HealthResponse {
    within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap()
}

/// Waits until the daemon's pools are back at their size (sandboxes are rebuilt in the
/// background after a recycle).
async fn wait_until_ready(daemon: &Daemon) -> hyperlightd_client::HealthResponse {
    within("pool back to full size", STEP_LIMIT, async {
        loop {
            let health = health(daemon).await;
            if health.ready {
                return health;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Waits until the daemon has taken in `count` executions.
async fn received(daemon: &Daemon, count: u32) {
    daemon
        .wait_for_metrics("the requests reach the daemon", |metrics| {
            executions_received(metrics) >= f64::from(count)
        })
        .await;
}

/// Waits until the JavaScript workers have taken `count` jobs off the queue, so that a test
/// knows the queue holds only what came after them.
async fn taken(daemon: &Daemon, count: u32) {
    daemon
        .wait_for_metrics("the jobs leave the queue", |metrics| {
            metric(metrics, JOBS_TAKEN) >= f64::from(count)
        })
        .await;
}

/// Jobs the JavaScript workers have taken off the queue.
const JOBS_TAKEN: &str = r#"hyperlightd_queue_wait_seconds_count{language="javascript"}"#;

/// Executions the daemon has taken in, by `metrics`: those in flight (running or queued) and
/// those answered, whatever their status (refusals are not counted).
fn executions_received(metrics: &str) -> f64 {
    let answered: f64 = metrics
        .lines()
        .filter(|line| line.starts_with("hyperlightd_executions_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    answered + metric(metrics, "hyperlightd_executions_in_flight")
}

#[tokio::test]
async fn memory_bomb_is_out_of_memory_and_the_daemon_stays_healthy() {
    let daemon = Daemon::start(&["--pool", "javascript=2", "--guest-heap-mib", "32"]).await;
    let request = js_with_timeout(
        "const hoard = []; while (true) hoard.push(new Uint8Array(1 << 20).fill(7));",
        60_000,
    );
    let response = run(&daemon, request).await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    let error = response.error.unwrap();
    assert_eq!(error.kind, ErrorKind::OutOfMemory, "{}", error.message);
    // Other requests are served, and the pool recovers its size.
    assert_eq!(run(&daemon, js("'fine'")).await.result, json!("fine"));
    // An allocation larger than the whole heap, and allocations that grow until one does not
    // fit: each is out of memory, and the next request is served.
    for hostile in [
        "new ArrayBuffer(2 ** 30).byteLength",
        "const xs = []; for (let n = 1 << 16; ; n *= 2) xs.push(new Uint8Array(n)); xs.length",
    ] {
        let response = run(&daemon, js_with_timeout(hostile, 60_000)).await;
        let kind = response.error.as_ref().map(|e| e.kind);
        assert_eq!(
            kind,
            Some(ErrorKind::OutOfMemory),
            "{hostile}: {response:?}"
        );
        assert_eq!(run(&daemon, js("'fine'")).await.result, json!("fine"));
    }
    let health = wait_until_ready(&daemon).await;
    assert_eq!(health.sandboxes[&Language::Javascript].total, 2);
}

#[tokio::test]
async fn output_flood_is_truncated_at_the_requested_cap() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    // About 1 MB of output against a 10 kB cap.
    let mut request = js_with_timeout(
        "for (let i = 0; i < 1e5; i++) console.log('flood', i); 'done'",
        30_000,
    );
    request.max_output_bytes = Some(10_000);
    let response = run(&daemon, request).await;
    assert_eq!(response.status, ExecStatus::Ok, "{:?}", response.error);
    assert!(response.truncated);
    assert!(response.stdout.len() <= 10_000, "{}", response.stdout.len());
    assert!(
        response.stdout.len() > 9_000,
        "the cap is filled: {}",
        response.stdout.len()
    );
    assert!(response.stdout.starts_with("flood 0\nflood 1\n"));
    assert_eq!(response.result, json!("done"));

    // One 3 MB write, through every way a program can write, is cut at the cap; the program
    // runs on to its end and the sandbox survives.
    for (program, to_stderr) in [
        ("console.log('y'.repeat(3000000)); 'after'", false),
        ("console.error('e'.repeat(3000000)); 'after'", true),
        ("print('p'.repeat(3000000)); 'after'", false),
        (
            "globalThis.console.log('g'.repeat(3000000)); 'after'",
            false,
        ),
    ] {
        let mut request = js_with_timeout(program, 30_000);
        request.max_output_bytes = Some(100_000);
        let response = run(&daemon, request).await;
        assert_capped_and_finished(&response, program, to_stderr, 100_000);
    }
    let huge_error = run(
        &daemon,
        js_with_timeout("throw new Error('x'.repeat(3000000))", 30_000),
    )
    .await;
    assert_eq!(huge_error.status, ExecStatus::Error, "{huge_error:?}");
    let error = huge_error.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Exception);
    assert!(
        error.message.starts_with("Error: xxx"),
        "{}",
        &error.message[..50]
    );
    assert!(error.message.len() < 9_000, "{}", error.message.len());
    assert!(huge_error.truncated);
    assert_eq!(run(&daemon, js("'intact'")).await.result, json!("intact"));
}

#[tokio::test]
async fn infinite_loop_is_stopped_within_100_ms_of_its_limit() {
    let daemon = Daemon::start(&["--pool", "javascript=2"]).await;
    let spin = js_with_timeout("while (true) {}", 500);
    let client = daemon.client();
    // A well-behaved request runs beside the loop, undisturbed.
    let (looped, neighbour) = within("loop beside a normal request", STEP_LIMIT, async {
        tokio::join!(client.exec(&spin), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.exec(&js("[1, 2, 3].map(x => x * x)")).await
        })
    })
    .await;
    let looped = looped.unwrap();
    assert_eq!(looped.status, ExecStatus::Timeout, "{looped:?}");
    assert!(
        looped.duration_ms < 500.0 + 100.0,
        "stopped {} ms after arrival, limit 500 ms",
        looped.duration_ms
    );
    assert_eq!(neighbour.unwrap().result, json!([1, 4, 9]));
}

#[tokio::test]
async fn fifty_concurrent_requests_on_a_pool_of_two_are_all_answered_correctly() {
    let daemon = Daemon::start(&["--pool", "javascript=2"]).await;
    let client = daemon.client();
    let requests: Vec<_> = (0..50)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move {
                let request = js_with_timeout(
                    &format!("const n = {n}; console.log('req', n); n * n"),
                    60_000,
                );
                (n, client.exec(&request).await)
            })
        })
        .collect();
    for handle in requests {
        let (n, response) = within("one of fifty requests", Duration::from_secs(120), handle)
            .await
            .unwrap();
        let response = response.unwrap_or_else(|e| panic!("request {n}: {e}"));
        assert_eq!(response.status, ExecStatus::Ok, "request {n}: {response:?}");
        assert_eq!(response.result, json!(n * n));
        assert_eq!(response.stdout, format!("req {n}\n"));
    }
    let metrics = within("metrics", STEP_LIMIT, client.metrics())
        .await
        .unwrap();
    assert_eq!(
        metric(
            &metrics,
            r#"hyperlightd_executions_total{language="javascript",status="ok"}"#
        ),
        50.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"hyperlightd_queue_wait_seconds_count{language="javascript"}"#
        ),
        50.0
    );
    assert_eq!(
        metric(
            &metrics,
            r#"hyperlightd_guest_call_seconds_count{language="javascript"}"#
        ),
        50.0
    );
}

#[tokio::test]
async fn full_queue_answers_503_with_retry_after() {
    let daemon = Daemon::start(&["--pool", "javascript=1", "--queue-depth", "1"]).await;
    let client = daemon.client();
    let slow = js("const end = Date.now() + 1500; while (Date.now() < end) {} 'slow'");
    let running = tokio::spawn({
        let client = client.clone();
        let slow = slow.clone();
        async move { client.exec(&slow).await }
    });
    taken(&daemon, 1).await;
    let queued = tokio::spawn({
        let client = client.clone();
        let slow = slow.clone();
        async move { client.exec(&slow).await }
    });
    received(&daemon, 2).await;
    match within("request to a full queue", STEP_LIMIT, client.exec(&js("1"))).await {
        Err(Error::Rejected {
            status,
            error,
            retry_after,
        }) => {
            assert_eq!(status, 503);
            assert_eq!(error.kind, ErrorKind::Overloaded);
            assert_eq!(retry_after, Some(1));
        }
        other => panic!("expected 503 overloaded, got {other:?}"),
    }
    for handle in [running, queued] {
        let response = within("slow request", STEP_LIMIT, handle)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.result, json!("slow"));
    }
    let metrics = within("metrics", STEP_LIMIT, client.metrics())
        .await
        .unwrap();
    assert_eq!(
        metric(
            &metrics,
            r#"hyperlightd_requests_rejected_total{reason="overloaded"}"#
        ),
        1.0
    );

    // A request that waits its whole limit for the busy sandbox is answered at its deadline,
    // with a kind of its own, not as a program that ran too long.
    let busy = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .exec(&js_with_timeout(
                    "const end = Date.now() + 5000; while (Date.now() < end) {} 'busy'",
                    15_000,
                ))
                .await
        }
    });
    taken(&daemon, 3).await;
    let asked = Instant::now();
    let waited = within(
        "request waiting for a busy sandbox",
        STEP_LIMIT,
        client.exec(&js_with_timeout("'never ran'", 1000)),
    )
    .await;
    let answered = asked.elapsed();
    match waited {
        Err(Error::Rejected { status, error, .. }) => {
            assert_eq!(status, 503);
            assert_eq!(
                error.kind,
                ErrorKind::NoSandboxAvailable,
                "{}",
                error.message
            );
        }
        other => panic!("expected 503 no_sandbox_available, got {other:?}"),
    }
    // At its limit, not when the busy program (5 s) frees the sandbox: the margin is for a
    // slow emulator, not a figure measured.
    assert!(
        answered < Duration::from_millis(1000 + 3000),
        "answered {answered:?} after arrival, for a limit of 1000 ms"
    );
    let busy = within("busy request", STEP_LIMIT, busy)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(busy.result, json!("busy"));
}

#[tokio::test]
async fn a_poisoned_sandbox_is_restored_in_place_and_leaks_nothing() {
    // One sandbox: every request after a poisoned one runs in the very same micro-VM.
    let daemon = Daemon::start(&["--pool", "javascript=1", "--guest-heap-mib", "32"]).await;
    let plant = "globalThis.planted = 'leaked'; Object.prototype.polluted = true; ";
    let check = js("[typeof planted, ({}).polluted === undefined]");
    // A time limit; a memory bomb (the guest aborts, out of physical memory); unbounded
    // recursion (its stack grows into the same memory). Each poisons the sandbox.
    for (hostile, limit_ms, kinds) in [
        ("while (true) {}", 500, &[ErrorKind::Timeout][..]),
        (
            "const hoard = []; while (true) hoard.push(new Uint8Array(1 << 20).fill(7));",
            60_000,
            &[ErrorKind::OutOfMemory][..],
        ),
        (
            "function down(n) { return down(n + 1) + 1; } down(0)",
            60_000,
            &[ErrorKind::OutOfMemory, ErrorKind::Exception][..],
        ),
    ] {
        let response = run(
            &daemon,
            js_with_timeout(&format!("{plant}{hostile}"), limit_ms),
        )
        .await;
        let kind = response.error.as_ref().map(|e| e.kind);
        assert!(
            kinds.iter().any(|k| Some(*k) == kind),
            "{hostile}: {response:?}"
        );
        // No rebuild to wait for: the next request is served at once, by the restored sandbox.
        let after = run(&daemon, check.clone()).await;
        assert_eq!(
            after.result,
            json!(["undefined", true]),
            "after {hostile}: {after:?}"
        );
    }
    let metrics = within("metrics", STEP_LIMIT, daemon.client().metrics())
        .await
        .unwrap();
    let restored = |reason: &str| {
        metric(
            &metrics,
            &format!(
                r#"hyperlightd_sandboxes_restored_after_poison_total{{language="javascript",reason="{reason}"}}"#
            ),
        )
    };
    assert_eq!(restored("timeout"), 1.0, "{metrics}");
    assert!(restored("out_of_memory") >= 1.0, "{metrics}");
    assert_eq!(
        metric(
            &metrics,
            r#"hyperlightd_sandbox_create_seconds_count{language="javascript"}"#
        ),
        1.0,
        "nothing rebuilt: {metrics}"
    );
    assert!(
        !metrics.contains("hyperlightd_sandboxes_recycled_total{"),
        "{metrics}"
    );
}

#[tokio::test]
async fn oversized_code_is_refused_with_413() {
    let daemon = Daemon::start(&["--pool", "javascript=1", "--max-code-bytes", "1000"]).await;
    match within(
        "oversized code",
        STEP_LIMIT,
        daemon.client().exec(&js(&"1;".repeat(600))),
    )
    .await
    {
        Err(Error::Rejected { status, error, .. }) => {
            assert_eq!(status, 413);
            assert_eq!(error.kind, ErrorKind::PayloadTooLarge);
            assert!(error.message.contains("1000"), "{}", error.message);
        }
        other => panic!("expected 413, got {other:?}"),
    }
}

#[tokio::test]
async fn startup_probe_past_its_time_limit_exits_with_a_clear_message() {
    // No sandbox can be built in a millisecond: the daemon must give up promptly and say why,
    // even though the thread building the sandbox is still busy.
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = within("daemon giving up at its startup limit", STEP_LIMIT, async {
        tokio::process::Command::new(hyperlightd_e2e::binary("hyperlightd"))
            .arg("--socket")
            .arg(dir.path().join("d.sock"))
            .args(["--pool", "javascript=1", "--startup-timeout-ms", "1"])
            .output()
            .await
            .unwrap()
    })
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("did not finish within"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !dir.path().join("d.sock").exists(),
        "no socket file is left behind"
    );
}
