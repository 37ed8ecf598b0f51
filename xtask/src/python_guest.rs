//! `cargo xtask python-guest`: the Python guest, built from PyPI's componentize-py and
//! crates.io's hyperlight-wasm-aot.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::{cargo, step, vm, workspace_root};

/// componentize-py, pinned: the Python guest's CPython and standard library come from it.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// hyperlight-wasm-aot, pinned to the hyperlight-wasm the daemon links (the compiled component
/// must match its runtime's Wasmtime).
const HYPERLIGHT_WASM_AOT_VERSION: &str = "0.15.0";

/// Builds the Python guest and returns the path of its compiled component.
pub fn python_guest() -> Result<PathBuf> {
    let root = workspace_root()?;
    let out = vm::target_dir()?.join("python-guest");
    std::fs::create_dir_all(&out)?;

    let venv = out.join("venv");
    let componentize = venv.join("bin/componentize-py");
    if !componentize.exists() {
        step(
            "python guest: virtualenv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            Duration::from_secs(300),
        )?;
        step(
            &format!("python guest: pip install {COMPONENTIZE_PY}"),
            Command::new(venv.join("bin/pip")).args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                COMPONENTIZE_PY,
            ]),
            Duration::from_secs(600),
        )?;
    }

    let tools = vm::target_dir()?.join("tools");
    let aot = tools.join("bin/hyperlight-wasm-aot");
    if !aot.exists() {
        step(
            &format!(
                "python guest: cargo install hyperlight-wasm-aot {HYPERLIGHT_WASM_AOT_VERSION}"
            ),
            cargo()
                .args(["install", "--locked", "hyperlight-wasm-aot", "--version"])
                .arg(HYPERLIGHT_WASM_AOT_VERSION)
                .arg("--root")
                .arg(&tools)
                .env("CARGO_TARGET_DIR", tools.join("target")),
            Duration::from_secs(2400),
        )?;
    }

    // componentize-py imports the runner to build the component, leaving bytecode beside it:
    // build from a copy under target/, so that the source tree stays as it is.
    let app = out.join("app");
    std::fs::create_dir_all(&app)?;
    let guest_dir = root.join("guest/python");
    std::fs::copy(guest_dir.join("runner.py"), app.join("runner.py"))?;
    let component = out.join("python.wasm");
    step(
        "python guest: componentize-py (CPython + runner.py)",
        Command::new(&componentize)
            .current_dir(&app)
            .arg("-d")
            .arg(guest_dir.join("wit/hyperlightd.wit"))
            .args(["-w", "python", "componentize", "runner", "-p"])
            .arg(&app)
            .arg("-o")
            .arg(&component),
        Duration::from_secs(600),
    )?;
    let compiled = out.join("python.aot");
    step(
        "python guest: hyperlight-wasm-aot compile",
        Command::new(&aot)
            .args(["compile", "--component"])
            .arg(&component)
            .arg(&compiled),
        Duration::from_secs(900),
    )?;
    Ok(compiled)
}
