//! `cargo xtask dist`: the Debian package (`target/dist/hyperlightd_VERSION_amd64.deb`) an
//! operator installs on a KVM host with `apt install ./hyperlightd_*.deb`:
//!
//! - `/usr/bin/hyperlightd`, `/usr/bin/hlctl`, `/usr/bin/hyperlightd-egress` (the egress helper);
//! - `/usr/lib/hyperlightd/python.cpio`, the native Python guest's root filesystem (Debian's
//!   CPython with the scientific stack, `cargo xtask native-python`), which the unit serves
//!   Python with;
//! - `/usr/lib/hyperlightd/python.aot` and `python-lib.tar`, the WebAssembly Python guest
//!   (`--python-runtime wasm`);
//! - `/lib/systemd/system/hyperlightd.service`, `hyperlightd-egress.service` and `.socket`
//!   (the egress helper, off until enabled), `hyperlightd-e2b.socket` (E2B's API on loopback,
//!   off until enabled), `/usr/lib/sysusers.d/hyperlightd.conf`,
//!   `/usr/lib/sysctl.d/60-hyperlightd.conf` (a cap on memory mappings that holds the
//!   sessions' checkpoints), and `/etc/default/hyperlightd` (a conffile: the operator's
//!   options);
//! - `/usr/share/doc/hyperlightd/`: the README and each program's `--help`.
//!
//! Installing creates the user and group (`systemd-sysusers`), raises the cap on memory mappings
//! to the sysctl.d file's when it is lower, and reloads systemd; it does not
//! start the service, whose pools the operator sizes first (`systemctl enable --now
//! hyperlightd`). Release binaries by default; `--debug` packages the debug build (quicker to
//! make, for tests).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::python_guest::python_guest;
use crate::{cargo, step, vm, workspace_root};

/// The package's control file; `{version}` and `{size}` are filled in.
const CONTROL: &str = "Package: hyperlightd
Version: {version}
Architecture: amd64
Maintainer: hyperlightd developers <hyperlightd@localhost>
Section: admin
Priority: optional
Depends: libc6 (>= 2.36)
Recommends: systemd
Installed-Size: {size}
Description: untrusted code in Hyperlight micro-VMs, served on a Unix socket
 hyperlightd keeps warm pools of Hyperlight micro-VMs with JavaScript and Python
 guests and runs programs in them over an HTTP API on a Unix socket, with time,
 memory and output limits, per-caller quotas and an audit log. hlctl is its CLI.
";

const POSTINST: &str = "#!/bin/sh
set -e
if [ \"$1\" = configure ]; then
    # Without systemd (a container image), the image makes the user itself.
    if command -v systemd-sysusers >/dev/null; then
        systemd-sysusers hyperlightd.conf
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
    fi
    # The cap on memory mappings the sysctl.d file sets at boot, now; only ever raised (a
    # container's /proc/sys is read-only: then the host's cap stands).
    wanted=262144
    current=$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo \"$wanted\")
    if [ \"$current\" -lt \"$wanted\" ]; then
        echo \"$wanted\" > /proc/sys/vm/max_map_count 2>/dev/null || true
    fi
fi
";

const POSTRM: &str = "#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
";

const PRERM: &str = "#!/bin/sh
set -e
if [ \"$1\" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop hyperlightd.service hyperlightd-e2b.socket hyperlightd-egress.socket hyperlightd-egress.service || true
fi
";

/// Builds the package and returns its path. `guest` is the compiled Python guest when it was
/// just built (by `test`); otherwise it is built here.
pub fn dist(debug: bool, guest: Option<PathBuf>) -> Result<PathBuf> {
    let mut build = cargo();
    build.args(["build", "--bins", "-p", "hyperlightd", "-p", "hlctl"]);
    if !debug {
        build.arg("--release");
    }
    let profile = if debug { "debug" } else { "release" };
    step(
        &format!("dist: build hyperlightd and hlctl ({profile})"),
        &mut build,
        Duration::from_secs(3600),
    )?;
    let guest = match guest {
        Some(guest) => guest,
        None => python_guest(None)?,
    };
    let rootfs = crate::native_python::native_python(None)?;
    let target = vm::target_dir()?;
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("hyperlightd_{version}_amd64");
    let dist = target.join("dist");
    let root = dist.join(&name);
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    let bin = target.join(profile);
    let repo = workspace_root()?;
    let files: [(PathBuf, &str, u32); 14] = [
        (bin.join("hyperlightd"), "usr/bin/hyperlightd", 0o755),
        (bin.join("hlctl"), "usr/bin/hlctl", 0o755),
        (
            bin.join("hyperlightd-egress"),
            "usr/bin/hyperlightd-egress",
            0o755,
        ),
        (guest.clone(), "usr/lib/hyperlightd/python.aot", 0o644),
        (
            guest.with_file_name("python-lib.tar"),
            "usr/lib/hyperlightd/python-lib.tar",
            0o644,
        ),
        (rootfs, "usr/lib/hyperlightd/python.cpio", 0o644),
        (
            repo.join("systemd/hyperlightd.service"),
            "lib/systemd/system/hyperlightd.service",
            0o644,
        ),
        (
            repo.join("systemd/hyperlightd-egress.service"),
            "lib/systemd/system/hyperlightd-egress.service",
            0o644,
        ),
        (
            repo.join("systemd/hyperlightd-egress.socket"),
            "lib/systemd/system/hyperlightd-egress.socket",
            0o644,
        ),
        (
            repo.join("systemd/hyperlightd-e2b.socket"),
            "lib/systemd/system/hyperlightd-e2b.socket",
            0o644,
        ),
        (
            repo.join("systemd/hyperlightd.sysusers"),
            "usr/lib/sysusers.d/hyperlightd.conf",
            0o644,
        ),
        (
            repo.join("systemd/hyperlightd.sysctl"),
            "usr/lib/sysctl.d/60-hyperlightd.conf",
            0o644,
        ),
        (
            repo.join("systemd/hyperlightd.default"),
            "etc/default/hyperlightd",
            0o644,
        ),
        (
            repo.join("README.md"),
            "usr/share/doc/hyperlightd/README.md",
            0o644,
        ),
    ];
    for (from, to, mode) in &files {
        install(from, &root.join(to), *mode)?;
    }
    for program in ["hyperlightd", "hlctl", "hyperlightd-egress"] {
        let help = help_of(&bin.join(program))?;
        let to = root.join(format!("usr/share/doc/hyperlightd/{program}.help.txt"));
        write(&to, &help, 0o644)?;
    }
    let size_kib = tree_size(&root)?.div_ceil(1024);
    let control = CONTROL
        .replace("{version}", version)
        .replace("{size}", &size_kib.to_string());
    let debian = root.join("DEBIAN");
    write(&debian.join("control"), &control, 0o644)?;
    write(
        &debian.join("conffiles"),
        "/etc/default/hyperlightd\n",
        0o644,
    )?;
    write(&debian.join("postinst"), POSTINST, 0o755)?;
    write(&debian.join("prerm"), PRERM, 0o755)?;
    write(&debian.join("postrm"), POSTRM, 0o755)?;
    let deb = dist.join(format!("{name}.deb"));
    // xz for a release (the smallest download); gzip for a debug build, made for tests.
    let compression: &[&str] = if debug { &["-Zgzip", "-z1"] } else { &["-Zxz"] };
    step(
        &format!("dist: dpkg-deb --build {}", deb.display()),
        Command::new("dpkg-deb")
            .arg("--root-owner-group")
            .args(compression)
            .arg("--build")
            .arg(&root)
            .arg(&deb),
        Duration::from_secs(1200),
    )?;
    Ok(deb)
}

fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    set_mode(to, mode)
}

pub(crate) fn write(to: &Path, text: &str, mode: u32) -> Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(to, text).with_context(|| format!("writing {}", to.display()))?;
    set_mode(to, mode)
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

/// `program --help`.
fn help_of(program: &Path) -> Result<String> {
    let output = Command::new(program)
        .arg("--help")
        .output()
        .with_context(|| format!("running {} --help", program.display()))?;
    if !output.status.success() {
        bail!("{} --help failed", program.display());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Bytes of the files under `dir`.
fn tree_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            tree_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
