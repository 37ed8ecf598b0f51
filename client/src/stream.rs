//! Streamed execs: the program's output as it is written, then the response (see
//! [`ExecEvent`]). A client that drops its [`ExecStream`] closes the connection, and the
//! daemon stops the program.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use hyper::body::Incoming;
use hyperlightd_api::{
    ExecEvent, ExecRequest, ExecResponse, NDJSON, SessionExecRequest, ToolSpec, paths,
};
use tokio::time::Instant;

use crate::{
    Answer, Client, DEFAULT_TOOL_WAIT, Error, encode, exec_wait, innermost, rejection,
    session_exec_wait,
};

/// The events of one streamed exec, as they arrive.
#[derive(Debug)]
pub struct ExecStream {
    socket: PathBuf,
    body: Incoming,
    pending: Vec<u8>,
    deadline: Instant,
    /// How long the whole stream may take.
    wait: Duration,
    ended: bool,
}

impl Client {
    /// Runs a program, its output arriving as it is written: `request` with `stream` set.
    /// `Err` means the request did not run (as for [`exec`](Client::exec)).
    pub async fn exec_stream(&self, request: &ExecRequest) -> Result<ExecStream, Error> {
        let request = ExecRequest {
            stream: true,
            ..request.clone()
        };
        let wait = self.stream_wait(
            exec_wait(request.timeout_ms),
            &request.tools,
            request.tool_timeout_ms,
        );
        self.stream(paths::EXEC, encode(&request)?, wait).await
    }

    /// Runs a program in session `id`, its output arriving as it is written.
    pub async fn session_exec_stream(
        &self,
        id: &str,
        request: &SessionExecRequest,
    ) -> Result<ExecStream, Error> {
        let request = SessionExecRequest {
            stream: true,
            ..request.clone()
        };
        let wait = self.stream_wait(
            session_exec_wait(request.timeout_ms),
            &request.tools,
            request.tool_timeout_ms,
        );
        self.stream(&paths::session_exec(id), encode(&request)?, wait)
            .await
    }

    /// How long a stream may go without an event: `exec_wait` (the program's time limit plus a
    /// margin, and a session's saving), and when it declared tools, a call's limit besides (a program's clock stops while it waits
    /// for a tool, so a tool exec as a whole may last far longer: the daemon caps it).
    fn stream_wait(
        &self,
        exec_wait: Duration,
        tools: &[ToolSpec],
        tool_timeout_ms: Option<u64>,
    ) -> Duration {
        let call = match (tools.is_empty(), tool_timeout_ms) {
            (true, _) => Duration::ZERO,
            (false, Some(ms)) => Duration::from_millis(ms),
            (false, None) => DEFAULT_TOOL_WAIT,
        };
        self.response_timeout
            .unwrap_or(exec_wait.saturating_add(call))
    }

    async fn stream(&self, path: &str, body: Bytes, wait: Duration) -> Result<ExecStream, Error> {
        let deadline = Instant::now() + wait;
        let timed_out = || Error::TimedOut {
            socket: self.socket.clone(),
            after: wait,
        };
        let opened =
            tokio::time::timeout_at(deadline, self.open(Method::POST, path, body, Some(NDJSON)));
        let (status, retry_after, body) = opened.await.map_err(|_| timed_out())??;
        if !status.is_success() {
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(rejection(Answer {
                status,
                retry_after,
                body: bytes,
            }));
        }
        Ok(ExecStream {
            socket: self.socket.clone(),
            body,
            pending: Vec::new(),
            deadline,
            wait,
            ended: false,
        })
    }
}

impl ExecStream {
    /// Starts the stream's wait again: an event came, or a tool call was answered.
    pub(crate) fn restart_clock(&mut self) {
        self.deadline = Instant::now() + self.wait;
    }

    /// The next event; None once the last (the response, or an error) has come.
    pub async fn next(&mut self) -> Option<Result<ExecEvent, Error>> {
        if self.ended {
            return None;
        }
        let event = self.read().await;
        self.ended = match &event {
            Ok(ExecEvent::Result(_) | ExecEvent::Error { .. }) | Err(_) => true,
            Ok(
                ExecEvent::Stdout { .. }
                | ExecEvent::Stderr { .. }
                | ExecEvent::Display { .. }
                | ExecEvent::Started { .. }
                | ExecEvent::ToolCall { .. },
            ) => false,
        };
        Some(event)
    }

    /// Reads the stream to its end, handing each output event to `each`: the response.
    pub async fn finish(mut self, mut each: impl FnMut(&ExecEvent)) -> Result<ExecResponse, Error> {
        while let Some(event) = self.next().await {
            match event? {
                ExecEvent::Result(response) => return Ok(response),
                ExecEvent::Error { error } => {
                    return Err(Error::Rejected {
                        status: 500,
                        error,
                        retry_after: None,
                    });
                }
                output => each(&output),
            }
        }
        Err(self.lost("the stream had already ended"))
    }

    async fn read(&mut self) -> Result<ExecEvent, Error> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return serde_json::from_slice(&line[..end]).map_err(|e| Error::Protocol {
                    status: 200,
                    message: format!("decoding an event: {e}"),
                });
            }
            let frame = tokio::time::timeout_at(self.deadline, self.body.frame()).await;
            match frame {
                Err(_) => {
                    return Err(Error::TimedOut {
                        socket: self.socket.clone(),
                        after: self.wait,
                    });
                }
                Ok(None) => return Err(self.lost("the stream ended before the response")),
                Ok(Some(Err(e))) => return Err(self.lost(&innermost(&e))),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.pending.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    pub(crate) fn lost(&self, reason: &str) -> Error {
        Error::ConnectionLost {
            socket: self.socket.clone(),
            reason: reason.to_owned(),
        }
    }
}

#[cfg(test)]
mod fuzz {
    //! Property-based fuzzing of what the client reads from an exec's stream (`PROPTEST_CASES`
    //! sets the cases): any bytes, cut into any frames, give events, then an end (the response,
    //! an error event, or an error), and nothing after it; never a panic or a wait past the
    //! daemon's closing.

    use std::time::Duration;

    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    use crate::{Client, ExecEvent, ExecRequest, Language};

    /// NDJSON lines like the daemon's, damaged or not, or anything.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let line = prop_oneof![
            Just(r#"{"type":"stdout","text":"a\n"}"#.to_owned()),
            Just(r#"{"type":"started","request_id":1}"#.to_owned()),
            Just(r#"{"type":"tool_call","id":"1","name":"t","arguments":"{}"}"#.to_owned()),
            Just(
                r#"{"type":"result","status":"ok","stdout":"","stderr":"","result":1,"error":null,"duration_ms":1.0}"#
                    .to_owned()
            ),
            Just(r#"{"type":"error","error":{"kind":"internal","message":"x"}}"#.to_owned()),
            "[ -~]{0,40}",
        ];
        let lines = proptest::collection::vec(line, 0..6).prop_map(|lines| {
            lines
                .iter()
                .flat_map(|l| [l.as_bytes(), b"\n"].concat())
                .collect()
        });
        prop_oneof![3 => lines, 1 => any::<Vec<u8>>()]
    }

    /// Serves one streamed answer of `body`, written in frames of the sizes `cuts` gives.
    async fn serve(listener: UnixListener, body: Vec<u8>, cuts: Vec<usize>) {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = stream.read(&mut request).await;
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\n\
             connection: close\r\n\r\n",
            hyperlightd_api::NDJSON
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut rest = &body[..];
        for cut in cuts.into_iter().chain([usize::MAX]) {
            if rest.is_empty() {
                break;
            }
            let (chunk, after) = rest.split_at(cut.clamp(1, rest.len()));
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
            if stream.write_all(&framed).await.is_err() {
                return;
            }
            rest = after;
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
    }

    proptest! {
        #[test]
        fn any_stream_gives_events_then_one_end(
            body in body(),
            cuts in proptest::collection::vec(1usize..64, 0..8),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let newlines = body.iter().filter(|&&b| b == b'\n').count();
            let read = runtime.block_on(async move {
                let dir = tempfile::tempdir().unwrap();
                let socket = dir.path().join("fuzz.sock");
                let listener = UnixListener::bind(&socket).unwrap();
                tokio::spawn(serve(listener, body, cuts));
                let request = ExecRequest::new(Language::Javascript, "1");
                let reading = async {
                    let mut stream = Client::connect(&socket).exec_stream(&request).await.unwrap();
                    let mut events = Vec::new();
                    while let Some(event) = stream.next().await {
                        events.push(event);
                    }
                    (events, stream.next().await.is_none())
                };
                tokio::time::timeout(Duration::from_secs(10), reading).await
            });
            let (events, after) = read.expect("the stream ended");
            prop_assert!(after, "an event after the end");
            let (last, before) = events.split_last().expect("at least an end");
            for event in before {
                prop_assert!(
                    matches!(event, Ok(e) if !matches!(e, ExecEvent::Result(_) | ExecEvent::Error { .. })),
                    "{:?} before the end", event
                );
            }
            prop_assert!(
                matches!(last, Err(_) | Ok(ExecEvent::Result(_) | ExecEvent::Error { .. })),
                "{:?} is not an end", last
            );
            prop_assert!(events.len() <= newlines + 1);
        }
    }
}
