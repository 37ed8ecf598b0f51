//! Streamed execs (`"stream": true` or `Accept: application/x-ndjson`) against stub executors.

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyperlightd_api::{ErrorResponse, ExecEvent, NDJSON};

use super::*;
use crate::job::{OutputChunk, Stream};

/// Writes each `(stream, text)` of `writes` to the job's output sink, then answers with all
/// of it as the outcome's stdout and stderr.
fn writer(writes: &'static [(Stream, &'static str)]) -> StubExecutor {
    StubExecutor::new(move |job| {
        let sink = job.output.as_ref();
        for (stream, text) in writes {
            if let Some(sink) = sink {
                let _ = sink.send(OutputChunk::Text {
                    stream: *stream,
                    text: text.to_string(),
                });
            }
        }
        let of = |s: Stream| -> String {
            writes
                .iter()
                .filter(|(w, _)| *w == s)
                .map(|(_, t)| *t)
                .collect()
        };
        let mut outcome = ok_outcome(&of(Stream::Stdout), serde_json::json!(7));
        outcome.stderr = of(Stream::Stderr);
        Ok(outcome)
    })
}

fn exec_request(body: &str, accept: Option<&str>) -> Request<Full<Bytes>> {
    let mut builder = Request::builder().method(Method::POST).uri(paths::EXEC);
    if let Some(accept) = accept {
        builder = builder.header(ACCEPT, accept);
    }
    builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// The answer's status, content type and lines, each parsed as an event.
async fn events(
    api: &Api<impl Executor>,
    req: Request<Full<Bytes>>,
) -> (StatusCode, String, Vec<ExecEvent>) {
    let response = api.handle_from_test_caller(req).await;
    let status = response.status();
    let kind = response.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let lines = match kind.as_str() {
        NDJSON => text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect(),
        _ => Vec::new(),
    };
    (status, kind, lines)
}

#[tokio::test]
async fn output_comes_line_by_line_in_order_then_the_response() {
    let (api, _) = api(writer(&[
        (Stream::Stdout, "one\n"),
        (Stream::Stderr, "two\n"),
        (Stream::Stdout, "three\n"),
    ]));
    let body = r#"{"language":"javascript","code":"x","stream":true}"#;
    for accept in [None, Some("application/json")] {
        let (status, kind, lines) = events(&api, exec_request(body, accept)).await;
        assert_eq!((status, kind.as_str()), (StatusCode::OK, NDJSON));
        let text = |t: &str| t.to_owned();
        assert_eq!(
            lines[0],
            ExecEvent::Stdout {
                text: text("one\n")
            }
        );
        assert_eq!(
            lines[1],
            ExecEvent::Stderr {
                text: text("two\n")
            }
        );
        assert_eq!(
            lines[2],
            ExecEvent::Stdout {
                text: text("three\n")
            }
        );
        let ExecEvent::Result(response) = &lines[3] else {
            panic!("the last line is the response: {lines:?}");
        };
        assert_eq!(
            response.stdout, "one\nthree\n",
            "the response has the whole output"
        );
        assert_eq!(response.stderr, "two\n");
        assert_eq!(response.result, serde_json::json!(7));
        assert_eq!(lines.len(), 4);
    }
}

#[tokio::test]
async fn the_accept_header_asks_for_a_stream_too_and_no_output_is_one_line() {
    let (api, _) = api(writer(&[]));
    let body = r#"{"language":"javascript","code":"x"}"#;
    let accept = Some("text/plain, application/x-ndjson; q=0.9");
    let (status, kind, lines) = events(&api, exec_request(body, accept)).await;
    assert_eq!((status, kind.as_str()), (StatusCode::OK, NDJSON));
    assert!(
        matches!(lines.as_slice(), [ExecEvent::Result(_)]),
        "{lines:?}"
    );
    let (_, kind, _) = events(&api, exec_request(body, None)).await;
    assert_eq!(kind, "application/json", "without either, the whole answer");
}

#[tokio::test]
async fn a_job_refused_before_it_runs_keeps_its_status() {
    let (api, _) = api(StubExecutor::new(|_| {
        Err(ExecError::Overloaded {
            language: Language::Javascript,
            queued: 4,
        })
    }));
    let body = r#"{"language":"javascript","code":"x","stream":true}"#;
    let (status, kind, _) = events(&api, exec_request(body, None)).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "application/json")
    );
}

/// Sends `first` (a line, or the program's start), then waits until its caller goes away
/// (noted in `gone`), at most 30 s.
struct Held {
    stub: StubExecutor,
    gone: Arc<AtomicBool>,
    first: fn() -> OutputChunk,
}

fn started_line() -> OutputChunk {
    OutputChunk::Text {
        stream: Stream::Stdout,
        text: "started\n".into(),
    }
}

impl Executor for Held {
    type Session = std::convert::Infallible;

    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        let sink = job.output.clone().unwrap();
        sink.send((self.first)()).unwrap();
        if tokio::time::timeout(Duration::from_secs(30), sink.closed())
            .await
            .is_ok()
        {
            self.gone.store(true, AtomicOrdering::SeqCst);
        }
        Ok(ok_outcome("started\n", serde_json::Value::Null))
    }

    fn health(&self) -> ExecutorHealth {
        self.stub.health()
    }
}

/// An API in front of [`Held`] sending `first`, and where it notes its caller gone.
fn held(first: fn() -> OutputChunk) -> (Api<Held>, Arc<AtomicBool>) {
    let gone = Arc::new(AtomicBool::new(false));
    let executor = Arc::new(Held {
        stub: writer(&[]),
        gone: gone.clone(),
        first,
    });
    let api = Api::of(Service::new(
        executor,
        Metrics::new().unwrap(),
        limits(),
        BTreeMap::new(),
    ));
    (api, gone)
}

async fn until_gone(gone: &AtomicBool) {
    for _ in 0..100 {
        if gone.load(AtomicOrdering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the job's output sink was not closed after its client went away");
}

#[tokio::test]
async fn a_client_that_goes_away_mid_stream_closes_the_job_s_output() {
    let (api, gone) = held(started_line);
    let body = r#"{"language":"javascript","code":"x","stream":true}"#;
    let response = api.handle_from_test_caller(exec_request(body, None)).await;
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(
        &first[..],
        b"{\"type\":\"stdout\",\"text\":\"started\\n\"}\n"
    );
    drop(body);
    until_gone(&gone).await;
}

#[tokio::test]
async fn the_answer_begins_when_the_program_starts_though_it_writes_nothing() {
    let (api, gone) = held(|| OutputChunk::Running);
    let body = r#"{"language":"javascript","code":"x","stream":true}"#;
    // The job writes nothing and holds until its client goes: only an answer begun at its
    // start arrives before then.
    let begun = tokio::time::timeout(
        Duration::from_secs(10),
        api.handle_from_test_caller(exec_request(body, None)),
    )
    .await
    .expect("the answer's head arrives once the program starts");
    assert_eq!(
        (begun.status(), &begun.headers()[CONTENT_TYPE]),
        (StatusCode::OK, &HeaderValue::from_static(NDJSON))
    );
    drop(begun);
    until_gone(&gone).await;
}

/// Fails in a way no executor should: it panics, after starting the program (writing a line)
/// or before.
struct Panics {
    started: bool,
    stub: StubExecutor,
}

impl Panics {
    fn api(started: bool) -> Api<Panics> {
        Api::of(Service::new(
            Arc::new(Panics {
                started,
                stub: writer(&[]),
            }),
            Metrics::new().unwrap(),
            limits(),
            BTreeMap::new(),
        ))
    }
}

impl Executor for Panics {
    type Session = std::convert::Infallible;

    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        if self.started {
            job.output.as_ref().unwrap().send(started_line()).unwrap();
        }
        panic!("the executor broke");
    }

    fn health(&self) -> ExecutorHealth {
        self.stub.health()
    }
}

/// The daemon's metrics text.
async fn metrics_of(api: &Api<impl Executor>) -> String {
    let metrics = api
        .handle_from_test_caller(request(Method::GET, paths::METRICS, ""))
        .await
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    String::from_utf8(metrics.to_vec()).unwrap()
}

/// That an executor's panic was answered as an internal error and left nothing in flight.
async fn internal(api: &Api<Panics>, error: &hyperlightd_api::ErrorBody) {
    assert_eq!(
        error.kind,
        hyperlightd_api::ErrorKind::Internal,
        "{error:?}"
    );
    assert!(
        error
            .message
            .contains("the executor failed: the executor broke"),
        "{error:?}"
    );
    let metrics = metrics_of(api).await;
    assert!(
        metrics.contains("\nhyperlightd_executions_in_flight 0\n"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_job_that_panics_after_its_start_ends_its_stream_with_an_internal_error() {
    let api = Panics::api(true);
    let body = r#"{"language":"javascript","code":"x","stream":true}"#;
    for _ in 0..2 {
        // Answered each time, the second as the first: nothing of the first stays held.
        let (status, _, lines) = events(&api, exec_request(body, None)).await;
        assert_eq!(status, StatusCode::OK);
        let [ExecEvent::Stdout { .. }, ExecEvent::Error { error }] = &lines[..] else {
            panic!("its output, then why it ended: {lines:?}");
        };
        internal(&api, error).await;
    }
}

#[tokio::test]
async fn a_job_that_panics_before_its_start_is_refused_with_an_internal_error() {
    let api = Panics::api(false);
    let streamed = r#"{"language":"javascript","code":"x","stream":true}"#;
    let whole = r#"{"language":"javascript","code":"x"}"#;
    for body in [streamed, whole, streamed] {
        // A refusal with its own status, streamed or not, and the same the second time.
        let (status, answer) = call(&api, exec_request(body, None)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        let error: ErrorResponse = serde_json::from_value(answer).unwrap();
        internal(&api, &error.error).await;
    }
}
