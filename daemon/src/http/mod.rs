//! The HTTP API: one routing table, request parsing, and the one place where errors become status
//! codes. It turns requests into [`Job`]s for an [`Executor`] and knows nothing of sandboxes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use hyper::header::{
    ACCEPT, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER,
};
use hyper::{Method, Request, Response, StatusCode};
use hyperlightd_api::{
    CallerLimits, ErrorBody, ErrorKind, ErrorResponse, ExecLimits, ExecRequest, ExecResponse,
    HealthResponse, Language,
};

mod files;
mod route;
mod sessions;
mod stream;
mod wire;

use self::route::{Probe, Route};
pub use self::stream::Body;
use tracing::{Instrument, info, info_span, warn};

use crate::audit::ExecRecord;
use crate::caller::{OverQuota, Policy};
use crate::code_policy::{self, CodePolicy};
use crate::config::Limits;
use crate::executor::Executor;
use crate::job::{Caller, ExecError, Job, Outcome};
use crate::metrics::Metrics;

/// What a request asks to run, whatever its body's type.
struct Program {
    code: String,
    timeout_ms: Option<u64>,
    max_output_bytes: Option<usize>,
    policy: Option<CodePolicy>,
    /// Checked and decoded.
    files: crate::job::Files,
}

/// What every handler knows of its request besides the request itself.
#[derive(Clone)]
struct Ctx {
    /// The request's id.
    id: u64,
    /// Who sent it.
    caller: Caller,
    /// When it arrived.
    received: Instant,
    /// Its tracing span.
    span: tracing::Span,
}

/// The error type bodies are read with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Response header that carries the request id, for matching a response to the daemon's logs.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The API's state: the executor behind it and what every handler needs.
#[derive(Debug)]
pub struct Api<E> {
    executor: Arc<E>,
    metrics: Metrics,
    limits: Limits,
    versions: BTreeMap<String, String>,
    next_request_id: AtomicU64,
    /// Set once the daemon stops: new requests are refused.
    draining: AtomicBool,
    /// Who may call and how much.
    policy: Policy,
    /// What every program is checked against before it runs (`--policy`).
    code_policy: CodePolicy,
}

/// A request the API refuses. Each variant maps to one status code in [`ApiError::status`].
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
    /// The request's files are more than a working directory may hold.
    #[error("{0}")]
    FilesOverCap(String),
    /// The program is over the limit.
    #[error("the code is {size} bytes; the limit is {limit} bytes")]
    CodeTooLarge {
        /// The program's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
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
    /// The caller is not on the allow lists.
    #[error(
        "this caller (uid {uid}, gid {gid}) may not use this daemon: it is not on its allow list \
         (--allow-uid, --allow-gid)"
    )]
    CallerNotAllowed {
        /// The caller's uid.
        uid: u32,
        /// Its gid.
        gid: u32,
    },
    /// The caller has as many executions in flight as one caller may.
    #[error(transparent)]
    OverQuota(#[from] OverQuota),
    /// The daemon is stopping and takes no new requests.
    #[error("the daemon is shutting down and takes no new requests; retry once it is back")]
    ShuttingDown,
    /// The executor did not run the job.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A fault in the daemon.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The status code and error kind of the answer. Exhaustive on purpose: a new variant must
    /// decide its status here.
    fn status(&self) -> (StatusCode, ErrorKind) {
        match self {
            ApiError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest),
            ApiError::PayloadTooLarge { .. }
            | ApiError::CodeTooLarge { .. }
            | ApiError::FilesOverCap(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorKind::PayloadTooLarge)
            }
            ApiError::BodyTimeout { .. } => {
                (StatusCode::REQUEST_TIMEOUT, ErrorKind::RequestTimeout)
            }
            ApiError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, ErrorKind::ShuttingDown),
            ApiError::CallerNotAllowed { .. } => {
                (StatusCode::FORBIDDEN, ErrorKind::CallerNotAllowed)
            }
            ApiError::OverQuota(_) | ApiError::Exec(ExecError::SessionQuota { .. }) => {
                (StatusCode::TOO_MANY_REQUESTS, ErrorKind::QuotaExceeded)
            }
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorKind::NotFound),
            ApiError::MethodNotAllowed { .. } => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorKind::MethodNotAllowed)
            }
            ApiError::Exec(ExecError::Overloaded { .. }) => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorKind::Overloaded)
            }
            ApiError::Exec(ExecError::NoSandboxAvailable { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::NoSandboxAvailable,
            ),
            ApiError::Exec(ExecError::LanguageNotServed(_)) => {
                (StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest)
            }
            ApiError::Exec(ExecError::SessionNotFound(_)) => {
                (StatusCode::NOT_FOUND, ErrorKind::SessionNotFound)
            }
            ApiError::Exec(
                ExecError::TooManySessions { .. } | ExecError::SessionMemoryFull { .. },
            ) => (StatusCode::TOO_MANY_REQUESTS, ErrorKind::TooManySessions),
            ApiError::Exec(ExecError::SessionBusy { .. } | ExecError::SessionSaving { .. }) => {
                (StatusCode::CONFLICT, ErrorKind::SessionBusy)
            }
            ApiError::Exec(ExecError::FilesOverCap(_)) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorKind::PayloadTooLarge)
            }
            ApiError::Exec(ExecError::PoolGone(_) | ExecError::Internal(_))
            | ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorKind::Internal),
        }
    }

    /// Seconds after which the same request may succeed, for the answers that say so.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Exec(
                ExecError::Overloaded { .. }
                | ExecError::NoSandboxAvailable { .. }
                | ExecError::SessionBusy { .. }
                | ExecError::SessionSaving { .. },
            )
            | ApiError::OverQuota(_)
            | ApiError::ShuttingDown => Some(1),
            ApiError::Exec(ExecError::SessionQuota { retry_after, .. }) => {
                Some(retry_after.as_secs_f64().ceil().max(1.0) as u64)
            }
            _ => None,
        }
    }

    fn into_response(self) -> Response<Full<Bytes>> {
        let (status, kind) = self.status();
        let retry = self.retry_after();
        // A body half read, or a daemon on its way out: this connection serves no more.
        let close = matches!(self, ApiError::BodyTimeout { .. } | ApiError::ShuttingDown);
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

impl<E: Executor> Api<E> {
    /// An API in front of `executor`. `versions` is reported by `/v1/health`.
    pub fn new(
        executor: Arc<E>,
        metrics: Metrics,
        limits: Limits,
        versions: BTreeMap<String, String>,
    ) -> Self {
        Api {
            executor,
            metrics,
            limits,
            versions,
            next_request_id: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            policy: Policy::open(),
            code_policy: CodePolicy::default(),
        }
    }

    /// The API with `policy` instead of the open one (anyone who can connect, no quotas, no
    /// audit log).
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The same API, checking every program against `policy` (narrowed by each request's own).
    pub fn with_code_policy(mut self, policy: CodePolicy) -> Self {
        self.code_policy = policy;
        self
    }

    /// The daemon's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// From now on, refuse new requests (`503 shutting_down`); health says the daemon is
    /// stopping and not ready.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Answers one request from `caller`. Never fails: every error becomes a JSON error
    /// response.
    pub async fn handle<B>(&self, request: Request<B>, caller: Caller) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("request", id, uid = caller.uid, method = %request.method(), path = %request.uri().path());
        let ctx = Ctx {
            id,
            caller,
            received: Instant::now(),
            span: span.clone(),
        };
        let result = match span.in_scope(|| self.admit(&request, ctx)) {
            Ok(ctx) => self.route(request, ctx).instrument(span.clone()).await,
            Err(refused) => Err(refused),
        };
        let mut response = result.unwrap_or_else(|err| {
            let (status, kind) = err.status();
            span.in_scope(|| warn!(status = status.as_u16(), %kind, "{err}"));
            self.metrics.record_rejection(kind.as_str());
            err.into_response().map(Either::Left)
        });
        response
            .headers_mut()
            .insert(REQUEST_ID_HEADER, HeaderValue::from(id));
        response
    }

    /// Lets the caller in if the allow lists do; a refusal is logged and audited.
    fn admit<B>(&self, request: &Request<B>, ctx: Ctx) -> Result<Ctx, ApiError> {
        if self.policy.access.allows(&ctx.caller) {
            return Ok(ctx);
        }
        self.policy.audit.denied(&crate::audit::DeniedRecord {
            request_id: ctx.id,
            caller: ctx.caller,
            method: request.method().as_str(),
            path: request.uri().path(),
        });
        Err(ApiError::CallerNotAllowed {
            uid: ctx.caller.uid,
            gid: ctx.caller.gid,
        })
    }

    /// The routing table: every path and method the API serves.
    async fn route<B>(&self, request: Request<B>, ctx: Ctx) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let whole = |response: Response<Full<Bytes>>| response.map(Either::Left);
        let path = request.uri().path().to_owned();
        let route = Route::parse(&path).ok_or_else(|| ApiError::NotFound(path.clone()))?;
        let owner = ctx.caller.uid;
        match (request.method().clone(), route) {
            (Method::POST, Route::Exec) => self.exec(request, ctx).await,
            (Method::GET, Route::Health(probe)) => Ok(whole(self.health(probe))),
            (Method::GET, Route::Metrics) => self.render_metrics().map(whole),
            (Method::POST, Route::Sessions) => self.create_session(request, &ctx).await.map(whole),
            (Method::GET, Route::Sessions) => Ok(whole(self.list_sessions(owner))),
            (Method::GET, Route::Session(id)) => self.get_session(owner, id).map(whole),
            (Method::DELETE, Route::Session(id)) => self.delete_session(id, &ctx).map(whole),
            (Method::POST, Route::SessionExec(id)) => self.session_exec(request, id, ctx).await,
            (Method::POST, Route::SessionFork(id)) => self.fork_session(id, &ctx).await.map(whole),
            (Method::GET, Route::SessionFiles(id)) => {
                self.list_session_files(owner, id).await.map(whole)
            }
            (Method::GET, Route::SessionFile(id, path)) => {
                self.get_session_file(owner, id, path).await.map(whole)
            }
            (method, route) => Err(ApiError::MethodNotAllowed {
                method,
                path: route.pattern(),
                allowed: route.allowed(),
            }),
        }
    }

    async fn exec<B>(&self, request: Request<B>, ctx: Ctx) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        if self.draining() {
            return Err(ApiError::ShuttingDown);
        }
        let accepts_lines = accepts_ndjson(request.headers());
        let exec: ExecRequest = self.read_json(request).await?;
        let program = Program {
            code: exec.code,
            timeout_ms: exec.timeout_ms,
            max_output_bytes: exec.max_output_bytes,
            policy: exec.policy.map(CodePolicy::from),
            files: self.files_of(exec.files)?,
        };
        self.check_program(&program, exec.language)?;
        let job = self.job(exec.language, program, &ctx);
        self.run(job, None, &ctx, exec.stream || accepts_lines)
            .await
    }

    /// Refuses a program over the size limit, or with a policy that is not valid for
    /// `language`.
    fn check_program(&self, program: &Program, language: Language) -> Result<(), ApiError> {
        let code = &program.code;
        if code.len() > self.limits.max_code_bytes {
            return Err(ApiError::CodeTooLarge {
                size: code.len(),
                limit: self.limits.max_code_bytes,
            });
        }
        if let Some(policy) = &program.policy {
            code_policy::validate(policy)
                .and_then(|()| code_policy::fits(policy, language))
                .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        }
        Ok(())
    }

    /// The job for `program` in `language`, with the limits granted.
    fn job(&self, language: Language, program: Program, ctx: &Ctx) -> Job {
        let timeout = self.limits.timeout_for(program.timeout_ms);
        Job {
            language,
            code: program.code,
            max_output_bytes: self.limits.output_for(program.max_output_bytes),
            policy: code_policy::effective(&self.code_policy, program.policy.as_ref(), language),
            output: None,
            files: program.files,
            file_limits: self.limits.files,
            timeout,
            deadline: ctx.received + timeout,
            span: ctx.span.clone(),
            caller: ctx.caller,
        }
    }

    /// Runs `job` within its caller's quota, writes its audit line, and answers with its
    /// outcome: whole, or with `stream`, its output as it is written first.
    async fn run(
        &self,
        mut job: Job,
        session: Option<(String, E::Session)>,
        ctx: &Ctx,
        stream: bool,
    ) -> Result<Response<Body>, ApiError> {
        let runner = Runner {
            executor: self.executor.clone(),
            metrics: self.metrics.clone(),
            audit: self.policy.audit.clone(),
            quota: self.policy.quota.clone(),
        };
        if !stream {
            let response = runner.run(job, session, ctx.clone()).await?;
            return Ok(json_response(StatusCode::OK, &response).map(Either::Left));
        }
        let (sink, chunks) = tokio::sync::mpsc::unbounded_channel();
        job.output = Some(sink);
        let finished = tokio::spawn(
            runner
                .run(job, session, ctx.clone())
                .instrument(ctx.span.clone()),
        );
        stream::answer(chunks, finished).await
    }

    /// Reads the body as a `T`.
    async fn read_json<T, B>(&self, request: Request<B>) -> Result<T, ApiError>
    where
        T: serde::de::DeserializeOwned,
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let body = self.read_body(request).await?;
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidRequest(e.to_string()))
    }

    /// Reads the whole body, refusing it as soon as it passes the limit.
    async fn read_body<B>(&self, request: Request<B>) -> Result<Bytes, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let limit = self.limits.max_body_bytes;
        let declared = request
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        let timeout = self.limits.body_read_timeout;
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
        let health = self.executor.health();
        let at_size = health.sandboxes.values().all(|c| c.total >= c.target);
        let draining = self.draining();
        let live = health.stuck_workers == 0;
        let ready = at_size && !draining;
        let status = if draining {
            "stopping"
        } else if !live {
            "stuck"
        } else if at_size {
            "ok"
        } else if health.warmed {
            "degraded"
        } else {
            "starting"
        };
        let body = HealthResponse {
            status: status.to_owned(),
            live,
            ready,
            hypervisor: health.hypervisor,
            versions: self.versions.clone(),
            sandboxes: wire::sandbox_counts(health.sandboxes),
            packages: health.packages,
            limits: ExecLimits {
                default_timeout_ms: millis(self.limits.default_timeout),
                max_timeout_ms: millis(self.limits.max_timeout),
                max_code_bytes: self.limits.max_code_bytes,
                max_output_bytes: self.limits.max_output_bytes,
                max_result_bytes: self.limits.max_result_bytes,
                memory_mib: health.memory_mib,
                max_files: self.limits.files.max_entries,
                max_file_bytes: self.limits.files.max_bytes,
            },
            sessions: wire::session_counts(health.sessions),
            session_limits: Some(wire::session_limits(&health.session_limits)),
            caller_limits: Some(CallerLimits {
                max_execs: self.policy.quota.limits().clone(),
                max_sessions: health.session_limits.max_per_caller,
                allow_list: self.policy.access.is_restricted(),
            }),
            audit: self.policy.audit.health(),
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
        let health = self.executor.health();
        let text = self
            .metrics
            .render(&health.sandboxes, &health.sessions)
            .map_err(|e| ApiError::Internal(format!("rendering metrics: {e}")))?;
        let mut response = Response::new(Full::new(Bytes::from(text)));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        Ok(response)
    }
}

/// How long a request waited before its program started, and how long the program ran, in
/// milliseconds to the microsecond. A refused request waited until its refusal, and ran for no
/// time.
#[derive(Debug, Clone, Copy)]
struct Times {
    queued_ms: f64,
    duration_ms: f64,
}

impl Times {
    fn of(received: Instant, ran: &Result<Outcome, ApiError>) -> Times {
        let (queued, duration) = match ran {
            Ok(outcome) => (
                outcome.started.saturating_duration_since(received),
                outcome.ran,
            ),
            Err(_) => (received.elapsed(), std::time::Duration::ZERO),
        };
        let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        Times {
            queued_ms: ms(queued),
            duration_ms: ms(duration),
        }
    }
}

/// The audit line of a job that `ran` (or was refused).
fn exec_record<'a>(
    ctx: &Ctx,
    language: Language,
    session: Option<&'a str>,
    code: &'a crate::audit::Code,
    ran: &'a Result<Outcome, ApiError>,
    times: Times,
) -> ExecRecord<'a> {
    let (status, error_kind, output_bytes, truncated) = match ran {
        Ok(outcome) => (
            outcome.status.as_str(),
            outcome.error.as_ref().map(|e| wire::error_kind(e.kind)),
            outcome.stdout.len() + outcome.stderr.len(),
            outcome.truncated,
        ),
        Err(refused) => ("rejected", Some(refused.status().1), 0, false),
    };
    ExecRecord {
        request_id: ctx.id,
        caller: ctx.caller,
        language,
        session,
        code,
        status,
        error_kind,
        duration_ms: times.duration_ms,
        queued_ms: times.queued_ms,
        output_bytes,
        truncated,
    }
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What running a job needs, owned: a streamed job ends in a task of its own, after its
/// handler has answered.
struct Runner<E> {
    executor: Arc<E>,
    metrics: Metrics,
    audit: Arc<crate::audit::AuditLog>,
    quota: Arc<crate::caller::ExecQuota>,
}

impl<E: Executor> Runner<E> {
    /// Runs `job` within its caller's quota and writes its audit line and metrics.
    async fn run(
        self,
        job: Job,
        session: Option<(String, E::Session)>,
        ctx: Ctx,
    ) -> Result<ExecResponse, ApiError> {
        let audit = &self.audit;
        let code = audit.is_on().then(|| audit.code(&job.code));
        let language = job.language;
        let (session, handle) = session.unzip();
        let ran = match self.quota.admit(ctx.caller.uid, language) {
            Ok(_slot) => {
                let _in_flight = self.metrics.in_flight();
                let ran = match handle {
                    None => self.executor.exec(job).await,
                    Some(handle) => self.executor.exec_in_session(handle, job).await,
                };
                ran.map_err(ApiError::from)
            }
            Err(over) => Err(ApiError::from(over)),
        };
        let elapsed = ctx.received.elapsed();
        let times = Times::of(ctx.received, &ran);
        if let Some(code) = &code {
            audit.exec(&exec_record(
                &ctx,
                language,
                session.as_deref(),
                code,
                &ran,
                times,
            ));
        }
        let outcome = ran?;
        self.metrics
            .record_execution(language, outcome.status, elapsed);
        let _entered = ctx.span.enter();
        info!(
            %language,
            status = outcome.status.as_str(),
            queued_ms = times.queued_ms,
            duration_ms = times.duration_ms,
            "executed"
        );
        Ok(wire::response(outcome, times.queued_ms, times.duration_ms))
    }
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

#[cfg(test)]
mod tests;
