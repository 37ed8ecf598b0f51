//! End-to-end tests of the Python client (clients/python): its own pytest suites in
//! clients/python/e2e, run against a real daemon with Python and JavaScript pools. One runs
//! every method of the sync and async clients; the other each framework adapter with the real
//! framework and a scripted model, printing the conversations.
//!
//! Needs a KVM that runs Hyperlight guests (`cargo xtask test` runs them in the nested-KVM VM),
//! the Python guest, and the client's virtual environment (both built by `cargo xtask test`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use hyperlightd_e2e::{Daemon, python_sdk_python, within};

/// Time limit for one pytest run: a few dozen execs, sessions saving state under emulation.
const PYTEST_LIMIT: Duration = Duration::from_secs(480);

/// Runs `clients/python/e2e/FILE` with pytest against a fresh daemon, failing with its output
/// (and the daemon's log) unless every test passes.
async fn pytest(file: &str) {
    let daemon = Daemon::start_with_python(&["javascript=1", "python=1"], &[]).await;
    let home = tempfile::tempdir().unwrap();
    let suite = format!(
        "{}/../clients/python/e2e/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = tokio::process::Command::new(python_sdk_python())
        .args(["-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", &suite])
        .env("HYPERLIGHTD_SOCKET", daemon.socket())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // The frameworks write caches and settings under HOME; the VM's root is read-only.
        .env("HOME", home.path())
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = within(&format!("pytest {file}"), PYTEST_LIMIT, run)
        .await
        .expect("pytest starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "pytest {file} failed:\n{stdout}\n{stderr}\ndaemon log:\n{}",
        daemon.log()
    );
}

#[tokio::test]
async fn the_python_client_runs_every_method_against_the_daemon() {
    pytest("test_e2e_client.py").await;
}

#[tokio::test]
async fn the_framework_adapters_run_real_code_for_scripted_models() {
    pytest("test_e2e_integrations.py").await;
}
