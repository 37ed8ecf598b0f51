//! Start: daemon start to ready (one sandbox per language), with no snapshot directory, with an
//! empty one (the daemon builds the templates and saves them), and with the snapshots saved.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::Args;
use crate::common::{Latency, print_row, python_pool, start_daemon};
use crate::targets::{PartReport, Target};

pub async fn run(args: &Args) -> Result<PartReport> {
    nix::sys::prctl::set_thp_disable(true).context("turning transparent huge pages off")?;
    let base = match &args.python_guest {
        Some(guest) => python_pool(guest, 1, &args.daemon_args),
        None => args.daemon_args.clone(),
    };
    let dir = tempfile::tempdir()?;
    let with_dir = |dir: &std::path::Path| {
        let mut extra = base.clone();
        extra.extend([
            "--snapshot-dir".to_owned(),
            dir.to_string_lossy().into_owned(),
        ]);
        extra
    };
    let starts = |extra: Vec<String>, n: usize| {
        let daemon = args.daemon.clone();
        async move {
            let mut samples: Vec<Duration> = Vec::with_capacity(n);
            for _ in 0..n {
                let (_daemon, took) = start_daemon(&daemon, 1, &extra).await?;
                samples.push(took);
            }
            anyhow::Ok(Latency::of(samples))
        }
    };
    eprintln!("(start) no snapshot directory ...");
    let cold = starts(base.clone(), args.starts).await?;
    eprintln!("(start) an empty snapshot directory: build and save ...");
    let saving = starts(with_dir(dir.path()), 1).await?;
    eprintln!("(start) from the saved snapshots ...");
    let loaded = starts(with_dir(dir.path()), args.starts).await?;
    println!("\n== Start to ready, one sandbox per language ==");
    print_row("no snapshot directory (cold)", &cold);
    print_row("empty snapshot directory (cold, and saving)", &saving);
    print_row("snapshots saved by an earlier start", &loaded);
    Ok(PartReport {
        part: "start".into(),
        figures: json!({ "cold": cold, "cold_saving": saving, "from_disk": loaded }),
        targets: vec![
            Target::at_most(
                "Start",
                "start to ready from saved snapshots, p50, in seconds",
                loaded.p50_ms / 1e3,
                1.0,
            ),
            Target::at_most(
                "Cold start",
                "cold start saving snapshots / cold start without (no slower)",
                saving.p50_ms / cold.p50_ms,
                1.1,
            ),
        ],
    })
}
