//! (g) What the Python guest's library and packages cost, side by side in one run: the same
//! guest with an empty library (what the guest had before the library: only the modules
//! imported at build time), with its standard library, and a guest built with packages
//! (sympy, networkx, python-dateutil). For each: a plain warm request, importing a module that
//! is not in the snapshot, building a sandbox, and host memory per sandbox.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hyperlightd_client::{ExecRequest, Language};
use serde::Serialize;

use crate::{Args, Latency, PYTHON_BODY, common, histogram_totals, start_daemon, wait_until_idle};

/// One guest and library to measure.
struct Variant {
    name: &'static str,
    guest: PathBuf,
    library: PathBuf,
    /// A program that imports what the snapshot does not have, if this variant can.
    import: Option<&'static str>,
    /// What it imports, for the table.
    imports: &'static str,
}

/// (g)'s figures for one variant.
#[derive(Debug, Serialize)]
pub struct LibraryFigures {
    name: &'static str,
    /// The library file's size.
    library_bytes: u64,
    warm: Latency,
    /// The import program, once per request (each request starts from the snapshot).
    import: Option<Latency>,
    imports: &'static str,
    /// Building one warm Python sandbox, from the daemon's histogram.
    sandbox_create_ms: f64,
    /// Daemon resident memory with three Python sandboxes less with one, halved.
    memory_per_sandbox_mib: f64,
    /// Daemon resident memory with one Python sandbox (and one JavaScript one).
    daemon_with_one_mib: f64,
}

/// Imports modules of the standard library that the snapshot does not hold.
const STDLIB_IMPORT: &str = "import email.mime.text, zipfile, xml.dom.minidom, tomllib\nzipfile.is_zipfile('x') is False and '328350'";
/// Imports and uses the packages.
const PACKAGES_IMPORT: &str = "import sympy, networkx, dateutil.parser\nstr(sympy.Integer(328350))";

/// Runs (g) for the guest and the guest with packages.
pub async fn library_costs(
    args: &Args,
    guest: &Path,
    packages: &Path,
) -> Result<Vec<LibraryFigures>> {
    let dir = tempfile::tempdir()?;
    let empty = dir.path().join("empty-lib.tar");
    // An empty tar archive: two zero blocks.
    std::fs::write(&empty, [0u8; 1024])?;
    let variants = [
        Variant {
            name: "no library (before)",
            guest: guest.to_owned(),
            library: empty,
            import: None,
            imports: "",
        },
        Variant {
            name: "standard library",
            guest: guest.to_owned(),
            library: guest.with_file_name("python-lib.tar"),
            import: Some(STDLIB_IMPORT),
            imports: "email, zipfile, xml.dom, tomllib",
        },
        Variant {
            name: "with sympy, networkx, dateutil",
            guest: packages.to_owned(),
            library: packages.with_file_name("python-lib.tar"),
            import: Some(PACKAGES_IMPORT),
            imports: "sympy, networkx, dateutil",
        },
    ];
    let mut figures = Vec::new();
    for variant in &variants {
        eprintln!("(g) Python: {} ...", variant.name);
        figures.push(measure(args, variant).await?);
    }
    Ok(figures)
}

async fn measure(args: &Args, variant: &Variant) -> Result<LibraryFigures> {
    let extra = |sandboxes: usize| {
        let mut extra = vec![
            "--pool".to_owned(),
            format!("python={sandboxes}"),
            "--python-guest".to_owned(),
            variant.guest.to_string_lossy().into_owned(),
            "--python-lib".to_owned(),
            variant.library.to_string_lossy().into_owned(),
            "--max-timeout-ms".to_owned(),
            "300000".to_owned(),
        ];
        extra.extend(args.daemon_args.iter().cloned());
        extra
    };
    let (three, _) = start_daemon(&args.daemon, 1, &extra(3)).await?;
    wait_until_idle(&three.client).await?;
    let rss_three = resident_mib(three.child.id())?;
    drop(three);
    let (daemon, _) = start_daemon(&args.daemon, 1, &extra(1)).await?;
    let client = &daemon.client;
    wait_until_idle(client).await?;
    let daemon_with_one_mib = resident_mib(daemon.child.id())?;

    let plain = ExecRequest::new(Language::Python, PYTHON_BODY);
    let warm = common::warm(client, &plain, args.iterations.min(100)).await?;
    let import = match variant.import {
        Some(code) => {
            let request = ExecRequest {
                timeout_ms: Some(300_000),
                ..ExecRequest::new(Language::Python, code)
            };
            Some(common::warm(client, &request, 3).await?)
        }
        None => None,
    };
    let metrics = client.metrics().await?;
    let (sum, count) = histogram_totals(
        &metrics,
        "hyperlightd_sandbox_create_seconds",
        "{language=\"python\"",
    );
    Ok(LibraryFigures {
        name: variant.name,
        library_bytes: std::fs::metadata(&variant.library)?.len(),
        warm,
        import,
        imports: variant.imports,
        sandbox_create_ms: sum / count * 1e3,
        memory_per_sandbox_mib: (rss_three - daemon_with_one_mib) / 2.0,
        daemon_with_one_mib,
    })
}

/// A process's resident memory, in MiB.
pub fn resident_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status_mib(&status, "VmRSS:").context("no VmRSS in /proc/PID/status")
}

/// The field `key` (`VmRSS:`, `RssAnon:`, ...) of a `/proc/PID/status` text, in MiB.
pub fn status_mib(status: &str, key: &str) -> Option<f64> {
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())?;
    Some(kib / 1024.0)
}

/// Prints (g).
pub fn print(figures: &[LibraryFigures], row: impl Fn(&str, &Latency)) {
    println!();
    for f in figures {
        row(&format!("(g) Python, {}: warm", f.name), &f.warm);
        if let Some(import) = &f.import {
            row(&format!("(g) ... importing {}", f.imports), import);
        }
        println!(
            "(g) ... library {:.1} MB; a sandbox from the template {:.1} ms; {:.1} MiB per sandbox; daemon with one: {:.1} MiB",
            f.library_bytes as f64 / 1e6,
            f.sandbox_create_ms,
            f.memory_per_sandbox_mib,
            f.daemon_with_one_mib
        );
    }
}
