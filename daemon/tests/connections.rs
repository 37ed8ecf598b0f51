//! The server's connection limits against thousands of stalled connections, on a real Unix
//! socket, with the real server and API in front of a stub executor: no hypervisor needed. It is
//! a test binary of its own so that the memory it measures is this test's alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hyperlightd::server::{self, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

mod common;
use common::{metric, stub_api};

const MAX_CONNECTIONS: usize = 200;
const STALLED: usize = 3000;
const TIMEOUT: Duration = Duration::from_secs(2);
/// What each body-stalling client sends before it stops.
const PARTIAL_BODY: usize = 256 * 1024;

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// One HTTP/1.1 exchange on a new connection; the status code and the body.
async fn request(socket: &std::path::Path, raw: &str) -> (u16, String) {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn exec_request(code: &str) -> String {
    let body = serde_json::json!({ "language": "javascript", "code": code }).to_string();
    format!(
        "POST /v1/exec HTTP/1.1\r\nHost: d\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Opens a connection and stalls it in one of three ways: silent, half a head, or a head and
/// part of a body.
async fn stall(socket: &std::path::Path, how: usize) -> Option<UnixStream> {
    let mut stream = UnixStream::connect(socket).await.ok()?;
    let sent = match how % 3 {
        0 => Vec::new(),
        1 => b"POST /v1/exec HTTP/1.1\r\nHost: d\r\nX-Slow: ".to_vec(),
        _ => {
            let mut head = b"POST /v1/exec HTTP/1.1\r\nHost: d\r\nContent-Length: 1000000\r\n\r\n{\"language\":\"javascript\",\"code\":\"".to_vec();
            head.resize(head.len() + PARTIAL_BODY, b'x');
            head
        }
    };
    // A client whose connection was closed to make room sees its writes fail: that is fine.
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.write_all(&sent)).await;
    Some(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_stalled_connections_are_bounded_and_dropped_while_requests_are_served() {
    hyperlightd::sys::files::raise_open_file_limit().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let (api, metrics) = stub_api(TIMEOUT);
    let config = ServerConfig {
        max_connections: MAX_CONNECTIONS,
        max_header_bytes: 16 * 1024,
        idle_timeout: TIMEOUT,
        drain: Duration::from_secs(1),
        identify: Default::default(),
    };
    let (stop, mut stops) = tokio::sync::mpsc::channel(1);
    let server =
        tokio::spawn(async move { server::serve(listener, api, config, &mut stops).await });

    let before = resident_bytes();
    let started = Instant::now();
    let mut stalled = Vec::new();
    for n in 0..STALLED {
        if let Some(stream) = stall(&socket, n).await {
            stalled.push(stream);
        }
    }
    let flood = started.elapsed();
    let during = resident_bytes();
    let open = metric(&metrics, "hyperlightd_connections_open");
    println!(
        "{STALLED} stalled connections opened in {flood:?}; the daemon holds {open}; resident \
         memory grew by {} KiB",
        (during.saturating_sub(before)) / 1024
    );
    assert!(open <= MAX_CONNECTIONS as f64, "{open} open");

    // A normal request is answered while every slot is taken by a stalled connection: it takes
    // the place of the one that waited longest. (The flood itself took longer than the idle
    // timeout, so some stalled connections may have been closed by it already.)
    let asked = Instant::now();
    let (status, body) = request(&socket, &exec_request("1 + 1")).await;
    let answered = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(
        answered < TIMEOUT,
        "answered in {answered:?}, not after a stalled connection timed out"
    );

    // Memory: the cap bounds what the stalled connections hold. Without it, 1000 clients that
    // each sent 256 KiB of body would hold 250 MiB.
    let held = during.saturating_sub(before);
    let bound = (MAX_CONNECTIONS * (PARTIAL_BODY + 256 * 1024)) as u64;
    assert!(
        held < bound,
        "resident memory grew by {held} bytes with {STALLED} stalled connections (bound {bound})"
    );

    // Every stalled connection is closed by the daemon within the timeouts: reading gives the
    // end of the stream (or a reset, or the 408 answer to a body that never came).
    let closed_within = TIMEOUT * 3;
    for mut stream in stalled {
        let mut sink = Vec::new();
        let read = tokio::time::timeout(closed_within, stream.read_to_end(&mut sink)).await;
        assert!(
            read.is_ok(),
            "a stalled connection was not closed within {closed_within:?}"
        );
    }
    // Let the server's tasks notice.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        metric(&metrics, "hyperlightd_connections_open") <= 1.0,
        "connections left open"
    );
    let dropped = |reason: &str| {
        metric(
            &metrics,
            &format!(r#"hyperlightd_connections_dropped_total{{reason="{reason}"}}"#),
        )
    };
    let (replaced, idle) = (dropped("replaced"), dropped("idle_timeout"));
    println!("closed by the daemon: {replaced} to make room, {idle} idle");
    assert!(replaced > 0.0, "the cap was reached");
    assert!(idle > 0.0, "the idle timeout closed some");
    let (status, _) = request(&socket, &exec_request("2 + 2")).await;
    assert_eq!(status, 200);

    stop.send("test").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
}
