//! The Python client (clients/python): its wheel, the virtual environment its tests run in,
//! and its host-side checks. The end-to-end tests (clients/python/e2e) run in the VM through
//! tests/tests/python_sdk.rs, with the environment built here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::tools::{pinned_virtualenv, virtualenv};
use crate::{step, vm, workspace_root};

/// Builds the client's wheel in target/python-sdk/dist and installs it (with the pinned test
/// tools and frameworks of clients/python/e2e/requirements.txt) in target/python-sdk/venv;
/// checks that the README's `pip install ./clients/python` works in a clean virtual
/// environment and the package imports there. Returns the wheel.
pub fn python_sdk() -> Result<PathBuf> {
    let source = workspace_root()?.join("clients/python");
    let work = vm::target_dir()?.join("python-sdk");
    let venv = work.join("venv");
    pinned_virtualenv("Python client", &venv, &source.join("e2e/requirements.txt"))?;
    let wheel = build_wheel(&source, &venv, &work.join("dist"))?;
    step(
        "Python client: install the wheel in the test environment",
        pip(&venv)
            .args(["install", "--no-deps", "--force-reinstall"])
            .arg(&wheel),
        Duration::from_secs(300),
    )?;
    // The README's command, into an environment that has nothing else.
    let clean = work.join("clean");
    virtualenv(
        "Python client: pip install ./clients/python in a clean environment",
        &clean,
        &[&source.to_string_lossy()],
    )?;
    step(
        "Python client: import it there",
        Command::new(clean.join("bin/python"))
            .args(["-c", "import hyperlightd.aio, hyperlightd.tools"]),
        Duration::from_secs(60),
    )?;
    Ok(wheel)
}

/// The client's own tests on the host: pytest against a stand-in daemon, `mypy --strict`,
/// and ruff's lints and format.
pub fn python_sdk_checks() -> Result<()> {
    let source = workspace_root()?.join("clients/python");
    let bin = vm::target_dir()?.join("python-sdk/venv/bin");
    let checks: [(&str, &str, &[&str]); 4] = [
        (
            "pytest (unit tests, stand-in daemon)",
            "python",
            &["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        ),
        (
            "mypy --strict",
            "mypy",
            &["src", "tests", "e2e", "examples"],
        ),
        ("ruff check", "ruff", &["check", "--no-cache", "."]),
        (
            "ruff format --check",
            "ruff",
            &["format", "--check", "--no-cache", "."],
        ),
    ];
    for (name, tool, args) in checks {
        step(
            &format!("Python client: {name}"),
            Command::new(bin.join(tool))
                .args(args)
                .current_dir(&source)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env(
                    "MYPY_CACHE_DIR",
                    vm::target_dir()?.join("python-sdk/mypy-cache"),
                ),
            Duration::from_secs(600),
        )?;
    }
    Ok(())
}

/// `pip wheel` of the client with the environment's pinned build backend: the one wheel in
/// `dist`.
fn build_wheel(source: &Path, venv: &Path, dist: &Path) -> Result<PathBuf> {
    if dist.exists() {
        std::fs::remove_dir_all(dist).with_context(|| format!("emptying {}", dist.display()))?;
    }
    step(
        "Python client: build the wheel",
        pip(venv)
            .args(["wheel", "--no-deps", "--no-build-isolation", "--wheel-dir"])
            .arg(dist)
            .arg(source),
        Duration::from_secs(300),
    )?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(dist)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .collect();
    match wheels.as_slice() {
        [wheel] => Ok(wheel.clone()),
        other => bail!(
            "expected one wheel in {}, found {}",
            dist.display(),
            other.len()
        ),
    }
}

fn pip(venv: &Path) -> Command {
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["--disable-pip-version-check", "--quiet"]);
    pip
}
