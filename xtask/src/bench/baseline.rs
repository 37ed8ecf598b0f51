//! The daemon the benchmark's `baseline` part compares this one with: built in release mode
//! from [`BASELINE`], the last revision before issue 16's files, streamed output and policy
//! check, in a worktree and a target directory of its own (so that neither build undoes the
//! other's artifacts).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use crate::{cargo, step, vm};

/// Issue 15's last commit (its resolution): nothing of issue 16 yet.
pub const BASELINE: &str = "8a59170";

/// Builds the baseline daemon (once; afterwards cargo finds it fresh) and returns its path.
pub fn baseline_daemon() -> Result<PathBuf> {
    let target = vm::target_dir()?.join("baseline");
    let source = target.join("source");
    if !source.join("Cargo.toml").exists() {
        std::fs::create_dir_all(&target)?;
        step(
            &format!("benchmark baseline: the source at {BASELINE}"),
            Command::new("git")
                .args(["worktree", "add", "--force", "--detach"])
                .arg(&source)
                .arg(BASELINE),
            Duration::from_secs(120),
        )?;
    }
    step(
        &format!("benchmark baseline: release build of the daemon at {BASELINE}"),
        cargo()
            .current_dir(&source)
            .args([
                "build",
                "--release",
                "--locked",
                "-p",
                "hyperlightd",
                "--target-dir",
            ])
            .arg(target.join("build")),
        Duration::from_secs(3600),
    )?;
    Ok(target.join("build/release/hyperlightd"))
}
