//! The system call filters (`hyperlightd::sys::seccomp`) stop a thread of each kind that makes
//! a call outside its list. Filters cannot be taken off a process, so each case runs in a child:
//! this binary (harness = false) runs itself again with the case's name in
//! `HYPERLIGHTD_SECCOMP_CASE`, and checks how the child ended and what it wrote.
// The cases make raw system calls, the very ones the filters are about; and, with no test
// harness to tell clippy this is a test, it fails as tests do.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, ExitCode, Output};

use hyperlightd::sys::seccomp::{self, Kind, Mode, OnViolation, SeccompOptions};
use nix::libc;

const CASE: &str = "HYPERLIGHTD_SECCOMP_CASE";
/// KVM_CREATE_VM: a request only guests' threads make.
const KVM_CREATE_VM: u64 = 0xae01;
/// Exit status of a process a violation ended (128 + SIGSYS).
const KILLED: i32 = 159;

/// What a case expects of its child.
struct Expect {
    case: &'static str,
    status: i32,
    /// Lines its stdout must have.
    says: &'static [&'static str],
    /// What its stderr must hold.
    reports: Option<&'static str>,
}

const CASES: &[Expect] = &[
    Expect {
        case: "guest-internet-socket",
        status: KILLED,
        says: &["guest: kvm ioctl reached the kernel"],
        reports: Some(
            "the guest thread guest-0 called socket (41), which its filter does not allow: the process stops",
        ),
    },
    Expect {
        case: "runtime-hypervisor-request",
        status: KILLED,
        says: &["runtime: unix socket allowed"],
        reports: Some("the runtime thread tokio-test called ioctl (16)"),
    },
    Expect {
        case: "egress-hypervisor-request",
        status: KILLED,
        says: &["egress: internet socket allowed"],
        reports: Some("the egress thread egress called ioctl (16)"),
    },
    Expect {
        case: "writer-socket",
        status: KILLED,
        says: &["writer: file written"],
        reports: Some("the writer thread checkpoints called socket (41)"),
    },
    Expect {
        case: "main-exec",
        status: KILLED,
        says: &[],
        reports: Some("the runtime thread main called execve (59)"),
    },
    Expect {
        case: "refuse",
        status: 0,
        says: &["writer: socket refused with EPERM", "went on"],
        reports: Some(
            "the writer thread checkpoints called socket (41), which its filter does not allow: refused with EPERM",
        ),
    },
    Expect {
        case: "log",
        status: 0,
        says: &["guest: internet socket allowed"],
        reports: None,
    },
];

fn main() -> ExitCode {
    if let Ok(case) = std::env::var(CASE) {
        child(&case);
        return ExitCode::SUCCESS;
    }
    let mut failed = 0;
    for expect in CASES {
        let output = Command::new(std::env::current_exe().unwrap())
            .env(CASE, expect.case)
            .output()
            .unwrap();
        match check(expect, &output) {
            Ok(()) => println!("test {} ... ok", expect.case),
            Err(why) => {
                failed += 1;
                println!("test {} ... FAILED: {why}", expect.case);
                println!("  stdout: {}", String::from_utf8_lossy(&output.stdout));
                println!("  stderr: {}", String::from_utf8_lossy(&output.stderr));
            }
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn check(expect: &Expect, output: &Output) -> Result<(), String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() != Some(expect.status) {
        return Err(format!(
            "ended {}, not with {}",
            output.status, expect.status
        ));
    }
    for line in expect.says {
        if !stdout.lines().any(|l| l == *line) {
            return Err(format!("did not say {line:?}"));
        }
    }
    match expect.reports {
        Some(report) if !stderr.contains(report) => Err(format!("did not report {report:?}")),
        None if stderr.contains("seccomp") => Err("reported a violation".to_owned()),
        _ => Ok(()),
    }
}

fn child(case: &str) {
    let mode = if case == "log" {
        Mode::Log
    } else {
        Mode::Enforce
    };
    let on_violation = if case == "refuse" {
        OnViolation::Refuse
    } else {
        OnViolation::Kill
    };
    seccomp::start(&SeccompOptions { mode, on_violation }).unwrap();
    match case {
        "guest-internet-socket" => on_thread(Kind::Guest, "guest-0", || {
            // Allowed: the kernel answers (ENOTTY on a file that is not KVM's).
            let fd = file();
            assert_eq!(unsafe { libc::ioctl(fd, KVM_CREATE_VM as _, 0) }, -1);
            println!("guest: kvm ioctl reached the kernel");
            internet_socket();
        }),
        "runtime-hypervisor-request" => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("tokio-test")
                .on_thread_start(|| seccomp::enter_or_abort(Kind::Runtime))
                .build()
                .unwrap();
            runtime
                .block_on(runtime.spawn(async {
                    unix_socket();
                    println!("runtime: unix socket allowed");
                    hypervisor_request();
                }))
                .unwrap();
        }
        "egress-hypervisor-request" => {
            let egress = seccomp::egress_runtime().expect("the egress runtime is started");
            egress
                .block_on(egress.spawn(async {
                    internet_socket();
                    resolver_calls();
                    println!("egress: internet socket allowed");
                    hypervisor_request();
                }))
                .unwrap();
        }
        "writer-socket" => on_thread(Kind::Writer, "checkpoints", || {
            let fd = file();
            assert_eq!(unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) }, 1);
            println!("writer: file written");
            unix_socket();
        }),
        "main-exec" => {
            seccomp::enter(Kind::Runtime).unwrap();
            let path = c"/bin/true";
            let argv = [path.as_ptr(), std::ptr::null()];
            unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
        }
        "refuse" => {
            on_thread(Kind::Writer, "checkpoints", || {
                let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
                let error = std::io::Error::last_os_error().raw_os_error();
                if fd == -1 && error == Some(libc::EPERM) {
                    println!("writer: socket refused with EPERM");
                }
            });
            println!("went on");
        }
        "log" => on_thread(Kind::Guest, "guest-0", || {
            internet_socket();
            println!("guest: internet socket allowed");
        }),
        other => panic!("no case {other}"),
    }
}

fn on_thread(kind: Kind, name: &str, work: impl FnOnce() + Send + 'static) {
    seccomp::spawn(kind, name.to_owned(), work)
        .unwrap()
        .join()
        .unwrap();
}

/// A file of this process's own, open for writing.
fn file() -> libc::c_int {
    let file = tempfile::tempfile().unwrap();
    std::os::fd::IntoRawFd::into_raw_fd(file)
}

fn internet_socket() {
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
}

/// What the C library's resolver does besides: a UDP socket's pending bytes (FIONREAD), and the
/// host's addresses over route netlink (to sort several answers).
fn resolver_calls() {
    let udp = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    let mut pending: libc::c_int = 0;
    assert_eq!(unsafe { libc::ioctl(udp, libc::FIONREAD, &mut pending) }, 0);
    let netlink = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE) };
    assert!(netlink >= 0, "{}", std::io::Error::last_os_error());
}

fn unix_socket() {
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
}

fn hypervisor_request() {
    unsafe { libc::ioctl(file(), KVM_CREATE_VM as _, 0) };
}
