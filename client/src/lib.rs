//! Async client for hyperlightd's HTTP API on a Unix socket.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hyperlightd_client::Error> {
//! use hyperlightd_client::{Client, ExecRequest, Language};
//!
//! let client = Client::connect("/run/hyperlightd/hyperlightd.sock");
//! let response = client.exec(&ExecRequest::new(Language::Javascript, "1 + 1")).await?;
//! assert_eq!(response.result, serde_json::json!(2));
//! # Ok(()) }
//! ```
//!
//! The public API speaks only in the wire types of `hyperlightd-api` (re-exported here) and
//! [`Error`]; hyper stays an implementation detail.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use hyperlocal::{UnixConnector, Uri};

pub use hyperlightd_api::{
    DEFAULT_SOCKET, ErrorBody, ErrorKind, ExecRequest, ExecResponse, ExecStatus, HealthResponse,
    Language, SOCKET_ENV, SandboxCounts,
};

/// What can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing answers on the socket: the daemon is not running, or the path is wrong.
    #[error(
        "cannot reach hyperlightd at {socket}: {reason}. Is the daemon running? Start it, or point \
         --socket / {env} at its socket",
        env = SOCKET_ENV
    )]
    Unreachable {
        /// The socket tried.
        socket: PathBuf,
        /// Why the connection failed.
        reason: String,
    },
    /// The daemon refused the request (4xx/5xx) and said why.
    #[error("hyperlightd refused the request ({status}, {}): {}", .error.kind, .error.message)]
    Rejected {
        /// HTTP status code.
        status: u16,
        /// The daemon's error body.
        error: ErrorBody,
        /// Seconds to wait before retrying, when the daemon said (overload).
        retry_after: Option<u64>,
    },
    /// The daemon's answer could not be understood.
    #[error("unexpected answer from hyperlightd ({status}): {message}")]
    Protocol {
        /// HTTP status code.
        status: u16,
        /// What was wrong with it.
        message: String,
    },
}

impl Error {
    /// Whether retrying the same request later may succeed (overload, shutdown).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Rejected { error, .. }
                if matches!(error.kind, ErrorKind::Overloaded | ErrorKind::ShuttingDown)
        )
    }
}

/// A client of one daemon. Cheap to clone; connections are pooled.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    http: HyperClient<UnixConnector, Full<Bytes>>,
}

impl Client {
    /// A client for the daemon listening on `socket`. Connects lazily, on the first request.
    pub fn connect(socket: impl AsRef<Path>) -> Client {
        Client {
            socket: socket.as_ref().to_owned(),
            http: HyperClient::builder(TokioExecutor::new()).build(UnixConnector),
        }
    }

    /// A client for the socket named by `HYPERLIGHTD_SOCKET`, or the default path.
    pub fn from_env() -> Client {
        Client::connect(
            std::env::var_os(SOCKET_ENV)
                .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from),
        )
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Runs a program. A program that fails or times out is still `Ok`: see the response's
    /// `status`. `Err` means the request itself did not run.
    pub async fn exec(&self, request: &ExecRequest) -> Result<ExecResponse, Error> {
        let body = serde_json::to_vec(request).map_err(|e| Error::Protocol {
            status: 0,
            message: format!("encoding the request: {e}"),
        })?;
        self.call(
            Method::POST,
            hyperlightd_api::paths::EXEC,
            Bytes::from(body),
        )
        .await
        .and_then(|(status, bytes)| decode(status, &bytes))
    }

    /// The daemon's health.
    pub async fn health(&self) -> Result<HealthResponse, Error> {
        self.call(Method::GET, hyperlightd_api::paths::HEALTH, Bytes::new())
            .await
            .and_then(|(status, bytes)| decode(status, &bytes))
    }

    /// The daemon's metrics, in the Prometheus text format.
    pub async fn metrics(&self) -> Result<String, Error> {
        let (status, bytes) = self
            .call(Method::GET, hyperlightd_api::paths::METRICS, Bytes::new())
            .await?;
        String::from_utf8(bytes.to_vec()).map_err(|e| Error::Protocol {
            status: status.as_u16(),
            message: e.to_string(),
        })
    }

    /// Sends a request with a raw body and returns the raw answer, rejections included: for
    /// tests and tools that need to see exactly what the daemon says.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), Error> {
        let method = Method::from_bytes(method.as_bytes()).map_err(|e| Error::Protocol {
            status: 0,
            message: format!("bad method: {e}"),
        })?;
        let answer = self.send(method, path, Bytes::from(body)).await?;
        Ok((answer.status.as_u16(), answer.body.to_vec()))
    }

    /// Sends a request and turns any 4xx/5xx into [`Error::Rejected`].
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), Error> {
        let answer = self.send(method, path, body).await?;
        if answer.status.is_success() {
            return Ok((answer.status, answer.body));
        }
        Err(rejection(answer))
    }

    async fn send(&self, method: Method, path: &str, body: Bytes) -> Result<Answer, Error> {
        let uri: hyper::Uri = Uri::new(&self.socket, path).into();
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| Error::Protocol {
                status: 0,
                message: format!("building the request: {e}"),
            })?;
        request
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let response = self.http.request(request).await.map_err(|e| {
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                reason = s.to_string();
                source = s.source();
            }
            Error::Unreachable {
                socket: self.socket.clone(),
                reason,
            }
        })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Error::Protocol {
                status: status.as_u16(),
                message: format!("reading the response body: {e}"),
            })?
            .to_bytes();
        Ok(Answer {
            status,
            retry_after,
            body: bytes,
        })
    }
}

/// A response as received.
struct Answer {
    status: StatusCode,
    retry_after: Option<u64>,
    body: Bytes,
}

fn decode<T: serde::de::DeserializeOwned>(status: StatusCode, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Protocol {
        status: status.as_u16(),
        message: format!("decoding the response: {e}"),
    })
}

fn rejection(answer: Answer) -> Error {
    let status = answer.status.as_u16();
    match serde_json::from_slice::<hyperlightd_api::ErrorResponse>(&answer.body) {
        Ok(body) => Error::Rejected {
            status,
            error: body.error,
            retry_after: answer.retry_after,
        },
        Err(_) => Error::Protocol {
            status,
            message: String::from_utf8_lossy(&answer.body).into_owned(),
        },
    }
}
