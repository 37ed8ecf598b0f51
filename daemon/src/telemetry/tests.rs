//! Spans as the daemon makes them, recorded by the SDK's in-memory exporter.

use std::time::{Duration, Instant};

use hyper::HeaderMap;
use hyper::header::HeaderValue;
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

use super::*;

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn recording() -> (Tracer, SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = Tracer::new(provider.tracer("test"));
    (tracer, provider, exporter)
}

fn finished(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter.get_finished_spans().unwrap()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span {name:?} in {spans:?}"))
}

fn headers(traceparent: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", HeaderValue::from_str(traceparent).unwrap());
    headers
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[test]
fn a_request_span_is_the_child_of_the_callers_traceparent() {
    let (tracer, _provider, exporter) = recording();
    let parent = remote_parent(&headers(PARENT));
    let request = tracer
        .under(parent)
        .child("POST /v1/exec", SpanKind::Server, Vec::new);
    assert_eq!(
        request.trace_id().as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
    let answer = request.traceresponse().unwrap();
    assert!(
        answer.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{answer}"
    );
    assert!(
        !answer.contains("b7ad6b7169203331"),
        "names the daemon's span: {answer}"
    );
    drop(request);
    let spans = finished(&exporter);
    let span = named(&spans, "POST /v1/exec");
    assert_eq!(span.span_kind, SpanKind::Server);
    assert_eq!(
        span.parent_span_id,
        SpanId::from_hex("b7ad6b7169203331").unwrap()
    );
    assert!(span.parent_span_is_remote);
}

#[test]
fn a_malformed_traceparent_is_ignored_and_a_new_trace_begins() {
    for bad in [
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "not a traceparent",
    ] {
        assert!(remote_parent(&headers(bad)).is_none(), "{bad:?}");
    }
    assert!(remote_parent(&HeaderMap::new()).is_none());
    let (tracer, _provider, _exporter) = recording();
    let request = tracer.under(None).child("GET", SpanKind::Server, Vec::new);
    assert!(request.trace_id().is_some(), "a trace of its own");
}

#[test]
fn off_records_nothing_yet_names_the_callers_trace() {
    let off = Tracer::default();
    assert!(!off.is_on());
    let request = off.under(remote_parent(&headers(PARENT)));
    let child = request.child("x", SpanKind::Server, || panic!("no attributes are made"));
    let span = child.span("y", || panic!("no attributes are made"));
    span.set(|| panic!("no attributes are made"));
    span.fail("timeout");
    child.record("z", Instant::now(), || panic!("no attributes are made"));
    assert_eq!(
        child.trace_id().as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
    assert_eq!(child.traceresponse().as_deref(), Some(PARENT));
    assert!(Trace::off().trace_id().is_none());
    assert!(Trace::off().traceresponse().is_none());
}

#[test]
fn spans_nest_and_a_guard_ends_its_span_when_dropped() {
    let (tracer, _provider, exporter) = recording();
    let request = tracer.root().child("request", SpanKind::Server, Vec::new);
    {
        let call = request.span("guest call", || {
            vec![Attribute::new("hyperlightd.language", "python")]
        });
        let tool = call.span("execute_tool now", Vec::new);
        tool.fail("timeout");
        assert!(finished(&exporter).is_empty(), "nothing ends while held");
    }
    let spans = finished(&exporter);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (call, tool) = (
        named(&spans, "guest call"),
        named(&spans, "execute_tool now"),
    );
    assert_eq!(tool.parent_span_id, call.span_context.span_id());
    assert_eq!(
        attribute(call, "hyperlightd.language").as_deref(),
        Some("python")
    );
    assert_eq!(tool.status, Status::error("timeout"));
    assert_eq!(attribute(tool, "error.type").as_deref(), Some("timeout"));
    drop(request);
    let spans = finished(&exporter);
    let request = named(&spans, "request");
    assert_eq!(
        call_parent(&spans, "guest call"),
        request.span_context.span_id()
    );
}

fn call_parent(spans: &[SpanData], name: &str) -> SpanId {
    named(spans, name).parent_span_id
}

#[test]
fn a_child_ends_with_its_last_clone_and_a_detached_place_keeps_nothing_open() {
    let (tracer, _provider, exporter) = recording();
    let request = tracer.root().child("request", SpanKind::Server, Vec::new);
    let held = request.clone();
    let after = request.detached();
    drop(request);
    assert!(finished(&exporter).is_empty(), "a clone still holds it");
    drop(held);
    assert_eq!(finished(&exporter).len(), 1, "ended with its last clone");
    let request = named(&finished(&exporter), "request").span_context.clone();
    after.span("checkpoint save", Vec::new).end();
    let restore = after.linked("restore", Vec::new);
    restore.end();
    let spans = finished(&exporter);
    let save = named(&spans, "checkpoint save");
    assert_eq!(
        save.parent_span_id,
        request.span_id(),
        "still the request's child"
    );
    assert_eq!(save.span_context.trace_id(), request.trace_id());
    let restore = named(&spans, "restore");
    assert_ne!(
        restore.span_context.trace_id(),
        request.trace_id(),
        "a trace of its own"
    );
    assert_eq!(restore.parent_span_id, SpanId::INVALID);
    let links: Vec<_> = restore
        .links
        .iter()
        .map(|l| l.span_context.clone())
        .collect();
    assert_eq!(links, vec![request]);
}

#[test]
fn a_recorded_wait_starts_when_it_began() {
    let (tracer, _provider, exporter) = recording();
    let began = Instant::now()
        .checked_sub(Duration::from_millis(250))
        .unwrap();
    tracer.root().record("queue wait", began, Vec::new);
    let spans = finished(&exporter);
    let wait = named(&spans, "queue wait");
    let length = wait.end_time.duration_since(wait.start_time).unwrap();
    assert!(length >= Duration::from_millis(250), "{length:?}");
    assert_ne!(wait.span_context.trace_id(), TraceId::INVALID);
}

mod endpoint {
    use std::collections::HashMap;

    use crate::telemetry::export::{TraceError, TraceOptions, endpoint, export_timeout};

    use super::*;

    fn resolve(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<String>, TraceError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let options = TraceOptions {
            endpoint: flag.map(str::to_owned),
        };
        endpoint(&options, &|name| vars.get(name).cloned()).map(|e| e.map(|e| e.url))
    }

    #[test]
    fn off_unless_the_flag_or_an_endpoint_variable_names_a_collector() {
        assert_eq!(resolve(None, &[]).unwrap(), None);
        assert_eq!(
            resolve(None, &[("OTEL_EXPORTER_OTLP_HEADERS", "a=b")]).unwrap(),
            None
        );
        assert_eq!(
            resolve(Some("http://localhost:4318/"), &[])
                .unwrap()
                .as_deref(),
            Some("http://localhost:4318/v1/traces")
        );
        let base = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")];
        assert_eq!(
            resolve(None, &base).unwrap().as_deref(),
            Some("https://collector:4318/v1/traces")
        );
        let traces = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://other:9000/traces",
            ),
        ];
        assert_eq!(
            resolve(None, &traces).unwrap().as_deref(),
            Some("http://other:9000/traces"),
            "the signal's own variable is used as it is, and wins"
        );
        assert_eq!(
            resolve(Some("http://flag:4318"), &traces)
                .unwrap()
                .as_deref(),
            Some("http://flag:4318/v1/traces"),
            "the command line wins"
        );
    }

    #[test]
    fn the_sdk_switches_turn_it_off() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                resolve(Some("http://x:1"), &[on, off]).unwrap(),
                None,
                "{off:?}"
            );
        }
        let not_off = ("OTEL_SDK_DISABLED", "false");
        assert!(resolve(None, &[on, not_off]).unwrap().is_some());
    }

    #[test]
    fn what_it_cannot_send_to_is_refused_at_start() {
        for bad in [
            "localhost:4318",
            "ftp://host/",
            "http://",
            "not a url",
            "unix:///run/otel.sock",
        ] {
            let refused = resolve(Some(bad), &[]).unwrap_err();
            assert!(
                refused.to_string().contains("--otlp-endpoint"),
                "{bad}: {refused}"
            );
        }
        let grpc = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        let refused = resolve(None, &grpc).unwrap_err().to_string();
        assert!(refused.contains("http/protobuf"), "{refused}");
        let proto = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        assert!(resolve(None, &proto).unwrap().is_some());
    }

    #[test]
    fn an_export_has_the_standard_time_limit() {
        let none = HashMap::<String, String>::new();
        assert_eq!(
            export_timeout(&|n| none.get(n).cloned()),
            Duration::from_secs(10)
        );
        let set: HashMap<String, String> =
            [("OTEL_EXPORTER_OTLP_TIMEOUT".to_owned(), "2500".to_owned())].into();
        assert_eq!(
            export_timeout(&|n| set.get(n).cloned()),
            Duration::from_millis(2500)
        );
    }
}
