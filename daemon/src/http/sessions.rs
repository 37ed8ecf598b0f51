//! The session endpoints: create, exec, fork, read, list, delete, and the checkpoints: list
//! them, roll back to one. Each parses its request,
//! calls the service, and answers with the API's wire types; errors go through the one mapping
//! in [`ApiError::status`].

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, LOCATION};
use hyper::{Request, Response, StatusCode};
use hyperlightd_api::{
    CheckpointList, CreateSessionRequest, ForkRequest, InstallRequest, ParkRequest, RestartRequest,
    RollbackRequest, SessionExecRequest, SessionList, UpdateSessionRequest, paths,
};
use percent_encoding::percent_decode_str;

use super::{Api, ApiError, Body, BoxError, json_response};
use crate::executor::Executor;
use crate::job::SessionInfo;
use crate::service::{Call, wire};

impl<E: Executor> Api<E> {
    /// `POST /v1/sessions`: 201 with the new session.
    pub(super) async fn create_session<B>(
        &self,
        request: Request<B>,
        call: &Call,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let create: CreateSessionRequest = self.read_json(request).await?;
        let info = self.service.create_session(
            call,
            create.language,
            create.idle_timeout_s,
            create.labels,
            create.env,
        )?;
        Ok(created(info))
    }

    /// `POST /v1/sessions/{id}/exec`: the program's outcome, as `POST /v1/exec` answers it.
    pub(super) async fn session_exec<B>(
        &self,
        request: Request<B>,
        id: &str,
        call: Call,
    ) -> Result<Response<Body>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let accepts_lines = super::accepts_ndjson(request.headers());
        let mut exec: SessionExecRequest = self.read_json(request).await?;
        exec.stream |= accepts_lines;
        // The session decides the language; the rest are the fields of any exec.
        let exec = exec.with_language(hyperlightd_api::Language::Javascript);
        let (stream, program) = wire::program(exec)?;
        let id = id.to_owned();
        self.answer(call, stream, program, move |service, call, program| async move {
            service.session_exec(&call, &id, program).await
        })
        .await
    }

    /// `POST /v1/sessions/{id}/fork`: 201 with the new session. The body, a [`ForkRequest`],
    /// may be empty: a fork of the session's newest checkpoint.
    pub(super) async fn fork_session<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let fork: ForkRequest = self.read_optional_json(request).await?;
        let info = self.service.fork_session(call, id, fork.checkpoint).await?;
        Ok(created(info))
    }

    /// `GET /v1/sessions/{id}/checkpoints`: the session's checkpoints, oldest first.
    pub(super) async fn list_checkpoints(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let checkpoints = self.service.session_checkpoints(call, id).await?;
        let list = CheckpointList {
            checkpoints: checkpoints.into_iter().map(wire::checkpoint_info).collect(),
        };
        Ok(json_response(StatusCode::OK, &list))
    }

    /// `POST /v1/sessions/{id}/rollback`: the session, back at the checkpoint asked for.
    pub(super) async fn rollback_session<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let rollback: RollbackRequest = self.read_json(request).await?;
        let info = self
            .service
            .rollback_session(call, id, rollback.checkpoint)
            .await?;
        Ok(json_response(StatusCode::OK, &wire::session_info(info)))
    }

    /// `POST /v1/sessions/{id}/park`: the session, parked (its state on disk only). It takes
    /// no body; an empty JSON object is taken too.
    pub(super) async fn park_session<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let ParkRequest {} = self.read_optional_json(request).await?;
        let info = self.service.park_session(call, id).await?;
        Ok(json_response(StatusCode::OK, &wire::session_info(info)))
    }

    /// `POST /v1/sessions/{id}/restart`: the session, its interpreter started afresh with its
    /// files kept. It takes no body; an empty JSON object is taken too.
    pub(super) async fn restart_session<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let RestartRequest {} = self.read_optional_json(request).await?;
        let info = self.service.restart_session(call, id).await?;
        Ok(json_response(StatusCode::OK, &wire::session_info(info)))
    }

    /// `POST /v1/sessions/{id}/packages`: packages installed in the session, with what they
    /// need, after the execs that arrived before.
    pub(super) async fn install_packages<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let install: InstallRequest = self.read_json(request).await?;
        let installed = self
            .service
            .install_packages(call, id, install.requirements, install.timeout_ms)
            .await?;
        Ok(json_response(StatusCode::OK, &wire::installed(installed)))
    }

    /// `GET /v1/sessions/{id}/packages`: what the session installed.
    pub(super) async fn list_session_packages(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let installed = self.service.session_packages(call, id).await?;
        Ok(json_response(
            StatusCode::OK,
            &wire::package_list(installed),
        ))
    }

    /// `GET /v1/sessions/{id}`: the caller's session, with what it installed.
    pub(super) async fn get_session(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let (info, installed) = self.service.session_detail(call, id).await?;
        Ok(json_response(
            StatusCode::OK,
            &wire::session_detail(info, installed),
        ))
    }

    /// `GET /v1/sessions`: the caller's sessions; with `?label=NAME=VALUE` (repeatable), those
    /// that have every such label.
    pub(super) fn list_sessions<B>(
        &self,
        request: &Request<B>,
        call: &Call,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let wanted = label_filter(request.uri().query())?;
        let sessions = self.service.sessions(call, wanted)?;
        let list = SessionList {
            sessions: sessions.into_iter().map(wire::session_info).collect(),
        };
        Ok(json_response(StatusCode::OK, &list))
    }

    /// `PATCH /v1/sessions/{id}`: sets its idle timeout, counted from now.
    pub(super) async fn update_session<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let update: UpdateSessionRequest = self.read_json(request).await?;
        let info = self
            .service
            .update_session(call, id, update.idle_timeout_s)?;
        Ok(json_response(StatusCode::OK, &wire::session_info(info)))
    }

    /// `DELETE /v1/sessions/{id}`: 204.
    pub(super) fn delete_session(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        self.service.delete_session(call, id)?;
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        Ok(response)
    }
}

/// The labels a list asks for: its query's `label=NAME=VALUE` pairs, as a form encodes them
/// (read by `form_urlencoded`: percent-encoded, `+` a space).
fn label_filter(query: Option<&str>) -> Result<BTreeMap<String, String>, ApiError> {
    let invalid = |why: String| ApiError::InvalidRequest(why);
    let query = query.unwrap_or("");
    // form_urlencoded replaces what is not UTF-8; such a query is refused instead.
    if percent_decode_str(query).decode_utf8().is_err() {
        return Err(invalid("a label in the query is not UTF-8".to_owned()));
    }
    let mut labels = BTreeMap::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key != "label" {
            return Err(invalid(format!(
                "unknown query parameter {key:?}: a list of sessions takes label=NAME=VALUE"
            )));
        }
        let Some((name, value)) = value.split_once('=') else {
            return Err(invalid(format!(
                "label={value:?}: a label is asked for as label=NAME=VALUE"
            )));
        };
        if labels.insert(name.to_owned(), value.to_owned()).is_some() {
            return Err(invalid(format!("label {name:?} is asked for twice")));
        }
    }
    Ok(labels)
}

/// 201 with `info`, and where the session is.
fn created(info: SessionInfo) -> Response<Full<Bytes>> {
    let info = wire::session_info(info);
    let mut response = json_response(StatusCode::CREATED, &info);
    if let Ok(location) = HeaderValue::from_str(&paths::session(&info.id)) {
        response.headers_mut().insert(LOCATION, location);
    }
    response
}
