//! Checks of what an operator deploys, run by `test` on the host (no KVM needed):
//!
//! - the systemd units (`systemd/hyperlightd.service` with E2B's `hyperlightd-e2b.socket`, and
//!   the egress helper's `hyperlightd-egress.service` with its socket): `systemd-analyze
//!   verify` is clean (with
//!   `ExecStart` pointed at the program just built, since nothing is installed here), and
//!   `systemd-analyze security --offline=true` scores each at most [`MAX_EXPOSURE`]; the
//!   sysusers.d file makes the user `hyperlightd`, its group, and puts it in `kvm`
//!   (`systemd-sysusers --root` on an empty root);
//! - the Kubernetes manifests (`k8s/`): each validates against the Kubernetes API schema with
//!   `kubernetes-validate --strict` (from PyPI, in a virtualenv under `target/`), and so does
//!   what `kubectl kustomize k8s` renders.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::tools::pip_tool;
use crate::{step, vm, workspace_root};

/// The highest exposure score `systemd-analyze security` may give a unit, in tenths (the form
/// systemd 252's `--threshold` takes): 1.0.
const MAX_EXPOSURE: &str = "10";

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
    check_unit(
        "hyperlightd.service",
        "hyperlightd",
        &["hyperlightd-e2b.socket"],
    )?;
    check_unit(
        "hyperlightd-egress.service",
        "hyperlightd-egress",
        &["hyperlightd-egress.socket"],
    )
}

/// `systemd-analyze verify` (with `companions`, the units it names) and `security` on
/// `systemd/NAME`, whose ExecStart runs `/usr/bin/PROGRAM`.
fn check_unit(name: &str, program: &str, companions: &[&str]) -> Result<()> {
    let root = workspace_root()?;
    let unit = root.join("systemd").join(name);
    let text =
        std::fs::read_to_string(&unit).with_context(|| format!("reading {}", unit.display()))?;
    let built_program = vm::target_dir()?.join("debug").join(program);
    let exec = format!("ExecStart=/usr/bin/{program}");
    let Some(line) = text.lines().find(|l| l.starts_with("ExecStart=")) else {
        bail!("{}: no ExecStart", unit.display());
    };
    if line != exec && !line.starts_with(&format!("{exec} ")) {
        bail!(
            "{}: ExecStart does not run /usr/bin/{program}",
            unit.display()
        );
    }
    let scratch = tempfile::tempdir().context("a temporary directory")?;
    let built = scratch.path().join(name);
    let rewritten = text.replace(&exec, &format!("ExecStart={}", built_program.display()));
    std::fs::write(&built, rewritten).with_context(|| format!("writing {}", built.display()))?;
    let mut verify = Command::new("systemd-analyze");
    verify.arg("verify").arg(&built);
    for companion in companions {
        let to = scratch.path().join(companion);
        std::fs::copy(root.join("systemd").join(companion), &to)?;
        verify.arg(&to);
    }
    clean_step(
        &format!("systemd unit {name}: systemd-analyze verify"),
        &mut verify,
    )?;
    step(
        &format!("systemd unit {name}: systemd-analyze security (exposure at most 1.0)"),
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
