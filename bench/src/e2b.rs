//! (e) E2B's API served two ways, the daemon's own listener (`--e2b-listen`) and `hlctl
//! e2b-gateway` in front of its socket, beside the same work on the daemon's socket, in one
//! daemon: a sandbox made and its first `run_code` against a session made and its first exec;
//! then a warm `run_code` against a warm session exec, each once the daemon is idle.
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
    listener_first: Latency,
    gateway_first: Latency,
    socket_warm: Latency,
    socket_warm_streamed: Latency,
    listener_warm: Latency,
    gateway_warm: Latency,
}

/// Where E2B's API is served: the daemon's listener, or a gateway process (stopped when
/// dropped).
struct Gateway {
    child: Option<Child>,
    url: String,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    /// The gateway process's key file, removed when dropped.
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let keys = tempfile::tempdir()?;
    let (listen, listener) = listener(keys.path())?;
    let mut with_listener = daemon_args(args, 1);
    with_listener.extend(listen);
    let (daemon, _) = start_daemon(&args.daemon, 1, &with_listener).await?;
    let client = &daemon.client;
    let hlctl = args.daemon.with_file_name("hlctl");
    let gateway = start_gateway(&hlctl, client.socket()).await?;
    let mut languages = vec![(Language::Javascript, "javascript", BODY)];
    if args.python_guest.is_some() {
        languages.push((Language::Python, "code-interpreter-v1", PYTHON_BODY));
    }
    println!("\n(e) E2B's API by the daemon's listener and hlctl e2b-gateway, beside its socket");
    print_header();
    // Sixty rounds: with thirty, a first row's p50 moved its ratio by up to 0.06 between runs
    // of the same code (a first exec alone spreads over 10 to 14 ms under emulation).
    let n = args.iterations.min(60);
    let mut figures = Vec::new();
    let mut targets = Vec::new();
    for (language, template, program) in languages {
        // Per round, in turns: a session answered whole, a session streamed, a sandbox of the
        // daemon's listener, a sandbox of the gateway process.
        let e2b = [&listener, &gateway];
        let mut samples: [Vec<Duration>; 8] = Default::default();
        let mut made: [Vec<String>; 4] = Default::default();
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
            for (i, front) in e2b.iter().enumerate() {
                wait_until_idle(client).await?;
                let started = Instant::now();
                let id = front.create(template).await?;
                front.execute(&id, program).await?;
                samples[2 + i].push(started.elapsed());
                made[2 + i].push(id);
            }
        }
        let [whole, streamed, by_listener, by_gateway] = &made;
        let rounds = whole
            .iter()
            .zip(streamed)
            .zip(by_listener.iter().zip(by_gateway));
        for ((whole, streamed), (by_listener, by_gateway)) in rounds {
            for (i, (id, stream)) in [(whole, false), (streamed, true)].into_iter().enumerate() {
                wait_until_idle(client).await?;
                let started = Instant::now();
                socket_exec(client, id, program, stream).await?;
                samples[4 + i].push(started.elapsed());
            }
            for (i, (front, id)) in e2b.iter().zip([by_listener, by_gateway]).enumerate() {
                wait_until_idle(client).await?;
                let started = Instant::now();
                front.execute(id, program).await?;
                samples[6 + i].push(started.elapsed());
            }
        }
        for id in made[..2].iter().flatten() {
            client.delete_session(id).await?;
        }
        // The listener's sandboxes are its key's caller's, not the socket's.
        for (front, ids) in e2b.iter().zip(&made[2..]) {
            for id in ids {
                front.kill(id).await?;
            }
        }
        let [
            socket_first,
            socket_first_streamed,
            listener_first,
            gateway_first,
            socket_warm,
            socket_warm_streamed,
            listener_warm,
            gateway_warm,
        ] = samples.map(Latency::of);
        let row = |what: &str, l: &Latency| print_row(&format!("{language}: {what}"), l);
        row("session + first exec (socket)", &socket_first);
        row(
            "session + first exec streamed (socket)",
            &socket_first_streamed,
        );
        row(
            "sandbox + first run_code (daemon's listener)",
            &listener_first,
        );
        row("sandbox + first run_code (gateway process)", &gateway_first);
        row("warm session exec (socket)", &socket_warm);
        row("warm session exec streamed (socket)", &socket_warm_streamed);
        row("warm run_code (daemon's listener)", &listener_warm);
        row("warm run_code (gateway process)", &gateway_warm);
        for (front, first, warm) in [
            ("listener", &listener_first, &listener_warm),
            ("gateway", &gateway_first, &gateway_warm),
        ] {
            println!(
                "{language}: {front} / socket streamed, p50: first {:.2}, warm {:.2}",
                first.p50_ms / socket_first_streamed.p50_ms,
                warm.p50_ms / socket_warm_streamed.p50_ms
            );
            targets.push(Target::at_most(
                &format!("E56 {language} first ({front})"),
                &format!("{language} sandbox + first run_code / session + first exec, p50"),
                first.p50_ms / socket_first.p50_ms,
                1.2,
            ));
            targets.push(Target::at_most(
                &format!("E56 {language} warm ({front})"),
                &format!("{language} warm run_code / warm session exec, p50"),
                warm.p50_ms / socket_warm.p50_ms,
                1.2,
            ));
        }
        figures.push(GatewayFigures {
            language,
            socket_first,
            socket_first_streamed,
            listener_first,
            gateway_first,
            socket_warm,
            socket_warm_streamed,
            listener_warm,
            gateway_warm,
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

/// The daemon's own listener: the arguments that start it, with a keys file in `dir`.
fn listener(dir: &Path) -> Result<(Vec<String>, Gateway)> {
    use std::os::unix::fs::PermissionsExt;
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("bench {KEY}\n"))?;
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600))?;
    let port = free_port()?;
    let args = vec![
        "--e2b-listen".to_owned(),
        format!("127.0.0.1:{port}"),
        "--e2b-keys".to_owned(),
        keys.to_str().context("a UTF-8 temporary path")?.to_owned(),
    ];
    let listener = Gateway {
        child: None,
        url: format!("http://127.0.0.1:{port}"),
        http: HttpClient::builder(TokioExecutor::new()).build(nodelay()),
        _dir: None,
    };
    Ok((args, listener))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn start_gateway(hlctl: &Path, socket: &Path) -> Result<Gateway> {
    let dir = tempfile::tempdir()?;
    let key = dir.path().join("key");
    std::fs::write(&key, format!("{KEY}\n"))?;
    let port = free_port()?;
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
        child: Some(child),
        url: format!("http://127.0.0.1:{port}"),
        http: HttpClient::builder(TokioExecutor::new()).build(nodelay()),
        _dir: Some(dir),
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

    /// `DELETE /sandboxes/{id}`, as `Sandbox.kill` sends it.
    async fn kill(&self, sandbox: &str) -> Result<()> {
        let request = Request::delete(format!("{}/sandboxes/{sandbox}", self.url))
            .header("x-api-key", KEY)
            .body(Full::new(Bytes::new()))?;
        let status = self.http.request(request).await?.status();
        if status != hyper::StatusCode::NO_CONTENT {
            bail!("killing sandbox {sandbox} was answered {status}");
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
