//! Packages a job installs before its program runs: wheels the host resolved, fetched and
//! checked (`packages/`), which the guest unpacks where its session's state lives.

use bytes::Bytes;

/// A wheel to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wheel {
    /// The package's normalized name.
    pub name: String,
    pub version: String,
    pub filename: String,
    /// Its SHA-256, lower-case hex, checked on the host.
    pub sha256: String,
    pub bytes: Bytes,
}
