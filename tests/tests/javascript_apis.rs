//! End-to-end tests of the JavaScript guest's everyday APIs on a KVM that runs Hyperlight guests
//! (the nested-KVM VM here): top-level `await`, timers and the event loop, `TextEncoder` and
//! `TextDecoder`, `URL` and `URLSearchParams`, `structuredClone`, `crypto`, `performance`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hyperlightd_client::{
    CreateSessionRequest, ErrorKind, ExecRequest, ExecStatus, Language, SessionExecRequest,
};
use hyperlightd_e2e::{Daemon, STEP_LIMIT, run, within};
use serde_json::{Value, json};

fn js(code: &str) -> ExecRequest {
    ExecRequest {
        timeout_ms: Some(20_000),
        ..ExecRequest::new(Language::Javascript, code)
    }
}

/// A daemon with one JavaScript sandbox and small requests (8 KiB bodies: the sandbox's input
/// buffer must still hold the runner, 50 times larger, when it is registered).
async fn daemon() -> Daemon {
    Daemon::start(&["--pool", "javascript=1", "--max-body-bytes", "8192"]).await
}

/// Runs `code` and returns its result, failing unless it succeeded.
async fn value(daemon: &Daemon, code: &str) -> Value {
    let response = run(daemon, js(code)).await;
    assert_eq!(response.status, ExecStatus::Ok, "{code}: {response:?}");
    response.result
}

/// Runs `code` and returns its error's kind and message, failing if it succeeded.
async fn error(daemon: &Daemon, code: &str) -> (ErrorKind, String) {
    let response = run(daemon, js(code)).await;
    assert_eq!(response.status, ExecStatus::Error, "{code}: {response:?}");
    let error = response.error.unwrap();
    (error.kind, error.message)
}

#[tokio::test]
async fn top_level_await_awaits_and_its_last_expression_is_the_result() {
    let daemon = daemon().await;
    let code =
        "const x = await new Promise((resolve) => setTimeout(() => resolve(41), 20));\nx + 1";
    assert_eq!(value(&daemon, code).await, json!(42));
    // Declarations, loops and a last statement that is not an expression: the value of the
    // `if`'s branch, as `eval` gives it.
    let code = "let sum = 0;\nfor (const n of [1, 2, 3]) sum += await Promise.resolve(n);\nfunction twice(v) { return 2 * v }\nif (sum) { twice(sum) }";
    assert_eq!(value(&daemon, code).await, json!(12));
    assert_eq!(
        value(
            &daemon,
            "const [a, b] = await Promise.all([1, Promise.resolve(2)]);\n({ a, b })"
        )
        .await,
        json!({ "a": 1, "b": 2 })
    );

    let (kind, message) = error(&daemon, "await Promise.reject(new RangeError('nope'))").await;
    assert_eq!(
        (kind, message.as_str()),
        (ErrorKind::Exception, "RangeError: nope")
    );
    let response = run(&daemon, js("await null;\n\nthrow new Error('on line 3')")).await;
    assert!(response.stderr.contains("<input>:3"), "{response:?}");
    let (kind, _) = error(&daemon, "await (;").await;
    assert_eq!(kind, ErrorKind::SyntaxError);
    let (kind, message) = error(&daemon, "await new Promise(() => {})").await;
    assert_eq!(kind, ErrorKind::Exception);
    assert!(message.contains("never settled"), "{message}");
    // `await` as a name still works in a script that does not use it as an operator.
    assert_eq!(value(&daemon, "var await = 5; await * 2").await, json!(10));
}

/// The cases of guest/javascript/tests/completion-cases.json (which the host checks against V8's
/// `eval`): every statement kind, each answering its completion value, as a program with its
/// `await`s and as the same program without them (QuickJS's own `eval`), and with them in a
/// session. Every wrong answer is reported, not only the first.
#[tokio::test]
async fn a_program_with_top_level_await_answers_what_eval_would() {
    let daemon = daemon().await;
    let cases: Value = serde_json::from_str(include_str!(
        "../../guest/javascript/tests/completion-cases.json"
    ))
    .unwrap();
    let cases = cases.as_array().unwrap();
    assert!(cases.len() > 30, "{cases:?}");
    let mut wrong = Vec::new();
    let mut check = |what: &str, program: &str, expected: &Value, got: Result<Value, String>| {
        if got.as_ref() != Ok(expected) {
            wrong.push(format!(
                "{what}: {program:?}: expected {expected}, got {got:?}"
            ));
        }
    };
    for case in cases {
        let program = case["program"].as_str().unwrap();
        let sync = program
            .replace("for await (", "for (")
            .replace("await ", "");
        for (what, code) in [("with await", program), ("without await", sync.as_str())] {
            let response = run(&daemon, js(code)).await;
            let got = match response.status {
                ExecStatus::Ok => Ok(response.result),
                _ => Err(format!("{response:?}")),
            };
            check(what, code, &case["value"], got);
        }
    }

    // The same programs in one session, whose scope keeps their declarations.
    let client = daemon.client();
    let session = new_session(&client).await;
    for case in cases {
        let program = case["program"].as_str().unwrap();
        let request = SessionExecRequest {
            timeout_ms: Some(20_000),
            ..SessionExecRequest::new(program)
        };
        let response = within(
            "session exec",
            STEP_LIMIT,
            client.session_exec(&session.id, &request),
        )
        .await
        .unwrap();
        let got = match response.status {
            ExecStatus::Ok => Ok(response.result),
            _ => Err(format!("{response:?}")),
        };
        check("in a session", program, &case["value"], got);
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // The issue's own shapes, whose awaits are of real promises.
    let shapes = [
        (
            "try { await Promise.resolve(1); 'a' } catch (e) { 'b' }",
            json!("a"),
        ),
        (
            "const x = await Promise.resolve(2); if (x > 1) { 'big' } else { 'small' }",
            json!("big"),
        ),
        (
            "try { await Promise.reject(new Error('no')) } catch (e) { 'caught ' + e.message }",
            json!("caught no"),
        ),
    ];
    for (code, expected) in shapes {
        assert_eq!(value(&daemon, code).await, expected, "{code}");
    }
}

#[tokio::test]
async fn timers_run_in_order_after_promise_reactions_until_none_is_left() {
    let daemon = daemon().await;
    // Timers run by due time, so the two delays are far apart: under emulation, more than 20 ms
    // once passed between two statements, and a 20 ms timer set first was rightly due first.
    let code = r#"
const order = [];
setTimeout(() => order.push("timeout 500"), 500);
setTimeout(() => order.push("timeout 0"), 0);
queueMicrotask(() => order.push("microtask"));
Promise.resolve().then(() => order.push("promise"));
order.push("sync");
await new Promise((resolve) => setTimeout(resolve, 600));
order
"#;
    assert_eq!(
        value(&daemon, code).await,
        json!(["sync", "microtask", "promise", "timeout 0", "timeout 500"])
    );

    // An interval runs until cleared; each wait lasts as long as asked.
    let code = r#"
const start = performance.now();
let ticks = 0;
const id = setInterval(() => { ticks += 1; if (ticks === 3) clearInterval(id); }, 50);
const cancelled = setTimeout(() => { ticks = -100 }, 10);
clearTimeout(cancelled);
await new Promise((resolve) => setTimeout(resolve, 300));
({ ticks, waited: performance.now() - start >= 300 })
"#;
    assert_eq!(
        value(&daemon, code).await,
        json!({ "ticks": 3, "waited": true })
    );

    // Timers set by a program that returns at once still run, and print, before the reply.
    let response = run(
        &daemon,
        js("setTimeout(() => console.log('later', 2), 30);\n'now'"),
    )
    .await;
    assert_eq!(response.result, json!("now"), "{response:?}");
    assert_eq!(response.stdout, "later 2\n");
    let response = run(
        &daemon,
        js("queueMicrotask(() => console.log('micro'));\n1"),
    )
    .await;
    assert_eq!(response.stdout, "micro\n", "{response:?}");

    // A timer that throws fails the program, as an uncaught exception.
    let (kind, message) = error(
        &daemon,
        "setTimeout(() => { throw new TypeError('in a timer') }, 5)",
    )
    .await;
    assert_eq!(
        (kind, message.as_str()),
        (ErrorKind::Exception, "TypeError: in a timer")
    );
    let (kind, message) = error(&daemon, "setTimeout('code as a string', 5)").await;
    assert_eq!(kind, ErrorKind::Exception);
    assert!(
        message.starts_with("TypeError: The callback must be a function"),
        "{message}"
    );

    // An interval never cleared runs until the time limit; the next program starts clean.
    // Past its first 100 lines a program's output is sent in blocks, but all of it before
    // the event loop waits for a timer: the time limit loses none of these lines.
    let forever = ExecRequest {
        timeout_ms: Some(5_000),
        ..js(
            "for (let i = 0; i < 150; i++) console.log('line', i);\nsetInterval(() => console.log('tick'), 100)",
        )
    };
    let response = run(&daemon, forever).await;
    assert_eq!(response.status, ExecStatus::Timeout, "{response:?}");
    let lines: String = (0..150).map(|i| format!("line {i}\n")).collect();
    assert!(
        response.stdout.starts_with(&(lines + "tick\ntick\n")),
        "{response:?}"
    );
    let response = run(
        &daemon,
        js("await new Promise((r) => setTimeout(r, 300));\n'clean'"),
    )
    .await;
    assert_eq!(response.result, json!("clean"), "{response:?}");
    assert_eq!(response.stdout, "", "no timer of the last program ran");
}

/// Issue 25: the event loop gave up on promise reactions after 32 turns when no timer was
/// left. Every queued reaction must run before a timer, or before the answer that nothing can
/// settle the program's promise.
#[tokio::test]
async fn every_queued_reaction_runs_however_long_the_chain() {
    let daemon = daemon().await;
    let code = "let s = 0;\nfor (let i = 0; i < 50; i++) { await 0; s++ }\ns";
    assert_eq!(value(&daemon, code).await, json!(50));
    let code = "async function steps(n) { let s = 0; for (let i = 0; i < n; i++) { await null; s += i } return s }\nawait steps(50)";
    assert_eq!(value(&daemon, code).await, json!(1225));
    // A chain of 10,000 reactions, in the default 64 MiB sandbox.
    let code = "let p = Promise.resolve(0);\nfor (let i = 0; i < 10000; i++) p = p.then((x) => x + 1);\nawait p";
    assert_eq!(value(&daemon, code).await, json!(10000));
    // 200,000 sequential awaits, within the longest limit the daemon grants by default: an
    // await costs about 70 µs under emulation (14 s in all), microseconds on hardware.
    let request = ExecRequest {
        timeout_ms: Some(60_000),
        ..js("let n = 0;\nfor (let i = 0; i < 200000; i++) { await i; n++ }\nn")
    };
    let response = within(
        "200,000 awaits",
        Duration::from_secs(90),
        daemon.client().exec(&request),
    )
    .await
    .unwrap_or_else(|e| panic!("exec failed: {e}\ndaemon log:\n{}", daemon.log()));
    assert_eq!(response.result, json!(200000), "{response:?}");
    // A chain's reactions all run before a timer that is already due.
    let code = r#"
const order = [];
setTimeout(() => order.push("timer"), 0);
(async () => { for (let i = 0; i < 1000; i++) await 0; order.push("chain of 1000") })();
await new Promise((resolve) => setTimeout(resolve, 50));
order
"#;
    assert_eq!(
        value(&daemon, code).await,
        json!(["chain of 1000", "timer"])
    );
    // What a timer's callback queues runs before the answer.
    let response = run(
        &daemon,
        js("setTimeout(() => Promise.resolve().then(() => console.log('after the timer')), 10);\n1"),
    )
    .await;
    assert_eq!(
        (response.result, response.stdout.as_str()),
        (json!(1), "after the timer\n")
    );
    // Still answered at once: a promise nothing can settle, once every reaction has run.
    let (kind, message) = error(
        &daemon,
        "let n = 0;\n(async () => { for (let i = 0; i < 100; i++) { await 0; n++ } })();\nawait new Promise(() => {})",
    )
    .await;
    assert_eq!(kind, ErrorKind::Exception);
    assert!(message.contains("never settled"), "{message}");
}

/// A spin of promise reactions is a program that never ends: it runs until its time limit,
/// and the next program starts clean.
#[tokio::test]
async fn a_microtask_spin_runs_until_its_time_limit() {
    let daemon = daemon().await;
    for code in [
        "(async () => { while (true) { await 0 } })()",
        "globalThis.spun = 0;\nfunction spin() { spun++; queueMicrotask(spin) }\nspin(); 'started'",
    ] {
        let request = ExecRequest {
            timeout_ms: Some(1_500),
            ..js(code)
        };
        let response = run(&daemon, request).await;
        assert_eq!(response.status, ExecStatus::Timeout, "{code}: {response:?}");
        assert_eq!(response.error.unwrap().kind, ErrorKind::Timeout);
    }
    assert_eq!(value(&daemon, "typeof spun").await, json!("undefined"));
}

/// The same event loop serves a session's execs, whose state carries over.
#[tokio::test]
async fn a_session_exec_awaits_a_long_chain() {
    let daemon = daemon().await;
    let client = daemon.client();
    let session = new_session(&client).await;
    let exec = |code: &str| {
        let request = SessionExecRequest {
            timeout_ms: Some(20_000),
            ..SessionExecRequest::new(code)
        };
        let client = client.clone();
        let id = session.id.clone();
        async move {
            within(
                "session exec",
                STEP_LIMIT,
                client.session_exec(&id, &request),
            )
            .await
            .unwrap()
        }
    };
    let response =
        exec("let total = 0;\nfor (let i = 0; i < 500; i++) { await 0; total++ }\ntotal").await;
    assert_eq!(response.result, json!(500), "{response:?}");
    let response = exec("for (let i = 0; i < 500; i++) await 0;\ntotal * 2").await;
    assert_eq!(response.result, json!(1000), "{response:?}");
}

#[tokio::test]
async fn text_url_clone_crypto_and_performance_work() {
    let daemon = daemon().await;
    let code = r#"
const bytes = new TextEncoder().encode("héllo €");
const url = new URL("../c/d?x=1&y=a%20b#top", "https://user@example.com:8443/a/b/");
const params = new URLSearchParams({ q: "a b&c", n: "1" });
params.append("n", "2");
const original = { when: new Date(0), map: new Map([[1, { list: [1, 2] }]]), set: new Set(["s"]) };
original.self = original;
const copy = structuredClone(original);
let cloneError;
try { structuredClone(() => 1) } catch (e) { cloneError = e.name }
({
  encoded: Array.from(bytes),
  decoded: new TextDecoder().decode(bytes),
  url: [url.href, url.host, url.pathname, url.searchParams.get("y"), url.hash],
  badUrl: (() => { try { new URL("not a url") } catch (e) { return e.name } })(),
  params: [params.toString(), params.getAll("n")],
  clone: [copy !== original, copy.self === copy, copy.when.getTime(), copy.map.get(1).list, [...copy.set]],
  cloneError,
  base64: [btoa("hi!"), atob("aGkh")],
})
"#;
    assert_eq!(
        value(&daemon, code).await,
        json!({
            "encoded": [104, 195, 169, 108, 108, 111, 32, 226, 130, 172],
            "decoded": "héllo €",
            "url": ["https://user@example.com:8443/a/c/d?x=1&y=a%20b#top", "example.com:8443", "/a/c/d", "a b", "#top"],
            "badUrl": "TypeError",
            "params": ["q=a+b%26c&n=1&n=2", ["1", "2"]],
            "clone": [true, true, 0, [1, 2], ["s"]],
            "cloneError": "DataCloneError",
            "base64": ["aGkh", "hi!"],
        })
    );

    let code = r#"
const a = crypto.getRandomValues(new Uint8Array(64));
const b = crypto.getRandomValues(new Uint32Array(16));
const errors = [new Uint8Array(65537), new Float64Array(2)].map((array) => {
  try { crypto.getRandomValues(array); return null } catch (e) { return e.name }
});
const t0 = performance.now();
[
  a.some((x) => x !== 0) && b.some((x) => x !== 0),
  crypto.randomUUID(),
  errors,
  t0 >= 0 && performance.now() >= t0,
  Math.abs(performance.timeOrigin + t0 - Date.now()) < 1000,
]
"#;
    let first = value(&daemon, code).await;
    let second = value(&daemon, code).await;
    let uuid = |v: &Value| v[1].as_str().unwrap().to_owned();
    for result in [&first, &second] {
        assert_eq!(result[0], json!(true));
        let id = uuid(result);
        let shape: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(shape, [8, 4, 4, 4, 12], "{id}");
        assert_eq!(&id[14..15], "4", "version 4: {id}");
        assert!("89ab".contains(&id[19..20]), "variant: {id}");
        assert_eq!(
            result[2],
            json!(["QuotaExceededError", "TypeMismatchError"])
        );
        assert_eq!(result[3], json!(true));
        assert_eq!(result[4], json!(true));
    }
    // Every request starts from the same snapshot, and still draws fresh entropy.
    assert_ne!(uuid(&first), uuid(&second));
}

#[tokio::test]
async fn the_everyday_apis_are_there_and_intl_is_not() {
    let daemon = daemon().await;
    let code = r#"
const names = ["console", "JSON", "Math", "Promise", "Map", "Set", "Date", "RegExp", "Proxy",
  "setTimeout", "setInterval", "clearTimeout", "clearInterval", "queueMicrotask", "TextEncoder",
  "TextDecoder", "URL", "URLSearchParams", "structuredClone", "crypto", "performance", "atob",
  "btoa", "DOMException", "Intl"];
names.filter((name) => typeof globalThis[name] === "undefined")
"#;
    assert_eq!(value(&daemon, code).await, json!(["Intl"]));
}

async fn new_session(client: &hyperlightd_client::Client) -> hyperlightd_client::SessionInfo {
    within(
        "create a session",
        STEP_LIMIT,
        client.create_session(&CreateSessionRequest::new(Language::Javascript)),
    )
    .await
    .unwrap()
}
