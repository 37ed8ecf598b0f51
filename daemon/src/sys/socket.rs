//! The daemon's Unix socket file: replacing a stale one, refusing to steal a live one, its mode
//! and group, and removing it on exit.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{Group, chown};
use tokio::net::UnixListener;
use tracing::{info, warn};

/// Mode of the socket file: owner and group may connect, nobody else.
pub const SOCKET_MODE: u32 = 0o660;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another process answers on the socket.
    #[error(
        "another daemon is already serving on {0}; stop it first, or choose another path with --socket"
    )]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
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
    let gid = group
        .map(|name| match Group::from_name(name) {
            Ok(Some(group)) => Ok(group.gid),
            Ok(None) => Err(SocketError::NoSuchGroup(name.to_owned())),
            Err(e) => Err(SocketError::Io {
                what: "looking up group for",
                path: path.to_owned(),
                source: e.into(),
            }),
        })
        .transpose()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err("creating directory", dir))?;
    }
    remove_if_stale(path)?;
    let listener = UnixListener::bind(path).map_err(io_err("binding", path))?;
    // The file is created with the umask's mode; connecting needs write permission, which a
    // typical umask (022) gives to the owner only, so the window before chmod admits nobody new.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io_err("setting the mode of", path))?;
    if let Some(gid) = gid {
        chown(path, None, Some(gid)).map_err(|e| SocketError::Io {
            what: "changing the group of",
            path: path.to_owned(),
            source: e.into(),
        })?;
    }
    let inode = std::fs::symlink_metadata(path)
        .map_err(io_err("inspecting", path))?
        .ino();
    Ok((
        listener,
        BoundSocket {
            path: path.to_owned(),
            inode,
        },
    ))
}

/// Removes a socket file left behind by a daemon that is gone.
fn remove_if_stale(path: &Path) -> Result<(), SocketError> {
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
            std::fs::remove_file(path).map_err(io_err("removing stale socket", path))
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
    async fn bind_with_unknown_group_fails_before_touching_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let err = bind(&path, Some("no-such-group-hyperlightd")).unwrap_err();
        assert!(matches!(err, SocketError::NoSuchGroup(_)), "{err}");
        assert!(!path.exists());
    }
}
