//! Where a request goes: a program's URL parsed once, by the host, into what the rules are
//! checked against and what the connection is made to, so that no second reading of the URL
//! (by a resolver, a proxy or the server) can disagree with the one that was checked.

use std::fmt;
use std::net::IpAddr;

use hyper::Uri;

use crate::job::egress::{FetchError, FetchErrorKind};

/// The longest URL a program may give.
pub const MAX_URL: usize = 8 * 1024;

/// The schemes there are: plain HTTP only where a rule names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// A scheme from its name; else why not.
    pub fn parse(text: &str) -> Result<Scheme, String> {
        match text.to_ascii_lowercase().as_str() {
            "https" => Ok(Scheme::Https),
            "http" => Ok(Scheme::Http),
            _ => Err(format!(
                "the scheme {text:?} is not served: https or http only"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A URL's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, lower case, without a trailing dot.
    Name(String),
    /// An IP address given literally.
    Ip(IpAddr),
}

/// A request's destination, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
    /// The path, without the query.
    pub path: String,
    /// The path and the query, as sent in the request line.
    pub path_and_query: String,
}

fn invalid(message: String) -> FetchError {
    FetchError::new(FetchErrorKind::Invalid, message)
}

impl Target {
    /// `url` parsed: an absolute http(s) URL without a user name or password, whose path has no
    /// '.' or '..' segment and no encoded '/' or '\' (which a server may read differently from
    /// the path the rules were checked against). Its fragment is dropped.
    pub fn parse(url: &str) -> Result<Target, FetchError> {
        if url.len() > MAX_URL {
            return Err(invalid(format!(
                "the URL is {} bytes; the most is {MAX_URL}",
                url.len()
            )));
        }
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(invalid(format!(
                "{url:?} is not an absolute URL: give the scheme and the host \
                 (https://example.com/path)"
            )));
        };
        Scheme::parse(scheme).map_err(invalid)?;
        let uri: Uri = url
            .parse()
            .map_err(|e| invalid(format!("{url:?} is not a URL: {e}")))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(invalid(format!(
                "{url:?} is not an absolute URL: give the scheme and the host \
                 (https://example.com/path)"
            )));
        };
        let scheme = Scheme::parse(scheme).map_err(invalid)?;
        if authority.as_str().contains('@') {
            return Err(invalid(format!(
                "{url:?} has a user name or password: credentials go in a header (or are added \
                 by the daemon), never in the URL"
            )));
        }
        let host = parse_host(authority.host())?;
        let port = match authority.port_u16() {
            Some(0) => return Err(invalid("port 0 is not a port".to_owned())),
            Some(port) => port,
            None => scheme.default_port(),
        };
        let path = uri.path().to_owned();
        check_path(&path)?;
        let path_and_query = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
        Ok(Target {
            scheme,
            host,
            port,
            path,
            path_and_query,
        })
    }

    /// The URL a redirect's `Location` names, from this one.
    pub fn join(&self, location: &str) -> Result<Target, FetchError> {
        let url = if location.contains("://") {
            location.to_owned()
        } else if let Some(rest) = location.strip_prefix("//") {
            format!("{}://{rest}", self.scheme.as_str())
        } else if location.starts_with('/') {
            format!("{}{location}", self.origin())
        } else {
            let directory = &self.path[..=self.path.rfind('/').unwrap_or(0)];
            format!("{}{directory}{location}", self.origin())
        };
        Target::parse(&url)
    }

    /// The `Host` header's value: the host, and the port unless it is the scheme's.
    pub fn authority(&self) -> String {
        let host = match &self.host {
            Host::Name(name) => name.clone(),
            Host::Ip(IpAddr::V4(ip)) => ip.to_string(),
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The scheme and the authority: `https://example.com:8443`.
    pub fn origin(&self) -> String {
        format!("{}://{}", self.scheme.as_str(), self.authority())
    }

    /// The host's text (a name, or an address without brackets), as the audit line says it.
    pub fn host_text(&self) -> String {
        match &self.host {
            Host::Name(name) => name.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.origin(), self.path_and_query)
    }
}

/// Whether `name` (lower case, without a trailing dot) is a DNS name: ASCII labels of letters,
/// digits, '-' and '_', each 1 to 63 bytes, 253 bytes in all. Rules' hosts and URLs' alike.
pub fn is_dns_name(name: &str) -> bool {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)
}

/// Whether `name` (a DNS name) is all digits and dots, yet not an address std reads: a form
/// (`127.1`, `0x7f.1`, `10.0.0.1.`) some resolvers read as an address, refused rather than
/// guessed, in URLs and rules alike.
pub fn numeric_form(name: &str) -> bool {
    name.split('.')
        .all(|l| l.bytes().all(|b| b.is_ascii_hexdigit() || b == b'x'))
        && name.bytes().any(|b| b.is_ascii_digit())
        && name
            .split('.')
            .next_back()
            .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_host(text: &str) -> Result<Host, FetchError> {
    let bare = text.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    let name = text.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    if !is_dns_name(name) {
        return Err(invalid(format!(
            "{text:?} is not a host name: ASCII letters, digits, '-' and '.' (punycode for \
             others), or an IP address"
        )));
    }
    if numeric_form(name) {
        return Err(invalid(format!(
            "{text:?} looks like an IPv4 address in a form other than a.b.c.d: write it as \
             four decimal numbers"
        )));
    }
    Ok(Host::Name(name.to_owned()))
}

fn check_path(path: &str) -> Result<(), FetchError> {
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") || path.contains('\\') {
        return Err(invalid(format!(
            "the path {path:?} has an encoded '/' or a '\\', which servers read differently: \
             write the path plainly"
        )));
    }
    let dot = |segment: &str| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    };
    if path.split('/').any(dot) {
        return Err(invalid(format!(
            "the path {path:?} has a '.' or '..' segment: give the path it leads to"
        )));
    }
    Ok(())
}
