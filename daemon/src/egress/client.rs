//! One HTTP/1.1 exchange with a vetted destination: the name resolved once and every address
//! checked (see [`super::address`]), a new connection to the address that passed (never a
//! second resolution, so a rebinding name cannot move it), TLS verified against the roots the
//! daemon trusts, the request in origin form with the host's own `Host`, the response's head
//! and body read within their caps. No connection outlives its request. Names are resolved and
//! connections made on the egress client's own threads (see `sys::seccomp`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::address;
use super::helper::Helper;
use super::target::{Host, Scheme, Target};
use crate::job::egress::{FetchError, FetchErrorKind};
use crate::sys::seccomp;

/// The most bytes of a response's head (status line and headers).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields of a response.
pub const MAX_HEADERS: usize = 100;

fn error(kind: FetchErrorKind, message: impl Into<String>) -> FetchError {
    FetchError::new(kind, message)
}

/// What one exchange sends.
#[derive(Debug)]
pub struct Exchange<'a> {
    pub method: &'a Method,
    pub target: &'a Target,
    /// Everything but `Host`, `Content-Length` and `Connection`, which the client sets.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The most body bytes to take from the response.
    pub max_body: usize,
}

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The address it came from.
    pub peer: SocketAddr,
}

/// How long the egress helper may take to connect (an exchange's own time limit is usually
/// shorter, and ends the wait first).
const HELPER_CONNECT_WAIT: Duration = Duration::from_secs(30);

/// How the client reaches the network.
#[derive(Debug, Clone)]
pub enum Network {
    /// With this process's own sockets.
    Direct,
    /// Through the egress helper (`--egress-helper`, see [`super::helper`]): names resolved and
    /// connections made there, so that this process needs no network.
    Helper(Helper),
}

/// Makes exchanges: the TLS configuration (the daemon's roots) and the way to the network;
/// every exchange has a connection of its own.
#[derive(Debug, Clone)]
pub struct Client {
    tls: Arc<rustls::ClientConfig>,
    network: Network,
}

impl Client {
    pub fn new(tls: Arc<rustls::ClientConfig>, network: Network) -> Self {
        Client { tls, network }
    }

    /// The way to the network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// The address `target` is reached at: its literal address (a rule named it), or the one
    /// its name resolves to, when every address it resolves to is public.
    pub async fn resolve(&self, target: &Target) -> Result<SocketAddr, FetchError> {
        let (target, network) = (target.clone(), self.network.clone());
        on_egress_threads(async move { resolve(&network, &target).await }).await
    }

    /// The first address `name` resolves to, whatever it is (for a host the operator named).
    pub async fn resolve_any(&self, name: &str, port: u16) -> Result<SocketAddr, FetchError> {
        let (name, network) = (name.to_owned(), self.network.clone());
        on_egress_threads(async move {
            let found = lookup(&network, &name, port).await?;
            found.first().copied().ok_or_else(|| {
                error(
                    FetchErrorKind::Failed,
                    format!("{name} resolves to no address"),
                )
            })
        })
        .await
    }

    /// Sends `exchange` to `peer`, and reads the answer within its caps.
    pub async fn send(
        &self,
        peer: SocketAddr,
        exchange: Exchange<'_>,
    ) -> Result<Answer, FetchError> {
        let (method, target) = (exchange.method.clone(), exchange.target.clone());
        let (headers, body, max_body) = (exchange.headers, exchange.body, exchange.max_body);
        let (tls, network) = (self.tls.clone(), self.network.clone());
        on_egress_threads(async move {
            let exchange = Exchange {
                method: &method,
                target: &target,
                headers,
                body,
                max_body,
            };
            send(&network, tls, peer, exchange).await
        })
        .await
    }
}

/// Runs `work` on the egress client's own threads, the only ones whose system call filter
/// allows Internet sockets (see `sys::seccomp`), or here when the filters are off. Dropped, it
/// stops `work`.
async fn on_egress_threads<T: Send + 'static>(
    work: impl Future<Output = Result<T, FetchError>> + Send + 'static,
) -> Result<T, FetchError> {
    let Some(runtime) = seccomp::egress_runtime() else {
        return work.await;
    };
    let mut task = AbortOnDrop(runtime.spawn(work));
    match (&mut task.0).await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(error(FetchErrorKind::Failed, "the daemon is stopping")),
    }
}

/// What `name` resolves to, here or through the helper.
async fn lookup(network: &Network, name: &str, port: u16) -> Result<Vec<SocketAddr>, FetchError> {
    match network {
        Network::Direct => match tokio::net::lookup_host((name, port)).await {
            Ok(found) => Ok(found.collect()),
            Err(e) => Err(error(
                FetchErrorKind::Failed,
                format!("cannot resolve {name}: {e}"),
            )),
        },
        Network::Helper(helper) => {
            let (helper, name) = (helper.clone(), name.to_owned());
            blocking(move || helper.resolve(&name, port)).await
        }
    }
}

/// A connection to `peer` (for `target`), made here or by the helper.
async fn connect(
    network: &Network,
    peer: SocketAddr,
    target: &Target,
) -> Result<TcpStream, FetchError> {
    let failed = |kind, why: &dyn std::fmt::Display| {
        let authority = target.authority();
        error(
            kind,
            format!("cannot connect to {authority} ({peer}): {why}"),
        )
    };
    let helper = match network {
        Network::Direct => {
            return TcpStream::connect(peer)
                .await
                .map_err(|e| failed(FetchErrorKind::Failed, &e));
        }
        Network::Helper(helper) => helper.clone(),
    };
    let tcp = blocking(move || helper.connect(peer, HELPER_CONNECT_WAIT))
        .await
        .map_err(|e| failed(e.kind, &e.message))?;
    tcp.set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(tcp))
        .map_err(|e| failed(FetchErrorKind::Failed, &e))
}

/// `work`, which blocks, on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, FetchError> + Send + 'static,
) -> Result<T, FetchError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => Err(error(
            FetchErrorKind::Failed,
            format!("the call to the egress helper failed: {e}"),
        )),
    }
}

async fn resolve(network: &Network, target: &Target) -> Result<SocketAddr, FetchError> {
    let name = match &target.host {
        Host::Ip(ip) => return Ok(SocketAddr::new(*ip, target.port)),
        Host::Name(name) => name,
    };
    let addresses = lookup(network, name, target.port).await?;
    if let Some((ip, why)) = addresses
        .iter()
        .find_map(|a| address::special(a.ip()).map(|why| (a.ip(), why)))
    {
        return Err(error(
            FetchErrorKind::Refused,
            format!(
                "{name} resolves to {ip}, which is {why}: only public addresses are reached by \
                 name (a rule must name such an address literally)"
            ),
        ));
    }
    addresses.first().copied().ok_or_else(|| {
        error(
            FetchErrorKind::Failed,
            format!("{name} resolves to no address"),
        )
    })
}

async fn send(
    network: &Network,
    tls: Arc<rustls::ClientConfig>,
    peer: SocketAddr,
    exchange: Exchange<'_>,
) -> Result<Answer, FetchError> {
    let target = exchange.target;
    let tcp = connect(network, peer, target).await?;
    let _ = tcp.set_nodelay(true);
    match target.scheme {
        Scheme::Http => exchange_over(tcp, peer, exchange).await,
        Scheme::Https => {
            let name = match &target.host {
                Host::Name(name) => ServerName::try_from(name.clone()).map_err(|_| {
                    error(
                        FetchErrorKind::Invalid,
                        format!("{name} is not a TLS server name"),
                    )
                })?,
                Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
            };
            let tls = TlsConnector::from(tls)
                .connect(name, tcp)
                .await
                .map_err(|e| {
                    error(
                        FetchErrorKind::Failed,
                        format!("TLS with {} failed: {e}", target.authority()),
                    )
                })?;
            exchange_over(tls, peer, exchange).await
        }
    }
}

/// The exchange over an open connection.
async fn exchange_over<S>(
    stream: S,
    peer: SocketAddr,
    exchange: Exchange<'_>,
) -> Result<Answer, FetchError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let target = exchange.target;
    let broken = |e: hyper::Error| {
        let why = if e.is_parse_too_large() {
            format!("its head is over {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} fields")
        } else {
            e.to_string()
        };
        error(
            FetchErrorKind::Failed,
            format!(
                "{} answered no valid HTTP/1.1 response: {why}",
                target.authority()
            ),
        )
    };
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .handshake::<_, Full<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(broken)?;
    // The connection is driven here and dropped with the exchange: nothing is kept.
    let driving = tokio::spawn(connection);
    let _stop = AbortOnDrop(driving);
    let mut request = Request::builder()
        .method(exchange.method.clone())
        .uri(target.path_and_query.as_str())
        .body(Full::new(exchange.body))
        .map_err(|e| {
            error(
                FetchErrorKind::Invalid,
                format!("the request is not valid: {e}"),
            )
        })?;
    *request.headers_mut() = exchange.headers;
    let host = HeaderValue::from_str(&target.authority())
        .map_err(|_| error(FetchErrorKind::Invalid, "the host is not a header value"))?;
    request.headers_mut().insert(header::HOST, host);
    request
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    let response = sender.send_request(request).await.map_err(broken)?;
    let (head, body) = response.into_parts();
    // hyper bounds the head it buffers by about its buffer's size; this holds it to the limit.
    let head_bytes: usize = head
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    if head_bytes > MAX_HEAD_BYTES {
        return Err(error(
            FetchErrorKind::Failed,
            format!(
                "{} answered a response whose head is over {MAX_HEAD_BYTES} bytes",
                target.authority()
            ),
        ));
    }
    let body = Limited::new(body, exchange.max_body)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                error(
                    FetchErrorKind::Limit,
                    format!(
                        "the response from {} is over {} bytes, the most this execution may \
                         still receive or its sandbox take in one response",
                        target.authority(),
                        exchange.max_body
                    ),
                )
            } else {
                error(
                    FetchErrorKind::Failed,
                    format!(
                        "reading the response from {} failed: {e}",
                        target.authority()
                    ),
                )
            }
        })?
        .to_bytes();
    Ok(Answer {
        status: head.status.as_u16(),
        headers: head.headers,
        body,
        peer,
    })
}

/// Stops the connection's task when the exchange ends, however it ends.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
