//! The anchor of the benchmark's `native` part: upstream's `hluk` (hyperlight-unikraft's CLI),
//! at the version the daemon links, installed from crates.io into `target/tools/hluk` once
//! (about six minutes; afterwards cargo finds it installed).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::{cargo, step, vm};

/// The hyperlight-unikraft the daemon links (the workspace manifest pins it).
const VERSION: &str = "=0.20.1";

/// Installs `hluk` if need be and returns its path.
pub fn hluk() -> Result<PathBuf> {
    let root = vm::target_dir()?.join("tools/hluk");
    let binary = root.join("bin/hluk");
    if !binary.exists() {
        step(
            "benchmark anchor: cargo install hyperlight-unikraft (hluk)",
            cargo()
                .args([
                    "install",
                    "hyperlight-unikraft",
                    "--locked",
                    "--version",
                    VERSION,
                ])
                .arg("--root")
                .arg(&root),
            Duration::from_secs(3600),
        )?;
    }
    Ok(binary)
}
