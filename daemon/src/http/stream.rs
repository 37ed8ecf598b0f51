//! A streamed exec's answer (`"stream": true`, or `Accept: application/x-ndjson`): the
//! program's output as newline-delimited JSON [`ExecEvent`]s as it is written, then the
//! response `POST /v1/exec` would have given, as the last line.
//!
//! The answer begins when the program starts in its sandbox (`OutputChunk::Running`), or at its
//! first output or its end, whichever comes first: a job refused before it ran (quota, a full
//! queue) is answered with its own status, as without streaming, and a client's deadline for
//! the answer's head counts from the program's start, not from its first output. Once it has
//! begun, a client that goes away (its body dropped) closes the job's output sink, and the
//! watchdog stops the program.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::{Body as HttpBody, Frame};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use hyperlightd_api::{ErrorBody, ExecEvent, ExecResponse, NDJSON};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::ApiError;
use crate::job::OutputChunk;
use crate::service::wire;

/// Every answer's body: whole, or a stream of lines.
pub type Body = Either<Full<Bytes>, Lines>;

/// Lines the body holds before the forwarder waits for the client to take them.
const BUFFERED_LINES: usize = 16;

/// A response body fed line by line; its sender learns when the client has gone.
#[derive(Debug)]
pub struct Lines(mpsc::Receiver<Bytes>);

impl HttpBody for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(Frame::data(l))))
    }
}

/// A job's outcome, from the task that runs it.
pub(super) type Finished = JoinHandle<Result<ExecResponse, ApiError>>;

/// The answer to a streamed job whose output arrives on `chunks` and whose end is `finished`.
pub(super) async fn answer(
    mut chunks: mpsc::UnboundedReceiver<OutputChunk>,
    mut finished: Finished,
) -> Result<Response<Body>, ApiError> {
    let first = tokio::select! {
        biased;
        Some(chunk) = chunks.recv() => chunk,
        joined = &mut finished => {
            // Written before the job ended, so all in the channel now.
            let mut lines: Vec<u8> = Vec::new();
            while let Ok(chunk) = chunks.try_recv() {
                lines.extend(line_of(chunk).unwrap_or_default());
            }
            let response = joined_result(joined)?;
            lines.extend(line(&ExecEvent::Result(response)));
            return Ok(ndjson(Either::Left(Full::new(Bytes::from(lines)))));
        }
    };
    let (lines, body) = mpsc::channel(BUFFERED_LINES);
    tokio::spawn(forward(first, chunks, finished, lines));
    Ok(ndjson(Either::Right(Lines(body))))
}

/// Sends each chunk as a line, then the outcome; stops the program if the client goes away.
async fn forward(
    first: OutputChunk,
    mut chunks: mpsc::UnboundedReceiver<OutputChunk>,
    mut finished: Finished,
    lines: mpsc::Sender<Bytes>,
) {
    let mut next = Some(first);
    loop {
        if let Some(line) = next.take().and_then(line_of)
            && lines.send(line).await.is_err()
        {
            break;
        }
        tokio::select! {
            biased;
            () = lines.closed() => break,
            Some(chunk) = chunks.recv() => next = Some(chunk),
            joined = &mut finished => {
                let mut rest = Vec::new();
                while let Ok(chunk) = chunks.try_recv() {
                    rest.extend(line_of(chunk).unwrap_or_default());
                }
                let last = match joined_result(joined) {
                    Ok(response) => ExecEvent::Result(response),
                    Err(error) => ExecEvent::Error {
                        error: ErrorBody::new(error.status().1, error.to_string()),
                    },
                };
                rest.extend(line(&last));
                let _ = lines.send(Bytes::from(rest)).await;
                return;
            }
        }
    }
    // The client went away: closing the job's sink stops the program; the job still ends,
    // with its audit line and metrics, in its own task.
    drop(chunks);
}

fn joined_result(
    joined: Result<Result<ExecResponse, ApiError>, tokio::task::JoinError>,
) -> Result<ExecResponse, ApiError> {
    joined.unwrap_or_else(|e| Err(ApiError::Internal(format!("the job's task failed: {e}"))))
}

/// A chunk's line of the answer; none for the program's start, which only begins it.
fn line_of(chunk: OutputChunk) -> Option<Bytes> {
    wire::exec_event(chunk).map(|event| line(&event))
}

/// `event` as one line of JSON.
fn line(event: &ExecEvent) -> Bytes {
    // Serializing our own wire types cannot fail: they hold strings, numbers and JSON values.
    let mut bytes = serde_json::to_vec(event).unwrap_or_else(|e| {
        format!(r#"{{"type":"error","error":{{"kind":"internal","message":"{e}"}}}}"#).into_bytes()
    });
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn ndjson(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    response
}
