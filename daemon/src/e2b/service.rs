//! [`Daemon`] over the service layer, for one key's caller: each call a request of the
//! daemon's own (its id, span and audit lines as the HTTP API's), answered in the API's types
//! by `service::wire`, a session's exec streamed from the service's own output sink.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use hyperlightd_api::{
    CreateSessionRequest, ErrorBody, ExecEvent, ExecResponse, FileChange, FileList,
    SessionExecRequest, SessionInfo,
};
use hyperlightd_e2b::{Daemon, DaemonError, Events};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{Instrument, info_span};

use crate::executor::Executor;
use crate::job::{Caller, OutputChunk};
use crate::service::{Call, Refusal, Service, wire};
use crate::telemetry::Trace;

/// The daemon's service, acting for one caller.
#[derive(Debug)]
pub struct InDaemon<E> {
    service: Arc<Service<E>>,
    caller: Caller,
}

impl<E: Executor> InDaemon<E> {
    pub fn new(service: Arc<Service<E>>, caller: Caller) -> Self {
        InDaemon { service, caller }
    }

    /// A refusal of the service's, as the seam carries it, counted as the HTTP API counts its
    /// refusals (`hyperlightd_requests_rejected_total`).
    fn refused(&self, refusal: Refusal) -> DaemonError {
        self.service.rejected(refusal.kind());
        DaemonError::refused(refusal.kind(), refusal.to_string())
    }

    /// A new request of the caller's, named `what` in the logs.
    fn call(&self, what: &'static str) -> Call {
        let id = self.service.next_call_id();
        let name = self.caller.on_behalf_of.as_deref().unwrap_or("");
        Call {
            id,
            caller: self.caller.clone(),
            received: Instant::now(),
            span: info_span!("e2b", id, caller = name, what),
            trace: Trace::off(),
        }
    }
}

/// A session exec's events: its output from the service's sink, then its outcome.
#[derive(Debug)]
pub struct Output {
    chunks: mpsc::UnboundedReceiver<OutputChunk>,
    finished: Option<JoinHandle<Result<ExecResponse, Refusal>>>,
    /// Events read before the exec's end was seen, in order.
    ready: VecDeque<ExecEvent>,
}

impl Events for Output {
    async fn next(&mut self) -> Option<Result<ExecEvent, DaemonError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            let finished = self.finished.as_mut()?;
            tokio::select! {
                biased;
                Some(chunk) = self.chunks.recv() => self.ready.extend(wire::exec_event(chunk)),
                joined = finished => {
                    self.finished = None;
                    // Written before the job ended, so all in the channel now.
                    while let Ok(chunk) = self.chunks.try_recv() {
                        self.ready.extend(wire::exec_event(chunk));
                    }
                    self.ready.push_back(outcome(joined));
                }
            }
        }
    }
}

/// The last event of an exec that ran: its response, or why it ended without one.
fn outcome(joined: Result<Result<ExecResponse, Refusal>, tokio::task::JoinError>) -> ExecEvent {
    match joined {
        Ok(Ok(response)) => ExecEvent::Result(response),
        Ok(Err(refusal)) => ExecEvent::Error {
            error: ErrorBody::new(refusal.kind(), refusal.to_string()),
        },
        Err(e) => ExecEvent::Error {
            error: ErrorBody::new(
                hyperlightd_api::ErrorKind::Internal,
                format!("the job's task failed: {e}"),
            ),
        },
    }
}

impl<E: Executor> Daemon for InDaemon<E> {
    type Events = Output;

    async fn create_session(
        &self,
        request: CreateSessionRequest,
    ) -> Result<SessionInfo, DaemonError> {
        let call = self.call("create_session");
        let CreateSessionRequest {
            language,
            idle_timeout_s,
            labels,
            env,
        } = request;
        let created = self
            .service
            .create_session(&call, language, idle_timeout_s, labels, env);
        created.map(wire::session_info).map_err(|r| self.refused(r))
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, DaemonError> {
        let call = self.call("session");
        let info = self.service.session(&call, id);
        info.map(wire::session_info).map_err(|r| self.refused(r))
    }

    async fn sessions_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, DaemonError> {
        let call = self.call("sessions");
        let sessions = self
            .service
            .sessions(&call, labels.clone())
            .map_err(|r| self.refused(r))?;
        Ok(sessions.into_iter().map(wire::session_info).collect())
    }

    async fn set_session_idle_timeout(&self, id: &str, seconds: u64) -> Result<(), DaemonError> {
        let call = self.call("update_session");
        let updated = self.service.update_session(&call, id, seconds);
        updated.map(drop).map_err(|r| self.refused(r))
    }

    async fn park_session(&self, id: &str) -> Result<(), DaemonError> {
        let call = self.call("park_session");
        let span = call.span.clone();
        let parked = self.service.park_session(&call, id).instrument(span).await;
        parked.map(drop).map_err(|r| self.refused(r))
    }

    async fn restart_session(&self, id: &str) -> Result<(), DaemonError> {
        let call = self.call("restart_session");
        let span = call.span.clone();
        let restarted = self.service.restart_session(&call, id).instrument(span);
        restarted.await.map(drop).map_err(|r| self.refused(r))
    }

    async fn delete_session(&self, id: &str) -> Result<(), DaemonError> {
        let call = self.call("delete_session");
        self.service
            .delete_session(&call, id)
            .map_err(|r| self.refused(r))
    }

    async fn session_exec(
        &self,
        id: &str,
        request: SessionExecRequest,
    ) -> Result<Output, DaemonError> {
        let call = self.call("session_exec");
        // The session decides the language; the rest are the fields of any exec.
        let exec = request.with_language(hyperlightd_api::Language::Javascript);
        let (_, mut program) = wire::program(exec).map_err(|r| self.refused(r))?;
        let (sink, mut chunks) = mpsc::unbounded_channel();
        program.output = Some(sink);
        let (service, id, span) = (self.service.clone(), id.to_owned(), call.span.clone());
        // In a task of its own, which ends with its audit line and metrics even if the
        // client goes away (dropping the events closes the sink, which stops the program).
        let mut finished = tokio::spawn(
            async move {
                let executed = service.session_exec(&call, &id, program).await?;
                let (outcome, queued, ran) =
                    (executed.outcome, executed.queued_ms, executed.duration_ms);
                Ok(wire::response(outcome, queued, ran))
            }
            .instrument(span),
        );
        // As the HTTP API answers: a job refused before it ran (no such session, a quota) is
        // refused, not a stream that ends in an error.
        let mut ready = VecDeque::new();
        tokio::select! {
            biased;
            Some(chunk) = chunks.recv() => ready.extend(wire::exec_event(chunk)),
            joined = &mut finished => {
                let mut output = Output { chunks, finished: None, ready };
                while let Ok(chunk) = output.chunks.try_recv() {
                    output.ready.extend(wire::exec_event(chunk));
                }
                match joined {
                    Ok(Err(refusal)) if output.ready.is_empty() => return Err(self.refused(refusal)),
                    joined => output.ready.push_back(outcome(joined)),
                }
                return Ok(output);
            }
        }
        Ok(Output {
            chunks,
            finished: Some(finished),
            ready,
        })
    }

    async fn session_files(&self, id: &str) -> Result<FileList, DaemonError> {
        let call = self.call("session_files");
        let files = self
            .service
            .session_files(&call, id)
            .await
            .map_err(|r| self.refused(r))?;
        Ok(wire::file_list(&files))
    }

    async fn change_session_files(
        &self,
        id: &str,
        changes: Vec<FileChange>,
    ) -> Result<(), DaemonError> {
        let call = self.call("change_session_files");
        let changes = changes
            .into_iter()
            .map(wire::file_change)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|r| self.refused(r))?;
        let span = call.span.clone();
        let changed = self.service.change_session_files(&call, id, changes);
        changed
            .instrument(span)
            .await
            .map(drop)
            .map_err(|r| self.refused(r))
    }

    async fn session_file(&self, id: &str, path: &str) -> Result<Vec<u8>, DaemonError> {
        let call = self.call("session_file");
        let files = self
            .service
            .session_files(&call, id)
            .await
            .map_err(|r| self.refused(r))?;
        files.get(path).cloned().ok_or_else(|| {
            let kind = hyperlightd_api::ErrorKind::NotFound;
            DaemonError::refused(kind, format!("the session has no file {path:?}"))
        })
    }
}
