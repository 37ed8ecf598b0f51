//! A program running in a task of its own, read as the API's [`ExecEvent`]s while it runs:
//! what every front end that streams an exec (the HTTP API's streamed answer, E2B's `run_code`)
//! reads, so that the rules of a stream are decided once.
//!
//! The rules: a job refused before its program ran (no such session, a quota, a full queue) is
//! a refusal, answered as one, not a stream that ends in an error. Once it has run, its output
//! comes as it is written, then one last event, its response or why it ended without one.
//! Dropping the events closes the job's output sink, and the watchdog stops the program; the
//! job still ends in its task, with its audit line and metrics.
//!
//! A program that has started is given [`HEAD_WAIT`] to end before its events are handed over,
//! what it writes meanwhile kept: a short program is then answered in one piece, where its
//! answer's head, each line and its end would each have been a write of their own and a wake
//! of the client. A longer one's answer begins then, with what it has written so far; what it
//! writes later comes as it is written.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyperlightd_api::{ErrorBody, ErrorKind, ExecEvent, ExecResponse};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tracing::{Instrument, Span};

use super::{Executed, Program, Refusal, wire};
use crate::job::OutputChunk;

/// How long [`Running::start`] waits, once the program has started, for the job to end. A
/// client's deadline for an answer's head counts from the program's start, so this is all it
/// can add to one, and no output waits longer.
pub const HEAD_WAIT: Duration = Duration::from_millis(20);

/// A job's outcome, from the task that runs it.
type Finished = JoinHandle<Result<ExecResponse, Refusal>>;

/// A running job's events, in order, ending with its outcome.
#[derive(Debug)]
pub struct Running {
    chunks: mpsc::UnboundedReceiver<OutputChunk>,
    /// The job's task, until it has ended.
    finished: Option<Finished>,
    /// Events read, not yet taken.
    ready: VecDeque<ExecEvent>,
}

impl Running {
    /// Starts `run` on `program` in a task of its own (in `span`), with the program's output
    /// sent to the events, and waits until the program has started or the job has ended; once
    /// started, at most [`HEAD_WAIT`] more for its end.
    ///
    /// # Errors
    ///
    /// The job's refusal if it ended before its program started.
    pub async fn start<F, Fut>(span: Span, mut program: Program, run: F) -> Result<Self, Refusal>
    where
        F: FnOnce(Program) -> Fut,
        Fut: Future<Output = Result<Executed, Refusal>> + Send + 'static,
    {
        let (sink, chunks) = mpsc::unbounded_channel();
        program.output = Some(sink);
        let job = run(program);
        let finished = tokio::spawn(async move { Ok(wire::response(job.await?)) }.instrument(span));
        let mut running = Running {
            chunks,
            finished: Some(finished),
            ready: VecDeque::new(),
        };
        running.begun().await?;
        running.settle(HEAD_WAIT).await;
        Ok(running)
    }

    /// Waits at most `wait` for the job to end, keeping what it writes meanwhile.
    async fn settle(&mut self, wait: Duration) {
        let ended = std::future::poll_fn(|cx| self.poll_fill(cx));
        let _ = tokio::time::timeout(wait, ended).await;
    }

    /// Waits for the program's first chunk (its start, or output) or the job's end.
    async fn begun(&mut self) -> Result<(), Refusal> {
        let Some(finished) = self.finished.as_mut() else {
            return Ok(());
        };
        tokio::select! {
            biased;
            Some(chunk) = self.chunks.recv() => {
                self.ready.extend(wire::exec_event(chunk));
                Ok(())
            }
            joined = finished => {
                self.finished = None;
                // Chunks are written before the job ends, and the select takes them first:
                // none came, so the program never started.
                match joined {
                    Ok(Err(refusal)) => Err(refusal),
                    joined => {
                        self.ready.push_back(outcome(joined));
                        Ok(())
                    }
                }
            }
        }
    }

    /// Whether the job has ended: its events are all read, and taking them no longer waits.
    pub fn ended(&self) -> bool {
        self.finished.is_none()
    }

    /// The next event; none once the outcome has been taken.
    pub async fn next(&mut self) -> Option<ExecEvent> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// The next event if there is one yet (for a body that polls it).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<ExecEvent>> {
        let ended = self.poll_fill(cx).is_ready();
        match self.ready.pop_front() {
            Some(event) => Poll::Ready(Some(event)),
            None if ended => Poll::Ready(None),
            None => Poll::Pending,
        }
    }

    /// Takes the output written so far into the events, and the outcome once the job has
    /// ended: ready then.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(finished) = self.finished.as_mut() else {
            return Poll::Ready(());
        };
        // Output first: all of it is written before the job ends.
        while let Poll::Ready(Some(chunk)) = self.chunks.poll_recv(cx) {
            self.ready.extend(wire::exec_event(chunk));
        }
        let joined = std::task::ready!(Pin::new(finished).poll(cx));
        self.finished = None;
        while let Ok(chunk) = self.chunks.try_recv() {
            self.ready.extend(wire::exec_event(chunk));
        }
        self.ready.push_back(outcome(joined));
        Poll::Ready(())
    }
}

/// The last event of a job that ran: its response, or why it ended without one.
fn outcome(joined: Result<Result<ExecResponse, Refusal>, JoinError>) -> ExecEvent {
    match joined {
        Ok(Ok(response)) => ExecEvent::Result(response),
        Ok(Err(refusal)) => ExecEvent::Error {
            error: ErrorBody::new(refusal.kind(), refusal.to_string()),
        },
        Err(e) => ExecEvent::Error {
            error: ErrorBody::new(
                ErrorKind::Internal,
                format!("internal error: the job's task failed: {e}"),
            ),
        },
    }
}
