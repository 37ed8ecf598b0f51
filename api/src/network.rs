//! Outbound HTTP: the destinations a request allows its program (narrowing the daemon's), and
//! what `/v1/health` says of the daemon's egress.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a program may reach over HTTP. A request's `network` narrows the daemon's rules (each
/// of its rules must lie inside one of the daemon's, or the request is refused); it cannot
/// widen them, and without egress on the daemon it is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// The destinations allowed; an empty list allows none.
    pub allow: Vec<AllowRule>,
}

/// One allowed destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AllowRule {
    /// `https`, or `http`.
    pub scheme: String,
    /// A DNS name (`api.example.com`), `*.` and a domain (`*.example.com`: any name under it,
    /// not the domain itself), or an IP address (the only way to reach a loopback, private or
    /// link-local address).
    pub host: String,
    /// The port; the scheme's (443, 80) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The methods allowed (`GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`, `OPTIONS`); any of
    /// them when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// The paths allowed: this one and those under it, on whole segments (`/v1` allows `/v1`
    /// and `/v1/models`, not `/v10`); any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
}

/// The daemon's egress, as `/v1/health` shows it (absent when programs can reach nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EgressHealth {
    /// The destinations allowed, one rule each (`GET,POST https://api.example.com/v1/`).
    pub rules: Vec<String>,
    /// The headers the daemon adds to requests, by destination and source (never their
    /// values): `https://api.example.com authorization: from env:EXAMPLE_TOKEN`.
    pub secrets: Vec<String>,
    /// Requests one execution may make (each redirect followed counts).
    pub max_requests: u32,
    /// Body bytes one execution may send.
    pub max_sent_bytes: u64,
    /// Body bytes one execution may receive.
    pub max_received_bytes: u64,
    /// How long one request may take, redirects included, in milliseconds.
    pub request_timeout_ms: u64,
    /// Redirects one request may follow.
    pub max_redirects: u32,
    /// Outbound requests in flight at once across the daemon.
    pub max_concurrent: u32,
}
