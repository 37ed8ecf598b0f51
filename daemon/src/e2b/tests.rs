//! The daemon's E2B listener over a stub executor: real TCP on loopback, no KVM.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::*;
use crate::config::Config;
use crate::executor::testing::{StubExecutor, ok_outcome};
use crate::job::{OutputChunk, Stream};
use crate::metrics::Metrics;
use crate::service::{Call, Callers};
use crate::telemetry::Tracer;

const ALICE: &str = "e2b_alice_0123456789abcdef";
const BOB: &str = "e2b_bob_0123456789abcdef";

/// A daemon's service whose programs print their code and answer 42, its audit log in `dir`,
/// and its E2B listener with alice's and bob's keys; the listener's address.
async fn listening(dir: &tempfile::TempDir) -> (std::net::SocketAddr, Arc<Service<StubExecutor>>) {
    listening_traced(dir, Tracer::default()).await
}

/// [`listening`], each request a span of `tracer`'s.
async fn listening_traced(
    dir: &tempfile::TempDir,
    tracer: Tracer,
) -> (std::net::SocketAddr, Arc<Service<StubExecutor>>) {
    let executor = StubExecutor::new(|job| {
        if let Some(sink) = &job.output {
            let _ = sink.send(OutputChunk::Running);
            let text = job.code.clone();
            let _ = sink.send(OutputChunk::Text {
                stream: Stream::Stdout,
                text,
            });
        }
        Ok(ok_outcome(&job.code, json!(42)))
    });
    let limits = Config::try_parse_from(["hyperlightd"])
        .unwrap()
        .limits()
        .unwrap();
    let versions = BTreeMap::new();
    let metrics = Metrics::new().unwrap();
    let (audit, _) = crate::audit::testing::log_in(dir, false);
    let callers = Callers {
        audit: Arc::new(audit),
        ..Callers::open()
    };
    let service = Service::new(Arc::new(executor), metrics, limits, versions).with_callers(callers);
    let service = Arc::new(service);
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    let options = E2bOptions {
        e2b_listen: Some("127.0.0.1:0".parse().unwrap()),
        e2b_keys: Some(keys),
    };
    let listener = options.bind(None).unwrap().unwrap();
    let addr = listener.listener.local_addr().unwrap();
    tokio::spawn(listener.serve(service.clone(), tracer));
    (addr, service)
}

/// One request to the listener at `addr`, with `key` (as `X-API-Key`) and for `sandbox`'s
/// code interpreter: its status and body.
async fn send(
    addr: std::net::SocketAddr,
    method: Method,
    path: &str,
    key: Option<&str>,
    sandbox: Option<&str>,
    body: Value,
) -> (StatusCode, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "e2b");
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    if let Some(sandbox) = sandbox {
        request = request
            .header("e2b-sandbox-id", sandbox)
            .header("e2b-sandbox-port", "49999");
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// A new sandbox of `key`'s (E2B's code interpreter template, as `Sandbox.create` asks): its id.
async fn new_sandbox(addr: std::net::SocketAddr, key: &str, body: Value) -> String {
    let (status, created) = send(addr, Method::POST, "/v2/sandboxes", Some(key), None, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    created["sandboxID"].as_str().unwrap().to_owned()
}

/// The count of the service's requests rejected with `kind`, from its metrics.
fn rejected(service: &Service<StubExecutor>, kind: &str) -> String {
    let metrics = service.metrics_text().unwrap();
    let line = metrics.lines().find(|l| {
        l.starts_with("hyperlightd_requests_rejected_total{") && l.contains(&format!("\"{kind}\""))
    });
    let line = line.unwrap_or_else(|| panic!("no {kind} rejections in:\n{metrics}"));
    line.rsplit(' ').next().unwrap().to_owned()
}

#[tokio::test]
async fn a_key_s_sandbox_runs_code_streamed_and_is_its_caller_s_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, service) = listening(&dir).await;
    let new = json!({"templateID": "code-interpreter-v1", "metadata": {}, "envVars": {}});
    let id = new_sandbox(addr, ALICE, new).await;

    let code = json!({"code": "print(1)"});
    let (status, lines) = send(addr, Method::POST, "/execute", Some(ALICE), Some(&id), code).await;
    assert_eq!(status, StatusCode::OK, "{lines}");
    let lines: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "stdout" && l["text"] == "print(1)"),
        "the output as it was written: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["is_main_result"] == true && l["text"] == "42"),
        "the result: {lines:?}"
    );

    // The session is alice's, as the daemon counts callers: a delegate's name.
    let alice = Call {
        id: 0,
        caller: Caller {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            pid: None,
            pod: PodOf::Unread,
            on_behalf_of: Some("alice".into()),
        },
        received: std::time::Instant::now(),
        span: tracing::Span::none(),
        trace: crate::telemetry::Trace::off(),
    };
    assert_eq!(service.session(&alice, &id).unwrap().id, id);

    let code = json!({"code": "1"});
    let (status, _) = send(addr, Method::POST, "/execute", Some(BOB), Some(&id), code).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "bob's key reaches no sandbox of alice's"
    );
    let path = format!("/sandboxes/{id}");
    let (status, _) = send(addr, Method::DELETE, &path, Some(BOB), None, Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for key in [None, Some("e2b_carol_0123456789abcdef")] {
        let (status, body) = send(addr, Method::GET, "/v2/sandboxes", key, None, Value::Null).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    // Those two never reached a call of the service's: audited as denied, whence they came.
    let denied: Vec<Value> = crate::audit::testing::lines(&dir.path().join("audit.log"))
        .into_iter()
        .filter(|l| l["audit"] == "denied")
        .collect();
    assert_eq!(denied.len(), 2, "{denied:?}");
    for line in &denied {
        assert_eq!(line["path"], "/v2/sandboxes");
        assert!(
            line["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{line}"
        );
        assert_eq!(line["caller"]["on_behalf_of"], Value::Null, "{line}");
    }
    let (status, _) = send(addr, Method::DELETE, &path, Some(ALICE), None, Value::Null).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(service.session(&alice, &id).is_err(), "killed");
    // Bob's refusals counted as the HTTP API counts its own, and the two without a key.
    assert_eq!(rejected(&service, "session_not_found"), "2");
    assert_eq!(rejected(&service, "caller_not_allowed"), "2");
}

#[tokio::test]
async fn each_request_is_a_span_of_its_key_s_caller_and_the_audit_names_its_trace() {
    use opentelemetry::trace::{SpanId, SpanKind, Status, TracerProvider as _};
    use opentelemetry_sdk::trace::SpanData;
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let dir = tempfile::tempdir().unwrap();
    let tracer = Tracer::new(provider.tracer("test"));
    let (addr, _) = listening_traced(&dir, tracer).await;
    let id = new_sandbox(addr, ALICE, json!({"templateID": "code-interpreter-v1"})).await;
    let code = json!({"code": "1"});
    let (status, _) = send(addr, Method::POST, "/execute", Some(ALICE), Some(&id), code).await;
    assert_eq!(status, StatusCode::OK);
    let code = json!({"code": "1"});
    let (status, _) = send(addr, Method::POST, "/execute", Some(BOB), Some(&id), code).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let spans = exporter.get_finished_spans().unwrap();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let attribute = |span: &SpanData, key: &str| {
        let found = span.attributes.iter().find(|kv| kv.key.as_str() == key);
        found.map(|kv| kv.value.to_string())
    };
    // One server span per HTTP request, at the root of a trace of its own.
    let roots: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == SpanId::INVALID)
        .collect();
    assert_eq!(roots.len(), 3, "{spans:?}");
    for root in &roots {
        assert_eq!(
            (root.name.as_ref(), &root.span_kind),
            ("e2b POST", &SpanKind::Server)
        );
    }
    // A call of the service's is a span of its request's.
    let request_of = |call: &SpanData| -> &SpanData {
        let parent = roots
            .iter()
            .find(|r| r.span_context.span_id() == call.parent_span_id);
        parent.unwrap_or_else(|| panic!("{call:?} is not in a request: {spans:?}"))
    };
    let [created] = named("e2b create_session")[..] else {
        panic!("one span of the sandbox made: {spans:?}");
    };
    let made = request_of(created);
    assert_eq!(
        attribute(made, "hyperlightd.caller.on_behalf_of").as_deref(),
        Some("alice")
    );
    assert_eq!(
        attribute(made, "url.path").as_deref(),
        Some("/v2/sandboxes")
    );
    let [ran] = named("e2b session_exec")[..] else {
        panic!("one span of the run: {spans:?}");
    };
    assert_eq!(ran.status, Status::Unset, "{ran:?}");
    assert_eq!(request_of(ran).status, Status::Unset);
    // Bob's request asked the daemon for a sandbox that is not his: refused, and said so in
    // the call's span and the request's.
    let [looked] = named("e2b session")[..] else {
        panic!("one span of bob's lookup: {spans:?}");
    };
    let asked = request_of(looked);
    assert_eq!(
        attribute(asked, "hyperlightd.caller.on_behalf_of").as_deref(),
        Some("bob")
    );
    assert!(matches!(looked.status, Status::Error { .. }), "{looked:?}");
    assert!(matches!(asked.status, Status::Error { .. }), "{asked:?}");
    // The run's audit line names its trace.
    let audit = crate::audit::testing::lines(&dir.path().join("audit.log"));
    let exec = audit
        .iter()
        .find(|l| l["audit"] == "exec")
        .unwrap_or_else(|| panic!("an exec line: {audit:?}"));
    let trace_id = ran.span_context.trace_id().to_string();
    assert_eq!(exec["trace_id"], trace_id.as_str(), "{exec}");
}

#[tokio::test]
async fn an_exec_refused_before_it_runs_is_the_sdk_s_error_not_a_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, _) = listening(&dir).await;
    let id = new_sandbox(addr, ALICE, json!({"templateID": "code-interpreter-v1"})).await;
    // A run's envs are checked before it runs: a name that cannot be one is refused.
    let code = json!({"code": "1", "env_vars": {"NOT-A-NAME": "x"}});
    let (status, body) = send(addr, Method::POST, "/execute", Some(ALICE), Some(&id), code).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("letters, digits"), "{body}");
}

#[test]
fn a_listener_without_keys_or_with_a_bad_keys_file_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("alice {ALICE}\n")).unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
    let options = E2bOptions {
        e2b_listen: Some("127.0.0.1:0".parse().unwrap()),
        e2b_keys: Some(keys),
    };
    let refused = options.bind(None).unwrap_err().to_string();
    assert!(
        refused.starts_with("--e2b-keys: ") && refused.contains("chmod 600"),
        "{refused}"
    );
    assert!(
        E2bOptions::default().bind(None).unwrap().is_none(),
        "off by default"
    );
    let alone = Config::try_parse_from(["hyperlightd", "--e2b-listen", "127.0.0.1:1"]);
    assert!(alone.is_err(), "--e2b-listen needs --e2b-keys");
}

#[tokio::test]
async fn a_socket_systemd_passes_is_served_with_keys_and_refused_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("alice {ALICE}\n")).unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    let passed = || Some(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let keys_only = E2bOptions {
        e2b_listen: None,
        e2b_keys: Some(keys.clone()),
    };
    let taken = keys_only.bind(passed()).unwrap().unwrap();
    assert!(taken.listener.local_addr().unwrap().ip().is_loopback());
    let refused = |options: &E2bOptions, passed| options.bind(passed).unwrap_err().to_string();
    assert!(refused(&keys_only, None).contains("none was passed"));
    assert!(refused(&E2bOptions::default(), passed()).contains("no --e2b-keys"));
    let both = E2bOptions {
        e2b_listen: Some("127.0.0.1:0".parse().unwrap()),
        e2b_keys: Some(keys),
    };
    assert!(refused(&both, passed()).contains("drop one"));
}
