//! For the daemon's unit tests: an audit log in a temporary directory, and its lines read back.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{AuditLog, AuditOptions};

/// An audit log writing to `audit.log` in `dir` (with the code when `with_code`), and its path.
pub(crate) fn log_in(dir: &tempfile::TempDir, with_code: bool) -> (AuditLog, PathBuf) {
    let path = dir.path().join("audit.log");
    let options = AuditOptions {
        audit_log: Some(path.clone()),
        audit_code: with_code,
    };
    (AuditLog::open(&options).expect("an audit log"), path)
}

/// The lines of the audit log at `path`, each parsed as JSON.
pub(crate) fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the audit log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}
