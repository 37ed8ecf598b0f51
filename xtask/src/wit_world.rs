//! hyperlight-wasm compiles its guest runtime for the Python guest's WIT world, but its build
//! scripts rerun only when the *name* in `WIT_WORLD` changes, never its contents: after
//! `guest/python/wit/component/world.wasm` is regenerated, a tree that built the old world keeps
//! a runtime that cannot link the new imports. This forgets that runtime whenever the world's
//! bytes differ from the ones it was built for, so the next build compiles it again. A runtime
//! built before any xtask command ran has no record and is forgotten too: `.ci/run` runs one
//! before clippy builds it, so that a fresh clone builds it once.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::Path;

use crate::{cargo, workspace_root};

const WORLD: &str = "guest/python/wit/component/world.wasm";
const STAMP: &str = "target/hyperlight-wasm-runtime.world-sha256";

pub fn forget_stale_runtime() -> Result<()> {
    let root = workspace_root()?;
    let world = fs::read(root.join(WORLD)).with_context(|| format!("reading {WORLD}"))?;
    let digest = format!("{:x}", Sha256::digest(&world));
    let stamp = root.join(STAMP);
    let runtime = root.join("target/hyperlight-wasm-runtime");
    let built_for = fs::read_to_string(&stamp).ok();
    if built_for.as_deref() != Some(digest.as_str()) && runtime.exists() {
        eprintln!("==> the WIT world changed: hyperlight-wasm's guest runtime will be rebuilt");
        forget(&root, &runtime)?;
    }
    if let Some(dir) = stamp.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&stamp, digest).with_context(|| format!("writing {STAMP}"))
}

fn forget(root: &Path, runtime: &Path) -> Result<()> {
    fs::remove_dir_all(runtime).with_context(|| format!("removing {}", runtime.display()))?;
    for profile in [&[][..], &["--release"][..]] {
        let status = cargo()
            .current_dir(root)
            .args(["clean", "--quiet", "-p", "hyperlight-wasm"])
            .args(profile)
            .status()
            .context("running cargo clean -p hyperlight-wasm")?;
        anyhow::ensure!(
            status.success(),
            "cargo clean -p hyperlight-wasm failed ({status})"
        );
    }
    Ok(())
}
