//! `cargo xtask kubernetes`: the parts of a real Kubernetes, for the cluster test (issue 59),
//! built from Debian's packages alone. No registry here ships Kubernetes' server binaries, but
//! Debian's source package of Kubernetes (bookworm's 1.20.5+really1.20.2: upstream 1.20.2, the
//! newest whose source Debian still ships whole) carries the upstream tree with its `vendor/`,
//! and builds offline with bullseye's Go 1.15 (bookworm's Go 1.19 crashes in the vendored
//! reflect2). Kubernetes 1.20 is old and out of upstream support: it stands for the real
//! scheduler, controller manager, API server and kubelet, not for a supported version.
//!
//! Steps: Debian's sources (a `deb-src` line for bookworm and bullseye's Go, written once to
//! `/etc/apt/sources.list.d/`), the packages (Go 1.15, and the node's runtime: etcd,
//! containerd, runc, the CNI plugins), the source package (`apt-get source`, its signatures
//! checked by apt), the four server binaries (`make WHAT=...` with `GOPROXY=off`, 4 to 9 min
//! on two cores), the pause image (the tree's `pause.c`, static, in an archive `ctr` loads) and
//! the test's stand-in for Hyperlight's device plugin (`tests/kube/device-plugin/main.go`,
//! built in the tree against its vendored device-plugin API). The result is cached in
//! `target/kubernetes/<version>-<key>/`, keyed by the source package's version, the Go
//! version, [`RECIPE`] and the plugin's source; a second run finds it and builds nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::{dist, image, in_vm, python_guest, step, vm, workspace_root};

/// Changed whenever the build below changes, so that a cached build made another way is not
/// taken for this one.
const RECIPE: &str =
    "1: make WHAT=kube-apiserver,kube-controller-manager,kube-scheduler,kubelet; pause -Os -static";

/// The source package, and the upstream version it builds (what the binaries report).
const SOURCE: &str = "kubernetes";
const UPSTREAM: &str = "v1.20.2";

/// Go 1.15, from bullseye.
const GO: &str = "/usr/lib/go-1.15/bin";

/// What the build and the cluster test need from Debian.
const PACKAGES: &[&str] = &[
    "golang-1.15-go",
    "golang-1.15-src",
    "dpkg-dev",
    "rsync",
    "make",
    "gcc",
    "libc6-dev",
    "etcd-server",
    "containerd",
    "runc",
    "containernetworking-plugins",
];

/// The sources file this writes.
const SOURCES: &str = "/etc/apt/sources.list.d/hyperlightd-kubernetes.sources";
const SOURCES_TEXT: &str = "\
# Written by `cargo xtask kubernetes`: Debian's source package of Kubernetes (bookworm) and the
# Go it builds with (bullseye's golang-1.15), for the cluster test.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: bullseye
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
";

/// The device plugin's source, in the repository, and its binary.
const PLUGIN_SOURCE: &str = "tests/kube/device-plugin/main.go";
pub const PLUGIN: &str = "hyperlightd-device-plugin";

/// The server binaries the build makes.
pub const BINARIES: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
];

/// Builds (or finds) the cluster's parts; returns their directory, which holds `bin/` (the
/// four server binaries) and `pause.tar` (the pause image, as `ctr images import` takes it).
pub fn kubernetes() -> Result<PathBuf> {
    debian_sources()?;
    install_packages()?;
    let version = source_version()?;
    let go = go_version()?;
    let plugin = workspace_root()?.join(PLUGIN_SOURCE);
    let plugin_text = std::fs::read_to_string(&plugin)
        .with_context(|| format!("reading {}", plugin.display()))?;
    let digest = Sha256::digest(format!("{version}\n{go}\n{RECIPE}\n{plugin_text}"));
    let key: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let root = vm::target_dir()?.join("kubernetes");
    let out = root.join(format!("{version}-{key}"));
    let bin = out.join("bin");
    if BINARIES
        .iter()
        .chain([&PLUGIN])
        .all(|b| bin.join(b).exists())
        && out.join("pause.tar").exists()
    {
        eprintln!("==> kubernetes: {} is up to date", out.display());
        return Ok(out);
    }
    let tree = source_tree(&root, &version)?;
    build(&root, &tree)?;
    let partial = root.join(format!(".partial-{version}-{key}"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial)?;
    }
    std::fs::create_dir_all(partial.join("bin"))?;
    let built = tree.join("_output/local/bin/linux/amd64");
    for binary in BINARIES {
        std::fs::copy(built.join(binary), partial.join("bin").join(binary))
            .with_context(|| format!("copying {binary} from {}", built.display()))?;
    }
    pause_image(&tree, &partial)?;
    device_plugin(&root, &tree, &plugin, &partial.join("bin").join(PLUGIN))?;
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::rename(&partial, &out)?;
    remove_older_builds(&root, &version, &out)?;
    eprintln!("==> kubernetes: {}", out.display());
    Ok(out)
}

/// Removes the builds of `version` under `root` made with other inputs than `kept`'s (a
/// changed plugin or recipe): each is half a GiB, and nothing uses them again.
fn remove_older_builds(root: &Path, version: &str, kept: &Path) -> Result<()> {
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path != kept && name.starts_with(&format!("{version}-")) && path.is_dir() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// `cargo xtask test --kubernetes`: the cluster test alone, with the image made from the debug
/// package.
pub fn cluster_test() -> Result<()> {
    let parts = kubernetes()?;
    let deb = dist::dist(true, Some(python_guest(None)?))?;
    let archive = image::from_package(&deb)?;
    cluster(&parts, &archive)
}

/// The VM's memory for the cluster test: the daemon's pod may take its limit (4 GiB), and
/// the node's writes (containerd's store, the templates, the sessions) live in memory.
const CLUSTER_VM_MIB: u32 = 12288;

/// The cluster test: `tests/kube/cluster.sh` as root in the VM booted with systemd, whatever
/// the host (it starts a whole node's services), with the cluster's `parts` and the image
/// `archive`. It boots alone, with an emulator thread per vCPU (`Tcg::Multi`): a node's control
/// plane, kubelet and daemon on one emulator thread beside another VM starve (the node goes
/// NotReady, probes fail). Its own steps have limits that name them; the boot's covers a slow
/// emulator.
pub fn cluster(parts: &Path, archive: &Path) -> Result<()> {
    let repo = workspace_root()?;
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let name = "end-to-end: the DaemonSet in a real Kubernetes (1.20, one node)";
    let command = [
        "sh".to_owned(),
        path(&repo.join("tests/kube/cluster.sh")),
        path(parts),
        path(archive),
        path(&repo),
    ];
    let options = vm::VmOptions {
        memory_mib: CLUSTER_VM_MIB,
        cpus: 2,
        timeout: Duration::from_secs(2400),
        step: name.to_owned(),
        writable: Vec::new(),
        tcg: vm::Tcg::Multi,
        systemd: true,
        stall: None,
        output: vm::Output::Live,
    };
    in_vm(name, &command, &options)
}

fn debian_sources() -> Result<()> {
    if std::fs::read_to_string(SOURCES).is_ok_and(|text| text == SOURCES_TEXT) {
        return Ok(());
    }
    std::fs::write(SOURCES, SOURCES_TEXT).with_context(|| format!("writing {SOURCES}"))?;
    step(
        "kubernetes: apt-get update (bookworm's sources, bullseye's Go)",
        Command::new("apt-get").args(["update", "-q"]),
        Duration::from_secs(600),
    )
}

fn install_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|package| !installed(package))
        .collect();
    if !missing.is_empty() {
        step(
            &format!("kubernetes: apt-get install {}", missing.join(" ")),
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
            Duration::from_secs(1200),
        )?;
    }
    disable_units(&missing)
}

/// Debian enables etcd's and containerd's units when it installs them, and the VM boots this
/// machine's root: every VM booted with systemd would start both. Only the cluster test uses
/// them, and it starts them itself. Units of packages that were here before are left alone.
fn disable_units(installed_now: &[&str]) -> Result<()> {
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants");
    let enabled: Vec<&str> = [
        ("etcd-server", "etcd.service"),
        ("containerd", "containerd.service"),
    ]
    .into_iter()
    .filter(|(package, unit)| installed_now.contains(package) && wants.join(unit).exists())
    .map(|(_, unit)| unit)
    .collect();
    if enabled.is_empty() {
        return Ok(());
    }
    step(
        &format!("kubernetes: systemctl disable {}", enabled.join(" ")),
        Command::new("systemctl")
            .args(["--root=/", "disable"])
            .args(&enabled),
        Duration::from_secs(120),
    )
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

/// The source package's version apt would fetch.
fn source_version() -> Result<String> {
    let out = Command::new("apt-cache")
        .args(["showsrc", SOURCE])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("Version: "))
        .map(str::to_owned)
        .context("apt-cache showsrc kubernetes names no version (is the deb-src line there?)")
}

fn go_version() -> Result<String> {
    let out = Command::new(Path::new(GO).join("go"))
        .arg("version")
        .output()
        .context("running Go 1.15")?;
    if !out.status.success() {
        bail!("go version failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The unpacked source tree of `version`, fetched into `root/src` when it is not there.
fn source_tree(root: &Path, version: &str) -> Result<PathBuf> {
    let src = root.join("src");
    let upstream = version
        .split_once(':')
        .map_or(version, |(_, v)| v)
        .split('-')
        .next()
        .unwrap_or(version);
    let tree = src.join(format!("{SOURCE}-{upstream}"));
    if tree.join("Makefile").exists() {
        return Ok(tree);
    }
    std::fs::create_dir_all(&src)?;
    step(
        &format!("kubernetes: apt-get source {SOURCE}={version}"),
        Command::new("apt-get")
            .args(["source", "-q", &format!("{SOURCE}={version}")])
            .current_dir(&src),
        Duration::from_secs(1200),
    )?;
    if !tree.join("Makefile").exists() {
        bail!("apt-get source made no {}", tree.display());
    }
    Ok(tree)
}

/// `make WHAT=...` in a GOPATH whose `src/k8s.io/kubernetes` is the tree, offline.
fn build(root: &Path, tree: &Path) -> Result<()> {
    let what = BINARIES.map(|b| format!("cmd/{b}")).join(" ");
    step(
        "kubernetes: make the server binaries with Go 1.15 (4 to 9 min on two cores)",
        go_command(root, tree, "make")?
            .arg(format!("WHAT={what}"))
            .env("KUBE_GIT_VERSION", UPSTREAM)
            .env("KUBE_GIT_TREE_STATE", "clean"),
        Duration::from_secs(3600),
    )
}

/// `program` in a GOPATH whose `src/k8s.io/kubernetes` is the tree, with Go 1.15, offline,
/// from the tree's `vendor/`.
fn go_command(root: &Path, tree: &Path, program: &str) -> Result<Command> {
    let gopath = root.join("gopath");
    let link = gopath.join("src/k8s.io/kubernetes");
    std::fs::create_dir_all(gopath.join("src/k8s.io"))?;
    if std::fs::symlink_metadata(&link).is_ok() {
        std::fs::remove_file(&link)?;
    }
    std::os::unix::fs::symlink(tree, &link)?;
    let path = format!("{GO}:{}", std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new(program);
    command
        .current_dir(&link)
        .env("PATH", path)
        .env("GOPATH", &gopath)
        .env("GOCACHE", root.join("gocache"))
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=vendor")
        .env("GO111MODULE", "on");
    Ok(command)
}

/// The device plugin stand-in (`source`), built as a command of the tree so that it uses the
/// tree's vendored gRPC and device-plugin API; static, into `to`.
fn device_plugin(root: &Path, tree: &Path, source: &Path, to: &Path) -> Result<()> {
    let package = tree.join("cmd").join(PLUGIN);
    std::fs::create_dir_all(&package)?;
    std::fs::copy(source, package.join("main.go"))
        .with_context(|| format!("copying {}", source.display()))?;
    step(
        "kubernetes: the device plugin stand-in (go build)",
        go_command(root, tree, "go")?
            .args(["build", "-o"])
            .arg(to)
            .arg(format!("./cmd/{PLUGIN}"))
            .env("CGO_ENABLED", "0"),
        Duration::from_secs(900),
    )
}

/// The pause container (the tree's `pause.c`, static) as an image archive `ctr images import`
/// takes, named `localhost/pause:3.2` (what the kubelet is told to use).
fn pause_image(tree: &Path, out: &Path) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let rootfs = scratch.path().join("rootfs");
    std::fs::create_dir(&rootfs)?;
    step(
        "kubernetes: the pause program (gcc -Os -static)",
        Command::new("gcc")
            .args(["-Os", "-static", "-o"])
            .arg(rootfs.join("pause"))
            .arg(tree.join("build/pause/linux/pause.c")),
        Duration::from_secs(300),
    )?;
    let layer = scratch.path().join("rootfs.tar");
    step(
        "kubernetes: the pause image's layer",
        Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("pause"),
        Duration::from_secs(60),
    )?;
    step(
        "kubernetes: podman import localhost/pause:3.2",
        Command::new("podman")
            .args(["import", "--change", "ENTRYPOINT [\"/pause\"]"])
            .arg(&layer)
            .arg("localhost/pause:3.2"),
        Duration::from_secs(300),
    )?;
    step(
        "kubernetes: podman save the pause image",
        Command::new("podman")
            .args(["save", "--format", "docker-archive", "-o"])
            .arg(out.join("pause.tar"))
            .arg("localhost/pause:3.2"),
        Duration::from_secs(300),
    )
}
