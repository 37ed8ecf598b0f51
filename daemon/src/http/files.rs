//! A session's working directory listed, fetched and changed (`service::wire` decodes what
//! the wire carries; the service checks paths and caps).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyperlightd_api::{FileChanges, FilesChanged};
use percent_encoding::percent_decode_str;

use super::{Api, ApiError, BoxError, json_response};
use crate::executor::Executor;
use crate::service::{Call, wire};

impl<E: Executor> Api<E> {
    /// `GET /v1/sessions/{id}/files`: the session's files, by path, with their sizes.
    pub(super) async fn list_session_files(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let files = self.service.session_files(call, id).await?;
        Ok(json_response(StatusCode::OK, &wire::file_list(&files)))
    }

    /// `POST /v1/sessions/{id}/files`: changes to the session's files, all or none; the
    /// checkpoint they made.
    pub(super) async fn change_session_files<B>(
        &self,
        request: Request<B>,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let asked: FileChanges = self.read_json(request).await?;
        let changes = asked
            .changes
            .into_iter()
            .map(wire::file_change)
            .collect::<Result<Vec<_>, _>>()?;
        let checkpoint = self.service.change_session_files(call, id, changes).await?;
        Ok(json_response(StatusCode::OK, &FilesChanged { checkpoint }))
    }

    /// `GET /v1/sessions/{id}/files/{path}`: one file's bytes.
    pub(super) async fn get_session_file(
        &self,
        call: &Call,
        id: &str,
        encoded: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let path = percent_decode_str(encoded)
            .decode_utf8()
            .map_err(|_| ApiError::InvalidRequest("the file's path is not UTF-8".to_owned()))?;
        let files = self.service.session_files(call, id).await?;
        let bytes = files.get(path.as_ref()).ok_or_else(|| {
            ApiError::NotFound(format!(
                "the session has no file {path:?} (GET {} lists its files)",
                hyperlightd_api::paths::session_files(id)
            ))
        })?;
        let mut response = Response::new(Full::new(Bytes::from(bytes.clone())));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        Ok(response)
    }
}
