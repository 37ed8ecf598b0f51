//! (e) E2B's API through `hlctl e2b-gateway`, beside the same work on the daemon's socket, in
//! one daemon: a sandbox made and its first `run_code` against a session made and its first
//! exec; then a warm `run_code` against a warm session exec, each once the daemon is idle.
//! The gateway's requests are those E2B's SDK sends (`POST /v2/sandboxes`, `POST /execute`
//! with the sandbox's headers, its stream read to the end), alternating with the socket's so
//! that both see the same machine. Per language: JavaScript, and WebAssembly Python when its
//! guest is given.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use hyperlightd_client::{Client, CreateSessionRequest, Language, SessionExecRequest};
use serde::Serialize;
use serde_json::{Value, json};

use crate::common::{daemon_args, print_header, print_row};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, EXPECTED, Latency, PYTHON_BODY, start_daemon, wait_until_idle};

const KEY: &str = "e2b_bench_key_0123456789abcdef";

/// (e)'s figures for one language.
#[derive(Debug, Serialize)]
pub struct GatewayFigures {
    language: Language,
    socket_first: Latency,
    gateway_first: Latency,
    socket_warm: Latency,
    gateway_warm: Latency,
}

/// The gateway, stopped when dropped.
struct Gateway {
    child: Child,
    url: String,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let (daemon, _) = start_daemon(&args.daemon, 1, &daemon_args(args, 1)).await?;
    let client = &daemon.client;
    let hlctl = args.daemon.with_file_name("hlctl");
    let gateway = start_gateway(&hlctl, client.socket()).await?;
    let mut languages = vec![(Language::Javascript, "javascript", BODY)];
    if args.python_guest.is_some() {
        languages.push((Language::Python, "code-interpreter-v1", PYTHON_BODY));
    }
    println!("\n(e) E2B's API through hlctl e2b-gateway, beside the daemon's socket");
    print_header();
    let n = args.iterations.min(30);
    let mut figures = Vec::new();
    let mut targets = Vec::new();
    for (language, template, program) in languages {
        let mut samples: [Vec<Duration>; 4] = Default::default();
        let (mut sessions, mut sandboxes) = (Vec::new(), Vec::new());
        for _ in 0..n {
            wait_until_idle(client).await?;
            let started = Instant::now();
            let id = client
                .create_session(&CreateSessionRequest::new(language))
                .await?
                .id;
            socket_exec(client, &id, program).await?;
            samples[0].push(started.elapsed());
            sessions.push(id);
            wait_until_idle(client).await?;
            let started = Instant::now();
            let id = gateway.create(template).await?;
            gateway.execute(&id, program).await?;
            samples[1].push(started.elapsed());
            sandboxes.push(id);
        }
        for (session, sandbox) in sessions.iter().zip(&sandboxes) {
            wait_until_idle(client).await?;
            let started = Instant::now();
            socket_exec(client, session, program).await?;
            samples[2].push(started.elapsed());
            wait_until_idle(client).await?;
            let started = Instant::now();
            gateway.execute(sandbox, program).await?;
            samples[3].push(started.elapsed());
        }
        for id in sessions.iter().chain(&sandboxes) {
            client.delete_session(id).await?;
        }
        let [socket_first, gateway_first, socket_warm, gateway_warm] = samples.map(Latency::of);
        let row = |what: &str, l: &Latency| print_row(&format!("{language}: {what}"), l);
        row("session + first exec (socket)", &socket_first);
        row("sandbox + first run_code (gateway)", &gateway_first);
        row("warm session exec (socket)", &socket_warm);
        row("warm run_code (gateway)", &gateway_warm);
        targets.push(Target::at_most(
            &format!("E56 {language} first"),
            &format!("{language} sandbox + first run_code / session + first exec, p50"),
            gateway_first.p50_ms / socket_first.p50_ms,
            1.2,
        ));
        targets.push(Target::at_most(
            &format!("E56 {language} warm"),
            &format!("{language} warm run_code / warm session exec, p50"),
            gateway_warm.p50_ms / socket_warm.p50_ms,
            1.2,
        ));
        figures.push(GatewayFigures {
            language,
            socket_first,
            gateway_first,
            socket_warm,
            gateway_warm,
        });
    }
    Ok(PartReport {
        part: "e2b".into(),
        figures: serde_json::to_value(&figures)?,
        targets,
    })
}

/// A session exec of `program`, checked.
async fn socket_exec(client: &Client, id: &str, program: &str) -> Result<()> {
    let response = client
        .session_exec(id, &SessionExecRequest::new(program))
        .await?;
    if response.result != json!(EXPECTED) {
        bail!("the session exec answered {response:?}");
    }
    Ok(())
}

async fn start_gateway(hlctl: &Path, socket: &Path) -> Result<Gateway> {
    let dir = tempfile::tempdir()?;
    let key = dir.path().join("key");
    std::fs::write(&key, format!("{KEY}\n"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(hlctl)
        .arg("--socket")
        .arg(socket)
        .args(["e2b-gateway", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--api-key-file")
        .arg(&key)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", hlctl.display()))?;
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the gateway did not listen within a minute");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Gateway {
        child,
        url: format!("http://127.0.0.1:{port}"),
        http: HttpClient::builder(TokioExecutor::new()).build(nodelay()),
        _dir: dir,
    })
}

/// A connector that sends each write at once, as E2B's SDKs' clients do.
fn nodelay() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector
}

impl Gateway {
    /// `POST /v2/sandboxes`, as `Sandbox.create` sends it: the new sandbox's id.
    async fn create(&self, template: &str) -> Result<String> {
        let body = json!({"templateID": template, "timeout": 300, "metadata": {}, "envVars": {}});
        let answer = self.send("/v2/sandboxes", None, &body).await?;
        let created: Value = serde_json::from_slice(&answer)?;
        created["sandboxID"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("the gateway created no sandbox: {created}"))
    }

    /// `POST /execute` in `sandbox`, its stream read to the end and its result checked.
    async fn execute(&self, sandbox: &str, program: &str) -> Result<()> {
        let body = json!({"code": program, "context_id": null, "language": null, "env_vars": null});
        let answer = self.send("/execute", Some(sandbox), &body).await?;
        let text = String::from_utf8_lossy(&answer);
        let main = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| line["is_main_result"] == true);
        let shown = main.as_ref().and_then(|line| line["text"].as_str());
        // Python shows the JSON string as `repr` does; JavaScript as it is.
        if shown.is_none_or(|shown| shown.trim_matches('\'') != EXPECTED) {
            bail!("the gateway's run_code answered {text}");
        }
        Ok(())
    }

    async fn send(&self, path: &str, sandbox: Option<&str>, body: &Value) -> Result<Bytes> {
        let mut request = Request::post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .header("x-api-key", KEY);
        if let Some(sandbox) = sandbox {
            request = request
                .header("e2b-sandbox-id", sandbox)
                .header("e2b-sandbox-port", "49999")
                .header("x-access-token", KEY);
        }
        let request = request.body(Full::new(Bytes::from(body.to_string())))?;
        let response = self.http.request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!(
                "the gateway answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        Ok(bytes)
    }
}
