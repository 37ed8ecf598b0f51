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

use hyperlightd_e2b::{Account, Gateway, OnUnknownKey, UnknownKey};
use tokio::net::TcpListener;
use tracing::info;

pub use self::service::InDaemon;
use crate::executor::Executor;
use crate::job::{Caller, PodOf};
use crate::service::Service;
use crate::telemetry::Tracer;

/// The command line's settings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct E2bOptions {
    /// Serve E2B's API (its SDKs unmodified: E2B_API_URL and E2B_SANDBOX_URL both
    /// http://ADDR) on this TCP address, each request its key's caller from --e2b-keys. Use a
    /// loopback address unless every host that can reach it should. Off by default; `hlctl
    /// e2b-gateway` serves the same API from a process of the caller's.
    #[arg(long, value_name = "ADDR", requires = "e2b_keys")]
    pub e2b_listen: Option<SocketAddr>,

    /// Serve E2B's API with these keys: a file of lines `NAME KEY`, each key acting for the
    /// caller NAME (letters, digits, `.`, `_`, `-`, `@`; keys of 16 characters or more). It
    /// must not be readable by group or others; blank lines and lines starting with `#` are
    /// skipped. Read at start. Served on --e2b-listen's address, or without it on the TCP
    /// socket systemd passes (hyperlightd-e2b.socket), so that the daemon needs no network of
    /// its own.
    #[arg(long, value_name = "FILE")]
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
    #[error(
        "--e2b-keys without --e2b-listen serves the TCP socket systemd passes \
         (hyperlightd-e2b.socket), and none was passed: enable that socket, or give \
         --e2b-listen ADDR"
    )]
    NoSocket,
    #[error(
        "systemd passed a TCP socket (hyperlightd-e2b.socket) and --e2b-listen names an \
         address too: drop one"
    )]
    TwoSockets,
    #[error(
        "systemd passed a TCP socket (hyperlightd-e2b.socket), but no --e2b-keys names who may \
         use it: give the keys, or disable the socket"
    )]
    NoKeys,
    #[error("E2B's listener on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("E2B's listener: {error}")]
    Socket { error: std::io::Error },
}

impl E2bOptions {
    /// Reads the keys and binds the address (or takes `passed`, the socket systemd passed),
    /// when asked to serve: on the main thread before its system call filter narrows to the
    /// runtime's, which opens no network socket.
    pub fn bind(
        &self,
        passed: Option<std::net::TcpListener>,
    ) -> Result<Option<Listener>, E2bError> {
        let std = match (self.e2b_listen, &self.e2b_keys, passed) {
            (None, None, None) => return Ok(None),
            (None, None, Some(_)) => return Err(E2bError::NoKeys),
            (None, Some(_), None) => return Err(E2bError::NoSocket),
            (Some(_), _, Some(_)) => return Err(E2bError::TwoSockets),
            (None, Some(_), Some(passed)) => passed,
            (Some(addr), _, None) => std::net::TcpListener::bind(addr)
                .map_err(|error| E2bError::Listen { addr, error })?,
        };
        let keys = self.e2b_keys.as_deref().ok_or(E2bError::NoKeys)?;
        let keys = hyperlightd_e2b::read_keys(keys).map_err(E2bError::Keys)?;
        let addr = std
            .local_addr()
            .map_err(|error| E2bError::Socket { error })?;
        let listen = |error| E2bError::Listen { addr, error };
        std.set_nonblocking(true).map_err(listen)?;
        let listener = TcpListener::from_std(std).map_err(listen)?;
        Ok(Some(Listener { listener, keys }))
    }
}

impl Listener {
    /// Serves E2B's API over `service` until the task is dropped, each request a span of
    /// `tracer`'s.
    pub async fn serve<E: Executor>(self, service: Arc<Service<E>>, tracer: Tracer) {
        let listener = Caller {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            pid: None,
            pod: PodOf::Unread,
            on_behalf_of: None,
        };
        let accounts = self
            .keys
            .into_iter()
            .map(|(name, key)| {
                let caller = Caller {
                    on_behalf_of: Some(name.into()),
                    ..listener.clone()
                };
                let daemon = InDaemon::new(service.clone(), caller, tracer.clone());
                Account::new(key, daemon)
            })
            .collect::<Vec<_>>();
        if let Ok(addr) = self.listener.local_addr() {
            info!(%addr, keys = accounts.len(), "serving E2B's API");
        }
        // Refused without reaching the service's calls: counted and audited as its refusals.
        let hook: OnUnknownKey = Box::new(move |unknown: &UnknownKey<'_>| {
            let peer = unknown
                .peer
                .map_or_else(|| "unknown".to_owned(), |p| p.to_string());
            let method = unknown.method.as_str();
            service.refuse_unknown_key(&listener, method, unknown.path, peer);
        });
        let gateway = Gateway::new(accounts).on_unknown_key(hook);
        hyperlightd_e2b::serve(self.listener, Arc::new(gateway)).await;
    }
}

#[cfg(test)]
mod tests;
