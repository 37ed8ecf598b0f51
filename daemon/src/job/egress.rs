//! Outbound HTTP a program asks for: the request as a program builds it, the response
//! it gets back, and the handle a guest's host function makes it through. Who may be reached,
//! with which secrets and within which limits is decided behind [`Outbound`] (the daemon's
//! egress module); nothing here does I/O.

use std::fmt;

use super::Deadline;

/// A request as the program built it, before any check.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// The method, as given (`GET`, `POST`, ...).
    pub method: String,
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// Header fields in order, names as given.
    pub headers: Vec<(String, String)>,
    /// The body (empty: none).
    pub body: Vec<u8>,
    /// Whether redirects are followed (by the host, each hop checked); false: a redirect is
    /// the response.
    pub follow_redirects: bool,
    /// The most body bytes of one response the program's sandbox can take.
    pub max_response_bytes: usize,
}

impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &self.headers.len())
            .field("body", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// What came back: the last response of the chain of redirects followed.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Its status code.
    pub status: u16,
    /// The URL it came from (after redirects).
    pub url: String,
    /// Whether a redirect was followed to reach it.
    pub redirected: bool,
    /// Its header fields in order (names lower case; values not UTF-8 read as Latin-1).
    pub headers: Vec<(String, String)>,
    /// Its body, whole.
    pub body: Vec<u8>,
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .field("url", &self.url)
            .field("body", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// Why a request brought no response. The program sees the kind and the message, which never
/// hold a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FetchError {
    pub kind: FetchErrorKind,
    pub message: String,
}

/// The kinds of [`FetchError`], as the runners name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchErrorKind {
    /// The request is malformed (not an absolute http(s) URL, a bad header, a forbidden
    /// method): nothing was sent.
    Invalid,
    /// The destination is not allowed (no rule names it, or it resolves to an address that is
    /// refused): nothing was sent.
    Refused,
    /// One of the exec's limits was reached (requests, bytes, a response's size).
    Limit,
    /// The request did not finish within its time (or the program's).
    Timeout,
    /// The network or the server failed (no answer, TLS, a broken response).
    Failed,
}

impl FetchErrorKind {
    /// The kind's name, as the runners' errors carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            FetchErrorKind::Invalid => "invalid",
            FetchErrorKind::Refused => "refused",
            FetchErrorKind::Limit => "limit",
            FetchErrorKind::Timeout => "timeout",
            FetchErrorKind::Failed => "failed",
        }
    }
}

impl FetchError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: FetchErrorKind, message: impl Into<String>) -> Self {
        FetchError {
            kind,
            message: message.into(),
        }
    }
}

/// The way out for one exec: makes a program's request, checked against what the exec may
/// reach, within its limits and by `deadline` at the latest. Called on the worker thread that
/// runs the program, which it blocks until the response is whole.
pub trait Outbound: Send + Sync + fmt::Debug {
    fn fetch(&self, request: HttpRequest, deadline: &Deadline) -> Result<HttpResponse, FetchError>;
}
