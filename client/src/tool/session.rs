//! The tool's sessions: with [`CodeTool::with_sessions`], a conversation's calls in one language
//! share an interpreter, as a notebook's cells do. The session of a language is created by the
//! conversation's first call in it and deleted by [`CodeTool::close`]; one that expired between
//! calls (or whose state the daemon lost) is replaced, and the model is told that what earlier
//! calls defined is gone.

use std::collections::BTreeMap;

use hyperlightd_api::{
    CreateSessionRequest, ErrorKind, ExecRequest, ExecResponse, Language, SessionExecRequest,
};

use super::CodeTool;
use crate::Error;

/// A conversation's sessions: one per language, made on first use. Calls of the conversation
/// take turns (one lock), which is also the order the model made them in.
#[derive(Debug, Default)]
pub(super) struct Conversation {
    sessions: tokio::sync::Mutex<BTreeMap<Language, String>>,
}

/// What the model is told about the session of a call, besides its outcome.
pub(super) const EXPIRED: &str = "The session of earlier calls in this language had expired \
    (idle too long): this call ran in a new one, and what earlier calls defined is gone. Define \
    again what the program needs.";

/// See [`EXPIRED`].
pub(super) const GONE: &str = "The service lost the whole state of earlier calls in this \
    language (after it restarted, none of it could be brought back): this call ran in a new \
    session, and what earlier calls defined is gone. Define again what the program needs.";

/// See [`EXPIRED`].
pub(super) const LOST: &str = "The service lost what some earlier calls in this language did \
    to the session (it came back from an older checkpoint): names, imports and files they made \
    may be gone. This call ran from that older state; check for what you need and recreate it.";
pub(super) const NO_ROOM: &str = "The service had no room for a session: this call ran in a \
    fresh interpreter, and what it defined will not be kept for the next call.";

impl CodeTool {
    /// The same tool, keeping state across calls: a call sees the variables, functions and
    /// imports of the conversation's earlier calls in its language (one session per language,
    /// created by the first call in it). A call that times out, runs out of memory or crashes
    /// is rolled back. Clones of the tool share its sessions; [`close`](Self::close) deletes
    /// them.
    pub fn with_sessions(self) -> CodeTool {
        CodeTool {
            conversation: Some(std::sync::Arc::default()),
            ..self
        }
    }

    /// Whether calls share state (see [`with_sessions`](Self::with_sessions)).
    pub fn keeps_state(&self) -> bool {
        self.conversation.is_some()
    }

    /// Deletes the conversation's sessions (their state is gone); the next call starts new
    /// ones. A session the daemon has already dropped is no error.
    pub async fn close(&self) {
        let Some(conversation) = &self.conversation else {
            return;
        };
        let mut sessions = conversation.sessions.lock().await;
        for (_, id) in std::mem::take(&mut *sessions) {
            let _ = self.client.delete_session(&id).await;
        }
    }

    /// Runs `request` in the conversation's session of its language, made if need be. Returns
    /// the answer and what the model must be told about the session, if anything.
    pub(super) async fn exec_in_session(
        &self,
        conversation: &Conversation,
        request: ExecRequest,
    ) -> Result<(ExecResponse, Option<&'static str>), Error> {
        let mut sessions = conversation.sessions.lock().await;
        let language = request.language;
        let exec = SessionExecRequest {
            code: request.code.clone(),
            timeout_ms: request.timeout_ms,
            max_output_bytes: request.max_output_bytes,
            policy: request.policy.clone(),
            stream: false,
            files: request.files.clone(),
            tools: request.tools.clone(),
            tool_timeout_ms: request.tool_timeout_ms,
            network: request.network.clone(),
            env: request.env.clone(),
            packages: request.packages.clone(),
        };
        let mut notice = None;
        if let Some(id) = sessions.get(&language) {
            match self.session_exec(id, &exec).await {
                Err(e) if kind(&e) == Some(ErrorKind::SessionNotFound) => {
                    sessions.remove(&language);
                    notice = Some(EXPIRED);
                }
                Err(e) if kind(&e) == Some(ErrorKind::SessionLost) => {
                    if let Some(id) = sessions.remove(&language) {
                        let _ = self.client.delete_session(&id).await;
                    }
                    notice = Some(GONE);
                }
                answered => {
                    return answered.map(|response| {
                        let notice = lost(&response);
                        (response, notice)
                    });
                }
            }
        }
        let created = self
            .client
            .create_session(&CreateSessionRequest::new(language))
            .await;
        match created {
            Ok(session) => {
                let id = sessions.entry(language).or_insert(session.id);
                let response = self.session_exec(id, &exec).await?;
                Ok((response, notice))
            }
            // The daemon, or this caller, holds as many sessions as it may.
            Err(e)
                if matches!(
                    kind(&e),
                    Some(ErrorKind::TooManySessions | ErrorKind::QuotaExceeded)
                ) =>
            {
                let response = self.exec(&request).await?;
                Ok((response, Some(NO_ROOM)))
            }
            Err(e) => Err(e),
        }
    }
}

impl CodeTool {
    async fn session_exec(
        &self,
        id: &str,
        request: &SessionExecRequest,
    ) -> Result<ExecResponse, Error> {
        if self.tools.is_empty() {
            self.client.session_exec(id, request).await
        } else {
            self.client
                .session_exec_with_tools(id, request, &self.tools)
                .await
        }
    }
}

/// What the model must be told when the session lost earlier calls' state.
fn lost(response: &ExecResponse) -> Option<&'static str> {
    let lost = response.session.as_ref().is_some_and(|s| s.lost_execs > 0);
    lost.then_some(LOST)
}

fn kind(error: &Error) -> Option<ErrorKind> {
    match error {
        Error::Rejected { error, .. } => Some(error.kind),
        _ => None,
    }
}
