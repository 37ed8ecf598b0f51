//! What `/v1/health` says about callers (what one uid may use at once) and the audit log.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Language;

/// What one caller (a uid, from the connection's peer credentials) may use at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CallerLimits {
    /// Executions one caller may have in flight (running or waiting for a sandbox), per
    /// language; past it, `429 quota_exceeded`.
    pub max_execs: BTreeMap<Language, usize>,
    /// Live sessions one caller may hold; past it, `429 quota_exceeded`.
    pub max_sessions: usize,
    /// Whether only listed uids and gids (and the daemon's own uid) may call; otherwise anyone
    /// who can open the socket.
    pub allow_list: bool,
}

/// The audit log's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditHealth {
    /// Where lines go: a file's path, `"stderr"`, or `"off"`.
    pub destination: String,
    /// Lines written since the daemon started.
    pub lines: u64,
    /// Lines that could not be written (full disk, unwritable file) and are lost.
    pub failed_lines: u64,
    /// Why the last failed line failed; absent if none has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
