//! The session endpoints: create, exec, fork, read, list, delete. Each turns a request into a
//! call on the executor's sessions (or a [`Job`] naming the session) and answers with the API's
//! wire types; errors go through the one mapping in [`ApiError::status`].

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, LOCATION};
use hyper::{Request, Response, StatusCode};
use hyperlightd_api::{CreateSessionRequest, SessionExecRequest, SessionList, paths};

use super::{Api, ApiError, Body, BoxError, Ctx, Program, json_response, wire};
use crate::audit::SessionRecord;
use crate::executor::Executor;

impl<E: Executor> Api<E> {
    /// `POST /v1/sessions`: 201 with the new session.
    pub(super) async fn create_session<B>(
        &self,
        request: Request<B>,
        ctx: &Ctx,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        if self.draining() {
            return Err(ApiError::ShuttingDown);
        }
        let create: CreateSessionRequest = self.read_json(request).await?;
        if create.idle_timeout_s == Some(0) {
            return Err(ApiError::InvalidRequest(
                "idle_timeout_s must be at least 1 second; leave it out for the daemon's default"
                    .to_owned(),
            ));
        }
        let idle = create.idle_timeout_s.map(Duration::from_secs);
        let info = self
            .executor
            .create_session(ctx.caller.uid, create.language, idle)?;
        self.audit_session("session_created", ctx, &info.id, info.language, None);
        Ok(created(info))
    }

    /// `POST /v1/sessions/{id}/exec`: the program's outcome, as `POST /v1/exec` answers it.
    pub(super) async fn session_exec<B>(
        &self,
        request: Request<B>,
        id: &str,
        ctx: Ctx,
    ) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        if self.draining() {
            return Err(ApiError::ShuttingDown);
        }
        let accepts_lines = super::accepts_ndjson(request.headers());
        let exec: SessionExecRequest = self.read_json(request).await?;
        let program = Program {
            code: exec.code,
            timeout_ms: exec.timeout_ms,
            max_output_bytes: exec.max_output_bytes,
            policy: exec.policy.map(crate::code_policy::CodePolicy::from),
            files: self.files_of(exec.files)?,
        };
        let (session, language) = self.executor.find_session(ctx.caller.uid, id)?;
        self.check_program(&program, language)?;
        let job = self.job(language, program, &ctx);
        let session = Some((id.to_owned(), session));
        self.run(job, session, &ctx, exec.stream || accepts_lines)
            .await
    }

    /// `POST /v1/sessions/{id}/fork`: 201 with the new session. Waits for the execs that
    /// arrived before it, at most the longest time limit an exec may have.
    pub(super) async fn fork_session(
        &self,
        id: &str,
        ctx: &Ctx,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        if self.draining() {
            return Err(ApiError::ShuttingDown);
        }
        let wait = self.limits.max_timeout;
        let info = self.executor.fork_session(ctx.caller.uid, id, wait).await?;
        self.audit_session("session_forked", ctx, &info.id, info.language, Some(id));
        Ok(created(info))
    }

    /// `GET /v1/sessions/{id}`: the caller's session.
    pub(super) fn get_session(
        &self,
        owner: u32,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let info = self.executor.session(owner, id)?;
        Ok(json_response(StatusCode::OK, &wire::session_info(info)))
    }

    /// `GET /v1/sessions`: the caller's sessions.
    pub(super) fn list_sessions(&self, owner: u32) -> Response<Full<Bytes>> {
        let list = SessionList {
            sessions: self
                .executor
                .sessions(owner)
                .into_iter()
                .map(wire::session_info)
                .collect(),
        };
        json_response(StatusCode::OK, &list)
    }

    /// `DELETE /v1/sessions/{id}`: 204.
    pub(super) fn delete_session(
        &self,
        id: &str,
        ctx: &Ctx,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let language = self.executor.delete_session(ctx.caller.uid, id)?;
        self.audit_session("session_deleted", ctx, id, language, None);
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        Ok(response)
    }

    fn audit_session(
        &self,
        event: &str,
        ctx: &Ctx,
        session: &str,
        language: hyperlightd_api::Language,
        from: Option<&str>,
    ) {
        self.policy.audit.session(
            event,
            &SessionRecord {
                request_id: Some(ctx.id),
                caller: Some(ctx.caller),
                owner_uid: ctx.caller.uid,
                session,
                language,
                from,
                reason: None,
            },
        );
    }
}

/// 201 with `info`, and where the session is.
fn created(info: crate::job::SessionInfo) -> Response<Full<Bytes>> {
    let info = wire::session_info(info);
    let mut response = json_response(StatusCode::CREATED, &info);
    if let Ok(location) = HeaderValue::from_str(&paths::session(&info.id)) {
        response.headers_mut().insert(LOCATION, location);
    }
    response
}
