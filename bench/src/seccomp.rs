//! `seccomp`: what the daemon's own system call filters cost, side by side in one run: a warm
//! exec, and a warm exec whose program makes one allowed request to a loopback server (which
//! the host's egress client makes on its own threads when the filters are on), on a daemon
//! with the filters (`--seccomp enforce`, the default) against one without (`--seccomp off`).
//! Both daemons run at once and are asked in turn, so that both see the same machine. Per
//! language: JavaScript, and WebAssembly Python when its guest is given.

use anyhow::{Context, Result};
use hyperlightd_client::Language;
use serde::Serialize;

use crate::common::{daemon_args, print_header};
use crate::egress::{on_against_off, programs, server};
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
        let m = on_against_off(
            args,
            language,
            (&filtered.client, &unfiltered.client),
            (plain, fetching),
            (("filters on", "filters off"), "on / off"),
        )
        .await?;
        figures.push(SeccompFigures {
            language,
            warm_filtered: m.warm_on,
            warm_unfiltered: m.warm_off,
            request_filtered: m.request_on,
            request_unfiltered: m.request_off,
            warm_ratio_p50: m.warm_ratio_p50,
            request_ratio_p50: m.request_ratio_p50,
        });
    }
    Ok(PartReport {
        part: "seccomp".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}
