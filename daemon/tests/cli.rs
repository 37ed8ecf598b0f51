//! The daemon's command line and configuration errors, run as the real binary: none of this
//! reaches the hypervisor, so it runs on any host.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn hyperlightd(args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hyperlightd"))
        .arg("--socket")
        .arg(dir.path().join("d.sock"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        !dir.path().join("d.sock").exists(),
        "no socket for a daemon that did not start"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_command_line_that_does_not_parse_exits_64() {
    for args in [
        &["--no-such-option"][..],
        &["--pool", "cobol=1"],
        &["--max-connections", "many"],
    ] {
        let (code, _, stderr) = hyperlightd(args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains("error:"), "{args:?}: {stderr}");
    }
}

#[test]
fn help_and_version_are_not_errors() {
    let (code, stdout, _) = hyperlightd(&["--help"]);
    assert_eq!(code, Some(0));
    for option in [
        "--max-connections",
        "--idle-timeout-ms",
        "--body-read-timeout-ms",
        "--max-header-bytes",
        "--python-max-host-handles",
    ] {
        assert!(stdout.contains(option), "--help names {option}");
    }
    let (code, stdout, _) = hyperlightd(&["--version"]);
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("hyperlightd "), "{stdout}");
}

#[test]
fn inconsistent_limits_exit_64_naming_the_option() {
    for (args, names) in [
        (&["--max-header-bytes", "100"][..], "--max-header-bytes"),
        (&["--idle-timeout-ms", "0"], "--idle-timeout-ms"),
        (&["--max-connections", "100000000"], "--max-connections"),
    ] {
        let (code, _, stderr) = hyperlightd(args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_caller_options_exit_64_and_an_unopenable_audit_log_or_snapshot_dir_73() {
    for args in [
        &["--allow-uid", "no-such-user-here"][..],
        &["--allow-gid", "no-such-group-here"],
        &["--max-execs-per-caller", "0"],
        &["--max-sessions-per-caller", "0"],
    ] {
        let (code, _, stderr) = hyperlightd(args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{args:?}: {stderr}");
    }
    // Refused before the socket is bound (the helper checks there is none).
    let (code, _, stderr) = hyperlightd(&["--audit-log", "/nonexistent-dir/audit.log"]);
    assert_eq!(code, Some(73), "{stderr}");
    assert!(stderr.contains("/nonexistent-dir/audit.log"), "{stderr}");
    let (code, _, stderr) = hyperlightd(&["--snapshot-dir", "/proc/hyperlightd-snapshots"]);
    assert_eq!(code, Some(73), "{stderr}");
    assert!(stderr.contains("/proc/hyperlightd-snapshots"), "{stderr}");
}

#[test]
fn a_default_policy_that_cannot_be_read_or_is_not_valid_exits_64() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let missing = dir
        .path()
        .join("missing.json")
        .to_string_lossy()
        .into_owned();
    for (file, says) in [
        (missing, "missing.json"),
        (write("syntax.json", "{"), "EOF"),
        (write("unknown.json", r#"{"allowed": []}"#), "unknown field"),
        (
            write("names.json", r#"{"blocked_globals": ["not a name"]}"#),
            "not a name",
        ),
    ] {
        let (code, _, stderr) = hyperlightd(&["--policy", &file, "--pool", "javascript=1"]);
        assert_eq!(code, Some(64), "{file}: {stderr}");
        assert!(stderr.contains("--policy"), "{file}: {stderr}");
        assert!(stderr.contains(says), "{file}: {stderr}");
    }
}

#[test]
fn an_egress_helper_that_does_not_answer_exits_69_naming_its_socket() {
    let (code, _, stderr) = hyperlightd(&[
        "--egress-allow",
        "https://example.com/",
        "--egress-helper",
        "/nonexistent-dir/egress.sock",
    ]);
    assert_eq!(code, Some(69), "{stderr}");
    assert!(stderr.contains("/nonexistent-dir/egress.sock"), "{stderr}");
    assert!(stderr.contains("does not answer"), "{stderr}");
}

#[test]
fn the_egress_helper_answers_under_its_system_call_filter() {
    use hyperlightd::egress::helper::Helper;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hyperlightd-egress"))
        .arg("--socket")
        .arg(&socket)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !socket.exists() && started.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let helper = Helper::new(socket);
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = server.local_addr().unwrap();
    let asked = (
        helper.hello(),
        helper.resolve("localhost", 80),
        helper.connect(address, std::time::Duration::from_secs(5)),
        helper.connect(
            "169.254.169.254:80".parse().unwrap(),
            std::time::Duration::from_secs(5),
        ),
    );
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("seccomp:"), "{stderr}");
    assert!(stderr.contains("system call filters installed"), "{stderr}");
    let (hello, resolved, connected, refused) = asked;
    assert_eq!(hello.unwrap(), env!("CARGO_PKG_VERSION"), "{stderr}");
    assert!(!resolved.unwrap().is_empty());
    assert_eq!(connected.unwrap().peer_addr().unwrap(), address);
    assert!(
        refused
            .unwrap_err()
            .message
            .contains("never connects there")
    );
}
