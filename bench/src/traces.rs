//! `traces`: what traces cost, side by side in one run: a warm exec, and a warm exec whose
//! program makes one allowed request to a loopback server, on a daemon sending spans over OTLP
//! (`--otlp-endpoint`, to a loopback server standing in for a collector; each request carries a
//! `traceparent`, as an agent's would) against one with traces off (the default). Both daemons
//! run at once and are asked in turn, so that both see the same machine. Per language:
//! JavaScript, and WebAssembly Python when its guest is given.

use anyhow::{Context, Result};
use hyperlightd_client::{ExecRequest, Language};
use serde::Serialize;

use crate::common::{daemon_args, print_header, print_row, warm_once};
use crate::egress::{programs, server};
use crate::targets::PartReport;
use crate::{Args, Latency, start_daemon};

/// The parent the traced daemon's requests name.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The figures of one language.
#[derive(Debug, Serialize)]
pub struct TraceFigures {
    language: Language,
    warm_traced: Latency,
    warm_untraced: Latency,
    request_traced: Latency,
    request_untraced: Latency,
    /// warm_traced's p50 over warm_untraced's.
    warm_ratio_p50: f64,
    /// request_traced's p50 over request_untraced's.
    request_ratio_p50: f64,
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let address = server().await.context("a loopback server")?;
    let collector = server().await.context("a loopback collector")?;
    let mut extra = daemon_args(args, 1);
    extra.extend(["--egress-allow".to_owned(), format!("GET http://{address}")]);
    let (untraced, _) = start_daemon(&args.daemon, 1, &extra).await?;
    extra.extend(["--otlp-endpoint".to_owned(), format!("http://{collector}")]);
    let (traced, _) = start_daemon(&args.daemon, 1, &extra).await?;
    let traced_client = traced
        .client
        .with_traceparent(TRACEPARENT)
        .map_err(anyhow::Error::msg)?;
    println!("\n(t) traces: --otlp-endpoint to a loopback collector against traces off");
    print_header();
    let mut figures = Vec::new();
    for (language, plain, fetching) in programs(args, address) {
        let (plain, fetching) = (
            ExecRequest::new(language, plain),
            ExecRequest::new(language, fetching),
        );
        let n = args.iterations.min(100);
        let mut samples = [(); 4].map(|()| Vec::with_capacity(n));
        for _ in 0..n {
            samples[0].push(warm_once(&traced_client, &plain).await?);
            samples[1].push(warm_once(&untraced.client, &plain).await?);
            samples[2].push(warm_once(&traced_client, &fetching).await?);
            samples[3].push(warm_once(&untraced.client, &fetching).await?);
        }
        let [warm_traced, warm_untraced, request_traced, request_untraced] =
            samples.map(Latency::of);
        print_row(&format!("{language}: warm exec, traced"), &warm_traced);
        print_row(
            &format!("{language}: warm exec, traces off"),
            &warm_untraced,
        );
        print_row(&format!("{language}: one request, traced"), &request_traced);
        print_row(
            &format!("{language}: one request, traces off"),
            &request_untraced,
        );
        let warm_ratio_p50 = warm_traced.p50_ms / warm_untraced.p50_ms;
        let request_ratio_p50 = request_traced.p50_ms / request_untraced.p50_ms;
        println!(
            "{:<52} {warm_ratio_p50:>10.3}",
            format!("{language}: warm exec, traced / off (p50)")
        );
        println!(
            "{:<52} {request_ratio_p50:>10.3}",
            format!("{language}: one request, traced / off (p50)")
        );
        figures.push(TraceFigures {
            language,
            warm_traced,
            warm_untraced,
            request_traced,
            request_untraced,
            warm_ratio_p50,
            request_ratio_p50,
        });
    }
    Ok(PartReport {
        part: "traces".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}
