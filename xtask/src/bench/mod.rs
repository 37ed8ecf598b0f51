//! `cargo xtask bench`: a release build, then each part of the benchmark (bench/src) in a VM
//! boot of its own, then every target from the parts' files.

mod anchor;
mod baseline;

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::python_guest::{python_guest, python_guest_for_package_tests};
use crate::{cargo, native_python, on_kvm_watched, step, vm};

/// A part of the benchmark, and how QEMU runs the VM it runs in.
type BenchPart = (&'static str, vm::Tcg);

/// The benchmark's parts (see bench/src/main.rs), each in a VM boot of its own, in the
/// emulation mode its figures need.
const BENCH_PARTS: &[BenchPart] = &[
    ("latency", vm::Tcg::Single),
    ("process", vm::Tcg::Single),
    // Two requests at once need two host threads running the two vCPUs.
    ("concurrency", vm::Tcg::Multi),
    ("refill", vm::Tcg::Single),
    ("start", vm::Tcg::Single),
    ("sustained", vm::Tcg::Single),
    ("library", vm::Tcg::Single),
    ("sessions", vm::Tcg::Single),
    ("durable", vm::Tcg::Single),
    ("baseline", vm::Tcg::Single),
    ("native", vm::Tcg::Single),
    ("tools", vm::Tcg::Single),
    ("e2b", vm::Tcg::Single),
    ("egress", vm::Tcg::Single),
    ("packages", vm::Tcg::Single),
    ("seccomp", vm::Tcg::Single),
    ("traces", vm::Tcg::Single),
    ("capacity", vm::Tcg::Single),
    // Sixteen clients on pools of two and four: both vCPUs at work.
    ("load", vm::Tcg::Multi),
];

/// How long a part of the benchmark may print nothing before its VM counts as stalled: every
/// part reports each step as it starts, and no step takes four minutes (the longest: `native`
/// booting the scientific stack and saving its snapshot for the anchor, about two).
const BENCH_STALL: Duration = Duration::from_secs(240);

/// Release build, then each part of the benchmark (`--part NAME`, repeatable, picks some) in
/// its own VM boot, run again should the VM stall; then every target, from the parts' files.
pub fn bench(args: &[String]) -> Result<()> {
    let (chosen, args) = bench_parts(args)?;
    let python = python_guest(None)?;
    let packages = python_guest_for_package_tests()?;
    step(
        "release build of the daemon and the benchmark",
        cargo().args([
            "build",
            "--release",
            "-p",
            "hyperlightd",
            "-p",
            "hyperlightd-bench",
            // `e2b` runs `hlctl e2b-gateway`.
            "-p",
            "hlctl",
        ]),
        Duration::from_secs(3600),
    )?;
    let bin = vm::target_dir()?.join("release");
    let out = vm::target_dir()?.join("bench");
    std::fs::create_dir_all(&out)?;
    let bench = bin.join("hyperlightd-bench").to_string_lossy().into_owned();
    let mut command = vec![
        bench.clone(),
        "--daemon".into(),
        bin.join("hyperlightd").to_string_lossy().into_owned(),
        "--out".into(),
        out.to_string_lossy().into_owned(),
        "--python-guest".into(),
        python.to_string_lossy().into_owned(),
        "--python-packages-guest".into(),
        packages.to_string_lossy().into_owned(),
    ];
    let runs = |name: &str| chosen.iter().any(|(part, _)| *part == name);
    // The parts with native Python rows.
    if ["native", "capacity", "sessions", "durable", "packages"]
        .iter()
        .any(|part| runs(part))
    {
        let rootfs = native_python::native_python(None)?;
        command.extend([
            "--python-rootfs".to_owned(),
            rootfs.to_string_lossy().into_owned(),
        ]);
    }
    if runs("packages") {
        command.extend([
            "--wheels".to_owned(),
            crate::tools::test_wheels()?.to_string_lossy().into_owned(),
        ]);
    }
    if runs("native") {
        command.extend([
            "--hluk".to_owned(),
            anchor::hluk()?.to_string_lossy().into_owned(),
        ]);
    }
    if runs("baseline") {
        let baseline = baseline::baseline_daemon()?;
        command.extend([
            "--baseline-daemon".to_owned(),
            baseline.to_string_lossy().into_owned(),
        ]);
    }
    command.extend(args);
    let mut failed = Vec::new();
    for &(part, tcg) in &chosen {
        let _ = std::fs::remove_file(out.join(format!("{part}.json")));
        let mut command = command.clone();
        command.extend(["--part".to_owned(), part.to_owned()]);
        let name = format!("benchmark: {part}");
        if let Err(e) = on_kvm_watched(
            &name,
            &command,
            part_limit(part),
            std::slice::from_ref(&out),
            tcg,
            Some(BENCH_STALL),
        ) {
            eprintln!("{e:#}");
            failed.push(part);
        }
    }
    let mut summary = Command::new(&bench);
    summary
        .args(["--daemon", "-", "--summary", "--out"])
        .arg(&out);
    for &(part, _) in &chosen {
        summary.args(["--part", part]);
    }
    step(
        "benchmark: the targets",
        &mut summary,
        Duration::from_secs(60),
    )?;
    if !failed.is_empty() {
        bail!("benchmark parts failed: {}", failed.join(", "));
    }
    Ok(())
}

/// How long a part's VM boot may take: the parts that measure sessions in all three runtimes,
/// native Python's a hundred of them, take longest.
fn part_limit(part: &str) -> Duration {
    match part {
        "sessions" | "durable" => Duration::from_secs(3600),
        _ => Duration::from_secs(1800),
    }
}

/// Splits the `--part NAME` pairs from the benchmark's other arguments: the parts to run (all
/// when none is named), in the order of [`BENCH_PARTS`], and the rest.
fn bench_parts(args: &[String]) -> Result<(Vec<BenchPart>, Vec<String>)> {
    let (mut parts, mut rest) = (Vec::new(), Vec::new());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if let Some(part) = arg.strip_prefix("--part=") {
            parts.push(part.to_owned());
        } else if arg == "--part" {
            parts.push(args.next().context("--part needs a part's name")?.clone());
        } else {
            rest.push(arg.clone());
        }
    }
    if let Some(unknown) = parts
        .iter()
        .find(|p| !BENCH_PARTS.iter().any(|(name, _)| name == p))
    {
        let known: Vec<&str> = BENCH_PARTS.iter().map(|(name, _)| *name).collect();
        bail!(
            "no benchmark part {unknown:?}; the parts: {}",
            known.join(", ")
        );
    }
    let chosen = BENCH_PARTS
        .iter()
        .copied()
        .filter(|(name, _)| parts.is_empty() || parts.iter().any(|p| p == name))
        .collect();
    Ok((chosen, rest))
}
