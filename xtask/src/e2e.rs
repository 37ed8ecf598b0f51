//! The end-to-end suites on real KVM. On a host with KVM that runs guests, each test binary runs
//! there, one after the other. Otherwise each binary's tests run in the nested-KVM VM, a few per
//! boot (a frozen VM then costs only its group's limit and retries), and the boots run on as
//! many lanes as the machine holds VMs at once: each VM's emulator is one host thread (see
//! `vm::Tcg`), so on two cores two VMs take the time of one. Boots that run in the VM
//! whatever the host (the package under systemd) share the lanes. The boots allowed longest
//! start first, so that the last to end is a short one. Each VM's output is kept and printed
//! whole when its boot ends; the first failure stops new boots, lets the running ones end, and
//! is the error.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};

use crate::{GuestHost, guest_host, in_vm, list_tests, on_kvm, vm};

/// End-to-end tests per VM boot: fewer boots (about 10 s each), against more to run again
/// when one freezes.
const GROUP: usize = 8;

/// Memory of each VM, in MiB (the Python runtimes' tests need more than 4 GiB).
const VM_MIB: u64 = 10240;

/// The host memory a lane needs beside its VM's (the emulator's own, the host's page cache of
/// the files the VM reads).
const LANE_OVERHEAD_MIB: u64 = 1024;

/// One test binary and what its boots may take.
#[derive(Debug)]
pub struct Suite {
    binary: PathBuf,
    name: String,
    group_limit: Duration,
}

impl Suite {
    pub fn new(binary: PathBuf, name: String, group_limit: Duration) -> Suite {
        Suite {
            binary,
            name,
            group_limit,
        }
    }
}

/// One VM boot: some tests of one binary, or a command run in the VM booted with systemd.
#[derive(Debug)]
pub struct Boot {
    name: String,
    command: Vec<String>,
    limit: Duration,
    systemd: bool,
}

impl Boot {
    /// `command`, as root in the VM booted with systemd, within `limit`.
    pub fn under_systemd(name: String, command: Vec<String>, limit: Duration) -> Boot {
        Boot {
            name,
            command,
            limit,
            systemd: true,
        }
    }
}

/// Runs every suite, in the VM if need be, and the boots of `in_vm_anyway`, in the VM.
pub fn run(suites: &[Suite], in_vm_anyway: Vec<Boot>) -> Result<()> {
    let why = match guest_host() {
        GuestHost::Vm(why) => why,
        GuestHost::Here(_) => {
            let why = "these boots run in the VM whatever the host";
            on_lanes(&in_vm_anyway, 1, why)?;
            for suite in suites {
                let path = suite.binary.to_string_lossy().into_owned();
                on_kvm(
                    &suite.name,
                    &[path, "--test-threads=1".into()],
                    Duration::from_secs(1800),
                    &[],
                    vm::Tcg::Single,
                )?;
            }
            return Ok(());
        }
    };
    let mut boots = in_vm_anyway;
    let mut counts = Vec::new();
    for suite in suites {
        let tests = list_tests(&suite.binary)?;
        boots.extend(boots_of(suite, &tests));
        counts.push((suite.name.as_str(), tests.len()));
    }
    // Longest first (a stable sort: declaration order among equals).
    boots.sort_by_key(|boot| std::cmp::Reverse(boot.limit));
    let lanes = lanes();
    eprintln!(
        "==> end-to-end: {} VM boots on {lanes} lane(s), each VM {VM_MIB} MiB",
        boots.len()
    );
    on_lanes(&boots, lanes, &why)?;
    for (name, count) in counts {
        eprintln!("==> {name}: all {count} tests passed");
    }
    Ok(())
}

/// `suite`'s boots: its tests in groups of [`GROUP`].
fn boots_of(suite: &Suite, tests: &[String]) -> Vec<Boot> {
    let path = suite.binary.to_string_lossy().into_owned();
    let groups: Vec<&[String]> = tests.chunks(GROUP).collect();
    groups
        .iter()
        .enumerate()
        .map(|(i, group)| {
            let mut command = vec![path.clone(), "--test-threads=1".into(), "--exact".into()];
            command.extend(group.iter().cloned());
            Boot {
                name: format!("{} ({}/{})", suite.name, i + 1, groups.len()),
                command,
                limit: suite.group_limit,
                systemd: false,
            }
        })
        .collect()
}

/// How many VMs run at once: one per core, as many as the memory holds
/// (`HYPERLIGHTD_E2E_LANES` overrides).
fn lanes() -> usize {
    if let Some(lanes) = std::env::var("HYPERLIGHTD_E2E_LANES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return lanes;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let by_memory = total_memory_mib() / (VM_MIB + LANE_OVERHEAD_MIB);
    cores.min(usize::try_from(by_memory).unwrap_or(1)).max(1)
}

/// The host's memory in MiB (0 when it cannot be read: one lane).
fn total_memory_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// Runs `boots` in order on `lanes` threads, each taking the next boot when its last ends.
fn on_lanes(boots: &[Boot], lanes: usize, why: &str) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let failed = || failure.lock().map_or(true, |f| f.is_some());
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            scope.spawn(|| {
                while !failed() {
                    let Some(boot) = boots.get(next.fetch_add(1, Ordering::SeqCst)) else {
                        return;
                    };
                    if let Err(error) = run_boot(boot, lanes > 1, why)
                        && let Ok(mut first) = failure.lock()
                    {
                        first.get_or_insert(error);
                    }
                }
            });
        }
    });
    match failure.into_inner() {
        Ok(None) => Ok(()),
        Ok(Some(error)) => Err(error),
        Err(_) => Err(anyhow!("a lane of the end-to-end suite panicked")),
    }
}

/// One boot, its output kept and printed whole when other boots run beside it.
fn run_boot(boot: &Boot, beside_others: bool, why: &str) -> Result<()> {
    let booted = if boot.systemd {
        ", booted with systemd"
    } else {
        ""
    };
    eprintln!(
        "==> {} (in the nested-KVM VM{booted}, CPU {}: {why})",
        boot.name,
        vm::cpu_model()
    );
    let options = vm::VmOptions {
        memory_mib: u32::try_from(VM_MIB).unwrap_or(u32::MAX),
        cpus: 2,
        timeout: boot.limit,
        step: boot.name.clone(),
        writable: Vec::new(),
        tcg: vm::Tcg::Single,
        systemd: boot.systemd,
        stall: None,
        output: if beside_others {
            vm::Output::kept()
        } else {
            vm::Output::Live
        },
    };
    in_vm(&boot.name, &boot.command, &options)
}
