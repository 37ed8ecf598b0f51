//! Which hypervisor this host offers, whether the daemon may open it, and what to tell the
//! operator when it cannot run Hyperlight guests.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Kernel modules that can sit behind `/dev/kvm`, checked in this order.
const KVM_MODULES: &[&str] = &["kvm_intel", "kvm_amd", "kvm_pvm"];

/// The PVM module: a `/dev/kvm` that emulates ring-0 guest code and cannot run Hyperlight guests.
const KVM_PVM: &str = "kvm_pvm";

/// A hypervisor device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hypervisor {
    /// `kvm` or `mshv`.
    pub kind: &'static str,
    /// The device file.
    pub device: PathBuf,
    /// The kernel module behind `/dev/kvm`, when it can be told.
    pub module: Option<String>,
}

impl fmt::Display for Hypervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.module {
            Some(module) => write!(f, "{} ({module})", self.kind),
            None => f.write_str(self.kind),
        }
    }
}

/// Why the daemon cannot use the host's hypervisor.
#[derive(Debug, thiserror::Error)]
pub enum HypervisorError {
    /// Neither device exists.
    #[error(
        "no hypervisor: neither /dev/kvm nor /dev/mshv exists. hyperlightd runs code in Hyperlight \
         micro-VMs and needs KVM (load kvm_intel or kvm_amd; in a VM, enable nested virtualisation) \
         or Microsoft's MSHV"
    )]
    NotFound,
    /// The host offers a hypervisor this build has no backend for.
    #[error(
        "this host offers {kind} (/dev/{kind}), but this hyperlightd was built without it; \
         rebuild with `--features {feature}`"
    )]
    NotBuiltFor {
        /// `kvm` or `mshv`.
        kind: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// The device exists but cannot be opened.
    #[error(
        "cannot open {device}: {source}. Run hyperlightd as root, or as a user in the group that \
         owns the device (usually `kvm`)"
    )]
    NoAccess {
        /// The device.
        device: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The device is there, but a probe sandbox could not run on it.
    #[error("{hypervisor} cannot run Hyperlight guests: {reason}")]
    CannotRunGuests {
        /// What was found.
        hypervisor: Hypervisor,
        /// Why, and what to do.
        reason: String,
    },
}

/// Finds the hypervisor device under `dev` (normally `/dev`), the KVM module under `modules`
/// (normally `/sys/module`), and checks that it can be opened read-write.
pub fn detect_in(dev: &Path, modules: &Path) -> Result<Hypervisor, HypervisorError> {
    let mshv = dev.join("mshv");
    let kvm = dev.join("kvm");
    let hypervisor = if mshv.exists() {
        Hypervisor {
            kind: "mshv",
            device: mshv,
            module: None,
        }
    } else if kvm.exists() {
        Hypervisor {
            kind: "kvm",
            device: kvm,
            module: KVM_MODULES
                .iter()
                .find(|m| modules.join(m).exists())
                .map(|m| (*m).to_owned()),
        }
    } else {
        return Err(HypervisorError::NotFound);
    };
    let (built, feature) = match hypervisor.kind {
        "mshv" => (cfg!(feature = "mshv"), "mshv"),
        _ => (cfg!(feature = "kvm"), "kvm"),
    };
    if !built {
        return Err(HypervisorError::NotBuiltFor {
            kind: hypervisor.kind,
            feature,
        });
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&hypervisor.device)
        .map_err(|source| HypervisorError::NoAccess {
            device: hypervisor.device.clone(),
            source,
        })?;
    Ok(hypervisor)
}

/// [`detect_in`] on this host's `/dev` and `/sys/module`.
pub fn detect() -> Result<Hypervisor, HypervisorError> {
    detect_in(Path::new("/dev"), Path::new("/sys/module"))
}

/// Explains why a probe sandbox failed on `hypervisor`, in terms an operator can act on rather
/// than a raw VM-exit error.
pub fn probe_failed(hypervisor: Hypervisor, error: &dyn fmt::Display) -> HypervisorError {
    let reason = if hypervisor.module.as_deref() == Some(KVM_PVM) {
        format!(
            "this /dev/kvm is PVM (kvm_pvm), which runs guest kernel code through an instruction \
             emulator; Hyperlight guests run at ring 0 with SSE, which it cannot execute. Run \
             hyperlightd on a host with hardware KVM (kvm_intel or kvm_amd) or MSHV, or inside \
             the project's nested-KVM VM (`cargo xtask vm -- ...`). (probe sandbox: {error})"
        )
    } else {
        format!(
            "a probe sandbox failed to start ({error}). Check that hardware virtualisation is \
             enabled and that nothing else holds the device"
        )
    };
    HypervisorError::CannotRunGuests { hypervisor, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_is_not_found() {
        let dev = tempfile::tempdir().unwrap();
        let modules = tempfile::tempdir().unwrap();
        assert!(matches!(
            detect_in(dev.path(), modules.path()),
            Err(HypervisorError::NotFound)
        ));
    }

    #[test]
    fn kvm_device_reports_its_module() {
        let dev = tempfile::tempdir().unwrap();
        let modules = tempfile::tempdir().unwrap();
        std::fs::write(dev.path().join("kvm"), b"").unwrap();
        std::fs::create_dir(modules.path().join("kvm_amd")).unwrap();
        let hv = detect_in(dev.path(), modules.path()).unwrap();
        assert_eq!(hv.kind, "kvm");
        assert_eq!(hv.to_string(), "kvm (kvm_amd)");
    }

    #[test]
    fn mshv_is_preferred_when_present() {
        let dev = tempfile::tempdir().unwrap();
        std::fs::write(dev.path().join("mshv"), b"").unwrap();
        std::fs::write(dev.path().join("kvm"), b"").unwrap();
        let detected = detect_in(dev.path(), dev.path());
        if cfg!(feature = "mshv") {
            assert_eq!(detected.unwrap().kind, "mshv");
        } else {
            assert!(matches!(
                detected,
                Err(HypervisorError::NotBuiltFor {
                    kind: "mshv",
                    feature: "mshv"
                })
            ));
        }
    }

    #[test]
    fn probe_failure_on_pvm_names_the_cause_and_the_remedy() {
        let hv = Hypervisor {
            kind: "kvm",
            device: "/dev/kvm".into(),
            module: Some(KVM_PVM.to_owned()),
        };
        let message = probe_failed(hv, &"Unexpected VM exit").to_string();
        assert!(message.contains("kvm_pvm"), "{message}");
        assert!(message.contains("hardware KVM"), "{message}");
    }
}
