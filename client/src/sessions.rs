//! Typed calls for sessions: an interpreter whose state carries over from one exec to the next
//! (see `hyperlightd_api`'s session types).

use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::Method;
use hyperlightd_api::{
    CheckpointInfo, CheckpointList, CreateSessionRequest, ExecResponse, FileChange, FileChanges,
    FileList, FilesChanged, ForkRequest, InstallRequest, InstallResponse, PackageList,
    RollbackRequest, SessionExecRequest, SessionInfo, SessionList, UpdateSessionRequest, paths,
};

use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::{Client, DEFAULT_RESPONSE_TIMEOUT, Error, decode, encode, session_exec_wait};

/// What a path segment may not carry as is (RFC 3986's pchar, roughly): escaped.
const PATH_SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

impl Client {
    /// Creates a session. Refused with `too_many_sessions` at the daemon's limits.
    pub async fn create_session(
        &self,
        request: &CreateSessionRequest,
    ) -> Result<SessionInfo, Error> {
        let body = encode(request)?;
        let (status, bytes) = self
            .call(
                Method::POST,
                paths::SESSIONS,
                body,
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// Runs a program in session `id`, which sees everything earlier execs defined. As with
    /// [`exec`](Client::exec), a program that fails is still `Ok`; the response's `session`
    /// says whether the session's state was rolled back. An unknown, deleted or expired id is
    /// rejected with `session_not_found`.
    pub async fn session_exec(
        &self,
        id: &str,
        request: &SessionExecRequest,
    ) -> Result<ExecResponse, Error> {
        let body = encode(request)?;
        let wait = session_exec_wait(request.timeout_ms);
        let (status, bytes) = self
            .call(Method::POST, &paths::session_exec(id), body, wait)
            .await?;
        decode(status, &bytes)
    }

    /// A new session whose state is a copy of session `id`'s.
    pub async fn fork_session(&self, id: &str) -> Result<SessionInfo, Error> {
        self.fork_session_at(id, None).await
    }

    /// A new session whose state is a copy of session `id`'s checkpoint `checkpoint` (its
    /// newest when None); `checkpoint_not_found` when it keeps no such checkpoint.
    pub async fn fork_session_at(
        &self,
        id: &str,
        checkpoint: Option<u64>,
    ) -> Result<SessionInfo, Error> {
        let body = match checkpoint {
            Some(checkpoint) => encode(&ForkRequest {
                checkpoint: Some(checkpoint),
            })?,
            None => Bytes::new(),
        };
        let (status, bytes) = self
            .call(
                Method::POST,
                &paths::session_fork(id),
                body,
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// The checkpoints session `id` keeps, oldest first (after the execs that arrived before
    /// this call); the last is the one it is at.
    pub async fn session_checkpoints(&self, id: &str) -> Result<Vec<CheckpointInfo>, Error> {
        let (status, bytes) = self
            .call(
                Method::GET,
                &paths::session_checkpoints(id),
                Bytes::new(),
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode::<CheckpointList>(status, &bytes).map(|list| list.checkpoints)
    }

    /// Returns session `id` to its checkpoint `checkpoint`, dropping the later ones; its next
    /// exec starts from there. `checkpoint_not_found` when it keeps no such checkpoint.
    pub async fn rollback_session(&self, id: &str, checkpoint: u64) -> Result<SessionInfo, Error> {
        let body = encode(&RollbackRequest { checkpoint })?;
        let (status, bytes) = self
            .call(
                Method::POST,
                &paths::session_rollback(id),
                body,
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// Parks session `id` now: its newest state written to the daemon's state directory, then
    /// out of memory (`parked`); its next exec brings it back. `invalid_request` from a daemon
    /// that keeps no sessions on disk (no `--state-dir`).
    pub async fn park_session(&self, id: &str) -> Result<SessionInfo, Error> {
        let (status, bytes) = self
            .call(
                Method::POST,
                &paths::session_park(id),
                Bytes::new(),
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// Starts session `id`'s interpreter afresh (after the execs that arrived before), keeping
    /// its files and environment: its next checkpoint, which a rollback to the one before
    /// undoes.
    pub async fn restart_session(&self, id: &str) -> Result<SessionInfo, Error> {
        let (status, bytes) = self
            .call(
                Method::POST,
                &paths::session_restart(id),
                Bytes::new(),
                session_exec_wait(None),
            )
            .await?;
        decode(status, &bytes)
    }

    /// Installs packages in session `id` (after the execs that arrived before), with what
    /// they need: `requirements` as pip takes them (`NAME`, `NAME==VERSION`). Refused with
    /// `package_refused` (the message names the package and why) when the daemon installs
    /// nothing, or cannot install one of them; nothing changed then.
    pub async fn install_packages(
        &self,
        id: &str,
        requirements: &[&str],
    ) -> Result<InstallResponse, Error> {
        let request = InstallRequest {
            requirements: requirements.iter().map(|r| (*r).to_owned()).collect(),
            timeout_ms: None,
        };
        let (status, bytes) = self
            .call(
                Method::POST,
                &paths::session_packages(id),
                encode(&request)?,
                session_exec_wait(None),
            )
            .await?;
        decode(status, &bytes)
    }

    /// The packages session `id` installed, as its newest checkpoint has them (after the execs
    /// that arrived before this call).
    pub async fn session_packages(&self, id: &str) -> Result<PackageList, Error> {
        let (status, bytes) = self
            .call(
                Method::GET,
                &paths::session_packages(id),
                Bytes::new(),
                session_exec_wait(None),
            )
            .await?;
        decode(status, &bytes)
    }

    /// The files in session `id`'s working directory, by path, with their sizes (after the
    /// execs that arrived before this call).
    pub async fn session_files(&self, id: &str) -> Result<FileList, Error> {
        let (status, bytes) = self
            .call(
                Method::GET,
                &paths::session_files(id),
                Bytes::new(),
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// Makes `changes` to session `id`'s files, in order, all or none (after the execs that
    /// arrived before this call): the checkpoint they made. A path with nothing at it is
    /// `not_found`; one the working directory does not allow, `invalid_request`.
    pub async fn change_session_files(
        &self,
        id: &str,
        changes: Vec<FileChange>,
    ) -> Result<FilesChanged, Error> {
        let body = encode(&FileChanges { changes })?;
        let (status, bytes) = self
            .call(
                Method::POST,
                &paths::session_files(id),
                body,
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// The bytes of the file at `path` in session `id`'s working directory; `not_found` when
    /// there is none.
    pub async fn session_file(&self, id: &str, path: &str) -> Result<Vec<u8>, Error> {
        let encoded: String = path
            .split('/')
            .map(|part| utf8_percent_encode(part, PATH_SEGMENT).to_string())
            .collect::<Vec<_>>()
            .join("/");
        let (_, bytes) = self
            .call(
                Method::GET,
                &format!("{}/{encoded}", paths::session_files(id)),
                Bytes::new(),
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        Ok(bytes.to_vec())
    }

    /// Session `id`.
    pub async fn session(&self, id: &str) -> Result<SessionInfo, Error> {
        let (status, bytes) = self
            .call(
                Method::GET,
                &paths::session(id),
                Bytes::new(),
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// Every live session.
    pub async fn sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        self.sessions_labelled(&BTreeMap::new()).await
    }

    /// Every live session that has all of `labels` (each name with its value).
    pub async fn sessions_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, Error> {
        let query: Vec<String> = labels
            .iter()
            .map(|(name, value)| {
                let label = format!("{name}={value}");
                format!("label={}", utf8_percent_encode(&label, NON_ALPHANUMERIC))
            })
            .collect();
        let path = match query.is_empty() {
            true => paths::SESSIONS.to_owned(),
            false => format!("{}?{}", paths::SESSIONS, query.join("&")),
        };
        let (status, bytes) = self
            .call(Method::GET, &path, Bytes::new(), DEFAULT_RESPONSE_TIMEOUT)
            .await?;
        decode::<SessionList>(status, &bytes).map(|list| list.sessions)
    }

    /// Sets session `id`'s idle timeout to `idle_timeout_s` seconds (capped by the daemon's
    /// maximum), counted from now.
    pub async fn set_session_idle_timeout(
        &self,
        id: &str,
        idle_timeout_s: u64,
    ) -> Result<SessionInfo, Error> {
        let body = encode(&UpdateSessionRequest { idle_timeout_s })?;
        let (status, bytes) = self
            .call(
                Method::PATCH,
                &paths::session(id),
                body,
                DEFAULT_RESPONSE_TIMEOUT,
            )
            .await?;
        decode(status, &bytes)
    }

    /// Deletes session `id` and its state.
    pub async fn delete_session(&self, id: &str) -> Result<(), Error> {
        self.call(
            Method::DELETE,
            &paths::session(id),
            Bytes::new(),
            DEFAULT_RESPONSE_TIMEOUT,
        )
        .await?;
        Ok(())
    }
}
