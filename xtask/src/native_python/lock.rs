//! The native Python guest's pinned inputs: Debian packages (`debs.lock`: name, version,
//! SHA-256) and PyPI wheels (`requirements.lock`: pip's `name==version --hash=sha256:...`), how
//! they are made (`--lock`) and fetched, each checked against its hash.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::step;

/// The platforms a wheel may be built for: CPython 3.11 on x86-64 Linux with glibc 2.36
/// (bookworm's), binary only, or pure Python.
pub const WHEEL_PLATFORM: &[&str] = &[
    "--only-binary=:all:",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    "--abi",
    "none",
    "--abi",
    "abi3",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_27_x86_64",
    "--platform",
    "manylinux_2_24_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
    "--platform",
    "any",
];

/// A Debian package of the rootfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deb {
    pub name: String,
    pub version: String,
    /// `amd64`, or `all` for a package the same on every architecture.
    pub arch: String,
    pub sha256: String,
    /// Only to build the driver: not in the root filesystem.
    pub build_only: bool,
}

impl Deb {
    /// The file `apt-get download` writes (an epoch's colon is written `%3a`).
    pub fn file_name(&self) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            self.arch
        )
    }
}

/// The packages `debs.txt` names, as (name, build only).
pub fn wanted_debs(list: &Path) -> Result<Vec<(String, bool)>> {
    let text = read(list)?;
    Ok(lines(&text)
        .map(|line| match line.strip_prefix("build:") {
            Some(name) => (name.trim().to_owned(), true),
            None => (line.to_owned(), false),
        })
        .collect())
}

/// Reads `debs.lock`: `[build:]name version architecture sha256` per line.
pub fn read_debs(lock: &Path) -> Result<Vec<Deb>> {
    let text = read(lock)?;
    lines(&text)
        .map(|line| {
            let (build_only, line) = match line.strip_prefix("build:") {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, version, arch, sha256] = fields[..] else {
                bail!(
                    "{}: not `[build:]name version architecture sha256`: {line}",
                    lock.display()
                );
            };
            Ok(Deb {
                name: name.to_owned(),
                version: version.to_owned(),
                arch: arch.to_owned(),
                sha256: sha256.to_owned(),
                build_only,
            })
        })
        .collect()
}

/// Fetches every package of `debs` into `dir` (unless a file with its hash is there already)
/// and returns their paths, in `debs`' order.
pub fn fetch_debs(debs: &[Deb], dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let missing: Vec<&Deb> = debs
        .iter()
        .filter(|deb| sha256_of(&dir.join(deb.file_name())).ok().as_deref() != Some(&deb.sha256))
        .collect();
    if !missing.is_empty() {
        let names: Vec<String> = missing
            .iter()
            .map(|deb| format!("{}={}", deb.name, deb.version))
            .collect();
        apt_download(&names, dir).with_context(|| {
            format!(
                "the pinned Debian packages could not be downloaded; if the mirror no longer \
                 has these versions (a point release replaced them), run `cargo xtask \
                 native-python --lock` and commit guest/python-native/debs.lock: {}",
                names.join(" ")
            )
        })?;
    }
    debs.iter()
        .map(|deb| {
            let path = dir.join(deb.file_name());
            let found = sha256_of(&path)?;
            if found != deb.sha256 {
                bail!(
                    "{}: SHA-256 {found}, but debs.lock pins {} for {} {}",
                    path.display(),
                    deb.sha256,
                    deb.name,
                    deb.version
                );
            }
            Ok(path)
        })
        .collect()
}

/// `apt-get download NAMES` in `dir`, after `apt-get update` if the package lists lack one.
fn apt_download(names: &[String], dir: &Path) -> Result<()> {
    let download = || {
        let mut command = Command::new("apt-get");
        command
            .current_dir(dir)
            .args(["download", "-q"])
            .args(names);
        step(
            "native python: apt-get download",
            &mut command,
            Duration::from_secs(600),
        )
    };
    if download().is_ok() {
        return Ok(());
    }
    step(
        "native python: apt-get update",
        Command::new("apt-get").args(["update", "-q"]),
        Duration::from_secs(600),
    )?;
    download()
}

/// Writes `debs.lock` from what Debian's mirror has now of the packages `debs.txt` names.
pub fn lock_debs(list: &Path, lock: &Path, scratch: &Path) -> Result<()> {
    let wanted = wanted_debs(list)?;
    let names: Vec<String> = wanted.iter().map(|(name, _)| name.clone()).collect();
    std::fs::create_dir_all(scratch)?;
    apt_download(&names, scratch)?;
    let mut text = String::from(
        "# Written by `cargo xtask native-python --lock` from debs.txt: do not edit.\n",
    );
    for (name, build_only) in wanted {
        let prefix = format!("{name}_");
        let file = std::fs::read_dir(scratch)?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .find(|file| file.starts_with(&prefix) && file.ends_with(".deb"))
            .with_context(|| format!("apt-get download wrote no package for {name}"))?;
        let (version, arch) = file[prefix.len()..file.len() - ".deb".len()]
            .rsplit_once('_')
            .with_context(|| format!("{file}: not a Debian package's file name"))?;
        let version = version.replace("%3a", ":");
        let sha256 = sha256_of(&scratch.join(&file))?;
        let build = if build_only { "build: " } else { "" };
        text.push_str(&format!("{build}{name} {version} {arch} {sha256}\n"));
    }
    write(lock, &text)
}

/// Resolves `requirements` (pip's format; `constraints` pins what is already locked) into
/// wheels for the guest's platform, downloaded into `scratch`, and writes them, hashed, as a
/// lock in pip's `--require-hashes` format to `lock`.
pub fn lock_wheels(
    pip: &Path,
    requirements: &Path,
    constraints: Option<&Path>,
    lock: &Path,
    scratch: &Path,
    header: &str,
) -> Result<()> {
    if scratch.exists() {
        std::fs::remove_dir_all(scratch)?;
    }
    std::fs::create_dir_all(scratch)?;
    let mut command = Command::new(pip);
    command
        .args(["download", "--quiet", "--disable-pip-version-check", "-d"])
        .arg(scratch)
        .args(WHEEL_PLATFORM)
        .arg("-r")
        .arg(requirements);
    if let Some(constraints) = constraints {
        command.arg("-c").arg(constraints);
    }
    step(
        &format!("native python: resolve {}", requirements.display()),
        &mut command,
        Duration::from_secs(900),
    )?;
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(scratch)? {
        let path = entry?.path();
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let Some(stem) = file.strip_suffix(".whl") else {
            bail!("pip downloaded {file}, which is not a wheel: only wheels are taken");
        };
        let mut parts = stem.split('-');
        let (Some(name), Some(version)) = (parts.next(), parts.next()) else {
            bail!("{file}: not a wheel's file name");
        };
        let name = name.to_lowercase().replace('_', "-");
        entries.push(format!(
            "{name}=={version} --hash=sha256:{}",
            sha256_of(&path)?
        ));
    }
    entries.sort();
    write(lock, &format!("{header}{}\n", entries.join("\n")))
}

/// The lock's pins without their hashes, as pip constraints.
pub fn constraints_of(lock: &Path, out: &Path) -> Result<()> {
    let text = read(lock)?;
    let pins: Vec<&str> = lines(&text)
        .map(|line| line.split_whitespace().next().unwrap_or(line))
        .collect();
    write(out, &(pins.join("\n") + "\n"))
}

/// The SHA-256 of a file, in hex.
pub fn sha256_of(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex(&Sha256::digest(&bytes)))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines of a list file without comments and blank lines.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|line| !line.is_empty())
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}
