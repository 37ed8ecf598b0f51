//! The nested-KVM VM harness: runs a command inside a QEMU (TCG) VM whose `/dev/kvm` is a real
//! KVM (AMD SVM emulated by QEMU's `-cpu max`, with ERMS and FSRM hidden: see [`CPU_MODEL`];
//! nested in the guest kernel), so that Hyperlight code paths can be exercised on hosts whose
//! own `/dev/kvm` cannot run Hyperlight guests.
//!
//! Built only from Debian packages: `qemu-system-x86`, `linux-image-amd64`, `busybox-static`,
//! `cpio`. The VM mounts the host's root filesystem read-only over 9p and chroots into it, so the
//! checkout and everything built on the host is visible at the same path; a writable share carries
//! the command script in and the command's output and exit status out.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The VM's /init.
const INIT: &str = include_str!("init.sh");

/// Modules the init loads, in order; all plain `.ko` files in Debian's kernel package.
const MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "9pnet",
    "9pnet_virtio",
    "netfs",
    "fscache",
    "9p",
    "irqbypass",
    "ccp",
    "kvm",
    "kvm-amd",
    "overlay",
];

/// Environment variables passed into the VM when set on the host.
const PASSED_ENV: &[&str] = &[
    "RUST_BACKTRACE",
    "RUST_LOG",
    "HYPERLIGHTD_LOG",
    "HYPERLIGHTD_E2E_TEST_TIMEOUT_S",
    "HYPERLIGHTD_SECCOMP",
    "CI",
];

/// The VM's CPU model, as QEMU's `-cpu` takes it ([`CPU_MODEL`] unless `HYPERLIGHTD_VM_CPU`
/// says otherwise, for example `max` to compare a run with the fast-string features).
pub fn cpu_model() -> String {
    std::env::var("HYPERLIGHTD_VM_CPU")
        .ok()
        .filter(|model| !model.is_empty())
        .unwrap_or_else(|| CPU_MODEL.into())
}

/// Everything TCG emulates (AMD SVM included, for nested KVM) but the fast-string features ERMS
/// and FSRM. With them, glibc and the kernel zero and copy large ranges with `rep stosb` and
/// `rep movsb`, which TCG runs a byte at a time (4.2 µs a page zeroed, against 0.32 µs with
/// 8-byte stores): a sandbox's restore, mostly zeroing, took two to four times as long as
/// without them, where on hardware `rep stosb` is the fast way (docs/BENCHMARKS.md).
const CPU_MODEL: &str = "max,-erms,-fsrm";

/// The VM itself broke, not the command inside it. Both kinds are seen now and then under
/// QEMU TCG with nested KVM, whatever the command does:
/// - it froze: it outlived its time limit, although the command's own time limits would have
///   fired;
/// - its kernel panicked (for example "corrupted stack end detected inside scheduler"): user
///   space cannot cause that.
#[derive(Debug)]
pub struct VmBroke {
    /// What happened, in a few words ("froze", "kernel panicked").
    pub what: &'static str,
    /// The full message, with the console's last lines.
    pub message: String,
}

impl std::fmt::Display for VmBroke {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for VmBroke {}

/// How the VM is sized and bounded.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// Memory in MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// Wall-clock limit for the whole VM, boot to power-off.
    pub timeout: Duration,
    /// Name of this step, for messages.
    pub step: String,
    /// Host directories the command may write to (everything else is read-only).
    pub writable: Vec<PathBuf>,
    /// How QEMU runs the virtual CPUs.
    pub tcg: Tcg,
    /// Boot systemd, on a writable overlay of the host's root, and run the command as a
    /// service of it; otherwise the init runs the command itself, chrooted.
    pub systemd: bool,
    /// Count the VM as stalled, and stop it, when the command prints nothing for this long or
    /// the VM's kernel reports a CPU stuck (a soft lockup, an RCU stall): for commands that
    /// print as they go, such as the benchmark, whose figures a stall would spoil anyway.
    pub stall: Option<Duration>,
    /// Where the command's output goes.
    pub output: Output,
}

/// Where the output of a VM's command goes: printed as it comes, or kept and printed in one
/// block by [`Output::print`] (two VMs at once do not interleave their lines).
#[derive(Debug, Clone, Default)]
pub enum Output {
    #[default]
    Live,
    Kept(Arc<Mutex<Vec<u8>>>),
}

/// One writer for the whole process's console, so that kept blocks print whole.
static CONSOLE: Mutex<()> = Mutex::new(());

impl Output {
    /// A new kept output.
    pub fn kept() -> Output {
        Output::Kept(Arc::default())
    }

    /// Prints what was kept so far (to stderr, in one block) and forgets it; nothing if live.
    pub fn print(&self) {
        if let Output::Kept(kept) = self {
            let block = std::mem::take(&mut *kept.lock().unwrap_or_else(|e| e.into_inner()));
            let _console = CONSOLE.lock().unwrap_or_else(|e| e.into_inner());
            let mut stderr = std::io::stderr();
            let _ = stderr.write_all(&block);
            let _ = stderr.flush();
        }
    }

    /// The writer for the command's stdout (or stderr).
    fn writer(&self, stdout: bool) -> Box<dyn Write + '_> {
        match (self, stdout) {
            (Output::Live, true) => Box::new(std::io::stdout()),
            (Output::Live, false) => Box::new(std::io::stderr()),
            (Output::Kept(kept), _) => Box::new(KeptWriter(kept)),
        }
    }
}

/// Appends to a kept output.
struct KeptWriter<'a>(&'a Mutex<Vec<u8>>);

impl Write for KeptWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the VM's kernel prints when a CPU has not been scheduled for seconds: under emulation,
/// the emulator stopped running the VM.
const STALL_MARKERS: &[&str] = &[
    "soft lockup",
    "stuck for",
    "self-detected stall",
    "rcu_sched detected stalls",
];

/// The first line of `text` that shows the VM's kernel reporting a stuck CPU.
fn stall_line(text: &str) -> Option<&str> {
    text.lines()
        .find(|line| STALL_MARKERS.iter().any(|marker| line.contains(marker)))
}

/// How QEMU's TCG runs the VM's virtual CPUs.
///
/// With one host thread per vCPU, Hyperlight guests now and then go wrong in ways no program
/// can cause: a guest whose vCPU loops between KVM's instruction emulator and an injected page
/// fault until its time limit stops it (KVM's statistics show about 40,000 such exits a
/// second, on a three-line program), a guest that triple-faults ("Unknown KVM VCPU exit:
/// Shutdown"), and the VM's own kernel panicking on a corrupted stack. Measured with rounds of
/// 50 concurrent trivial JavaScript requests on a pool of two (debug build): 4 such failures
/// in 8,000 requests with a thread per vCPU, none in 10,000 with one thread for all vCPUs. So
/// tests run with one thread (still two vCPUs, interleaved, so the daemon's threads still
/// race), and only the benchmark, whose throughput row needs two CPUs running at once, runs
/// with a thread each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tcg {
    /// One host thread runs every vCPU in turn (`-accel tcg,thread=single`).
    Single,
    /// A host thread per vCPU (`-accel tcg,thread=multi`): faster, and less reliable.
    Multi,
}

impl Tcg {
    fn accel(self) -> &'static str {
        match self {
            Tcg::Single => "tcg,thread=single",
            Tcg::Multi => "tcg,thread=multi",
        }
    }
}

/// The kernel image and its modules directory.
struct Kernel {
    image: PathBuf,
    modules: PathBuf,
    version: String,
}

/// Finds the newest `/boot/vmlinuz-*` with a matching `/lib/modules/<version>`.
fn find_kernel() -> Result<Kernel> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/boot").context("reading /boot")? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(version) = name.strip_prefix("vmlinuz-") {
            let modules = PathBuf::from("/lib/modules").join(version);
            if modules.join("kernel").is_dir() {
                found.push(Kernel {
                    image: PathBuf::from("/boot").join(&name),
                    modules,
                    version: version.to_owned(),
                });
            }
        }
    }
    found.sort_by(|a, b| a.version.cmp(&b.version));
    found.pop().context(
        "no kernel: /boot/vmlinuz-* with /lib/modules/<version> not found; \
         install Debian's linux-image-amd64 (./x setup does)",
    )
}

/// Finds `<name>.ko` under the kernel's module tree.
fn find_module(root: &Path, name: &str) -> Result<PathBuf> {
    fn walk(dir: &Path, file: &str) -> Option<PathBuf> {
        for entry in fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if let Some(found) = walk(&path, file) {
                    return Some(found);
                }
            } else if path.file_name().is_some_and(|n| n == file) {
                return Some(path);
            }
        }
        None
    }
    walk(&root.join("kernel"), &format!("{name}.ko")).with_context(|| {
        format!(
            "kernel module {name}.ko not found under {} (compressed modules are not supported)",
            root.display()
        )
    })
}

/// Builds (or reuses) the initramfs for `kernel` under `dir`.
fn initramfs(kernel: &Kernel, dir: &Path) -> Result<PathBuf> {
    // Keyed by kernel version and init script, so an edit to either rebuilds it.
    let key = format!("{}-{:016x}", kernel.version, fnv1a(INIT.as_bytes()));
    let out = dir.join(format!("initramfs-{key}.cpio"));
    if out.exists() {
        return Ok(out);
    }
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        bail!("/bin/busybox not found: install Debian's busybox-static (./x setup does)");
    }
    let staging = tempfile::tempdir_in(dir).context("creating the initramfs staging directory")?;
    let root = staging.path();
    fs::create_dir_all(root.join("bin"))?;
    fs::create_dir_all(root.join("modules"))?;
    fs::copy(busybox, root.join("bin/busybox")).context("copying busybox")?;
    for module in MODULES {
        let path = find_module(&kernel.modules, module)?;
        fs::copy(&path, root.join("modules").join(format!("{module}.ko")))
            .with_context(|| format!("copying {}", path.display()))?;
    }
    fs::write(root.join("init"), INIT)?;
    fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
    let partial = dir.join(format!("initramfs-{key}.cpio.partial"));
    let status = Command::new("sh")
        .arg("-c")
        .arg("find . -print0 | cpio --null --create --format=newc --quiet > \"$0\"")
        .arg(&partial)
        .current_dir(root)
        .status()
        .context("running cpio (install Debian's cpio; ./x setup does)")?;
    if !status.success() {
        bail!("cpio failed building the initramfs ({status})");
    }
    fs::rename(&partial, &out)?;
    Ok(out)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// Quotes `s` for a POSIX shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What was appended to `path` since `offset`, which moves past it.
fn appended(path: &Path, offset: &mut u64) -> Vec<u8> {
    let mut buf = Vec::new();
    let Ok(mut file) = fs::File::open(path) else {
        return buf;
    };
    if file.seek(SeekFrom::Start(*offset)).is_err() {
        return buf;
    }
    if let Ok(n) = file.read_to_end(&mut buf) {
        *offset += n as u64;
    }
    buf
}

/// Copies whatever was appended to `path` since `offset` to `out`; says whether there was any.
fn forward(path: &Path, offset: &mut u64, out: &mut dyn Write) -> bool {
    let buf = appended(path, offset);
    let _ = out.write_all(&buf);
    let _ = out.flush();
    !buf.is_empty()
}

/// How a VM run ended, seen from the host.
enum Ended {
    Exited,
    TimedOut,
    Stalled(String),
}

/// Runs `command` (with its arguments) in the VM, in the current directory, streaming its
/// stdout and stderr, and returns its exit status. Fails with the step and the VM's stage when
/// the VM does not finish within `options.timeout`.
pub fn run(command: &[String], options: &VmOptions) -> Result<i32> {
    if command.is_empty() {
        bail!("vm: no command given");
    }
    let work = target_dir()?.join("vm");
    fs::create_dir_all(&work)?;
    let kernel = find_kernel()?;
    // VMs that start at once share one initramfs: the first makes it.
    static MAKING: Mutex<()> = Mutex::new(());
    let initrd = {
        let _one = MAKING.lock().unwrap_or_else(|e| e.into_inner());
        initramfs(&kernel, &work)?
    };

    let run_dir = tempfile::Builder::new()
        .prefix("run-")
        .tempdir_in(&work)
        .context("creating the run directory")?;
    let share = run_dir.path().join("share");
    fs::create_dir(&share)?;
    let share = share.canonicalize()?;
    let cwd = std::env::current_dir()?;
    let mut script =
        String::from("#!/bin/sh\n# Written by `cargo xtask vm`; run by the VM's init.\n");
    script += "export PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n";
    script += "export HOME=/tmp TMPDIR=/tmp HYPERLIGHTD_IN_VM=1\n";
    for name in PASSED_ENV {
        if let Ok(value) = std::env::var(name) {
            script += &format!("export {name}={}\n", shell_quote(&value));
        }
    }
    script += &format!("cd {} || exit 126\n", shell_quote(&cwd.to_string_lossy()));
    let quoted: Vec<String> = command.iter().map(|a| shell_quote(a)).collect();
    if std::env::var("HYPERLIGHTD_SECCOMP").as_deref() == Ok("log") {
        // The daemons' system calls outside their filters, as the kernel logged them (all of
        // them: the kernel's log is not rate-limited), printed after the command.
        script += "echo 0 > /proc/sys/kernel/printk_ratelimit\n";
        script += &format!("{}\nstatus=$?\n", quoted.join(" "));
        script += "dmesg | grep 'type=1326' | sed 's/^/seccomp-log: /' >&2\nexit $status\n";
    } else {
        script += &format!("exec {}\n", quoted.join(" "));
    }
    fs::write(share.join("cmd.sh"), script)?;
    fs::write(share.join("stage"), "booting the kernel")?;

    // The VM mounts its own tmpfs on /tmp; host paths under /tmp that the command needs (a
    // checkout cloned there, the target directory) are bound back in.
    let keep: Vec<String> = [cwd.clone(), work.canonicalize()?]
        .iter()
        .filter(|p| p.starts_with("/tmp/"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();

    let mut writable = Vec::new();
    for dir in &options.writable {
        fs::create_dir_all(dir)?;
        writable.push(dir.canonicalize()?);
    }

    let console_path = run_dir.path().join("console.log");
    let console = fs::File::create(&console_path)?;
    let mut qemu = Command::new("qemu-system-x86_64")
        .args(["-accel", options.tcg.accel(), "-cpu", &cpu_model()])
        .args(["-smp", &options.cpus.to_string()])
        .args(["-m", &options.memory_mib.to_string()])
        .args(["-display", "none", "-serial", "stdio", "-monitor", "none"])
        .args(["-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(&kernel.image)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet log_buf_len=16M panic=-1 hlsystemd={} hlshare={} hlkeep={} hlrw={}",
            if options.systemd { "1" } else { "" },
            share.display(),
            keep.join(":"),
            writable
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
                .join(":")
        ))
        .arg("-virtfs")
        .arg("local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap")
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=share,security_model=none",
            share.display()
        ))
        .args(writable.iter().enumerate().flat_map(|(i, dir)| {
            [
                "-virtfs".to_owned(),
                format!(
                    "local,path={},mount_tag=rw{i},security_model=none",
                    dir.display()
                ),
            ]
        }))
        .stdin(Stdio::null())
        .stdout(console.try_clone()?)
        .stderr(console)
        .spawn()
        .context(
            "starting qemu-system-x86_64 (install Debian's qemu-system-x86; ./x setup does)",
        )?;

    let started = Instant::now();
    let (mut out_at, mut err_at, mut console_at) = (0u64, 0u64, 0u64);
    let mut last_output = Instant::now();
    let (mut stdout, mut stderr) = (options.output.writer(true), options.output.writer(false));
    let ended = loop {
        let printed = forward(&share.join("stdout"), &mut out_at, &mut stdout)
            | forward(&share.join("stderr"), &mut err_at, &mut stderr);
        if printed {
            last_output = Instant::now();
        }
        if qemu.try_wait()?.is_some() {
            break Ended::Exited;
        }
        let stalled = options.stall.and_then(|stall| {
            let console = appended(&console_path, &mut console_at);
            if let Some(line) = stall_line(&String::from_utf8_lossy(&console)) {
                return Some(format!("the VM's kernel reported: {}", line.trim()));
            }
            (last_output.elapsed() > stall)
                .then(|| format!("the command printed nothing for {} s", stall.as_secs()))
        });
        let ended = match stalled {
            Some(why) => Ended::Stalled(why),
            None if started.elapsed() > options.timeout => Ended::TimedOut,
            None => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let _ = qemu.kill();
        let _ = qemu.wait();
        break ended;
    };
    forward(&share.join("stdout"), &mut out_at, &mut stdout);
    forward(&share.join("stderr"), &mut err_at, &mut stderr);

    let stage = fs::read_to_string(share.join("stage")).unwrap_or_default();
    let stage = stage.trim();
    let console = fs::read_to_string(&console_path).unwrap_or_default();
    let console_tail = || {
        let lines: Vec<&str> = console.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    if let Ended::Stalled(why) = ended {
        return Err(VmBroke {
            what: "stalled",
            message: format!(
                "vm: step '{}' stalled while the VM was {stage}: {why}\n--- VM console (last lines) ---\n{}",
                options.step,
                console_tail()
            ),
        }
        .into());
    }
    if let Ended::TimedOut = ended {
        return Err(VmBroke {
            what: "froze",
            message: format!(
                "vm: step '{}' timed out after {} s while the VM was {stage}\n--- VM console (last lines) ---\n{}",
                options.step,
                options.timeout.as_secs(),
                console_tail()
            ),
        }
        .into());
    }
    if let Ok(error) = fs::read_to_string(share.join("init-error")) {
        bail!(
            "vm: step '{}': the VM could not start the command: {}\n--- VM console (last lines) ---\n{}",
            options.step,
            error.trim(),
            console_tail()
        );
    }
    match fs::read_to_string(share.join("status")) {
        Ok(status) => status
            .trim()
            .parse::<i32>()
            .with_context(|| format!("vm: bad status file {status:?}")),
        Err(_) if kernel_panicked(&console) => Err(VmBroke {
            what: "kernel panicked",
            message: format!(
                "vm: step '{}': the VM's kernel panicked while {stage}\n--- VM console (last lines) ---\n{}",
                options.step,
                console_tail()
            ),
        }
        .into()),
        Err(_) => bail!(
            "vm: step '{}': the VM stopped without reporting an exit status while {stage}\n--- VM console (last lines) ---\n{}",
            options.step,
            console_tail()
        ),
    }
}

/// Whether the VM's console shows its own kernel panicking. The kernel runs with `panic=-1`
/// and QEMU with `-no-reboot`, so a panic ends the VM at once, before the command can report.
fn kernel_panicked(console: &str) -> bool {
    console
        .lines()
        .any(|line| line.contains("Kernel panic - not syncing"))
}

/// The workspace's target directory.
pub fn target_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    Ok(crate::workspace_root()?.join("target"))
}

#[cfg(test)]
mod tests {
    use super::{kernel_panicked, stall_line};

    #[test]
    fn a_stuck_cpu_on_the_console_is_recognised() {
        // The line the benchmark's VM printed when it froze.
        let console = "[   40.1] Run /init as init process\n\
                       [ 1311.2] watchdog: BUG: soft lockup - CPU#0 stuck for 1277s! [tokio-rt-worker:412]\n";
        assert_eq!(
            stall_line(console),
            Some(
                "[ 1311.2] watchdog: BUG: soft lockup - CPU#0 stuck for 1277s! [tokio-rt-worker:412]"
            )
        );
        assert_eq!(stall_line("[    1.0] Run /init as init process\n"), None);
    }

    #[test]
    fn a_kernel_panic_on_the_console_is_recognised() {
        // The console's lines as CI printed them when the VM's kernel panicked mid-test.
        let console = "[   17.829080] Kernel panic - not syncing: corrupted stack end detected inside scheduler\n\
                       [   17.831255] CPU: 0 PID: 134 Comm: javascript-0 Not tainted 6.1.0-56-amd64 #1\n";
        assert!(kernel_panicked(console));
        // A test's own output mentioning panics is not the kernel's.
        let console = "[    1.0] Run /init as init process\n\
                       thread 'main' panicked at tests/tests/kvm.rs:10:5\n";
        assert!(!kernel_panicked(console));
    }
}
