//! The seam between E2B's API and hyperlightd: what the translation asks of the daemon, in the
//! API's own types. Two front ends implement it: `hlctl e2b-gateway`, over the daemon's Unix
//! socket with the client crate (a pod's gateway keeps the pod's identity there), and the
//! daemon's own listener (`hyperlightd --e2b-listen`), over its service layer in-process. Either
//! way each call is one caller's: the implementation knows whom it acts for.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use hyper::Method;

use hyperlightd_api::{
    CreateSessionRequest, ErrorKind, ExecEvent, FileChange, FileList, SessionExecRequest,
    SessionInfo,
};

/// The daemon, as one caller sees it.
pub trait Daemon: Send + Sync + 'static {
    /// A running exec's events.
    type Events: Events;

    /// The daemon for one HTTP request, `method` on `path`: every call the request makes goes
    /// through the value returned, so that an implementation that traces or audits can make
    /// the request one unit (one span, its calls inside it) however many calls it takes.
    fn for_request(&self, method: &Method, path: &str) -> Self
    where
        Self: Sized;

    /// A new session.
    fn create_session(
        &self,
        request: CreateSessionRequest,
    ) -> impl Future<Output = Result<SessionInfo, DaemonError>> + Send;

    /// The caller's session `id`.
    fn session(&self, id: &str) -> impl Future<Output = Result<SessionInfo, DaemonError>> + Send;

    /// The caller's sessions that have every label of `labels`.
    fn sessions_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<SessionInfo>, DaemonError>> + Send;

    /// Session `id` expires once idle `seconds` from now.
    fn set_session_idle_timeout(
        &self,
        id: &str,
        seconds: u64,
    ) -> impl Future<Output = Result<(), DaemonError>> + Send;

    /// Session `id` parked: its state on disk only, until its next use.
    fn park_session(&self, id: &str) -> impl Future<Output = Result<(), DaemonError>> + Send;

    /// Session `id`'s interpreter started afresh, its files kept.
    fn restart_session(&self, id: &str) -> impl Future<Output = Result<(), DaemonError>> + Send;

    /// Session `id` ended.
    fn delete_session(&self, id: &str) -> impl Future<Output = Result<(), DaemonError>> + Send;

    /// `request` run in session `id`, its output as it is written and then its outcome
    /// ([`ExecEvent::Result`], or [`ExecEvent::Error`]). Dropping the events stops the program.
    fn session_exec(
        &self,
        id: &str,
        request: SessionExecRequest,
    ) -> impl Future<Output = Result<Self::Events, DaemonError>> + Send;

    /// Session `id`'s files.
    fn session_files(&self, id: &str)
    -> impl Future<Output = Result<FileList, DaemonError>> + Send;

    /// `changes` made to session `id`'s files, all or none.
    fn change_session_files(
        &self,
        id: &str,
        changes: Vec<FileChange>,
    ) -> impl Future<Output = Result<(), DaemonError>> + Send;

    /// The bytes of session `id`'s file at `path`.
    fn session_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<Vec<u8>, DaemonError>> + Send;
}

/// A running exec's events, in order; none after its outcome.
pub trait Events: Send + 'static {
    /// The next event; none once the exec's outcome has been given.
    fn next(&mut self) -> impl Future<Output = Option<Result<ExecEvent, DaemonError>>> + Send;
}

/// Why the daemon did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonError {
    /// What the daemon refused with; none when it could not be asked or its answer was lost.
    pub kind: Option<ErrorKind>,
    /// What happened, in the daemon's (or the client's) words.
    pub message: String,
}

impl DaemonError {
    /// A refusal of the daemon's.
    pub fn refused(kind: ErrorKind, message: impl Into<String>) -> Self {
        DaemonError {
            kind: Some(kind),
            message: message.into(),
        }
    }

    /// The daemon could not be asked, or its answer was lost.
    pub fn unreachable(message: impl Into<String>) -> Self {
        DaemonError {
            kind: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for DaemonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DaemonError {}
