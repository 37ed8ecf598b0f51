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
use hyperlightd_api::{ExecEvent, NDJSON};

use crate::service::Running;

/// Every answer's body: whole, or a stream of lines.
pub type Body = Either<Full<Bytes>, Lines>;

/// A streamed answer's body: a running job's events, a line each, as they come. Dropping it
/// drops the events, which stops the program.
#[derive(Debug)]
pub struct Lines(Running);

impl HttpBody for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_next(cx)
            .map(|event| event.map(|e| Ok(Frame::data(line(&e)))))
    }
}

/// The answer to a streamed job that has begun (see [`Running::start`]): whole if it has
/// already ended, else its lines as they come.
pub(super) async fn answer(mut running: Running) -> Response<Body> {
    if !running.ended() {
        return ndjson(Either::Right(Lines(running)));
    }
    let mut lines = Vec::new();
    while let Some(event) = running.next().await {
        lines.extend_from_slice(&line(&event));
    }
    ndjson(Either::Left(Full::new(Bytes::from(lines))))
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
