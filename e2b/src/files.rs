//! envd's files: `GET` and `POST /files` (download, and multipart upload), and the Connect
//! `filesystem.Filesystem` service (JSON, as the SDKs send it): `Stat`, `ListDir`, `Remove`,
//! `Move`, `MakeDir`. All of them are the working directory of the sandbox's default context,
//! through the daemon's session files API (`GET` and `POST /v1/sessions/{id}/files`): a write,
//! a removal or a rename is a change to the session's files that its next `run_code` sees.
//!
//! E2B's paths are absolute under the user's home, `/home/user`, or relative to it; the
//! working directory is that home (and `/work`, where Python's programs see it, names it too).
//! Anything else is not found. It holds files, and the directories that hold them: an empty
//! directory cannot be kept, so `make_dir` of a new one is refused, saying so.

use std::collections::BTreeSet;
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Response, StatusCode};
use hyperlightd_api::{ErrorKind, FileChange, FileData};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Body, Daemon, DaemonError, Refusal};

/// The user's home, where E2B's relative paths are.
pub const HOME: &str = "/home/user";
/// The other name of the working directory: where Python's programs see it.
const WORK: &str = "/work";

/// Serves one of envd's file requests for the sandbox `id` (its default context's session).
pub async fn route<D: Daemon>(
    daemon: &D,
    id: &str,
    method: &Method,
    segments: &[&str],
    query: &str,
    content_type: &str,
    body: Bytes,
) -> Result<Response<Body>, Refusal> {
    match (method, segments) {
        (&Method::GET, ["files"]) => read(daemon, id, &param(query, "path")?).await,
        (&Method::POST, ["files"]) => write(daemon, id, query, content_type, body).await,
        (&Method::POST, ["filesystem.Filesystem", rpc]) => {
            match filesystem(daemon, id, rpc, &body).await {
                Ok(answer) => Ok(super::json(StatusCode::OK, &answer)),
                Err(error) => Ok(error.response()),
            }
        }
        _ => Err(Refusal::NotFound(format!(
            "{method} /{} is not one of envd's file requests",
            segments.join("/")
        ))),
    }
}

/// The session path E2B's `path` names: "" for the working directory itself.
pub fn session_path(path: &str) -> Result<String, Rpc> {
    let relative = if let Some(rest) = under(path, HOME).or_else(|| under(path, WORK)) {
        rest
    } else if path.starts_with('/') {
        return Err(Rpc::NotFound(format!(
            "{path}: a sandbox's files are its working directory, {HOME} (relative paths are \
             there too)"
        )));
    } else {
        path
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(Rpc::NotFound(format!("{path}: above {HOME}")));
                }
            }
            name => parts.push(name),
        }
    }
    Ok(parts.join("/"))
}

/// What of `path` is under `dir` ("" for `dir` itself), if it is.
fn under<'a>(path: &'a str, dir: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(dir)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// E2B's path of the session path `path`.
fn e2b_path(path: &str) -> String {
    if path.is_empty() {
        HOME.to_owned()
    } else {
        format!("{HOME}/{path}")
    }
}

fn param(query: &str, name: &str) -> Result<String, Refusal> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| Refusal::BadRequest(format!("the request names no {name}")))
}

/// `GET /files?path=`: the file's bytes.
async fn read<D: Daemon>(daemon: &D, id: &str, path: &str) -> Result<Response<Body>, Refusal> {
    let at = session_path(path).map_err(Rpc::refusal)?;
    match daemon.session_file(id, &at).await {
        Ok(bytes) => {
            let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed_unsync());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/octet-stream"),
            );
            Ok(response)
        }
        Err(e) if file_missing(&e) => {
            let tree = Tree::of(daemon, id).await?;
            Err(match tree.entry(&at) {
                Some(_) => Refusal::BadRequest(format!("{path} is a directory, not a file")),
                None => Refusal::NotFound(format!("{path}: no such file")),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the daemon said the file is not there (not the session).
fn file_missing(error: &DaemonError) -> bool {
    error.kind == Some(ErrorKind::NotFound)
}

/// `POST /files`: the files of a multipart upload (each part's file name its path, or the
/// query's `path` for one), written as one change.
async fn write<D: Daemon>(
    daemon: &D,
    id: &str,
    query: &str,
    content_type: &str,
    body: Bytes,
) -> Result<Response<Body>, Refusal> {
    let boundary = multer::parse_boundary(content_type).map_err(|_| {
        Refusal::BadRequest(
            "an upload is multipart/form-data, each part a file named by its path".to_owned(),
        )
    })?;
    let given = param(query, "path").ok();
    let whole = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    let mut multipart = multer::Multipart::new(whole, boundary);
    let mut written = Vec::new();
    let mut changes = Vec::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| Refusal::BadRequest(format!("the upload is not well-formed: {e}")))?
    {
        let named = field.file_name().map(str::to_owned);
        let bytes = field
            .bytes()
            .await
            .map_err(|e| Refusal::BadRequest(format!("the upload is not well-formed: {e}")))?;
        let Some(path) = given.clone().or(named) else {
            return Err(Refusal::BadRequest(
                "an uploaded part names no path (its file name)".to_owned(),
            ));
        };
        let at = session_path(&path).map_err(Rpc::refusal)?;
        written.push(json!({
            "name": at.rsplit('/').next().unwrap_or_default(),
            "type": "file",
            "path": e2b_path(&at),
        }));
        changes.push(FileChange::Write {
            path: at,
            data: FileData::from_bytes(bytes.to_vec()),
        });
    }
    if changes.is_empty() {
        return Err(Refusal::BadRequest("the upload holds no file".to_owned()));
    }
    change(daemon, id, changes).await.map_err(Rpc::refusal)?;
    Ok(super::json(StatusCode::OK, &json!(written)))
}

async fn change<D: Daemon>(daemon: &D, id: &str, changes: Vec<FileChange>) -> Result<(), Rpc> {
    daemon
        .change_session_files(id, changes)
        .await
        .map(drop)
        .map_err(Rpc::from)
}

/// The files and directories of a working directory, from its listing.
pub struct Tree {
    files: Vec<(String, u64)>,
    dirs: BTreeSet<String>,
}

impl Tree {
    async fn of<D: Daemon>(daemon: &D, id: &str) -> Result<Tree, DaemonError> {
        let list = daemon.session_files(id).await?;
        Ok(Tree::new(
            list.files.into_iter().map(|f| (f.path, f.size)).collect(),
        ))
    }

    pub fn new(files: Vec<(String, u64)>) -> Tree {
        let dirs = files
            .iter()
            .flat_map(|(path, _)| {
                path.match_indices('/')
                    .map(move |(i, _)| path[..i].to_owned())
            })
            .collect();
        Tree { files, dirs }
    }

    /// What `path` is: Some(size) for a file, Some(None) for a directory, None for nothing.
    pub fn entry(&self, path: &str) -> Option<Option<u64>> {
        if path.is_empty() || self.dirs.contains(path) {
            return Some(None);
        }
        self.files
            .iter()
            .find(|(file, _)| file == path)
            .map(|(_, size)| Some(*size))
    }

    /// The entries under the directory `dir`, `depth` levels down (1: its own), sorted.
    pub fn list(&self, dir: &str, depth: usize) -> Vec<(String, Option<u64>)> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let within = |path: &str| {
            path.strip_prefix(&prefix)
                .is_some_and(|rest| rest.split('/').count() <= depth)
        };
        let mut entries: Vec<(String, Option<u64>)> = self
            .dirs
            .iter()
            .filter(|path| within(path))
            .map(|path| (path.clone(), None))
            .chain(
                self.files
                    .iter()
                    .filter(|(path, _)| within(path))
                    .map(|(path, size)| (path.clone(), Some(*size))),
            )
            .collect();
        entries.sort();
        entries
    }
}

/// envd's `EntryInfo` of the session path `path` (a file of `size`, or a directory), as
/// protobuf's JSON writes it.
pub fn entry_info(path: &str, size: Option<u64>) -> Value {
    let name = if path.is_empty() {
        "user"
    } else {
        path.rsplit('/').next().unwrap_or_default()
    };
    let (kind, mode, permissions) = match size {
        Some(_) => ("FILE_TYPE_FILE", 0o644, "-rw-r--r--"),
        None => ("FILE_TYPE_DIRECTORY", 0o755, "drwxr-xr-x"),
    };
    json!({
        "name": name,
        "type": kind,
        "path": e2b_path(path),
        "size": size.unwrap_or(0).to_string(),
        "mode": mode,
        "permissions": permissions,
        "owner": "user",
        "group": "user",
    })
}

#[derive(Deserialize)]
struct PathRequest {
    path: String,
    #[serde(default)]
    depth: Option<u32>,
}

#[derive(Deserialize)]
struct MoveRequest {
    source: String,
    destination: String,
}

/// One unary call of the `filesystem.Filesystem` service.
async fn filesystem<D: Daemon>(daemon: &D, id: &str, rpc: &str, body: &[u8]) -> Result<Value, Rpc> {
    let parse = |what: &str| Rpc::InvalidArgument(format!("{rpc}: not a {what} request"));
    match rpc {
        "Stat" | "ListDir" | "Remove" | "MakeDir" => {
            let asked: PathRequest = serde_json::from_slice(body).map_err(|_| parse(rpc))?;
            let at = session_path(&asked.path)?;
            path_rpc(daemon, id, rpc, &asked, &at).await
        }
        "Move" => {
            let asked: MoveRequest = serde_json::from_slice(body).map_err(|_| parse(rpc))?;
            let (from, to) = (
                session_path(&asked.source)?,
                session_path(&asked.destination)?,
            );
            let size = Tree::of(daemon, id).await?.entry(&from).ok_or_else(|| {
                Rpc::NotFound(format!("{}: no such file or directory", asked.source))
            })?;
            let moving = FileChange::Move {
                from,
                to: to.clone(),
            };
            change(daemon, id, vec![moving]).await?;
            Ok(json!({"entry": entry_info(&to, size)}))
        }
        _ => Err(Rpc::Unimplemented(format!(
            "filesystem.Filesystem/{rpc}: a sandbox's files change only through the SDK's own \
             calls and run_code, so hyperlightd serves no watchers"
        ))),
    }
}

async fn path_rpc<D: Daemon>(
    daemon: &D,
    id: &str,
    rpc: &str,
    asked: &PathRequest,
    at: &str,
) -> Result<Value, Rpc> {
    let tree = Tree::of(daemon, id).await?;
    let entry = tree.entry(at);
    let missing = || Rpc::NotFound(format!("{}: no such file or directory", asked.path));
    match rpc {
        "Stat" => Ok(json!({"entry": entry_info(at, entry.ok_or_else(missing)?)})),
        "ListDir" => match entry {
            None => Err(missing()),
            Some(Some(_)) => Err(Rpc::InvalidArgument(format!(
                "{}: not a directory",
                asked.path
            ))),
            Some(None) => {
                let depth = asked.depth.filter(|d| *d > 0).unwrap_or(1) as usize;
                let entries: Vec<Value> = tree
                    .list(at, depth)
                    .iter()
                    .map(|(path, size)| entry_info(path, *size))
                    .collect();
                Ok(json!({"entries": entries}))
            }
        },
        "Remove" => {
            if at.is_empty() {
                return Err(Rpc::InvalidArgument(format!(
                    "{HOME} itself cannot be removed"
                )));
            }
            entry.ok_or_else(missing)?;
            let removing = FileChange::Remove {
                path: at.to_owned(),
            };
            change(daemon, id, vec![removing]).await?;
            Ok(json!({}))
        }
        _ => match entry {
            Some(_) => Err(Rpc::AlreadyExists(format!(
                "{}: already exists",
                asked.path
            ))),
            None => Err(Rpc::FailedPrecondition(format!(
                "{}: a sandbox's working directory keeps the directories that hold files, not \
                 empty ones; write a file into it instead (files.write makes its directories)",
                asked.path
            ))),
        },
    }
}

/// A Connect error: its code, and what happened.
#[derive(Debug)]
pub enum Rpc {
    NotFound(String),
    InvalidArgument(String),
    AlreadyExists(String),
    FailedPrecondition(String),
    ResourceExhausted(String),
    Unimplemented(String),
    Unavailable(String),
}

impl From<DaemonError> for Rpc {
    fn from(error: DaemonError) -> Rpc {
        let message = error.to_string();
        let Some(kind) = error.kind else {
            return Rpc::Unavailable(message);
        };
        match kind {
            ErrorKind::NotFound | ErrorKind::SessionNotFound => Rpc::NotFound(message),
            ErrorKind::InvalidRequest => Rpc::InvalidArgument(message),
            ErrorKind::PayloadTooLarge => Rpc::ResourceExhausted(message),
            _ => Rpc::Unavailable(message),
        }
    }
}

impl Rpc {
    /// Connect's code and HTTP status for it.
    fn code(&self) -> (&'static str, StatusCode, &str) {
        match self {
            Rpc::NotFound(m) => ("not_found", StatusCode::NOT_FOUND, m),
            Rpc::InvalidArgument(m) => ("invalid_argument", StatusCode::BAD_REQUEST, m),
            Rpc::AlreadyExists(m) => ("already_exists", StatusCode::CONFLICT, m),
            Rpc::FailedPrecondition(m) => ("failed_precondition", StatusCode::BAD_REQUEST, m),
            Rpc::ResourceExhausted(m) => ("resource_exhausted", StatusCode::TOO_MANY_REQUESTS, m),
            Rpc::Unimplemented(m) => ("unimplemented", StatusCode::NOT_IMPLEMENTED, m),
            Rpc::Unavailable(m) => ("unavailable", StatusCode::SERVICE_UNAVAILABLE, m),
        }
    }

    /// The error as a unary Connect call answers it.
    pub fn response(&self) -> Response<Body> {
        let (code, status, message) = self.code();
        super::json(status, &json!({"code": code, "message": message}))
    }

    /// The error as envd's HTTP API answers it (`/files`).
    fn refusal(self) -> Refusal {
        let (_, status, message) = self.code();
        match status {
            StatusCode::NOT_FOUND => Refusal::NotFound(message.to_owned()),
            StatusCode::BAD_REQUEST | StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS => {
                Refusal::BadRequest(message.to_owned())
            }
            _ => Refusal::Unsupported(message.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests;
