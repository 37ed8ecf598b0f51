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

impl std::str::FromStr for AllowRule {
    type Err = String;

    /// A rule from its one-line form, `[METHODS ]SCHEME://HOST[:PORT][/PATH-PREFIX]`
    /// (`GET,HEAD https://*.example.com/v1/`), as the daemon's `--egress-allow` and `hlctl
    /// --allow` take it. Only split here: the daemon checks each field.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let (methods, url) = match words[..] {
            [url] => (None, url),
            [methods, url] if !methods.contains('/') => (Some(methods), url),
            _ => {
                return Err(format!(
                    "{text:?}: a rule is [METHODS ]SCHEME://HOST[:PORT][/PATH-PREFIX], such as \
                     \"GET,POST https://api.example.com/v1/\""
                ));
            }
        };
        let at = |why: String| format!("{text:?}: {why}");
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| at("no scheme: begin with https:// or http://".to_owned()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let (host, port) = split_port(authority).map_err(at)?;
        Ok(AllowRule {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            port,
            methods: methods.map(|m| m.split(',').map(str::to_owned).collect()),
            path_prefix: path.filter(|p| *p != "/").map(str::to_owned),
        })
    }
}

/// `authority` split into its host and its port, if it names one.
fn split_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or_else(|| "an IPv6 address opened with '[' is not closed".to_owned())?;
        (ip, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .map_err(|_| format!("{p:?} is not a port number"))
        })
        .transpose()?;
    Ok((host, port))
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
