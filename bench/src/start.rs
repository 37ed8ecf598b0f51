//! Start: daemon start to ready (one sandbox per language), with no snapshot directory, with an
//! empty one (the daemon builds the templates and saves them), and with the snapshots saved.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::Args;
use crate::common::{
    Latency, daemon_args, print_row, start_daemon, start_daemon_logging, start_times,
};
use crate::targets::{PartReport, Target};

pub async fn run(args: &Args) -> Result<PartReport> {
    let base = daemon_args(args, 1);
    let dir = tempfile::tempdir()?;
    let with_dir = |dir: &std::path::Path| {
        let mut extra = base.clone();
        extra.extend([
            "--snapshot-dir".to_owned(),
            dir.to_string_lossy().into_owned(),
        ]);
        extra
    };
    eprintln!("(start) no snapshot directory ...");
    let cold = start_times(&args.daemon, &base, args.starts).await?;
    eprintln!("(start) an empty snapshot directory each time: build, and save ...");
    let mut samples = Vec::with_capacity(args.starts);
    for _ in 0..args.starts {
        let empty = tempfile::tempdir()?;
        samples.push(
            start_times(&args.daemon, &with_dir(empty.path()), 1)
                .await?
                .p50_ms,
        );
    }
    let saving = Latency::of(
        samples
            .into_iter()
            .map(|ms| Duration::from_secs_f64(ms / 1e3))
            .collect(),
    );
    eprintln!("(start) an empty snapshot directory, kept: the templates saved ...");
    let (daemon, _) = start_daemon(&args.daemon, 1, &with_dir(dir.path())).await?;
    wait_saved(dir.path(), if args.python_guest.is_some() { 2 } else { 1 }).await?;
    drop(daemon);
    eprintln!("(start) from the saved snapshots ...");
    let loaded = start_times(&args.daemon, &with_dir(dir.path()), args.starts).await?;
    eprintln!("(start) from the saved snapshots, with the daemon's log ...");
    let log = dir.path().join("daemon.log");
    let (daemon, took) =
        start_daemon_logging(&args.daemon, 1, &with_dir(dir.path()), Some(&log)).await?;
    drop(daemon);
    let steps = steps(&log)?;
    println!("\n== Start to ready, one sandbox per language ==");
    print_row("no snapshot directory (cold)", &cold);
    print_row("empty snapshot directory (cold, and saving)", &saving);
    print_row("snapshots saved by an earlier start", &loaded);
    println!(
        "where a start from the saved snapshots goes ({:.0} ms to ready; the daemon's log):",
        took.as_secs_f64() * 1e3
    );
    for (step, ms) in &steps {
        println!("    {ms:>8} ms  {step}");
    }
    Ok(PartReport {
        part: "start".into(),
        figures: json!({ "cold": cold, "cold_saving": saving, "from_disk": loaded, "from_disk_steps": steps }),
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

/// The steps the daemon's log times (lines with `elapsed_ms`): what, and how long.
fn steps(log: &std::path::Path) -> Result<Vec<(String, u64)>> {
    let text = std::fs::read_to_string(log).context("reading the daemon's log")?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| {
            let fields = line.get("fields")?;
            let ms = fields.get("elapsed_ms")?.as_u64()?;
            let mut what = fields.get("message")?.as_str()?.to_owned();
            if let Some(language) = fields.get("language").and_then(|l| l.as_str()) {
                what = format!("{language}: {what}");
            }
            // The step's other figures (bytes read, the parts of its time), as logged.
            let figures: Vec<String> = fields
                .as_object()?
                .iter()
                .filter(|(name, value)| *name != "elapsed_ms" && value.is_u64())
                .map(|(name, value)| format!("{name} {value}"))
                .collect();
            if !figures.is_empty() {
                what = format!("{what} ({})", figures.join(", "));
            }
            Some((what, ms))
        })
        .collect())
}

/// Waits until `dir` holds `templates` saved templates (their `key.json` is written last).
pub(crate) async fn wait_saved(dir: &std::path::Path, templates: usize) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let saved = std::fs::read_dir(dir)?
            .flatten()
            .filter(|entry| entry.path().join("key.json").is_file())
            .count();
        if saved >= templates {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(300) {
            anyhow::bail!("the daemon saved {saved} of {templates} templates within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
