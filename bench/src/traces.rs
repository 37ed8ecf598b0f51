//! `traces`: what traces cost, side by side in one run: a warm exec, and a warm exec whose
//! program makes one allowed request to a loopback server, on a daemon sending spans over OTLP
//! (`--otlp-endpoint`, to the end-to-end suite's loopback collector, which decodes the exports;
//! each request carries a `traceparent`, as an agent's would) against one with traces off (the
//! default). Both daemons run at once and are asked in turn, so that both see the same machine.
//! Per language: JavaScript, and WebAssembly Python when its guest is given.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use hyperlightd_client::Language;
use hyperlightd_e2e::otlp::Collector;
use serde::Serialize;

use crate::common::{daemon_args, print_header};
use crate::egress::{on_against_off, programs, server};
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
    let collector = Collector::start().await;
    let mut extra = daemon_args(args, 1);
    extra.extend(["--egress-allow".to_owned(), format!("GET http://{address}")]);
    let (untraced, _) = start_daemon(&args.daemon, 1, &extra).await?;
    extra.extend(["--otlp-endpoint".to_owned(), collector.endpoint()]);
    let (traced, _) = start_daemon(&args.daemon, 1, &extra).await?;
    let traced_client = traced
        .client
        .with_traceparent(TRACEPARENT)
        .map_err(anyhow::Error::msg)?;
    println!("\n(t) traces: --otlp-endpoint to a loopback collector against traces off");
    print_header();
    let mut figures = Vec::new();
    for (language, plain, fetching) in programs(args, address) {
        let m = on_against_off(
            args,
            language,
            (&traced_client, &untraced.client),
            (plain, fetching),
            (("traced", "traces off"), "traced / off"),
        )
        .await?;
        figures.push(TraceFigures {
            language,
            warm_traced: m.warm_on,
            warm_untraced: m.warm_off,
            request_traced: m.request_on,
            request_untraced: m.request_off,
            warm_ratio_p50: m.warm_ratio_p50,
            request_ratio_p50: m.request_ratio_p50,
        });
    }
    // The batch processor sends at most every 5 s: wait that long for the last spans.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (spans, refused) = (collector.spans().len(), collector.refused());
    println!("the collector received {spans} spans");
    if spans == 0 || !refused.is_empty() {
        bail!("the traced daemon's spans did not reach the collector: it refused {refused:?}");
    }
    Ok(PartReport {
        part: "traces".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}
