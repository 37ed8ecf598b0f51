//! What `/v1/health` says about callers (what one uid may use at once) and the audit log, and
//! how a delegate names the caller it acts for.

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

/// The header in which a delegate names the caller it acts for: a gateway the operator trusts
/// (`hyperlightd --delegate-uid`) that serves several callers on one listener, such as
/// `hlctl e2b-gateway --api-keys`. The daemon counts each name as a caller of its own (quotas,
/// sessions, the audit log, tool answers); from any other uid the header is refused.
pub const ON_BEHALF_OF_HEADER: &str = "hyperlightd-on-behalf-of";

/// The longest name a delegate may act for.
pub const MAX_DELEGATED_NAME: usize = 64;

/// Checks a name a delegate acts for: 1 to [`MAX_DELEGATED_NAME`] ASCII letters, digits, `.`,
/// `_`, `-` and `@`, so that it reads the same in a header, a log line and a file name. The
/// error says what is wrong.
pub fn check_delegated_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@');
    if name.is_empty() || name.len() > MAX_DELEGATED_NAME {
        return Err(format!(
            "a caller's name is 1 to {MAX_DELEGATED_NAME} characters; {:?} has {}",
            name,
            name.len()
        ));
    }
    match name.chars().find(|&c| !allowed(c)) {
        Some(c) => Err(format!(
            "a caller's name is ASCII letters, digits, '.', '_', '-' and '@'; {name:?} has {c:?}"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delegated_name_is_short_and_plain() {
        for good in ["alice", "team-a.prod", "agent_7@tenant", &"x".repeat(64)] {
            assert_eq!(check_delegated_name(good), Ok(()), "{good}");
        }
        for bad in ["", &"x".repeat(65), "a b", "a/b", "é", "a\nb"] {
            assert!(check_delegated_name(bad).is_err(), "{bad:?}");
        }
    }
}
