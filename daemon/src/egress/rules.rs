//! Allow rules: which destinations a program may reach. A rule names a scheme, a host (exact,
//! `*.` and a domain for any name under it, or an IP address), a port (the scheme's when
//! absent), optionally the methods allowed (any of [`METHODS`] when absent) and a path prefix
//! (matched on whole segments). The operator's rules come from the daemon's options and its
//! policy file; a request's rules narrow them, each inside one of the operator's.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use super::target::{Host, Scheme, Target, is_dns_name, numeric_form};

/// The methods a program may use at all. `CONNECT` (a tunnel) and `TRACE` (which echoes the
/// request's headers, secrets included) are never allowed.
pub const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Which hosts a rule matches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostPattern {
    /// This name only (lower case, without a trailing dot).
    Name(String),
    /// Any name under this domain (`*.example.com`: `api.example.com`, `a.b.example.com`),
    /// not the domain itself.
    Under(String),
    /// This address, given literally: the one way to reach a loopback, private or link-local
    /// address.
    Ip(IpAddr),
}

/// One allowed destination.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub scheme: Scheme,
    pub host: HostPattern,
    /// The port (the scheme's default when the rule named none).
    pub port: u16,
    /// The methods allowed, upper case; None: any of [`METHODS`].
    pub methods: Option<BTreeSet<String>>,
    /// The path prefix, starting with `/`; None: any path.
    pub path_prefix: Option<String>,
}

impl Rule {
    /// A rule from its one-line form, `[METHODS ]SCHEME://HOST[:PORT][/PATH-PREFIX]`, as the
    /// daemon's options give it (`GET,HEAD https://*.example.com/v1/`).
    pub fn parse(text: &str) -> Result<Rule, String> {
        let rule: hyperlightd_api::AllowRule = text.parse()?;
        Rule::from_api(&rule).map_err(|why| format!("{text:?}: {why}"))
    }

    /// A rule from its wire form (the policy file's and a request's); else why it is not one.
    pub fn from_api(rule: &hyperlightd_api::AllowRule) -> Result<Rule, String> {
        let scheme = Scheme::parse(&rule.scheme)?;
        let host = host_pattern(&rule.host)?;
        if rule.port == Some(0) {
            return Err("port 0 is not a port".to_owned());
        }
        let methods = rule.methods.as_deref().map(methods).transpose()?;
        let path_prefix = rule.path_prefix.as_deref().map(path_prefix).transpose()?;
        Ok(Rule {
            scheme,
            host,
            port: rule.port.unwrap_or(scheme.default_port()),
            methods,
            path_prefix,
        })
    }

    /// Whether a `method` request to `target` is allowed by this rule.
    pub fn allows(&self, method: &str, target: &Target) -> bool {
        self.scheme == target.scheme
            && self.port == target.port
            && host_matches(&self.host, &target.host)
            && self.methods.as_ref().is_none_or(|m| m.contains(method))
            && self
                .path_prefix
                .as_deref()
                .is_none_or(|prefix| under_prefix(&target.path, prefix))
    }

    /// Whether everything this rule allows, `outer` allows too.
    pub fn within(&self, outer: &Rule) -> bool {
        let host = match (&self.host, &outer.host) {
            (inner, outer) if inner == outer => true,
            (HostPattern::Name(name), HostPattern::Under(domain)) => name_under(name, domain),
            (HostPattern::Under(inner), HostPattern::Under(domain)) => name_under(inner, domain),
            _ => false,
        };
        let methods = match (&self.methods, &outer.methods) {
            (_, None) => true,
            (Some(inner), Some(outer)) => inner.is_subset(outer),
            (None, Some(_)) => false,
        };
        let path = match (&self.path_prefix, &outer.path_prefix) {
            (_, None) => true,
            (Some(inner), Some(outer)) => under_prefix(inner, outer),
            (None, Some(_)) => false,
        };
        self.scheme == outer.scheme && self.port == outer.port && host && methods && path
    }
}

impl fmt::Display for Rule {
    /// The one-line form [`Rule::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(methods) = &self.methods {
            let methods: Vec<&str> = methods.iter().map(String::as_str).collect();
            write!(f, "{} ", methods.join(","))?;
        }
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostPattern::Name(name) => write!(f, "{name}")?,
            HostPattern::Under(domain) => write!(f, "*.{domain}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        if self.port != self.scheme.default_port() {
            write!(f, ":{}", self.port)?;
        }
        write!(f, "{}", self.path_prefix.as_deref().unwrap_or(""))
    }
}

/// A host pattern from its text: an IP address, `*.domain`, or a name.
fn host_pattern(text: &str) -> Result<HostPattern, String> {
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(HostPattern::Ip(ip));
    }
    if text.contains('@') {
        return Err("a host has no user name or password (\"user@\")".to_owned());
    }
    let lower = text.to_ascii_lowercase();
    let lower = lower.strip_suffix('.').unwrap_or(&lower);
    let (pattern, name) = match lower.strip_prefix("*.") {
        Some(domain) => (HostPattern::Under(domain.to_owned()), domain),
        None => (HostPattern::Name(lower.to_owned()), lower),
    };
    if !is_dns_name(name) {
        return Err(format!(
            "{text:?} is not a host: a DNS name (ASCII, punycode for others), \"*.\" and a \
             domain, or an IP address"
        ));
    }
    if numeric_form(name) {
        return Err(format!(
            "{text:?} looks like an IPv4 address in a form other than a.b.c.d: write the \
             address as a.b.c.d"
        ));
    }
    Ok(pattern)
}

/// Methods from their names: known ones only, upper case.
fn methods(given: &[String]) -> Result<BTreeSet<String>, String> {
    if given.is_empty() {
        return Err("an empty list of methods allows nothing: leave it out to allow any".into());
    }
    given
        .iter()
        .map(|m| {
            let upper = m.to_ascii_uppercase();
            if METHODS.contains(&upper.as_str()) {
                Ok(upper)
            } else {
                Err(format!(
                    "{m:?} is not a method a rule may allow (one of {})",
                    METHODS.join(", ")
                ))
            }
        })
        .collect()
}

/// A path prefix: starts with '/', no query, no dot segments.
fn path_prefix(prefix: &str) -> Result<String, String> {
    if !prefix.starts_with('/') || prefix.contains(['?', '#', '\\']) {
        return Err(format!(
            "the path prefix {prefix:?} is a path: it starts with '/', and has no '?', '#' or '\\'"
        ));
    }
    if prefix
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(format!(
            "the path prefix {prefix:?} has a '.' or '..' segment"
        ));
    }
    Ok(prefix.to_owned())
}

/// Whether `name` is under `domain` (a subdomain of it, at any depth).
fn name_under(name: &str, domain: &str) -> bool {
    name.strip_suffix(domain)
        .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1)
}

fn host_matches(pattern: &HostPattern, host: &Host) -> bool {
    match (pattern, host) {
        (HostPattern::Name(rule), Host::Name(name)) => rule == name,
        (HostPattern::Under(domain), Host::Name(name)) => name_under(name, domain),
        (HostPattern::Ip(rule), Host::Ip(ip)) => rule == ip,
        _ => false,
    }
}

/// Whether `path` is `prefix` or under it, on whole segments: `/v1` covers `/v1` and `/v1/x`,
/// not `/v10`; `/v1/` covers `/v1/` and `/v1/x`.
pub fn under_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
