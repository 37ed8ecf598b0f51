//! The daemon's Unix socket file: where it may live, its mode and group from the first instant,
//! replacing a stale one, refusing to steal a live one, and removing it on exit.
//!
//! The socket is bound inside a private directory (mode 0700) next to its final path, given its
//! mode and group there, and then renamed into place: it is never reachable with a mode wider
//! than its final one, whatever the umask, and no step follows a symlink planted at its path
//! (`rename` replaces a name; the checks use `lstat`). The directory that holds it must not be
//! writable by others unless it is sticky, since whoever can write it can swap the socket.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid};
use tokio::net::UnixListener;
use tracing::{info, warn};

/// Mode of the socket file: owner and group may connect, nobody else.
pub const SOCKET_MODE: u32 = 0o660;

/// Mode of a socket directory the daemon creates.
const DIRECTORY_MODE: u32 = 0o755;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another process answers on the socket.
    #[error(
        "another daemon is already serving on {0}; stop it first, or choose another path with --socket"
    )]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket (a symlink, a file?); refusing to replace it")]
    NotASocket(PathBuf),
    /// The socket's directory is not safe to hold it.
    #[error(
        "{dir} {why}: others could replace the socket. Use a directory owned by root (or this \
         user) that only its owner can write to, such as /run/hyperlightd"
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The group named by --socket-group does not exist.
    #[error("no such group {0:?} (--socket-group)")]
    NoSuchGroup(String),
    /// A system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// The sockets systemd passed (socket activation: `LISTEN_FDS`), taken once, before any
/// thread starts, as reading them clears the variables that name them. The daemon's own socket
/// is never passed; a TCP listener is E2B's (`hyperlightd-e2b.socket`).
#[derive(Debug, Default)]
pub struct Passed {
    /// The TCP listener passed, if one was.
    pub tcp: Option<std::net::TcpListener>,
}

impl Passed {
    /// What systemd passed this process: at most one socket, a listening TCP one.
    pub fn from_env() -> Result<Passed, String> {
        let mut passed = listenfd::ListenFd::from_env();
        match passed.len() {
            0 => Ok(Passed::default()),
            1 => {
                let tcp = passed.take_tcp_listener(0).map_err(|e| {
                    format!("the socket systemd passed is not a listening TCP socket: {e}")
                })?;
                Ok(Passed { tcp })
            }
            n => Err(format!(
                "systemd passed {n} sockets; the daemon takes one, the TCP socket of \
                 hyperlightd-e2b.socket"
            )),
        }
    }
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// A bound socket. Removes its file when dropped, if the file is still the one it created.
#[derive(Debug)]
pub struct BoundSocket {
    path: PathBuf,
    inode: u64,
}

impl BoundSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        // Another daemon may have replaced a socket it judged stale; never remove its file.
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.ino() == self.inode => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    warn!(path = %self.path.display(), "removing the socket file: {e}");
                }
            }
            _ => {}
        }
    }
}

/// Binds a listener at `path` (mode 0660, group `group` if given), creating its directory if
/// needed. A socket file nobody answers on is replaced; one a live process answers on is not.
pub fn bind(path: &Path, group: Option<&str>) -> Result<(UnixListener, BoundSocket), SocketError> {
    let gid = group.map(|name| group_id(name, path)).transpose()?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIRECTORY_MODE)
        .create(dir)
        .map_err(io_err("creating directory", dir))?;
    check_directory(dir)?;
    check_existing(path)?;
    let staging = Staging::create(dir)?;
    let listener = staging.bind(gid)?;
    staging.publish(path)?;
    let inode = std::fs::symlink_metadata(path)
        .map_err(io_err("inspecting", path))?
        .ino();
    listener
        .set_nonblocking(true)
        .map_err(io_err("configuring", path))?;
    let listener = UnixListener::from_std(listener).map_err(io_err("listening on", path))?;
    Ok((
        listener,
        BoundSocket {
            path: path.to_owned(),
            inode,
        },
    ))
}

fn group_id(name: &str, path: &Path) -> Result<Gid, SocketError> {
    match Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid),
        Ok(None) => Err(SocketError::NoSuchGroup(name.to_owned())),
        Err(e) => Err(SocketError::Io {
            what: "looking up group for",
            path: path.to_owned(),
            source: e.into(),
        }),
    }
}

/// The socket's directory must belong to root or this user, and only its owner may write to
/// it, unless it is sticky (like /tmp: others cannot rename or remove what is not theirs).
fn check_directory(dir: &Path) -> Result<(), SocketError> {
    let meta = std::fs::metadata(dir).map_err(io_err("inspecting", dir))?;
    let unsafe_dir = |why| {
        Err(SocketError::UnsafeDirectory {
            dir: dir.to_owned(),
            why,
        })
    };
    if !meta.is_dir() {
        return unsafe_dir("is not a directory");
    }
    let owner = meta.uid();
    if owner != 0 && owner != Uid::effective().as_raw() {
        return unsafe_dir("belongs to another user");
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return unsafe_dir("can be written by its group or by anyone, and is not sticky");
    }
    Ok(())
}

/// A private directory beside the socket's final path, where the socket is made ready.
struct Staging {
    dir: PathBuf,
}

impl Staging {
    /// A new directory only this user can enter. `mkdir` does not follow a symlink planted at
    /// its name, and a name already taken is tried again with another.
    fn create(parent: &Path) -> Result<Staging, SocketError> {
        let mut last = None;
        for _ in 0..8 {
            let mut salt = [0u8; 8];
            getrandom::fill(&mut salt).map_err(|e| SocketError::Io {
                what: "choosing a temporary name in",
                path: parent.to_owned(),
                source: io::Error::other(e.to_string()),
            })?;
            let dir = parent.join(format!(".hyperlightd-{:016x}", u64::from_le_bytes(salt)));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Staging { dir }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(io_err("creating a private directory in", parent)(e)),
            }
        }
        Err(io_err("creating a private directory in", parent)(
            last.unwrap_or_else(|| io::Error::other("no free name")),
        ))
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("socket")
    }

    /// Binds the socket here, with its final mode and group.
    fn bind(&self, gid: Option<Gid>) -> Result<std::os::unix::net::UnixListener, SocketError> {
        let socket = self.socket();
        let listener =
            std::os::unix::net::UnixListener::bind(&socket).map_err(io_err("binding", &socket))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(SOCKET_MODE))
            .map_err(io_err("setting the mode of", &socket))?;
        // A socket made in the group it needs is left as it is: no chown(2), which a hardened
        // service may not be allowed (systemd's `SystemCallFilter=~@privileged`).
        let current = std::fs::symlink_metadata(&socket)
            .map_err(io_err("reading", &socket))?
            .gid();
        if let Some(gid) = gid.filter(|gid| gid.as_raw() != current) {
            std::os::unix::fs::lchown(&socket, None, Some(gid.as_raw()))
                .map_err(io_err("changing the group of", &socket))?;
        }
        Ok(listener)
    }

    /// Moves the socket to `path`, atomically replacing a stale socket there.
    fn publish(&self, path: &Path) -> Result<(), SocketError> {
        std::fs::rename(self.socket(), path).map_err(io_err("moving the socket to", path))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            warn!(dir = %self.dir.display(), "removing the private directory: {e}");
        }
    }
}

/// Checks what is at the socket's path: nothing, or a socket nobody answers on (left by a daemon
/// that is gone, and replaced when the new one moves in), is fine.
fn check_existing(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspecting", path)(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.to_owned()));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(SocketError::InUse(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            info!(path = %path.display(), "replacing a stale socket file");
            Ok(())
        }
        Err(e) => Err(io_err("probing existing socket", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bind_creates_socket_with_mode_0660_and_removes_it_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/d.sock");
        let (listener, bound) = bind(&path, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);
        drop(listener);
        drop(bound);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn bind_replaces_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        // A socket file with no listener behind it: what a killed daemon leaves.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let (_listener, _bound) = bind(&path, None).unwrap();
    }

    #[tokio::test]
    async fn bind_refuses_socket_a_live_process_answers_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let _live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let err = bind(&path, None).unwrap_err();
        assert!(matches!(err, SocketError::InUse(_)), "{err}");
        assert!(path.exists(), "the live socket must be left alone");
    }

    #[tokio::test]
    async fn bind_refuses_to_replace_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        std::fs::write(&path, b"data").unwrap();
        assert!(matches!(bind(&path, None), Err(SocketError::NotASocket(_))));
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }

    #[tokio::test]
    async fn bind_refuses_a_symlink_at_the_socket_path_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"data").unwrap();
        let path = dir.path().join("d.sock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(bind(&path, None), Err(SocketError::NotASocket(_))));
        assert_eq!(std::fs::read(&target).unwrap(), b"data");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_ne!(mode, SOCKET_MODE, "the symlink's target was not chmod-ed");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    #[tokio::test]
    async fn bind_refuses_a_directory_others_can_write_to_unless_it_is_sticky() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o775] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let err = bind(&dir.path().join("d.sock"), None).unwrap_err();
            assert!(
                matches!(err, SocketError::UnsafeDirectory { .. }),
                "{mode:o}: {err}"
            );
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let (_listener, _bound) = bind(&dir.path().join("d.sock"), None).unwrap();
    }

    #[tokio::test]
    async fn the_socket_is_made_ready_in_a_private_directory_that_is_gone_afterwards() {
        let dir = tempfile::tempdir().unwrap();
        let staging = Staging::create(dir.path()).unwrap();
        let mode = std::fs::metadata(&staging.dir)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(
            mode, 0o700,
            "nobody else can reach the socket before it is moved"
        );
        let _listener = staging.bind(None).unwrap();
        let mode = std::fs::metadata(staging.socket())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, SOCKET_MODE, "its final mode before it is published");
        let path = dir.path().join("d.sock");
        staging.publish(&path).unwrap();
        drop(staging);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("d.sock")]);
    }

    #[tokio::test]
    async fn a_socket_directory_the_daemon_creates_is_not_writable_by_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/hyperlightd/d.sock");
        let (_listener, _bound) = bind(&path, None).unwrap();
        let mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o022, 0, "{mode:o}");
    }

    #[tokio::test]
    async fn bind_with_unknown_group_fails_before_touching_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let err = bind(&path, Some("no-such-group-hyperlightd")).unwrap_err();
        assert!(matches!(err, SocketError::NoSuchGroup(_)), "{err}");
        assert!(!path.exists());
    }
}
