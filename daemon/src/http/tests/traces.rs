//! Requests as spans, joined to the caller's trace, against the stub executor.

use hyper::header::HeaderValue;
use opentelemetry::trace::{SpanId, Status, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

use super::*;
use crate::audit::testing::{lines as audit_lines, log_in};
use crate::caller::{Access, ExecQuota};
use crate::service::Callers;
use crate::telemetry::Tracer;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CODE: &str = "secret_marker_in_the_code()";

/// An API that audits into `dir`, and records its spans (with `on`) in the returned exporter.
fn traced_api(
    dir: &tempfile::TempDir,
    on: bool,
) -> (
    Api<StubExecutor>,
    std::path::PathBuf,
    InMemorySpanExporter,
    SdkTracerProvider,
) {
    let (service, _) = service(echo_executor());
    let (audit, path) = log_in(dir, false);
    let callers = Callers {
        access: Access::new(&[], &[], 999),
        quota: ExecQuota::new(BTreeMap::new(), None),
        audit: Arc::new(audit),
    };
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let mut api = Api::of(service.with_callers(callers));
    if on {
        api = api.with_tracer(Tracer::new(provider.tracer("test")));
    }
    (api, path, exporter, provider)
}

fn exec_request(traceparent: Option<&str>) -> Request<Full<Bytes>> {
    let body = serde_json::json!({"language": "javascript", "code": CODE}).to_string();
    let mut request = request(Method::POST, paths::EXEC, &body);
    if let Some(traceparent) = traceparent {
        request
            .headers_mut()
            .insert("traceparent", HeaderValue::from_str(traceparent).unwrap());
    }
    request
}

fn traceresponse(response: &Response<Body>) -> Option<String> {
    let value = response.headers().get(crate::telemetry::TRACERESPONSE)?;
    Some(value.to_str().unwrap().to_owned())
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test]
async fn an_exec_is_a_server_span_under_the_callers_traceparent_and_the_audit_names_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (api, audit, exporter, _provider) = traced_api(&dir, true);
    let response = api
        .handle_from_test_caller(exec_request(Some(TRACEPARENT)))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let answer = traceresponse(&response).expect("a traceresponse header");
    drop(response);
    let spans = exporter.get_finished_spans().unwrap();
    let [span] = spans.as_slice() else {
        panic!("one span: {spans:?}");
    };
    assert_eq!(span.name, "POST /v1/exec");
    assert_eq!(span.span_context.trace_id().to_string(), TRACE_ID);
    assert_eq!(
        span.parent_span_id,
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    assert_eq!(
        answer,
        format!("00-{TRACE_ID}-{}-01", span.span_context.span_id()),
        "the header names the daemon's span"
    );
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", paths::EXEC),
        ("http.response.status_code", "200"),
        ("hyperlightd.language", "javascript"),
        ("hyperlightd.exec.status", "ok"),
        ("hyperlightd.caller.uid", "1000"),
    ] {
        assert_eq!(attribute(span, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(span.status, Status::Unset);
    let everything = format!("{span:?}");
    assert!(
        !everything.contains("secret_marker"),
        "no code in a span: {everything}"
    );
    let [line] = audit_lines(&audit).try_into().unwrap();
    assert_eq!(line["trace_id"], TRACE_ID);
}

#[tokio::test]
async fn a_refusal_marks_the_span_with_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _, exporter, _provider) = traced_api(&dir, true);
    let bad = request(Method::POST, paths::EXEC, "{not json");
    let response = api.handle_from_test_caller(bad).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let trace_id = traceresponse(&response).unwrap()[3..35].to_owned();
    drop(response);
    let spans = exporter.get_finished_spans().unwrap();
    let [span] = spans.as_slice() else {
        panic!("one span: {spans:?}");
    };
    assert_eq!(
        span.span_context.trace_id().to_string(),
        trace_id,
        "a trace of its own"
    );
    assert_eq!(
        attribute(span, "error.type").as_deref(),
        Some("invalid_request")
    );
    assert_eq!(
        attribute(span, "http.response.status_code").as_deref(),
        Some("400")
    );
    assert_eq!(span.status, Status::error("invalid_request"));
}

#[tokio::test]
async fn probes_make_no_span_unless_the_callers_trace_asks() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _, exporter, _provider) = traced_api(&dir, true);
    for path in [paths::HEALTH_LIVE, paths::METRICS] {
        let response = api
            .handle_from_test_caller(request(Method::GET, path, ""))
            .await;
        assert!(traceresponse(&response).is_none(), "{path}");
    }
    assert!(exporter.get_finished_spans().unwrap().is_empty());
    let mut probe = request(Method::GET, paths::HEALTH_LIVE, "");
    probe
        .headers_mut()
        .insert("traceparent", HeaderValue::from_static(TRACEPARENT));
    drop(api.handle_from_test_caller(probe).await);
    assert_eq!(exporter.get_finished_spans().unwrap().len(), 1);
}

#[tokio::test]
async fn with_tracing_off_the_callers_trace_is_still_named_and_nothing_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let (api, audit, exporter, _provider) = traced_api(&dir, false);
    let response = api
        .handle_from_test_caller(exec_request(Some(TRACEPARENT)))
        .await;
    assert_eq!(traceresponse(&response).as_deref(), Some(TRACEPARENT));
    let response = api.handle_from_test_caller(exec_request(None)).await;
    assert!(traceresponse(&response).is_none());
    assert!(exporter.get_finished_spans().unwrap().is_empty());
    let lines = audit_lines(&audit);
    assert_eq!(lines[0]["trace_id"], TRACE_ID);
    assert!(lines[1].get("trace_id").is_none(), "{}", lines[1]);
}
