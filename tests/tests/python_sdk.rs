//! End-to-end tests of the Python client (clients/python): its own pytest suites in
//! clients/python/e2e, run against a real daemon with Python and JavaScript pools: every method
//! of the sync and async clients, the quickstart example, each framework adapter with the real
//! framework and a scripted model, printing the conversations, and E2B's own SDK through `hlctl
//! e2b-gateway` (one of the caller's own, and one shared by two keys, each a caller the daemon
//! tells apart) and through the daemon's own listener (`--e2b-listen`, two keys), then E2B's
//! JavaScript SDK's own test through another gateway and through the daemon's listener. One daemon
//! serves them all, its sessions kept on disk (`--state-dir`), installing packages from a
//! loopback index of real wheels (tests/src/index.rs)
//! (starting one takes half a minute under emulation); pytest names each test that fails.
//!
//! Needs a KVM that runs Hyperlight guests (`cargo xtask test` runs them in the nested-KVM VM),
//! the Python guest, and the client's virtual environment (both built by `cargo xtask test`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::Duration;

use hyperlightd_e2e::index::{TestIndex, pypi_wheels};
use hyperlightd_e2e::{
    Daemon, E2bGateway, E2bListen, binary, e2b_js_test, python_sdk_python, within,
};

/// Time limit for the pytest run: a few dozen execs, sessions saving state under emulation.
const PYTEST_LIMIT: Duration = Duration::from_secs(480);
/// Time limit for E2B's JavaScript SDK's test: a few sandboxes and a dozen runs.
const NODE_LIMIT: Duration = Duration::from_secs(300);
/// The key the JavaScript SDK's gateway takes.
const JS_KEY: &str = "e2b_test_key_js_0123456789abcdef";
/// The daemon's own E2B listener's keys: the JavaScript SDK's, and two that
/// test_e2e_e2b.py's `test_the_daemon_s_own_listener...` uses (it knows them too).
const LISTENER_KEYS: [(&str, &str); 3] = [
    ("e2b-js", JS_KEY),
    ("alice", "e2b_alice_0123456789abcdef"),
    ("bob", "e2b_bob_0123456789abcdef"),
];

#[tokio::test]
async fn the_python_client_and_its_framework_adapters_against_the_daemon() {
    // Sessions kept on disk, so that E2B's pause parks a sandbox there.
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    // The tests' own user may act for others: test_e2e_e2b.py's shared gateway does.
    let own_uid = std::fs::metadata("/proc/self").unwrap().uid().to_string();
    // test_e2e_client.py installs packages in a session.
    let index = TestIndex::serve(pypi_wheels()).await;
    let wheels = tempfile::tempdir().unwrap();
    let cache = wheels.path().to_str().unwrap();
    // E2B's API served by the daemon too, beside the gateways the tests start.
    let listen = E2bListen::new(&LISTENER_KEYS);
    let index_url = index.url();
    let mut args = vec![
        "--state-dir",
        state_dir,
        "--delegate-uid",
        &own_uid,
        "--package-index",
        &index_url,
        "--package-cache",
        cache,
    ];
    args.extend(listen.args.iter().map(String::as_str));
    let daemon = Daemon::start_with_python(&["javascript=1", "python=1"], &args).await;
    let home = tempfile::tempdir().unwrap();
    let suite = concat!(env!("CARGO_MANIFEST_DIR"), "/../clients/python/e2e");
    let run = tokio::process::Command::new(python_sdk_python())
        .args(["-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", suite])
        .env("HYPERLIGHTD_SOCKET", daemon.socket())
        // test_e2e_e2b.py puts `hlctl e2b-gateway` in front of the daemon for E2B's SDK.
        .env("HLCTL", binary("hlctl"))
        // ... and the daemon's own listener, for the test that uses it.
        .env("HYPERLIGHTD_E2B_URL", &listen.url)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // The frameworks write caches and settings under HOME; the VM's root is read-only.
        .env("HOME", home.path())
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = within("pytest clients/python/e2e", PYTEST_LIMIT, run)
        .await
        .expect("pytest starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "pytest clients/python/e2e failed:\n{stdout}\n{stderr}\ndaemon log:\n{}",
        daemon.log()
    );
    let gateway = E2bGateway::start(&daemon, JS_KEY).await;
    e2b_javascript_sdk(&daemon, home.path(), &gateway.url, "hlctl e2b-gateway").await;
    e2b_javascript_sdk(
        &daemon,
        home.path(),
        &listen.url,
        "hyperlightd --e2b-listen",
    )
    .await;
}

/// E2B's JavaScript SDK (`@e2b/code-interpreter` from npm), unmodified, runs its test
/// (tests/e2b-js/e2b.test.mjs, with node's test runner) against E2B's API at `url`, served by
/// `through` in front of `daemon` (or by `daemon` itself), whose key is [`JS_KEY`].
async fn e2b_javascript_sdk(daemon: &Daemon, home: &std::path::Path, url: &str, through: &str) {
    println!("E2B's JavaScript SDK through {through}");
    let run = tokio::process::Command::new("node")
        .arg("--test")
        .arg(e2b_js_test())
        .env("E2B_API_URL", url)
        .env("E2B_SANDBOX_URL", url)
        .env("E2B_API_KEY", JS_KEY)
        .env("HOME", home)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = within("node --test e2b.test.mjs", NODE_LIMIT, run)
        .await
        .expect("node starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "E2B's JavaScript SDK test through {through} failed:\n{stdout}\n{stderr}\ndaemon log:\n{}",
        daemon.log()
    );
}
