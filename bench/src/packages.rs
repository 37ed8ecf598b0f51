//! (p) Packages at runtime (issue 57), side by side in one VM boot: in a new native Python
//! session, an install of a small pure wheel (mdurl, 10 KB) whose wheel the host must fetch
//! from the index, the same install with the wheel in the host's cache, and a session exec that
//! installs nothing. The index is the install tests' loopback server (`hyperlightd_e2e::index`)
//! with the wheel `cargo xtask test` downloaded from PyPI; the project's page is read on every
//! install (`--package-page-max-age-s 0`), so that the two installs differ by the wheel's fetch
//! alone. Alternating, each once the sandbox is idle and right after another session's exec, so
//! that all see the same machine and the same sandbox.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyperlightd_client::{Client, CreateSessionRequest, Language, SessionExecRequest};
use hyperlightd_e2e::index::{Listed, TestIndex};
use serde::Serialize;

use crate::common::{print_header, print_row};
use crate::native::native_args;
use crate::targets::PartReport;
use crate::{Args, Latency, start_daemon, wait_until_idle};

/// The wheel installed.
const WHEEL: &str = "mdurl-0.1.2-py3-none-any.whl";

#[derive(Debug, Serialize)]
struct Figures {
    wheel_bytes: usize,
    /// A new session's first exec, which installs nothing.
    session_exec: Latency,
    /// A new session's install, the wheel fetched from the index.
    install_fetched: Latency,
    /// A new session's install, the wheel from the host's cache.
    install_cached: Latency,
    install_fetched_ratio: f64,
    install_cached_ratio: f64,
}

/// A new session, an install of mdurl in it (or an exec that installs nothing) timed once the
/// sandbox is idle, then the session deleted.
async fn in_new_session(client: &Client, install: bool) -> Result<Duration> {
    let request = CreateSessionRequest::new(Language::Python);
    let id = client.create_session(&request).await?.id;
    wait_until_idle(client).await?;
    let started = Instant::now();
    if install {
        let installed = client.install_packages(&id, &["mdurl"]).await?;
        if installed.installed.len() != 1 {
            bail!("the install installed {:?}", installed.installed);
        }
    } else {
        client
            .session_exec(&id, &SessionExecRequest::new("x = 1"))
            .await?;
    }
    let took = started.elapsed();
    client.delete_session(&id).await?;
    Ok(took)
}

/// Empties the wheel cache, so that the next install fetches the wheel.
fn empty(cache: &Path) -> Result<()> {
    for entry in std::fs::read_dir(cache)? {
        std::fs::remove_file(entry?.path())?;
    }
    Ok(())
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let (Some(rootfs), Some(wheels)) = (&args.python_rootfs, &args.wheels) else {
        println!("\n(p) packages at runtime: NOT RUN (needs --python-rootfs and --wheels)");
        return Ok(PartReport {
            part: "packages".into(),
            figures: serde_json::Value::Null,
            targets: Vec::new(),
        });
    };
    let wheel = std::fs::read(wheels.join(WHEEL)).context("the wheel")?;
    let wheel_bytes = wheel.len();
    let index = TestIndex::serve(vec![Listed::new(WHEEL, wheel)]).await;
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("wheels");
    let mut extra = native_args(args, rootfs, 1);
    extra.extend([
        "--package-index".to_owned(),
        index.url(),
        "--package-cache".to_owned(),
        cache.to_string_lossy().into_owned(),
        "--package-page-max-age-s".to_owned(),
        "0".to_owned(),
    ]);
    let (daemon, _) = start_daemon(&args.daemon, 1, &extra).await?;
    let client = &daemon.client;
    println!(
        "\n(p) packages at runtime: a new native Python session, {WHEEL} ({wheel_bytes} bytes)"
    );
    print_header();
    // A first round not counted: the sandbox's first session exec and first install.
    in_new_session(client, false).await?;
    in_new_session(client, true).await?;
    let n = args.iterations.min(20);
    let mut samples = [(); 3].map(|()| Vec::with_capacity(n));
    // Each timed call follows the same: another session's exec, whose state the sandbox still
    // holds (the call after an install was measured 60 ms faster than the call after an exec).
    for _ in 0..n {
        in_new_session(client, false).await?;
        samples[0].push(in_new_session(client, false).await?);
        in_new_session(client, false).await?;
        empty(&cache)?;
        samples[1].push(in_new_session(client, true).await?);
        in_new_session(client, false).await?;
        samples[2].push(in_new_session(client, true).await?);
    }
    let [session_exec, install_fetched, install_cached] = samples.map(Latency::of);
    print_row("session exec that installs nothing", &session_exec);
    print_row(
        "install, the wheel fetched from the index",
        &install_fetched,
    );
    print_row("install, the wheel from the host's cache", &install_cached);
    let figures = Figures {
        wheel_bytes,
        install_fetched_ratio: install_fetched.p50_ms / session_exec.p50_ms,
        install_cached_ratio: install_cached.p50_ms / session_exec.p50_ms,
        session_exec,
        install_fetched,
        install_cached,
    };
    println!(
        "{:<52} {:>10.2}\n{:<52} {:>10.2}",
        "install fetched / session exec (p50)",
        figures.install_fetched_ratio,
        "install cached / session exec (p50)",
        figures.install_cached_ratio
    );
    Ok(PartReport {
        part: "packages".into(),
        figures: serde_json::to_value(&figures)?,
        targets: Vec::new(),
    })
}
