//! The HTTP API: one routing table, request parsing, and the one place where errors become status
//! codes. It turns each request into a call on the [`Service`] and the typed answer into a
//! response; what a request may do is the service's to decide, and it knows nothing of
//! sandboxes.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use hyper::header::{
    ACCEPT, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER,
};
use hyper::{Method, Request, Response, StatusCode};
use hyperlightd_api::{
    CallerLimits, ErrorBody, ErrorKind, ErrorResponse, ExecLimits, ExecRequest, HealthResponse,
    ON_BEHALF_OF_HEADER, check_delegated_name,
};

mod files;
mod route;
mod sessions;
mod stream;
mod tools;

use self::route::{Probe, Route};
pub use self::stream::Body;
use tracing::{Instrument, info_span, warn};

use crate::executor::Executor;
use crate::job::{Caller, ExecError, PodOf};
use crate::metrics::Metrics;
use crate::service::{Call, Executed, Program, Refusal, Running, Service, wire};
use crate::telemetry::{self, Attribute as KeyValue, Kind, Trace, Tracer};

/// The error type bodies are read with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Response header that carries the request id, for matching a response to the daemon's logs.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The API in front of a service.
#[derive(Debug)]
pub struct Api<E> {
    service: Arc<Service<E>>,
    /// Records the requests' spans (off: nothing).
    tracer: Tracer,
}

/// The caller a delegate names in `hyperlightd-on-behalf-of`, if it names one; a name that
/// cannot be one is refused before anything else is read.
fn on_behalf_of<B>(request: &Request<B>) -> Result<Option<Arc<str>>, ApiError> {
    let Some(value) = request.headers().get(ON_BEHALF_OF_HEADER) else {
        return Ok(None);
    };
    let name = value.to_str().map_err(|_| {
        ApiError::InvalidRequest(format!("{ON_BEHALF_OF_HEADER} is not ASCII text"))
    })?;
    check_delegated_name(name)
        .map_err(|e| ApiError::InvalidRequest(format!("{ON_BEHALF_OF_HEADER}: {e}")))?;
    Ok(Some(name.into()))
}

/// A request the API refuses. Each variant has one error kind ([`ApiError::kind`]), and each
/// kind one status code ([`ErrorKind::status`]).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not a valid request.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The body is over the limit.
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body did not arrive in time.
    #[error(
        "the request body did not arrive within {} ms; send it at once, after the headers",
        .limit.as_millis()
    )]
    BodyTimeout {
        /// The time limit.
        limit: std::time::Duration,
    },
    /// No such path.
    #[error("no such path: {0}")]
    NotFound(String),
    /// The path exists, not with this method.
    #[error("{path} does not accept {method}; it accepts {allowed}")]
    MethodNotAllowed {
        /// The method used.
        method: Method,
        /// The path, as the API documents it.
        path: &'static str,
        /// The methods it accepts.
        allowed: &'static str,
    },
    /// The service refused it.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A fault in the daemon.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<ExecError> for ApiError {
    fn from(error: ExecError) -> Self {
        ApiError::Refused(Refusal::Exec(error))
    }
}

impl ApiError {
    /// The error kind of the answer. Exhaustive on purpose: a new variant must decide here.
    fn kind(&self) -> ErrorKind {
        match self {
            ApiError::InvalidRequest(_) => ErrorKind::InvalidRequest,
            ApiError::PayloadTooLarge { .. } => ErrorKind::PayloadTooLarge,
            ApiError::BodyTimeout { .. } => ErrorKind::RequestTimeout,
            ApiError::NotFound(_) => ErrorKind::NotFound,
            ApiError::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            ApiError::Refused(refusal) => refusal.kind(),
            ApiError::Internal(_) => ErrorKind::Internal,
        }
    }

    /// The status code and error kind of the answer.
    fn status(&self) -> (StatusCode, ErrorKind) {
        let kind = self.kind();
        (status_of(kind), kind)
    }

    /// Seconds after which the same request may succeed, for the answers that say so.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Refused(
                Refusal::Exec(
                    ExecError::Overloaded { .. }
                    | ExecError::NoSandboxAvailable { .. }
                    | ExecError::SessionBusy { .. }
                    | ExecError::SessionSaving { .. },
                )
                | Refusal::OverQuota(_)
                | Refusal::ShuttingDown,
            ) => Some(1),
            ApiError::Refused(Refusal::Exec(ExecError::SessionQuota { retry_after, .. })) => {
                Some(retry_after.as_secs_f64().ceil().max(1.0) as u64)
            }
            _ => None,
        }
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        let (status, kind) = self.status();
        let retry = self.retry_after();
        // A body half read, or a daemon on its way out: this connection serves no more.
        let close = matches!(
            self,
            ApiError::BodyTimeout { .. } | ApiError::Refused(Refusal::ShuttingDown)
        );
        let body = ErrorResponse {
            error: ErrorBody::new(kind, self.to_string()),
        };
        let mut response = json_response(status, &body);
        if let Some(seconds) = retry {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if close {
            response
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// The status code of an answer carrying an error of `kind`, from the API's one table
/// ([`ErrorKind::status`], exhaustive). A kind without a status says what became of a program
/// that ran, which is answered 200 inside its response and never as a refusal: should one reach
/// here, it is a fault of the daemon's.
fn status_of(kind: ErrorKind) -> StatusCode {
    kind.status()
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl<E: Executor> Api<E> {
    /// The API in front of `service`.
    pub fn of(service: Service<E>) -> Self {
        Api::over(Arc::new(service))
    }

    /// The API in front of `service`, which other front ends share.
    pub fn over(service: Arc<Service<E>>) -> Self {
        Api {
            service,
            tracer: Tracer::default(),
        }
    }

    /// Records each request as a span with `tracer`.
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = tracer;
        self
    }

    /// The daemon's metrics.
    pub fn metrics(&self) -> &Metrics {
        self.service.metrics()
    }

    /// From now on, refuse new requests (`503 shutting_down`); health says the daemon is
    /// stopping and not ready.
    pub fn drain(&self) {
        self.service.drain();
    }

    /// Answers one request from `caller`. Never fails: every error becomes a JSON error
    /// response.
    pub async fn handle<B>(&self, request: Request<B>, caller: Caller) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let id = self.service.next_call_id();
        let span = info_span!("request", id, uid = caller.uid, method = %request.method(), path = %request.uri().path());
        let trace = self.request_trace(&request, id, &caller);
        let call = Call {
            id,
            caller,
            received: Instant::now(),
            span: span.clone(),
            trace: trace.clone(),
        };
        let result = self.admit_and_route(request, call).await;
        let mut kind = None;
        let mut response = result.unwrap_or_else(|err| {
            let (status, refused) = err.status();
            span.in_scope(|| warn!(status = status.as_u16(), kind = %refused, "{err}"));
            self.service.rejected(refused);
            kind = Some(refused);
            err.into_response().map(Either::Left)
        });
        let status = response.status().as_u16();
        trace.set(|| {
            vec![KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            )]
        });
        if let Some(kind) = kind {
            trace.fail(kind.as_str());
        }
        let headers = response.headers_mut();
        headers.insert(REQUEST_ID_HEADER, HeaderValue::from(id));
        if let Some(value) = trace
            .traceresponse()
            .and_then(|v| HeaderValue::try_from(v).ok())
        {
            headers.insert(telemetry::TRACERESPONSE, value);
        }
        response
    }

    /// The request's place in a trace: its server span (with tracing on), under the caller's
    /// span when its `traceparent` names one. Probes and metrics scrapes make no span unless
    /// the caller's trace asks for one.
    fn request_trace<B>(&self, request: &Request<B>, id: u64, caller: &Caller) -> Trace {
        let parent = telemetry::remote_parent(request.headers());
        let path = request.uri().path();
        let route = Route::parse(path);
        let quiet = matches!(route, Some(Route::Health(_) | Route::Metrics));
        if !self.tracer.is_on() || (quiet && parent.is_none()) {
            return Tracer::default().under(parent);
        }
        let method = match *request.method() {
            Method::GET
            | Method::POST
            | Method::PATCH
            | Method::DELETE
            | Method::PUT
            | Method::HEAD
            | Method::OPTIONS => request.method().as_str().to_owned(),
            _ => "_OTHER".to_owned(),
        };
        let pattern = route.as_ref().map(Route::pattern);
        let name = match pattern {
            Some(pattern) => format!("{method} {pattern}"),
            None => method.clone(),
        };
        let path = path.to_owned();
        let uid = caller.uid;
        let (pod, container) = match &caller.pod {
            PodOf::Placed(placed) => (placed.pod.clone(), placed.container.clone()),
            PodOf::Unread | PodOf::Unknown(_) => (None, None),
        };
        self.tracer.under(parent).child(name, Kind::Server, || {
            let mut attributes = vec![
                KeyValue::new("http.request.method", method),
                KeyValue::new("url.path", path),
                KeyValue::new("url.scheme", "http"),
                KeyValue::new("network.transport", "unix"),
                KeyValue::new("hyperlightd.request.id", id as i64),
                KeyValue::new("hyperlightd.caller.uid", i64::from(uid)),
            ];
            if let Some(pattern) = pattern {
                attributes.push(KeyValue::new("http.route", pattern));
            }
            if let Some(pod) = pod {
                attributes.push(KeyValue::new("k8s.pod.uid", pod.to_string()));
            }
            if let Some(container) = container {
                attributes.push(KeyValue::new("container.id", container.to_string()));
            }
            attributes
        })
    }

    /// Reads whom a delegate acts for, lets the caller in (or not), and routes the request.
    async fn admit_and_route<B>(
        &self,
        request: Request<B>,
        mut call: Call,
    ) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        call.caller.on_behalf_of = on_behalf_of(&request)?;
        let (method, path) = (request.method().as_str(), request.uri().path());
        let span = call.span.clone();
        span.in_scope(|| self.service.admit(&call, method, path))?;
        self.route(request, call).instrument(span).await
    }

    /// The routing table: every path and method the API serves.
    async fn route<B>(&self, request: Request<B>, call: Call) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let whole = |response: Response<Full<Bytes>>| response.map(Either::Left);
        let path = request.uri().path().to_owned();
        let route = Route::parse(&path).ok_or_else(|| ApiError::NotFound(path.clone()))?;
        if route.takes_work(request.method()) {
            // Before the body is read: a draining daemon answers 503 whatever the body.
            self.service.taking_work()?;
        }
        match (request.method().clone(), route) {
            (Method::POST, Route::Exec) => self.exec(request, call).await,
            (Method::GET, Route::Health(probe)) => Ok(whole(self.health(probe))),
            (Method::GET, Route::Metrics) => self.render_metrics().map(whole),
            (Method::POST, Route::Sessions) => self.create_session(request, &call).await.map(whole),
            (Method::GET, Route::Sessions) => self.list_sessions(&request, &call).map(whole),
            (Method::GET, Route::Session(id)) => self.get_session(&call, id).await.map(whole),
            (Method::PATCH, Route::Session(id)) => {
                self.update_session(request, &call, id).await.map(whole)
            }
            (Method::DELETE, Route::Session(id)) => self.delete_session(&call, id).map(whole),
            (Method::POST, Route::SessionExec(id)) => self.session_exec(request, id, call).await,
            (Method::POST, Route::SessionFork(id)) => {
                self.fork_session(request, &call, id).await.map(whole)
            }
            (Method::GET, Route::SessionCheckpoints(id)) => {
                self.list_checkpoints(&call, id).await.map(whole)
            }
            (Method::POST, Route::SessionRollback(id)) => {
                self.rollback_session(request, &call, id).await.map(whole)
            }
            (Method::POST, Route::SessionPark(id)) => {
                self.park_session(request, &call, id).await.map(whole)
            }
            (Method::POST, Route::SessionRestart(id)) => {
                self.restart_session(request, &call, id).await.map(whole)
            }
            (Method::POST, Route::SessionPackages(id)) => {
                self.install_packages(request, &call, id).await.map(whole)
            }
            (Method::GET, Route::SessionPackages(id)) => {
                self.list_session_packages(&call, id).await.map(whole)
            }
            (Method::GET, Route::SessionFiles(id)) => {
                self.list_session_files(&call, id).await.map(whole)
            }
            (Method::POST, Route::SessionFiles(id)) => self
                .change_session_files(request, &call, id)
                .await
                .map(whole),
            (Method::GET, Route::SessionFile(id, path)) => {
                self.get_session_file(&call, id, path).await.map(whole)
            }
            (Method::POST, Route::ToolResults(id)) => {
                self.tool_result(request, &call, id).await.map(whole)
            }
            (method, route) => Err(ApiError::MethodNotAllowed {
                method,
                path: route.pattern(),
                allowed: route.allowed(),
            }),
        }
    }

    async fn exec<B>(&self, request: Request<B>, call: Call) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let accepts_lines = accepts_ndjson(request.headers());
        let mut exec: ExecRequest = self.read_json(request).await?;
        exec.stream |= accepts_lines;
        let language = exec.language;
        let (stream, program) = wire::program(exec)?;
        self.answer(call, stream, program, move |service, call, program| async move {
            service.exec(&call, language, program).await
        })
        .await
    }

    /// Runs `program` through `run` and answers with its outcome: whole, or with `stream`, its
    /// output as it is written first (the job then runs in a task of its own, which ends with
    /// its audit line and metrics even if the client goes away).
    async fn answer<F, Fut>(
        &self,
        call: Call,
        stream: bool,
        program: Program,
        run: F,
    ) -> Result<Response<Body>, ApiError>
    where
        F: FnOnce(Arc<Service<E>>, Call, Program) -> Fut,
        Fut: Future<Output = Result<Executed, Refusal>> + Send + 'static,
    {
        let service = self.service.clone();
        if !stream {
            let executed = run(service, call, program).await?;
            let response = wire::response(executed);
            return Ok(json_response(StatusCode::OK, &response).map(Either::Left));
        }
        let span = call.span.clone();
        let running = Running::start(span, program, move |program| run(service, call, program));
        Ok(stream::answer(running.await?).await)
    }

    /// Reads the body as a `T`.
    async fn read_json<T, B>(&self, request: Request<B>) -> Result<T, ApiError>
    where
        T: serde::de::DeserializeOwned,
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let limit = self.service.limits().max_body_bytes;
        self.read_json_up_to(request, limit).await
    }

    /// [`read_json`](Self::read_json) of a body that may be empty (or only whitespace): then
    /// `T`'s default.
    async fn read_optional_json<T, B>(&self, request: Request<B>) -> Result<T, ApiError>
    where
        T: serde::de::DeserializeOwned + Default,
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let limit = self.service.limits().max_body_bytes;
        let body = self.read_body(request, limit).await?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(T::default());
        }
        parse_json(&body)
    }

    /// [`read_json`](Self::read_json) of a body of at most `limit` bytes.
    async fn read_json_up_to<T, B>(&self, request: Request<B>, limit: usize) -> Result<T, ApiError>
    where
        T: serde::de::DeserializeOwned,
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let body = self.read_body(request, limit).await?;
        parse_json(&body)
    }

    /// Reads the whole body, refusing it as soon as it passes `limit` bytes.
    async fn read_body<B>(&self, request: Request<B>, limit: usize) -> Result<Bytes, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let limits = self.service.limits();
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        let timeout = limits.body_read_timeout;
        let body = Limited::new(request.into_body(), limit).collect();
        match tokio::time::timeout(timeout, body).await {
            Err(_) => Err(ApiError::BodyTimeout { limit: timeout }),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) if e.is::<LengthLimitError>() => Err(ApiError::PayloadTooLarge { limit }),
            Ok(Err(e)) => Err(ApiError::InvalidRequest(format!(
                "could not read the request body: {e}"
            ))),
        }
    }

    /// The daemon's health; `probe` decides the status code.
    fn health(&self, probe: Probe) -> Response<Full<Bytes>> {
        let health = self.service.health();
        let (live, ready) = (health.live(), health.ready());
        let status = health.status().to_owned();
        let limits = health.limits;
        let executor = health.executor;
        let body = HealthResponse {
            status,
            live,
            ready,
            hypervisor: executor.hypervisor,
            versions: health.versions,
            sandboxes: wire::sandbox_counts(executor.sandboxes),
            packages: wire::packages(&executor.runtimes),
            runtimes: wire::runtimes(&executor.runtimes),
            limits: ExecLimits {
                default_timeout_ms: millis(limits.default_timeout),
                max_timeout_ms: millis(limits.max_timeout),
                max_code_bytes: limits.max_code_bytes,
                max_output_bytes: limits.max_output_bytes,
                max_result_bytes: limits.max_result_bytes,
                memory_mib: executor.memory_mib,
                max_files: limits.files.max_entries,
                max_file_bytes: limits.files.max_bytes,
            },
            sessions: wire::session_counts(executor.sessions),
            session_limits: Some(wire::session_limits(&executor.session_limits)),
            caller_limits: Some(CallerLimits {
                max_execs: health.max_execs_per_caller,
                max_sessions: executor.session_limits.max_per_caller,
                allow_list: health.allow_list,
            }),
            audit: health.audit,
            durable: executor.durable.map(wire::durable_health),
            egress: health.egress,
            installs: health.packages,
        };
        let up = match probe {
            Probe::Full => true,
            Probe::Live => live,
            Probe::Ready => ready,
        };
        let code = if up {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        json_response(code, &body)
    }

    fn render_metrics(&self) -> Result<Response<Full<Bytes>>, ApiError> {
        let text = self
            .service
            .metrics_text()
            .map_err(|e| ApiError::Internal(format!("rendering metrics: {e}")))?;
        let mut response = Response::new(Full::new(Bytes::from(text)));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        Ok(response)
    }
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether the request's `Accept` header asks for newline-delimited JSON.
fn accepts_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|kind| kind.split(';').next().unwrap_or("").trim() == hyperlightd_api::NDJSON)
}

fn json_response<T: serde::Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    // Serializing our own wire types cannot fail: they hold strings, numbers and JSON values.
    let bytes = serde_json::to_vec(body).unwrap_or_else(|e| {
        format!(r#"{{"error":{{"kind":"internal","message":"serializing the response: {e}"}}}}"#)
            .into_bytes()
    });
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A request body as JSON of type `T`, or 400 saying what is wrong with it.
fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::InvalidRequest(e.to_string()))
}

#[cfg(test)]
mod tests;
