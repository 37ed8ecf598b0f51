//! `seccomp`: what the daemon's own system call filters cost, side by side in one run: a warm
//! exec, and a warm exec whose program makes one allowed request to a loopback server (which
//! the host's egress client makes on its own threads when the filters are on), on a daemon
//! with the filters (`--seccomp enforce`, the default) against one without (`--seccomp off`).
//! Both daemons run at once and are asked in turn, so that both see the same machine. Per
//! language: JavaScript, and WebAssembly Python when its guest is given.

use anyhow::{Context, Result};
use hyperlightd_client::{ExecRequest, Language};
use serde::Serialize;

use crate::common::{daemon_args, print_header, print_row, warm_once};
use crate::egress::{programs, server};
use crate::targets::PartReport;
use crate::{Args, Latency, start_daemon};

/// The figures of one language.
#[derive(Debug, Serialize)]
pub struct SeccompFigures {
    language: Language,
    warm_filtered: Latency,
    warm_unfiltered: Latency,
    request_filtered: Latency,
    request_unfiltered: Latency,
    /// warm_filtered's p50 over warm_unfiltered's.
    warm_ratio_p50: f64,
    /// request_filtered's p50 over request_unfiltered's.
    request_ratio_p50: f64,
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let address = server().await.context("a loopback server")?;
    let mut extra = daemon_args(args, 1);
    extra.extend(["--egress-allow".to_owned(), format!("GET http://{address}")]);
    let (filtered, _) = start_daemon(&args.daemon, 1, &extra).await?;
    extra.extend(["--seccomp".to_owned(), "off".to_owned()]);
    let (unfiltered, _) = start_daemon(&args.daemon, 1, &extra).await?;
    let languages = programs(args, address);
    println!("\n(s) the system call filters: --seccomp enforce (default) against off");
    print_header();
    let mut figures = Vec::new();
    for (language, plain, fetching) in languages {
        let (plain, fetching) = (
            ExecRequest::new(language, plain),
            ExecRequest::new(language, fetching),
        );
        let n = args.iterations.min(100);
        let mut samples = [(); 4].map(|()| Vec::with_capacity(n));
        for _ in 0..n {
            samples[0].push(warm_once(&filtered.client, &plain).await?);
            samples[1].push(warm_once(&unfiltered.client, &plain).await?);
            samples[2].push(warm_once(&filtered.client, &fetching).await?);
            samples[3].push(warm_once(&unfiltered.client, &fetching).await?);
        }
        let [
            warm_filtered,
            warm_unfiltered,
            request_filtered,
            request_unfiltered,
        ] = samples.map(Latency::of);
        print_row(
            &format!("{language}: warm exec, filters on"),
            &warm_filtered,
        );
        print_row(
            &format!("{language}: warm exec, filters off"),
            &warm_unfiltered,
        );
        print_row(
            &format!("{language}: one request, filters on"),
            &request_filtered,
        );
        print_row(
            &format!("{language}: one request, filters off"),
            &request_unfiltered,
        );
        let warm_ratio_p50 = warm_filtered.p50_ms / warm_unfiltered.p50_ms;
        let request_ratio_p50 = request_filtered.p50_ms / request_unfiltered.p50_ms;
        println!(
            "{:<52} {warm_ratio_p50:>10.3}",
            format!("{language}: warm exec, on / off (p50)")
        );
        println!(
            "{:<52} {request_ratio_p50:>10.3}",
            format!("{language}: one request, on / off (p50)")
        );
        figures.push(SeccompFigures {
            language,
            warm_filtered,
            warm_unfiltered,
            request_filtered,
            request_unfiltered,
            warm_ratio_p50,
            request_ratio_p50,
        });
    }
    Ok(PartReport {
        part: "seccomp".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}
