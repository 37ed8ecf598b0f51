//! The session endpoints: create, exec, fork, read, list, delete. Each turns a request into a
//! call on the executor's sessions (or a [`Job`] naming the session) and answers with the API's
//! wire types; errors go through the one mapping in [`ApiError::status`].

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, LOCATION};
use hyper::{Request, Response, StatusCode};
use hyperlightd_api::{CreateSessionRequest, SessionExecRequest, SessionList, paths};

use super::{Api, ApiError, BoxError, Program, json_response};
use crate::executor::Executor;

impl<E: Executor> Api<E> {
    /// `POST /v1/sessions`: 201 with the new session.
    pub(super) async fn create_session<B>(
        &self,
        request: Request<B>,
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
        let info = self.executor.sessions().create(create.language, idle)?;
        Ok(created(&info))
    }

    /// `POST /v1/sessions/{id}/exec`: the program's outcome, as `POST /v1/exec` answers it.
    pub(super) async fn session_exec<B>(
        &self,
        request: Request<B>,
        id: &str,
        received: Instant,
        span: tracing::Span,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        if self.draining() {
            return Err(ApiError::ShuttingDown);
        }
        let exec: SessionExecRequest = self.read_json(request).await?;
        let program = Program {
            code: exec.code,
            timeout_ms: exec.timeout_ms,
            max_output_bytes: exec.max_output_bytes,
        };
        self.check_code(&program.code)?;
        let language = self.executor.sessions().get(id)?.language;
        let job = self.job(language, program, Some(id.to_owned()), received, span);
        self.run(job, received).await
    }

    /// `POST /v1/sessions/{id}/fork`: 201 with the new session. Waits for the execs that
    /// arrived before it, at most the longest time limit an exec may have.
    pub(super) async fn fork_session(&self, id: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        if self.draining() {
            return Err(ApiError::ShuttingDown);
        }
        let wait = self.limits.max_timeout;
        let info = self.executor.sessions().fork(id, wait).await?;
        Ok(created(&info))
    }

    /// `GET /v1/sessions/{id}`
    pub(super) fn get_session(&self, id: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        let info = self.executor.sessions().get(id)?;
        Ok(json_response(StatusCode::OK, &info))
    }

    /// `GET /v1/sessions`
    pub(super) fn list_sessions(&self) -> Response<Full<Bytes>> {
        let list = SessionList {
            sessions: self.executor.sessions().list(),
        };
        json_response(StatusCode::OK, &list)
    }

    /// `DELETE /v1/sessions/{id}`: 204.
    pub(super) fn delete_session(&self, id: &str) -> Result<Response<Full<Bytes>>, ApiError> {
        self.executor.sessions().delete(id)?;
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        Ok(response)
    }
}

/// 201 with `info`, and where the session is.
fn created(info: &hyperlightd_api::SessionInfo) -> Response<Full<Bytes>> {
    let mut response = json_response(StatusCode::CREATED, info);
    if let Ok(location) = HeaderValue::from_str(&paths::session(&info.id)) {
        response.headers_mut().insert(LOCATION, location);
    }
    response
}
