//! Side-by-side benchmark of hyperlightd, in parts. Each part compares its contenders within
//! itself (one process, one VM boot), and decides the targets from its figures:
//!
//! - `latency` (R1): hyperlight-js called in this process (call, then restore) against a warm
//!   request through the daemon's socket; Python's warm request against JavaScript's;
//! - `process` (R2): a fresh `node -e` / `python3 -c` per execution against the daemon;
//! - `concurrency` (R3): daemon throughput at concurrency 2 against 1, three times;
//! - `refill`: a poisoned sandbox back in service, and a new sandbox from the template, against
//!   building a template from scratch;
//! - `start`: daemon start to ready, cold and from snapshots saved on disk;
//! - `sustained`: back to back on one sandbox, Python against JavaScript;
//! - `library`: the Python guest's library and packages (see python_library.rs);
//! - `sessions`: session execs, forks, saved states (see sessions.rs);
//! - `durable`: sessions kept in a state directory: checkpoints to disk, restarts, parked
//!   sessions (see durable.rs);
//! - `baseline`: a plain exec against the daemon from before issue 16, and what files, a
//!   policy and streaming cost when used (see baseline.rs);
//! - `native`: native Python against WebAssembly Python and upstream's `hluk bench
//!   warm-restore` (see native.rs);
//! - `tools`: tool calls from code (see tools.rs);
//! - `egress`: one outbound request from a program against the same from a host client (see
//!   egress.rs);
//! - `packages`: a native session's install of a small wheel, fetched and from the cache,
//!   against a session exec that installs nothing (see packages.rs);
//! - `seccomp`: a warm exec and one outbound request with the daemon's system call filters
//!   against without (see seccomp.rs);
//! - `traces`: the same with spans sent over OTLP against traces off (see traces.rs).
//!
//! Each part prints its rows and targets and writes `<out>/<part>.json`; `--summary` prints
//! every target from those files. Run it where KVM runs Hyperlight guests: `cargo xtask bench`
//! builds it in release mode and runs each part in the nested-KVM VM if need be, again when the
//! VM stalls.

#![forbid(unsafe_code)]

mod baseline;
mod capacity;
mod common;
mod concurrency;
mod direct;
mod durable;
mod e2b;
mod egress;
mod latency;
mod native;
mod packages;
mod process;
mod python_library;
mod refill;
mod seccomp;
mod sessions;
mod start;
mod sustained;
mod targets;
mod tools;
mod traces;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

pub use self::common::{
    Daemon, Latency, exec_checked, histogram_totals, start_daemon, wait_until_idle,
};
use self::targets::PartReport;

/// The work every contender does: build an array of 100 squares, sum it, stringify the sum.
const BODY: &str = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
                    JSON.stringify(xs.reduce((a, b) => a + b, 0))";
/// What BODY evaluates to.
const EXPECTED: &str = "328350";
/// BODY in Python.
const PYTHON_BODY: &str =
    "import json\nxs = []\nfor i in range(100):\n    xs.append(i * i)\njson.dumps(sum(xs))";

/// A part of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    Latency,
    Process,
    Concurrency,
    Refill,
    Start,
    Sustained,
    Library,
    Sessions,
    Durable,
    Baseline,
    Native,
    Tools,
    E2b,
    Egress,
    Packages,
    Seccomp,
    Traces,
    Capacity,
    Load,
}

impl Part {
    fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

#[derive(Debug, Parser)]
#[command(name = "hyperlightd-bench")]
struct Args {
    /// The hyperlightd binary to benchmark.
    #[arg(long)]
    daemon: PathBuf,
    /// Parts to run (repeat; all by default).
    #[arg(long, value_enum)]
    part: Vec<Part>,
    /// Timed executions per latency row, after a warm-up.
    #[arg(long, default_value_t = 200)]
    iterations: usize,
    /// Executions of each row of `load`.
    #[arg(long, default_value_t = 1000)]
    load_executions: usize,
    /// Executions per concurrency level and run for R3, and calls of the in-process ceiling's
    /// each thread count: a few seconds each, since under emulation the rate of a second or two
    /// (300 executions, the figure until issue 32) moved by up to 40 % between runs.
    #[arg(long, default_value_t = 1200)]
    throughput_requests: usize,
    /// Processes started per language for R2; each costs hundreds of milliseconds.
    #[arg(long, default_value_t = 20)]
    node_iterations: usize,
    /// JavaScript pool size for R1.
    #[arg(long, default_value_t = 2)]
    pool: usize,
    /// Daemon starts timed per start row.
    #[arg(long, default_value_t = 3)]
    starts: usize,
    /// The compiled Python guest; without it, Python's rows are not run and the table says so.
    #[arg(long)]
    python_guest: Option<PathBuf>,
    /// The Python guest built with sympy, networkx and python-dateutil, for `library`.
    #[arg(long)]
    python_packages_guest: Option<PathBuf>,
    /// The native Python guest's rootfs (`cargo xtask native-python`), for `native` and
    /// `capacity`.
    #[arg(long)]
    python_rootfs: Option<PathBuf>,
    /// The wheels `cargo xtask test` downloads (target/test-wheels/files), for `packages`.
    #[arg(long)]
    wheels: Option<PathBuf>,
    /// Upstream's `hluk` (hyperlight-unikraft's CLI), the anchor of `native`.
    #[arg(long)]
    hluk: Option<PathBuf>,
    /// The daemon from before issue 16, for `baseline` (`cargo xtask bench` builds it).
    #[arg(long)]
    baseline_daemon: Option<PathBuf>,
    /// The revision `--baseline-daemon` was built from, when it is not issue 16's baseline: the
    /// part then compares plain execs with it, prints the ratios and sets no target.
    #[arg(long)]
    baseline_revision: Option<String>,
    /// Extra arguments for the daemon (repeat), e.g. `--daemon-arg=--guest-heap-mib=16`.
    #[arg(long = "daemon-arg", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    /// Directory for each part's figures, `<part>.json`.
    #[arg(long, default_value = "bench")]
    out: PathBuf,
    /// Print the targets of the parts' files in `--out` (no daemon is run).
    #[arg(long)]
    summary: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let parts = if args.part.is_empty() {
        Part::value_variants().to_vec()
    } else {
        args.part.clone()
    };
    if args.summary {
        let names: Vec<String> = parts.iter().map(|p| p.name()).collect();
        return targets::summary(&args.out, &names);
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    for part in parts {
        eprintln!("== part {} ==", part.name());
        let report = runtime(part)?.block_on(run(part, &args))?;
        report.print_targets();
        let path = args.out.join(format!("{}.json", report.part));
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("figures written to {}", path.display());
    }
    Ok(())
}

/// The client's runtime: one thread, the least a client adds to a request (a thread per
/// vCPU costs wake-ups between them, milliseconds under emulation), except where requests must
/// run at once.
fn runtime(part: Part) -> Result<tokio::runtime::Runtime> {
    let mut builder = match part {
        Part::Concurrency | Part::Load => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    Ok(builder.enable_all().build()?)
}

async fn run(part: Part, args: &Args) -> Result<PartReport> {
    // The daemon turns transparent huge pages off (daemon/src/sys/memory.rs), and so does this
    // process, so that both sides manage memory alike; `latency` measures the direct calls
    // with the system's policy first, and turns them off itself.
    if part != Part::Latency {
        nix::sys::prctl::set_thp_disable(true).context("turning transparent huge pages off")?;
    }
    match part {
        Part::Latency => latency::run(args).await,
        Part::Process => process::run(args).await,
        Part::Concurrency => concurrency::run(args).await,
        Part::Refill => refill::run(args).await,
        Part::Start => start::run(args).await,
        Part::Sustained => sustained::run(args).await,
        Part::Baseline => baseline::run(args).await,
        Part::Library => library(args).await,
        Part::Native => native::run(args).await,
        Part::Tools => tools::run(args).await,
        Part::E2b => e2b::run(args).await,
        Part::Egress => egress::run(args).await,
        Part::Packages => packages::run(args).await,
        Part::Seccomp => seccomp::run(args).await,
        Part::Traces => traces::run(args).await,
        Part::Durable => durable::run(args).await,
        Part::Capacity => capacity::run(args).await,
        Part::Load => capacity::run_load(args).await,
        Part::Sessions => {
            // Each runtime's rows are printed as soon as they are measured.
            let figures = sessions::session_costs(args).await?;
            Ok(PartReport {
                part: part.name(),
                figures: serde_json::to_value(&figures)?,
                targets: sessions::targets(&figures),
            })
        }
    }
}

async fn library(args: &Args) -> Result<PartReport> {
    let figures = match (&args.python_guest, &args.python_packages_guest) {
        (Some(guest), Some(packages)) => {
            let figures = python_library::library_costs(args, guest, packages).await?;
            python_library::print(&figures, common::print_row);
            serde_json::to_value(&figures)?
        }
        _ => {
            println!("\n(library) NOT RUN (needs --python-guest and --python-packages-guest)");
            serde_json::Value::Null
        }
    };
    Ok(PartReport {
        part: "library".into(),
        figures,
        targets: Vec::new(),
    })
}
