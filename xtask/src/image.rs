//! `cargo xtask image`: the container image the DaemonSet runs (`k8s/daemonset.yaml`), built
//! here from the project's own files, with no base image from a registry:
//!
//! - the Debian package's files (`cargo xtask dist`): `/usr/bin/hyperlightd`, `/usr/bin/hlctl`,
//!   the guests under `/usr/lib/hyperlightd/`, the docs;
//! - the shared libraries the two programs load (what `ldd` names: glibc's, libgcc's), copied
//!   from this machine (Debian bookworm), and nothing else of a distribution;
//! - Debian's static busybox as `/bin/sh`, `chmod` and `chown`, for the DaemonSet's init
//!   container, which hands the node's directories to the daemon's user;
//! - `/etc/passwd` and `/etc/group` with root and the user and group `hyperlightd` (10001), the
//!   ids the DaemonSet runs as and whose group the socket gets.
//!
//! The tree is packed as a tarball and imported by podman as `localhost/hyperlightd:latest`
//! (user 10001:10001, entry point the daemon, `PATH=/usr/bin:/bin`), then saved as an OCI archive,
//! `target/image/hyperlightd.oci.tar`, that any engine loads (`podman load`, `ctr images
//! import`). Where a registry is reachable, `k8s/Containerfile` builds an equivalent image on
//! Debian's own base image instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::{dist, step, vm};

/// The image's name in podman's store.
pub const IMAGE: &str = "localhost/hyperlightd:latest";

/// The users and groups of the image.
const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                      hyperlightd:x:10001:10001:hyperlightd:/nonexistent:/bin/false\n";
const GROUP: &str = "root:x:0:\nhyperlightd:x:10001:\n";

/// Builds the image (the package's build: debug or release) and returns its OCI archive.
pub fn image(debug: bool, guest: Option<PathBuf>) -> Result<PathBuf> {
    from_package(&dist::dist(debug, guest)?)
}

/// Builds the image from the files of the package `deb` (`cargo xtask dist` leaves its tree
/// beside it) and returns its OCI archive.
pub fn from_package(deb: &Path) -> Result<PathBuf> {
    let package = deb.with_extension("");
    let out = vm::target_dir()?.join("image");
    let root = out.join("root");
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("emptying {}", root.display()))?;
    }
    std::fs::create_dir_all(&root)?;
    // Hard links, not copies: the tree only lives until it is packed, and a copy of the guests
    // would take most of a GiB of disk for that time. Nothing below writes to a linked file.
    step(
        "image: the package's files",
        Command::new("cp")
            .arg("-al")
            .arg(format!("{}/.", package.display()))
            .arg(&root),
        Duration::from_secs(600),
    )?;
    // The package's own metadata and systemd files are not the image's.
    for skip in ["DEBIAN", "lib/systemd", "usr/lib/sysusers.d", "etc/default"] {
        let path = root.join(skip);
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
    }
    for program in ["usr/bin/hyperlightd", "usr/bin/hlctl"] {
        for library in libraries_of(&root.join(program))? {
            copy_file(&library, &root.join(library.strip_prefix("/")?))?;
        }
    }
    copy_file(Path::new("/bin/busybox"), &root.join("bin/busybox"))?;
    for applet in ["sh", "chmod", "chown", "id", "ls", "cat", "sleep"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))?;
    }
    dist::write(&root.join("etc/passwd"), PASSWD, 0o644)?;
    dist::write(&root.join("etc/group"), GROUP, 0o644)?;
    dist::write(
        &root.join("etc/nsswitch.conf"),
        "passwd: files\ngroup: files\n",
        0o644,
    )?;
    for dir in [
        "tmp",
        "run/hyperlightd",
        "var/lib/hyperlightd",
        "proc",
        "sys",
        "dev",
    ] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    dist::set_mode(&root.join("tmp"), 0o1777)?;
    let tarball = out.join("root.tar");
    step(
        "image: pack the tree",
        Command::new("tar")
            .args(["--numeric-owner", "--owner=0", "--group=0", "--sort=name"])
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tarball)
            .arg("."),
        Duration::from_secs(600),
    )?;
    std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    // The previous build's image goes, rather than stay in podman's store untagged.
    step(
        &format!("image: podman rmi {IMAGE} (the previous build's)"),
        Command::new("podman").args(["rmi", "--ignore", "--force", IMAGE]),
        Duration::from_secs(300),
    )?;
    step(
        &format!("image: podman import {IMAGE}"),
        Command::new("podman")
            .arg("import")
            .args(["--change", "USER 10001:10001"])
            .args(["--change", r#"ENTRYPOINT ["/usr/bin/hyperlightd"]"#])
            .args(["--change", "WORKDIR /"])
            .args(["--change", "ENV PATH=/usr/bin:/bin"])
            .arg(&tarball)
            .arg(IMAGE),
        Duration::from_secs(600),
    )?;
    let archive = out.join("hyperlightd.oci.tar");
    if archive.exists() {
        std::fs::remove_file(&archive)?;
    }
    step(
        "image: podman save (an OCI archive)",
        Command::new("podman")
            .args(["save", "--format", "oci-archive", "-o"])
            .arg(&archive)
            .arg(IMAGE),
        Duration::from_secs(600),
    )?;
    std::fs::remove_file(&tarball)?;
    Ok(archive)
}

/// The shared libraries `program` loads, and its loader, as `ldd` names them.
fn libraries_of(program: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(program)
        .output()
        .context("running ldd")?;
    if !output.status.success() {
        bail!("ldd {} failed", program.display());
    }
    let text = String::from_utf8(output.stdout)?;
    let libraries: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-... (0x...)"
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    if !libraries
        .iter()
        .any(|l| l.to_string_lossy().contains("libc.so"))
    {
        bail!("ldd {} names no libc:\n{text}", program.display());
    }
    Ok(libraries)
}

/// Copies a file's contents (following links) to `to`, with its mode.
fn copy_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}
