//! Staging the native Python guest's root filesystem: Debian's files copied as real files
//! (the guest's filesystem is unpacked from a cpio archive, where a link would have to resolve
//! inside the guest), every ELF file's libraries checked present, and the tree packed
//! reproducibly.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::step;

/// What of Debian's CPython and libraries a program never uses in the guest: documentation,
/// the test suite, the GUI toolkits, the build configuration, the bundled pip.
const LEFT_OUT: &[&str] = &[
    "usr/share/doc",
    "usr/share/man",
    "usr/share/lintian",
    "usr/share/locale",
    "usr/share/gdb",
    "usr/share/binfmts",
    "usr/share/applications",
    "usr/share/pixmaps",
    "usr/lib/python3.11/test",
    "usr/lib/python3.11/idlelib",
    "usr/lib/python3.11/tkinter",
    "usr/lib/python3.11/turtledemo",
    "usr/lib/python3.11/ensurepip",
    "usr/lib/python3.11/lib2to3",
    "usr/lib/python3.11/config-3.11-x86_64-linux-gnu",
    "usr/bin/pydoc3.11",
    "usr/bin/pygettext3.11",
];

/// Copies the tree under `from` into `to`, symbolic links replaced by what they point to
/// (resolved inside `from`, as the guest would), leaving out [`LEFT_OUT`]. A link whose target
/// is not in the tree is left out too.
pub fn copy_dereferenced(from: &Path, to: &Path) -> Result<()> {
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let source = from.join(&relative);
        for entry in
            std::fs::read_dir(&source).with_context(|| format!("reading {}", source.display()))?
        {
            let name = PathBuf::from(entry?.file_name());
            let relative = relative.join(&name);
            if LEFT_OUT.iter().any(|out| relative == Path::new(out)) {
                continue;
            }
            let Some(real) = resolve(from, &relative)? else {
                continue;
            };
            let target = to.join(&relative);
            if real.is_dir() {
                std::fs::create_dir_all(&target)?;
                pending.push(relative);
            } else {
                std::fs::copy(&real, &target).with_context(|| {
                    format!("copying {} to {}", real.display(), target.display())
                })?;
            }
        }
    }
    Ok(())
}

/// Where `relative` leads in the tree `root`, following links as the guest would, or None
/// when it leads out of the tree's files.
fn resolve(root: &Path, relative: &Path) -> Result<Option<PathBuf>> {
    let mut at = PathBuf::new();
    let mut parts: Vec<PathBuf> = relative
        .components()
        .rev()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut hops = 0;
    while let Some(part) = parts.pop() {
        match part.components().next() {
            Some(Component::ParentDir) => {
                at.pop();
                continue;
            }
            Some(Component::CurDir) | None => continue,
            _ => {}
        }
        let next = at.join(&part);
        let full = root.join(&next);
        let Ok(meta) = std::fs::symlink_metadata(&full) else {
            return Ok(None);
        };
        if meta.file_type().is_symlink() {
            hops += 1;
            if hops > 40 {
                bail!("{}: too many levels of links", full.display());
            }
            let link = std::fs::read_link(&full)?;
            if link.is_absolute() {
                at = PathBuf::new();
            }
            parts.extend(
                link.components()
                    .filter(|c| !matches!(c, Component::RootDir))
                    .rev()
                    .map(|c| PathBuf::from(c.as_os_str())),
            );
        } else {
            at = next;
        }
    }
    Ok(Some(root.join(at)))
}

/// Checks that every library each ELF file under `root` needs is in `root`, asking the
/// rootfs's own dynamic loader (in a chroot, through the rootfs's `ld.so.cache`).
pub fn check_libraries(root: &Path) -> Result<usize> {
    let mut elves = Vec::new();
    collect_elves(root, root, &mut elves)?;
    let mut missing = BTreeSet::new();
    for elf in &elves {
        let guest_path = Path::new("/").join(elf);
        let output = Command::new("chroot")
            .arg(root)
            .args(["/lib64/ld-linux-x86-64.so.2", "--list"])
            .arg(&guest_path)
            .stdin(Stdio::null())
            .output()
            .context("running the rootfs's loader in a chroot")?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if line.contains("not found") {
                missing.insert(format!(
                    "{} (needed by {})",
                    line.trim(),
                    guest_path.display()
                ));
            }
        }
    }
    if !missing.is_empty() {
        bail!(
            "libraries missing from the rootfs (add the Debian package that has each to \
             guest/python-native/debs.txt):\n  {}",
            missing.into_iter().collect::<Vec<_>>().join("\n  ")
        );
    }
    Ok(elves.len())
}

/// The ELF executables and shared objects under `dir`, relative to `root`.
fn collect_elves(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            collect_elves(root, &path, out)?;
        } else if meta.is_file() && meta.len() > 4 && is_elf(&path)? {
            // The loader runs the shared objects it is asked to list, executables too: only
            // those of the loader itself are left alone.
            let relative = path.strip_prefix(root)?.to_path_buf();
            if !relative.ends_with("ld-linux-x86-64.so.2") {
                out.push(relative);
            }
        }
    }
    Ok(())
}

fn is_elf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)?.read_exact(&mut magic)?;
    Ok(&magic == b"\x7fELF")
}

/// Makes the tree's metadata the same on every build (every time 0, modes from the files'
/// kinds), then packs it as a newc cpio archive in name order, owned by root.
pub fn pack(root: &Path, archive: &Path) -> Result<()> {
    let mut names = Vec::new();
    normalise(root, root, &mut names)?;
    names.sort();
    let list = names.join("\n") + "\n";
    let output = std::fs::File::create(archive)
        .with_context(|| format!("creating {}", archive.display()))?;
    let mut cpio = Command::new("cpio");
    cpio.current_dir(root)
        .args(["--create", "--format=newc", "--reproducible", "--quiet"])
        .args(["--owner=0:0"])
        .stdout(output)
        .stdin(Stdio::piped());
    let mut child = cpio.spawn().context("starting cpio")?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("cpio's stdin")?;
        stdin.write_all(list.as_bytes())?;
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("cpio failed ({status})");
    }
    Ok(())
}

/// Sets every file's time to 0 and its mode to 0755 (directories, executables) or 0644,
/// collecting the names to pack.
fn normalise(root: &Path, dir: &Path, names: &mut Vec<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            bail!("{}: a link in the staged rootfs", path.display());
        }
        let mode = if meta.is_dir() || meta.mode() & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        if meta.is_dir() {
            normalise(root, &path, names)?;
        }
        // After its entries: a directory's time is that of its last change.
        set_time(&path, std::time::UNIX_EPOCH)?;
        names.push(path.strip_prefix(root)?.to_string_lossy().into_owned());
    }
    Ok(())
}

fn set_time(path: &Path, time: std::time::SystemTime) -> Result<()> {
    let file = std::fs::File::options()
        .read(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.set_times(
        std::fs::FileTimes::new()
            .set_accessed(time)
            .set_modified(time),
    )
    .with_context(|| format!("setting the time of {}", path.display()))
}

/// Runs `args` in a chroot of `root` as the step `name`, with only `env` (and a PATH) in its
/// environment.
pub fn in_chroot_with(
    name: &str,
    root: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> Result<()> {
    let mut command = Command::new("chroot");
    command
        .arg(root)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    step(name, &mut command, limit)
}
