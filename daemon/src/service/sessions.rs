//! The session operations: create, fork, read, list, delete, a session's files and its
//! checkpoints. Creating and forking take new work (refused while draining); every change is
//! audited. A session belongs to the caller that created it: to anyone else it does not exist.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Call, Refusal, Service};
use crate::audit::{Owner, SessionRecord};
use crate::executor::Executor;
use crate::job::{CheckpointInfo, Env, Files, Labels, Language, SessionInfo};

impl<E: Executor> Service<E> {
    /// A new session of `language` for the caller, idle for at most `idle_timeout_s` seconds
    /// (the daemon's default when None, capped at its maximum), with `labels` and `env`.
    pub fn create_session(
        &self,
        call: &Call,
        language: Language,
        idle_timeout_s: Option<u64>,
        labels: BTreeMap<String, String>,
        env: BTreeMap<String, String>,
    ) -> Result<SessionInfo, Refusal> {
        self.taking_work()?;
        if idle_timeout_s == Some(0) {
            return Err(Refusal::InvalidRequest(
                "idle_timeout_s must be at least 1 second; leave it out for the daemon's default"
                    .to_owned(),
            ));
        }
        let labels = Labels::new(labels).map_err(Refusal::InvalidRequest)?;
        let env = Env::new(env).map_err(Refusal::InvalidRequest)?;
        let idle = idle_timeout_s.map(Duration::from_secs);
        let owner = call.caller.principal();
        let info = self
            .executor
            .create_session(&owner, language, idle, labels, env)?;
        self.audit_session(
            "session_created",
            call,
            &info.id,
            language,
            Audited::default(),
        );
        Ok(info)
    }

    /// A new session whose state is a copy of the caller's session `id`'s checkpoint
    /// `checkpoint` (its newest when None). Waits for the execs that arrived before it, at most
    /// the longest time limit an exec may have.
    pub async fn fork_session(
        &self,
        call: &Call,
        id: &str,
        checkpoint: Option<u64>,
    ) -> Result<SessionInfo, Refusal> {
        self.taking_work()?;
        let wait = self.limits.max_timeout;
        let info = self
            .executor
            .fork_session(&call.caller.principal(), id, checkpoint, wait)
            .await?;
        let record = Audited {
            from: Some(id),
            checkpoint,
        };
        self.audit_session("session_forked", call, &info.id, info.language, record);
        Ok(info)
    }

    /// The checkpoints of the caller's session `id`, oldest first, as the execs that arrived
    /// before left them (waiting at most the longest time limit an exec may have).
    pub async fn session_checkpoints(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Vec<CheckpointInfo>, Refusal> {
        let wait = self.limits.max_timeout;
        Ok(self
            .executor
            .session_checkpoints(&call.caller.principal(), id, wait)
            .await?)
    }

    /// Returns the caller's session `id` to its checkpoint `checkpoint`, dropping the later
    /// ones, after the execs that arrived before (waiting at most the longest time limit an
    /// exec may have).
    pub async fn rollback_session(
        &self,
        call: &Call,
        id: &str,
        checkpoint: u64,
    ) -> Result<SessionInfo, Refusal> {
        let wait = self.limits.max_timeout;
        let info = self
            .executor
            .rollback_session(&call.caller.principal(), id, checkpoint, wait)
            .await?;
        let record = Audited {
            from: None,
            checkpoint: Some(checkpoint),
        };
        self.audit_session("session_rolled_back", call, id, info.language, record);
        Ok(info)
    }

    /// Parks the caller's session `id` now (see [`crate::session::Sessions::park_now`]),
    /// after the execs that arrived before (waiting at most the longest time limit an exec may
    /// have, and as long again for its state to reach the disk).
    pub async fn park_session(&self, call: &Call, id: &str) -> Result<SessionInfo, Refusal> {
        let wait = self.limits.max_timeout;
        let owner = call.caller.principal();
        let info = self.executor.park_session(&owner, id, wait).await?;
        self.audit_session(
            "session_parked",
            call,
            id,
            info.language,
            Audited::default(),
        );
        Ok(info)
    }

    /// The caller's session `id`.
    pub fn session(&self, call: &Call, id: &str) -> Result<SessionInfo, Refusal> {
        Ok(self.executor.session(&call.caller.principal(), id)?)
    }

    /// The caller's sessions that have all of `labels`, oldest first.
    pub fn sessions(
        &self,
        call: &Call,
        labels: BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, Refusal> {
        let labels = Labels::new(labels).map_err(Refusal::InvalidRequest)?;
        Ok(self.executor.sessions(&call.caller.principal(), &labels))
    }

    /// Sets the caller's session `id`'s idle timeout to `idle_timeout_s` seconds (capped at the
    /// daemon's maximum), counted from now.
    pub fn update_session(
        &self,
        call: &Call,
        id: &str,
        idle_timeout_s: u64,
    ) -> Result<SessionInfo, Refusal> {
        if idle_timeout_s == 0 {
            return Err(Refusal::InvalidRequest(
                "idle_timeout_s must be at least 1 second; delete the session to end it now"
                    .to_owned(),
            ));
        }
        let idle = Duration::from_secs(idle_timeout_s);
        let info = self
            .executor
            .set_session_idle_timeout(&call.caller.principal(), id, idle)?;
        self.audit_session(
            "session_updated",
            call,
            id,
            info.language,
            Audited::default(),
        );
        Ok(info)
    }

    /// Deletes the caller's session `id`.
    pub fn delete_session(&self, call: &Call, id: &str) -> Result<(), Refusal> {
        let language = self.executor.delete_session(&call.caller.principal(), id)?;
        self.audit_session("session_deleted", call, id, language, Audited::default());
        Ok(())
    }

    /// The working directory of the caller's session `id`, as the execs that arrived before
    /// left it (waiting at most the longest time limit an exec may have).
    pub async fn session_files(&self, call: &Call, id: &str) -> Result<Arc<Files>, Refusal> {
        let wait = self.limits.max_timeout;
        Ok(self
            .executor
            .session_files(&call.caller.principal(), id, wait)
            .await?)
    }

    pub(super) fn audit_session(
        &self,
        event: &str,
        call: &Call,
        session: &str,
        language: Language,
        audited: Audited<'_>,
    ) {
        let owner = call.caller.principal();
        self.callers.audit.session(
            event,
            &SessionRecord {
                request_id: Some(call.id),
                caller: Some(call.caller.clone()),
                owner: Owner(&owner),
                session,
                language,
                from: audited.from,
                reason: None,
                checkpoint: audited.checkpoint,
            },
        );
    }
}

/// What a session's audit line says beyond the session itself.
#[derive(Debug, Default)]
pub(super) struct Audited<'a> {
    /// The session a fork copies.
    pub from: Option<&'a str>,
    /// The checkpoint a fork starts from, a rollback returns to, or a change of files made.
    pub checkpoint: Option<u64>,
}
