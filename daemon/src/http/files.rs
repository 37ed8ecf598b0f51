//! Files on the wire: a request's files decoded for the service (which checks their paths and
//! caps), and a session's working directory listed, fetched and changed.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyperlightd_api::{
    FileChange as WireChange, FileChanges, FileData, FileInfo, FileList, FileMap, FilesChanged,
};
use percent_encoding::percent_decode_str;

use super::{Api, ApiError, BoxError, json_response};
use crate::executor::Executor;
use crate::job::Files;
use crate::job::files::FileChange;
use crate::service::Call;

/// The request's files as bytes, by path: text as it is, base64 decoded.
pub(super) fn decode(given: FileMap) -> Result<Files, ApiError> {
    given
        .into_iter()
        .map(|(path, data)| {
            let bytes = bytes_of("files", &path, &data)?;
            Ok((path, bytes))
        })
        .collect()
}

/// One file's bytes; bad base64 is the request's fault, named by the field and path.
fn bytes_of(field: &str, path: &str, data: &FileData) -> Result<Vec<u8>, ApiError> {
    data.to_bytes()
        .map_err(|why| ApiError::InvalidRequest(format!("{field}: {path:?}: {why}")))
}

impl<E: Executor> Api<E> {
    /// `GET /v1/sessions/{id}/files`: the session's files, by path, with their sizes.
    pub(super) async fn list_session_files(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let files = self.service.session_files(call, id).await?;
        let list = FileList {
            files: files
                .iter()
                .map(|(path, bytes)| FileInfo {
                    path: path.clone(),
                    size: bytes.len() as u64,
                })
                .collect(),
        };
        Ok(json_response(StatusCode::OK, &list))
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
            .map(|change| match change {
                WireChange::Write { path, data } => Ok(FileChange::Write {
                    bytes: bytes_of("changes", &path, &data)?,
                    path,
                }),
                WireChange::Remove { path } => Ok(FileChange::Remove { path }),
                WireChange::Move { from, to } => Ok(FileChange::Move { from, to }),
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
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
