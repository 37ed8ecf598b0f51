//! What each kind of thread may ask of the kernel: one list per [`Kind`], each entry with who
//! needs it. A system call absent from a thread's list is a violation (see the module's
//! documentation for what then happens). The lists were found by running the whole end-to-end
//! suite with `--seccomp log` in the nested-KVM VM and reading the kernel's log (see
//! docs/guide/developing.md#seccomp); a new kernel, C library or hypervisor may need more,
//! which `--seccomp log` finds.
//!
//! Arguments are checked where they decide what a call can reach: `ioctl` by its request (the
//! KVM requests hyperlight-host makes, MSHV's by its type, and the few file-descriptor requests
//! the standard library makes), `socket` by its address family, `prctl` by its option.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

use super::Kind;

/// A system call's checks: empty, any arguments; otherwise any one check passing.
pub type Rules = BTreeMap<i64, Vec<Check>>;

/// One argument compared: the call is allowed when `arg` (a 32-bit value) passes `op` with
/// `value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub arg: u8,
    pub op: SeccompCmpOp,
    pub value: u64,
}

impl Check {
    /// As seccompiler takes it.
    pub fn rule(&self) -> Result<SeccompRule, seccompiler::BackendError> {
        let condition = SeccompCondition::new(
            self.arg,
            SeccompCmpArgLen::Dword,
            self.op.clone(),
            self.value,
        )?;
        SeccompRule::new(vec![condition])
    }
}

/// The list of `kind`.
pub fn of(kind: Kind) -> Rules {
    let mut rules = Rules::new();
    everyone(&mut rules);
    match kind {
        Kind::Guest => guest(&mut rules),
        Kind::Runtime => runtime(&mut rules),
        Kind::Egress => egress(&mut rules),
        Kind::Writer => writer(&mut rules),
        Kind::Spawner => {
            for kind in [Kind::Guest, Kind::Runtime, Kind::Egress, Kind::Writer] {
                union(&mut rules, of(kind));
            }
            startup(&mut rules);
        }
    }
    rules
}

/// `into` also allows what `from` does (a call with arguments checked in one and not in the
/// other is allowed with any).
fn union(into: &mut Rules, from: Rules) {
    for (call, rules) in from {
        match into.get_mut(&call) {
            None => {
                into.insert(call, rules);
            }
            Some(mine) if mine.is_empty() => {}
            Some(_) if rules.is_empty() => {
                into.insert(call, Vec::new());
            }
            Some(mine) => mine.extend(rules),
        }
    }
}

fn allow(rules: &mut Rules, calls: &[libc::c_long]) {
    for call in calls {
        rules.insert(*call, Vec::new());
    }
}

/// `call` when its argument `arg` is one of `values`.
fn allow_when(rules: &mut Rules, call: libc::c_long, arg: u8, values: &[u64]) {
    let entry = rules.entry(call).or_default();
    for value in values {
        entry.push(rule(arg, SeccompCmpOp::Eq, *value));
    }
}

fn rule(arg: u8, op: SeccompCmpOp, value: u64) -> Check {
    Check { arg, op, value }
}

/// Every thread: memory, time, locks, its own signals and end, and writing its log lines.
fn everyone(rules: &mut Rules) {
    allow(
        rules,
        &[
            // The allocator, thread stacks, and files read through a mapping.
            libc::SYS_brk,
            libc::SYS_mmap,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_mprotect,
            libc::SYS_madvise,
            // Locks, condition variables, channels, parking (std, tokio, crossbeam).
            libc::SYS_futex,
            libc::SYS_sched_yield,
            libc::SYS_sched_getaffinity,
            // Time: the vDSO answers most; sleeps and timed waits are calls.
            libc::SYS_clock_gettime,
            libc::SYS_clock_getres,
            libc::SYS_gettimeofday,
            libc::SYS_nanosleep,
            libc::SYS_clock_nanosleep,
            // Hash maps' keys, rustls, session ids.
            libc::SYS_getrandom,
            // Log lines to stderr; reading and closing the descriptors a thread was handed.
            libc::SYS_write,
            libc::SYS_writev,
            libc::SYS_read,
            libc::SYS_close,
            libc::SYS_fcntl,
            libc::SYS_getpid,
            libc::SYS_gettid,
            // Signals: masks (sys::signals), the handlers' return, the guard page's stack.
            libc::SYS_rt_sigprocmask,
            libc::SYS_rt_sigreturn,
            libc::SYS_sigaltstack,
            libc::SYS_restart_syscall,
            // A thread's end, and the process's.
            libc::SYS_exit,
            libc::SYS_exit_group,
        ],
    );
    // The standard library: a descriptor made non-blocking or close-on-exec, and a terminal's
    // check (tracing-subscriber asks whether stderr is one).
    allow_when(
        rules,
        libc::SYS_ioctl,
        1,
        &[
            libc::FIONBIO,
            libc::FIOCLEX,
            libc::FIONCLEX,
            libc::TCGETS,
            libc::TIOCGWINSZ,
        ],
    );
    // A thread's name, read and set (std, tokio); the filters' own prerequisite.
    allow_when(
        rules,
        libc::SYS_prctl,
        0,
        &[
            libc::PR_SET_NAME as u64,
            libc::PR_GET_NAME as u64,
            libc::PR_SET_NO_NEW_PRIVS as u64,
        ],
    );
    // A thread narrowing its own filter (one started by a thread of another kind).
    allow(rules, &[libc::SYS_seccomp]);
}

/// Starting threads: tokio's blocking pool grows on demand from the runtime's threads.
fn threads(rules: &mut Rules) {
    allow(
        rules,
        &[
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_set_robust_list,
            libc::SYS_rseq,
        ],
    );
}

/// Files: reading, writing, listing and renaming them.
fn files(rules: &mut Rules) {
    allow(
        rules,
        &[
            libc::SYS_openat,
            libc::SYS_newfstatat,
            libc::SYS_fstat,
            libc::SYS_statx,
            libc::SYS_lseek,
            libc::SYS_pread64,
            libc::SYS_pwrite64,
            libc::SYS_readv,
            libc::SYS_getdents64,
            libc::SYS_readlink,
            libc::SYS_readlinkat,
            libc::SYS_fsync,
            libc::SYS_fdatasync,
            libc::SYS_ftruncate,
            libc::SYS_fallocate,
            libc::SYS_renameat,
            libc::SYS_renameat2,
            libc::SYS_rename,
            libc::SYS_unlink,
            libc::SYS_unlinkat,
            libc::SYS_rmdir,
            libc::SYS_mkdir,
            libc::SYS_mkdirat,
            libc::SYS_linkat,
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            libc::SYS_statfs,
            libc::SYS_fstatfs,
            libc::SYS_access,
            libc::SYS_faccessat,
            libc::SYS_faccessat2,
            libc::SYS_getcwd,
            libc::SYS_utimensat,
        ],
    );
}

/// The KVM requests hyperlight-host 0.17 and 0.18 make on x86-64 (kvm-ioctls, through the
/// `/dev/kvm`, VM and vCPU descriptors), numbered as `<linux/kvm.h>` numbers them.
const KVM_IOCTLS: &[u64] = &[
    0xae00,     // KVM_GET_API_VERSION: is KVM usable (detection, each sandbox)
    0xae01,     // KVM_CREATE_VM
    0xae03,     // KVM_CHECK_EXTENSION: user memory, MSR filters
    0xae04,     // KVM_GET_VCPU_MMAP_SIZE: the vCPU's run structure
    0xc008ae05, // KVM_GET_SUPPORTED_CPUID
    0xae41,     // KVM_CREATE_VCPU
    0x4020ae46, // KVM_SET_USER_MEMORY_REGION: guest memory, mapped and unmapped
    0x4188aec6, // KVM_X86_SET_MSR_FILTER: the guest's MSR accesses refused
    0xae80,     // KVM_RUN
    0x8090ae81, // KVM_GET_REGS
    0x4090ae82, // KVM_SET_REGS
    0x8138ae83, // KVM_GET_SREGS
    0x4138ae84, // KVM_SET_SREGS
    0xc018ae85, // KVM_TRANSLATE: guest addresses of a host call's arguments
    0xc008ae88, // KVM_GET_MSRS
    0x4008ae89, // KVM_SET_MSRS
    0x81a0ae8c, // KVM_GET_FPU
    0x41a0ae8d, // KVM_SET_FPU
    0x4008ae90, // KVM_SET_CPUID2
    0x4048ae9b, // KVM_SET_GUEST_DEBUG
    0x8080aea1, // KVM_GET_DEBUGREGS
    0x4080aea2, // KVM_SET_DEBUGREGS
    0x9000aea4, // KVM_GET_XSAVE
    0x5000aea5, // KVM_SET_XSAVE
    0x8188aea6, // KVM_GET_XCRS
    0x4188aea7, // KVM_SET_XCRS
];

/// MSHV's requests all have this type (`MSHV_IOCTL`, bits 8 to 15). They are allowed by type,
/// not one by one: no MSHV host was at hand to find the exact list (`--seccomp log` on one
/// would, with strace for the requests).
const MSHV_IOCTL_TYPE: u64 = 0xb8;

/// The threads that build sandboxes and run guests: the hypervisor's device and requests,
/// hyperlight-host's interrupt signal, and the files of saved templates and checkpoints they
/// load. No socket.
fn guest(rules: &mut Rules) {
    files(rules);
    let ioctl = rules.entry(libc::SYS_ioctl).or_default();
    ioctl.extend(
        KVM_IOCTLS
            .iter()
            .map(|request| rule(1, SeccompCmpOp::Eq, *request)),
    );
    ioctl.push(rule(
        1,
        SeccompCmpOp::MaskedEq(0xff00),
        MSHV_IOCTL_TYPE << 8,
    ));
    allow(
        rules,
        &[
            // hyperlight-host's handler of the signal that interrupts a vCPU, installed when a
            // sandbox is made.
            libc::SYS_rt_sigaction,
            // A restore reads which scratch pages are resident (patches/hyperlight-host).
            libc::SYS_mincore,
            // The native Python guest's host reads the CPU time a call took.
            libc::SYS_getrusage,
            // Interrupting a guest that overran (hyperlight-host signals the vCPU's thread).
            libc::SYS_tgkill,
            libc::SYS_eventfd2,
            libc::SYS_memfd_create,
        ],
    );
}

/// The async runtime's threads (the HTTP API, sessions, the audit log, the watchdog) and the
/// main thread once serving: Unix sockets only, files, and starting its blocking threads.
fn runtime(rules: &mut Rules) {
    files(rules);
    threads(rules);
    allow(
        rules,
        &[
            // tokio's reactor.
            libc::SYS_epoll_create1,
            libc::SYS_epoll_ctl,
            libc::SYS_epoll_wait,
            libc::SYS_epoll_pwait,
            libc::SYS_eventfd2,
            libc::SYS_poll,
            libc::SYS_ppoll,
            libc::SYS_pipe2,
            // The API's socket: connections, their peer's credentials, the service manager's
            // notifications.
            libc::SYS_accept4,
            libc::SYS_connect,
            libc::SYS_getsockopt,
            libc::SYS_setsockopt,
            libc::SYS_getsockname,
            libc::SYS_getpeername,
            libc::SYS_recvfrom,
            libc::SYS_recvmsg,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            libc::SYS_shutdown,
            // The watchdog interrupts a guest that overran (hyperlight-host signals its thread).
            libc::SYS_tgkill,
            // The signals that stop the daemon (tokio's handlers, installed before the filters).
            libc::SYS_rt_sigaction,
            // Who a caller is: the user database (sys::users).
            libc::SYS_getuid,
            libc::SYS_geteuid,
            libc::SYS_getgid,
            libc::SYS_getegid,
        ],
    );
    allow_when(rules, libc::SYS_socket, 0, &[libc::AF_UNIX as u64]);
    // The user database's modules (a caller's groups, --allow-uid's names): libnss_systemd
    // loads libcap, which reads the capability bounding set; it asks systemd's userdb over a
    // Unix socket.
    allow_when(rules, libc::SYS_prctl, 0, &[libc::PR_CAPBSET_READ as u64]);
}

/// The egress client's threads: names resolved and connections made to the destinations the
/// rules allow (and the C library's resolver, which asks nscd over a Unix socket), the
/// system's CA roots read. No hypervisor.
fn egress(rules: &mut Rules) {
    runtime(rules);
    // Connections to destinations; the C library's resolver asks the name servers over UDP
    // (bind, sendmmsg, and FIONREAD for the size of an answer), and sorts several addresses by
    // the host's own (RFC 3484), which it reads over a route netlink socket (read-only without
    // CAP_NET_ADMIN, which the daemon never has).
    allow_when(
        rules,
        libc::SYS_socket,
        0,
        &[
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_NETLINK as u64,
        ],
    );
    allow_when(rules, libc::SYS_ioctl, 1, &[libc::FIONREAD]);
    allow(
        rules,
        &[libc::SYS_bind, libc::SYS_sendmmsg, libc::SYS_uname],
    );
}

/// The main thread's startup, before it serves (it holds the spawner's filter until then): the
/// open-file limit raised (sys::files), transparent huge pages turned off (sys::memory), the
/// socket bound, given its mode and group, and listening (sys::socket), and the async
/// runtimes built (tokio's signal driver makes its pipe, a Unix socket pair, once per
/// process).
fn startup(rules: &mut Rules) {
    allow(
        rules,
        &[
            libc::SYS_prlimit64,
            libc::SYS_socketpair,
            libc::SYS_bind,
            libc::SYS_listen,
            libc::SYS_chmod,
            libc::SYS_fchmodat,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_chown,
        ],
    );
    allow_when(
        rules,
        libc::SYS_prctl,
        0,
        &[
            libc::PR_SET_THP_DISABLE as u64,
            libc::PR_GET_THP_DISABLE as u64,
        ],
    );
}

/// The threads that write to disk: checkpoints (session::durable) and saved templates.
fn writer(rules: &mut Rules) {
    files(rules);
    allow(rules, &[libc::SYS_mincore]);
}
