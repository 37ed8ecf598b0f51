//! The egress against real servers on loopback (plain HTTP, and HTTPS with a test CA): what is
//! allowed goes through, what is not is refused before anything is sent, and every hop is an
//! audit line. No guest here: the runners' side is tested in the VM (tests/tests/egress.rs).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::*;
use crate::audit::testing;
use crate::job::Deadline;
use crate::job::egress::{FetchError, FetchErrorKind, HttpRequest, HttpResponse, Outbound};

const LIMITS: EgressLimits = EgressLimits {
    max_requests: 20,
    max_sent_bytes: 1000,
    max_received_bytes: 100_000,
    request_timeout: Duration::from_secs(2),
    max_redirects: 3,
};

/// A test server's answer to `request`, by path: `/echo` (method, headers, body as JSON),
/// `/redirect/N` (N redirects, then `/echo`), `/to?URL` (a redirect to URL), `/bytes/N`,
/// `/bighead` (a header of 100 kB), `/slow` (never answers in time).
async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let redirect = |to: &str| {
        Response::builder()
            .status(302)
            .header("location", to)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let response = if let Some(n) = path.strip_prefix("/redirect/") {
        match n.parse::<u32>().unwrap() {
            0 => redirect("/echo"),
            n => redirect(&format!("/redirect/{}", n - 1)),
        }
    } else if path == "/to" {
        redirect(&query)
    } else if let Some(n) = path.strip_prefix("/bytes/") {
        Response::new(Full::new(Bytes::from(vec![b'x'; n.parse().unwrap()])))
    } else if path == "/bighead" {
        Response::builder()
            .header("x-big", "x".repeat(100_000))
            .body(Full::new(Bytes::new()))
            .unwrap()
    } else if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Response::new(Full::new(Bytes::new()))
    } else {
        let method = request.method().to_string();
        let headers: serde_json::Map<String, Value> = request
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), json!(v.to_str().unwrap_or_default())))
            .collect();
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let echo = json!({"method": method, "path": path, "headers": headers,
            "body": String::from_utf8_lossy(&body)});
        Response::new(Full::new(Bytes::from(echo.to_string())))
    };
    Ok(response)
}

/// Serves [`answer`] on a loopback port, over TLS with `tls`; its address.
async fn server(tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => http.serve_connection(TokioIo::new(tcp), service).await.ok(),
                    Some(tls) => {
                        let Ok(stream) = tokio_rustls::TlsAcceptor::from(tls).accept(tcp).await
                        else {
                            return;
                        };
                        http.serve_connection(TokioIo::new(stream), service)
                            .await
                            .ok()
                    }
                };
            });
        }
    });
    address
}

/// A test CA, and a server configuration with a certificate it signed for 127.0.0.1 and
/// `localhost`; the CA's PEM.
fn test_ca() -> (Arc<rustls::ServerConfig>, String) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    (Arc::new(config), ca.pem())
}

/// An egress allowing `rules`, with `secrets`, trusting `ca` (a PEM) besides nothing; its audit
/// log's path.
fn egress(
    rules: &[String],
    secrets: &[String],
    ca: Option<&str>,
    dir: &tempfile::TempDir,
) -> (Arc<Egress>, std::path::PathBuf) {
    egress_through(None, rules, secrets, ca, dir)
}

/// [`egress`], through the egress helper listening on `helper` if given.
fn egress_through(
    helper: Option<std::path::PathBuf>,
    rules: &[String],
    secrets: &[String],
    ca: Option<&str>,
    dir: &tempfile::TempDir,
) -> (Arc<Egress>, std::path::PathBuf) {
    let ca_file = ca.map(|pem| {
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, pem).unwrap();
        path
    });
    let options = options::EgressOptions {
        helper,
        allow: rules.to_vec(),
        secrets: secrets.to_vec(),
        ca_file,
        max_requests: LIMITS.max_requests,
        max_sent_bytes: LIMITS.max_sent_bytes,
        max_received_bytes: LIMITS.max_received_bytes,
        timeout_ms: LIMITS.request_timeout.as_millis() as u64,
        max_redirects: LIMITS.max_redirects,
        // One request in flight at a time: each test makes its requests one after another.
        max_concurrent: 1,
    };
    let env = |name: &str| (name == "TEST_TOKEN").then(|| "tok-123".to_owned());
    let parts = options
        .parts(Vec::new(), &env)
        .unwrap()
        .expect("rules given");
    let (audit, path) = testing::log_in(dir, false);
    let runtime = tokio::runtime::Handle::current();
    let metrics = crate::metrics::Metrics::new().unwrap();
    let egress = Egress::new(parts, runtime, Arc::new(audit), Some(metrics.egress()));
    METRICS.with(|m| *m.borrow_mut() = Some(metrics));
    (egress, path)
}

thread_local! {
    /// The metrics of the last egress made on this thread, for the test to read.
    static METRICS: std::cell::RefCell<Option<crate::metrics::Metrics>> = const { std::cell::RefCell::new(None) };
}

/// The metrics text of the last egress made on this thread.
fn metrics_text() -> String {
    METRICS.with(|m| {
        let metrics = m.borrow();
        let metrics = metrics.as_ref().expect("an egress was made");
        metrics
            .render(&Default::default(), &Default::default())
            .unwrap()
    })
}

fn context() -> ExecContext {
    ExecContext {
        watcher: None,
        request_id: 7,
        caller: crate::job::Caller {
            uid: 1000,
            gid: 1000,
            pid: None,
            pod: crate::job::PodOf::Unread,
            on_behalf_of: None,
        },
    }
}

fn get(url: &str) -> HttpRequest {
    HttpRequest {
        method: "GET".into(),
        url: url.into(),
        headers: Vec::new(),
        body: Vec::new(),
        follow_redirects: true,
        max_response_bytes: 1 << 20,
    }
}

/// Makes `request` through `out` from a blocking thread, as a guest's host function does.
async fn fetch(out: &Arc<dyn Outbound>, request: HttpRequest) -> Result<HttpResponse, FetchError> {
    let out = out.clone();
    tokio::task::spawn_blocking(move || {
        let deadline = Deadline::new(Instant::now() + Duration::from_secs(20));
        out.fetch(request, &deadline)
    })
    .await
    .unwrap()
}

/// A plain HTTP server on loopback, and egress allowed to reach it (and nothing else).
async fn plain_server(dir: &tempfile::TempDir) -> (SocketAddr, Arc<Egress>, std::path::PathBuf) {
    let at = server(None).await;
    let (egress, audit) = egress(&[format!("http://127.0.0.1:{}", at.port())], &[], None, dir);
    (at, egress, audit)
}

fn echo(response: &HttpResponse) -> Value {
    serde_json::from_slice(&response.body).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_requests_go_through_and_the_host_sets_what_reaches_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let (at, egress, audit) = plain_server(&dir).await;
    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let request = HttpRequest {
        method: "post".into(),
        url: format!("http://127.0.0.1:{}/echo?q=1", at.port()),
        headers: vec![
            ("Content-Type".into(), "application/json".into()),
            ("Host".into(), "evil.example".into()),
            ("Transfer-Encoding".into(), "chunked".into()),
        ],
        body: br#"{"a":1}"#.to_vec(),
        follow_redirects: true,
        max_response_bytes: 1 << 20,
    };
    let response = fetch(&out, request).await.unwrap();
    assert_eq!(response.status, 200);
    let seen = echo(&response);
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["body"], r#"{"a":1}"#);
    assert_eq!(seen["headers"]["host"], format!("127.0.0.1:{}", at.port()));
    assert_eq!(seen["headers"]["content-type"], "application/json");
    assert_eq!(seen["headers"]["content-length"], "7");
    assert!(seen["headers"].get("transfer-encoding").is_none(), "{seen}");

    let lines = testing::lines(&audit);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["audit"], "egress");
    assert_eq!(line["request_id"], 7);
    assert_eq!(line["method"], "POST");
    assert_eq!(line["host"], "127.0.0.1");
    assert_eq!(line["path"], "/echo", "no query in the audit log");
    assert_eq!(line["status"], 200);
    assert_eq!(line["bytes_sent"], 7);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_no_rule_names_is_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let at = server(None).await;
    let port = at.port();
    let (egress, audit) = egress(
        &[
            format!("GET http://127.0.0.1:{port}/echo"),
            format!("http://localhost:{port}"),
        ],
        &[],
        None,
        &dir,
    );
    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let cases = [
        (
            get(&format!("http://127.0.0.1:{}/echo", port + 1)),
            FetchErrorKind::Refused,
            "not allowed",
        ),
        (
            get(&format!("http://127.0.0.1:{port}/other")),
            FetchErrorKind::Refused,
            "not allowed",
        ),
        (
            HttpRequest {
                method: "DELETE".into(),
                ..get(&format!("http://127.0.0.1:{port}/echo"))
            },
            FetchErrorKind::Refused,
            "not allowed",
        ),
        // A name that resolves to loopback: refused, though a rule names it.
        (
            get(&format!("http://localhost:{port}/echo")),
            FetchErrorKind::Refused,
            "which is loopback",
        ),
        (
            get("http://169.254.169.254/latest/meta-data/"),
            FetchErrorKind::Refused,
            "not allowed",
        ),
        (
            HttpRequest {
                method: "CONNECT".into(),
                ..get("http://127.0.0.1/")
            },
            FetchErrorKind::Invalid,
            "CONNECT",
        ),
        (
            HttpRequest {
                method: "TRACE".into(),
                ..get("http://127.0.0.1/")
            },
            FetchErrorKind::Invalid,
            "TRACE",
        ),
        (
            get(&format!("http://user:pw@127.0.0.1:{port}/echo")),
            FetchErrorKind::Invalid,
            "user name",
        ),
        (
            get("file:///etc/passwd"),
            FetchErrorKind::Invalid,
            "not served",
        ),
        (get("/echo"), FetchErrorKind::Invalid, "not an absolute URL"),
        (
            get(&format!("http://127.0.0.1:{port}/echo/../admin")),
            FetchErrorKind::Invalid,
            "'..'",
        ),
    ];
    let count = cases.len();
    for (request, kind, expected) in cases {
        let url = request.url.clone();
        let refused = fetch(&out, request).await.unwrap_err();
        assert_eq!(refused.kind, kind, "{url}: {refused}");
        assert!(refused.message.contains(expected), "{url}: {refused}");
    }
    let lines = testing::lines(&audit);
    assert_eq!(lines.len(), count, "every refusal is audited");
    assert!(
        lines
            .iter()
            .all(|l| l["status"].is_null() && l["error_kind"].is_string())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_followed_to_allowed_destinations_only_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (server(None).await, server(None).await);
    let (egress, audit) = egress(&[format!("http://127.0.0.1:{}", a.port())], &[], None, &dir);
    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let response = fetch(
        &out,
        get(&format!("http://127.0.0.1:{}/redirect/2", a.port())),
    )
    .await
    .unwrap();
    assert_eq!(response.status, 200);
    assert!(response.redirected);
    assert_eq!(response.url, format!("http://127.0.0.1:{}/echo", a.port()));
    let hops: Vec<u64> = testing::lines(&audit)
        .iter()
        .map(|l| l["redirect"].as_u64().unwrap())
        .collect();
    assert_eq!(hops, [0, 1, 2, 3]);

    let too_many = fetch(
        &out,
        get(&format!("http://127.0.0.1:{}/redirect/5", a.port())),
    )
    .await;
    assert_eq!(too_many.unwrap_err().kind, FetchErrorKind::Limit);

    let elsewhere = format!(
        "http://127.0.0.1:{}/to?http://127.0.0.1:{}/echo",
        a.port(),
        b.port()
    );
    let refused = fetch(&out, get(&elsewhere)).await.unwrap_err();
    assert_eq!(refused.kind, FetchErrorKind::Refused, "{refused}");

    let manual = HttpRequest {
        follow_redirects: false,
        ..get(&format!("http://127.0.0.1:{}/redirect/1", a.port()))
    };
    let response = fetch(&out, manual).await.unwrap();
    assert_eq!(response.status, 302);
    assert!(!response.redirected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_reaches_its_destination_only_and_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (server(None).await, server(None).await);
    let rules = [
        format!("http://127.0.0.1:{}", a.port()),
        format!("http://127.0.0.1:{}", b.port()),
    ];
    let secret = format!(
        "http://127.0.0.1:{}/echo Authorization: Bearer {{env:TEST_TOKEN}}",
        a.port()
    );
    let (egress, audit) = egress(&rules, &[secret], None, &dir);
    assert!(!format!("{:?}", egress.health()).contains("tok-123"));
    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let mut own = get(&format!("http://127.0.0.1:{}/echo", a.port()));
    own.headers.push(("authorization".into(), "mine".into()));
    let seen = echo(&fetch(&out, own).await.unwrap());
    assert_eq!(
        seen["headers"]["authorization"], "Bearer tok-123",
        "the daemon's replaces the program's"
    );

    let other = echo(
        &fetch(&out, get(&format!("http://127.0.0.1:{}/echo", b.port())))
            .await
            .unwrap(),
    );
    assert!(other["headers"].get("authorization").is_none(), "{other}");
    // A redirect from the secret's destination to another: the secret stays behind.
    let away = format!(
        "http://127.0.0.1:{}/to?http://127.0.0.1:{}/echo",
        a.port(),
        b.port()
    );
    let moved = echo(&fetch(&out, get(&away)).await.unwrap());
    assert!(moved["headers"].get("authorization").is_none(), "{moved}");
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(!log.contains("tok-123"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_execution_s_limits_and_a_slow_server_end_its_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (at, egress, _) = plain_server(&dir).await;
    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", at.port());
    // A response larger than the sandbox takes in one answer, though the budget has room.
    let small = HttpRequest {
        max_response_bytes: 100,
        ..get(&url("/bytes/101"))
    };
    assert_eq!(
        fetch(&out, small).await.unwrap_err().kind,
        FetchErrorKind::Limit
    );
    let within = fetch(&out, get(&url("/bytes/60000"))).await.unwrap();
    assert_eq!(within.body.len(), 60_000);
    let past = fetch(&out, get(&url("/bytes/60000"))).await.unwrap_err();
    assert_eq!(past.kind, FetchErrorKind::Limit, "{past}");
    let big_body = HttpRequest {
        method: "POST".into(),
        body: vec![0; 1001],
        ..get(&url("/echo"))
    };
    assert_eq!(
        fetch(&out, big_body).await.unwrap_err().kind,
        FetchErrorKind::Limit
    );

    // A caller that goes away drops the request in flight at once, not at its time-out.
    let (watcher, watching) = tokio::sync::mpsc::unbounded_channel();
    let watched = ExecContext {
        watcher: Some(watcher),
        ..context()
    };
    let out = egress.for_exec(egress.narrow(None).unwrap(), watched);
    let leaving = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(watching);
    });
    // (Its time-out would say so instead.)
    let dropped = fetch(&out, get(&url("/slow"))).await.unwrap_err();
    assert!(dropped.message.contains("went away"), "{dropped}");
    leaving.await.unwrap();

    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let big_head = fetch(&out, get(&url("/bighead"))).await.unwrap_err();
    assert_eq!(big_head.kind, FetchErrorKind::Failed, "{big_head}");
    assert!(big_head.message.contains("head is over"), "{big_head}");
    let slow = fetch(&out, get(&url("/slow"))).await.unwrap_err();
    assert_eq!(slow.kind, FetchErrorKind::Timeout, "{slow}");
    for _ in 2..LIMITS.max_requests {
        fetch(&out, get(&url("/echo"))).await.unwrap();
    }
    let over = fetch(&out, get(&url("/echo"))).await.unwrap_err();
    assert_eq!(over.kind, FetchErrorKind::Limit, "{over}");
    let text = metrics_text();
    for series in [
        "hyperlightd_egress_requests_total{outcome=\"limit\"} 4",
        "hyperlightd_egress_requests_total{outcome=\"timeout\"} 1",
    ] {
        assert!(text.contains(series), "{series} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn https_is_verified_against_the_trusted_roots() {
    let dir = tempfile::tempdir().unwrap();
    let (tls, ca) = test_ca();
    let at = server(Some(tls)).await;
    let rule = [format!("https://127.0.0.1:{}", at.port())];
    let (trusting, _) = egress(&rule, &[], Some(&ca), &dir);
    let out = trusting.for_exec(trusting.narrow(None).unwrap(), context());
    let response = fetch(&out, get(&format!("https://127.0.0.1:{}/echo", at.port())))
        .await
        .unwrap();
    assert_eq!(echo(&response)["method"], "GET");

    let other_dir = tempfile::tempdir().unwrap();
    let (untrusting, _) = egress(&rule, &[], None, &other_dir);
    let out = untrusting.for_exec(untrusting.narrow(None).unwrap(), context());
    let refused = fetch(&out, get(&format!("https://127.0.0.1:{}/echo", at.port())))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, FetchErrorKind::Failed);
    assert!(refused.message.contains("TLS"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_narrows_the_daemon_s_rules_and_never_widens_them() {
    let dir = tempfile::tempdir().unwrap();
    let (egress, _) = egress(
        &["GET,POST https://*.example.com/v1/".to_owned()],
        &[],
        None,
        &dir,
    );
    let narrower = vec![rules::Rule::parse("GET https://api.example.com/v1/models").unwrap()];
    assert_eq!(egress.narrow(Some(narrower.clone())).unwrap(), narrower);
    let wider = vec![rules::Rule::parse("https://api.example.com/v1/").unwrap()];
    let refused = egress.narrow(Some(wider)).unwrap_err();
    assert!(
        refused.contains("network.allow[0]") && refused.contains("only narrow"),
        "{refused}"
    );
    assert_eq!(
        egress.narrow(Some(Vec::new())).unwrap(),
        Vec::new(),
        "none at all"
    );
    let health = egress.health();
    assert_eq!(health.rules, ["GET,POST https://*.example.com/v1/"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_daemon_s_concurrency_cap_a_request_waits_within_its_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let (at, egress, _) = plain_server(&dir).await;
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", at.port());
    let (first, second) = (
        egress.for_exec(egress.narrow(None).unwrap(), context()),
        egress.for_exec(egress.narrow(None).unwrap(), context()),
    );
    // The first holds the one permit until its time-out (2 s); the second, another exec's
    // whose program has 1 s left, waits for it and runs out of that time, though its server
    // would answer at once.
    let slow = tokio::spawn({
        let first = first.clone();
        let slow = get(&url("/slow"));
        async move { fetch(&first, slow).await }
    });
    while egress.permits.available_permits() > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waiting = second.clone();
    let echo_request = get(&url("/echo"));
    let waited = tokio::task::spawn_blocking(move || {
        let deadline = Deadline::new(Instant::now() + Duration::from_secs(1));
        waiting.fetch(echo_request, &deadline)
    })
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(waited.kind, FetchErrorKind::Timeout, "{waited}");
    assert_eq!(
        slow.await.unwrap().unwrap_err().kind,
        FetchErrorKind::Timeout
    );
    // The permit is back: the next request goes through.
    assert_eq!(
        fetch(&second, get(&url("/echo"))).await.unwrap().status,
        200
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn through_the_helper_a_request_carries_its_secret_and_a_metadata_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || super::helper::serve(listener, 4));
    let at = server(None).await;
    let rules = [
        format!("http://127.0.0.1:{}", at.port()),
        "http://169.254.169.254".to_owned(),
    ];
    let secret = format!(
        "http://127.0.0.1:{}/echo Authorization: Bearer {{env:TEST_TOKEN}}",
        at.port()
    );
    let (egress, audit) = egress_through(Some(socket), &rules, &[secret], None, &dir);
    let out = egress.for_exec(egress.narrow(None).unwrap(), context());
    let url = format!("http://127.0.0.1:{}/echo", at.port());
    let seen = echo(&fetch(&out, get(&url)).await.unwrap());
    assert_eq!(seen["headers"]["authorization"], "Bearer tok-123");
    // A rule names the metadata address literally: the daemon would go, the helper does not.
    let refused = fetch(&out, get("http://169.254.169.254/latest/meta-data/"))
        .await
        .unwrap_err();
    assert_eq!(refused.kind, FetchErrorKind::Refused, "{}", refused.message);
    assert!(
        refused
            .message
            .contains("the egress helper never connects there"),
        "{}",
        refused.message
    );
    let log = std::fs::read_to_string(&audit).unwrap();
    assert!(!log.contains("tok-123"), "{log}");
}
