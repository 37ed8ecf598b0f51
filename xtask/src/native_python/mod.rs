//! `cargo xtask native-python`: the native Python guest's root filesystem,
//! `target/native-python/python.cpio`, which hyperlight-unikraft boots: Debian bookworm's CPython
//! 3.11 and the libraries it loads (`guest/python-native/debs.lock`), hyperlight-unikraft's
//! CPython driver compiled against it, and the scientific stack from PyPI's manylinux wheels
//! (`guest/python-native/requirements.lock`, and an operator's `--requirements`), every input
//! checked against its SHA-256, no Docker. The build refuses a rootfs in which a library is
//! missing or a package does not import (both checked with the rootfs's own loader and
//! interpreter, in a chroot). The same inputs give the same archive, byte for byte; a build
//! whose inputs have not changed is kept (the key in `python.cpio.key`).
//!
//! `--lock` writes the two lock files from `debs.txt` and `requirements.txt` instead.

mod lock;
mod stage;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use self::lock::{Deb, WHEEL_PLATFORM};
use crate::tools::virtualenv;
use crate::{built_from, cargo, step, vm, workspace_root};

/// The guest's inputs in the source tree.
const GUEST_DIR: &str = "guest/python-native";
/// pip, pinned: it resolves and installs the wheels.
const PIP: &str = "pip==25.3";
/// Changes whenever this builder changes what it makes from the same inputs.
const BUILDER: &str = "native-python 1";
/// Where the packages are installed in the rootfs (on Debian's interpreter's path).
const SITE: &str = "usr/lib/python3/dist-packages";
/// The runner's module, in `GUEST_DIR`.
const RUNNER: &str = "hyperlightd_native.py";
/// Where the runner's modules are in the rootfs.
const RUNNER_DIR: &str = "usr/lib/hyperlightd";
/// matplotlib's configuration and font cache, made at build time (see the guest's `MPLCONFIGDIR`).
pub const MPLCONFIGDIR: &str = "/usr/lib/hyperlightd/matplotlib";

/// Builds the rootfs (or finds it built from the same inputs) and returns the archive's path.
pub fn native_python(extra_requirements: Option<&Path>) -> Result<PathBuf> {
    let guest = workspace_root()?.join(GUEST_DIR);
    let out = vm::target_dir()?.join("native-python");
    std::fs::create_dir_all(&out)?;
    let pip = pip(&out)?;
    let driver = driver_sources()?;
    let extra_lock = match extra_requirements {
        Some(extra) => Some(lock_extra(&pip, &guest, extra, &out)?),
        None => None,
    };
    let key = inputs_key(&guest, &driver, extra_lock.as_deref())?;
    let archive = out.join("python.cpio");
    let stamp = out.join("python.cpio.key");
    if built_from(&stamp, &key, &[&archive]) {
        eprintln!("==> native python: {} is up to date", archive.display());
        return Ok(archive);
    }
    let debs = lock::read_debs(&guest.join("debs.lock"))?;
    let files = lock::fetch_debs(&debs, &out.join("debs"))?;
    let work = out.join("build");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    let root = work.join("root");
    unpack(&debs, &files, &work)?;
    stage::copy_dereferenced(&work.join("unpack"), &root)?;
    std::fs::copy(
        root.join("usr/bin/python3.11"),
        root.join("usr/bin/python3"),
    )?;
    compile_driver(&guest, &driver, &work, &root)?;
    system_files(&root)?;
    install_wheels(&pip, &guest, extra_lock.as_deref(), &root)?;
    for file in runner_files(&guest) {
        let name = file.file_name().context("a runner file has no name")?;
        std::fs::copy(&file, root.join(RUNNER_DIR).join(name))
            .with_context(|| format!("copying {}", file.display()))?;
    }
    // Quietly: it warns of every library that is a file rather than a link, which is all of
    // them here.
    step(
        "native python: ldconfig",
        Command::new("ldconfig")
            .args(["-X", "-r"])
            .arg(&root)
            .stderr(std::process::Stdio::null()),
        Duration::from_secs(120),
    )?;
    let elves = stage::check_libraries(&root)?;
    eprintln!("==> native python: the libraries of {elves} ELF files are all in the rootfs");
    check_and_compile(&guest, &root, &out)?;
    let partial = out.join("python.cpio.partial");
    stage::pack(&root, &partial)?;
    std::fs::rename(&partial, &archive)?;
    std::fs::write(&stamp, &key)?;
    // Each build starts from an empty tree: the staged one (half a GiB) has served its purpose.
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    let size = std::fs::metadata(&archive)?.len();
    eprintln!(
        "==> native python: {} ({} MiB, SHA-256 {})",
        archive.display(),
        size >> 20,
        lock::sha256_of(&archive)?
    );
    Ok(archive)
}

/// Rewrites `debs.lock` and `requirements.lock` from `debs.txt` and `requirements.txt`: what
/// Debian's mirror and PyPI have now.
pub fn relock() -> Result<()> {
    let guest = workspace_root()?.join(GUEST_DIR);
    let out = vm::target_dir()?.join("native-python");
    let pip = pip(&out)?;
    lock::lock_debs(
        &guest.join("debs.txt"),
        &guest.join("debs.lock"),
        &out.join("lock-debs"),
    )?;
    lock::lock_wheels(
        &pip,
        &guest.join("requirements.txt"),
        None,
        &guest.join("requirements.lock"),
        &out.join("lock-wheels"),
        "# Written by `cargo xtask native-python --lock` from requirements.txt: do not edit.\n",
    )
}

/// The operator's requirements resolved against the default set's pins, as a lock with hashes
/// (`target/native-python/extra.lock`, which the build installs and records).
fn lock_extra(pip: &Path, guest: &Path, extra: &Path, out: &Path) -> Result<PathBuf> {
    if !extra.is_file() {
        bail!("{}: no such requirements file", extra.display());
    }
    let constraints = out.join("constraints.txt");
    lock::constraints_of(&guest.join("requirements.lock"), &constraints)?;
    let locked = out.join("extra.lock");
    lock::lock_wheels(
        pip,
        &std::path::absolute(extra)?,
        Some(&constraints),
        &locked,
        &out.join("extra-wheels"),
        &format!(
            "# Resolved from {} by `cargo xtask native-python`.\n",
            extra.display()
        ),
    )?;
    Ok(locked)
}

/// pip, in a virtual environment under `out`.
fn pip(out: &Path) -> Result<PathBuf> {
    let venv = out.join("venv");
    let pip = venv.join("bin/pip");
    if !pip.exists() {
        virtualenv("native python", &venv, &[PIP])?;
    }
    Ok(pip)
}

/// hyperlight-unikraft's drivers directory (the CPython driver and the headers it includes), in
/// the crate the daemon links, so that the driver and the host side are the same release.
fn driver_sources() -> Result<PathBuf> {
    let output = cargo()
        .args(["metadata", "--format-version", "1", "--locked"])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|package| package["name"] == "hyperlight-unikraft")
        .and_then(|package| package["manifest_path"].as_str())
        .context("hyperlight-unikraft is not among the workspace's dependencies")?;
    let drivers = Path::new(manifest)
        .parent()
        .context("hyperlight-unikraft's manifest has no directory")?
        .join("drivers");
    if !drivers.join("python/hl_pydriver.c").is_file() {
        bail!("{}: no python/hl_pydriver.c", drivers.display());
    }
    Ok(drivers)
}

/// The build's key: a hash of everything that goes into the archive.
fn inputs_key(guest: &Path, driver: &Path, extra_lock: Option<&Path>) -> Result<String> {
    let mut hash = Sha256::new();
    hash.update(BUILDER);
    let mut files: Vec<PathBuf> = [
        "debs.lock",
        "requirements.lock",
        "python311-shim.h",
        "hl_memory.c",
        "check_imports.py",
    ]
    .iter()
    .map(|name| guest.join(name))
    .chain(runner_files(guest))
    .collect();
    files.push(driver.join("python/hl_pydriver.c"));
    for header in std::fs::read_dir(driver)? {
        let path = header?.path();
        if path.extension().is_some_and(|e| e == "h") {
            files.push(path);
        }
    }
    files.sort();
    files.extend(extra_lock.map(Path::to_path_buf));
    for file in files {
        hash.update(file.file_name().unwrap_or_default().as_encoded_bytes());
        hash.update(std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?);
    }
    Ok(lock::hex(&hash.finalize()))
}

/// hyperlightd's runner (the modules the daemon imports into the guest's interpreter), in the
/// source tree.
fn runner_files(guest: &Path) -> [PathBuf; 2] {
    [
        guest.join(RUNNER),
        guest.join("../python/hyperlightd_program.py"),
    ]
}

/// Unpacks the runtime packages into `work/unpack` and the build-only ones into `work/dev`.
fn unpack(debs: &[Deb], files: &[PathBuf], work: &Path) -> Result<()> {
    for (deb, file) in debs.iter().zip(files) {
        let into = work.join(if deb.build_only { "dev" } else { "unpack" });
        std::fs::create_dir_all(&into)?;
        let status = Command::new("dpkg-deb")
            .arg("-x")
            .arg(file)
            .arg(&into)
            .status()
            .context("running dpkg-deb")?;
        if !status.success() {
            bail!("dpkg-deb -x {} failed ({status})", file.display());
        }
    }
    eprintln!("==> native python: unpacked {} Debian packages", debs.len());
    Ok(())
}

/// Compiles hyperlight-unikraft's CPython driver against Debian's CPython 3.11 into the rootfs
/// (`/usr/local/bin/hl_pydriver`, where hyperlight-unikraft looks for a driver). The driver is
/// written for 3.12; `python311-shim.h` supplies the two 3.12 calls it makes. `hl_memory.c`
/// goes into it too, its allocation functions exported (`-rdynamic`) so that they take the
/// place of the C library's in every library the interpreter loads: an allocation that cannot
/// fit in the guest fails at once.
fn compile_driver(guest: &Path, drivers: &Path, work: &Path, root: &Path) -> Result<()> {
    let dev = work.join("dev");
    let bin = root.join("usr/local/bin");
    std::fs::create_dir_all(&bin)?;
    let memory = work.join("hl_memory.o");
    step(
        "native python: compile the driver's allocation check",
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-c"])
            .arg(format!("-ffile-prefix-map={}=.", guest.display()))
            .arg("-o")
            .arg(&memory)
            .arg(guest.join("hl_memory.c")),
        Duration::from_secs(300),
    )?;
    let mut gcc = Command::new("gcc");
    gcc.args(["-O2", "-Wall", "-Wno-unused-parameter", "-rdynamic"])
        .arg(&memory)
        .arg("-include")
        .arg(guest.join("python311-shim.h"))
        .arg(format!("-ffile-prefix-map={}=.", drivers.display()))
        .arg(format!("-ffile-prefix-map={}=.", guest.display()))
        .arg("-I")
        .arg(dev.join("usr/include/python3.11"))
        .arg("-I")
        .arg(dev.join("usr/include/x86_64-linux-gnu/python3.11"))
        .arg("-o")
        .arg(bin.join("hl_pydriver"))
        .arg(drivers.join("python/hl_pydriver.c"))
        .arg(work.join("unpack/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"))
        .args(["-lm", "-ldl", "-lpthread", "-lutil"]);
    step(
        "native python: compile hyperlight-unikraft's CPython driver",
        &mut gcc,
        Duration::from_secs(300),
    )
}

/// The files a Linux program expects beyond the packages': users, the loader's configuration,
/// a temporary directory, the working directory; and sys.executable put right.
fn system_files(root: &Path) -> Result<()> {
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc)?;
    std::fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )?;
    std::fs::write(etc.join("group"), "root:x:0:\nnogroup:x:65534:\n")?;
    std::fs::write(
        etc.join("ld.so.conf"),
        "/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
    )?;
    for dir in ["tmp", "work", "root", SITE, RUNNER_DIR, &MPLCONFIGDIR[1..]] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    // The driver starts the interpreter with argv[0] "hl_pydriver", which is no path: Python
    // then has no sys.executable, which subprocess and multiprocessing read.
    std::fs::write(
        root.join("usr/lib/python3.11/sitecustomize.py"),
        "import sys\nif not sys.executable:\n    sys.executable = \"/usr/bin/python3\"\n",
    )?;
    Ok(())
}

/// Installs the locked wheels (and the operator's) into the rootfs's site directory, each
/// checked against its hash; their scripts, which would name this host's interpreter, and
/// their test suites are left out.
fn install_wheels(pip: &Path, guest: &Path, extra_lock: Option<&Path>, root: &Path) -> Result<()> {
    let site = root.join(SITE);
    let mut install = Command::new(pip);
    install
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
        ])
        .args(["--no-compile", "--require-hashes", "--target"])
        .arg(&site)
        .args(WHEEL_PLATFORM)
        .arg("-r")
        .arg(guest.join("requirements.lock"));
    if let Some(extra) = extra_lock {
        install.arg("-r").arg(extra);
    }
    step(
        "native python: install the locked wheels",
        &mut install,
        Duration::from_secs(900),
    )?;
    if site.join("bin").exists() {
        std::fs::remove_dir_all(site.join("bin"))?;
    }
    remove_test_suites(&site)
}

/// Removes the `tests` directories of installed packages (tens of MiB no program imports).
fn remove_test_suites(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !std::fs::symlink_metadata(&path)?.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|name| name == "tests") {
            std::fs::remove_dir_all(&path)?;
        } else {
            remove_test_suites(&path)?;
        }
    }
    Ok(())
}

/// Imports every package in the rootfs with its own interpreter (refusing the build if one
/// fails), which also makes matplotlib's font cache, then compiles every module to bytecode
/// checked by hash, not time (the same bytes on every build). Writes the manifest the check
/// reports to `out/python.json`.
fn check_and_compile(guest: &Path, root: &Path, out: &Path) -> Result<()> {
    let check = root.join("tmp/check_imports.py");
    std::fs::copy(guest.join("check_imports.py"), &check)?;
    let checked = stage::in_chroot_with(
        "native python: import every package with the rootfs's interpreter",
        root,
        &[
            "/usr/bin/python3",
            "/tmp/check_imports.py",
            "/tmp/manifest.json",
        ],
        &[
            ("MPLCONFIGDIR", MPLCONFIGDIR),
            ("MPLBACKEND", "Agg"),
            ("OPENBLAS_NUM_THREADS", "1"),
            ("HOME", "/root"),
        ],
        Duration::from_secs(900),
    );
    std::fs::remove_file(&check)?;
    checked?;
    std::fs::rename(root.join("tmp/manifest.json"), out.join("python.json"))?;
    stage::in_chroot_with(
        "native python: compile the standard library and the packages to bytecode",
        root,
        &[
            "/usr/bin/python3",
            "-m",
            "compileall",
            "-q",
            "-f",
            "--invalidation-mode",
            "unchecked-hash",
            "/usr/lib/python3.11",
            "/usr/lib/python3/dist-packages",
            "/usr/lib/hyperlightd",
        ],
        &[],
        Duration::from_secs(1200),
    )
}
