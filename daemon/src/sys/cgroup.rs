//! A connected peer's cgroup, read so that it is the peer's and no later process's.
//!
//! The pid `SO_PEERCRED` gives is the connecting process's at `connect(2)`; by the time the
//! daemon reads `/proc/<pid>/cgroup` that process may have exited and its pid gone to another.
//! The kernel also hands out a pidfd of the peer (`SO_PEERPIDFD`, Linux 6.5): the file read
//! is the peer's if the pidfd's process is still alive after the read (a live process keeps its
//! pid). On older kernels the pid's uid is checked against the peer's instead, which leaves a
//! narrow race (a pid reused by a process of the same uid between the peer's exit and the read).

use std::io;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{getsockopt, sockopt::PeerPidfd};

/// Why a peer's cgroup was not read.
#[derive(Debug, thiserror::Error)]
pub enum PeerCgroupError {
    /// The kernel gave no pid (the peer is in a pid namespace the daemon cannot see).
    #[error(
        "the kernel gives no pid for the connecting process (run the daemon in the node's pid namespace)"
    )]
    NoPid,
    /// The peer exited before its cgroup was read.
    #[error("the connecting process exited before its cgroup was read")]
    Exited,
    /// Reading failed otherwise.
    #[error("reading the connecting process's cgroup: {0}")]
    Io(#[from] io::Error),
}

/// The contents of `/proc/<pid>/cgroup` of the peer of `socket`, whose credentials said `pid`
/// and `uid`.
pub fn of_peer(socket: &impl AsFd, pid: Option<i32>, uid: u32) -> Result<String, PeerCgroupError> {
    let pid = pid.ok_or(PeerCgroupError::NoPid)?;
    let pidfd = getsockopt(socket, PeerPidfd).ok();
    let file = read_proc(pid, "cgroup")?;
    match pidfd {
        Some(pidfd) if exited(&pidfd)? => Err(PeerCgroupError::Exited),
        Some(_) => Ok(file),
        None if uid_of(&read_proc(pid, "status")?) != Some(uid) => Err(PeerCgroupError::Exited),
        None => Ok(file),
    }
}

/// The cgroup file of pid 1: in the node's pid namespace, the node's init.
pub fn of_init() -> io::Result<String> {
    std::fs::read_to_string("/proc/1/cgroup")
}

fn read_proc(pid: i32, name: &str) -> Result<String, PeerCgroupError> {
    std::fs::read_to_string(format!("/proc/{pid}/{name}")).map_err(|e| match e.raw_os_error() {
        Some(code) if [Errno::ENOENT, Errno::ESRCH].contains(&Errno::from_raw(code)) => {
            PeerCgroupError::Exited
        }
        _ => PeerCgroupError::Io(e),
    })
}

/// Whether the process of `pidfd` has exited (its pidfd then polls readable).
fn exited(pidfd: &impl AsFd) -> io::Result<bool> {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO)?;
    Ok(fds[0].revents().is_some_and(|r| !r.is_empty()))
}

/// The real uid of a `/proc/<pid>/status` file.
fn uid_of(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_live_peer_is_read_and_an_exited_one_is_not() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let me = nix::unistd::getuid().as_raw();
        let cred = getsockopt(&ours, nix::sys::socket::sockopt::PeerCredentials).unwrap();
        let file = of_peer(&ours, Some(cred.pid()), me).unwrap();
        assert!(file.lines().any(|l| l.starts_with("0::")), "{file}");
        assert!(matches!(
            of_peer(&ours, None, me),
            Err(PeerCgroupError::NoPid)
        ));

        // A pid that is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id() as i32;
        child.wait().unwrap();
        assert!(matches!(
            of_peer(&ours, Some(gone), me),
            Err(PeerCgroupError::Exited)
        ));
    }

    #[test]
    fn a_peer_that_connected_then_exited_is_not_read() {
        // The peer's /proc entry is still there (a zombie, not reaped yet): only its pidfd
        // tells that it exited.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let connect = "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])";
        let mut child = std::process::Command::new("python3")
            .args(["-c", connect])
            .arg(&path)
            .spawn()
            .unwrap();
        let (stream, _) = listener.accept().unwrap();
        let cred = getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials).unwrap();
        assert_eq!(cred.pid(), child.id() as i32);
        // Wait for the exit without reaping.
        let pidfd = getsockopt(&stream, PeerPidfd).unwrap();
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(10_000u16)).unwrap();
        assert!(std::fs::metadata(format!("/proc/{}/cgroup", cred.pid())).is_ok());
        let read = of_peer(&stream, Some(cred.pid()), cred.uid());
        assert!(matches!(read, Err(PeerCgroupError::Exited)), "{read:?}");
        child.wait().unwrap();
    }

    #[test]
    fn the_status_uid_is_the_real_uid() {
        assert_eq!(
            uid_of("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"),
            Some(1000)
        );
        assert_eq!(uid_of("Name:\tx\n"), None);
    }
}
