//! Outbound HTTP under the operator's control. Off unless the operator allows a
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
//!
//! # Design: the host makes the request
//! Off unless the operator allows a destination (`--egress-allow`, the policy file's
//! `network.allow`). A program's request leaves its guest the way a tool call does, as one host
//! function (`fetch`: the request as JSON, its body in base64; JavaScript's `hl.fetch` behind
//! `fetch()` in `guest/javascript/fetch.js`, WebAssembly Python's `fetch` import in the WIT world,
//! native Python's `fetch` host function, with its argument and answer in pieces when large; both
//! Pythons behind urllib's handlers in `hyperlightd_program.py`). `RunHost` (`sandbox/run_host.rs`)
//! reads it and hands it to the job's `Outbound` (`job/egress.rs`: the request, the response, the
//! error kinds the program sees), which the service made for the exec (`Egress::for_exec`) from
//! the operator's rules, narrowed by the request's `network` (each of its rules must lie inside one
//! of the operator's: `Rule::within`). The guest's worker thread blocks on the daemon's runtime
//! (`Handle::block_on`) until the response is whole; the request counts against the program's own
//! time limit (the deadline is not paused, unlike a tool wait), and never outlasts it.
//!
//! The threat model: the program is hostile, and so may be the names it asks for. So the host
//! reads the URL once (`egress/target.rs`, hyper's `Uri`: absolute http(s) only, no user info, no
//! dot segments or encoded slashes in the path, no numeric host forms other than a.b.c.d) and
//! everything after uses that reading: the rules match it (`egress/rules.rs`), the name is resolved
//! once and every address checked (`egress/address.rs`: public addresses only, IPv4 carried in
//! IPv6 judged as IPv4; a special address only when given literally and named by a rule), and the
//! client (`egress/client.rs`) connects to the address that passed (no second resolution: a name
//! that rebinds is judged by what it resolved to), on a connection of its own that ends with the
//! request, sends origin form with its own `Host`, verifies TLS against the system's roots
//! (rustls, ring, rustls-native-certs; `--egress-ca-file` adds a CA), and reads the head within 64
//! KiB and 100 fields and the body within what the exec may still receive and its sandbox can take
//! in one answer. The program's hop-by-hop headers are dropped; CONNECT and TRACE are never sent.
//! Redirects are followed by the host (`egress/exec.rs`), each hop checked and counted and
//! audited; credentials the program set are dropped when a hop leaves the origin. Secrets
//! (`egress/secrets.rs`) are read at startup from the daemon's environment or files, held as
//! sensitive header values (redacted in `Debug`), set on a hop whose destination their rule
//! matches, after the program's headers (replacing any of the same name), and never written to an
//! error, the log or the audit line; a hop to another destination goes without them. What this
//! does not cover: a destination that echoes request headers back hands its secret to the program,
//! and an allowed destination is reachable with whatever the program sends it.
//!
//! Each hop is an `egress` audit line (the exec's request id and caller, method, scheme, host,
//! port, path without the query, status, bytes, time, or the error the program was told) and a
//! count in `hyperlightd_egress_*`. A daemon-wide semaphore (`--egress-max-concurrent`) bounds
//! requests in flight; per exec, requests, bytes sent and bytes received are counted in the exec's
//! `ExecEgress`, which is dropped with the job: nothing of one exec's egress reaches the next.

pub mod address;
pub mod client;
pub mod collector;
mod exec;
pub mod helper;
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
    pub client: Client,
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
            client: parts.client,
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
mod fuzz;
#[cfg(test)]
mod tests;
