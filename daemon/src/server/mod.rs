//! The accept loop: HTTP/1.1 connections on the Unix socket, each served by the [`Api`], and a
//! graceful stop that lets in-flight requests finish.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::UnixListener;
use tracing::{debug, info, warn};

use crate::executor::Executor;
use crate::http::Api;

/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `api` on `listener` until `shutdown` completes, then stops accepting and waits up to
/// `drain` for open connections to finish their requests.
pub async fn serve<E: Executor>(
    listener: UnixListener,
    api: Arc<Api<E>>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: back off rather than spin.
                        warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let api = api.clone();
                let service = service_fn(move |request| {
                    let api = api.clone();
                    async move { Ok::<_, Infallible>(api.handle(request).await) }
                });
                let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        debug!("connection ended with an error: {e}");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    info!("stopped accepting; waiting for in-flight requests");
    tokio::select! {
        () = graceful.shutdown() => info!("all connections closed"),
        () = tokio::time::sleep(drain) => warn!(drain_ms = drain.as_millis() as u64, "drain deadline passed with connections still open"),
    }
}
