//! The daemon's HTTP client as OpenTelemetry's OTLP exporter takes one (see `telemetry::export`):
//! an export is one exchange with the collector the operator named, made the way programs'
//! requests are (on the egress threads, or through the egress helper, TLS against the daemon's
//! roots), but to whatever address the collector's name resolves to (the operator named it; no
//! rule applies), within the export's time limit.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

use super::client::{Client, Exchange};
use super::target::{Host, Target};

/// The most bytes of a collector's answer read (an OTLP answer is a few bytes; a partial
/// success names what was refused).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Sends exports to a collector.
#[derive(Debug, Clone)]
pub struct Collector {
    client: Client,
    timeout: Duration,
    runtime: tokio::runtime::Handle,
}

impl Collector {
    /// Exports sent with `client`, each within `timeout`; their tasks run on `runtime` (the
    /// batch processor's thread has none of its own).
    pub fn new(client: Client, timeout: Duration, runtime: tokio::runtime::Handle) -> Self {
        Collector {
            client,
            timeout,
            runtime,
        }
    }

    async fn exchange(
        client: Client,
        request: Request<Bytes>,
    ) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let target = Target::parse(&parts.uri.to_string()).map_err(|e| e.message)?;
        let peer = match &target.host {
            Host::Ip(ip) => SocketAddr::new(*ip, target.port),
            Host::Name(name) => client
                .resolve_any(name, target.port)
                .await
                .map_err(|e| e.message)?,
        };
        let exchange = Exchange {
            method: &parts.method,
            target: &target,
            headers: parts.headers,
            body,
            max_body: MAX_ANSWER_BYTES,
        };
        let answer = client.send(peer, exchange).await.map_err(|e| e.message)?;
        let mut response = Response::new(answer.body);
        *response.status_mut() =
            hyper::StatusCode::from_u16(answer.status).map_err(|e| e.to_string())?;
        *response.headers_mut() = answer.headers;
        Ok(response)
    }
}

#[async_trait::async_trait]
impl HttpClient for Collector {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let exchange = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, Self::exchange(client, request)).await
        });
        match exchange.await {
            Ok(Ok(answered)) => answered,
            Ok(Err(_)) => Err(format!("no answer from the collector within {timeout:?}").into()),
            Err(e) => Err(format!("the export's task ended: {e}").into()),
        }
    }
}
