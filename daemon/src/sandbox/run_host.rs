//! The guests' way out of their sandbox for the run in progress, the same for every guest:
//! what a runner's host functions `tool_call` and `tool_wait` answer (the program's tool calls)
//! and `fetch` (its outbound HTTP). The exchange, the way out and the run's deadline are given
//! at the start of each run and taken away at its end, so that a tool or a destination exists
//! only for the exec that was given it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::job::Deadline;
use crate::job::egress::{FetchError, FetchErrorKind, HttpRequest, HttpResponse, Outbound};
use crate::job::tools::{ToolExchange, Waited};
use crate::sandbox::guest::Program;
use crate::telemetry::{Attribute, Kind, Span, Trace};

/// The tool calls and outbound requests of the run in progress, shared by a sandbox's host
/// functions.
#[derive(Debug, Default, Clone)]
pub struct RunHost(Arc<Mutex<Option<Run>>>);

#[derive(Debug)]
struct Run {
    exchange: Option<Arc<ToolExchange>>,
    egress: Option<Arc<dyn Outbound>>,
    deadline: Arc<Deadline>,
    /// The most body bytes of one response the sandbox can take.
    response_capacity: usize,
    /// Where the spans of its calls and requests go.
    trace: Trace,
}

impl RunHost {
    fn run(&self) -> std::sync::MutexGuard<'_, Option<Run>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run of `program` begins, with its tools and its way out (if any) under `deadline`,
    /// in a sandbox that takes responses of at most `response_capacity` body bytes.
    pub fn begin(&self, program: &Program<'_>, deadline: &Arc<Deadline>, response_capacity: usize) {
        *self.run() = Some(Run {
            exchange: program.tools.cloned(),
            egress: program.egress.cloned(),
            deadline: deadline.clone(),
            response_capacity,
            trace: program.trace.clone(),
        });
    }

    /// The run has ended: no tool is left to call, nothing to reach.
    pub fn end(&self) {
        *self.run() = None;
    }

    fn current(&self) -> Option<(Arc<ToolExchange>, Arc<Deadline>, Trace)> {
        let run = self.run();
        let run = run.as_ref()?;
        Some((
            run.exchange.clone()?,
            run.deadline.clone(),
            run.trace.clone(),
        ))
    }

    /// `fetch(request)`: the program's HTTP request (JSON: `method`, `url`, `headers` as
    /// `[name, value]` pairs, `body` in base64, `redirect` "follow" or "manual"), made by the
    /// host; the response (`status`, `url`, `redirected`, `headers`, `body` in base64) or
    /// `{"error": {"kind", "message"}}` for the program to raise. Blocks until it is whole.
    pub fn fetch(&self, request: &str) -> Value {
        let (egress, deadline, capacity, trace) = {
            let run = self.run();
            let Some(run) = run.as_ref() else {
                return fetch_error(&FetchError::new(
                    FetchErrorKind::Failed,
                    "no program is running",
                ));
            };
            (
                run.egress.clone(),
                run.deadline.clone(),
                run.response_capacity,
                run.trace.clone(),
            )
        };
        let Some(egress) = egress else {
            return fetch_error(&FetchError::new(
                FetchErrorKind::Refused,
                "this daemon lets programs reach nothing over HTTP (its operator allowed no \
                 destination)",
            ));
        };
        match parse_request(request, capacity) {
            Ok(request) => {
                let span = outbound_span(&trace, &request);
                match egress.fetch(request, &deadline) {
                    Ok(response) => {
                        let status = i64::from(response.status);
                        span.set(|| vec![Attribute::new("http.response.status_code", status)]);
                        if response.status >= 400 {
                            span.fail(response.status.to_string());
                        }
                        response_json(&response)
                    }
                    Err(e) => {
                        span.fail(e.kind.as_str());
                        fetch_error(&e)
                    }
                }
            }
            Err(e) => fetch_error(&e),
        }
    }

    /// `tool_call(name, arguments)`: `{"id": ...}` once sent, or `{"error": ...}` for the
    /// program to raise (nothing was sent).
    pub fn call(&self, name: &str, arguments: &str) -> Value {
        let Some((exchange, _, trace)) = self.current() else {
            return json!({"error": format!("there is no tool {name:?}: this execution declared no tools")});
        };
        match exchange.call(name, arguments, &trace) {
            Ok(id) => json!({"id": id}),
            Err(message) => json!({"error": message}),
        }
    }

    /// `tool_wait(ms)`: the next answer, `{"id", "result"}` (the result as JSON text) or
    /// `{"id", "error"}`; or `{"wait": "until"}` once `ms` milliseconds have passed (a negative
    /// `ms`: no bound), `"idle"` when no call is waiting, `"gone"` when the caller went away,
    /// `"wall_clock"` when the execution's wall-clock cap passed (the program is then stopped).
    pub fn wait(&self, ms: f64) -> Value {
        let Some((exchange, deadline, trace)) = self.current() else {
            return json!({"wait": "idle"});
        };
        let _waiting = trace.span("tool wait", Vec::new);
        let until = (ms >= 0.0)
            .then(|| Duration::try_from_secs_f64(ms / 1000.0).ok())
            .flatten()
            .map(|wait| Instant::now() + wait);
        match exchange.wait(&deadline, until) {
            Waited::Answer {
                id,
                result: Ok(json),
            } => json!({"id": id, "result": json}),
            Waited::Answer {
                id,
                result: Err(message),
            } => json!({"id": id, "error": message}),
            Waited::Until => json!({"wait": "until"}),
            Waited::Idle => json!({"wait": "idle"}),
            Waited::Gone => json!({"wait": "gone"}),
            Waited::WallClock => {
                // Stopped as at its time limit: the watchdog interrupts it as it returns to
                // the guest, unless the runner ends the program first; either way the worker
                // answers with the cap, which the exchange remembers.
                deadline.expire();
                json!({"wait": "wall_clock"})
            }
        }
    }
}

/// A request as a runner sends it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRequest {
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    redirect: Option<String>,
}

fn parse_request(text: &str, max_response_bytes: usize) -> Result<HttpRequest, FetchError> {
    let invalid = |message: String| FetchError::new(FetchErrorKind::Invalid, message);
    let wire: WireRequest = serde_json::from_str(text)
        .map_err(|e| invalid(format!("the runner's request is malformed: {e}")))?;
    let body = match wire.body {
        None => Vec::new(),
        Some(text) => BASE64
            .decode(text)
            .map_err(|e| invalid(format!("the request's body is not base64: {e}")))?,
    };
    let follow_redirects = match wire.redirect.as_deref() {
        None | Some("follow") => true,
        Some("manual") => false,
        Some(other) => {
            return Err(invalid(format!(
                "redirect {other:?} is not served: \"follow\" or \"manual\""
            )));
        }
    };
    Ok(HttpRequest {
        method: wire.method,
        url: wire.url,
        headers: wire.headers,
        body,
        follow_redirects,
        max_response_bytes,
    })
}

fn response_json(response: &HttpResponse) -> Value {
    json!({
        "status": response.status,
        "status_text": hyper::StatusCode::from_u16(response.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or_default(),
        "url": response.url,
        "redirected": response.redirected,
        "headers": response.headers,
        "body": BASE64.encode(&response.body),
    })
}

fn fetch_error(e: &FetchError) -> Value {
    json!({"error": {"kind": e.kind.as_str(), "message": e.message}})
}

/// The span of one outbound request, as OpenTelemetry's HTTP client conventions name it: its
/// method, scheme, host and port, and the URL without its query, fragment or user part (a
/// secret goes in a header, and no header is recorded).
fn outbound_span(trace: &Trace, request: &HttpRequest) -> Span {
    let method = match request.method.to_ascii_uppercase().as_str() {
        known @ ("GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "PATCH" | "OPTIONS" | "TRACE"
        | "CONNECT") => known.to_owned(),
        _ => "_OTHER".to_owned(),
    };
    trace.span_of(method.clone(), Kind::Client, || {
        let mut attributes = vec![Attribute::new("http.request.method", method.clone())];
        if let Ok(url) = request.url.parse::<hyper::Uri>() {
            let scheme = url.scheme_str().unwrap_or("http").to_owned();
            let host = url.host().unwrap_or_default().to_owned();
            let port = url
                .port_u16()
                .unwrap_or(if scheme == "https" { 443 } else { 80 });
            attributes.push(Attribute::new(
                "url.full",
                format!("{scheme}://{host}:{port}{}", url.path()),
            ));
            attributes.push(Attribute::new("url.scheme", scheme));
            attributes.push(Attribute::new("server.address", host));
            attributes.push(Attribute::new("server.port", i64::from(port)));
        }
        attributes
    })
}
