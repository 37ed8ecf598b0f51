//! One execution's way out: each request checked against the execution's rules and limits,
//! secrets added for their destinations only, redirects followed by the host (each hop checked,
//! counted and audited), every hop an audit line and a count in the metrics.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::client::{Answer, Exchange};
use super::rules::{METHODS, Rule};
use super::target::Target;
use super::{Egress, ExecContext};
use crate::audit::EgressRecord;
use crate::job::Deadline;
use crate::job::egress::{FetchError, FetchErrorKind, HttpRequest, HttpResponse, Outbound};

/// The most header fields a program's request may have, and their bytes together.
const MAX_REQUEST_HEADERS: usize = 100;
const MAX_REQUEST_HEADER_BYTES: usize = 32 * 1024;

/// Headers the host sets itself (or that would let the program reshape the connection): any
/// the program sets are dropped.
const HOST_SET: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

/// Headers a program's request loses on a redirect to another origin (as browsers do).
const CREDENTIALS: &[&str] = &["authorization", "cookie", "proxy-authorization"];

fn error(kind: FetchErrorKind, message: impl Into<String>) -> FetchError {
    FetchError::new(kind, message)
}

/// One execution's outbound requests.
#[derive(Debug)]
pub struct ExecEgress {
    egress: Arc<Egress>,
    rules: Vec<Rule>,
    context: ExecContext,
    used: Mutex<Used>,
}

/// What the execution's requests have taken so far.
#[derive(Debug, Default)]
struct Used {
    requests: u32,
    sent: usize,
    received: usize,
}

impl Outbound for ExecEgress {
    fn fetch(&self, request: HttpRequest, deadline: &Deadline) -> Result<HttpResponse, FetchError> {
        let limit = self.egress.limits.request_timeout;
        let (until, by_program) = match deadline.at() {
            at if at < Instant::now() + limit => (at, true),
            _ => (Instant::now() + limit, false),
        };
        let timeout = if by_program {
            "the program's time limit passed during the request".to_owned()
        } else {
            format!(
                "the request took more than {} ms (redirects included)",
                limit.as_millis()
            )
        };
        let bounds = Bounds {
            capacity: request.max_response_bytes,
            until,
            timeout,
        };
        self.egress
            .runtime
            .block_on(self.fetch_async(request, &bounds))
    }
}

impl ExecEgress {
    pub fn new(egress: Arc<Egress>, rules: Vec<Rule>, context: ExecContext) -> Self {
        ExecEgress {
            egress,
            rules,
            context,
            used: Mutex::new(Used::default()),
        }
    }

    /// Returns once the caller watching the program goes away; never without one.
    async fn watcher_gone(&self) {
        match &self.context.watcher {
            Some(sink) => sink.closed().await,
            None => std::future::pending().await,
        }
    }

    fn used(&self) -> std::sync::MutexGuard<'_, Used> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn fetch_async(
        &self,
        request: HttpRequest,
        bounds: &Bounds,
    ) -> Result<HttpResponse, FetchError> {
        let mut method = match parse_method(&request.method) {
            Ok(method) => method,
            Err(e) => return Err(self.refuse_unread(&request.method, e)),
        };
        let mut target = match Target::parse(&request.url) {
            Ok(target) => target,
            Err(e) => return Err(self.refuse_unread(method.as_str(), e)),
        };
        let headers = match program_headers(&request.headers) {
            Ok(headers) => headers,
            Err(e) => return Err(self.refused(&method, &target, 0, e)),
        };
        let first_origin = target.origin();
        let mut body = Bytes::from(request.body);
        for hop in 0..=self.egress.limits.max_redirects {
            let mut hop_headers = headers.clone();
            if target.origin() != first_origin {
                for name in CREDENTIALS {
                    hop_headers.remove(*name);
                }
            }
            let answer = self
                .hop(&method, &target, hop_headers, body.clone(), bounds, hop)
                .await?;
            let location = answer
                .headers
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok());
            let follow =
                request.follow_redirects && matches!(answer.status, 301 | 302 | 303 | 307 | 308);
            let Some(location) = location.filter(|_| follow) else {
                return Ok(response(&target, hop > 0, answer));
            };
            let next = target.join(location).map_err(|e| {
                error(
                    e.kind,
                    format!(
                        "the redirect from {target} leads nowhere allowed: {}",
                        e.message
                    ),
                )
            })?;
            // As browsers do: a 303, and a 301 or 302 after a POST, become a GET without a body.
            if answer.status == 303 && method != Method::HEAD
                || matches!(answer.status, 301 | 302) && method == Method::POST
            {
                method = Method::GET;
                body = Bytes::new();
            }
            target = next;
        }
        Err(error(
            FetchErrorKind::Limit,
            format!(
                "more than {} redirects: the last led to {target}",
                self.egress.limits.max_redirects
            ),
        ))
    }

    /// One request of the chain: checked, counted, sent, audited.
    async fn hop(
        &self,
        method: &Method,
        target: &Target,
        mut headers: HeaderMap,
        body: Bytes,
        bounds: &Bounds,
        hop: u32,
    ) -> Result<Answer, FetchError> {
        let started = Instant::now();
        if !self.rules.iter().any(|r| r.allows(method.as_str(), target)) {
            let why = format!(
                "{method} {} is not allowed: no rule of this execution names it (allowed: {})",
                target.origin() + &target.path,
                self.allowed()
            );
            return Err(self.refused(method, target, hop, error(FetchErrorKind::Refused, why)));
        }
        let max_body = match self.take(body.len()) {
            Ok(left) => left,
            Err(e) => return Err(self.refused(method, target, hop, e)),
        };
        for secret in self.egress.secrets.iter().filter(|s| s.applies_to(target)) {
            headers.insert(secret.header.clone(), secret.value.clone());
        }
        let exchange = Exchange {
            method,
            target,
            headers,
            body: body.clone(),
            max_body: max_body.min(bounds.capacity),
        };
        let sent = async {
            let _permit = self
                .egress
                .permits
                .acquire()
                .await
                .map_err(|_| error(FetchErrorKind::Failed, "the daemon is stopping"))?;
            let peer = self.egress.client.resolve(target).await?;
            self.egress.client.send(peer, exchange).await
        };
        let sent = tokio::select! {
            sent = tokio::time::timeout_at(bounds.until.into(), sent) => {
                sent.unwrap_or_else(|_| Err(error(FetchErrorKind::Timeout, bounds.timeout.clone())))
            }
            () = self.watcher_gone() => Err(error(
                FetchErrorKind::Failed,
                "the caller watching the program went away: the request was dropped",
            )),
        };
        let received = sent.as_ref().map_or(0, |a| a.body.len());
        self.used().received += received;
        let record = Hop {
            method,
            target: Some(target),
            hop,
            started,
            sent: body.len(),
            received,
        };
        match &sent {
            Ok(answer) => self.record(&record, Some(answer.status), None),
            Err(e) => self.record(&record, None, Some(e)),
        }
        sent
    }

    /// Counts one request sending `body` bytes: the body bytes it may still receive, or the
    /// limit it would pass.
    fn take(&self, body: usize) -> Result<usize, FetchError> {
        let limits = self.egress.limits;
        let mut used = self.used();
        if used.requests >= limits.max_requests {
            return Err(error(
                FetchErrorKind::Limit,
                format!(
                    "this execution made its {} requests, the most it may",
                    limits.max_requests
                ),
            ));
        }
        if used.sent + body > limits.max_sent_bytes {
            return Err(error(
                FetchErrorKind::Limit,
                format!(
                    "sending {body} more bytes would pass this execution's {} bytes sent",
                    limits.max_sent_bytes
                ),
            ));
        }
        let left = limits.max_received_bytes.saturating_sub(used.received);
        if left == 0 {
            return Err(error(
                FetchErrorKind::Limit,
                format!(
                    "this execution received its {} bytes",
                    limits.max_received_bytes
                ),
            ));
        }
        used.requests += 1;
        used.sent += body;
        Ok(left)
    }

    /// The rules, as an error message lists them.
    fn allowed(&self) -> String {
        let rules: Vec<String> = self.rules.iter().map(ToString::to_string).collect();
        if rules.is_empty() {
            "nothing".to_owned()
        } else {
            rules.join("; ")
        }
    }

    /// `e`, audited, for a request whose URL was read.
    fn refused(&self, method: &Method, target: &Target, hop: u32, e: FetchError) -> FetchError {
        let record = Hop {
            method,
            target: Some(target),
            hop,
            started: Instant::now(),
            sent: 0,
            received: 0,
        };
        self.record(&record, None, Some(&e));
        e
    }

    /// `e`, audited, for a request whose method or URL could not be read.
    fn refuse_unread(&self, method: &str, e: FetchError) -> FetchError {
        let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
        let record = Hop {
            method: &method,
            target: None,
            hop: 0,
            started: Instant::now(),
            sent: 0,
            received: 0,
        };
        self.record(&record, None, Some(&e));
        e
    }

    fn record(&self, hop: &Hop<'_>, status: Option<u16>, failed: Option<&FetchError>) {
        let elapsed = hop.started.elapsed();
        let host = hop.target.map(Target::host_text);
        self.egress.audit.egress(&EgressRecord {
            request_id: self.context.request_id,
            caller: self.context.caller.clone(),
            method: hop.method.as_str(),
            scheme: hop.target.map(|t| t.scheme.as_str()),
            host: host.as_deref(),
            port: hop.target.map(|t| t.port),
            path: hop.target.map(|t| t.path.as_str()),
            redirect: hop.hop,
            status,
            bytes_sent: hop.sent,
            bytes_received: hop.received,
            duration_ms: elapsed.as_secs_f64() * 1e3,
            error_kind: failed.map(|e| e.kind.as_str()),
            error: failed.map(|e| e.message.as_str()),
        });
        if let Some(metrics) = &self.egress.metrics {
            let outcome = failed.map_or("ok", |e| e.kind.as_str());
            let seconds = status.map(|_| elapsed.as_secs_f64());
            metrics.record(outcome, hop.sent, hop.received, seconds);
        }
    }
}

/// What bounds one request of the program's, redirects included.
struct Bounds {
    /// The most body bytes of one response its sandbox takes.
    capacity: usize,
    /// When it has taken its time, and what the program is told then.
    until: Instant,
    timeout: String,
}

/// One hop, as its audit line tells it.
struct Hop<'a> {
    method: &'a Method,
    target: Option<&'a Target>,
    hop: u32,
    started: Instant,
    sent: usize,
    received: usize,
}

fn parse_method(given: &str) -> Result<Method, FetchError> {
    let upper = given.to_ascii_uppercase();
    if !METHODS.contains(&upper.as_str()) {
        return Err(error(
            FetchErrorKind::Invalid,
            format!(
                "the method {given:?} is not allowed (one of {})",
                METHODS.join(", ")
            ),
        ));
    }
    Method::from_bytes(upper.as_bytes()).map_err(|_| {
        error(
            FetchErrorKind::Invalid,
            format!("{given:?} is not a method"),
        )
    })
}

/// The program's headers, checked, without those the host sets.
fn program_headers(given: &[(String, String)]) -> Result<HeaderMap, FetchError> {
    let bytes: usize = given.iter().map(|(n, v)| n.len() + v.len()).sum();
    if given.len() > MAX_REQUEST_HEADERS || bytes > MAX_REQUEST_HEADER_BYTES {
        return Err(error(
            FetchErrorKind::Invalid,
            format!(
                "the request has {} header fields of {bytes} bytes; the most are \
                 {MAX_REQUEST_HEADERS} fields of {MAX_REQUEST_HEADER_BYTES} bytes",
                given.len()
            ),
        ));
    }
    let mut headers = HeaderMap::new();
    for (name, value) in given {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            error(
                FetchErrorKind::Invalid,
                format!("{name:?} is not a header name"),
            )
        })?;
        if HOST_SET.contains(&name.as_str()) || name.as_str().starts_with("proxy-") {
            continue;
        }
        let value = HeaderValue::from_str(value).map_err(|_| {
            error(
                FetchErrorKind::Invalid,
                format!("the value of {name} is not a header value (no line breaks)"),
            )
        })?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// The program's response from the last hop's answer.
fn response(target: &Target, redirected: bool, answer: Answer) -> HttpResponse {
    let headers = answer
        .headers
        .iter()
        .map(|(name, value)| {
            let text = match value.to_str() {
                Ok(text) => text.to_owned(),
                Err(_) => value.as_bytes().iter().map(|&b| char::from(b)).collect(),
            };
            (name.as_str().to_owned(), text)
        })
        .collect();
    HttpResponse {
        status: answer.status,
        url: target.to_string(),
        redirected,
        headers,
        body: answer.body.to_vec(),
    }
}
