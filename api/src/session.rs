//! Wire types of sessions: an interpreter whose state carries over from one exec to the next.
//!
//! `POST /v1/sessions` creates one ([`CreateSessionRequest`], answered 201 with a
//! [`SessionInfo`]); `POST /v1/sessions/{id}/exec` runs a program in it ([`SessionExecRequest`],
//! answered with an [`ExecResponse`](crate::ExecResponse) whose `session` says what became of
//! the session's state); `POST /v1/sessions/{id}/fork` copies it (201, [`SessionInfo`]);
//! `GET /v1/sessions/{id}`, `GET /v1/sessions` ([`SessionList`]) and `DELETE
//! /v1/sessions/{id}` (204) do the rest. An unknown, deleted or expired id is 404
//! `session_not_found`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Language;

/// Body of `POST /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    /// The session's language: every exec in it runs in this language's guest.
    pub language: Language,
    /// Seconds the session may stay idle (no exec) before the daemon deletes it. The daemon's
    /// default applies when absent; values above its maximum are capped; 0 is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u64>,
    /// Names and values to find the session by later (`GET /v1/sessions?label=NAME=VALUE`):
    /// what it is for, a conversation, a user. At most 32. A name is letters, digits, `-`, `_`
    /// and `.`, beginning and ending with a letter or digit, at most 128 bytes with an optional
    /// prefix and `/` (`example.com/user`); a value any text without control characters, at
    /// most 1,024 bytes; 8,192 bytes in all. A fork has its origin's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Environment variables every exec of the session sees, as for `POST /v1/exec` (an
    /// exec's own `env` adds to them and wins, for that exec only). A fork has its origin's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: crate::EnvMap,
}

impl CreateSessionRequest {
    /// A session of `language` with the daemon's default idle timeout.
    pub fn new(language: Language) -> Self {
        CreateSessionRequest {
            language,
            idle_timeout_s: None,
            labels: BTreeMap::new(),
            env: BTreeMap::new(),
        }
    }

    /// The same, with the label `name` set to `value`.
    pub fn with_label(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(name.into(), value.into());
        self
    }
}

/// Body of `POST /v1/sessions/{id}/exec`: the body of `POST /v1/exec` without `language`,
/// which is the session's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionExecRequest {
    /// The program's source text. It sees everything earlier execs of the session defined.
    pub code: String,
    /// Wall-clock limit for the request, including time spent waiting for the session's
    /// earlier execs and for a sandbox, but not for the daemon to save the state earlier execs
    /// left (reported in the response's `queued_ms`). The daemon's default applies when absent;
    /// values above its maximum are capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Cap on stdout and stderr together, in bytes, as for `POST /v1/exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<usize>,
    /// What the program may not name, as for `POST /v1/exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::Policy>,
    /// Answer as a stream of events, as for `POST /v1/exec`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Files to add to the session's working directory before the program runs (replacing
    /// any of the same path), as for `POST /v1/exec`. They stay only if the exec's state does.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub files: crate::FileMap,
    /// Tools the program may call, as for `POST /v1/exec` (only this exec has them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<crate::ToolSpec>,
    /// How long one tool call waits for its answer, as for `POST /v1/exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// What the program may reach over HTTP, as for `POST /v1/exec` (this exec only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::Network>,
    /// Environment variables for this exec only, added to the session's (and winning over
    /// them), as for `POST /v1/exec`. What a program sets in its environment itself stays.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: crate::EnvMap,
    /// Python: packages to install before the program runs, as its `%pip install` lines would
    /// (`NAME`, `NAME==VERSION`), from the daemon's package index (`--package-index`). In a
    /// session they stay for its later execs; in a plain exec they are there for this one only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
}

impl SessionExecRequest {
    /// A request with the daemon's default limits.
    pub fn new(code: impl Into<String>) -> Self {
        SessionExecRequest {
            code: code.into(),
            timeout_ms: None,
            max_output_bytes: None,
            policy: None,
            stream: false,
            files: crate::FileMap::new(),
            tools: Vec::new(),
            tool_timeout_ms: None,
            network: None,
            env: BTreeMap::new(),
            packages: Vec::new(),
        }
    }

    /// The same program as a request to `POST /v1/exec`, in a fresh `language` interpreter.
    pub fn with_language(self, language: crate::Language) -> crate::ExecRequest {
        crate::ExecRequest {
            language,
            code: self.code,
            timeout_ms: self.timeout_ms,
            max_output_bytes: self.max_output_bytes,
            policy: self.policy,
            stream: self.stream,
            files: self.files,
            tools: self.tools,
            tool_timeout_ms: self.tool_timeout_ms,
            network: self.network,
            env: self.env,
            packages: self.packages,
        }
    }
}

/// What a session exec did to the session's state: the `session` of its `ExecResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecSession {
    /// The session.
    pub id: String,
    /// True when the exec timed out, ran out of memory or brought its sandbox down: the
    /// session is back in its state from just before this exec, and the next exec sees
    /// everything earlier execs defined. False when the exec's effects were kept (an exception
    /// keeps what the program did before it raised, as in a notebook).
    pub rolled_back: bool,
    /// The checkpoint the exec left the session at: the one it made when its effects were
    /// kept, otherwise the one it started from.
    #[serde(default)]
    pub checkpoint: u64,
    /// Set when the session lost state before this exec: the checkpoint it was restored from,
    /// older than what earlier answers said. This exec started from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from_checkpoint: Option<u64>,
    /// How many earlier execs' effects were lost, though they were answered (with
    /// `restored_from_checkpoint`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_execs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A session, as `POST /v1/sessions`, `POST /v1/sessions/{id}/fork`, `GET /v1/sessions/{id}`
/// and `GET /v1/sessions` describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionInfo {
    /// The session's id: an unguessable token (128 random bits, in hex). Whoever holds it can
    /// use the session.
    pub id: String,
    /// The language its execs run in.
    pub language: Language,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When the daemon deletes it unless an exec comes first (RFC 3339, UTC): the end of its
    /// idle timeout, or of its maximum lifetime if that comes sooner.
    pub expires_at: String,
    /// Seconds it may stay idle, as granted.
    pub idle_timeout_s: u64,
    /// Its labels, as created (a fork's are its origin's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The environment variables its execs see, as created (a fork's are its origin's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Execs that ran in it (not counting those of the session it was forked from).
    pub execs: u64,
    /// Host memory its checkpoints hold, in bytes (0 before its first exec: a new session
    /// starts from the warm sandbox's state, which every sandbox shares). State a fork shares
    /// with its origin is counted for each.
    pub memory_bytes: u64,
    /// The checkpoint it is at (its newest), which its next exec starts from.
    #[serde(default)]
    pub checkpoint: u64,
    /// How many checkpoints it keeps.
    #[serde(default)]
    pub checkpoints: usize,
    /// Set when the session lost state that an answered exec left: the checkpoint it is back
    /// at. Reported until its next exec's answer reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from_checkpoint: Option<u64>,
    /// How many answered execs' effects it lost (with `restored_from_checkpoint`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_execs: u64,
    /// True when the daemon keeps the session in its state directory (`--state-dir`): it
    /// outlives a restart of the daemon, from its newest checkpoint on disk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable: bool,
    /// True when its state is on disk only (parked, after it stayed idle): its next exec
    /// brings it back first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parked: bool,
    /// Set when none of its checkpoints could be brought back from disk after a restart: why.
    /// Every exec in it is refused (410 `session_lost`); delete it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
    /// The packages its execs installed (`%pip install`, or `POST .../packages`), as its
    /// newest checkpoint has them. Only `GET /v1/sessions/{id}` tells them; other answers
    /// leave them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<crate::packages::SessionPackage>,
}

/// One checkpoint of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointInfo {
    /// Its number: 0 where the session started, then the next for each exec whose state was
    /// kept.
    pub checkpoint: u64,
    /// The checkpoint the exec that made it started from; absent for where the session
    /// started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
    /// When it was made (RFC 3339, UTC).
    pub created_at: String,
    /// The `x-request-id` of the exec that made it; absent for where the session started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<u64>,
    /// Host memory it holds, in bytes (0 for a new session's start, the warm state).
    pub bytes: u64,
    /// True once it is on disk, in a daemon with a state directory: from then on it survives
    /// a restart or a crash of the daemon.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub durable: bool,
}

/// Body of `GET /v1/sessions/{id}/checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointList {
    /// The checkpoints the session keeps, oldest first; the last is the one it is at.
    pub checkpoints: Vec<CheckpointInfo>,
}

/// Body of `PATCH /v1/sessions/{id}`: what changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSessionRequest {
    /// Its idle timeout, in seconds (at least 1, capped by the daemon's maximum), counted from
    /// now: the session expires once idle that long.
    pub idle_timeout_s: u64,
}

/// Body of `POST /v1/sessions/{id}/rollback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// The checkpoint to return to: the checkpoints after it are dropped.
    pub checkpoint: u64,
}

/// Body of `POST /v1/sessions/{id}/park`, which may be empty: parking asks for nothing more.
/// The daemon writes the session's newest checkpoint to its state directory (`--state-dir`;
/// without one, 400 `invalid_request`), waits until it is on disk, and drops every state of
/// the session from memory; the next exec, fork or read of its files brings the newest back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParkRequest {}

/// Body of `POST /v1/sessions/{id}/restart`, which may be empty: restarting asks for nothing
/// more. After the execs that arrived before, the session's interpreter starts afresh (as a
/// new session's: no variable, import or module state of its programs) with its working
/// directory and environment kept; this makes its next checkpoint, so a rollback to the one
/// before undoes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {}

/// Body of `POST /v1/sessions/{id}/fork`, which may be empty (a fork of the session's newest
/// checkpoint).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The checkpoint to copy; the newest when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
}

/// Body of `GET /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// Every live session, oldest first.
    pub sessions: Vec<SessionInfo>,
}

/// Session counts and memory for one language, as `/v1/health` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionCounts {
    /// Live sessions.
    pub live: usize,
    /// Host memory their saved state holds, in bytes.
    pub memory_bytes: u64,
    /// Sessions whose state is on disk only (parked).
    #[serde(default)]
    pub parked: usize,
}

/// Sessions kept on disk (`--state-dir`), as `/v1/health` reports them: whether what the
/// daemon holds reaches the disk, never said only in a log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DurableHealth {
    /// The state directory.
    pub dir: String,
    /// False when the last write to it failed (a checkpoint, a session's directory or its
    /// journal), until one succeeds again: what failed is in memory only, and each session's
    /// listing says whether it is still `durable`.
    pub writing: bool,
    /// Writes that failed since the daemon started.
    pub failed_writes: u64,
    /// Why the last failed write failed; absent if none has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The limits sessions live under, as `/v1/health` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionLimits {
    /// Most live sessions, all languages together.
    pub max_sessions: usize,
    /// Most live sessions one caller (uid) may hold.
    #[serde(default)]
    pub max_sessions_per_caller: usize,
    /// Idle timeout of a session that names none, in seconds.
    pub default_idle_timeout_s: u64,
    /// Highest idle timeout a session may ask for, in seconds; higher ones are capped.
    pub max_idle_timeout_s: u64,
    /// Longest a session lives, however busy, in seconds.
    pub max_lifetime_s: u64,
    /// Host memory all sessions' saved state may hold, in bytes; past it, new sessions are
    /// refused.
    pub memory_budget_bytes: u64,
    /// Most checkpoints a session keeps, its newest included (`--session-checkpoints`).
    #[serde(default)]
    pub max_checkpoints: usize,
    /// Most bytes a session's checkpoints may hold together (`--session-checkpoint-mib`); the
    /// newest is kept whatever its size.
    #[serde(default)]
    pub max_checkpoint_bytes: u64,
    /// Set when sessions are kept on disk (`--state-dir`): seconds a session stays idle before
    /// its state leaves memory (`--session-park-after-s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub park_after_s: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_request_parses_with_and_without_idle_timeout() {
        let minimal: CreateSessionRequest =
            serde_json::from_str(r#"{"language":"python"}"#).unwrap();
        assert_eq!(minimal, CreateSessionRequest::new(Language::Python));
        let timed: CreateSessionRequest =
            serde_json::from_str(r#"{"language":"js","idle_timeout_s":60}"#).unwrap();
        assert_eq!(timed.idle_timeout_s, Some(60));
    }

    #[test]
    fn session_exec_request_has_no_language_and_refuses_unknown_fields() {
        let request: SessionExecRequest = serde_json::from_str(r#"{"code":"x = 1"}"#).unwrap();
        assert_eq!(request, SessionExecRequest::new("x = 1"));
        let err = serde_json::from_str::<SessionExecRequest>(r#"{"code":"1","language":"python"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `language`"), "{err}");
    }
}
