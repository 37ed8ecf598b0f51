//! Helpers for the end-to-end tests: start the real `hyperlightd` binary on a temporary socket,
//! talk to it through the real client and the real `hlctl`, and bound every wait.
//!
//! The binaries are the ones `cargo build --bins` put beside the test executable's directory
//! (`cargo xtask test` builds them first). Nothing here skips: a missing binary or a daemon that
//! cannot start fails the test with the daemon's own words.

#![forbid(unsafe_code)]
// A failed expectation here is a failed test: panicking with a message is the point.
#![allow(clippy::expect_used)]

use std::ffi::OsStr;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hyperlightd_client::{Client, CreateSessionRequest, ExecRequest, ExecResponse, Language};

pub mod deltas;
pub mod disk;
pub mod index;
pub mod otlp;
mod templates;
pub mod web;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Time limit for a daemon to come up. Warming a sandbox takes about half a second under
/// emulation; a cold start of the guest binary's pages over 9p takes longer.
pub const STARTUP_LIMIT: Duration = Duration::from_secs(120);

/// Time limit for any one step of a test that has no better bound.
pub const STEP_LIMIT: Duration = Duration::from_secs(60);

/// Path of a workspace binary built beside the tests (`target/<profile>/<name>`).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} not found: build the binaries first (`cargo build --bins`; `cargo xtask test` does)",
        path.display()
    );
    path
}

/// The compiled Python guest, which `cargo xtask python-guest` builds (`cargo xtask test`
/// does it first).
pub fn python_guest() -> PathBuf {
    built_by_xtask("python-guest/python.aot")
}

/// The Python guest with the packages of tests/python-packages.txt, which `cargo xtask test`
/// builds in target/python-guest-packages.
pub fn python_guest_with_packages() -> PathBuf {
    built_by_xtask("python-guest-packages/python.aot")
}

/// The native Python guest's root filesystem, which `cargo xtask native-python` builds
/// (`cargo xtask test` does it first).
pub fn native_python_rootfs() -> PathBuf {
    built_by_xtask("native-python/python.cpio")
}

/// Time limit for a daemon with a native Python pool to come up: it boots the rootfs and
/// imports the scientific stack before its template is taken (a minute or more under
/// emulation).
pub const NATIVE_STARTUP_LIMIT: Duration = Duration::from_secs(900);

/// The Python of the virtual environment holding the MCP client SDK (tests/mcp/requirements.txt),
/// which `cargo xtask test` builds in target/mcp-client.
pub fn mcp_client_python() -> PathBuf {
    built_by_xtask("mcp-client/bin/python")
}

/// The Python of the virtual environment with the Python client's wheel, its test tools and the
/// frameworks its adapters are tested against (clients/python/e2e/requirements.txt), which
/// `cargo xtask test` builds in target/python-sdk/venv.
pub fn python_sdk_python() -> PathBuf {
    built_by_xtask("python-sdk/venv/bin/python")
}

/// The reference filesystem MCP server (npm `@modelcontextprotocol/server-filesystem`, pinned in
/// tests/mcp/package-lock.json), which `cargo xtask test` installs in target/mcp-servers.
pub fn mcp_server_filesystem() -> PathBuf {
    built_by_xtask("mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
}

/// E2B's JavaScript SDK's test (tests/e2b-js/e2b.test.mjs), which `cargo xtask test` copies
/// into target/e2b-js beside the SDK it installs there (pinned in tests/e2b-js).
pub fn e2b_js_test() -> PathBuf {
    built_by_xtask("e2b-js/e2b.test.mjs")
}

/// `target/<relative>`, which `cargo xtask test` builds before running the tests.
fn built_by_xtask(relative: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    // target/<profile>/deps/<test>-<hash> → target/<relative>
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test executable lives in target/<profile>/deps");
    let path = target.join(relative);
    assert!(
        path.is_file(),
        "{} not found: `cargo xtask test` builds it first",
        path.display()
    );
    path
}

/// Awaits `future`, failing the test with `step` in the message if it outlives `limit`.
pub async fn within<T>(step: &str, limit: Duration, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {} s: {step}", limit.as_secs()),
    }
}

/// A Python request for `code`.
pub fn py(code: &str) -> ExecRequest {
    ExecRequest::new(Language::Python, code)
}

/// A JavaScript request for `code`.
pub fn js(code: &str) -> ExecRequest {
    ExecRequest::new(Language::Javascript, code)
}

/// A Python request for `code` with a time limit of `timeout_ms`.
pub fn py_with_timeout(code: &str, timeout_ms: u64) -> ExecRequest {
    ExecRequest {
        timeout_ms: Some(timeout_ms),
        ..py(code)
    }
}

/// A JavaScript request for `code` with a time limit of `timeout_ms`.
pub fn js_with_timeout(code: &str, timeout_ms: u64) -> ExecRequest {
    ExecRequest {
        timeout_ms: Some(timeout_ms),
        ..js(code)
    }
}

/// How long to wait for the answer to a request with the time limit `timeout_ms`: that limit
/// plus a margin, never less than [`STEP_LIMIT`].
fn limit_for(timeout_ms: Option<u64>) -> Duration {
    timeout_ms
        .map_or(STEP_LIMIT, |ms| Duration::from_millis(ms) + STEP_LIMIT / 2)
        .max(STEP_LIMIT)
}

/// A new session of `language` on `client`'s daemon: its id.
pub async fn new_session(client: &Client, language: Language) -> String {
    let request = CreateSessionRequest::new(language);
    within("create", STEP_LIMIT, client.create_session(&request))
        .await
        .unwrap_or_else(|e| panic!("creating a session failed: {e}"))
        .id
}

/// Runs `request` on `daemon`, waiting for the answer at most the request's own time limit
/// plus a margin (and never less than [`STEP_LIMIT`]): a program stopped at its limit is then
/// answered `timeout`, not a harness time-out. A failed exchange fails the test with the
/// daemon's log.
pub async fn run(daemon: &Daemon, request: ExecRequest) -> ExecResponse {
    let limit = limit_for(request.timeout_ms);
    within("exec", limit, daemon.client().exec(&request))
        .await
        .unwrap_or_else(|e| panic!("exec failed: {e}\ndaemon log:\n{}", daemon.log()))
}

/// A running daemon on a temporary socket. Killed when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    /// Starts `hyperlightd` with `args` (plus `--socket`) and waits until it is ready: every
    /// pool at its size.
    pub async fn start(args: &[&str]) -> Daemon {
        Self::start_with_env(args, &[]).await
    }

    /// [`start`](Self::start) with `env` added to the daemon's environment.
    pub async fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> Daemon {
        Self::start_within(args, env, STARTUP_LIMIT).await
    }

    /// [`start_with_env`](Self::start_with_env), ready within `limit`.
    async fn start_within(args: &[&str], env: &[(&str, &Path)], limit: Duration) -> Daemon {
        Self::start_from(&binary("hyperlightd"), args, env, limit).await
    }

    /// Starts the daemon `executable` (a copy of `hyperlightd`, say) with `args` and `env`,
    /// ready within `limit`.
    pub async fn start_from(
        executable: &Path,
        args: &[&str],
        env: &[(&str, &Path)],
        limit: Duration,
    ) -> Daemon {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("hyperlightd.sock");
        let log = std::fs::File::create(dir.path().join("daemon.log")).expect("a log file");
        let shared = templates::directory_for(args);
        let child = Command::new(executable)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .args(
                shared
                    .iter()
                    .flat_map(|dir| [OsStr::new("--snapshot-dir"), dir.as_os_str()]),
            )
            .envs(env.iter().copied())
            .env("HYPERLIGHTD_LOG", "info,hyperlightd=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log handle"))
            .stderr(log)
            .spawn()
            .expect("hyperlightd starts");
        let mut daemon = Daemon {
            child: Some(child),
            dir,
            socket,
        };
        daemon.wait_ready_within(limit).await;
        if let Some(dir) = shared {
            daemon.wait_templates_saved().await;
            templates::keep_saved(&dir);
        }
        daemon
    }

    /// Starts `hyperlightd` with the Python guest, a `--pool` for each of `pools`
    /// (`"python=1"`, `"javascript=1"`), and `extra` arguments, and waits until it is ready.
    pub async fn start_with_python(pools: &[&str], extra: &[&str]) -> Daemon {
        let guest = python_guest();
        let mut args: Vec<&str> = pools.iter().flat_map(|pool| ["--pool", pool]).collect();
        args.extend(["--python-guest", guest.to_str().expect("a UTF-8 path")]);
        args.extend_from_slice(extra);
        Daemon::start(&args).await
    }

    /// Starts `hyperlightd` with the native Python guest serving Python, a `--pool` for each
    /// of `pools`, and `extra` arguments, and waits until it is ready.
    pub async fn start_with_native_python(pools: &[&str], extra: &[&str]) -> Daemon {
        let rootfs = native_python_rootfs();
        let limit = NATIVE_STARTUP_LIMIT.as_millis().to_string();
        let mut args: Vec<&str> = pools.iter().flat_map(|pool| ["--pool", pool]).collect();
        args.extend(["--python-runtime", "native", "--startup-timeout-ms", &limit]);
        args.extend(["--python-rootfs", rootfs.to_str().expect("a UTF-8 path")]);
        args.extend_from_slice(extra);
        Daemon::start_within(&args, &[], NATIVE_STARTUP_LIMIT).await
    }

    async fn wait_ready_within(&mut self, limit: Duration) {
        let started = Instant::now();
        let client = self.client();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "hyperlightd exited during startup ({status}); its log:\n{}",
                    self.log()
                );
            }
            // Each probe is bounded too: a daemon that has bound its socket but hangs before
            // serving would otherwise hold the connection in the backlog for ever.
            let probe = tokio::time::timeout(Duration::from_secs(5), client.health()).await;
            if matches!(probe, Ok(Ok(ref health)) if health.ready) {
                return;
            }
            if started.elapsed() > limit {
                panic!(
                    "hyperlightd did not answer within {} s of starting; its log:\n{}",
                    limit.as_secs(),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A client for this daemon.
    pub fn client(&self) -> Client {
        Client::connect(&self.socket)
    }

    /// The daemon's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The daemon's resident memory now (`VmRSS`), every sandbox's pages included.
    pub fn resident_bytes(&self) -> u64 {
        let pid = self.child.as_ref().expect("the daemon runs").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .expect("the daemon's /proc status");
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().strip_suffix("kB"))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .expect("VmRSS in kB");
        kib * 1024
    }

    /// Everything the daemon has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// How many times `language`'s template was made ready from `source` ("built", "loaded"),
    /// as the daemon's metrics count it.
    pub async fn templates(&self, language: &str, source: &str) -> u64 {
        let series = format!(
            r#"hyperlightd_sandbox_template_seconds_count{{language="{language}",source="{source}"}}"#
        );
        self.metric(&series).await as u64
    }

    /// One series of the daemon's metrics now (its name and labels as the daemon writes
    /// them); 0 when the daemon has not written it.
    pub async fn metric(&self, series: &str) -> f64 {
        metric(&self.metrics().await, series)
    }

    /// Waits, at most [`STEP_LIMIT`], until the daemon's metrics satisfy `reached` (read with
    /// [`metric`]), so that a test acts on what the daemon holds rather than on requests still
    /// on their way to it; fails naming `what` otherwise.
    pub async fn wait_for_metrics(&self, what: &str, reached: impl Fn(&str) -> bool) {
        within(what, STEP_LIMIT, async {
            while !reached(&self.metrics().await) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    /// The daemon's metrics now, in the Prometheus text format.
    async fn metrics(&self) -> String {
        within("metrics", STEP_LIMIT, self.client().metrics())
            .await
            .expect("metrics")
    }

    /// Waits, at most `limit`, until the snapshot directory `dir` holds one saved template of
    /// each of `languages`, and returns them in that order.
    pub async fn wait_saved(
        &self,
        dir: &Path,
        languages: &[&str],
        limit: Duration,
    ) -> Vec<PathBuf> {
        let started = Instant::now();
        loop {
            let found: Vec<Vec<PathBuf>> = languages
                .iter()
                .map(|language| saved_templates(dir, language))
                .collect();
            if found.iter().all(|saved| saved.len() == 1) {
                return found.into_iter().flatten().collect();
            }
            assert!(
                started.elapsed() < limit,
                "the templates were not saved within {} s: {found:?}; daemon log:\n{}",
                limit.as_secs(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the daemon has saved (or failed to save) each template it built, so that the
    /// next daemon of the same settings loads them and this one is not killed mid-save.
    async fn wait_templates_saved(&self) {
        let built =
            self.templates("javascript", "built").await + self.templates("python", "built").await;
        let started = Instant::now();
        loop {
            let log = self.log();
            let ended = [
                "template saved in",
                "saving the template failed",
                "cannot be saved",
                "not saving it",
                "cannot start the thread that saves",
            ]
            .iter()
            .map(|line| log.matches(line).count() as u64)
            .sum::<u64>();
            if ended >= built {
                return;
            }
            assert!(
                started.elapsed() < TEMPLATE_SAVE_LIMIT,
                "the daemon did not save its {built} templates within {} s; its log:\n{log}",
                TEMPLATE_SAVE_LIMIT.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends `signal` to the daemon.
    pub fn signal(&self, signal: Signal) {
        let child = self.child.as_ref().expect("the daemon is running");
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32"));
        kill(pid, signal).expect("signalling the daemon");
    }

    /// Waits for the daemon to exit and returns its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = Instant::now();
        let child = self.child.as_mut().expect("the daemon is running");
        loop {
            if let Some(status) = child.try_wait().expect("polling the daemon") {
                self.child = None;
                return status.code();
            }
            if started.elapsed() > limit {
                panic!(
                    "hyperlightd did not exit within {} s; its log:\n{}",
                    limit.as_secs(),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs `hlctl` against this daemon with `args`, feeding it `stdin`.
    pub async fn hlctl(&self, args: &[&str], stdin: &str) -> Output {
        self.hlctl_as(None, args, stdin).await
    }

    /// Runs `hlctl` as the user `uid` in the group `gid` (None: as this process), with `args`
    /// and `stdin`. Needs root, and [`open_socket_to_everyone`](Self::open_socket_to_everyone).
    /// Bounded as [`run`] bounds a request: by the `--timeout-ms` in `args`, if any.
    pub async fn hlctl_as(&self, user: Option<(u32, u32)>, args: &[&str], stdin: &str) -> Output {
        let asked = args
            .windows(2)
            .find(|pair| pair[0] == "--timeout-ms")
            .and_then(|pair| pair[1].parse::<u64>().ok());
        let limit = limit_for(asked);
        let socket = self.socket.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let stdin = stdin.to_owned();
        let run = tokio::task::spawn_blocking(move || run_hlctl_as(user, &socket, &args, &stdin));
        within("hlctl", limit, run).await.expect("the hlctl thread")
    }

    /// Lets every user reach the socket (its directory and the socket itself), so that a test
    /// can call as other users; the daemon's allow lists then decide who may.
    pub fn open_socket_to_everyone(&self) {
        use std::os::unix::fs::PermissionsExt;
        let open = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        };
        open(self.dir.path(), 0o755);
        open(&self.socket, 0o666);
    }
}

/// `hlctl e2b-gateway` in front of a daemon, on a free loopback port and with a key of the
/// test's; stopped when dropped.
#[derive(Debug)]
pub struct E2bGateway {
    _process: tokio::process::Child,
    /// `http://127.0.0.1:PORT`: both `E2B_API_URL` and `E2B_SANDBOX_URL`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl E2bGateway {
    /// Starts one in front of `daemon`, taking `key`, and waits until it listens.
    pub async fn start(daemon: &Daemon, key: &str) -> E2bGateway {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let key_file = dir.path().join("key");
        std::fs::write(&key_file, format!("{key}\n")).expect("the key file is written");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let process = tokio::process::Command::new(binary("hlctl"))
            .arg("--socket")
            .arg(daemon.socket())
            .args(["e2b-gateway", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--api-key-file")
            .arg(&key_file)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("hlctl e2b-gateway starts");
        within("the gateway listens", STEP_LIMIT, async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        E2bGateway {
            _process: process,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }
}

/// The daemon's own E2B listener (`--e2b-listen`), on a free loopback port, with a keys file of
/// `(name, key)`s: the arguments to start the daemon with, and its URL.
#[derive(Debug)]
pub struct E2bListen {
    /// `--e2b-listen ADDR --e2b-keys FILE`.
    pub args: Vec<String>,
    /// `http://127.0.0.1:PORT`: both `E2B_API_URL` and `E2B_SANDBOX_URL`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl E2bListen {
    pub fn new(keys: &[(&str, &str)]) -> E2bListen {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("keys");
        let lines: String = keys
            .iter()
            .map(|(name, key)| format!("{name} {key}\n"))
            .collect();
        std::fs::write(&file, lines).expect("the keys file is written");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            .expect("the keys file is the daemon's user's alone");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let args = vec![
            "--e2b-listen".to_owned(),
            format!("127.0.0.1:{port}"),
            "--e2b-keys".to_owned(),
            file.to_str().expect("a UTF-8 path").to_owned(),
        ];
        E2bListen {
            args,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }
}

/// The lines of the audit log at `path`, as JSON (the daemon writes each line whole).
pub fn audit_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the audit log {}: {e}", path.display()))
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("an audit line that is not JSON ({e}): {line}"))
        })
        .collect()
}

/// Sends `request` (raw bytes: a request line, headers and body) on a new connection to
/// `socket` and returns the status code and body of the answer, read to the end of the
/// connection: for requests the client library would never send. Bounded by [`STEP_LIMIT`].
pub async fn raw_request(socket: &Path, request: &[u8]) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    within("raw request", STEP_LIMIT, async {
        let mut stream = tokio::net::UnixStream::connect(socket)
            .await
            .expect("connecting to the daemon");
        // The daemon may answer before it has read everything (413, 431) and close.
        let _ = stream.write_all(request).await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        status_and_body(&answer)
    })
    .await
}

/// [`raw_request`] as the user and group `user` (uid, gid): needs root, and
/// [`Daemon::open_socket_to_everyone`].
pub async fn raw_request_as(user: (u32, u32), socket: &Path, request: &[u8]) -> (u16, Vec<u8>) {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let (socket, request) = (socket.to_owned(), request.to_vec());
    let send = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(binary("e2e-raw-request"))
            .uid(user.0)
            .gid(user.1)
            .arg(&socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("e2e-raw-request starts");
        let mut stdin = child.stdin.take().expect("its stdin");
        stdin.write_all(&request).expect("writing the request");
        drop(stdin);
        let output = child.wait_with_output().expect("e2e-raw-request ends");
        assert!(
            output.status.success(),
            "e2e-raw-request: {}",
            output.status
        );
        output.stdout
    });
    let answer = within("raw request as another user", STEP_LIMIT, send)
        .await
        .expect("the request's thread");
    status_and_body(&answer)
}

fn status_and_body(answer: &[u8]) -> (u16, Vec<u8>) {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |at| at + 4);
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {head:?}"));
    (status, answer[split..].to_vec())
}

/// A raw `POST path` with the JSON `body`, closing the connection after the answer.
pub fn post_request(path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: hyperlightd\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// A raw `POST /v1/exec` with `body`, closing the connection after the answer.
pub fn exec_request(body: &[u8]) -> Vec<u8> {
    post_request("/v1/exec", body)
}

/// A raw `GET path`, closing the connection after the answer.
pub fn get_request(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: hyperlightd\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Checks the answer to `program`, which wrote far more than `cap` bytes (mostly to stderr
/// when `to_stderr`) and then ended with the value `"after"`: it ran to its end, and its
/// output was cut at exactly the cap and flagged.
pub fn assert_capped_and_finished(
    response: &ExecResponse,
    program: &str,
    to_stderr: bool,
    cap: usize,
) {
    use hyperlightd_client::ExecStatus;
    assert_eq!(
        response.status,
        ExecStatus::Ok,
        "{program}: {:?}",
        response.error
    );
    assert_eq!(response.result, serde_json::json!("after"), "{program}");
    assert!(response.truncated, "{program}");
    let (written, other) = if to_stderr {
        (&response.stderr, &response.stdout)
    } else {
        (&response.stdout, &response.stderr)
    };
    assert_eq!(written.len() + other.len(), cap, "{program}");
    assert!(written.len() > cap / 2, "{program}");
}

/// Runs `hlctl --socket SOCKET ARGS...` with `stdin` and returns its output.
pub fn run_hlctl(socket: &Path, args: &[String], stdin: &str) -> Output {
    run_hlctl_as(None, socket, args, stdin)
}

/// [`run_hlctl`] as the user and group `user` (uid, gid), or as this process.
pub fn run_hlctl_as(
    user: Option<(u32, u32)>,
    socket: &Path,
    args: &[String],
    stdin: &str,
) -> Output {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(binary("hlctl"));
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    let mut child = command
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hlctl starts");
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin.as_bytes())
            .expect("writing hlctl's stdin");
    }
    child.wait_with_output().expect("hlctl's output")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Time limit for a daemon to save the templates it built (a native Python template is a GiB).
const TEMPLATE_SAVE_LIMIT: Duration = Duration::from_secs(300);

/// The templates of `language` saved in the snapshot directory `dir` (finished saves only).
pub fn saved_templates(dir: &Path, language: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the snapshot directory")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(&format!("{language}-")) && path.join("key.json").is_file()
        })
        .collect();
    found.sort();
    found
}

/// One series of `metrics` (the Prometheus text format; its name and labels as written); 0
/// when absent.
pub fn metric(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}
