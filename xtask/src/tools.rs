//! What the project's steps fetch and keep under `target/`: tools from crates.io, Python
//! virtual environments from PyPI, npm packages, and the wheels the install tests serve. Each
//! is made again only when its pin changes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::js_vendor::npm_ci;
use crate::{cargo, step, vm, workspace_root};

/// A tool from crates.io: its crate, the version to install, the binary the project runs, and
/// the optimisation level it is built with. Building these tools is most of what a fresh
/// machine's CI run spends on them (minutes each at `opt-level` 3, on two cores) while running
/// them takes seconds: a tool whose work is small is built at a lower level.
#[derive(Debug)]
pub struct Tool {
    pub krate: &'static str,
    pub version: &'static str,
    pub binary: &'static str,
    pub opt_level: &'static str,
}

/// Installs `tool` with `cargo install --locked` into `root` (its binary in `root/bin`) unless
/// that version is there already (a marker beside it says which), and returns the binary's path.
/// Its build has a target directory of its own under `root` (the workspace's `[patch]` and
/// profile are the project's, not the tool's), removed once the binary is installed: the tools
/// change version rarely, and their build products (up to a GiB each) once filled a CI machine's
/// disk.
pub fn install_tool(root: &Path, tool: &Tool, limit: Duration) -> Result<PathBuf> {
    let binary = root.join("bin").join(tool.binary);
    let marker = root.join(format!("{}.version", tool.krate));
    let built = format!("{} opt-level={}", tool.version, tool.opt_level);
    if binary.exists() && std::fs::read_to_string(&marker).unwrap_or_default() == built {
        return Ok(binary);
    }
    let build = root.join("target");
    let mut install = cargo();
    install
        .args(["install", "--locked", "--force", tool.krate, "--version"])
        .arg(format!("={}", tool.version))
        .arg("--root")
        .arg(root)
        .env("CARGO_TARGET_DIR", &build);
    if tool.opt_level != "3" {
        install
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", tool.opt_level)
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_LTO", "false");
    }
    step(
        &format!(
            "cargo install {} {} at opt-level {} (once, into {})",
            tool.krate,
            tool.version,
            tool.opt_level,
            root.display()
        ),
        &mut install,
        limit,
    )?;
    std::fs::write(&marker, built)?;
    std::fs::remove_dir_all(&build).with_context(|| format!("removing {}", build.display()))?;
    Ok(binary)
}

/// The wheels the package install tests serve from a loopback index
/// (`tests/packages/wheels.lock`), downloaded from PyPI into target/test-wheels/files with
/// pip, every hash checked; again only when the lock changes.
pub fn test_wheels() -> Result<PathBuf> {
    let lock = workspace_root()?.join("tests/packages/wheels.lock");
    let out = vm::target_dir()?.join("test-wheels");
    let files = out.join("files");
    let stamp = out.join("wheels.lock.downloaded");
    let wanted =
        std::fs::read_to_string(&lock).with_context(|| format!("reading {}", lock.display()))?;
    if std::fs::read_to_string(&stamp).is_ok_and(|done| done == wanted) {
        return Ok(files);
    }
    let pip = pip_tool("test wheels", &out.join("pip"), "pip==25.3", "pip")?;
    if files.exists() {
        std::fs::remove_dir_all(&files)?;
    }
    step(
        "test wheels: pip download",
        Command::new(pip)
            .args([
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .args([
                "--only-binary=:all:",
                "--require-hashes",
                "--implementation",
                "cp",
            ])
            .args([
                "--python-version",
                "3.11",
                "--abi",
                "cp311",
                "--abi",
                "none",
            ])
            .args(["--platform", "manylinux2014_x86_64", "--platform", "any"])
            .arg("-r")
            .arg(&lock)
            .arg("-d")
            .arg(&files),
        Duration::from_secs(300),
    )?;
    std::fs::write(&stamp, wanted).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(files)
}

/// A virtual environment at `venv` with `pip install -r REQUIREMENTS`, made again only when
/// the requirements file differs from the one it was made with.
pub fn pinned_virtualenv(what: &str, venv: &Path, requirements: &Path) -> Result<()> {
    let stamp = venv.join("requirements.installed");
    let wanted = std::fs::read_to_string(requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed == wanted) {
        return Ok(());
    }
    virtualenv(what, venv, &["-r", &requirements.to_string_lossy()])?;
    std::fs::write(&stamp, wanted).with_context(|| format!("writing {}", stamp.display()))
}

/// npm packages the end-to-end tests use, pinned in `source` (its package.json and lock) and
/// installed with `npm ci` in target/`target`, again when the lock changes; `files` of
/// `source` (the tests that use them) are copied beside them every time. `what` names the
/// step: the MCP servers that tests give `hlctl mcp`'s code mode (tests/mcp), E2B's
/// JavaScript SDK and its test (tests/e2b-js).
pub fn npm_packages(what: &str, source: &str, target: &str, files: &[&str]) -> Result<()> {
    let source = workspace_root()?.join(source);
    let work = vm::target_dir()?.join(target);
    std::fs::create_dir_all(&work)?;
    for file in files {
        std::fs::copy(source.join(file), work.join(file))
            .with_context(|| format!("copying {file} into {}", work.display()))?;
    }
    let lock = std::fs::read_to_string(source.join("package-lock.json"))
        .with_context(|| format!("reading {}/package-lock.json", source.display()))?;
    let stamp = work.join("package-lock.installed");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed == lock) {
        return Ok(());
    }
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), work.join(file))?;
    }
    npm_ci(&format!("{what}: npm ci (pinned)"), &work)?;
    std::fs::write(&stamp, lock).with_context(|| format!("writing {}", stamp.display()))
}

/// The program `binary` of the PyPI package pinned by `requirement` (`name==version`), in its
/// virtualenv at `venv`: installed on first use, again when the pin changes.
pub fn pip_tool(what: &str, venv: &Path, requirement: &str, binary: &str) -> Result<PathBuf> {
    let stamp = venv.join("installed");
    if std::fs::read_to_string(&stamp).is_ok_and(|v| v == requirement) {
        return Ok(venv.join("bin").join(binary));
    }
    virtualenv(what, venv, &[requirement])?;
    std::fs::write(&stamp, requirement).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(venv.join("bin").join(binary))
}

/// A fresh Python virtual environment at `venv`, with `pip install PIP_ARGS` run in it; `what`
/// names the steps.
pub fn virtualenv(what: &str, venv: &Path, pip_args: &[&str]) -> Result<()> {
    step(
        &format!("{what}: virtualenv"),
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(venv),
        Duration::from_secs(300),
    )?;
    step(
        &format!("{what}: pip install {}", pip_args.join(" ")),
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(pip_args),
        Duration::from_secs(600),
    )
}
