//! Outbound HTTP under the operator's control (issue 30). Off unless the operator allows a
//! destination; then a program's request (JavaScript's `fetch`, Python's `urllib`) reaches the
//! host through its runner's host function, and the host makes it, or refuses it:
//!
//! - [`rules`]: the destinations allowed (the operator's, narrowed by a request's);
//! - [`target`]: the URL, read once, by the host;
//! - [`address`]: the addresses a name may lead to (public ones only);
//! - [`client`]: one exchange on a connection of its own, TLS verified;
//! - [`secrets`]: headers the host adds, whose values the program never sees;
//! - [`options`]: the daemon's options, read into an [`Egress`].
//!
//! [`Egress`] holds what the daemon allows; [`Egress::for_exec`] gives one execution its way
//! out (a [`crate::job::egress::Outbound`]), with its rules, its limits and its audit lines.

pub mod address;
pub mod client;
mod exec;
pub mod options;
pub mod rules;
pub mod secrets;
pub mod target;

use std::sync::Arc;
use std::time::Duration;

use hyperlightd_api::EgressHealth;
use tokio::sync::Semaphore;

use self::client::Client;
pub use self::exec::ExecEgress;
use self::rules::Rule;
use self::secrets::Secret;
use crate::audit::AuditLog;
use crate::job::egress::Outbound;
use crate::job::{Caller, OutputSink};
use crate::metrics::EgressMetrics;

/// What one execution's requests may take together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressLimits {
    /// Requests (each redirect followed counts).
    pub max_requests: u32,
    /// Body bytes sent.
    pub max_sent_bytes: usize,
    /// Body bytes received.
    pub max_received_bytes: usize,
    /// How long one request may take, redirects included.
    pub request_timeout: Duration,
    /// Redirects one request may follow.
    pub max_redirects: u32,
}

/// The daemon's egress: what programs may reach, with which secrets, within which limits.
#[derive(Debug)]
pub struct Egress {
    rules: Vec<Rule>,
    secrets: Vec<Secret>,
    limits: EgressLimits,
    /// Outbound requests in flight across the daemon, at most `max_concurrent`.
    permits: Arc<Semaphore>,
    max_concurrent: usize,
    client: Client,
    /// Where the blocking calls of the guests' threads run their requests.
    runtime: tokio::runtime::Handle,
    audit: Arc<AuditLog>,
    metrics: Option<EgressMetrics>,
}

/// Who an execution's requests are made for, as their audit lines say, and the stream of the
/// caller watching it, if any: once that caller goes away, a request in flight is dropped.
#[derive(Debug, Clone)]
pub struct ExecContext {
    pub request_id: u64,
    pub caller: Caller,
    pub watcher: Option<OutputSink>,
}

/// The parts an [`Egress`] is made of (see [`options`] for where they come from).
#[derive(Debug)]
pub struct EgressParts {
    pub rules: Vec<Rule>,
    pub secrets: Vec<Secret>,
    pub limits: EgressLimits,
    pub max_concurrent: usize,
    pub tls: Arc<rustls::ClientConfig>,
}

impl Egress {
    /// An egress from its parts, running its requests on `runtime`, writing to `audit`.
    pub fn new(
        parts: EgressParts,
        runtime: tokio::runtime::Handle,
        audit: Arc<AuditLog>,
        metrics: Option<EgressMetrics>,
    ) -> Arc<Self> {
        Arc::new(Egress {
            rules: parts.rules,
            secrets: parts.secrets,
            limits: parts.limits,
            permits: Arc::new(Semaphore::new(parts.max_concurrent)),
            max_concurrent: parts.max_concurrent,
            client: Client::new(parts.tls),
            runtime,
            audit,
            metrics,
        })
    }

    /// The rules of an execution that asks for `requested` (None: the operator's): each
    /// requested rule must lie inside one of the operator's; else why not.
    pub fn narrow(&self, requested: Option<Vec<Rule>>) -> Result<Vec<Rule>, String> {
        let Some(requested) = requested else {
            return Ok(self.rules.clone());
        };
        for (i, rule) in requested.iter().enumerate() {
            if !self.rules.iter().any(|outer| rule.within(outer)) {
                return Err(format!(
                    "network.allow[{i}] ({rule}) is not inside any of the daemon's rules: a \
                     request may only narrow them (see /v1/health for them)"
                ));
            }
        }
        Ok(requested)
    }

    /// One execution's way out, allowed `rules` (from [`narrow`](Self::narrow)).
    pub fn for_exec(self: &Arc<Self>, rules: Vec<Rule>, context: ExecContext) -> Arc<dyn Outbound> {
        Arc::new(ExecEgress::new(self.clone(), rules, context))
    }

    /// What `/v1/health` says of it: the rules and the secrets' destinations, never a value.
    pub fn health(&self) -> EgressHealth {
        EgressHealth {
            rules: self.rules.iter().map(ToString::to_string).collect(),
            secrets: self.secrets.iter().map(Secret::describe).collect(),
            max_requests: self.limits.max_requests,
            max_sent_bytes: self.limits.max_sent_bytes as u64,
            max_received_bytes: self.limits.max_received_bytes as u64,
            request_timeout_ms: self.limits.request_timeout.as_millis() as u64,
            max_redirects: self.limits.max_redirects,
            max_concurrent: self.max_concurrent as u32,
        }
    }
}

#[cfg(test)]
mod tests;
