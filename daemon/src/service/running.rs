//! A program running in a task of its own, read as the API's [`ExecEvent`]s while it runs:
//! what every front end that streams an exec (the HTTP API's streamed answer, E2B's `run_code`)
//! reads, so that the rules of a stream are decided once.
//!
//! The rules: a job refused before its program ran (no such session, a quota, a full queue) is
//! a refusal, answered as one, not a stream that ends in an error. Once it has run, its output
//! comes as it is written, then one last event, its response or why it ended without one.
//! Dropping the events closes the job's output sink, and the watchdog stops the program; the
//! job still ends in its task, with its audit line and metrics.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyperlightd_api::{ErrorBody, ErrorKind, ExecEvent, ExecResponse};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tracing::{Instrument, Span};

use super::{Executed, Program, Refusal, wire};
use crate::job::{ExecError, OutputChunk};

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
    /// sent to the events, and waits until the program has started or the job has ended.
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
        Ok(running)
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
                    Err(failed) => Err(Refusal::Exec(ExecError::Internal(format!(
                        "the job's task failed: {failed}"
                    )))),
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
        let this = self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(event));
            }
            let Some(finished) = this.finished.as_mut() else {
                return Poll::Ready(None);
            };
            // Output first: all of it is written before the job ends.
            if let Poll::Ready(Some(chunk)) = this.chunks.poll_recv(cx) {
                this.ready.extend(wire::exec_event(chunk));
                continue;
            }
            let joined = std::task::ready!(Pin::new(finished).poll(cx));
            this.finished = None;
            while let Ok(chunk) = this.chunks.try_recv() {
                this.ready.extend(wire::exec_event(chunk));
            }
            this.ready.push_back(outcome(joined));
        }
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
