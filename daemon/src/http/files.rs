//! Files on the wire: a request's files checked and decoded for the executor, a program's
//! files encoded for its response, and a session's working directory listed and fetched.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use hyperlightd_api::{FileInfo, FileList, FileMap};
use percent_encoding::percent_decode_str;

use super::{Api, ApiError, json_response};
use crate::executor::Executor;
use crate::job::Files;
use crate::job::files;

impl<E: Executor> Api<E> {
    /// The request's files as the executor takes them: every path a plain relative name in
    /// the working directory, every content decoded, all within the caps.
    pub(super) fn files_of(&self, given: FileMap) -> Result<Files, ApiError> {
        let limits = self.limits.files;
        let mut files = Files::new();
        for (path, data) in given {
            if let Err(e) = files::check_given(&path) {
                return Err(ApiError::InvalidRequest(format!(
                    "files: {path:?} is not a path the working directory allows ({e}): give a \
                     relative path of plain names joined by '/' (no '.', '..', empty names, \
                     leading '/' or control characters)"
                )));
            }
            let bytes = data
                .to_bytes()
                .map_err(|why| ApiError::InvalidRequest(format!("files: {path:?}: {why}")))?;
            files.insert(path, bytes);
        }
        if let Some((dir, path)) = files::clash(&files) {
            return Err(ApiError::InvalidRequest(format!(
                "files: {dir:?} is given as a file and as the directory of {path:?}"
            )));
        }
        files::check_fits(&files, limits).map_err(|e| {
            let cap = files::cap_in_words(e, limits);
            ApiError::FilesOverCap(format!(
                "the request's files are more than a working directory may hold: at most {cap} \
                 (--max-files, --max-file-bytes)"
            ))
        })?;
        Ok(files)
    }

    /// `GET /v1/sessions/{id}/files`: the session's files, by path, with their sizes.
    pub(super) async fn list_session_files(
        &self,
        owner: u32,
        id: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let wait = self.limits.max_timeout;
        let files = self.executor.session_files(owner, id, wait).await?;
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

    /// `GET /v1/sessions/{id}/files/{path}`: one file's bytes.
    pub(super) async fn get_session_file(
        &self,
        owner: u32,
        id: &str,
        encoded: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError> {
        let path = percent_decode_str(encoded)
            .decode_utf8()
            .map_err(|_| ApiError::InvalidRequest("the file's path is not UTF-8".to_owned()))?;
        let wait = self.limits.max_timeout;
        let files = self.executor.session_files(owner, id, wait).await?;
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
