//! Native Python (issue 27), side by side in one VM boot: the native runtime (Debian's CPython
//! with the scientific stack, hyperlight-unikraft) against the WebAssembly one on a trivial
//! program, and the native runtime on a numpy and a pandas task, each as warm requests at the
//! client; the same three programs in upstream's `hluk bench warm-restore` (a run in a warm
//! sandbox, then a restore: no daemon, no socket) as the anchor the daemon's warm p50 must not
//! be slower than; a sandbox from the template; host memory per idle sandbox and per template;
//! the template's build; a daemon's start to ready when it builds the template and when it loads
//! the one an earlier start saved (`--snapshot-dir`); the rootfs's and the saved snapshots'
//! sizes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hyperlightd_client::{ExecRequest, Language};
use serde::Serialize;

use crate::common::{mean_ms, print_row, start_times, warm};
use crate::python_library::resident_mib;
use crate::targets::{PartReport, Target};
use crate::{Args, Latency, PYTHON_BODY, start_daemon, wait_until_idle};

/// A numpy task: a 200 by 200 linear solve, then the usual answer.
const NUMPY: &str = "import numpy as np\nm = np.random.default_rng(1).random((200, 200))\n\
    inv = np.linalg.inv(m @ m.T + np.eye(200))\nsquares = np.arange(100) ** 2\n\
    str(int(squares.sum())) if np.isfinite(inv).all() else 'bad'";
/// A pandas task: a 10,000-row frame grouped and summarised, then the usual answer.
const PANDAS: &str = "import pandas as pd\n\
    frame = pd.DataFrame({'k': [i % 7 for i in range(10000)], 'v': range(10000)})\n\
    summary = frame.groupby('k')['v'].agg(['sum', 'mean'])\n\
    squares = pd.Series(range(100)) ** 2\n\
    str(int(squares.sum())) if len(summary) == 7 else 'bad'";

/// What the anchor's snapshot imports before it is saved: what the daemon's template imports.
const ANCHOR_WARM: &str = "import numpy, pandas, matplotlib, matplotlib.pyplot, scipy, \
    scipy.optimize, scipy.stats, sklearn, sklearn.linear_model";

/// Guest memory of both the daemon's and the anchor's sandboxes, in MiB.
const MEMORY_MIB: &str = "1024";

#[derive(Debug, Serialize)]
struct Program {
    name: &'static str,
    native: Latency,
    /// The WebAssembly runtime, for the program it can run.
    wasm: Option<Latency>,
    /// `hluk bench warm-restore`'s run times, when hluk was given.
    anchor: Option<Latency>,
}

#[derive(Debug, Serialize)]
struct Figures {
    programs: Vec<Program>,
    /// The native template: boot, imports, snapshot (the daemon's histogram).
    template_ms: f64,
    /// A native sandbox from the template (the daemon's histogram).
    sandbox_create_ms: f64,
    /// Daemon resident memory with three native sandboxes less with one, halved.
    memory_per_sandbox_mib: f64,
    /// Daemon resident memory with one native sandbox, less one sandbox and less a daemon
    /// without Python: what the template holds.
    memory_template_mib: f64,
    /// Start to ready, building the template (and saving it).
    start_built_ms: f64,
    /// Start to ready, loading the template an earlier start saved.
    start_saved: Latency,
    rootfs_bytes: u64,
    /// The daemon's saved template on disk (its directory).
    saved_template_bytes: u64,
    /// The anchor's snapshot on disk, when hluk was given.
    snapshot_bytes: Option<u64>,
}

/// A daemon's start with an empty snapshot directory, then `starts` from the template it saved:
/// start to ready each time, and the saved template's size.
async fn start_from_saved(
    args: &Args,
    extra: &[String],
    starts: usize,
) -> Result<(f64, Latency, u64)> {
    let dir = tempfile::tempdir()?;
    let mut extra = extra.to_vec();
    extra.extend([
        "--snapshot-dir".to_owned(),
        dir.path().to_string_lossy().into_owned(),
    ]);
    eprintln!("(n) native Python, an empty snapshot directory: built and saved ...");
    let (daemon, built) = start_daemon(&args.daemon, 1, &extra).await?;
    crate::start::wait_saved(dir.path(), 2).await?;
    drop(daemon);
    let saved = std::fs::read_dir(dir.path())?
        .flatten()
        .find(|entry| entry.file_name().to_string_lossy().starts_with("python-"))
        .context("the saved Python template")?;
    let saved_bytes = dir_bytes(&saved.path())?;
    eprintln!("(n) native Python, from the saved templates ...");
    let saved = start_times(&args.daemon, &extra, starts).await?;
    Ok((built.as_secs_f64() * 1e3, saved, saved_bytes))
}

/// A daemon's arguments for `size` native Python sandboxes from `rootfs`, beside the
/// benchmark's own daemon arguments.
pub fn native_args(args: &Args, rootfs: &Path, size: usize) -> Vec<String> {
    native_pool(rootfs, size, &args.daemon_args)
}

/// A daemon's arguments for `size` native Python sandboxes from `rootfs`, then `extra`.
pub fn native_pool(rootfs: &Path, size: usize, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--pool".to_owned(),
        format!("python={size}"),
        "--python-runtime".to_owned(),
        "native".to_owned(),
        "--python-rootfs".to_owned(),
        rootfs.to_string_lossy().into_owned(),
        "--python-native-memory-mib".to_owned(),
        MEMORY_MIB.to_owned(),
        "--startup-timeout-ms".to_owned(),
        "600000".to_owned(),
    ];
    args.extend(extra.iter().cloned());
    args
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let Some(rootfs) = &args.python_rootfs else {
        println!("\n(n) native Python: NOT RUN (needs --python-rootfs)");
        return Ok(PartReport {
            part: "native".into(),
            figures: serde_json::Value::Null,
            targets: Vec::new(),
        });
    };
    let native = |size: usize| native_args(args, rootfs, size);
    let n = args.iterations.min(50);
    eprintln!("(n) a daemon without Python, for its memory ...");
    let (bare, _) = start_daemon(&args.daemon, 1, &args.daemon_args).await?;
    wait_until_idle(&bare.client).await?;
    let bare_mib = resident_mib(bare.child.id())?;
    drop(bare);
    eprintln!("(n) native Python, three sandboxes, for their memory ...");
    let (three, _) = start_daemon(&args.daemon, 1, &native(3)).await?;
    wait_until_idle(&three.client).await?;
    let three_mib = resident_mib(three.child.id())?;
    drop(three);
    eprintln!("(n) native Python, one sandbox ...");
    let (daemon, _) = start_daemon(&args.daemon, 1, &native(1)).await?;
    wait_until_idle(&daemon.client).await?;
    let one_mib = resident_mib(daemon.child.id())?;
    let mut programs = Vec::new();
    for (name, code) in [
        ("trivial", PYTHON_BODY),
        ("numpy", NUMPY),
        ("pandas", PANDAS),
    ] {
        eprintln!("(n) native: {name} ...");
        let request = ExecRequest::new(Language::Python, code);
        programs.push(Program {
            name,
            native: warm(&daemon.client, &request, n).await?,
            wasm: None,
            anchor: None,
        });
    }
    let metrics = daemon.client.metrics().await?;
    let python = "{language=\"python\"";
    let template_ms = mean_ms(&metrics, "hyperlightd_sandbox_template_seconds", python);
    let sandbox_create_ms = mean_ms(&metrics, "hyperlightd_sandbox_create_seconds", python);
    drop(daemon);
    if let Some(guest) = &args.python_guest {
        eprintln!("(n) WebAssembly: trivial ...");
        let extra = crate::common::python_pool(guest, 1, &args.daemon_args);
        let (wasm, _) = start_daemon(&args.daemon, 1, &extra).await?;
        let request = ExecRequest::new(Language::Python, PYTHON_BODY);
        programs[0].wasm = Some(warm(&wasm.client, &request, n).await?);
    }
    let mut snapshot_bytes = None;
    if let Some(hluk) = &args.hluk {
        let anchor = Anchor::save(hluk, rootfs)?;
        snapshot_bytes = Some(dir_bytes(&anchor.snapshot())?);
        for (program, code) in programs.iter_mut().zip([PYTHON_BODY, NUMPY, PANDAS]) {
            eprintln!("(n) hluk bench warm-restore: {} ...", program.name);
            program.anchor = Some(anchor.warm_restore(code, n)?);
        }
    }
    let (start_built_ms, start_saved, saved_template_bytes) =
        start_from_saved(args, &native(1), args.starts.clamp(1, 5)).await?;
    let per_sandbox = (three_mib - one_mib) / 2.0;
    let figures = Figures {
        programs,
        template_ms,
        sandbox_create_ms,
        memory_per_sandbox_mib: per_sandbox,
        memory_template_mib: one_mib - per_sandbox - bare_mib,
        start_built_ms,
        start_saved,
        rootfs_bytes: std::fs::metadata(rootfs)?.len(),
        saved_template_bytes,
        snapshot_bytes,
    };
    print(&figures);
    Ok(PartReport {
        part: "native".into(),
        targets: targets(&figures),
        figures: serde_json::to_value(&figures)?,
    })
}

/// The daemon's warm p50 over the anchor's, per program: at most 1.
fn targets(figures: &Figures) -> Vec<Target> {
    figures
        .programs
        .iter()
        .filter_map(|p| {
            let anchor = p.anchor.as_ref()?;
            Some(Target::at_most(
                &format!("N {}", p.name),
                &format!("native {} warm p50 / hluk warm-restore p50", p.name),
                p.native.p50_ms / anchor.p50_ms,
                1.0,
            ))
        })
        .collect()
}

fn print(figures: &Figures) {
    println!("\n(n) native Python against WebAssembly and the upstream anchor (hluk)");
    for p in &figures.programs {
        print_row(
            &format!("(n) {}: native, warm at the client", p.name),
            &p.native,
        );
        match &p.wasm {
            Some(wasm) => print_row(&format!("(n) {}: WebAssembly, warm", p.name), wasm),
            None if p.name == "trivial" => println!("(n) {}: WebAssembly NOT RUN", p.name),
            None => println!("(n) {}: WebAssembly cannot (no numpy, no pandas)", p.name),
        }
        match &p.anchor {
            Some(anchor) => print_row(&format!("(n) {}: hluk warm-restore run", p.name), anchor),
            None => println!("(n) {}: hluk warm-restore NOT RUN (needs --hluk)", p.name),
        }
    }
    println!(
        "(n) start to ready (one JavaScript and one native Python sandbox): building the \
         templates {:.0} ms",
        figures.start_built_ms
    );
    print_row(
        "(n) start to ready, loading the templates saved by an earlier start",
        &figures.start_saved,
    );
    println!(
        "(n) template {:.0} ms; a sandbox from it {:.1} ms; {:.1} MiB per idle sandbox; \
         {:.1} MiB the template; rootfs {:.1} MB; the template saved {:.1} MB; \
         hluk's snapshot {}",
        figures.template_ms,
        figures.sandbox_create_ms,
        figures.memory_per_sandbox_mib,
        figures.memory_template_mib,
        figures.rootfs_bytes as f64 / 1e6,
        figures.saved_template_bytes as f64 / 1e6,
        figures
            .snapshot_bytes
            .map_or("not measured".to_owned(), |b| format!(
                "{:.1} MB",
                b as f64 / 1e6
            )),
    );
}

/// Upstream's CLI, with a snapshot of the rootfs taken after the daemon's imports.
struct Anchor {
    hluk: PathBuf,
    dir: tempfile::TempDir,
}

impl Anchor {
    fn save(hluk: &Path, rootfs: &Path) -> Result<Anchor> {
        let dir = tempfile::tempdir()?;
        eprintln!("(n) hluk snapshot save ...");
        let output = Command::new(hluk)
            .args([
                "snapshot",
                "save",
                "--scratch-mb",
                MEMORY_MIB,
                "--warm-exec",
                ANCHOR_WARM,
            ])
            .arg("--initrd")
            .arg(rootfs)
            .arg("--output")
            .arg(dir.path().join("snapshot"))
            .output()
            .context("running hluk snapshot save")?;
        if !output.status.success() {
            bail!(
                "hluk snapshot save: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(Anchor {
            hluk: hluk.to_owned(),
            dir,
        })
    }

    fn snapshot(&self) -> PathBuf {
        self.dir.path().join("snapshot")
    }

    /// `n` runs of `code`, each in the warm sandbox and followed by a restore; the run times.
    fn warm_restore(&self, code: &str, n: usize) -> Result<Latency> {
        let script = self.dir.path().join("program.py");
        std::fs::write(&script, code)?;
        let output = Command::new(&self.hluk)
            .args(["bench", "warm-restore"])
            .arg(self.snapshot())
            .arg(&script)
            .args(["--samples", &n.to_string()])
            .output()
            .context("running hluk bench warm-restore")?;
        if !output.status.success() {
            bail!(
                "hluk bench warm-restore: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let samples: Vec<Duration> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| line.starts_with("BENCH warm-restore sample="))
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("exec_ms=")))
            .filter_map(|ms| ms.parse::<f64>().ok())
            .map(|ms| Duration::from_secs_f64(ms / 1e3))
            .collect();
        if samples.len() != n {
            bail!("hluk printed {} of {n} samples", samples.len());
        }
        Ok(Latency::of(samples))
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
