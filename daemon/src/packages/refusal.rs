//! Why an install was refused: each names the package and the reason, in words a model can
//! act on. Nothing of a refused install reaches the session.

use pep508_rs::PackageName;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The daemon installs nothing: no index is configured.
    #[error(
        "this daemon installs no packages: its operator has named no package index (start it \
         with --package-index URL to allow installs)"
    )]
    Off,
    /// The runtime cannot take packages.
    #[error("{0}")]
    Unsupported(String),
    /// The request does not read.
    #[error("{0}")]
    Invalid(String),
    #[error("{name}{} may not be installed: {rule}", needed_by(.by))]
    Denied {
        name: PackageName,
        by: Option<PackageName>,
        rule: String,
    },
    #[error("no package index of this daemon has a package named {name}")]
    NotFound { name: PackageName },
    #[error("{name} cannot be installed: {why}")]
    NoWheel { name: PackageName, why: String },
    #[error("{message}")]
    Conflict { message: String },
    #[error(
        "{name}'s wheel {filename} is larger than the daemon installs ({max} bytes at most, \
         --package-max-wheel-mib)"
    )]
    TooLarge {
        name: PackageName,
        filename: String,
        max: u64,
    },
    #[error(
        "the install needs {wanted} more packages, and a session holds at most {max} \
         (--package-max-per-session), those it has included"
    )]
    TooMany { wanted: usize, max: usize },
    #[error("{filename}'s bytes do not match the SHA-256 its index lists: it was not installed")]
    HashMismatch { filename: String },
    #[error("{filename} cannot be installed: {why}")]
    BadWheel { filename: String, why: String },
    /// The guest could not unpack a wheel (the message says which and why).
    #[error("installing in the sandbox failed: {0}")]
    Failed(String),
    /// The index could not be read: a failure of the network or of the index, not of the
    /// request.
    #[error("the package index could not be read: {0}")]
    Index(String),
}

fn needed_by(by: &Option<PackageName>) -> String {
    by.as_ref()
        .map(|by| format!(" (needed by {by})"))
        .unwrap_or_default()
}

impl Refusal {
    /// The reason as the audit log and metrics name it.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Off => "off",
            Refusal::Unsupported(_) => "unsupported",
            Refusal::Invalid(_) => "invalid",
            Refusal::Denied { .. } => "denied",
            Refusal::NotFound { .. } => "not_found",
            Refusal::NoWheel { .. } => "no_wheel",
            Refusal::Conflict { .. } => "conflict",
            Refusal::TooLarge { .. } => "too_large",
            Refusal::TooMany { .. } => "too_many",
            Refusal::HashMismatch { .. } => "hash_mismatch",
            Refusal::BadWheel { .. } => "bad_wheel",
            Refusal::Failed(_) => "install_failed",
            Refusal::Index(_) => "index_unavailable",
        }
    }
}
