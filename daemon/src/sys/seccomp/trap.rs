//! The SIGSYS handler that reports a violation under `--seccomp enforce`: a line on stderr
//! naming the thread's kind and name and the system call, then the process's end (exit 159) or
//! the call's failure with EPERM. It runs in a signal handler, so it formats into a buffer on
//! its stack and makes no call but `write` and `exit_group`, which every filter allows. The
//! crate's one other use of `unsafe` (besides `sys::mapped`): a signal handler reads and writes
//! what the kernel hands it.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use nix::libc;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

use super::{Kind, OnViolation};

/// The exit status of a process a violation ended: 128 + SIGSYS, as a shell reports a death by
/// that signal.
pub const KILLED: i32 = 128 + libc::SIGSYS;

/// `SYS_SECCOMP`: the `si_code` of a SIGSYS the filter raised.
const SYS_SECCOMP: libc::c_int = 1;

static REFUSE: AtomicBool = AtomicBool::new(false);

/// The kind of every thread of a process confined whole to one ([`super::confine`]): the
/// threads it starts inherit the filter but not the thread-local below.
static PROCESS_KIND: AtomicU8 = AtomicU8::new(u8::MAX);

/// Records that every thread of this process is of `kind`.
pub fn name_this_process(kind: Kind) {
    PROCESS_KIND.store(kind as u8, Ordering::SeqCst);
}

thread_local! {
    // Read in the handler: constant-initialised, with no destructor, so reading them there
    // neither allocates nor registers anything.
    static KIND: Cell<Option<Kind>> = const { Cell::new(None) };
    static NAME: Cell<[u8; 16]> = const { Cell::new([0; 16]) };
}

/// Records what the calling thread is, for the handler's line.
pub fn name_this_thread(kind: Kind) {
    KIND.with(|k| k.set(Some(kind)));
    let mut name = [0; 16];
    if let Some(given) = std::thread::current().name() {
        let given = given.as_bytes();
        let n = given.len().min(name.len());
        name[..n].copy_from_slice(&given[..n]);
    }
    NAME.with(|n| n.set(name));
}

/// Installs the handler, for the whole process.
pub fn install(on_violation: OnViolation) -> nix::Result<()> {
    REFUSE.store(on_violation == OnViolation::Refuse, Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::SigAction(on_sigsys),
        SaFlags::SA_SIGINFO,
        SigSet::empty(),
    );
    // SAFETY: the handler is async-signal-safe (see the module's documentation).
    unsafe { sigaction(Signal::SIGSYS, &action) }.map(drop)
}

/// What the kernel puts in a SIGSYS's `siginfo_t` (`_sigsys` of its union), which the libc
/// crate does not name.
#[repr(C)]
struct SigsysInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    arch: libc::c_uint,
}

extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t, of which SigsysInfo is a prefix's layout.
    let info = unsafe { &*(info as *const SigsysInfo) };
    if info.code != SYS_SECCOMP {
        return;
    }
    let refuse = REFUSE.load(Ordering::Relaxed);
    let mut line = Line::default();
    line.push(b"hyperlightd: seccomp: the ");
    let process = Kind::ALL.get(usize::from(PROCESS_KIND.load(Ordering::Relaxed)));
    line.push(
        KIND.get()
            .or(process.copied())
            .map_or("unfiltered", Kind::name)
            .as_bytes(),
    );
    line.push(b" thread ");
    let name = NAME.get();
    let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
    line.push(&name[..end]);
    line.push(b" called ");
    line.push(
        syscalls::Sysno::new(info.syscall as usize)
            .map_or("an unknown system call", |s| s.name())
            .as_bytes(),
    );
    line.push(b" (");
    line.number(info.syscall as u64);
    line.push(b"), which its filter does not allow: ");
    line.push(if refuse {
        b"refused with EPERM\n".as_slice()
    } else {
        b"the process stops (--seccomp-violation kill)\n".as_slice()
    });
    // SAFETY: write(2) on stderr with a buffer of ours.
    unsafe { libc::write(2, line.bytes.as_ptr().cast(), line.len) };
    if !refuse {
        // SAFETY: ends the process; nothing of it runs after.
        unsafe { libc::_exit(KILLED) };
    }
    fail_with_eperm(context);
}

#[cfg(target_arch = "x86_64")]
fn fail_with_eperm(context: *mut libc::c_void) {
    // SAFETY: the kernel passes the interrupted thread's ucontext_t; the trapped call's result
    // is what RAX holds when the handler returns.
    let context = unsafe { &mut *(context as *mut libc::ucontext_t) };
    context.uc_mcontext.gregs[libc::REG_RAX as usize] = -(libc::EPERM as libc::greg_t);
}

#[cfg(target_arch = "aarch64")]
fn fail_with_eperm(context: *mut libc::c_void) {
    // SAFETY: as above; the result is in x0.
    let context = unsafe { &mut *(context as *mut libc::ucontext_t) };
    context.uc_mcontext.regs[0] = -(libc::EPERM as i64) as u64;
}

/// A line built without allocating.
struct Line {
    bytes: [u8; 256],
    len: usize,
}

impl Default for Line {
    fn default() -> Self {
        Line {
            bytes: [0; 256],
            len: 0,
        }
    }
}

impl Line {
    fn push(&mut self, text: &[u8]) {
        let n = text.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&text[..n]);
        self.len += n;
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }
}
