//! The anchor of the benchmark's `native` part: upstream's `hluk` (hyperlight-unikraft's CLI),
//! at the version the daemon links, installed from crates.io into `target/tools/hluk` once
//! (about six minutes; afterwards cargo finds it installed).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::tools::{Tool, install_tool};
use crate::vm;

/// hyperlight-unikraft at the version the daemon links (the workspace manifest pins it),
/// optimised as released: the benchmark compares the daemon with it.
const HLUK: Tool = Tool {
    krate: "hyperlight-unikraft",
    version: "0.20.1",
    binary: "hluk",
    opt_level: "3",
};

/// Installs `hluk` if need be and returns its path.
pub fn hluk() -> Result<PathBuf> {
    install_tool(
        &vm::target_dir()?.join("tools/hluk"),
        &HLUK,
        Duration::from_secs(3600),
    )
}
