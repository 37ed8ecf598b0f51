use std::io::Read;
use std::net::TcpListener;

use super::*;

/// A helper serving on a socket in a new directory.
fn helper() -> (tempfile::TempDir, Helper) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("egress.sock");
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || serve(listener, 4));
    (dir, Helper::new(path))
}

#[test]
fn it_says_hello_resolves_names_and_hands_over_a_connection_to_the_address_asked() {
    let (_dir, helper) = helper();
    assert_eq!(helper.hello().unwrap(), env!("CARGO_PKG_VERSION"));
    let found = helper.resolve("localhost", 8080).unwrap();
    assert!(
        found
            .iter()
            .any(|a| a.ip().is_loopback() && a.port() == 8080),
        "{found:?}"
    );

    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = server.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut tcp, _) = server.accept().unwrap();
        tcp.write_all(b"over the passed connection").unwrap();
    });
    let mut tcp = helper.connect(address, Duration::from_secs(5)).unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    assert_eq!(text, "over the passed connection");
}

#[test]
fn it_never_connects_to_metadata_link_local_or_multicast_addresses() {
    let (_dir, helper) = helper();
    for address in [
        "169.254.169.254:80",
        "[::ffff:169.254.169.254]:80",
        "[fe80::1]:80",
        "224.0.0.1:80",
        "0.0.0.0:80",
    ] {
        let refused = helper
            .connect(address.parse().unwrap(), Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(refused.kind, FetchErrorKind::Refused, "{address}");
        assert!(
            refused.message.contains("never connects there"),
            "{}",
            refused.message
        );
    }
    assert_eq!(never("93.184.216.34".parse().unwrap()), None);
    assert_eq!(
        never("127.0.0.1".parse().unwrap()),
        None,
        "loopback: the daemon's rules decide"
    );
}

#[test]
fn what_is_not_a_question_is_answered_as_such_and_the_helper_answers_the_next() {
    let (_dir, helper) = helper();
    for garbage in [&b"{\"connect\": 5}\n"[..], b"\xff\xfe\n", b"[]\n"] {
        let mut stream = UnixStream::connect(helper.path()).unwrap();
        stream.write_all(garbage).unwrap();
        let (line, fd) = passing::receive_line(&stream, MAX_LINE).unwrap();
        let answer: Answer = serde_json::from_slice(&line).unwrap();
        assert!(
            matches!(&answer, Answer::Failed(why) if why.contains("not a question")),
            "{answer:?}"
        );
        assert!(fd.is_none());
    }
    assert!(helper.hello().is_ok());
}

#[test]
fn a_missing_helper_is_named_by_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.sock");
    let error = Helper::new(path.clone()).hello().unwrap_err();
    assert!(
        error.message.contains(&path.display().to_string()),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("does not answer"),
        "{}",
        error.message
    );
}

#[test]
fn past_its_connections_it_answers_try_again_and_serves_again_once_one_closes() {
    let (_dir, helper) = helper();
    // Four connections that ask nothing hold the helper's four threads (each waits ASK_WAIT).
    let held: Vec<UnixStream> = (0..4)
        .map(|_| UnixStream::connect(helper.path()).unwrap())
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let busy = loop {
        let error = match helper.hello() {
            Err(error) => error,
            // The helper has not accepted all four yet.
            Ok(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Ok(version) => panic!("answered hello ({version}) with four connections held"),
        };
        break error;
    };
    assert!(
        busy.message.contains("4 connections open; try again"),
        "{}",
        busy.message
    );
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while helper.hello().is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the helper never served again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
