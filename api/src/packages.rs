//! Packages installed at runtime in Python sessions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /v1/sessions/{id}/packages`: install packages in the session, with what they need,
/// after the execs that arrived before. They are importable from its next exec on, kept in its
/// checkpoints (a rollback past the install removes them), forked and parked with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallRequest {
    /// Requirements, as pip takes them: `NAME`, `NAME==VERSION`, `NAME>=1.2,<2`,
    /// `NAME[extra]`, with markers (`; python_version >= "3.10"`). At most 64.
    pub requirements: Vec<String>,
    /// The most milliseconds the install may take in the session (the default exec timeout
    /// when absent, capped at the maximum); fetching from the index is not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A package an install put in a session, or found there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PackageInstalled {
    /// Its normalized name.
    pub name: String,
    pub version: String,
    /// The wheel installed, and its SHA-256 (checked against the index's).
    pub wheel: String,
    pub sha256: String,
    /// Whether its wheel came from the daemon's cache rather than the index.
    pub cached: bool,
    /// The package whose requirement brought it in; absent for one asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_by: Option<String>,
}

/// A package asked for that was already there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PackagePresent {
    pub name: String,
    pub version: String,
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InstallResponse {
    /// The packages installed, dependencies included, in the order they were resolved.
    pub installed: Vec<PackageInstalled>,
    /// Packages asked for that the runtime or the session already had, at a version that
    /// satisfies the request (never replaced).
    pub present: Vec<PackagePresent>,
    /// The checkpoint the session is at once the install is made (unchanged when nothing was
    /// installed).
    pub checkpoint: u64,
}

/// `GET /v1/sessions/{id}/packages`: what the session installed, in the order it did, as its
/// newest checkpoint has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PackageList {
    pub packages: Vec<SessionPackage>,
}

/// A package a session installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionPackage {
    pub name: String,
    pub version: String,
    /// Its wheel's SHA-256.
    pub sha256: String,
}

/// Installs, as `/v1/health` shows them (absent when the daemon installs nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PackagesHealth {
    /// The indexes wheels come from, in the order they are asked.
    pub indexes: Vec<String>,
    /// Names that may be installed (`*` ends a prefix; alone, any).
    pub allow: Vec<String>,
    /// Names that may not, whatever `allow` says.
    pub deny: Vec<String>,
    /// The largest wheel installed.
    pub max_wheel_bytes: u64,
    /// The most packages one session installs, dependencies included.
    pub max_per_session: u32,
    /// Where wheels are kept by their SHA-256, what they take and the most they may.
    pub cache_dir: String,
    pub cache_bytes: u64,
    pub cache_max_bytes: u64,
}
