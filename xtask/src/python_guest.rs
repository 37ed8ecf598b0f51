//! `cargo xtask python-guest`: the Python guest, built from PyPI's componentize-py and
//! crates.io's hyperlight-wasm-aot.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::tools::{Tool, install_tool, virtualenv};
use crate::{built_from, step, vm, workspace_root};

/// componentize-py, pinned: the Python guest's CPython and standard library come from it.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// hyperlight-wasm-aot, pinned to the hyperlight-wasm the daemon links (the compiled component
/// must match its runtime's Wasmtime). At `opt-level` 1: it compiles the two guests in seconds
/// that way too, and builds in minutes less than at 3.
const HYPERLIGHT_WASM_AOT: Tool = Tool {
    krate: "hyperlight-wasm-aot",
    version: "0.15.0",
    binary: "hyperlight-wasm-aot",
    opt_level: "1",
};

/// Builds the Python guest in target/python-guest and returns the path of its compiled
/// component, with the packages of guest/python/requirements.txt and of `extra_requirements`
/// (pip's requirements format).
pub fn python_guest(extra_requirements: Option<&Path>) -> Result<PathBuf> {
    python_guest_in("python-guest", extra_requirements)
}

/// The packages the end-to-end tests build a second guest with (in target/python-guest-packages),
/// to try `--requirements` with widely used pure-Python packages.
const TEST_REQUIREMENTS: &str = "tests/python-packages.txt";

/// Builds the guest the package tests use (target/python-guest-packages/python.aot).
pub fn python_guest_for_package_tests() -> Result<PathBuf> {
    let requirements = workspace_root()?.join(TEST_REQUIREMENTS);
    python_guest_in("python-guest-packages", Some(&requirements))
}

/// Builds a guest in target/`name`. The build's tools stay in target/python-guest.
fn python_guest_in(name: &str, extra_requirements: Option<&Path>) -> Result<PathBuf> {
    let root = workspace_root()?;
    let out = vm::target_dir()?.join(name);
    std::fs::create_dir_all(&out)?;
    let compiled = out.join("python.aot");
    let guest_dir = root.join("guest/python");
    let stamp = out.join(INPUTS_STAMP);
    let inputs = inputs_digest(&guest_dir, extra_requirements)?;
    if built_from(&stamp, &inputs, &[&compiled, &out.join("python-lib.tar")]) {
        eprintln!("==> python guest in target/{name}: up to date");
        return Ok(compiled);
    }
    // Half a build is no build: the stamp is written once every step has succeeded.
    if stamp.exists() {
        std::fs::remove_file(&stamp)?;
    }

    let venv = vm::target_dir()?.join("python-guest/venv");
    let componentize = venv.join("bin/componentize-py");
    if !componentize.exists() {
        virtualenv("python guest", &venv, &[COMPONENTIZE_PY])?;
    }

    let aot = install_tool(
        &vm::target_dir()?.join("tools"),
        &HYPERLIGHT_WASM_AOT,
        Duration::from_secs(2400),
    )?;

    // componentize-py imports the runner to build the component, leaving bytecode beside it:
    // build from a copy under target/, so that the source tree stays as it is. The packages go
    // beside it, in the directory the guest sees as /0.
    let app = out.join("app");
    if app.exists() {
        std::fs::remove_dir_all(&app)?;
    }
    std::fs::create_dir_all(&app)?;
    for module in ["runner.py", "hyperlightd_program.py"] {
        std::fs::copy(guest_dir.join(module), app.join(module))?;
    }
    // Modules in place of C modules CPython's WASI build lacks, which packages import.
    for stub in std::fs::read_dir(guest_dir.join("stubs"))? {
        let stub = stub?;
        std::fs::copy(stub.path(), app.join(stub.file_name()))?;
    }
    let mut requirements = vec![guest_dir.join("requirements.txt")];
    if let Some(extra) = extra_requirements {
        if !extra.is_file() {
            bail!("{}: no such requirements file", extra.display());
        }
        requirements.push(std::path::absolute(extra)?);
    }
    install_packages(&venv.join("bin/pip"), &requirements, &app)?;
    let component = out.join("python.wasm");
    step(
        &format!("python guest: componentize-py (CPython + runner.py) into target/{name}"),
        &mut componentize_py(&componentize, &guest_dir, "runner", &[&app], &component),
        Duration::from_secs(600),
    )?;
    step(
        "python guest: hyperlight-wasm-aot compile",
        Command::new(&aot)
            .args(["compile", "--component"])
            .arg(&component)
            .arg(&compiled),
        Duration::from_secs(900),
    )?;
    library(&componentize, &guest_dir, &app, &out.join("python-lib.tar"))?;
    std::fs::write(&stamp, &inputs)?;
    Ok(compiled)
}

/// Where a built guest records the digest of what it was built from.
const INPUTS_STAMP: &str = "inputs.sha256";

/// The digest of everything a guest is built from that lives here: every file under
/// guest/python (the runner, its modules, stubs, WIT, requirements), the extra requirements,
/// and the pinned tools' versions. The packages PyPI resolves for unpinned dependencies of the
/// pinned ones are not in it: `rm -r target/python-guest*` builds afresh.
fn inputs_digest(guest_dir: &Path, extra_requirements: Option<&Path>) -> Result<String> {
    let mut files = Vec::new();
    collect_files(guest_dir, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for part in [
        COMPONENTIZE_PY,
        HYPERLIGHT_WASM_AOT.version,
        GUEST_PYTHON_VERSION,
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    for file in files.iter().map(PathBuf::as_path).chain(extra_requirements) {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        hasher.update(
            file.strip_prefix(guest_dir)
                .unwrap_or(file)
                .as_os_str()
                .as_encoded_bytes(),
        );
        hasher.update([0]);
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// The files under `dir`, bytecode caches left out.
fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "__pycache__") {
                collect_files(&path, files)?;
            }
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// componentize-py building a component of the guest's WIT world whose app is `module`, found
/// in `paths[0]` (where it runs), with `paths` as the interpreter's search path (the guest sees
/// them as /0, /1, ...), into `output`.
fn componentize_py(
    componentize: &Path,
    guest_dir: &Path,
    module: &str,
    paths: &[&Path],
    output: &Path,
) -> Command {
    let mut command = Command::new(componentize);
    command
        .current_dir(paths[0])
        .arg("-d")
        .arg(guest_dir.join("wit/hyperlightd.wit"))
        .args(["-w", "python", "componentize", module]);
    for path in paths {
        command.arg("-p").arg(path);
    }
    command.arg("-o").arg(output);
    command
}

/// The CPython componentize-py builds the guest with: packages are resolved for it.
const GUEST_PYTHON_VERSION: &str = "3.14";

/// Installs the packages `requirements` name, with what they depend on, into `app`: from PyPI,
/// as wheels of pure Python only. pip refuses a package that has no such wheel, naming it; a
/// file of native code found afterwards (which no pure wheel should hold) is refused too.
fn install_packages(pip: &Path, requirements: &[PathBuf], app: &Path) -> Result<()> {
    let mut command = Command::new(pip);
    command
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
        ])
        .args([
            "--only-binary=:all:",
            "--platform",
            "any",
            "--implementation",
            "py",
        ])
        .args([
            "--abi",
            "none",
            "--python-version",
            GUEST_PYTHON_VERSION,
            "--target",
        ])
        .arg(app);
    for file in requirements {
        command.arg("-r").arg(file);
    }
    step(
        "python guest: packages (pure Python wheels from PyPI)",
        &mut command,
        Duration::from_secs(900),
    )
    .context(
        "a package could not be installed: the guest takes only packages published as pure \
         Python wheels (py3-none-any); pip's message above names the one it could not find",
    )?;
    if let Some(native) = find_native_code(app)? {
        bail!(
            "{}: native code; the Python guest can only take pure-Python packages",
            native.display()
        );
    }
    Ok(())
}

/// The first file of native code under `dir`, if any.
fn find_native_code(dir: &Path) -> Result<Option<PathBuf>> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if let Some(found) = find_native_code(&path)? {
                return Ok(Some(found));
            }
        } else if path
            .extension()
            .is_some_and(|e| ["so", "pyd", "dylib", "dll"].contains(&e.to_str().unwrap_or("")))
        {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// Builds the guest's library, `lib` (see daemon/src/sandbox/python/library.rs): a throwaway
/// component whose app, `library_export.py`, copies the standard library and `app` out while
/// componentize-py pre-initialises it, compiling each module with the guest's own interpreter.
/// Then packs the copy into a tar file with fixed times and owners, in name order.
fn library(componentize: &Path, guest_dir: &Path, app: &Path, lib: &Path) -> Result<()> {
    let export = lib.with_file_name("export");
    if export.exists() {
        std::fs::remove_dir_all(&export)?;
    }
    std::fs::create_dir_all(&export)?;
    std::fs::copy(
        guest_dir.join("library_export.py"),
        export.join("library_export.py"),
    )?;
    step(
        "python guest: export the library (standard library and packages, compiled)",
        &mut componentize_py(
            componentize,
            guest_dir,
            "library_export",
            &[&export, app],
            &export.join("throwaway.wasm"),
        ),
        Duration::from_secs(900),
    )?;
    let failures = std::fs::read_to_string(export.join("image-failures.txt"))?;
    if !failures.trim().is_empty() {
        eprintln!(
            "==> python guest: these modules do not compile and will not import:\n{failures}"
        );
    }
    let broken = std::fs::read_to_string(export.join("import-failures.txt"))?;
    if !broken.trim().is_empty() {
        bail!(
            "these packages do not import in the guest (the guest's CPython is built for WASI, \
             without ctypes, sockets, processes or threads), and are refused:\n{broken}"
        );
    }
    let partial = lib.with_extension("tar.partial");
    let mut archive = tar::Builder::new(std::fs::File::create(&partial)?);
    append_tree(&mut archive, &export.join("image"), Path::new(""))?;
    archive.into_inner()?.sync_all()?;
    std::fs::rename(&partial, lib)?;
    std::fs::remove_dir_all(&export)?;
    Ok(())
}

/// Appends the files under `dir` to `archive` as `prefix/...`, in name order, with fixed
/// times, modes and owners: the same tree gives the same archive.
fn append_tree(archive: &mut tar::Builder<std::fs::File>, dir: &Path, prefix: &Path) -> Result<()> {
    let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = prefix.join(entry.file_name());
        let kind = entry.file_type()?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        if kind.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            archive.append_data(&mut header, &name, std::io::empty())?;
            append_tree(archive, &entry.path(), &name)?;
        } else if kind.is_file() {
            let file = std::fs::File::open(entry.path())?;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
            header.set_size(file.metadata()?.len());
            archive.append_data(&mut header, &name, file)?;
        } else {
            bail!(
                "{}: only files and directories may be in the library",
                entry.path().display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_code_anywhere_in_the_tree_is_found_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("fastjson/_speedups");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(dir.path().join("fastjson/__init__.py"), "").unwrap();
        assert_eq!(find_native_code(dir.path()).unwrap(), None);
        let native = package.join("_core.cpython-314-x86_64-linux-gnu.so");
        std::fs::write(&native, b"\x7fELF").unwrap();
        assert_eq!(find_native_code(dir.path()).unwrap(), Some(native));
    }
}
