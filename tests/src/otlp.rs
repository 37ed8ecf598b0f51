//! A trace collector on loopback for the trace tests: it takes OTLP exports over HTTP with
//! protobuf (`POST /v1/traces`, `application/x-protobuf`), decodes each with the OpenTelemetry
//! project's own messages (`opentelemetry-proto`), and keeps the spans, flattened, for the tests
//! to read. Anything else it is sent is answered 4xx and counted as refused.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::net::TcpListener;

/// One span as the collector received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub name: String,
    /// Hex, as in a `traceparent`.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root.
    pub parent_span_id: String,
    /// OTLP's numbers: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// Each link's trace and span id.
    pub links: Vec<(String, String)>,
    /// OTLP's numbers: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    /// Its resource's attributes.
    pub resource: BTreeMap<String, String>,
    /// Its start and end, in nanoseconds since the epoch.
    pub start: u64,
    pub end: u64,
}

impl Received {
    pub const INTERNAL: i32 = 1;
    pub const SERVER: i32 = 2;
    pub const CLIENT: i32 = 3;

    /// Attribute `key`, as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Debug, Default)]
struct Kept {
    spans: Vec<Received>,
    refused: Vec<String>,
}

/// The collector: its address, and what it kept.
#[derive(Debug, Clone)]
pub struct Collector {
    pub address: SocketAddr,
    kept: Arc<Mutex<Kept>>,
}

impl Collector {
    /// Listens on a loopback port.
    pub async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("its address");
        let kept = Arc::new(Mutex::new(Kept::default()));
        let theirs = kept.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let kept = theirs.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let kept = kept.clone();
                        async move { Ok::<_, Infallible>(take(&kept, request).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                });
            }
        });
        Collector { address, kept }
    }

    /// Its base URL, as `--otlp-endpoint` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.kept().spans.clone()
    }

    /// What it refused, and why.
    pub fn refused(&self) -> Vec<String> {
        self.kept().refused.clone()
    }

    /// Waits (at most `limit`) until the spans received satisfy `done`; then they are returned.
    /// Past `limit` the test fails, naming `what` and listing what came.
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() >= deadline {
                let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
                panic!("{what}: not received within {limit:?}; received {names:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn take(kept: &Mutex<Kept>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let refuse = |status: StatusCode, why: String| {
        kept.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refused
            .push(why);
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = status;
        response
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/v1/traces" {
        let why = format!("{} {}", request.method(), request.uri());
        return refuse(StatusCode::NOT_FOUND, why);
    }
    let content_type = request.headers().get(hyper::header::CONTENT_TYPE).cloned();
    if content_type.as_ref().and_then(|v| v.to_str().ok()) != Some("application/x-protobuf") {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("{content_type:?}"),
        );
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return refuse(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
    };
    let export = match ExportTraceServiceRequest::decode(body) {
        Ok(export) => export,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, format!("decoding: {e}")),
    };
    let spans = flatten(export);
    kept.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .spans
        .extend(spans);
    let mut response = Response::new(Full::new(Bytes::from(
        ExportTraceServiceResponse::default().encode_to_vec(),
    )));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

fn flatten(export: ExportTraceServiceRequest) -> Vec<Received> {
    let mut received = Vec::new();
    for resource_spans in export.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                let status = span.status.unwrap_or_default();
                received.push(Received {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    status_code: status.code,
                    status_message: status.message,
                    resource: resource.clone(),
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                });
            }
        }
    }
    received
}

fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}
