//! The daemon's refusal to start on a host whose KVM cannot run Hyperlight guests. Runs on the
//! host itself (not in the VM); `cargo xtask test` runs it where the host's `/dev/kvm` is
//! `kvm_pvm`. On a host whose KVM works there is nothing to refuse, and this test fails saying so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use hyperlightd_e2e::binary;

#[test]
fn startup_on_kvm_that_cannot_run_guests_exits_with_a_clear_message() {
    let pvm = Path::new("/sys/module/kvm_pvm").exists() && Path::new("/dev/kvm").exists();
    assert!(
        pvm,
        "this test needs a /dev/kvm that cannot run Hyperlight guests (kvm_pvm); this host has none"
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let out = Command::new(binary("hyperlightd"))
        .arg("--socket")
        .arg(&socket)
        .args(["--pool", "javascript=1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    let error_lines: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(
        error_lines.len(),
        1,
        "one error line, not a cascade of VM errors:\n{stderr}"
    );
    let line = error_lines[0];
    assert!(line.contains("cannot run Hyperlight guests"), "{line}");
    assert!(line.contains("kvm_pvm"), "names the cause: {line}");
    assert!(line.contains("hardware KVM"), "says what to do: {line}");
    assert!(!socket.exists(), "no socket file is left behind");
}
