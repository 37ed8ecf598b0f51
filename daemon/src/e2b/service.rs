//! [`Daemon`] over the service layer, for one key's caller: each HTTP request a request of the
//! daemon's own (its id, span and audit lines as the HTTP API's), the service's calls it makes
//! inside it, answered in the API's types by `service::wire`, a session's exec streamed as the
//! service's [`Running`] gives it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use hyperlightd_api::{
    CreateSessionRequest, ErrorKind, ExecEvent, FileChange, FileList, SessionExecRequest,
    SessionInfo,
};
use hyperlightd_e2b::{Daemon, DaemonError, Events};
use tracing::{Instrument, info_span};

use crate::executor::Executor;
use crate::job::Caller;
use crate::service::{Call, Refusal, Running, Service, wire};
use crate::telemetry::{Attribute, Kind, Trace, Tracer};

/// The daemon's service, acting for one caller.
#[derive(Debug)]
pub struct InDaemon<E> {
    service: Arc<Service<E>>,
    caller: Caller,
    tracer: Tracer,
    /// The HTTP request this value serves ([`Daemon::for_request`]); None, each call a request
    /// of its own.
    request: Option<Request>,
}

/// One HTTP request to the listener: its calls share its id and arrival, and sit in its spans.
#[derive(Debug, Clone)]
struct Request {
    id: u64,
    received: Instant,
    span: tracing::Span,
    /// Its server span, at the root of a trace of its own (E2B's SDKs send no `traceparent`).
    trace: Trace,
}

impl<E: Executor> InDaemon<E> {
    /// The service acting for `caller`, each request a span of `tracer`'s (when it is on).
    pub fn new(service: Arc<Service<E>>, caller: Caller, tracer: Tracer) -> Self {
        InDaemon {
            service,
            caller,
            tracer,
            request: None,
        }
    }

    /// A new request of the caller's: `method` on `path` when it is an HTTP request, or one
    /// call named `what` outside one.
    fn request(&self, http: Option<(&str, &str)>, what: &'static str) -> Request {
        let id = self.service.next_call_id();
        let name = self.caller.on_behalf_of.clone().unwrap_or_default();
        let uid = self.caller.uid;
        let (method, path) = http.unwrap_or(("", ""));
        let span_name = match http {
            Some((method, _)) => format!("e2b {method}"),
            None => format!("e2b {what}"),
        };
        let trace = self.tracer.root().child(span_name, Kind::Server, || {
            let mut attributes = vec![
                Attribute::new("network.transport", "tcp"),
                Attribute::new("hyperlightd.request.id", id as i64),
                Attribute::new("hyperlightd.caller.uid", i64::from(uid)),
                Attribute::new("hyperlightd.caller.on_behalf_of", name.to_string()),
            ];
            if http.is_some() {
                attributes.push(Attribute::new("http.request.method", method.to_owned()));
                attributes.push(Attribute::new("url.path", path.to_owned()));
            }
            attributes
        });
        Request {
            id,
            received: Instant::now(),
            span: info_span!("e2b", id, caller = &*name, method, path, what),
            trace,
        }
    }

    /// A refusal of the service's to `trace`'s call, as the seam carries it, counted as the
    /// HTTP API counts its refusals (`hyperlightd_requests_rejected_total`).
    fn refused(&self, trace: &Trace, refusal: Refusal) -> DaemonError {
        self.failed(trace, refusal.kind(), refusal.to_string())
    }

    /// An error of `kind` answered to `trace`'s call, counted and marked in its span and its
    /// request's.
    fn failed(&self, trace: &Trace, kind: ErrorKind, message: String) -> DaemonError {
        self.service.rejected(kind);
        trace.fail(kind.as_str());
        if let Some(request) = &self.request {
            request.trace.fail(kind.as_str());
        }
        DaemonError::refused(kind, message)
    }

    /// A call of the service's, named `what`: a span in its request's, or, outside one, a
    /// request of its own.
    fn call(&self, what: &'static str) -> Call {
        let Some(request) = &self.request else {
            let Request {
                id,
                received,
                span,
                trace,
            } = self.request(None, what);
            return Call {
                id,
                caller: self.caller.clone(),
                received,
                span,
                trace,
            };
        };
        Call {
            id: request.id,
            caller: self.caller.clone(),
            received: request.received,
            span: info_span!(parent: &request.span, "call", what),
            trace: request
                .trace
                .child(format!("e2b {what}"), Kind::Internal, Vec::new),
        }
    }
}

/// A session exec's events, as the service's [`Running`] gives them, with its request's trace
/// (its server span ends once the last event is read or the events dropped).
#[derive(Debug)]
pub struct Output {
    running: Running,
    /// Held only to be dropped with the events.
    _request: Option<Trace>,
}

impl Events for Output {
    async fn next(&mut self) -> Option<Result<ExecEvent, DaemonError>> {
        self.running.next().await.map(Ok)
    }
}

impl<E: Executor> Daemon for InDaemon<E> {
    type Events = Output;

    fn for_request(&self, method: &hyperlightd_e2b::Method, path: &str) -> Self {
        InDaemon {
            service: self.service.clone(),
            caller: self.caller.clone(),
            tracer: self.tracer.clone(),
            request: Some(self.request(Some((method.as_str(), path)), "request")),
        }
    }

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
        created
            .map(wire::session_info)
            .map_err(|r| self.refused(&call.trace, r))
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, DaemonError> {
        let call = self.call("session");
        let info = self.service.session(&call, id);
        info.map(wire::session_info)
            .map_err(|r| self.refused(&call.trace, r))
    }

    async fn sessions_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, DaemonError> {
        let call = self.call("sessions");
        let sessions = self
            .service
            .sessions(&call, labels.clone())
            .map_err(|r| self.refused(&call.trace, r))?;
        Ok(sessions.into_iter().map(wire::session_info).collect())
    }

    async fn set_session_idle_timeout(&self, id: &str, seconds: u64) -> Result<(), DaemonError> {
        let call = self.call("update_session");
        let updated = self.service.update_session(&call, id, seconds);
        updated.map(drop).map_err(|r| self.refused(&call.trace, r))
    }

    async fn park_session(&self, id: &str) -> Result<(), DaemonError> {
        let call = self.call("park_session");
        let span = call.span.clone();
        let parked = self.service.park_session(&call, id).instrument(span).await;
        parked.map(drop).map_err(|r| self.refused(&call.trace, r))
    }

    async fn restart_session(&self, id: &str) -> Result<(), DaemonError> {
        let call = self.call("restart_session");
        let span = call.span.clone();
        let restarted = self.service.restart_session(&call, id).instrument(span);
        restarted
            .await
            .map(drop)
            .map_err(|r| self.refused(&call.trace, r))
    }

    async fn delete_session(&self, id: &str) -> Result<(), DaemonError> {
        let call = self.call("delete_session");
        self.service
            .delete_session(&call, id)
            .map_err(|r| self.refused(&call.trace, r))
    }

    async fn session_exec(
        &self,
        id: &str,
        request: SessionExecRequest,
    ) -> Result<Output, DaemonError> {
        let call = self.call("session_exec");
        // The session decides the language; the rest are the fields of any exec.
        let exec = request.with_language(hyperlightd_api::Language::Javascript);
        let (_, program) = wire::program(exec).map_err(|r| self.refused(&call.trace, r))?;
        let (service, id, span) = (self.service.clone(), id.to_owned(), call.span.clone());
        // The call's span ends with its job, in the job's task.
        let trace = call.trace.clone();
        let running = Running::start(span, program, move |program| async move {
            service.session_exec(&call, &id, program).await
        });
        let request = self.request.as_ref().map(|r| r.trace.clone());
        running
            .await
            .map(|running| Output {
                running,
                _request: request,
            })
            .map_err(|r| self.refused(&trace, r))
    }

    async fn session_files(&self, id: &str) -> Result<FileList, DaemonError> {
        let call = self.call("session_files");
        let files = self
            .service
            .session_files(&call, id)
            .await
            .map_err(|r| self.refused(&call.trace, r))?;
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
            .map_err(|r| self.refused(&call.trace, r))?;
        let span = call.span.clone();
        let changed = self.service.change_session_files(&call, id, changes);
        changed
            .instrument(span)
            .await
            .map(drop)
            .map_err(|r| self.refused(&call.trace, r))
    }

    async fn session_file(&self, id: &str, path: &str) -> Result<Vec<u8>, DaemonError> {
        let call = self.call("session_file");
        let files = self
            .service
            .session_files(&call, id)
            .await
            .map_err(|r| self.refused(&call.trace, r))?;
        files.get(path).cloned().ok_or_else(|| {
            let missing = format!("the session has no file {path:?}");
            self.failed(&call.trace, ErrorKind::NotFound, missing)
        })
    }
}
