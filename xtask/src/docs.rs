//! `cargo xtask docs`: the book (mdBook, sources in docs/, built into target/book) and the
//! references it holds that are generated from the code, never written by hand:
//!
//! - `docs/reference/api.md` from `api/openapi.json` (itself generated from the wire types);
//! - `docs/reference/hyperlightd.md` and `docs/reference/metrics.md` from the daemon's clap
//!   definitions and metrics (its `reference` example prints them);
//! - `docs/reference/hlctl.md` from hlctl's clap definitions (`hlctl --markdown-help`).
//!
//! `--check` fails when a committed reference differs from what the code generates; then the
//! book is built and its links and anchors checked (LinkChecker), as `.ci/run` does.

mod openapi;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::tools::{Tool, install_tool, pip_tool};
use crate::{cargo, step, workspace_root};

/// How long installing a tool from crates.io may take.
const INSTALL_LIMIT: Duration = Duration::from_secs(1800);

/// mdBook, installed from crates.io into target/tools (once). Unoptimised: it renders a small
/// book in a second that way too.
const MDBOOK: Tool = Tool {
    krate: "mdbook",
    version: "0.4.52",
    binary: "mdbook",
    opt_level: "0",
};
/// The link checker, from PyPI into a virtualenv under target/ (seconds, where building lychee
/// from crates.io took six minutes of a fresh machine's CI run); its settings are
/// docs/linkcheckerrc.
const LINKCHECKER: &str = "LinkChecker==10.6.0";

/// Writes the generated references (or, with `check`, compares them with the committed ones),
/// then builds the book into target/book and checks its links.
pub fn docs(check: bool) -> Result<()> {
    let root = workspace_root()?;
    let mut stale = Vec::new();
    for (name, text) in references(&root)? {
        let path = root.join("docs/reference").join(name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed == text {
            continue;
        }
        if check {
            stale.push(path.display().to_string());
        } else {
            std::fs::create_dir_all(path.parent().context("reference path")?)?;
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("==> wrote {}", path.display());
        }
    }
    if !stale.is_empty() {
        bail!(
            "generated references differ from the code: {}; run `cargo xtask docs` and commit them",
            stale.join(", ")
        );
    }
    let tools = root.join("target/tools");
    let mdbook = install_tool(&tools, &MDBOOK, INSTALL_LIMIT)?;
    let linkchecker = pip_tool(
        "LinkChecker",
        &tools.join("linkchecker"),
        LINKCHECKER,
        "linkchecker",
    )?;
    let book = root.join("target/book");
    step(
        "mdbook build docs",
        Command::new(mdbook).arg("build").arg(root.join("docs")),
        Duration::from_secs(300),
    )?;
    check_links(&linkchecker, &root, &book)?;
    eprintln!("==> the book: {}", book.join("index.html").display());
    Ok(())
}

/// Checks the links and anchors of the book built in `book`. LinkChecker run as root reads
/// the pages as `nobody`, which may not reach into the checkout: it checks a copy that anyone
/// may read.
fn check_links(linkchecker: &Path, root: &Path, book: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let copy = tempfile::tempdir().context("a temporary directory for the book")?;
    std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(0o755))?;
    let pages = copy.path().join("book");
    step(
        "the book, copied for the link checker",
        Command::new("cp").arg("-r").arg(book).arg(&pages),
        Duration::from_secs(120),
    )?;
    step(
        "the book's copy, readable by anyone",
        Command::new("chmod").args(["-R", "a+rX"]).arg(&pages),
        Duration::from_secs(120),
    )?;
    step(
        "LinkChecker: the book's links and anchors",
        Command::new(linkchecker)
            .arg("--config")
            .arg(root.join("docs/linkcheckerrc"))
            .arg("--no-status")
            .arg(pages.join("index.html")),
        Duration::from_secs(300),
    )
}

/// Each generated page, by its file name under docs/reference/.
fn references(root: &Path) -> Result<Vec<(&'static str, String)>> {
    let spec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("api/openapi.json"))
            .context("reading api/openapi.json")?,
    )?;
    Ok(vec![
        ("api.md", openapi::render(&spec)),
        ("hyperlightd.md", daemon_reference("options")?),
        ("metrics.md", daemon_reference("metrics")?),
        (
            "hlctl.md",
            output(cargo().args(["run", "-q", "-p", "hlctl", "--", "--markdown-help"]))?,
        ),
    ])
}

/// A page the daemon's `reference` example prints (`options` or `metrics`).
fn daemon_reference(page: &str) -> Result<String> {
    output(cargo().args([
        "run",
        "-q",
        "-p",
        "hyperlightd",
        "--example",
        "reference",
        "--",
        page,
    ]))
}

/// What `command` prints, which must succeed.
fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}
