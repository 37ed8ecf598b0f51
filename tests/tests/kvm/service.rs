//! What a service manager hears (systemd's `Type=notify` protocol, on a datagram socket the test
//! binds as `NOTIFY_SOCKET`): READY only once the daemon serves, STOPPING when it drains.

use std::os::unix::net::UnixDatagram;

use super::*;

/// The next notification, waiting at most `STEP_LIMIT`.
async fn next_notification(socket: &std::sync::Arc<UnixDatagram>) -> String {
    let socket = socket.clone();
    let received = tokio::task::spawn_blocking(move || {
        let mut buffer = [0u8; 4096];
        let n = socket.recv(&mut buffer).expect("a notification in time");
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    });
    within("a notification", STEP_LIMIT, received)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_service_manager_hears_ready_once_it_serves_and_stopping_when_it_drains() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(STEP_LIMIT)).unwrap();
    let socket = std::sync::Arc::new(socket);
    let mut daemon =
        Daemon::start_with_env(&["--pool", "javascript=1"], &[("NOTIFY_SOCKET", &path)]).await;
    let ready = next_notification(&socket).await;
    let lines: Vec<&str> = ready.lines().collect();
    assert_eq!(lines[0], "READY=1", "{ready}");
    assert!(lines[1].starts_with("STATUS=serving on "), "{ready}");
    assert!(lines[1].ends_with("; pools javascript=1"), "{ready}");
    // Ready means serving: a program runs at once.
    assert_eq!(run(&daemon, js("1 + 1")).await.result, json!(2));

    daemon.signal(Signal::SIGTERM);
    let stopping = next_notification(&socket).await;
    assert!(
        stopping.starts_with("STOPPING=1\nSTATUS=SIGTERM"),
        "{stopping}"
    );
    assert!(stopping.contains("draining"), "{stopping}");
    assert_eq!(daemon.wait_exit(STEP_LIMIT).await, Some(0));
}
