//! E2B's API served by the daemon itself (`--e2b-listen`), beside the Unix socket: the
//! `hyperlightd-e2b` crate's translation over the service layer in-process ([`InDaemon`]), so
//! that an SDK's request is one exchange, not one to a gateway process and another from it to
//! the socket.
//!
//! # Design
//!
//! **Who calls.** A TCP port has no peer credentials: each request is its key's caller, from
//! the operator's keys file (`--e2b-keys`, lines `NAME KEY`, the file `hlctl e2b-gateway
//! --api-keys` reads). The daemon counts that name as a caller of its own, as it counts a
//! delegate's (`Principal::Delegated`, the delegate being the daemon's own uid): quotas,
//! sessions, the audit log and tool answers are the name's, and a sandbox of one key is
//! another's 404. A key is all it takes, so the listener is loopback unless the operator says
//! otherwise, and the keys file must be the daemon's user's alone.
//!
//! **Where else.** `hlctl e2b-gateway` serves the same API from a process of the caller's, over
//! the socket: in Kubernetes a pod reaches the node's socket, not the node's loopback, and its
//! gateway keeps the pod's identity.

mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hyperlightd_e2b::{Account, Gateway};
use tokio::net::TcpListener;
use tracing::info;

pub use self::service::InDaemon;
use crate::executor::Executor;
use crate::job::{Caller, PodOf};
use crate::service::Service;

/// The command line's settings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct E2bOptions {
    /// Serve E2B's API (its SDKs unmodified: E2B_API_URL and E2B_SANDBOX_URL both
    /// http://ADDR) on this TCP address, each request its key's caller from --e2b-keys. Use a
    /// loopback address unless every host that can reach it should. Off by default; `hlctl
    /// e2b-gateway` serves the same API from a process of the caller's.
    #[arg(long, value_name = "ADDR", requires = "e2b_keys")]
    pub e2b_listen: Option<SocketAddr>,

    /// The API keys of --e2b-listen: a file of lines `NAME KEY`, each key acting for the caller
    /// NAME (letters, digits, `.`, `_`, `-`, `@`; keys of 16 characters or more). It must not be
    /// readable by group or others; blank lines and lines starting with `#` are skipped. Read
    /// at start.
    #[arg(long, value_name = "FILE", requires = "e2b_listen")]
    pub e2b_keys: Option<PathBuf>,
}

/// The listener, bound and with its keys read, before the daemon serves.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    keys: Vec<(String, String)>,
}

/// Why E2B's API cannot be served as configured.
#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    #[error("--e2b-keys: {0}")]
    Keys(String),
    #[error("--e2b-listen {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

impl E2bOptions {
    /// Reads the keys and binds the address, when asked to serve: on the main thread before
    /// its system call filter narrows to the runtime's, which opens no network socket.
    pub fn bind(&self) -> Result<Option<Listener>, E2bError> {
        let (Some(addr), Some(keys)) = (self.e2b_listen, &self.e2b_keys) else {
            return Ok(None);
        };
        let keys = hyperlightd_e2b::read_keys(keys).map_err(E2bError::Keys)?;
        let listen = |error| E2bError::Listen { addr, error };
        let std = std::net::TcpListener::bind(addr).map_err(listen)?;
        std.set_nonblocking(true).map_err(listen)?;
        let listener = TcpListener::from_std(std).map_err(listen)?;
        Ok(Some(Listener { listener, keys }))
    }
}

impl Listener {
    /// Serves E2B's API over `service` until the task is dropped.
    pub async fn serve<E: Executor>(self, service: Arc<Service<E>>) {
        let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
        let accounts = self
            .keys
            .into_iter()
            .map(|(name, key)| {
                let caller = Caller {
                    uid: uid.as_raw(),
                    gid: gid.as_raw(),
                    pid: None,
                    pod: PodOf::Unread,
                    on_behalf_of: Some(name.into()),
                };
                Account::new(key, InDaemon::new(service.clone(), caller))
            })
            .collect::<Vec<_>>();
        if let Ok(addr) = self.listener.local_addr() {
            info!(%addr, keys = accounts.len(), "serving E2B's API");
        }
        hyperlightd_e2b::serve(self.listener, Arc::new(Gateway::new(accounts))).await;
    }
}

#[cfg(test)]
mod tests;
