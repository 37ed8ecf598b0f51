//! (e) E2B's API through `hlctl e2b-gateway`, beside the same work on the daemon's socket, in
//! one daemon: a sandbox made and its first `run_code` against a session made and its first
//! exec; then a warm `run_code` against a warm session exec, each once the daemon is idle.
//! The socket's execs are asked both ways: answered whole, and streamed (as `run_code` is:
//! its output sent as it is made), so that the gateway's own cost shows apart from streaming's.
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
    socket_first_streamed: Latency,
    gateway_first: Latency,
    socket_warm: Latency,
    socket_warm_streamed: Latency,
    gateway_warm: Latency,
    /// gateway_first's p50 over socket_first_streamed's: the gateway's own cost.
    first_over_streamed_p50: f64,
    /// gateway_warm's p50 over socket_warm_streamed's.
    warm_over_streamed_p50: f64,
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
        let mut samples: [Vec<Duration>; 6] = Default::default();
        // Per round: a session answered whole, a session streamed, a sandbox.
        let mut made: [Vec<String>; 3] = Default::default();
        for _ in 0..n {
            for (i, streamed) in [(0, false), (1, true)] {
                wait_until_idle(client).await?;
                let started = Instant::now();
                let id = client
                    .create_session(&CreateSessionRequest::new(language))
                    .await?
                    .id;
                socket_exec(client, &id, program, streamed).await?;
                samples[i].push(started.elapsed());
                made[i].push(id);
            }
            wait_until_idle(client).await?;
            let started = Instant::now();
            let id = gateway.create(template).await?;
            gateway.execute(&id, program).await?;
            samples[2].push(started.elapsed());
            made[2].push(id);
        }
        let [whole, streamed, sandboxes] = &made;
        for ((whole, streamed), sandbox) in whole.iter().zip(streamed).zip(sandboxes) {
            for (i, (id, stream)) in [(whole, false), (streamed, true)].into_iter().enumerate() {
                wait_until_idle(client).await?;
                let started = Instant::now();
                socket_exec(client, id, program, stream).await?;
                samples[3 + i].push(started.elapsed());
            }
            wait_until_idle(client).await?;
            let started = Instant::now();
            gateway.execute(sandbox, program).await?;
            samples[5].push(started.elapsed());
        }
        for id in made.iter().flatten() {
            client.delete_session(id).await?;
        }
        let [
            socket_first,
            socket_first_streamed,
            gateway_first,
            socket_warm,
            socket_warm_streamed,
            gateway_warm,
        ] = samples.map(Latency::of);
        let row = |what: &str, l: &Latency| print_row(&format!("{language}: {what}"), l);
        row("session + first exec (socket)", &socket_first);
        row(
            "session + first exec streamed (socket)",
            &socket_first_streamed,
        );
        row("sandbox + first run_code (gateway)", &gateway_first);
        row("warm session exec (socket)", &socket_warm);
        row("warm session exec streamed (socket)", &socket_warm_streamed);
        row("warm run_code (gateway)", &gateway_warm);
        let first_over_streamed_p50 = gateway_first.p50_ms / socket_first_streamed.p50_ms;
        let warm_over_streamed_p50 = gateway_warm.p50_ms / socket_warm_streamed.p50_ms;
        println!(
            "{language}: gateway / socket streamed, p50: first {first_over_streamed_p50:.2}, \
             warm {warm_over_streamed_p50:.2}"
        );
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
            socket_first_streamed,
            gateway_first,
            socket_warm,
            socket_warm_streamed,
            gateway_warm,
            first_over_streamed_p50,
            warm_over_streamed_p50,
        });
    }
    Ok(PartReport {
        part: "e2b".into(),
        figures: serde_json::to_value(&figures)?,
        targets,
    })
}

/// A session exec of `program`, answered whole or streamed (read to its last line), checked.
async fn socket_exec(client: &Client, id: &str, program: &str, streamed: bool) -> Result<()> {
    let request = SessionExecRequest::new(program);
    let response = if streamed {
        client
            .session_exec_stream(id, &request)
            .await?
            .finish(|_| {})
            .await?
    } else {
        client.session_exec(id, &request).await?
    };
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
