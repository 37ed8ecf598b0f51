//! Web servers on loopback for the egress tests: plain HTTP, and HTTPS with a certificate from a
//! test CA made here (the daemon trusts it with `--egress-ca-file`). Each answers by path:
//!
//! - `/echo`: the request as JSON (`method`, `path`, `query`, `headers` without
//!   `authorization`, `body`), and `authorized`: whether `authorization` was [`SECRET`]'s;
//! - `/json`: `{"hello": "world"}`;
//! - `/redirect/N`: N redirects, then `/echo`; `/to?URL`: a redirect to URL;
//! - `/bytes/N`: N bytes; `/status/N`: status N; `/slow`: an answer after 60 s.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The secret the tests' daemons add to requests to `/echo` (`Authorization: Bearer` it).
pub const SECRET: &str = "s3cr3t-t0ken-never-in-the-guest";

/// A server on a loopback port; its address.
pub async fn serve(tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                    }
                    Some(tls) => {
                        if let Ok(stream) = tokio_rustls::TlsAcceptor::from(tls).accept(tcp).await {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                }
            });
        }
    });
    address
}

/// A test CA written to `dir/ca.pem` (its path), and a server configuration with a certificate
/// it signed for 127.0.0.1 and `localhost`.
pub fn test_ca(dir: &Path) -> (PathBuf, Arc<rustls::ServerConfig>) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().expect("a CA key");
    let ca = rcgen::CertifiedIssuer::self_signed(ca, key).expect("a CA");
    let key = rcgen::KeyPair::generate().expect("a server key");
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let params = rcgen::CertificateParams::new(names).expect("server parameters");
    let cert = params.signed_by(&key, &ca).expect("a server certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("a key");
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .expect("a server configuration");
    let path = dir.join("ca.pem");
    std::fs::write(&path, ca.pem()).expect("writing the CA");
    (path, Arc::new(config))
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let redirect = |to: &str| {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = hyper::StatusCode::FOUND;
        if let Ok(to) = to.parse() {
            response.headers_mut().insert(hyper::header::LOCATION, to);
        }
        response
    };
    let text = |body: String| Response::new(Full::new(Bytes::from(body)));
    let response = if let Some(n) = path.strip_prefix("/redirect/") {
        match n.parse::<u32>().unwrap_or(0) {
            0 => redirect("/echo"),
            n => redirect(&format!("/redirect/{}", n - 1)),
        }
    } else if path == "/to" {
        redirect(&query)
    } else if let Some(n) = path.strip_prefix("/bytes/") {
        Response::new(Full::new(Bytes::from(vec![b'x'; n.parse().unwrap_or(0)])))
    } else if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(60)).await;
        text(String::new())
    } else if let Some(code) = path.strip_prefix("/status/") {
        let mut response = text(format!("status {code}"));
        *response.status_mut() = code.parse().unwrap_or(hyper::StatusCode::IM_A_TEAPOT);
        response
    } else if path == "/json" {
        text(json!({"hello": "world"}).to_string())
    } else {
        text(echo(request, path, query).await.to_string())
    };
    Ok(response)
}

async fn echo(request: Request<Incoming>, path: String, query: String) -> Value {
    let method = request.method().to_string();
    let authorized = request
        .headers()
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == format!("Bearer {SECRET}").as_bytes());
    let headers: serde_json::Map<String, Value> = request
        .headers()
        .iter()
        .filter(|(name, _)| *name != "authorization")
        .map(|(n, v)| (n.to_string(), json!(String::from_utf8_lossy(v.as_bytes()))))
        .collect();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    json!({"method": method, "path": path, "query": query, "headers": headers,
        "authorized": authorized, "body": String::from_utf8_lossy(&body)})
}
