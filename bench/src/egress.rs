//! (e) Outbound HTTP, side by side in one process: a warm exec whose program makes one allowed
//! request to a loopback server (the host makes it: rules, resolution, a new connection, the
//! whole response back into the guest), against the same request made here by a plain hyper
//! client on a new connection, and against the warm exec without the request (in JavaScript
//! with a top-level await, which a program that fetches has). Alternating, so
//! that all see the same machine. Per language: JavaScript, and WebAssembly Python when its
//! guest is given.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use hyperlightd_client::{Client, ExecRequest, Language};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};

use crate::common::{daemon_args, print_header, print_row, warm_once};
use crate::targets::PartReport;
use crate::{Args, EXPECTED, Latency, PYTHON_BODY, start_daemon};

/// JavaScript's plain program with a top-level await, as the program that fetches needs (the
/// runner parses such a program to run it as an async function, whatever it awaits).
const JS_WITH_AWAIT: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
    await Promise.resolve(JSON.stringify(xs.reduce((a, b) => a + b, 0)))";

/// (e)'s figures for one language.
#[derive(Debug, Serialize)]
pub struct EgressFigures {
    language: Language,
    plain_warm: Latency,
    with_one_request: Latency,
    /// The request made by a plain client in the benchmark's process, on a new connection.
    host_client: Latency,
    /// with_one_request's p50 less plain_warm's: what one request from a program costs.
    request_cost_p50_ms: f64,
}

/// Serves [`EXPECTED`] on a loopback port; its address.
pub async fn server() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(EXPECTED))))
                });
                let http = hyper::server::conn::http1::Builder::new();
                let _ = http.serve_connection(TokioIo::new(tcp), service).await;
            });
        }
    });
    Ok(address)
}

/// The request made here: a new connection, GET, the whole body read.
async fn host_request(address: SocketAddr) -> Result<Duration> {
    let started = Instant::now();
    let tcp = TcpStream::connect(address).await?;
    tcp.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    let driving = tokio::spawn(connection);
    let request = Request::get("/n")
        .header("host", address.to_string())
        .body(Empty::<Bytes>::new())?;
    let body = sender
        .send_request(request)
        .await?
        .into_body()
        .collect()
        .await?;
    driving.abort();
    if body.to_bytes() != EXPECTED {
        bail!("the server answered something else");
    }
    Ok(started.elapsed())
}

/// Per language (JavaScript, and Python when its guest is given): a plain program, and one
/// that fetches `/n` from the server at `address`.
pub fn programs(args: &Args, address: SocketAddr) -> Vec<(Language, String, String)> {
    let url = format!("http://{address}/n");
    let mut languages = vec![(
        Language::Javascript,
        JS_WITH_AWAIT.to_owned(),
        format!("await (await fetch('{url}')).text()"),
    )];
    if args.python_guest.is_some() {
        let fetch =
            format!("import urllib.request\nurllib.request.urlopen('{url}').read().decode()");
        languages.push((Language::Python, PYTHON_BODY.to_owned(), fetch));
    }
    languages
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let address = server().await.context("a loopback server")?;
    let mut extra = daemon_args(args, 1);
    extra.extend(["--egress-allow".to_owned(), format!("GET http://{address}")]);
    let (daemon, _) = start_daemon(&args.daemon, 1, &extra).await?;
    let client = &daemon.client;
    let languages = programs(args, address);
    println!("\n(e) outbound HTTP: one allowed request to a loopback server from a program");
    print_header();
    let mut figures = Vec::new();
    for (language, plain, fetching) in languages {
        let (plain, fetching) = (
            ExecRequest::new(language, plain),
            ExecRequest::new(language, fetching),
        );
        let n = args.iterations.min(100);
        let mut samples = [(); 3].map(|()| Vec::with_capacity(n));
        for _ in 0..n {
            samples[0].push(warm_once(client, &plain).await?);
            samples[1].push(warm_once(client, &fetching).await?);
            samples[2].push(host_request(address).await?);
        }
        let [plain_warm, with_one_request, host_client] = samples.map(Latency::of);
        print_row(&format!("{language}: plain warm exec"), &plain_warm);
        print_row(&format!("{language}: with one request"), &with_one_request);
        print_row("the same request from a host client", &host_client);
        let request_cost_p50_ms = with_one_request.p50_ms - plain_warm.p50_ms;
        println!(
            "{:<52} {request_cost_p50_ms:>10.3}",
            format!("{language}: one request from a program (p50)")
        );
        figures.push(EgressFigures {
            language,
            plain_warm,
            with_one_request,
            host_client,
            request_cost_p50_ms,
        });
    }
    Ok(PartReport {
        part: "egress".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}

/// The four rows of a part that asks two daemons in turn, `on` (with the feature it measures)
/// and `off`: a warm exec of `plain` and of `fetching` on each, and each pair's p50 ratio.
#[derive(Debug)]
pub struct OnOff {
    pub warm_on: Latency,
    pub warm_off: Latency,
    pub request_on: Latency,
    pub request_off: Latency,
    pub warm_ratio_p50: f64,
    pub request_ratio_p50: f64,
}

/// Measures [`OnOff`] for `language` and prints its rows, naming the daemons `names` (such as
/// `("filters on", "filters off")`) and the ratios `ratio` (such as `"on / off"`).
pub async fn on_against_off(
    args: &Args,
    language: Language,
    (on, off): (&Client, &Client),
    (plain, fetching): (String, String),
    (names, ratio): ((&str, &str), &str),
) -> Result<OnOff> {
    let (plain, fetching) = (
        ExecRequest::new(language, plain),
        ExecRequest::new(language, fetching),
    );
    let n = args.iterations.min(100);
    let mut samples = [(); 4].map(|()| Vec::with_capacity(n));
    for _ in 0..n {
        samples[0].push(warm_once(on, &plain).await?);
        samples[1].push(warm_once(off, &plain).await?);
        samples[2].push(warm_once(on, &fetching).await?);
        samples[3].push(warm_once(off, &fetching).await?);
    }
    let [warm_on, warm_off, request_on, request_off] = samples.map(Latency::of);
    print_row(&format!("{language}: warm exec, {}", names.0), &warm_on);
    print_row(&format!("{language}: warm exec, {}", names.1), &warm_off);
    print_row(
        &format!("{language}: one request, {}", names.0),
        &request_on,
    );
    print_row(
        &format!("{language}: one request, {}", names.1),
        &request_off,
    );
    let warm_ratio_p50 = warm_on.p50_ms / warm_off.p50_ms;
    let request_ratio_p50 = request_on.p50_ms / request_off.p50_ms;
    println!(
        "{:<52} {warm_ratio_p50:>10.3}",
        format!("{language}: warm exec, {ratio} (p50)")
    );
    println!(
        "{:<52} {request_ratio_p50:>10.3}",
        format!("{language}: one request, {ratio} (p50)")
    );
    Ok(OnOff {
        warm_on,
        warm_off,
        request_on,
        request_off,
        warm_ratio_p50,
        request_ratio_p50,
    })
}
