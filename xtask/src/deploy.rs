//! Checks of what an operator deploys, run by `test` on the host (no KVM needed):
//!
//! - the systemd unit (`systemd/hyperlightd.service`): `systemd-analyze verify` is clean (with
//!   its `ExecStart` pointed at the daemon just built, since nothing is installed here), and
//!   `systemd-analyze security --offline=true` scores it at most [`MAX_EXPOSURE`]; its
//!   sysusers.d file makes the user `hyperlightd`, its group, and puts it in `kvm`
//!   (`systemd-sysusers --root` on an empty root);
//! - the Kubernetes manifests (`k8s/`): each validates against the Kubernetes API schema with
//!   `kubernetes-validate --strict` (from PyPI, in a virtualenv under `target/`), and so does
//!   what `kubectl kustomize k8s` renders.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::{pip_tool, step, vm, workspace_root};

/// The highest exposure score `systemd-analyze security` may give the unit, in tenths (the form
/// systemd 252's `--threshold` takes): 2.0.
const MAX_EXPOSURE: &str = "20";

/// The validator, pinned: it bundles the schemas of Kubernetes 1.25 to 1.37.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// The Kubernetes versions the manifests must validate against: the oldest and newest the
/// validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.25", "1.37"];

/// Runs every check.
pub fn check_deploy() -> Result<()> {
    check_systemd_unit()?;
    check_sysusers()?;
    check_kubernetes_manifests()
}

fn check_sysusers() -> Result<()> {
    let conf = workspace_root()?.join("systemd/hyperlightd.sysusers");
    let root = tempfile::tempdir().context("a temporary directory")?;
    let etc = root.path().join("etc");
    std::fs::create_dir(&etc)?;
    for file in ["passwd", "group", "shadow", "gshadow"] {
        std::fs::write(etc.join(file), "")?;
    }
    step(
        "systemd sysusers.d: systemd-sysusers on an empty root",
        Command::new("systemd-sysusers")
            .arg(format!("--root={}", root.path().display()))
            .arg(&conf),
        Duration::from_secs(60),
    )?;
    let passwd = std::fs::read_to_string(etc.join("passwd"))?;
    let group = std::fs::read_to_string(etc.join("group"))?;
    let user = passwd
        .lines()
        .any(|l| l.starts_with("hyperlightd:") && l.ends_with(":/usr/sbin/nologin"));
    let in_kvm = group.lines().any(|l| {
        l.starts_with("kvm:")
            && l.rsplit(':')
                .next()
                .is_some_and(|m| m.split(',').any(|u| u == "hyperlightd"))
    });
    if !user || !group.lines().any(|l| l.starts_with("hyperlightd:")) || !in_kvm {
        bail!(
            "{} made:\n{passwd}{group}\nnot the user hyperlightd, its group, and its membership of kvm",
            conf.display()
        );
    }
    Ok(())
}

fn check_systemd_unit() -> Result<()> {
    let root = workspace_root()?;
    let unit = root.join("systemd/hyperlightd.service");
    let text =
        std::fs::read_to_string(&unit).with_context(|| format!("reading {}", unit.display()))?;
    let daemon = vm::target_dir()?.join("debug/hyperlightd");
    if !text.contains("ExecStart=/usr/bin/hyperlightd ") {
        bail!(
            "{}: ExecStart does not run /usr/bin/hyperlightd",
            unit.display()
        );
    }
    let scratch = tempfile::tempdir().context("a temporary directory")?;
    let built = scratch.path().join("hyperlightd.service");
    let rewritten = text.replace(
        "ExecStart=/usr/bin/hyperlightd ",
        &format!("ExecStart={} ", daemon.display()),
    );
    std::fs::write(&built, rewritten).with_context(|| format!("writing {}", built.display()))?;
    clean_step(
        "systemd unit: systemd-analyze verify",
        Command::new("systemd-analyze").arg("verify").arg(&built),
    )?;
    step(
        "systemd unit: systemd-analyze security (exposure at most 2.0)",
        Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(format!("--threshold={MAX_EXPOSURE}"))
            .arg(&unit),
        Duration::from_secs(60),
    )
}

/// Runs `command` as a step that must also print nothing (systemd-analyze verify reports
/// problems as warnings and still exits 0 for some of them).
fn clean_step(name: &str, command: &mut Command) -> Result<()> {
    eprintln!("==> {name}");
    let output = command
        .output()
        .with_context(|| format!("step '{name}': starting {command:?}"))?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() || !said.trim().is_empty() {
        bail!("step '{name}' failed ({}):\n{said}", output.status);
    }
    eprintln!("==> {name}: clean");
    Ok(())
}

fn check_kubernetes_manifests() -> Result<()> {
    let validator = kubernetes_validate()?;
    let k8s = workspace_root()?.join("k8s");
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(&k8s)
        .with_context(|| format!("reading {}", k8s.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    manifests.retain(|path| {
        path.extension().is_some_and(|e| e == "yaml")
            && path.file_name().is_some_and(|n| n != "kustomization.yaml")
    });
    manifests.sort();
    let scratch = tempfile::tempdir().context("a temporary directory")?;
    let rendered = scratch.path().join("kustomized.yaml");
    render_kustomization(&k8s, &rendered)?;
    manifests.push(rendered);
    for version in KUBERNETES_VERSIONS {
        step(
            &format!("Kubernetes manifests: kubernetes-validate --strict, Kubernetes {version}"),
            Command::new(&validator)
                .args(["--strict", "--kubernetes-version", version])
                .args(&manifests),
            Duration::from_secs(120),
        )?;
    }
    Ok(())
}

/// Renders `k8s/` with kustomize (kubectl's) into `out`.
fn render_kustomization(k8s: &Path, out: &Path) -> Result<()> {
    eprintln!("==> Kubernetes manifests: kubectl kustomize k8s");
    let output = Command::new("kubectl")
        .arg("kustomize")
        .arg(k8s)
        .output()
        .context(
            "running kubectl kustomize (Debian's kubernetes-client; scripts/setup.sh installs it)",
        )?;
    if !output.status.success() {
        bail!(
            "kubectl kustomize {} failed: {}",
            k8s.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::write(out, &output.stdout).with_context(|| format!("writing {}", out.display()))
}

/// The validator, in its virtualenv under `target/` (installed on first use).
fn kubernetes_validate() -> Result<PathBuf> {
    pip_tool(
        "Kubernetes validator",
        &vm::target_dir()?.join("kubernetes-validate"),
        KUBERNETES_VALIDATE,
        "kubernetes-validate",
    )
}
