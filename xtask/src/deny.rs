//! `cargo xtask deny`: the supply chain checked with cargo-deny (deny.toml): the licenses the
//! project takes, the crates it bans, duplicate versions (each one allowed is named there with
//! why), and that every crate comes from crates.io.
//!
//! Advisories are not checked: RustSec's database is a git repository on GitHub, which these
//! machines cannot fetch. An operator with network access runs
//! `target/tools/bin/cargo-deny check advisories` (docs/guide/security.md).

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::tools::{Tool, install_tool};
use crate::{step, workspace_root};

/// cargo-deny, installed from crates.io into target/tools (once). Unoptimised: it checks this
/// workspace's graph in seconds that way too.
const CARGO_DENY: Tool = Tool {
    krate: "cargo-deny",
    version: "0.20.2",
    binary: "cargo-deny",
    opt_level: "0",
};
/// How long installing it may take.
const INSTALL_LIMIT: Duration = Duration::from_secs(1800);
/// How long the check may take.
const CHECK_LIMIT: Duration = Duration::from_secs(300);

pub fn deny() -> Result<()> {
    let root = workspace_root()?;
    let cargo_deny = install_tool(&root.join("target/tools"), &CARGO_DENY, INSTALL_LIMIT)?;
    step(
        "cargo deny check licenses bans sources",
        Command::new(cargo_deny).current_dir(&root).args([
            "--locked",
            "--offline",
            "check",
            "licenses",
            "bans",
            "sources",
        ]),
        CHECK_LIMIT,
    )
}
