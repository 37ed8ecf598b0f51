//! Unit tests of the HTTP layer against a stub executor: no KVM, no socket.

mod code_policy;
mod files;
mod policy;
mod sessions;
mod stream;
mod traces;

use std::sync::Mutex;
use std::time::Duration;

use hyperlightd_api::{ExecResponse, ExecStatus, HealthResponse, Language, paths};

use hyper::header::LOCATION;

use std::collections::BTreeMap;

use super::*;
use crate::executor::testing::{StubExecutor, ok_outcome, stub_sessions};
use crate::job::{ExecutorHealth, Job, Outcome};
use crate::service::Limits;

fn limits() -> Limits {
    Limits {
        default_timeout: Duration::from_millis(5_000),
        max_timeout: Duration::from_millis(10_000),
        max_body_bytes: 1024,
        max_code_bytes: 512,
        max_output_bytes: 1024,
        max_result_bytes: 1024,
        body_read_timeout: Duration::from_millis(5_000),
        files: crate::job::FileLimits {
            max_entries: 4,
            max_bytes: 64,
        },
        tools: crate::service::ToolGrants {
            default_call_timeout: Duration::from_millis(1_000),
            max: crate::job::tools::ToolLimits {
                call_timeout: Duration::from_millis(2_000),
                max_calls: 3,
                max_bytes: 100,
                wall_clock: Duration::from_secs(10),
            },
        },
    }
}

fn api(executor: StubExecutor) -> (Api<StubExecutor>, Arc<StubExecutor>) {
    let (service, executor) = service(executor);
    (Api::of(service), executor)
}

/// The service the tests' API is in front of: open to all, no code policy.
fn service(executor: StubExecutor) -> (Service<StubExecutor>, Arc<StubExecutor>) {
    let executor = Arc::new(executor);
    let service = Service::new(
        executor.clone(),
        Metrics::new().unwrap(),
        limits(),
        BTreeMap::from([("hyperlightd".to_owned(), "test".to_owned())]),
    );
    (service, executor)
}

/// The caller of the tests' requests.
const CALLER: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: Some(4242),
    pod: crate::job::PodOf::Unread,
    on_behalf_of: None,
};

impl<E: Executor> Api<E> {
    /// Answers `request` as from [`CALLER`].
    async fn handle_from_test_caller<B>(&self, request: Request<B>) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        self.handle(request, CALLER).await
    }
}

fn request(method: Method, path: &str, body: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

async fn call(
    api: &Api<impl Executor>,
    req: Request<Full<Bytes>>,
) -> (StatusCode, serde_json::Value) {
    let response = api.handle_from_test_caller(req).await;
    let status = response.status();
    assert!(response.headers().contains_key(REQUEST_ID_HEADER));
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, json)
}

fn echo_executor() -> StubExecutor {
    StubExecutor::new(|job| Ok(ok_outcome(&job.code, serde_json::json!(42))))
}

#[tokio::test]
async fn exec_with_valid_body_returns_outcome_as_200() {
    let (api, executor) = api(echo_executor());
    let (status, body) = call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":"console.log(1)"}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let response: ExecResponse = serde_json::from_value(body).unwrap();
    assert_eq!(response.status, ExecStatus::Ok);
    assert_eq!(response.stdout, "console.log(1)");
    assert_eq!(response.result, serde_json::json!(42));
    assert_eq!(executor.seen().len(), 1);
}

#[tokio::test]
async fn exec_without_timeout_gets_the_default_and_large_timeout_is_capped() {
    let (api, executor) = api(echo_executor());
    call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":""}"#,
        ),
    )
    .await;
    call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":"","timeout_ms":999999}"#,
        ),
    )
    .await;
    let seen = executor.seen();
    assert!(seen[0].2 <= Duration::from_millis(5_000) && seen[0].2 > Duration::from_millis(4_000));
    assert!(seen[1].2 <= Duration::from_millis(10_000) && seen[1].2 > Duration::from_millis(9_000));
}

#[tokio::test]
async fn exec_with_guest_error_is_still_200() {
    let (api, _) = api(StubExecutor::new(|_| {
        Ok(Outcome {
            status: crate::job::Status::Error,
            stdout: String::new(),
            stderr: "stack".into(),
            truncated: false,
            result: serde_json::Value::Null,
            display: Vec::new(),
            error: Some(crate::job::Failure::new(
                crate::job::FailureKind::Exception,
                "Error: boom",
            )),
            session: None,
            files: Default::default(),
            started: std::time::Instant::now(),
            ran: Duration::from_millis(3),
        })
    }));
    let (status, body) = call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":"throw 1"}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "error");
    assert_eq!(body["error"]["kind"], "exception");
}

#[tokio::test]
async fn malformed_json_is_400_and_executor_is_not_called() {
    let (api, executor) = api(echo_executor());
    let (status, body) = call(&api, request(Method::POST, paths::EXEC, "{not json")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["kind"], "invalid_request");
    assert!(executor.seen().is_empty());
}

#[tokio::test]
async fn missing_code_field_is_400_naming_the_field() {
    let (api, _) = api(echo_executor());
    let (status, body) = call(
        &api,
        request(Method::POST, paths::EXEC, r#"{"language":"javascript"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("missing field `code`"), "{message}");
}

#[tokio::test]
async fn unknown_language_is_400_naming_the_known_ones() {
    let (api, _) = api(echo_executor());
    let (status, body) = call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"cobol","code":""}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cobol") && message.contains("javascript"),
        "{message}"
    );
}

#[tokio::test]
async fn body_over_limit_is_413() {
    let (api, executor) = api(echo_executor());
    let code = "x".repeat(2048);
    let body = format!(r#"{{"language":"javascript","code":"{code}"}}"#);
    let (status, json) = call(&api, request(Method::POST, paths::EXEC, &body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(json["error"]["kind"], "payload_too_large");
    assert!(executor.seen().is_empty());
}

#[tokio::test]
async fn body_over_limit_without_content_length_is_413() {
    let (api, _) = api(echo_executor());
    // A streamed body of unknown length: the limit must hold while reading, not only on the
    // declared Content-Length.
    let req = Request::builder()
        .method(Method::POST)
        .uri(paths::EXEC)
        .body(ChunkedBody { chunks: 8 })
        .unwrap();
    let response = api.handle_from_test_caller(req).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

/// A body of `chunks` 512-byte chunks that declares no length.
struct ChunkedBody {
    chunks: usize,
}

impl hyper::body::Body for ChunkedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if self.chunks == 0 {
            return std::task::Poll::Ready(None);
        }
        self.chunks -= 1;
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(vec![
            b' ';
            512
        ])))))
    }
}

/// A body that sends nothing and never ends: a client that stopped after the headers.
struct StalledBody;

impl hyper::body::Body for StalledBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

#[tokio::test(start_paused = true)]
async fn body_that_does_not_arrive_in_time_is_408_and_closes_the_connection() {
    let (api, executor) = api(echo_executor());
    let req = Request::builder()
        .method(Method::POST)
        .uri(paths::EXEC)
        .body(StalledBody)
        .unwrap();
    let response = api.handle_from_test_caller(req).await;
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(response.headers().get(CONNECTION).unwrap(), "close");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["kind"], "request_timeout");
    assert!(executor.seen().is_empty());
}

#[tokio::test]
async fn while_draining_exec_is_503_shutting_down_and_health_is_not_ready() {
    let (api, executor) = api(echo_executor());
    api.drain();
    let response = api
        .handle_from_test_caller(request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":"1"}"#,
        ))
        .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
    assert_eq!(response.headers().get(CONNECTION).unwrap(), "close");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["kind"], "shutting_down");
    assert!(executor.seen().is_empty());
    // Refused before its body is read: whatever the body, the answer is the same.
    for (path, body) in [(paths::EXEC, "{not json"), (paths::SESSIONS, "")] {
        let (status, answer) = call(&api, request(Method::POST, path, body)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {answer}");
    }

    let (status, health) = call(&api, request(Method::GET, paths::HEALTH_READY, "")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health["status"], "stopping");
    let (status, _) = call(&api, request(Method::GET, paths::HEALTH_LIVE, "")).await;
    assert_eq!(status, StatusCode::OK, "a draining daemon is alive");
}

#[tokio::test]
async fn no_sandbox_available_is_503_with_retry_after() {
    let (api, _) = api(StubExecutor::new(|job| {
        Err(ExecError::NoSandboxAvailable {
            language: job.language,
            timeout: job.timeout,
        })
    }));
    let response = api
        .handle_from_test_caller(request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":"","timeout_ms":250}"#,
        ))
        .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["kind"], "no_sandbox_available");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("250 ms"), "{message}");
}

#[tokio::test]
async fn overloaded_executor_is_503_with_retry_after() {
    let (api, _) = api(StubExecutor::new(|job| {
        Err(ExecError::Overloaded {
            language: job.language,
            queued: 64,
        })
    }));
    let response = api
        .handle_from_test_caller(request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":""}"#,
        ))
        .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
}

#[tokio::test]
async fn unknown_path_is_404_and_wrong_method_is_405() {
    let (api, _) = api(echo_executor());
    let (status, body) = call(&api, request(Method::GET, "/v2/nothing", "")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["kind"], "not_found");
    let (status, body) = call(&api, request(Method::GET, paths::EXEC, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["error"]["kind"], "method_not_allowed");
}

#[tokio::test]
async fn bad_request_then_good_request_both_answered() {
    let (api, _) = api(echo_executor());
    let (status, _) = call(&api, request(Method::POST, paths::EXEC, "[]")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"js","code":"ok"}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["stdout"], "ok");
}

#[tokio::test]
async fn health_reports_executor_state_and_versions() {
    let (api, _) = api(echo_executor());
    let (status, body) = call(&api, request(Method::GET, paths::HEALTH, "")).await;
    assert_eq!(status, StatusCode::OK);
    let health: HealthResponse = serde_json::from_value(body).unwrap();
    assert_eq!(health.status, "ok");
    assert!(health.ready);
    assert_eq!(health.hypervisor, "stub");
    assert_eq!(health.sandboxes[&Language::Javascript].total, 2);
    assert_eq!(health.versions["hyperlightd"], "test");
    assert_eq!(health.packages[&Language::Python]["sympy"], "1.14.0");
    assert!(
        !health.packages.contains_key(&Language::Javascript),
        "a language without packages is absent: {:?}",
        health.packages
    );
    let python = &health.runtimes[&Language::Python];
    assert_eq!(
        (python.name.as_str(), python.version.as_deref()),
        ("native", Some("3.11.2"))
    );
    let javascript = &health.runtimes[&Language::Javascript];
    assert_eq!(
        (javascript.name.as_str(), javascript.version.as_deref()),
        ("quickjs", None)
    );
    let limits = health.limits;
    assert_eq!(
        (limits.default_timeout_ms, limits.max_timeout_ms),
        (5_000, 10_000)
    );
    assert_eq!(
        (limits.max_code_bytes, limits.max_output_bytes),
        (512, 1024)
    );
    assert_eq!(limits.memory_mib[&Language::Javascript], 64);
}

#[tokio::test]
async fn metrics_count_executions_and_rejections() {
    let (api, _) = api(echo_executor());
    call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"javascript","code":""}"#,
        ),
    )
    .await;
    call(&api, request(Method::POST, paths::EXEC, "nope")).await;
    let response = api
        .handle_from_test_caller(request(Method::GET, paths::METRICS, ""))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains(r#"hyperlightd_executions_total{language="javascript",status="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"hyperlightd_requests_rejected_total{reason="invalid_request"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn code_over_limit_is_413_naming_the_limit() {
    let (api, executor) = api(echo_executor());
    let body = serde_json::json!({"language": "javascript", "code": "x".repeat(600)}).to_string();
    let (status, json) = call(&api, request(Method::POST, paths::EXEC, &body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(json["error"]["kind"], "payload_too_large");
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("600") && message.contains("512"),
        "{message}"
    );
    assert!(executor.seen().is_empty());
}

#[tokio::test]
async fn output_cap_is_passed_to_the_executor_within_the_maximum() {
    let caps = Arc::new(Mutex::new(Vec::new()));
    let seen = caps.clone();
    let (api, _) = api(StubExecutor::new(move |job| {
        seen.lock().unwrap().push(job.max_output_bytes);
        Ok(ok_outcome("", serde_json::Value::Null))
    }));
    for body in [
        r#"{"language":"javascript","code":""}"#,
        r#"{"language":"javascript","code":"","max_output_bytes":10}"#,
        r#"{"language":"javascript","code":"","max_output_bytes":99999}"#,
    ] {
        call(&api, request(Method::POST, paths::EXEC, body)).await;
    }
    assert_eq!(*caps.lock().unwrap(), vec![1024, 10, 1024]);
}

/// An executor whose pools are below their size.
struct WarmingExecutor {
    warmed: bool,
    stuck_workers: usize,
}

impl WarmingExecutor {
    fn new(warmed: bool, stuck_workers: usize) -> Self {
        WarmingExecutor {
            warmed,
            stuck_workers,
        }
    }
}

impl Executor for WarmingExecutor {
    type Session = std::convert::Infallible;

    async fn exec(&self, _: Job) -> Result<Outcome, ExecError> {
        Err(ExecError::PoolGone(Language::Javascript))
    }

    fn health(&self) -> ExecutorHealth {
        ExecutorHealth {
            hypervisor: "stub".into(),
            sandboxes: BTreeMap::from([(
                Language::Javascript,
                crate::job::PoolCounts {
                    ready: 1,
                    total: 1,
                    target: 3,
                },
            )]),
            warmed: self.warmed,
            stuck_workers: self.stuck_workers,
            runtimes: BTreeMap::new(),
            memory_mib: BTreeMap::new(),
            sessions: BTreeMap::new(),
            session_limits: *stub_sessions(3).settings(),
            durable: None,
        }
    }
}

#[tokio::test]
async fn health_is_not_ready_while_pools_are_below_their_size() {
    for (warmed, status) in [(false, "starting"), (true, "degraded")] {
        let api = Api::of(Service::new(
            Arc::new(WarmingExecutor::new(warmed, 0)),
            Metrics::new().unwrap(),
            limits(),
            BTreeMap::new(),
        ));
        let response = api
            .handle_from_test_caller(request(Method::GET, paths::HEALTH, ""))
            .await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "health answers while not ready"
        );
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let health: HealthResponse = serde_json::from_slice(&bytes).unwrap();
        assert!(!health.ready);
        assert_eq!(health.status, status);
    }
}

#[tokio::test]
async fn readiness_and_liveness_answer_different_questions() {
    let probe = |warmed, stuck_workers, path| async move {
        let api = Api::of(Service::new(
            Arc::new(WarmingExecutor::new(warmed, stuck_workers)),
            Metrics::new().unwrap(),
            limits(),
            BTreeMap::new(),
        ));
        let response = api
            .handle_from_test_caller(request(Method::GET, path, ""))
            .await;
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let health: HealthResponse = serde_json::from_slice(&bytes).unwrap();
        (status, health)
    };
    // Warming up: alive, not ready. A supervisor must not kill it.
    let (status, health) = probe(false, 0, paths::HEALTH_LIVE).await;
    assert_eq!(status, StatusCode::OK);
    assert!(health.live);
    let (status, _) = probe(false, 0, paths::HEALTH_READY).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // A worker stuck in the hypervisor: not alive. A supervisor restarts it.
    let (status, health) = probe(true, 1, paths::HEALTH_LIVE).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!health.live);
    assert_eq!(health.status, "stuck");
    // The full health answers 200 whatever the state, for people and dashboards.
    let (status, _) = probe(true, 1, paths::HEALTH).await;
    assert_eq!(status, StatusCode::OK);
}

/// The OpenAPI document (api/openapi.json) lists, for `POST /v1/exec` and for any path, which
/// status carries which error kinds; every refusal the daemon can make must be there.
#[test]
fn every_refusal_is_where_the_openapi_document_says() {
    use crate::job::tools::AnswerError;
    use crate::service::AnswerRefused;
    use hyperlightd_api::openapi::{
        ANY_PATH_REJECTIONS, EXEC_REJECTIONS, SESSION_REJECTIONS, TOOL_RESULT_REJECTIONS,
    };
    let every = [
        ApiError::InvalidRequest("x".into()),
        ApiError::PayloadTooLarge { limit: 1 },
        ApiError::BodyTimeout {
            limit: Duration::from_secs(1),
        },
        ApiError::from(Refusal::CodeTooLarge { size: 2, limit: 1 }),
        ApiError::from(Refusal::InvalidRequest("x".into())),
        ApiError::from(Refusal::FilesOverCap("x".into())),
        ApiError::from(ExecError::FilesOverCap("x".into())),
        ApiError::NotFound("/x".into()),
        ApiError::MethodNotAllowed {
            method: Method::PUT,
            path: paths::EXEC,
            allowed: "POST",
        },
        ApiError::from(Refusal::ShuttingDown),
        ApiError::from(ExecError::Overloaded {
            language: Language::Python,
            queued: 1,
        }),
        ApiError::from(ExecError::NoSandboxAvailable {
            language: Language::Python,
            timeout: Duration::from_secs(1),
        }),
        ApiError::from(ExecError::LanguageNotServed(Language::Python)),
        ApiError::from(ExecError::PoolGone(Language::Python)),
        ApiError::from(ExecError::SessionNotFound("x".into())),
        ApiError::from(ExecError::TooManySessions { limit: 1 }),
        ApiError::from(ExecError::SessionMemoryFull { held: 2, budget: 1 }),
        ApiError::from(ExecError::SessionBusy {
            timeout: Duration::from_secs(1),
        }),
        ApiError::from(ExecError::SessionSaving {
            waited: Duration::from_secs(60),
        }),
        ApiError::from(ExecError::Internal("x".into())),
        ApiError::from(ExecError::SessionQuota {
            caller: crate::job::Principal::Uid(1),
            limit: 1,
            retry_after: Duration::from_secs(1),
        }),
        ApiError::from(Refusal::CallerNotAllowed { uid: 1, gid: 1 }),
        ApiError::from(Refusal::CallerUnplaced {
            uid: 1,
            why: "x".into(),
        }),
        ApiError::from(Refusal::OverQuota(crate::caller::OverQuota {
            caller: crate::job::Principal::Uid(1),
            language: Language::Python,
            limit: 1,
        })),
        ApiError::Internal("x".into()),
        ApiError::from(Refusal::from(AnswerRefused::NotFound("x".into()))),
        ApiError::from(Refusal::from(AnswerRefused::Ended("x".into()))),
        ApiError::from(Refusal::from(AnswerRefused::Call(
            AnswerError::UnknownCall("c".into()),
        ))),
        ApiError::from(Refusal::from(AnswerRefused::Call(
            AnswerError::AlreadyAnswered("c".into()),
        ))),
        ApiError::from(Refusal::from(AnswerRefused::Call(AnswerError::Ended))),
        ApiError::from(Refusal::from(AnswerRefused::Call(AnswerError::TooLarge {
            bytes: 2,
            limit: 1,
        }))),
        ApiError::from(Refusal::from(crate::packages::Refusal::Off)),
        ApiError::from(Refusal::from(crate::packages::Refusal::Index("x".into()))),
        ApiError::from(Refusal::from(crate::packages::Refusal::Invalid("x".into()))),
    ];
    for error in every {
        let (status, kind) = error.status();
        let documented = EXEC_REJECTIONS
            .iter()
            .chain(ANY_PATH_REJECTIONS)
            .chain(SESSION_REJECTIONS)
            .chain(TOOL_RESULT_REJECTIONS)
            .any(|r| r.status == status.as_u16() && r.kinds.contains(&kind));
        assert!(
            documented,
            "{error:?} answers {status} {kind}, which api/src/openapi.rs does not list"
        );
    }
}
