//! The drain against requests already on their way when it begins, on a real Unix socket with
//! the real server and API in front of a stub executor: no hypervisor needed. A connection
//! accepted before the stop whose request had not been read yet must be answered `503
//! shutting_down` (nothing ran, the client may retry elsewhere), never closed under it; and
//! connections that send nothing must not hold the drain past its grace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use hyperlightd::metrics::Metrics;
use hyperlightd::server::{self, DRAIN_GRACE, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

mod common;
use common::{metric, stub_api};

/// Far longer than anything here should take: a step that hangs fails by name.
const STEP: Duration = Duration::from_secs(20);

struct Daemon {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    metrics: Metrics,
    stop: mpsc::Sender<&'static str>,
    server: JoinHandle<()>,
}

fn start() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let (api, metrics) = stub_api(Duration::from_secs(5));
    let config = ServerConfig {
        max_connections: 16,
        max_header_bytes: 16 * 1024,
        // Longer than the test: only the drain may close the connections here.
        idle_timeout: Duration::from_secs(600),
        drain: Duration::from_secs(600),
        identify: Default::default(),
    };
    let (stop, mut stops) = mpsc::channel(1);
    let server =
        tokio::spawn(async move { server::serve(listener, api, config, &mut stops).await });
    Daemon {
        _dir: dir,
        socket,
        metrics,
        stop,
        server,
    }
}

async fn step<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {STEP:?}"))
}

/// Polls until the daemon has accepted `n` connections.
async fn open_connections(daemon: &Daemon, n: usize) {
    step(&format!("{n} connections accepted"), async {
        while metric(&daemon.metrics, "hyperlightd_connections_open") != n as f64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Polls until the daemon says it drains, asking on connections of its own.
async fn draining(socket: &Path) {
    step("the drain begins", async {
        loop {
            let stream = UnixStream::connect(socket).await.unwrap();
            let (_, body) = exchange(stream, HEALTH_THEN_CLOSE).await;
            if body.contains(r#""status":"stopping""#) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

const HEALTH: &str = "GET /v1/health HTTP/1.1\r\nHost: d\r\n\r\n";
const HEALTH_THEN_CLOSE: &str = "GET /v1/health HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n";

fn exec_request(code: &str) -> String {
    let body = serde_json::json!({ "language": "javascript", "code": code }).to_string();
    format!(
        "POST /v1/exec HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends `raw` on `stream` and reads until the daemon closes it: the status and the body.
async fn exchange(mut stream: UnixStream, raw: &str) -> (u16, String) {
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_connection_open_when_the_drain_begins_is_answered_not_dropped() {
    let daemon = start();
    // Accepted before the stop, its request not sent yet: the race a client loses when it
    // connects just as the daemon is told to stop.
    let early = UnixStream::connect(&daemon.socket).await.unwrap();
    open_connections(&daemon, 1).await;
    daemon.stop.send("test").await.unwrap();
    draining(&daemon.socket).await;

    let (status, answer) = step(
        "the early connection's request",
        exchange(early, &exec_request("1")),
    )
    .await;
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("shutting_down"), "{answer}");
    step("the drain ends", daemon.server).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_send_nothing_hold_the_drain_only_for_its_grace() {
    let daemon = start();
    // One never used, one that has had its answer and is kept alive.
    let mut silent = UnixStream::connect(&daemon.socket).await.unwrap();
    let mut kept = UnixStream::connect(&daemon.socket).await.unwrap();
    kept.write_all(HEALTH.as_bytes()).await.unwrap();
    let mut buffer = [0u8; 4096];
    let read = step("the kept-alive connection's answer", kept.read(&mut buffer))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&buffer[..read]).starts_with("HTTP/1.1 200"));
    open_connections(&daemon, 2).await;

    let stopped = Instant::now();
    daemon.stop.send("test").await.unwrap();
    step("the drain ends", daemon.server).await.unwrap();
    let took = stopped.elapsed();
    assert!(
        took >= DRAIN_GRACE,
        "the drain closed a connection within its grace ({took:?})"
    );
    for (name, stream) in [("silent", &mut silent), ("kept-alive", &mut kept)] {
        let mut rest = Vec::new();
        step(name, stream.read_to_end(&mut rest)).await.unwrap();
        assert!(
            rest.is_empty(),
            "{name}: {}",
            String::from_utf8_lossy(&rest)
        );
    }
}
